"""The generation passes of an A/B run, and the functions that share, decode, keep and resume them.

A :class:`Pass` is one model generating every planned row with a tuple of edits: each model's baseline (no edits),
each arm, each of its placebo sets. :func:`plan_passes` lists them from a plan (:class:`interventions.plan.ABPlan`);
a pass's key holds the hash of its edits, not its rule, so two rules that make the same pass share it. Where the
engine allows, :func:`share` decodes each model's passes together in shared batches of prompts
(:mod:`access.shared_generation`), keeping every finished batch in the arm store (:mod:`interventions.arms`), and
:func:`share_parallel` deals those batches to the ranks of a data-parallel run (:mod:`interventions.parallel`).
:func:`decode` then gives a pass's generations: decoded in shared batches, read back from an interrupted run, or
generated alone (a patch, sampling, the nnsight backend) and kept whole. :func:`kept` says what an interrupt leaves on
disk and how to resume. Every function reads the plan and the store it is given; what they share while a run goes on
is a :class:`Ledger`.

A data-parallel run (:mod:`interventions.parallel`) deals the batches not yet kept to its ranks (:func:`deal`) and
hands each rank's finished ones to rank 0 (:func:`hand_over`), which runs the rest.

Example:
    >>> baseline = Pass("baseline sft", "sft", (), "baseline")
    >>> baseline.name, store_key("baseline sft", ())
    ('baseline sft', 'baseline sft')
    >>> Ledger(total=4).left(), minutes(30.0), minutes(600.0)
    ('', '30 s', '10 min')
    >>> deal(World(0, 1), {"shared sft 1a batch": [0, 1, 2, 3, 4]})       # one process: every batch
    {'shared sft 1a batch': [0, 1, 2, 3, 4]}
    >>> mine = {"shared sft 1a batch": [1, 2, 4, 6, 7]}                   # rank 1 of 2, of the pending batches
    >>> [b for k, b in enumerate(mine["shared sft 1a batch"]) if World(1, 2).owns(k)]
    [2, 6]
    >>> passes = plan_passes(plan_ab(ABConfig(run_dir="runs/x", capability="multi_turn")))  # doctest: +SKIP
    >>> [(p.key, p.role) for p in passes][:2]                                                  # doctest: +SKIP
    [('baseline dpo', 'baseline'), ('scale 0.999999 1f0c…', 'arm')]
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.edited_generation import ABGenerator
from access.edits import Edit, site_edits
from access.generation import Generations
from access.hook_points import attach
from access.shared_generation import SharedDecoder, pass_unshareable, unshareable
from core.rows import row_location
from interventions.arms import ArmStore, fingerprint, made_by
from probes.distributed import World

if TYPE_CHECKING:
    from access.drivers.base import SiteEdits
    from interventions.plan import ABPlan
    from interventions.recipes import Arm

Progress = Callable[[str], None]  # where a run says what it is doing, one line at a time
Shared = list[tuple[str, "SiteEdits | None"]]  # one model's passes that decode together: (store key, compiled edits)


@dataclass(frozen=True)
class Pass:
    """One generation pass: ``model`` generates every planned row with ``edits``."""

    key: str  # its name in the arm store: "baseline sft", or the arm's name and the hash of its edits
    model: str  # the model that generates: "sft" or "dpo"
    edits: tuple[Edit, ...]  # none: the model's baseline
    role: str  # "baseline" | "arm" | "placebo"

    @property
    def name(self) -> str:
        """The pass's name in progress lines: its key without the hash of its edits."""
        return self.key.rsplit(" ", 1)[0] if self.edits else self.key


def edits_key(edits: tuple[Edit, ...]) -> str:
    """The hash of ``edits``' fingerprints: the same edits, the same pass."""
    return hashlib.sha256("".join(e.fingerprint() for e in edits).encode()).hexdigest()[:16]


def store_key(name: str, edits: tuple[Edit, ...]) -> str:
    """A pass's key in the arm store: its name, and for an edited pass the hash of its edits."""
    return name if not edits else f"{name} {edits_key(edits)}"


def arm_passes(arm: Arm) -> list[Pass]:
    """The arm's pass, then its placebo sets' passes."""
    return [
        Pass(store_key(arm.name, arm.edits), arm.model, arm.edits, "arm"),
        *(
            Pass(store_key(f"{arm.name} placebo {k}", edits), arm.model, edits, "placebo")
            for k, edits in enumerate(arm.placebo_edits)
        ),
    ]


def plan_passes(plan: ABPlan) -> list[Pass]:
    """Every generation pass of ``plan``, each once: each loaded model's baseline, each arm, each placebo arm."""
    named = [Pass(f"baseline {name}", name, (), "baseline") for name in plan.models]
    named += [one for arm in plan.arms for one in arm_passes(arm)]
    return list({one.key: one for one in named}.values())


