"""The toolkit's one file lock: an exclusive ``flock`` held for a block, waited for or refused at once.

Two processes must not build the same cached directory, nor record into the same run directory,
at the same time. ``flock`` locks belong to the open file, so a process that is killed while it
holds one releases it with its last descriptor: nothing is left behind to clean up, and a lock
file that exists says nothing about whether anyone holds it. ``wait=True`` (a build) waits for
the holder to finish, first calling ``waiting()`` once if it is held, so the user hears why
nothing moves; ``wait=False`` (a recording) raises :class:`LockHeld` at once, and the caller
says in its own words who holds it.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "demo.lock"
    >>> with file_lock(path):
    ...     try:
    ...         with file_lock(path, wait=False):
    ...             pass
    ...     except LockHeld:
    ...         print("held")
    held
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LockHeld", "file_lock"]


class LockHeld(Exception):
    """Another open file holds the lock (raised only with ``wait=False``)."""


@contextmanager
def file_lock(
    path: str | os.PathLike[str], *, wait: bool = True, waiting: Callable[[], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created with its parents) for the block; ``wait=False``: never wait;
    ``waiting``: called once before waiting for another holder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise LockHeld(str(target)) from None
            if waiting is not None:
                waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
