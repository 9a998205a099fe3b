"""Data-parallel recording: one recorder per process, coordinated through torch.distributed.

``torchrun --nproc-per-node N -m probe_cli run ...`` (or ``accelerate launch``) starts N
copies of the same command with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set. Each copy loads
the pair on its own device and records its share of one global batch plan
(:mod:`probes.batching`: batch *k* of the pending list belongs to rank ``k % N``) into the
run's journal, where every batch is its own shard. Rank 0 holds the run-dir lock, writes
``run.json``, waits for the others and consolidates. A rank killed mid-way leaves whole
shards behind; the next launch (of any size, one process too) records only what is missing.
Because the batches are the same whoever records them, the file equals a one-process run's.

Coordination is a handful of small collectives over the ``gloo`` backend (CPU tensors,
works across nodes and beside any GPU), so no NCCL set-up is needed: the activations never
travel between processes, only through the shared run directory.

Every step that may fail on a user mistake runs under :meth:`World.agree`: each rank
reports success or its one-line error, and all ranks raise the same
:class:`~core.errors.ProbeError` together, so a mistake never leaves ranks waiting on a
collective the failed one will not reach.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from core.errors import ProbeError

T = TypeVar("T")
# Rank 0 waits at a barrier while the others finish their share; the default 30 minutes can be too short.
BARRIER_TIMEOUT = timedelta(hours=12)


@dataclass(frozen=True)
class World:
    """This process's place among the recorders (``size`` 1: no torch.distributed at all)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def owns(self, index: int) -> bool:
        """Whether batch ``index`` of the pending list is this rank's to record."""
        return index % self.size == self.rank

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def agree(self, step: Callable[[], T]) -> T:
        """Run ``step`` on every rank; if it fails on any with a ProbeError, raise that error on all."""
        result, error = None, None
        try:
            result = step()
        except ProbeError as exc:
            error = exc
        if not self.distributed:
            if error is not None:
                raise error
            return result  # type: ignore[return-value]
        failures = self.gather(None if error is None else (self.rank, str(error)))
        failed = [f for f in failures if f is not None]
        if failed:
            rank, message = failed[0]
            raise (error if error is not None else ProbeError(f"rank {rank}: {message}"))
        return result  # type: ignore[return-value]

    def on_main(self, step: Callable[[], T]) -> T:
        """Run ``step`` on rank 0 only and hand its result (or its ProbeError) to every rank."""
        outcome: Any = None
        error: str | None = None
        if self.is_main:
            try:
                outcome = step()
            except ProbeError as exc:
                error = str(exc)
                if not self.distributed:
                    raise
        outcome, error = self.broadcast((outcome, error))
        if error is not None:
            raise ProbeError(error)
        return outcome

    def gather(self, value: Any) -> list[Any]:
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        values: list[Any] = [None] * self.size
        dist.all_gather_object(values, value)
        return values

    def broadcast(self, value: T) -> T:
        if not self.distributed:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ProbeError(f"environment variable {name}={value!r}: expected an integer (set by torchrun / accelerate launch)") from None


def world_from_env() -> World:
    """The world torchrun / accelerate launch describe in the environment (one process when unset)."""
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    if size < 1 or not 0 <= rank < size:
        raise ProbeError(f"RANK={rank} WORLD_SIZE={size}: expected 0 <= RANK < WORLD_SIZE")
    return World(rank, size, local_rank)


@contextmanager
def joined(world: World) -> Iterator[World]:
    """Join the process group for the duration (a no-op for one process, or one already joined)."""
    if not world.distributed:
        yield world
        return
    import torch.distributed as dist

    owner = not dist.is_initialized()
    if owner:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise ProbeError(f"WORLD_SIZE={world.size} but {', '.join(missing)} unset; start data-parallel recording with "
                             "torchrun or accelerate launch (docs/probes.md)")
        dist.init_process_group("gloo", rank=world.rank, world_size=world.size, timeout=BARRIER_TIMEOUT)
    try:
        yield world
    finally:
        if owner and dist.is_initialized():
            dist.destroy_process_group()


def rank_device(device: str | None, world: World) -> str | None:
    """The device this rank records on: ``cuda:LOCAL_RANK`` when data-parallel on GPUs.

    One process keeps ``--device`` as given. With several, ``--device`` may be omitted,
    ``cuda`` or ``cpu``: a fixed ``cuda:N`` would put every rank on one GPU, and ``auto``
    (one model spread over all GPUs) is the other way to use several GPUs, not combinable.
    """
    if not world.distributed:
        return device
    import torch

    if device in (None, "cuda") and torch.cuda.is_available():
        if world.local_rank >= torch.cuda.device_count():
            raise ProbeError(f"LOCAL_RANK {world.local_rank} but only {torch.cuda.device_count()} GPUs visible; "
                             "start at most one process per GPU")
        torch.cuda.set_device(world.local_rank)
        return f"cuda:{world.local_rank}"
    if device in (None, "cpu"):
        return "cpu"
    if device == "cuda":
        raise ProbeError("--device cuda: CUDA is not available on this machine; use --device cpu")
    raise ProbeError(f"--device {device}: with {world.size} processes each rank picks cuda:LOCAL_RANK; pass --device cuda "
                     "(or cpu). --device auto spreads one model over all GPUs and runs as a single process")
