"""Ctrl-C through the real ``probe`` command (tests/test_interrupts.py, tests/test_interventions_interrupts.py).

:func:`probe` runs the command in a subprocess and sends it a real SIGINT once a marker shows
that work is under way: a line on stderr that the command prints anyway (``probe
intervene``'s stage lines), or, for training, a ``STEP n`` line that a wrapper adds to the
library's own step callback (a progress bar on a pipe prints nothing until it ends).
:func:`assert_interrupted` checks the exit status, the time from the signal to the exit, and
that stderr has one ``interrupted:`` line and no traceback; it prints the latency (``pytest -s``).

Every child starts with a known SIGINT disposition, whatever the suite inherited: ``make test`` started as
``nohup make test &`` from a script runs with SIGINT ignored, and an ignored signal stays ignored across ``exec``, so a
Ctrl-C test's child would never see its Ctrl-C. :func:`answer_ctrl_c_here` (tests/conftest.py calls it in every
pytest process) makes the suite's own processes answer Ctrl-C as a terminal's foreground process does, so every child
they start begins with SIGINT at its default; :func:`spawn` resets it in the child as well, and can start the command
the way a launcher would (:data:`LAUNCHES`): as a terminal does, in the background of a script (``nohup CMD &``, SIGINT
ignored), with SIGINT set to its default inside Python, or under a caller's own SIGINT handler.

:func:`probe_here` runs the command in this process instead, for the runs around a cut that no signal reaches (the
uninterrupted reference, the resume): the same result without the 5-8 s of imports a new process pays.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 15.0  # from SIGINT to exit, on a loaded 2-core machine (measured: about 2 s)

# Runs ``probe`` with a line on stderr when an optimizer step begins and ends (the markers;
# STEP_PAUSE seconds of sleep after the first, to catch a step in progress) and, for a
# ``sleep`` command, one that waits in plain Python: the generic path for an uncaught Ctrl-C (without the
# training library, so that it starts in a second).
WRAPPER = """
import os, signal, sys, time
from probe_cli.main import app, main

if os.environ.get("SIGINT_AT_START") == "default":  # SIGINT at its default inside Python (no KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
elif os.environ.get("SIGINT_AT_START") == "handler":  # a caller's own handler, which only takes note
    signal.signal(signal.SIGINT, lambda signum, frame: print("CALLER'S HANDLER", file=sys.stderr, flush=True))

