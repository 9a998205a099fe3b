"""Data-parallel ``probe intervene``: the shared engine's batches of prompts dealt to the processes of one launch.

``torchrun --nproc-per-node N -m probe_cli intervene ...`` (or ``accelerate launch``) starts N copies of the
command; :func:`intervene` places each in the world of :mod:`probes.distributed` (the one ``probe run`` uses:
its store, its agreement, its one-line failures), plans the run on every rank (:func:`interventions.plan.plan_ab`,
the pair loaded on each rank's device; a mistake found on any rank is said on all, before anything is generated) and
runs :func:`interventions.ab.run_ab` on every rank in that world. There, every pass that decodes in shared batches
(:mod:`access.shared_generation`) is split by one plan (:func:`interventions.passes.deal`): rank 0 lists the batches
of prompts not yet kept in ``OUT/.arms`` (:mod:`interventions.arms`), in order, and batch *k* of that pending list is
rank ``k % N``'s. Each rank decodes its batches, keeping each finished one as a one-process run does, then hands them
to rank 0 (:func:`interventions.passes.hand_over`, over the gloo group, so ``--out`` need not be a shared file
system). Rank 0 writes them into its ``OUT/.arms`` and runs the rest of the A/B evaluation as one process would,
reading every shared batch back: the passes that decode arm by arm, judging, statistics, continuous outcomes, the
report. A batch is the same prompts and the same decoding whoever decodes it, so ``generations.jsonl`` equals a
one-process run's byte for byte and ``ab_report.json`` differs only in timings (on CPU; on GPUs, as far as the
kernels are deterministic).

A killed rank is named by the lowest surviving rank with what is kept and how to resume; the next launch, of
any size (one process too), decodes only the batches still missing. ``--device auto`` (one model spread over
every GPU) is one process's way to use several GPUs and is refused with several processes.

Example:
    >>> world_from_env().size   # outside a launcher: one process, which plans and runs everything
    1
    >>> report = intervene(ABConfig(run_dir="runs/x", capability="multi_turn"), print)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from core.errors import Interrupted
from interventions.ab import run_ab
from interventions.passes import HelperDone
from interventions.select_compare import compare_selections
from probes.distributed import joined, machine_device, reported_once, world_from_env

if TYPE_CHECKING:
    from interventions.config import ABConfig
    from interventions.results import ABReport


def _quiet(_: str) -> None:
    return None


def intervene(config: ABConfig, progress: Callable[[str], None]) -> ABReport | None:
    """``config``'s A/B run (``--select``: its comparison of selection rules, :mod:`interventions.select_compare`)
    in the launcher's world, planned on every rank first: the report on rank 0, None on the others (which print
    nothing)."""
    from interventions.plan import plan_ab

    world = world_from_env()
    with reported_once(world):
        device = machine_device(config.device, world)  # before the group starts and before anything loads
        config = replace(config, device=device or config.device)
        say = progress if world.is_main else _quiet
        try:
            with joined(world):
                if config.select:
                    return compare_selections(config, say, world=world)
                return run_ab(world.agree(lambda: plan_ab(config)), say, world=world)
        except HelperDone:
            return None
        except KeyboardInterrupt:  # while the processes met (later ones say what was kept)
            raise Interrupted("A/B evaluation stopped before it began; rerun the same command") from None
