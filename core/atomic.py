"""The toolkit's one way to write a file that replaces another: all of it, or none of it.

A writer that opens its target and writes in place leaves half a file when it is killed,
runs out of disk or meets a bug halfway, and the good file that was there is gone. Here
every write goes to a temporary name in the target's own folder (so the final rename
never crosses a file system), is flushed and ``fsync``-ed, and is then renamed over the
target with :func:`os.replace`, which POSIX makes atomic; the folder is ``fsync``-ed
last so the rename itself survives a power cut. Until that rename the old file is
untouched, and on any exception (``KeyboardInterrupt`` included) the temporary file is
removed.

A dataset is several files that belong together (``sft.jsonl``, ``dpo.jsonl``,
``test.jsonl``, ``profiles.jsonl``...). :func:`replace_together` writes every member to its
temporary name first and renames only when all of them are complete, so a failure
while producing or writing any member leaves the whole old set as it was. The renames
themselves are not one atomic step (POSIX has no multi-file rename), but they only move
finished files, take microseconds, and a Ctrl-C that arrives during them is held back
until they are done.

A set of files made by writers of their own (h5py, plotly, kaleido) goes through
:func:`file_set`: they write into a staging folder inside the target folder, and when every
one is complete they are renamed into place together, with the files the new set no longer
has removed in the same step; an error or Ctrl-C before then leaves the old set untouched.

A finished directory (a build, a trained model) takes the place of the old one through
:func:`replace_dir`. Where the kernel can exchange two names in one step (Linux
``renameat2(RENAME_EXCHANGE)``: ext4, xfs, btrfs, tmpfs and others) the destination names a
whole directory at every moment, the old one and then the new one; the old one, now under the
new one's name, is removed last, so a crash leaves it there (where the next build's clean-up of
its private folders, or the caller's, finds it). Elsewhere the old directory is first renamed to
``.<name>.old``: for the microseconds between that rename and the next the destination is
missing, and a crash there leaves the old directory at ``.<name>.old`` (removed by the next
swap) and the new one under its own name. Either way no directory is ever half old and half new.

A written file gets the mode a plain ``open(path, "w")`` would give it: a new file
``0o666 & ~umask``, a replaced file the mode it had (the temporary files of
:func:`tempfile.mkstemp` are ``0o600`` and would otherwise end up as the target's mode).

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(root / "a.txt", "old")
    >>> replace_together({root / "a.txt": "new", root / "b.txt": b"bytes"})
    >>> (root / "a.txt").read_text(), (root / "b.txt").read_bytes()
    ('new', b'bytes')
    >>> def fails(handle):
    ...     raise ValueError("producer failed")
    >>> replace_together({root / "a.txt": "newer", root / "b.txt": fails})
    Traceback (most recent call last):
    ...
    ValueError: producer failed
    >>> (root / "a.txt").read_text(), sorted(p.name for p in root.iterdir())
    ('new', ['a.txt', 'b.txt'])
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

Content = str | bytes | Callable[[IO[bytes]], Any]
"""What a file is made of: text (written as UTF-8), bytes, or a function that writes to a binary handle."""

__all__ = [
    "Content",
    "StagedSet",
    "atomic_file",
    "atomic_path",
    "file_set",
    "replace_dir",
    "replace_together",
    "write_atomic",
]


@contextmanager
def atomic_file(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[IO[bytes]]:
    """A binary handle on a temporary file that replaces ``path`` when the block ends without error.

    ``durable=False`` skips the ``fsync`` calls, for files that are cheap to lose on a power
    cut (a cache entry) but must still never be seen half-written.
    """
    with atomic_path(path, durable=durable) as tmp, open(tmp, "wb") as handle:
        yield handle


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[Path]:
    """A temporary file name beside ``path``, for writers that open files by name (h5py); it replaces ``path``
    when the block ends without error, and is removed otherwise."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _mode_for(target))
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        if durable:
            _sync_file(Path(tmp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        sync_folder(target.parent)


def write_atomic(path: str | os.PathLike[str], content: Content, *, durable: bool = True) -> None:
    """Replace ``path`` with ``content`` (text as UTF-8, bytes, or a writer function), atomically."""
    with atomic_file(path, durable=durable) as handle:
        _fill(handle, content)


def replace_together(files: Mapping[Path, Content], *, durable: bool = True) -> None:
    """Write every file of ``files`` to a temporary name, then rename them all; on any failure, none.

    A producer that raises (or a full disk, or Ctrl-C) while any member is written leaves
    every target as it was and removes the temporary files.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, content in files.items():
            target = Path(path)
            staged.append((_stage(target, content, durable), target))
        with _sigint_deferred():
            while staged:
                tmp, target = staged[0]
                os.replace(tmp, target)
                staged.pop(0)
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
    if durable:
        for folder in {Path(p).parent for p in files}:
            sync_folder(folder)


@dataclass
class StagedSet:
    """Where a set is written (``folder``), and the files of the old set the new one drops (``obsolete``)."""

    folder: Path
    obsolete: list[Path] = field(default_factory=list)


@contextmanager
def file_set(target_dir: str | os.PathLike[str], *, durable: bool = True) -> Iterator[StagedSet]:
    """A staging folder inside ``target_dir``; every file written below it replaces its namesake in ``target_dir``
    when the block ends without error, all together (and ``obsolete`` files are removed with them); on any error
    nothing in ``target_dir`` changes and the staging folder is removed."""
    target = Path(target_dir)
    target.mkdir(parents=True, exist_ok=True)
    staged = StagedSet(Path(tempfile.mkdtemp(prefix=".staging-", dir=target)))
    try:
        yield staged
        moves = [
            (path, target / path.relative_to(staged.folder))
            for path in sorted(staged.folder.rglob("*"))
            if path.is_file()
        ]
        for source, destination in moves:
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(source, _mode_for(destination))
            if durable:
                _sync_file(source)
        with _sigint_deferred():
            for source, destination in moves:
                os.replace(source, destination)
            for old in staged.obsolete:
                old.unlink(missing_ok=True)
        if durable:
            for folder in {d.parent for _, d in moves} | {target}:
                sync_folder(folder)
    finally:
        shutil.rmtree(staged.folder, ignore_errors=True)


def replace_dir(new: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Put the finished directory ``new`` at ``target`` (on the same file system), replacing what is there.

    ``target`` is never missing where the kernel can exchange two names (see the module doc); the old
    directory (or file, or link) is removed once the new one is in place.
    """
    source, destination = Path(new), Path(target)
    destination.parent.mkdir(parents=True, exist_ok=True)
    backup = destination.with_name(f".{destination.name}.old")
    _remove(backup)  # left by a swap killed between its two renames
    with _sigint_deferred():
        old = _swap_in(source, destination, backup)
    sync_folder(destination.parent)
    if old is not None:
        _remove(old)


def _swap_in(new: Path, target: Path, backup: Path) -> Path | None:
    """Move ``new`` to ``target``; returns where the old ``target`` went (None when there was none)."""
    if not os.path.lexists(target):
        os.replace(new, target)
        return None
    if _exchange(new, target):
        return new
    os.replace(target, backup)
    os.replace(new, target)
    return backup


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28 and later), or None where there is none."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step; False where the system or file system cannot."""
    rename = _renameat2()
    if rename is None:
        return False
    if rename(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(number, os.strerror(number), str(a), None, str(b))


def _remove(path: Path) -> None:
    """Delete a directory tree, a file or a link (not what a link points at); what cannot be deleted stays."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            path.unlink(missing_ok=True)


def _stage(target: Path, content: Content, durable: bool) -> str:
    """``content`` written and flushed to a temporary file beside ``target``; returns its name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "wb") as handle:
            _fill(handle, content)
            _flush(handle, durable)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _mode_for(target: Path) -> int:
    """The permission bits ``target`` keeps (it exists) or would get from ``open`` (it does not)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where the kernel tells it (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fill(handle: IO[bytes], content: Content) -> None:
    if isinstance(content, str):
        handle.write(content.encode("utf-8"))
    elif isinstance(content, (bytes, bytearray, memoryview)):
        handle.write(content)
    else:
        content(handle)


def _flush(handle: IO[bytes], durable: bool) -> None:
    handle.flush()
    if durable:
        os.fsync(handle.fileno())


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable; file systems that cannot sync a folder are skipped."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back for the few microseconds of a group of renames, then deliver it anew, to whatever answers
    it afterwards (nothing, when SIGINT was ignored). A SIGTERM that the ``probe`` command hands to the Ctrl-C
    handler (:func:`probe_cli.main._sigterm_as_ctrl_c`) is held and delivered the same way, as SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(caught[0])
