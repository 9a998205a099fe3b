"""Ctrl-C through the real ``probe`` command (tests/test_interrupts.py, tests/test_interventions_interrupts.py).

:func:`probe` runs the command in a subprocess and sends it a real SIGINT once a marker shows
that work is under way: a line on stderr that the command prints anyway (``probe
intervene``'s stage lines), or, for training, a ``STEP n`` line that a wrapper adds to the
library's own step callback (a progress bar on a pipe prints nothing until it ends).
:func:`assert_interrupted` checks the exit status, the time from the signal to the exit, and
that stderr has one ``interrupted:`` line and no traceback; it prints the latency (``pytest -s``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 15.0  # from SIGINT to exit, on a loaded 2-core machine (measured: about 2 s)

# Runs ``probe`` with a line on stderr when an optimizer step begins and ends (the markers;
# STEP_PAUSE seconds of sleep after the first, to catch a step in progress) and, for a
# ``sleep`` command, one that waits in plain Python: the generic path for an uncaught Ctrl-C.
WRAPPER = """
import os, sys, time
import training.callbacks as callbacks
from probe_cli.main import app, main

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


def probe(args: list[str], home: Path, *markers: str, pause: float = 0.0, sig: int = signal.SIGINT) -> Outcome:
    """Run ``probe ARGS``; send one ``sig`` (SIGINT: Ctrl-C) when each of ``markers`` starts a stderr line, in
    order."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PROBE_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "STEP_PAUSE": str(pause),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    waiting, sent = list(markers), None
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        lines.append(line)
        if waiting and line.startswith(waiting[0]):
            waiting.pop(0)
            proc.send_signal(sig)
            sent = time.monotonic()
    code = proc.wait(timeout=300)
    latency = None if sent is None else time.monotonic() - sent
    assert not waiting, f"never saw {waiting[0]!r}: {''.join(lines)}"
    stderr = "".join(ln for ln in lines if not ln.startswith(("STEP ", "BEGIN ")))
    return Outcome(code, proc.stdout.read(), stderr, latency)


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
