"""Data-parallel ``probe intervene``: the shared engine's batches of prompts dealt to the processes of one launch.

``torchrun --nproc-per-node N -m probe_cli intervene ...`` (or ``accelerate launch``) starts N copies of the
command; :func:`intervene` places each in the world of :mod:`probes.distributed` (the one ``probe run`` uses:
its store, its agreement, its one-line failures), plans the run on every rank (:func:`agreed_plan`: the pair loaded on
each rank's device, a mistake on one rank said on all) and runs :func:`interventions.ab.run_ab` on every rank. There,
every pass that decodes in shared batches
(:mod:`access.shared_generation`) is split by one plan (:func:`deal`): rank 0 lists the batches of prompts not yet
kept in ``OUT/.arms`` (:mod:`interventions.arms`), in order, and batch *k* of that pending list is rank
``k % N``'s. Each rank decodes its batches, keeping each finished one as a one-process run does, then hands
them to rank 0 (:func:`hand_over`, over the gloo group, so ``--out`` need not be a shared file system). Rank 0
writes them into its ``OUT/.arms`` and runs the rest of the A/B evaluation as one process would, reading every
shared batch back: the passes that decode arm by arm, judging, statistics, continuous outcomes, the report. A
batch is the same prompts and the same decoding whoever decodes it, so ``generations.jsonl`` equals a
one-process run's byte for byte and ``ab_report.json`` differs only in timings (on CPU; on GPUs, as far as the
kernels are deterministic).

A killed rank is named by the lowest surviving rank with what is kept and how to resume; the next launch, of
any size (one process too), decodes only the batches still missing. ``--device auto`` (one model spread over
every GPU) is one process's way to use several GPUs and is refused with several processes.

Example:
    >>> deal(World(0, 1), {"shared sft 1a batch": [0, 1, 2, 3, 4]})       # one process: every batch
    {'shared sft 1a batch': [0, 1, 2, 3, 4]}
    >>> mine = {"shared sft 1a batch": [1, 2, 4, 6, 7]}                   # rank 1 of 2, of the pending batches
    >>> [b for k, b in enumerate(mine["shared sft 1a batch"]) if World(1, 2).owns(k)]
    [2, 6]
    >>> line = memory_line(World(1, 2), 2 * 1024**3, 1024**3, 2)
    >>> line.split(": ")[1]
    '2.0 GiB of weights for 2 model(s), decoding caches up to 1.0 GiB'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.errors import Interrupted
from probes.distributed import World, joined, machine_device, reported_once, world_from_env

if TYPE_CHECKING:
    from access.units import NeuronSet
    from interventions.config import ABConfig
    from interventions.plan import ABPlan
    from interventions.results import ABReport

_active = World()


class HelperDone(Exception):
    """Raised in a rank other than 0 once its batches are handed over: the rest is rank 0's."""


def active() -> World:
    """The world of the data-parallel ``probe intervene`` running now (one process outside :func:`intervene`)."""
    return _active


@contextmanager
def _serving(world: World) -> Iterator[None]:
    global _active
    previous, _active = _active, world
    try:
        yield
    finally:
        _active = previous


def intervene(
    run: Callable[[ABConfig, Callable[[str], None]], ABReport], config: ABConfig, progress: Callable[[str], None]
) -> ABReport | None:
    """``run(config, progress)`` (a caller of :func:`agreed_plan` and :func:`interventions.ab.run_ab`) in the
    launcher's world: the report on rank 0, None on the others (which print nothing)."""
    world = world_from_env()
    with reported_once(world):
        device = machine_device(config.device, world)  # before the group starts and before anything loads
        config = replace(config, device=device or config.device)
        try:
            with joined(world), _serving(world):
                return run(config, progress if world.is_main else lambda _: None)
        except HelperDone:
            return None
        except KeyboardInterrupt:  # while the processes met (later ones say what was kept)
            raise Interrupted("A/B evaluation stopped before it began; rerun the same command") from None


def agreed_plan(config: ABConfig, selections: dict[str, NeuronSet] | None = None) -> ABPlan:
    """:func:`interventions.plan.plan_ab` on every rank of the world running now: a mistake found on any rank is
    raised on all, before anything is generated."""
    from interventions.plan import plan_ab

    return active().agree(lambda: plan_ab(config, selections))


def deal(world: World, pending: dict[str, list[int]]) -> dict[str, list[int]]:
    """This rank's batches: batch *k* of each pending list (rank 0's, the same on every rank) is rank ``k % N``'s."""
    return {tag: [b for k, b in enumerate(numbers) if world.owns(k)] for tag, numbers in pending.items()}


def hand_over(world: World, bodies: dict[str, dict[str, Any]], put: Callable[[str, dict[str, Any]], None]) -> int:
    """Every rank's finished batches (``key -> body``) to rank 0, which ``put``s the others' in its store;
    returns how many batches rank 0 received."""
    gathered = world.gather(bodies if not world.is_main else {})
    if not world.is_main:
        return 0
    received = 0
    for share in gathered:
        for key, body in share.items():
            put(key, body)
            received += 1
    return received


def memory_line(world: World, weight_bytes: int, cache_bytes: int, n_models: int) -> str:
    """The memory each process needs: every rank holds the models it runs (the pair, or a model and a patch
    source) and its own decoding caches."""
    who = f"each of the {world.size} holds its own copy" if world.distributed else "one process"
    return (
        f"memory per process ({who}): {_size(weight_bytes)} of weights for {n_models} model(s), "
        f"decoding caches up to {_size(cache_bytes)}"
    )


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1024**3:.1f} GiB" if n_bytes >= 1024**3 / 10 else f"{n_bytes / 1024**2:.1f} MiB"