def minutes(seconds: float) -> str:
    """A duration as progress lines say it."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


@dataclass
class Ledger:
    """How far a run's passes are: what the shared batches decoded, and the pace of the passes generated alone."""

    total: int  # the run's passes
    done: int = 0  # passes started, read back or generated
    generated: list[float] = field(default_factory=list)  # seconds of each pass generated in this process
    decoded: dict[str, Generations] = field(default_factory=dict)  # passes decoded in shared batches or ahead, by key

    def left(self) -> str:
        """The time the passes not yet run should take at the pace of those generated so far ("" before the first)."""
        if not self.generated:
            return ""
        pace = sum(self.generated) / len(self.generated)
        return f"; about {minutes((self.total - self.done) * pace)} left"


def generators(plan: ABPlan) -> dict[str, ABGenerator]:
    """Per loaded model, its generator of the planned rows, at the run's one seed."""
    config = plan.config
    settings = replace(config.generation, seed=config.seed)

    def where(i: int) -> str:  # row i of the generated rows, by its data file and line
        return row_location(plan.row_ids[i], plan.data_file)

    return {
        name: ABGenerator(model, plan.tokenizer, plan.rows, settings, config.backend, where=where)
        for name, model in plan.models.items()
    }


def arm_store(plan: ABPlan) -> ArmStore:
    """The store of the run's finished passes and batches, under the fingerprint of everything they depend on."""
    config = plan.config
    units = [(n.layer, n.unit) for n in plan.neurons.neurons]
    # the device's kind, not its number: the ranks of a data-parallel run keep batches for each other
    settings = config.to_dict() | {"device": plan.models[config.model].device.type}
    dirs = list(plan.pool.dirs.values())
    key = fingerprint(settings, dirs, plan.data_file, plan.row_ids, units)
    return ArmStore(config.out_dir, key, made_by(plan.pool.dirs, plan.tokenizer, plan.row_ids))


def decode(one: Pass, generator: ABGenerator, store: ArmStore, ledger: Ledger, progress: Progress) -> Generations:
    """The pass's generations: decoded in shared batches (or ahead of its turn), read back from an interrupted run, or
    generated now and kept."""
    ledger.done += 1
    if one.key in ledger.decoded:
        return ledger.decoded[one.key]
    return _generated(one, generator, store, ledger, progress)


def decode_ahead(one: Pass, generator: ABGenerator, store: ArmStore, ledger: Ledger, progress: Progress) -> Generations:
    """:func:`decode` before the pass's turn, not counted as done: its generations are kept in the ledger, where its
    turn reads them."""
    if one.key not in ledger.decoded:
        progress(f"{one.name}: decoded ahead of its turn")
        ledger.decoded[one.key] = _generated(one, generator, store, ledger, progress)
    return ledger.decoded[one.key]


def _generated(one: Pass, generator: ABGenerator, store: ArmStore, ledger: Ledger, progress: Progress) -> Generations:
    """The pass's generations read back from an interrupted run, or generated now and kept."""
    kept_pass = store.get(one.key)
    if kept_pass is not None:
        progress(f"{one.name}: read back from an interrupted run")
        return kept_pass
    generations = store.put(one.key, generator.run(one.edits or None))
    ledger.generated.append(generations.seconds)
    return generations


def kept(store: ArmStore, total: int, out_dir: str | Path | None) -> str:
    """What an interrupt leaves on disk, and how to resume from it (one line)."""
    done = store.finished()
    if not done:
        return "no generation arm had finished, nothing kept; rerun the same command"
    batches = sum(name.startswith("shared_") for name in done)
    what = [f"{batches} batch(es) of prompts decoded for every shared pass"] if batches else []
    what += [f"{len(done) - batches} of {total} generation passes"] if len(done) > batches else []
    return (
        f"{' and '.join(what)} finished and kept in {store.root}; "
        f"rerun with the same options and --out {out_dir} to resume from them"
    )


def shared_jobs(plan: ABPlan, passes: Sequence[Pass], progress: Progress) -> list[tuple[str, Shared]]:
    """Per model, its passes that decode in shared batches; the model's others decode arm by arm."""
    by_model: dict[str, Shared] = {}
    for one in passes:
        compiled = site_edits(plan.pool.model(one.model), one.edits) if one.edits else None
        by_model.setdefault(one.model, []).append((one.key, compiled))
    config, jobs = plan.config, []
    for name, every in by_model.items():
        reasons = {key: pass_unshareable(plan.models[name], compiled) for key, compiled in every}
        shared = [(key, compiled) for key, compiled in every if reasons[key] is None]
        reason = unshareable(plan.models[name], config.generation.do_sample, config.backend)
        if reason is not None:
            progress(f"{name} model: {reason}")
            continue
        if len(shared) < len(every):
            progress(
                f"{name} model: {len(every) - len(shared)} pass(es) decode arm by arm: "
                f"{next(why for why in reasons.values() if why)}"
            )
        jobs.append((name, shared))
    return jobs


def _decoder(plan: ABPlan, generator: ABGenerator, name: str, shared: Shared) -> tuple[SharedDecoder, str]:
    """The shared decoder of ``name``'s passes, and the store key of its batches (``TAG K``)."""
    decoder = SharedDecoder(generator.generator, plan.config.max_batch_tokens, attach)
    tag = f"shared {name} {hashlib.sha256(' '.join(key for key, _ in shared).encode()).hexdigest()[:16]} batch"
    return decoder, tag


