"""Several ``probe`` commands, each in a process of its own, that share one interpreter's imports: a fork per command.

A fresh ``probe`` process spends most of its CPU importing torch and transformers (8-11 s of a 13 s
``probe analyze`` on a tiny run). Tests that run several commands in processes of their own (under
a full disk or a file-size limit, where what matters is how the process ends: one ``error:``
line, exit status 2, no h5py noise while the interpreter shuts down) start one interpreter,
import what the commands import (:data:`PRELOAD`, or :data:`RECORDING` for ``probe run`` alone),
and fork once per command, one at a time. Each child runs ``probe ARGV`` the way ``python -m
probe_cli`` does (``sys.argv``, ``main()``), its stdout and stderr through pipes of its own (kept
in files by the parent), under a file-size limit if asked (``RLIMIT_FSIZE``, ``SIGXFSZ``
ignored), and leaves through the interpreter's normal shutdown (atexit handlers, finalizers):
what a fresh process would print or return there, the child prints and returns.
"""

from __future__ import annotations

import json
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
import importlib, json, os, resource, selectors, signal, sys

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


def drain(pipes, folder):
    # the child's output comes through pipes, as to a caller of subprocess.run: a file-size limit does not cut it
    selector, chunks = selectors.DefaultSelector(), {}
    for (read, write), name in zip(pipes, ("stdout", "stderr")):
        os.close(write)
        selector.register(read, selectors.EVENT_READ, name)
        chunks[name] = []
    while selector.get_map():
        for key, _ in selector.select():
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.data].append(data)
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
    for name, parts in chunks.items():
        with open(os.path.join(folder, name), "wb") as out:
            out.write(b"".join(parts))


for case in spec["cases"]:
    sys.stdout.flush()
    sys.stderr.flush()
    pipes = (os.pipe(), os.pipe())
    pid = os.fork()
    if pid == 0:
        child(case, pipes)  # leaves by SystemExit or an exception: the interpreter's own way out, as a process does
    drain(pipes, case["out"])
    _, status = os.waitpid(pid, 0)
    with open(os.path.join(case["out"], "rc"), "w") as rc:
        rc.write(str(os.waitstatus_to_exitcode(status)))
"""


@dataclass(frozen=True)
class Ended:
    """How one command ended: exit status (negative: killed by that signal) and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def write_cases(work: Path, cases: list[tuple[list[str], int | None]], preload: tuple[str, ...] = PRELOAD) -> Path:
    """The driver's spec: per case ``(argv, file-size limit or None)``, its output in ``work/<index>/``."""
    for index in range(len(cases)):
        (work / str(index)).mkdir(parents=True, exist_ok=True)
    spec = {
        "preload": list(preload),
        "cases": [{"argv": argv, "fsize": fsize, "out": str(work / str(i))} for i, (argv, fsize) in enumerate(cases)],
    }
    path = work / "cases.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def ended(out: Path) -> Ended:
    """What the driver left in a case's folder."""
    assert (out / "rc").is_file(), f"the command of {out} never ended: {(out / 'stderr').read_text()[-2000:]}"
    return Ended(int((out / "rc").read_text()), (out / "stdout").read_text(), (out / "stderr").read_text())


def run_forked(
    cases: list[tuple[list[str], int | None]], work: Path, env: dict[str, str], preload: tuple[str, ...] = PRELOAD
) -> list[Ended]:
    """``probe ARGV`` for each ``(argv, file-size limit or None)``, one forked process each, in order."""
    spec = write_cases(work, cases, preload)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spec)],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [ended(work / str(index)) for index in range(len(cases))]
