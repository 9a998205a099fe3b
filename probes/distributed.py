"""Data-parallel recording: one recorder per process, coordinated through torch.distributed.

``torchrun --nproc-per-node N -m probe_cli run ...`` (or ``accelerate launch``) starts N
copies of the same command with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set. Each copy loads
the pair on its own device and records its share of one global batch plan
(:mod:`probes.batching`: batch *k* of the pending list belongs to rank ``k % N``) into the
run's journal, where every batch is its own shard. Rank 0 holds the run-dir lock, writes
the settings file, waits for the others and consolidates. A rank killed mid-way leaves whole
shards behind; the next launch (of any size, one process too) records only what is missing.
Because the batches are the same whoever records them, the file equals a one-process run's.

Coordination is a handful of small collectives over the ``gloo`` backend (CPU tensors,
works across nodes and beside any GPU), so no NCCL set-up is needed: the activations never
travel between processes, only through the shared run directory.

Every step that may fail on a user mistake runs under :meth:`World.agree`: each rank
reports success or its one-line error, and all ranks raise the same
:class:`~core.errors.ProbeError` together, so a mistake never leaves ranks waiting on a
collective the failed one will not reach.

Failing cleanly (docs/probes.md, "More than one process: data-parallel recording"):

- ``--device`` is checked against the machine before the group starts; every rank runs the
  same check, and local rank 0 alone prints it (one line per machine).
- The processes meet through a store (torchrun's, or one rank 0 hosts) and count themselves
  in, polling from Python: a missing peer ends in one line after :func:`join_timeout`
  seconds (``PROBE_JOIN_TIMEOUT``, default 120), and Ctrl-C stops the wait at once.
- Once joined, each rank leaves its host and pid in the store. A rank that dies (``kill -9``,
  the OOM killer) makes the others fail in a collective or get torchrun's SIGTERM; either way
  the lowest surviving rank names the dead one in one line, :class:`PeerLost`, and the
  recorder adds how to resume. The other ranks exit with the same status and say nothing.
- Ctrl-C reaches every rank and torchrun, which sends a second SIGINT; the first one stops a
  rank, the second is ignored so that the ``interrupted:`` line is printed whole.
- torchrun itself exits 1 with a traceback of its own whenever a rank fails; :func:`launch`
  (``python -m probes.distributed``, torchrun's arguments) exits with the ranks' status.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn, TypeVar, cast

from core.errors import Interrupted, ProbeError

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
# Rank 0 waits at a barrier while the others finish their share; the default 30 minutes can be too short.
BARRIER_TIMEOUT = timedelta(hours=12)
JOIN_TIMEOUT_VARIABLE = "PROBE_JOIN_TIMEOUT"
DEFAULT_JOIN_TIMEOUT = 120.0
STORE_TIMEOUT = timedelta(seconds=5)  # for the store look-ups made while stopping
# Who prints a ProbeError that several ranks raise together (PeerLost.reporter and friends).
EVERY_RANK = -1
EACH_MACHINE = -2  # local rank 0: checks every rank of a machine makes alike, such as --device


class PeerLost(ProbeError):
    """Another process of the run died or stopped answering; ``reporter`` is the rank that says so."""

    def __init__(self, message: str, reporter: int = 0, dead: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.reporter = reporter
        self.dead = dead


def reported_by(error: E, reporter: int) -> E:
    """``error``, marked with the rank that prints it (:data:`EVERY_RANK`, :data:`EACH_MACHINE` or a rank)."""
    error.reporter = reporter  # type: ignore[attr-defined]  # the rank that prints it travels on the exception
    return error


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

    def speaks(self, error: BaseException) -> bool:
        """Whether this rank prints ``error``: one line per run (or per machine), not one per rank."""
        reporter = getattr(error, "reporter", 0)
        if not self.distributed or reporter == EVERY_RANK:
            return True
        if reporter == EACH_MACHINE:
            return self.local_rank == 0
        return self.rank == reporter

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            _collective(dist.barrier)

    def agree(self, step: Callable[[], T]) -> T:
        """Run ``step`` on every rank; if it fails on any with a ProbeError, raise that error on all."""
        error: ProbeError | None = None
        try:
            result = step()
        except PeerLost:
            raise
        except ProbeError as exc:
            error = exc
        if not self.distributed:
            if error is not None:
                raise error
            return result
        failures = self.gather(None if error is None else (self.rank, str(error)))
        failed = [f for f in failures if f is not None]
        if failed:
            rank, message = failed[0]
            raise (error if error is not None else ProbeError(f"rank {rank}: {message}"))
        return result

    def on_main(self, step: Callable[[], T]) -> T:
        """Run ``step`` on rank 0 only and hand its result (or its ProbeError) to every rank."""
        outcome: Any = None
        error: str | None = None
        if self.is_main:
            try:
                outcome = step()
            except PeerLost:
                raise
            except ProbeError as exc:
                error = str(exc)
                if not self.distributed:
                    raise
        outcome, error = self.broadcast((outcome, error))
        if error is not None:
            raise ProbeError(error)
        return cast(T, outcome)  # step's result, broadcast from rank 0

    def gather(self, value: Any) -> list[Any]:
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        values: list[Any] = [None] * self.size
        _collective(lambda: dist.all_gather_object(values, value))
        return values

    def broadcast(self, value: T) -> T:
        if not self.distributed:
            return value
        import torch.distributed as dist

        box = [value]
        _collective(lambda: dist.broadcast_object_list(box, src=0))
        return box[0]


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ProbeError(
            f"environment variable {name}={value!r}: expected an integer (set by torchrun / accelerate launch)"
        ) from None


def world_from_env() -> World:
    """The world torchrun / accelerate launch describe in the environment (one process when unset)."""
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    if size < 1 or not 0 <= rank < size:
        raise ProbeError(f"RANK={rank} WORLD_SIZE={size}: expected 0 <= RANK < WORLD_SIZE")
    return World(rank, size, local_rank)


def join_timeout() -> float:
    """Seconds the processes of a run wait for each other to start (``PROBE_JOIN_TIMEOUT``, default 120)."""
    raw = os.environ.get(JOIN_TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_JOIN_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 86400:
        raise ProbeError(
            f"environment variable {JOIN_TIMEOUT_VARIABLE}={raw!r}: expected seconds, more than 0 and at most 86400"
        )
    return seconds


@contextmanager
def reported_once(world: World) -> Iterator[None]:
    """A ProbeError another rank prints ends this rank silently, with the same exit status."""
    try:
        yield
    except ProbeError as exc:
        if world.speaks(exc):
            raise
        leave_quietly(getattr(exc, "exit_code", 2))


SPEAKER_GRACE = 10.0  # seconds a silent rank waits for the rank that prints the error (torchrun ends it sooner)


def leave_quietly(code: int) -> NoReturn:
    """Exit with ``code`` and no line, but not before the rank that prints the error could: torchrun stops every
    rank as soon as one ends, so a silent rank that left first could cut the speaker off before its line. The wait
    ends with torchrun's SIGTERM (once the speaker has ended) or after :data:`SPEAKER_GRACE` seconds."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: os._exit(code))
        time.sleep(SPEAKER_GRACE)
    raise SystemExit(code)