@dataclass
class _Pace:
    """The shared batches' progress over every model's passes: rows decoded, and the seconds they took."""

    total: int
    done: int = 0
    seconds: float = 0.0


def share(
    plan: ABPlan,
    passes: Sequence[Pass],
    gens: dict[str, ABGenerator],
    store: ArmStore,
    ledger: Ledger,
    progress: Progress,
) -> None:
    """Decode each model's shareable passes together (:mod:`access.shared_generation`) into ``ledger.decoded``,
    keeping each finished batch in ``store``; the rest go arm by arm (:func:`decode`)."""
    jobs = shared_jobs(plan, passes, progress)
    pace = _Pace(sum(len(shared) for _, shared in jobs) * len(plan.rows))
    for name, shared in jobs:
        decoder, tag = _decoder(plan, gens[name], name, shared)
        compiled = [c for _, c in shared]
        progress(
            f"{name} model: {len(shared)} passes decode together in {len(decoder.batches)} batches of "
            f"prompts; {decoder.describe(compiled)}"
        )
        progress(
            f"estimated time: about {minutes(decoder.estimate_seconds(compiled))} "
            "(at the pace of one timed prompt batch, every row decoding to the token limit)"
        )
        results = decoder.run(
            compiled,
            _batch_line(name, len(shared), pace, progress),
            kept=lambda b, tag=tag: store.get_body(f"{tag} {b}"),  # type: ignore[misc]  # the loop's tag, bound now
            keep=lambda b, body, tag=tag: store.put_body(f"{tag} {b}", body),  # type: ignore[misc]
        )
        ledger.decoded.update({key: generations for (key, _), generations in zip(shared, results, strict=True)})


def _batch_line(
    name: str, n_passes: int, pace: _Pace, progress: Progress
) -> Callable[[int, int, int, float, bool], None]:
    """The progress line of each finished batch of ``name``'s shared passes, with the time left at the pace so far."""

    def done(batches: int, total: int, rows: int, seconds: float, read_back: bool) -> None:
        pace.done += rows * n_passes
        pace.seconds += 0.0 if read_back else seconds
        left = ""
        if pace.seconds:
            rate = pace.seconds / pace.done
            left = f", about {minutes((pace.total - pace.done) * rate)} left"
        share = pace.done / max(1, pace.total)
        bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
        progress(
            f"{name} model: batch {batches}/{total}{', read back' if read_back else ''} [{bar}] "
            f"{share:.0%} of all passes' rows{left}"
        )

    return done


class HelperDone(Exception):
    """Raised in a rank other than 0 once its batches are handed over: the rest is rank 0's."""


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


def share_parallel(
    plan: ABPlan,
    passes: Sequence[Pass],
    gens: dict[str, ABGenerator],
    store: ArmStore,
    world: World,
    progress: Progress,
) -> None:
    """Data-parallel: decode this rank's batches of every shared pass (dealt by :func:`deal`) and hand them to rank
    0's store; a rank other than 0 then stops (:class:`HelperDone`)."""
    jobs = [(*_decoder(plan, gens[name], name, shared), shared) for name, shared in shared_jobs(plan, passes, progress)]
    budgets = world.gather([(decoder.max_batch_tokens, decoder.max_cache_bytes) for decoder, _, _ in jobs])
    for k, (decoder, _, _) in enumerate(jobs):  # one plan of forwards for all ranks: the smallest device's budgets
        decoder.max_batch_tokens = min(budget[k][0] for budget in budgets)
        decoder.max_cache_bytes = min(budget[k][1] for budget in budgets)
    pending = world.on_main(
        lambda: {tag: [b for b in range(len(d.batches)) if store.get_body(f"{tag} {b}") is None] for d, tag, _ in jobs}
    )
    mine = deal(world, pending)
    progress(
        f"{world.size} processes share {sum(map(len, pending.values()))} batches of prompts not yet kept "
        f"(batch k of that list is rank k % {world.size}'s); rank 0 decodes {sum(map(len, mine.values()))}"
    )
    bodies: dict[str, dict[str, Any]] = {}

    def read(key: str) -> dict[str, Any] | None:
        body = store.get_body(key)
        if body is not None:
            bodies[key] = body
        return body

    def keep(key: str, body: dict[str, Any]) -> None:
        store.put_body(key, body)
        bodies[key] = body

    for decoder, tag, shared in jobs:
        decoder.run(
            [compiled for _, compiled in shared],
            lambda number, total, *_: progress(f"rank 0: batch {number}/{total} decoded"),
            kept=lambda b, tag=tag: read(f"{tag} {b}"),  # type: ignore[misc]  # the loop's tag, bound now
            keep=lambda b, body, tag=tag: keep(f"{tag} {b}", body),  # type: ignore[misc]
            only=set(mine[tag]),
        )
    received = hand_over(world, bodies, store.put_body)
    if not world.is_main:
        raise HelperDone
    progress(f"rank 0 received {received} batches from the other ranks; the rest runs on rank 0")
