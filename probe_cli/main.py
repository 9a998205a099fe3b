"""The ``probe`` command: a thin layer over the library.

Each module in :mod:`probe_cli.commands` defines ``register(app)`` and adds its
commands; each command parses arguments, calls one library function and prints.
Library code raises :class:`~core.errors.ProbeError` for user mistakes;
here that becomes one line on stderr and exit status 2, with no traceback.
Heavy libraries (torch, transformers) are imported inside commands, so
``probe --help`` stays fast.

Ctrl-C ends in one line too, ``interrupted: ...``, and exit status 130; SIGTERM is handled as Ctrl-C is and
exits 143. Library code that
knows what is on disk catches :class:`KeyboardInterrupt` and raises
:class:`~core.errors.Interrupted` saying what was kept and how to resume. A
``KeyboardInterrupt`` nobody caught gets a generic line: Typer would otherwise turn it
into a silent ``Exit(130)`` before it reaches :func:`main`, so the command group converts
it while the command still runs (:class:`_Group`).
"""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from core.errors import Interrupted, ProbeError
from probe_cli import commands

UNCAUGHT_INTERRUPT = "stopped by Ctrl-C before the command finished; rerun it"
TERMINATED_EXIT = 143  # 128 + SIGTERM, as 130 is 128 + SIGINT
_terminated = threading.Event()


class _Group(TyperGroup):
    """Turns a KeyboardInterrupt inside any command into :class:`Interrupted` before Typer swallows it."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted(UNCAUGHT_INTERRUPT) from None


app = typer.Typer(
    name="probe",
    cls=_Group,
    help="Neuron probing of an SFT/DPO model pair on RoleMRC capabilities.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: at 80 columns a 46-character description column and no type for a flag
)


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(app)


_register_commands()


def _stop(prefix: str, message: str, code: int, error: BaseException | None = None) -> NoReturn:
    """Print the one line and exit; a further Ctrl-C while the interpreter shuts down changes nothing,
    so it is ignored. A stop that SIGTERM began exits 143."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminated = prefix == "interrupted" and _terminated.is_set()
    if terminated:  # every stage says "Ctrl-C" for what stopped it; SIGTERM is answered the same way
        message = message.replace("Ctrl-C", "SIGTERM")
    status = TERMINATED_EXIT if terminated else code
    if _said_by_another_rank(error):
        from probes.distributed import leave_quietly

        leave_quietly(status)
    print(f"{prefix}: {' '.join(message.split())}", file=sys.stderr, flush=True)
    sys.exit(status)


@contextmanager
def _sigterm_as_ctrl_c(in_process: bool) -> Iterator[None]:
    """SIGTERM (``kill``, ``timeout``, a job scheduler) is handled as Ctrl-C is, and ends in the same ``interrupted:``
    line, with exit status 143, whatever SIGINT's disposition was when the command started: ignored (a background
    job of a script, ``nohup``), the default, or a caller's handler (a test, a notebook).

    A Ctrl-C handler that the command itself put in place answers it (a training run finishes its step and keeps a
    checkpoint; a group of renames is completed first); otherwise a KeyboardInterrupt is raised, so partial builds
    are removed. The launcher's own SIGINT disposition is never consulted: a process started with SIGINT ignored
    must still stop. The SIGTERM handler is put back at the end, and, for a caller in the same process
    (``in_process``), the SIGINT one too, which :func:`_stop` ignores; else every process it starts afterwards
    would ignore Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    launcher_ctrl_c = signal.getsignal(signal.SIGINT)

    def on_sigterm(signum: int, frame: Any) -> None:
        _terminated.set()
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not launcher_ctrl_c:
            handler(signum, frame)  # the command's own answer to Ctrl-C, told that it is SIGTERM
            return
        raise KeyboardInterrupt

    _terminated.clear()
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if in_process and launcher_ctrl_c is not None:  # None: a handler set outside Python, left as it is
            signal.signal(signal.SIGINT, launcher_ctrl_c)


def _said_by_another_rank(error: BaseException | None) -> bool:
    """Under torchrun each process checks the same arguments: local rank 0 alone prints, unless probes.distributed
    already picked the rank that reports ``error`` (its ``reporter``)."""
    helper = os.environ.get("WORLD_SIZE", "1") not in ("", "1") and os.environ.get("LOCAL_RANK", "0") not in ("", "0")
    return helper and not hasattr(error, "reporter")


def _leave_promptly(code: str | int | None) -> None:
    """Once a command has ended, what is left is the interpreter's teardown: the cyclic collector walking every
    torch and transformers object (seconds), then torch's exit hooks. Freezing the collector's objects skips that
    walk, and a Ctrl-C or SIGTERM that arrives meanwhile ends the process at once with the command's own status:
    the work is done, and a traceback from inside an exit hook or a different exit status would say otherwise."""
    status = code if isinstance(code, int) else (0 if code is None else 1)

    def exit_now(*_: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        os._exit(status)

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, exit_now)
    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script. Called with ``argv`` (a test, a notebook), it leaves the caller's
    interpreter as it found it; called as a program, it also makes the process's teardown short
    (:func:`_leave_promptly`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    in_process = argv is not None
    try:
        with _sigterm_as_ctrl_c(in_process):
            try:
                app(args=argv, standalone_mode=True)
            except Interrupted as exc:
                _stop("interrupted", str(exc), exc.exit_code, exc)
            except ProbeError as exc:
                _stop("error", str(exc), 2, exc)
            except KeyboardInterrupt:
                _stop("interrupted", UNCAUGHT_INTERRUPT, Interrupted.exit_code)
    except SystemExit as ended:
        if not in_process:
            _leave_promptly(ended.code)
        raise


if __name__ == "__main__":
    main()
