"""The ``probe`` command: a thin layer over the library.

Each module in :mod:`probe_cli.commands` defines ``register(app)`` and adds its
commands; each command parses arguments, calls one library function and prints.
Library code raises :class:`~core.errors.ProbeError` for user mistakes;
here that becomes one line on stderr and exit status 2, with no traceback.
Heavy libraries (torch, transformers) are imported inside commands, so
``probe --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer

from core.errors import ProbeError
from probe_cli import commands

app = typer.Typer(
    name="probe",
    help="Neuron probing of an SFT/DPO model pair on RoleMRC capabilities.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        app(args=argv, standalone_mode=True)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
