"""The one factory for the CLI's rich consoles: full width when the output is not a terminal.

Rich sizes a console that does not write to a terminal at 80 columns and then cuts table
cells to fit (``befo…``, ``McN…``, ``plac…``). The result tables of ``probe intervene``,
``probe models eval`` and the rest are exactly what a script pipes to a file or a CI log
keeps, so there the console is made wide enough that nothing is cut: tables take the
width their content needs and long lines stay on one line. On a terminal rich keeps
sizing to the window. Every command prints through :func:`console`.

Example:
    >>> console().width   # doctest's stdout is no terminal: wide, so no table cell is cut
    4096
    >>> console().print("[bold]done[/bold]")      # doctest: +SKIP
"""

from __future__ import annotations

import sys

from rich.console import Console

WIDE = 4096


def is_terminal(stderr: bool = False) -> bool:
    stream = sys.stderr if stderr else sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr), terminal-sized on a terminal and :data:`WIDE` columns otherwise."""
    if is_terminal(stderr):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=WIDE)
