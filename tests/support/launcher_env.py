"""One rank of a launch, in-process: the environment torchrun gives each process, for the checks a command makes
before its processes meet (a refused ``--device``, a bad argument), which need no second process to be observed.

A rank that another rank speaks for leaves silently after :data:`probes.distributed.SPEAKER_GRACE` seconds (the
time torchrun takes to stop it); in-process there is no torchrun, so the grace is zero here, and the signal
handlers that wait installs are put back afterwards.

Example:
    >>> import pytest
    >>> with pytest.MonkeyPatch.context() as patch, as_rank(patch, 1):
    ...     from probes.distributed import world_from_env
    ...     world_from_env().rank, world_from_env().size
    (1, 2)
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, size: int = 2) -> Iterator[None]:
    """Rank ``rank`` of ``size`` on one machine (``LOCAL_RANK`` = ``rank``), the silent ranks' grace zero."""
    import probes.distributed as distributed

    for name, value in {"WORLD_SIZE": size, "RANK": rank, "LOCAL_RANK": rank}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(distributed, "SPEAKER_GRACE", 0.0)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