@dataclass
class _Session:
    """The joined group: the store the ranks met through and what the signal handlers saw."""

    world: World
    store: Any
    prefix: str
    agent_store: bool
    interrupted: bool = False


_session: _Session | None = None


@contextmanager
def joined(world: World) -> Iterator[World]:
    """Join the process group for the duration (a no-op for one process, or one already joined)."""
    global _session
    if not world.distributed:
        yield world
        return
    import torch.distributed as dist
    from torch._C._distributed_c10d import PrefixStore  # where torch defines it (torch.distributed does not export it)

    if dist.is_initialized():
        yield world
        return
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise reported_by(
            ProbeError(
                f"WORLD_SIZE={world.size} but {', '.join(missing)} unset; start data-parallel recording "
                "with torchrun or accelerate launch (docs/probes.md)"
            ),
            EVERY_RANK,
        )
    session = _rendezvous(world, join_timeout())
    try:
        dist.init_process_group(
            "gloo",
            store=PrefixStore("default_pg", session.store),
            rank=world.rank,
            world_size=world.size,
            timeout=BARRIER_TIMEOUT,
        )
    except RuntimeError as exc:  # gloo could not connect the ranks to each other
        raise ProbeError(
            f"the {world.size} processes met but could not connect to each other ({_first_line(exc)}); "
            "check that every node reaches the others (GLOO_SOCKET_IFNAME picks the interface)"
        ) from None
    _session = session
    try:
        with _signal_handlers(session):
            yield world
    finally:
        _session = None
        _mark_left(session)
        if dist.is_initialized():
            dist.destroy_process_group()


def _mark_left(session: _Session) -> None:
    """This rank leaves on purpose (done, or stopping with a message): the others must not call it dead."""
    with suppress(RuntimeError):  # the store went with rank 0
        session.store.set(session.prefix + f"left/{session.world.rank}", "1")


