"""Verified, all-or-nothing builds of cached artefacts (the pretrained base, the default pairs).

A cached directory that takes minutes to build must never be used half-finished or after
someone changed a file in it. The pattern, shared by :mod:`training.smollm2` and
:mod:`training.default_pair`:

* build into a private ``.<name>.build-<pid>`` directory beside the target (:func:`building`),
  under an exclusive file lock (:func:`build_lock`: a second process says that it waits, waits,
  then finds the finished build);
* write ``COMPLETE.json`` last: an *identity* (what was built: recipe, source hashes,
  version), the SHA-256 of every file and its size, modification time and inode;
* swap it into place (:func:`core.atomic.replace_dir`);
* on every later call, :func:`verify_marker` compares the files with the marker: a missing or
  added file, or another identity, means rebuild; a file whose size, modification time or inode
  differs from the recorded ones is re-hashed, and rebuilt if its bytes changed. A file whose
  size, time and inode all match is taken as it was, without reading it (a cached 1.1 GB pair is
  checked in milliseconds, not 13 s); ``rehash=True`` (``probe models default --verify``) reads
  every file, for a change that kept all three (``touch -r``, a tool that restores times).

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()); (root / "a.txt").write_text("x")
    1
    >>> write_marker(root, {"recipe": 1}); verify_marker(root, {"recipe": 1}) is None
    True
    >>> verify_marker(root, {"recipe": 2})
    'built from another recipe, source or version'
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from core.atomic import replace_dir, write_atomic
from core.locks import file_lock
from core.provenance import file_sha256

MARKER = "COMPLETE.json"


@contextmanager
def build_lock(path: Path, what: str) -> Iterator[None]:
    """Hold the build lock ``path`` of ``what``; if another process holds it, say so on stderr, then wait for it."""

    def waiting() -> None:
        print(f"waiting: another process is building {what} (lock {path})", file=sys.stderr, flush=True)

    with file_lock(path, waiting=waiting):
        yield


def _files(root: Path) -> dict[str, Path]:
    """Every file (or link, or other non-directory) below ``root`` but the marker, by relative path."""
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.name != MARKER and not p.is_dir()}


def _stat(path: Path) -> list[int]:
    """What tells a file changed without reading it: size, modification time (ns) and inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def hash_tree(root: Path) -> dict[str, str]:
    """SHA-256 of every file below ``root`` but the marker, by relative path."""
    return {
        str(p.relative_to(root)): file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file() and p.name != MARKER
    }


def write_marker(root: Path, identity: dict[str, Any], **extra: Any) -> None:
    """Write ``COMPLETE.json``: ``identity``, ``extra`` fields, the file hashes and the time (call it last)."""
    record = {
        **identity,
        **extra,
        "files": hash_tree(root),
        "stats": {name: _stat(path) for name, path in _files(root).items()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(root / MARKER, json.dumps(record, indent=1))


def read_marker(root: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def verify_marker(root: Path, identity: dict[str, Any], *, rehash: bool = False) -> str | None:
    """What is wrong with the build at ``root``, or None when it is complete, intact and of ``identity``.

    Files whose size, modification time and inode are those recorded are not read unless ``rehash`` (module doc);
    when every file re-hashed is intact, the marker's record of them is brought up to date, so the next call is
    fast again."""
    if not (root / MARKER).is_file():
        return "no completion marker (the build did not finish)"
    record = read_marker(root)
    if record is None:
        return "unreadable completion marker"
    if any(record.get(key) != value for key, value in identity.items()):
        return "built from another recipe, source or version"
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return "completion marker lists no files"
    present = _files(root)
    missing = sorted(set(files) - set(present))
    if missing:
        return f"{missing[0]} is missing"
    recorded = record.get("stats")
    stats: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    seen = {name: _stat(present[name]) for name in files}
    stale = [name for name in files if rehash or stats.get(name) != seen[name]]
    for name in stale:
        if file_sha256(present[name]) != files[name]:
            return f"{name} changed since the build"
    added = sorted(set(present) - set(files))
    if added:  # a dropped-in file (a special_tokens_map.json) changes what loads as much as a changed one
        return f"{added[0]} was added after the build"
    if stale and seen != stats:
        _restat(root, record, seen)
    return None


def _restat(root: Path, record: dict[str, Any], seen: dict[str, list[int]]) -> None:
    """Record the sizes, times and inodes of files just found intact by their hashes (a copied or touched build)."""
    with suppress(OSError):  # a read-only cache is checked by hashing every time: slower, still right
        write_atomic(root / MARKER, json.dumps({**record, "stats": seen}, indent=1))


@contextmanager
def building(target: Path) -> Iterator[Path]:
    """A private ``.<name>.build-<pid>`` path beside ``target`` to build into (not yet created); it replaces
    ``target`` when the block ends without error, and is removed in every case. Call it under the build's lock:
    the folders of killed builds are removed first."""
    for stale in target.parent.glob(f".{target.name}.build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = target.parent / f".{target.name}.build-{os.getpid()}"
    try:
        yield work
        replace_dir(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def in_current_home(path: str | os.PathLike[str], home: Path | None = None) -> Path:
    """``path`` inside a build of an earlier model home that is gone, at the same place in ``home`` (default
    ``$PROBE_HOME``) when that home holds the same build; else ``path`` as it was. So a run recorded before the home
    was copied or moved still names models and data that exist.

    >>> import tempfile
    >>> home = Path(tempfile.mkdtemp()); (home / "pair" / "sft").mkdir(parents=True)
    >>> _ = (home / "pair" / MARKER).write_text("{}")
    >>> in_current_home("/moved/away/pair/sft", home) == home / "pair" / "sft"
    True
    >>> in_current_home("/moved/away/other/sft", home)
    PosixPath('/moved/away/other/sft')
    """
    from core.home import probe_home

    given = Path(path)
    if not given.is_absolute() or given.exists():
        return given
    root = home if home is not None else probe_home()
    for start in range(1, len(given.parts) - 1):
        build, rest = given.parts[start], given.parts[start + 1 :]
        moved = root.joinpath(build, *rest)
        if (root / build / MARKER).is_file() and moved.exists():
            return moved
    return given
