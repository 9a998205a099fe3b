"""Several ``probe`` commands, each in a process of its own, that share one interpreter's imports: a fork per command.

A fresh ``probe`` process spends most of its CPU importing torch and transformers (8-11 s of a 13 s
``probe analyze`` on a tiny run). Tests that run several commands in processes of their own (under
a full disk or a file-size limit, where what matters is how the process ends: one ``error:``
line, exit status 2, no h5py noise while the interpreter shuts down) start one interpreter,
import what the commands import (:data:`PRELOAD`, or :data:`RECORDING` for ``probe run`` alone),
and fork once per command, one at a time. Each child runs ``probe ARGV`` the way ``python -m
probe_cli`` does (``sys.argv``, ``main()``), its stdout and stderr through pipes of its own (kept
in files by the parent), under a file-size limit if asked (``RLIMIT_FSIZE``, ``SIGXFSZ``
ignored), interrupted if asked (a real signal, once the files that show its work under way are
there: the parent times its exit from the signal), and leaves through the interpreter's normal
shutdown (atexit handlers, finalizers): what a fresh process would print or return there, the
child prints and returns.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# torch and the transformers modules a model load imports lazily (the bulk of a command's start), and `probe run`'s
RECORDING = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.core_model_loading",
    "h5py",
    "pydantic",
    "typer",
    "probe_cli.main",
    "probes.recording",
)
# and the analysis stages (maps, the attribution pass, figures); a command that needs more imports the rest itself
PRELOAD = (*RECORDING, "scipy.stats", "probes.attribution", "analysis.run", "analysis.plots")

DRIVER = r"""
import glob, importlib, json, os, resource, selectors, signal, sys, time

spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
for name in spec["preload"]:
    importlib.import_module(name)
from probe_cli.main import main


def child(case, pipes):
    for fd, (read, write) in zip((1, 2), pipes):
        os.close(read)
        os.dup2(write, fd)
    if case["fsize"] is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (case["fsize"], case["fsize"]))
    sys.argv = ["probe", *case["argv"]]
    main()
    sys.exit(0)


def due(interrupt, deadline):
    return len(glob.glob(interrupt["glob"])) >= interrupt["count"] or time.monotonic() > deadline


def drain(pipes, case, pid):
    # the child's output comes through pipes, as to a caller of subprocess.run: a file-size limit does not cut it;
    # meanwhile the signal of an interrupted case goes out once its files are there: when it went (None: never)
    selector, chunks = selectors.DefaultSelector(), {}
    for (read, write), name in zip(pipes, ("stdout", "stderr")):
        os.close(write)
        selector.register(read, selectors.EVENT_READ, name)
        chunks[name] = []
    interrupt, sent = case["interrupt"], None
    deadline = time.monotonic() + (interrupt["deadline"] if interrupt else 0)
    while selector.get_map():
        for key, _ in selector.select(timeout=0.02):
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.data].append(data)
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
        if interrupt and sent is None and selector.get_map() and due(interrupt, deadline):
            os.kill(pid, interrupt["signal"])
            sent = time.monotonic()
    for name, parts in chunks.items():
        with open(os.path.join(case["out"], name), "wb") as out:
            out.write(b"".join(parts))
    return sent


for case in spec["cases"]:
    sys.stdout.flush()
    sys.stderr.flush()
    pipes = (os.pipe(), os.pipe())
    pid = os.fork()
    if pid == 0:
        child(case, pipes)  # leaves by SystemExit or an exception: the interpreter's own way out, as a process does
    sent = drain(pipes, case, pid)
    _, status = os.waitpid(pid, 0)
    ended = {"returncode": os.waitstatus_to_exitcode(status)}
    ended["signalled"] = None if sent is None else time.monotonic() - sent
    with open(os.path.join(case["out"], "ended.json"), "w") as out:
        json.dump(ended, out)
"""


@dataclass(frozen=True)
class Interrupt:
    """Send ``signal`` to the command once ``count`` files match ``pattern`` (a glob), or after ``deadline`` seconds."""

    pattern: str
    count: int
    signal: int = signal.SIGINT
    deadline: float = 120.0


@dataclass(frozen=True)
class Command:
    """``probe ARGV``, under a file-size limit of ``fsize`` bytes (None: none), interrupted as ``interrupt`` says."""

    argv: list[str]
    fsize: int | None = None
    interrupt: Interrupt | None = None


@dataclass(frozen=True)
class Ended:
    """How one command ended: exit status (negative: killed by that signal), what it printed, and for an interrupted
    one the seconds from the signal to its exit (None: it ended before the signal went out)."""

    returncode: int
    stdout: str
    stderr: str
    signalled: float | None = None


def write_cases(work: Path, commands: list[Command], preload: tuple[str, ...] = PRELOAD) -> Path:
    """The driver's spec: each command's output goes to ``work/<index>/``."""
    cases = []
    for index, command in enumerate(commands):
        (work / str(index)).mkdir(parents=True, exist_ok=True)
        interrupt = command.interrupt
        when = interrupt and {
            "glob": interrupt.pattern,
            "count": interrupt.count,
            "signal": int(interrupt.signal),
            "deadline": interrupt.deadline,
        }
        cases.append({"argv": command.argv, "fsize": command.fsize, "out": str(work / str(index)), "interrupt": when})
    path = work / "cases.json"
    path.write_text(json.dumps({"preload": list(preload), "cases": cases}), encoding="utf-8")
    return path


def ended(out: Path) -> Ended:
    """What the driver left in a case's folder."""
    assert (out / "ended.json").is_file(), f"the command of {out} never ended: {(out / 'stderr').read_text()[-2000:]}"
    end = json.loads((out / "ended.json").read_text())
    return Ended(end["returncode"], (out / "stdout").read_text(), (out / "stderr").read_text(), end["signalled"])


def run_forked(
    commands: list[Command], work: Path, env: dict[str, str], preload: tuple[str, ...] = PRELOAD
) -> list[Ended]:
    """Each command in a forked process of its own, in order."""
    spec = write_cases(work, commands, preload)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spec)],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600 + 120 * len(commands),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [ended(work / str(index)) for index in range(len(commands))]
