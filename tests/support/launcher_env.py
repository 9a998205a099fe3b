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

from tests.support.cli import exit_of

DEVICE_AUTO_REFUSED = "error: --device auto: with 2 processes each rank picks cuda:LOCAL_RANK"


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


def refused_as_rank(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], rank: int, argv: list[str]
) -> tuple[int, list[str], str]:
    """``probe ARGV`` as rank ``rank`` of two, any model load failing the test (a refusal comes before one): its exit
    status, its ``error:`` lines and its whole stderr."""
    from transformers import AutoModelForCausalLM

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded before the device was checked")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_load)
    with as_rank(monkeypatch, rank):
        code, _, err = exit_of(argv, capfd)
    return code, [line for line in err.splitlines() if line.startswith("error:")], err