if sys.argv[1:2] != ["sleep"]:  # the training library, imported only where a command trains
    import training.callbacks as callbacks

    original = callbacks.StepProgress.on_step_end
    def on_step_end(self, args, state, control, **kwargs):
        print(f"STEP {state.global_step}", file=sys.stderr, flush=True)
        return original(self, args, state, control, **kwargs)
    def on_step_begin(self, args, state, control, **kwargs):
        print(f"BEGIN {state.global_step + 1}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("STEP_PAUSE", "0")))
    callbacks.StepProgress.on_step_end = on_step_end
    callbacks.StepProgress.on_step_begin = on_step_begin

@app.command("sleep")
def sleep() -> None:
    print("SLEEPING", file=sys.stderr, flush=True)
    time.sleep(60)

main(sys.argv[1:])
"""


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    latency: float | None  # seconds from the (last) signal to the exit


# How a launcher starts the command, as SIGINT's disposition in it: "terminal" (a foreground command: Python's
# KeyboardInterrupt), "nohup" (``nohup CMD &`` from a non-interactive shell: SIGINT ignored, as bash leaves it for
# a background job), "default" (SIGINT set to its default inside Python) and "handler" (a caller's own handler that
# only takes note). The last two need the WRAPPER, which reads SIGINT_AT_START.
LAUNCHES = ("terminal", "nohup", "default", "handler")


def answer_ctrl_c_here() -> None:
    """Make this process answer Ctrl-C with a KeyboardInterrupt if it started with SIGINT ignored; a handler, unlike
    an ignored signal, is reset to the default in every child at ``exec``."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(command: Sequence[str], launch: str = "terminal", **popen: Any) -> tuple[subprocess.Popen[str], int]:
    """Start ``command`` as ``launch`` says (:data:`LAUNCHES`), with stderr on a pipe; returns the process and the
    pid of the command itself, the one to signal (under ``nohup`` a shell stands between, waiting for it and
    exiting with its status: the first stderr line names the command's pid)."""
    assert launch in LAUNCHES, launch
    env = {**popen.pop("env", os.environ), "SIGINT_AT_START": launch}
    if launch == "nohup":
        command = ["bash", "-c", 'nohup "$@" & echo "PID $!" >&2; wait $!', "bash", *command]
    proc = subprocess.Popen(
        command,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_default,
        **popen,
    )
    if launch != "nohup":
        return proc, proc.pid
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.startswith("PID "), first
    return proc, int(first.split()[1])


def probe(
    args: list[str],
    home: Path,
    *markers: str,
    pause: float = 0.0,
    sig: int = signal.SIGINT,
    launch: str = "terminal",
) -> Outcome:
    """Run ``probe ARGS`` started as ``launch`` says (:data:`LAUNCHES`); send one ``sig`` (SIGINT: Ctrl-C) when
    each of ``markers`` starts a stderr line, in order."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PROBE_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "STEP_PAUSE": str(pause),
    }
    proc, pid = spawn([sys.executable, "-c", WRAPPER, *args], launch, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    lines: list[str] = []
    waiting, sent = list(markers), None
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        lines.append(line)
        if waiting and line.startswith(waiting[0]):
            waiting.pop(0)
            os.kill(pid, sig)
            sent = time.monotonic()
    code = proc.wait(timeout=300)
    latency = None if sent is None else time.monotonic() - sent
    assert not waiting, f"never saw {waiting[0]!r}: {''.join(lines)}"
    stderr = "".join(ln for ln in lines if not ln.startswith(("STEP ", "BEGIN ")))
    return Outcome(code, proc.stdout.read(), stderr, latency)


def probe_here(args: list[str], home: Path | None = None, env: Mapping[str, str | None] | None = None) -> Outcome:
    """Run ``probe ARGS`` in this process, as a new process would (``PROBE_HOME`` at ``home``, the variables in
    ``env`` set, None: unset, every one put back afterwards; no warning said yet), with its stdout and stderr
    captured; no signal, so no latency. Run it under one torch thread (the ``one_torch_thread`` fixture) where it
    must match a run of :func:`probe` number for number."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    from core import models
    from probe_cli.main import main

    wanted = {**({"PROBE_HOME": str(home)} if home is not None else {}), **(env or {})}
    before = {name: os.environ.get(name) for name in wanted}
    out, err = StringIO(), StringIO()
    _set_environ(wanted)
    models._warned.clear()  # a new process has said no warning yet, and says each once
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main(args)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    finally:
        _set_environ(before)
    return Outcome(code, out.getvalue(), err.getvalue(), None)


def _set_environ(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def assert_interrupted(outcome: Outcome, *needles: str, code: int = 130) -> str:
    """Exit ``code`` (130 after SIGINT, 143 after SIGTERM) within the bound, exactly one ``interrupted:`` line, no
    traceback; returns that line."""
    assert outcome.code == code, (outcome.code, outcome.stderr)
    assert outcome.latency is not None and outcome.latency < BOUND_S, outcome.latency
    assert "Traceback" not in outcome.stderr, outcome.stderr
    found = [ln for ln in outcome.stderr.splitlines() if ln.startswith("interrupted: ")]
    assert len(found) == 1, outcome.stderr
    for needle in needles:
        assert needle in found[0], found[0]
    print(f"\nsignal -> exit {code} in {outcome.latency:.2f} s: {found[0]}")
    return found[0]
