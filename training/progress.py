"""Progress of the training stages (one per stage name), for the CLI and the default pair's build.

Library functions take a plain ``report(stage, done, total)`` callable so they stay usable
without a terminal; :func:`rich_reporter` is :func:`core.progress.stages` on the console's
stream: a rich bar per stage on a terminal, and in a log (``make demo > log 2>&1``) a line
when each stage starts, with its estimate, and one at least every minute with the time left.

Example:
    >>> import io
    >>> console = Console(file=io.StringIO(), width=70, force_terminal=False)   # a log, not a terminal
    >>> with rich_reporter(console) as report:
    ...     report("sft", 0, 200); report("dpo", 0, 100); report("dpo", 3, 100)
    >>> print(console.file.getvalue())
    sft: starting, 200 steps; estimate after the first step
    sft: ended at 0/200 steps after ...
    dpo: starting, 100 steps; estimate after the first step
    dpo: 3/100 steps after ...; estimate ... in all
    dpo: ended at 3/100 steps after ...
    >>> with rich_reporter() as report:          # doctest: +SKIP
    ...     report("sft", 10, 200)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

from core.progress import stages


@contextmanager
def rich_reporter(console: Console | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """Yields ``report(stage, done, total)``; a new stage name ends the one before and starts its own bar or lines."""
    stream = console.file if console is not None else Console(stderr=True).file
    with stages(stream) as report:
        yield report
