"""A real full disk for one `probe` command: a small tmpfs in a private mount namespace.

``unshare --user --map-root-user --mount`` gives the command a mount namespace of its own, where a
tmpfs is mounted over an empty folder; the run directory is copied onto it, the rest of the tmpfs
is filled but for ``free`` bytes, and the command runs there, so its writes fail with ``ENOSPC``
exactly as on a full disk (not ``EFBIG``, as under a file-size limit). The run directory as the
command left it is copied back out for the test to compare. Needs no privilege where unprivileged
user namespaces are allowed (the default on most Linux systems). Where they are not (or with
``PROBE_TEST_FSIZE=1``), the command runs on a copy of the run under a file-size limit of ``free``
bytes instead (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored), and writes fail with ``EFBIG``, "File too large".

:func:`runs_on_full_disk` does the same for several commands at once, each on a tmpfs of its own with its own
``free`` bytes, in one namespace and one interpreter that forks a process per command
(:mod:`tests.support.forked`): the commands' imports are paid once.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.forked import DRIVER, PRELOAD, Command, ended, run_forked, write_cases

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = r"""
mount -t tmpfs -o "size=$SIZE" tmpfs "$MOUNT" || exit 97
cp -a "$SOURCE" "$MOUNT/run" || exit 98
head -c "$SIZE" /dev/zero > "$MOUNT/filler" 2>/dev/null
truncate -s "-$FREE" "$MOUNT/filler"
"$PYTHON" -m probe_cli "$@" > "$OUTPUT/stdout" 2> "$OUTPUT/stderr"
echo $? > "$OUTPUT/rc"
rm -f "$MOUNT/filler"
cp -a "$MOUNT/run" "$OUTPUT/run"
"""

MANY = r"""
n=0
for free in "$@"; do
  mount -t tmpfs -o "size=$SIZE" tmpfs "$WORK/$n/mount" || exit 97
  cp -a "$SOURCE" "$WORK/$n/mount/run" || exit 98
  head -c "$SIZE" /dev/zero > "$WORK/$n/mount/filler" 2>/dev/null
  truncate -s "-$free" "$WORK/$n/mount/filler"
  n=$((n + 1))
done
"$PYTHON" -c "$DRIVER" "$WORK/cases.json" || exit 99
n=0
for free in "$@"; do
  rm -f "$WORK/$n/mount/filler"
  cp -a "$WORK/$n/mount/run" "$WORK/$n/run"
  n=$((n + 1))
done
"""


LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from probe_cli.main import main
main(sys.argv[2:])
"""


@dataclass(frozen=True)
class FullDiskRun:
    """How the command ended: exit status (negative: killed by that signal), its output, the run dir it left, and
    what a failed write says (``No space left on device``, or ``File too large`` under the file-size limit)."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path
    reason: str


@functools.cache
def tmpfs_available() -> bool:
    if shutil.which("unshare") is None or os.environ.get("PROBE_TEST_FSIZE"):
        return False
    done = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return done.returncode == 0


def run_on_full_disk(run_dir: Path, argv: list[str], work: Path, *, free: int = 0, env: dict[str, str]) -> FullDiskRun:
    """``probe ARGV`` with ``{run}`` in ARGV standing for a copy of ``run_dir`` on a tmpfs with ``free`` bytes left
    (or under a file-size limit of ``free`` bytes, see the module doc)."""
    if not tmpfs_available():
        return _under_file_size_limit(run_dir, argv, work, free, env)
    mount, output = work / "mount", work / "output"
    mount.mkdir(parents=True)
    output.mkdir()
    size = _size(run_dir) + 4 * 1024 * 1024
    args = [a.replace("{run}", str(mount / "run")) for a in argv]
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", SCRIPT, "full-disk", *args],
        env={
            **env,
            "SIZE": str(size),
            "MOUNT": str(mount),
            "SOURCE": str(run_dir),
            "FREE": str(free),
            "PYTHON": sys.executable,
            "OUTPUT": str(output),
            "PYTHONPATH": str(ROOT),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and (output / "rc").is_file(), done.stderr[-2000:]
    code = int((output / "rc").read_text())
    return FullDiskRun(
        128 - code if code > 128 else code,
        (output / "stdout").read_text(),
        (output / "stderr").read_text(),
        output / "run",
        "No space left on device",
    )


def runs_on_full_disk(
    run_dir: Path,
    cases: list[tuple[list[str], int]],
    work: Path,
    *,
    env: dict[str, str],
    preload: tuple[str, ...] = PRELOAD,
) -> list[FullDiskRun]:
    """:func:`run_on_full_disk` for each ``(argv, free)`` of ``cases``, in order, each on a copy of ``run_dir`` of its
    own; one interpreter imports what the commands need and forks a process per command."""
    if not tmpfs_available():
        return _many_under_file_size_limit(run_dir, cases, work, env, preload)
    mounts = [work / str(index) / "mount" for index in range(len(cases))]
    argvs = [
        [a.replace("{run}", str(mount / "run")) for a in argv] for mount, (argv, _) in zip(mounts, cases, strict=True)
    ]
    write_cases(work, [Command(argv) for argv in argvs], preload)
    for mount in mounts:
        mount.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", MANY, "full-disk", *(str(free) for _, free in cases)],
        env={
            **env,
            "SIZE": str(_size(run_dir) + 4 * 1024 * 1024),
            "WORK": str(work),
            "SOURCE": str(run_dir),
            "PYTHON": sys.executable,
            "DRIVER": DRIVER,
            "PYTHONPATH": str(ROOT),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600 + 120 * len(cases),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ends = [ended(work / str(index)) for index in range(len(cases))]
    return [
        FullDiskRun(end.returncode, end.stdout, end.stderr, work / str(index) / "run", "No space left on device")
        for index, end in enumerate(ends)
    ]


def _many_under_file_size_limit(
    run_dir: Path, cases: list[tuple[list[str], int]], work: Path, env: dict[str, str], preload: tuple[str, ...]
) -> list[FullDiskRun]:
    copies = [Path(shutil.copytree(run_dir, work / str(index) / "run")) for index in range(len(cases))]
    argvs = [[a.replace("{run}", str(copy)) for a in argv] for copy, (argv, _) in zip(copies, cases, strict=True)]
    limits = [max(free, 4096) for _, free in cases]  # 4 KiB: Python needs a usable temp dir
    ends = run_forked([Command(a, fsize) for a, fsize in zip(argvs, limits, strict=True)], work, env, preload)
    return [
        FullDiskRun(e.returncode, e.stdout, e.stderr, copy, "File too large")
        for e, copy in zip(ends, copies, strict=True)
    ]


def _under_file_size_limit(run_dir: Path, argv: list[str], work: Path, free: int, env: dict[str, str]) -> FullDiskRun:
    copy = Path(shutil.copytree(run_dir, work / "run"))
    args = [a.replace("{run}", str(copy)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(max(free, 4096)), *args],  # 4 KiB: Python needs a usable temp dir
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return FullDiskRun(done.returncode, done.stdout, done.stderr, copy, "File too large")


def _size(folder: Path) -> int:
    """Bytes ``folder`` takes on a tmpfs (each file rounded up to whole pages)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(-(-p.stat().st_size // page) * page + page for p in folder.rglob("*"))