def _rendezvous(world: World, timeout: float) -> _Session:
    """Meet the other ranks through the store, polling, so that Ctrl-C and the deadline act within a moment."""
    deadline = time.monotonic() + timeout
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    prefix = (
        f"probe/{os.environ.get('TORCHELASTIC_RUN_ID', 'env')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    )
    store = None
    try:
        store = _connect(world, deadline, timeout, agent_store)
        store.add(prefix + "joined", 1)
        while (count := store.add(prefix + "joined", 0)) < world.size:
            if time.monotonic() > deadline:
                raise _not_joined(world, count, timeout)
            time.sleep(0.05)
        store.set(prefix + f"pid/{world.rank}", f"{socket.gethostname()} {os.getpid()}")
    except KeyboardInterrupt:  # said by rank 0 once the store answers (every rank got the Ctrl-C), else by each
        raise reported_by(
            Interrupted(
                f"stopped while the {world.size} processes of the data-parallel run were meeting; "
                "nothing was recorded; rerun the command"
            ),
            0 if store is not None else EVERY_RANK,
        ) from None
    except RuntimeError as exc:  # the store itself failed (a peer hosting it went away)
        raise reported_by(
            ProbeError(
                f"the processes of the data-parallel run could not meet ({_first_line(exc)}); rerun the command"
            ),
            EVERY_RANK,
        ) from None
    store.set_timeout(STORE_TIMEOUT)
    return _Session(world, store, prefix, agent_store)


def _connect(world: World, deadline: float, timeout: float, agent_store: bool) -> Any:
    """rank 0 hosts the store unless torchrun's agent does; the others retry until it answers or the deadline passes."""
    from torch._C._distributed_c10d import TCPStore  # where torch defines it (torch.distributed does not export it)

    host, port = os.environ["MASTER_ADDR"], _env_int("MASTER_PORT", 0)
    if not 0 < port < 65536:
        raise reported_by(
            ProbeError(f"environment variable MASTER_PORT={port}: expected a port, 1 to 65535"), EVERY_RANK
        )
    if world.is_main and not agent_store:
        try:
            return TCPStore(host, port, world.size, True, timedelta(seconds=timeout), wait_for_workers=False)
        except RuntimeError as exc:
            raise reported_by(
                ProbeError(
                    f"MASTER_ADDR={host} MASTER_PORT={port}: rank 0 cannot listen there ({_first_line(exc)}); "
                    "pick a free port"
                ),
                EVERY_RANK,
            ) from None
    while True:
        problem = _unreachable(host, port)
        if problem is None:  # probed from Python first: a refused TCPStore connect logs C++ stack frames
            try:
                return TCPStore(host, port, world.size, False, timedelta(seconds=max(1.0, deadline - time.monotonic())))
            except RuntimeError as exc:
                problem = _first_line(exc)
        if time.monotonic() > deadline:
            raise reported_by(
                ProbeError(
                    f"rank {world.rank} of {world.size} could not reach rank 0 at MASTER_ADDR={host} "
                    f"MASTER_PORT={port} within {timeout:g} s ({JOIN_TIMEOUT_VARIABLE}; {problem}); "
                    "start every rank (torchrun --nproc-per-node N starts them for you), "
                    "or unset WORLD_SIZE for one process"
                ),
                EVERY_RANK,
            ) from None
        time.sleep(0.2)


def _unreachable(host: str, port: int) -> str | None:
    """None when something listens at host:port, else why not."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _not_joined(world: World, count: int, timeout: float) -> ProbeError:
    return reported_by(
        ProbeError(
            f"only {count} of the {world.size} processes (WORLD_SIZE={world.size}) started within {timeout:g} s "
            f"({JOIN_TIMEOUT_VARIABLE}); start every rank (torchrun --nproc-per-node N starts them for you), "
            "or unset WORLD_SIZE for one process"
        ),
        0,
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _collective(call: Callable[[], T]) -> T:
    """A collective whose failure (a peer that closed its connections) becomes PeerLost,
    or the Ctrl-C that caused it."""
    try:
        return call()
    except RuntimeError as exc:
        if _session is not None and _session.interrupted:
            raise KeyboardInterrupt from None
        raise peer_lost(_first_line(exc), wait=2.0) from None  # its sockets close a moment before it is gone


def peer_lost(detail: str, wait: float = 0.0) -> PeerLost:
    """Which ranks died, said by the lowest surviving rank; ``wait``: seconds a dying peer may take to be gone."""
    session = _session
    if session is None:
        return PeerLost(f"another process of this data-parallel run stopped ({detail})", EVERY_RANK)
    world = session.world
    deadline = time.monotonic() + wait
    while not (dead := _dead_ranks(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [r for r in range(world.size) if r not in dead]
    if not dead:
        return PeerLost(f"another process of this data-parallel run stopped answering ({detail})", alive[0])
    names = ", ".join(str(r) for r in dead)
    return PeerLost(
        f"rank {names} of {world.size} died (killed, or out of memory?)", alive[0] if alive else world.rank, tuple(dead)
    )


def _dead_ranks(session: _Session) -> list[int]:
    """Ranks whose process is gone from this machine without leaving the group;
    rank 0 when the store it hosted is gone."""
    world, here = session.world, socket.gethostname()
    dead = []
    for rank in range(world.size):
        if rank == world.rank:
            continue
        try:
            if session.store.check([session.prefix + f"left/{rank}"]):
                continue
            host, pid = session.store.get(session.prefix + f"pid/{rank}").decode().split()
        except (RuntimeError, ValueError):
            if not session.agent_store:
                return [0]  # rank 0 hosted the store
            continue
        if host == here and not _alive(int(pid)):
            dead.append(rank)
    return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextmanager
def _signal_handlers(session: _Session) -> Iterator[None]:
    """SIGTERM (torchrun's when a rank died) says who died; Ctrl-C stops once and ignores torchrun's second SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(_signum: int, _frame: Any) -> None:
        session.interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    def on_sigterm(_signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lost = None if session.interrupted else peer_lost("SIGTERM")
        if lost is not None and lost.dead:
            raise lost
        session.interrupted = True
        raise KeyboardInterrupt  # torchrun, or a user, stopping the run: like Ctrl-C

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, on_sigint),
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_sigterm),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if not session.interrupted:  # once stopping, a further signal stays ignored until the process ends
                signal.signal(signum, handler)


def machine_device(device: str | None, world: World) -> str | None:
    """``--device`` checked against this machine, then this rank's share, before the group starts or a model loads.

    Every rank of a machine makes the same check, so local rank 0 alone prints a refusal.
    """
    from core.devices import check_device

    try:
        return rank_device(None if device is None else check_device(device, "--device", allow_auto=True), world)
    except ProbeError as exc:
        raise reported_by(exc, EACH_MACHINE) from None


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
            raise ProbeError(
                f"LOCAL_RANK {world.local_rank} but only {torch.cuda.device_count()} GPUs visible; "
                "start at most one process per GPU"
            )
        torch.cuda.set_device(world.local_rank)
        return f"cuda:{world.local_rank}"
    if device in (None, "cpu"):
        return "cpu"
    if device == "cuda":
        raise ProbeError("--device cuda: CUDA is not available on this machine; use --device cpu")
    raise ProbeError(
        f"--device {device}: with {world.size} processes each rank picks cuda:LOCAL_RANK; pass --device cuda "
        "(or cpu). --device auto spreads one model over all GPUs and runs as a single process"
    )


def launch(argv: list[str]) -> int:
    """``torchrun ARGV`` exiting as its ranks do (130 after Ctrl-C, 2 after an ``error:`` line), adding no report.

    torchrun exits 1 with a Python traceback and a failure table whenever a rank fails or it
    gets a signal. Here its log lines are silenced and its exceptions mapped: the ranks have
    already said what happened in one line. A failure no rank reported (every rank killed, a
    crash) gets one line here. ``python -m probes.distributed --nproc-per-node 2 -m probe_cli run ...``.
    """
    import logging

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(argv))
    except SignalException as exc:
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        return _launch_status({rank: failure.exitcode for rank, failure in exc.failures.items()})
    return 0


def _launch_status(exit_codes: dict[int, int]) -> int:
    """130 if a rank was interrupted, else 2 if one said ``error:``, else one line naming what no rank explained."""
    for code in (Interrupted.exit_code, 2):
        if code in exit_codes.values():
            return code
    described = ", ".join(
        f"rank {rank} {'killed by signal ' + str(-code) if code < 0 else 'exit status ' + str(code)}"
        for rank, code in sorted(exit_codes.items())
    )
    print(
        f"error: the data-parallel launch failed ({described}) and no rank said why; "
        "whole batches are kept in the run's journal: rerun the same command to resume",
        file=sys.stderr,
        flush=True,
    )
    return 1


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
