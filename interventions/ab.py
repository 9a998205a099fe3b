"""``run_ab``: baseline vs intervened generations on the same prompts, judged, with controls.

The pipeline, in order:

1. resolve the model dir and data file (from the run, or explicit overrides), pick the
   rows (the target capability, and with ``collateral`` the others after it; ``limit`` rows per
   capability and at most ``collateral_rows`` of each other one, interleaved by task so a
   small limit still covers every task);
2. resolve the neuron set (file, top K of the run's ranking, or an explicit list) and
   check it against the model;
3. plan the arms of every ``--edit`` recipe (:mod:`interventions.recipes`: scale with its
   doses and positive control, mean-ablation, patching both ways, steering) and draw their
   placebo arms, checking every edit against its model before anything is generated;
4. generate each needed model's baseline once, then every arm and its placebo arms; every
   arm uses the same batches and decoding as its baseline;
5. judge every arm, compute per capability the paired statistics against the baseline of
   the model it ran on (:mod:`interventions.stats`), place each arm's Δ among its placebo
   Δs, fill the no-op guard; write the report and the generations (:mod:`interventions.report`).

Example:
    >>> neurons = resolve_neurons(ABConfig(run_dir="/no/run", capability="multi_turn", units="20:7,21:3"))
    >>> neurons.hook, [(n.layer, n.unit) for n in neurons.neurons]   # --units wins over the run's neuron set
    ('mlp_out', [(20, 7), (21, 3)])
    >>> report = run_ab(ABConfig(run_dir="runs/x", capability="multi_turn", placebo=20))   # doctest: +SKIP
    >>> report.main.capability("multi_turn").effect.delta                                   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from access.drivers.base import SiteEdits
from access.edited_generation import ABGenerator
from access.edits import Edit, site_edits
from access.generation import Generations
from access.hook_points import attach
from access.shared_generation import SharedDecoder, pass_unshareable, unshareable
from access.units import NeuronSet, check_against_model
from core.capabilities import Capability
from core.errors import Interrupted, ProbeError
from core.judges import Judge, make_judge
from core.models import check_same_tokenizer, load_causal_lm
from core.rows import group_by_capability, read_test_rows, row_location
from core.schema import TestRow
from interventions.arms import ArmStore, fingerprint
from interventions.config import ABConfig
from interventions.recipes import Arm, RecipeSettings, RunData, draw_placebos, other, plan_arms
from interventions.results import (
    ABReport,
    ArmPlacebo,
    ArmResult,
    BaselinePass,
    CapabilityResult,
    NoOpGuard,
    NoPlacebo,
    PlaceboDrawn,
    PlaceboRank,
    PlaceboSkipped,
    build_guard,
)
from interventions.scoring import ArmScores, corpus_bleu, score_arm
from interventions.selection import (
    analysed_neuron_set,
    describe,
    load_neuron_file,
    merged,
    parse_units,
    ranking_from_run,
)
from interventions.stats import paired_delta, placebo_compare

if TYPE_CHECKING:
    from transformers import PreTrainedModel

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def resolve_source_dir(config: ABConfig) -> Path:
    """The other model of the pair (the patch source): ``source_dir``, else the run's."""
    name = other(config.model)
    source = config.source_dir
    if source is None and config.run_dir is not None:
        from probes.store import RunReader

        with RunReader(config.run_dir) as run:
            source = run.model_info(name).get("model_dir") or run.settings.model_dir(name)
    if not source:
        raise ProbeError(f"--edit patch needs the {name} model: give a run directory that records it, or --source-dir")
    if not Path(source).is_dir():
        raise ProbeError(f"{source}: model directory not found (the {name} model, the patch source); pass --source-dir")
    return Path(source)


def resolve_sources(config: ABConfig) -> tuple[Path, Path]:
    """(model_dir, data_file): explicit overrides win, then what the run recorded (``--pair`` fills the rest)."""
    model_dir, data_file = config.model_dir, config.data_file
    if config.run_dir is None and (model_dir is None or data_file is None):
        raise ProbeError("an intervention needs a run directory, or --model-dir and --data")
    if config.run_dir is not None and (model_dir is None or data_file is None):
        from probes.store import RunReader

        with RunReader(config.run_dir) as run:
            info, settings = run.model_info(config.model), run.settings
        model_dir = model_dir or info.get("model_dir") or settings.model_dir(config.model)
        data_file = data_file or settings.data_file
        if not model_dir:
            raise ProbeError(
                f"{config.run_dir}: the run does not record a model dir for {config.model!r}; pass --model-dir"
            )
        if not data_file:
            raise ProbeError(f"{config.run_dir}: the run does not record its data file; pass --data")
    assert model_dir is not None and data_file is not None
    if not Path(model_dir).is_dir():
        raise ProbeError(f"{model_dir}: model directory not found (model {config.model!r}); pass --model-dir")
    return Path(model_dir), Path(data_file)


def resolve_neurons(config: ABConfig) -> NeuronSet:
    """The neuron set the config names (before checking it against a model)."""
    if config.units is not None:
        return parse_units(config.units, config.hook)
    if config.neurons is not None:
        return load_neuron_file(config.neurons, config.top_k)
    assert config.run_dir is not None
    if config.top_k is not None:
        return ranking_from_run(config.run_dir, config.capability, config.hook, config.top_k)
    return analysed_neuron_set(config.run_dir, config.capability, config.hook)


def provenance_warnings(neurons: NeuronSet, model: str, model_dir: Path) -> list[str]:
    """Warnings when the neuron set was ranked on a model compared with itself, or on other weights than
    the model intervened on."""
    hashes = neurons.model_hashes
    same = (
        []
        if not hashes.get("sft") or hashes.get("sft") != hashes.get("dpo")
        else [
            "the neuron set was ranked on one model recorded twice (SFT and DPO weights are both "
            f"{hashes['sft'][:12]}...): its DPO-SFT discrepancies are noise, so the selected units mean nothing; "
            "record a real SFT/DPO pair"
        ]
    )
    return same + _weights_warning(neurons, model, model_dir)


def _weights_warning(neurons: NeuronSet, model: str, model_dir: Path) -> list[str]:
    expected = neurons.model_hashes.get(model)
    if not expected:
        return []
    from core.provenance import weights_sha256

    actual = weights_sha256(model_dir)
    if actual == expected:
        return []
    return [
        f"the neuron set was ranked on {model} weights {expected[:12]}..., "
        f"but {model_dir} has weights {actual[:12]}...: the selected units may not mean the same thing in this model"
    ]


def select_rows(rows: list[TestRow], config: ABConfig) -> tuple[list[int], dict[Capability, list[int]]]:
    """Row indices to generate, and per capability the indices (into that list) it is scored on."""
    wanted = [config.target] + ([c for c in Capability if c != config.target] if config.collateral else [])
    groups = group_by_capability(rows, wanted)
    chosen: dict[Capability, list[int]] = {}
    for cap in wanted:
        by_task: dict[str, list[int]] = {}
        for index, row in groups[cap]:
            by_task.setdefault(row.task, []).append(index)
        interleaved = [i for group in zip_longest(*by_task.values()) for i in group if i is not None]
        limits = [n for n in (config.limit, None if cap == config.target else config.collateral_rows) if n is not None]
        chosen[cap] = interleaved[: min(limits)] if limits else interleaved
    if not chosen[config.target]:
        raise ProbeError(f"{config.data_file or 'the data file'}: no rows for capability {config.capability!r}")
    unique = sorted({i for indices in chosen.values() for i in indices})
    position = {row: k for k, row in enumerate(unique)}
    return unique, {cap: [position[i] for i in idx] for cap, idx in chosen.items() if idx}


def _scores(arm: ArmScores, cap: Capability, idx: list[int]) -> list[int | None]:
    return [arm.verdicts[i].scores.get(cap) for i in idx]


def capability_result(
    cap: Capability,
    target: bool,
    idx: list[int],
    base: tuple[Generations, ArmScores],
    arm: tuple[Generations, ArmScores],
    n_bootstrap: int,
    seed: int,
    with_ci: bool = True,
) -> CapabilityResult:
    """Paired statistics of one capability for one arm against the baseline (``with_ci=False``: no bootstrap)."""
    before_all, after_all = _scores(base[1], cap, idx), _scores(arm[1], cap, idx)
    pairs = [(b, a) for b, a in zip(before_all, after_all, strict=True) if b is not None and a is not None]
    effect = paired_delta(
        [b for b, _ in pairs], [a for _, a in pairs], n_resamples=n_bootstrap, seed=seed, with_ci=with_ci
    )
    return CapabilityResult(
        capability=cap.value,
        target=target,
        n_rows=len(idx),
        undecided=len(idx) - len(pairs),
        effect=effect,
        rows_changed=sum(base[0].ids[i] != arm[0].ids[i] for i in idx),
        rouge_l_before=float(np.mean([base[1].rouge_l[i] for i in idx])),
        rouge_l_after=float(np.mean([arm[1].rouge_l[i] for i in idx])),
        bleu_before=float("nan"),
        bleu_after=float("nan"),
    )


def _with_bleu(
    result: CapabilityResult, rows: list[TestRow], idx: list[int], base: Generations, arm: Generations
) -> CapabilityResult:
    refs = [rows[i].reference for i in idx]
    result.bleu_before = corpus_bleu([base.texts[i] for i in idx], refs)
    result.bleu_after = corpus_bleu([arm.texts[i] for i in idx], refs)
    return result


class _Runner:
    """Holds what every arm shares: models, generators, rows, judge, baselines, the planned arms."""

    def __init__(
        self, config: ABConfig, progress: Progress, judge: Judge | None, selections: dict[str, NeuronSet] | None = None
    ) -> None:
        self.config, self.progress = config, progress
        self.model_dir, self.data_file = resolve_sources(config)
        self.selections = selections or {"": resolve_neurons(config)}  # rule -> its units ("": the one set)
        self.neurons = self.selections[""] if "" in self.selections else merged(list(self.selections.values()))
        all_rows = read_test_rows(self.data_file)
        unique, self.groups = select_rows(all_rows, config)
        self.rows = [all_rows[i] for i in unique]
        self.row_ids = unique
        self.dirs = {config.model: self.model_dir}
        self.models: dict[str, PreTrainedModel] = {}
        self.tokenizer = self._load(config.model)[1]
        source = f"--units {config.units}" if config.units else str(config.neurons or "the run's neuron set")
        for rule, chosen in self.selections.items():
            check_against_model(chosen, self.models[config.model], f"--select {rule}" if rule else source)
        self.torch_dtype = self.models[config.model].dtype
        self.arms = [
            replace(arm, rule=rule, label=f"{rule}: {arm.label}" if rule else arm.label)
            for rule, chosen in self.selections.items()
            for arm in plan_arms(RunData(recipe_settings(config), chosen, self.model))
        ]
        for arm in self.arms:  # every edit and placebo is checked before any generation, so a mistake costs seconds
            model = self.model(arm.model)
            for edit in arm.edits:
                edit.check(model)
            if not any(e.noop_reason(self.torch_dtype) for e in arm.edits):
                arm.placebo_edits = draw_placebos(arm, model, config.placebo, config.seed)
        self.judge = judge or make_judge(config.judge, config.judge_client())
        self.gen_config = replace(config.generation, seed=config.seed)  # the run's one seed
        self.generators = {
            name: ABGenerator(model, self.tokenizer, self.rows, self.gen_config, config.backend, where=self._row_name)
            for name, model in self.models.items()
        }
        units = [(n.layer, n.unit) for n in self.neurons.neurons]
        self.store = ArmStore(
            config.out_dir, fingerprint(config.to_dict(), list(self.dirs.values()), self.data_file, self.row_ids, units)
        )
        self.baselines: dict[str, tuple[Generations, ArmScores]] = {}
        self.total_passes = len(self.passes())
        self.passes_done = 0  # passes started, read back or generated
        self.generated: list[float] = []  # seconds of each pass generated in this process
        self.pregenerated: dict[str, Generations] = {}  # passes decoded in shared batches, by store key

    def _load(self, name: str) -> tuple[Any, Any]:
        directory = self.dirs.get(name) or resolve_source_dir(self.config)
        model, tokenizer = load_causal_lm(
            directory,
            "--model-dir" if name == self.config.model else "--source-dir",
            dtype=getattr(torch, self.config.dtype),
            device=self.config.device,
            eval_mode=True,
        )
        if self.models:
            check_same_tokenizer(
                self.tokenizer, tokenizer, "the patched model and its source (--edit patch)", (self.config.model, name)
            )
        self.dirs[name], self.models[name] = Path(directory), model
        return model, tokenizer

    def model(self, name: str) -> PreTrainedModel:
        """Model ``name`` of the pair, loaded on first use (the other model is needed only to patch from it)."""
        if name not in self.models:
            self._load(name)
        return self.models[name]

    def start(self) -> None:
        """Generate every pass that decodes in shared batches, then generate (or read back) and judge each baseline."""
        self.progress(
            f"{self.total_passes} generation passes over {len(self.rows)} prompts, "
            f"up to {self.config.generation.max_new_tokens} new tokens each: {len(self.models)} baseline(s), "
            f"{len(self.arms)} arm(s), {self.total_passes - len(self.models) - len(self.arms)} placebo arms"
        )
        if self.config.engine == "shared":
            self._share()
        for name in self.models:
            if f"baseline {name}" not in self.pregenerated:
                self.progress(f"baseline ({name} model): {len(self.rows)} prompts")
            generations = self._generate(f"baseline {name}", name, ())
            self.baselines[name] = (generations, score_arm(self.judge, self.rows, generations.texts))
        alone = sum(key not in self.pregenerated for key, _, _ in self.passes()) - sum(
            f"baseline {m}" not in self.pregenerated for m in self.models
        )
        if alone:
            self.progress(f"{alone} more passes decode arm by arm{self._left()} (a patch pass runs two models)")

    def passes(self) -> list[tuple[str, str, tuple[Edit, ...]]]:
        """(store key, model, edits) of every generation pass: the baselines, each arm, each placebo arm.

        A key holds the hash of the pass's edits, not its rule, so two rules that make the same pass share it."""
        named: list[tuple[str, str, tuple[Edit, ...]]] = [(f"baseline {name}", name, ()) for name in self.models]
        for arm in self.arms:
            named.append((arm.name, arm.model, arm.edits))
            named += [(f"{arm.name} placebo {k}", arm.model, edits) for k, edits in enumerate(arm.placebo_edits)]
        keyed = {(name if not edits else f"{name} {_edits_key(edits)}"): (model, edits) for name, model, edits in named}
        return [(key, model, edits) for key, (model, edits) in keyed.items()]

    def _share(self) -> None:
        """Decode each model's shareable passes together (:mod:`access.shared_generation`); the rest go arm by arm."""
        by_model: dict[str, list[tuple[str, SiteEdits | None]]] = {}
        for key, name, edits in self.passes():
            by_model.setdefault(name, []).append((key, site_edits(self.model(name), edits) if edits else None))
        jobs = []
        for name, passes in by_model.items():
            reasons = {key: pass_unshareable(self.models[name], compiled) for key, compiled in passes}
            shared = [(key, compiled) for key, compiled in passes if reasons[key] is None]
            reason = unshareable(self.models[name], self.config.generation.do_sample, self.config.backend)
            if reason is not None:
                self.progress(f"{name} model: {reason}")
                continue
            if len(shared) < len(passes):
                self.progress(
                    f"{name} model: {len(passes) - len(shared)} pass(es) decode arm by arm: "
                    f"{next(why for why in reasons.values() if why)}"
                )
            jobs.append((name, shared))
        self.shared_total = sum(len(shared) for _, shared in jobs) * len(self.rows)
        self.shared_done, self.shared_seconds = 0, 0.0
        for name, shared in jobs:
            self._decode_shared(name, shared)

    def _decode_shared(self, name: str, shared: list[tuple[str, SiteEdits | None]]) -> None:
        decoder = SharedDecoder(self.generators[name].generator, self.config.max_batch_tokens, attach)
        tag = f"shared {name} {hashlib.sha256(' '.join(key for key, _ in shared).encode()).hexdigest()[:16]} batch"
        self.progress(
            f"{name} model: {len(shared)} passes decode together in {len(decoder.batches)} batches of "
            f"prompts; {decoder.describe([c for _, c in shared])}"
        )
        self.progress(
            f"estimated time: about {_minutes(decoder.estimate_seconds([c for _, c in shared]))} "
            "(at the pace of one timed prompt batch, every row decoding to the token limit)"
        )

        def done(batches: int, total: int, rows: int, seconds: float, read_back: bool) -> None:
            self.shared_done += rows * len(shared)
            self.shared_seconds += 0.0 if read_back else seconds
            left = ""
            if self.shared_seconds:
                pace = self.shared_seconds / self.shared_done
                left = f", about {_minutes((self.shared_total - self.shared_done) * pace)} left"
            share = self.shared_done / max(1, self.shared_total)
            bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
            self.progress(
                f"{name} model: batch {batches}/{total}{', read back' if read_back else ''} [{bar}] "
                f"{share:.0%} of all passes' rows{left}"
            )

        results = decoder.run(
            [compiled for _, compiled in shared],
            done,
            kept=lambda b: self.store.get_body(f"{tag} {b}"),
            keep=lambda b, body: self.store.put_body(f"{tag} {b}", body),
        )
        for (key, _), generations in zip(shared, results, strict=True):
            self.pregenerated[key] = generations

    def _left(self) -> str:
        """The time the passes not yet run should take at the pace of those generated so far ("" before the first)."""
        if not self.generated:
            return ""
        pace = sum(self.generated) / len(self.generated)
        return f"; about {_minutes((self.total_passes - self.passes_done) * pace)} left"

    def _generate(self, name: str, model: str, edits: tuple[Edit, ...]) -> Generations:
        key = name if not edits else f"{name} {_edits_key(edits)}"
        self.passes_done += 1
        if key in self.pregenerated:
            return self.pregenerated[key]
        kept = self.store.get(key)
        if kept is not None:
            self.progress(f"{name}: read back from an interrupted run")
            return kept
        generations = self.store.put(key, self.generators[model].run(edits or None))
        self.generated.append(generations.seconds)
        return generations

    def kept(self) -> str:
        """What an interrupt leaves on disk, and how to resume from it (one line)."""
        done = self.store.finished()
        if not done:
            return "no generation arm had finished, nothing kept; rerun the same command"
        batches = sum(name.startswith("shared_") for name in done)
        what = [f"{batches} batch(es) of prompts decoded for every shared pass"] if batches else []
        what += [f"{len(done) - batches} of {self.total_passes} generation passes"] if len(done) > batches else []
        return (
            f"{' and '.join(what)} finished and kept in {self.store.root}; "
            f"rerun with the same options and --out {self.config.out_dir} to resume from them"
        )

    def _row_name(self, i: int) -> str:
        """Row ``i`` of the generated rows by its data file and line."""
        return row_location(self.row_ids[i], self.data_file)

    def scored(self, name: str, model: str, edits: tuple[Edit, ...]) -> tuple[Generations, ArmScores]:
        generations = self._generate(name, model, edits)
        return generations, score_arm(self.judge, self.rows, generations.texts)

    def results(self, arm: tuple[Generations, ArmScores], model: str, full: bool = True) -> list[CapabilityResult]:
        """Per-capability results against ``model``'s baseline; ``full=False`` (placebo arms)
        skips the bootstrap CI and BLEU."""
        base, out = self.baselines[model], []
        for cap, idx in self.groups.items():
            result = capability_result(
                cap, cap == self.config.target, idx, base, arm, self.config.n_bootstrap, self.config.seed, full
            )
            out.append(_with_bleu(result, self.rows, idx, base[0], arm[0]) if full else result)
        return out

    def arm_result(self, arm: Arm, number: int) -> tuple[ArmResult, Generations]:
        self.progress(
            f"arm {number}/{len(self.arms)}: {arm.label} ({arm.model} model, {len(self.selections[arm.rule])} units)"
            f"{self._left()}"
        )
        generated = self.scored(arm.name, arm.model, arm.edits)
        base = self.baselines[arm.model][0]
        rows_changed = sum(a != b for a, b in zip(generated[0].ids, base.ids, strict=True))
        dtype = self.torch_dtype
        reason = next((r for r in (e.noop_reason(dtype) for e in arm.edits) if r), None)
        guard = build_guard(
            arm.label,
            arm.factor,
            self.config.dtype,
            max(e.changed_fraction(dtype) for e in arm.edits),
            reason,
            generated[0].hook_stats,
            len(self.rows),
            rows_changed,
        )
        capabilities = self.results(generated, arm.model)
        result = ArmResult(
            arm.factor,
            arm.role,
            capabilities,
            guard,
            generated[0].seconds,
            generated[0].n_tokens,
            name=arm.title,
            label=arm.label,
            model=arm.model,
            edits=arm.describe(),
            placebo=self.placebo(arm, guard, capabilities),
        )
        return result, generated[0]

    def placebo(self, arm: Arm, guard: NoOpGuard, capabilities: list[CapabilityResult]) -> ArmPlacebo:
        """The arm's placebo passes; each capability's Δ is ranked among theirs (``capabilities``' ``placebo``)."""
        cfg = self.config
        family = _family(arm)
        if not arm.placebo:
            return NoPlacebo()
        if not arm.placebo_edits:
            why = f"no-op in {cfg.dtype}: {guard.flags[0]}" if guard.flags and cfg.placebo else "--placebo 0"
            return PlaceboSkipped(n_sets=0, seed=cfg.seed, family=family, skipped=why)
        deltas: dict[str, list[float]] = {cap.value: [] for cap in self.groups}
        changed: dict[str, list[int]] = {cap.value: [] for cap in self.groups}
        for k, edits in enumerate(arm.placebo_edits):
            self.progress(f"{arm.title}: placebo {k + 1}/{len(arm.placebo_edits)}{self._left()}")
            for capability in self.results(
                self.scored(f"{arm.name} placebo {k}", arm.model, edits), arm.model, full=False
            ):
                deltas[capability.capability].append(capability.effect.delta)
                changed[capability.capability].append(capability.rows_changed)
        for capability in capabilities:
            cmp = placebo_compare(capability.effect.delta, deltas[capability.capability])
            capability.placebo = PlaceboRank(
                cmp.percentile, cmp.p_empirical, cmp.placebo, float(np.mean(changed[capability.capability]))
            )
        return PlaceboDrawn(
            n_sets=len(arm.placebo_edits),
            seed=cfg.seed,
            family=family,
            factor=arm.factor,
            sets=[
                _placebo_summary(edits[0]) if len(edits) == 1 else [_placebo_summary(e) for e in edits]
                for edits in arm.placebo_edits
            ],
        )


def _family(arm: Arm) -> str:
    kinds = {edit.kind for edit in arm.edits}
    return (
        "random directions of the same norm at the same layers"
        if kinds == {"add"}
        else "random units, same hook point and count per layer"
    )


def _placebo_summary(edit: Edit) -> Any:
    body = edit.describe()
    return body.get("units") if "units" in body else {"layer": body.get("layer"), "norm": body.get("norm")}


def _edits_key(edits: tuple[Edit, ...]) -> str:
    return hashlib.sha256("".join(e.fingerprint() for e in edits).encode()).hexdigest()[:16]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def run_ab(
    config: ABConfig,
    progress: Progress | None = None,
    judge: Judge | None = None,
    *,
    selections: dict[str, NeuronSet] | None = None,
    annotate: Callable[[ABReport], None] | None = None,
) -> ABReport:
    """Run the whole A/B evaluation described by ``config``; write files if ``config.out_dir``.

    ``progress`` receives one line per stage; ``judge`` replaces the judge named in the
    config (any object with the :class:`~core.judges.base.Judge` protocol).
    ``selections`` (rule -> units) replaces the config's neuron set by several: each rule gets
    every arm of the configured edits and its own placebos, and all share one baseline and one set
    of passes (:mod:`interventions.select_compare`); ``annotate`` adds to the report before it is written.
    Ctrl-C raises :class:`~core.errors.Interrupted` naming the arms kept for a resume
    (see :mod:`interventions.arms`).
    """
    runner: _Runner | None = None
    try:
        runner = _Runner(config, progress or _quiet, judge, selections)
        runner.start()
        return _evaluate(runner, annotate)
    except (KeyboardInterrupt, Interrupted) as exc:
        kept = (
            runner.kept()
            if runner is not None
            else "no generation arm had finished, nothing kept; rerun the same command"
        )
        cause = f" ({exc})" if isinstance(exc, Interrupted) else ""
        raise Interrupted(f"A/B evaluation stopped{cause}: {kept}") from None


def _evaluate(runner: _Runner, annotate: Callable[[ABReport], None] | None = None) -> ABReport:
    config = runner.config
    results: list[ArmResult] = []
    generations: dict[str, Generations] = {}
    for number, arm in enumerate(runner.arms, 1):
        result, generated = runner.arm_result(arm, number)
        results.append(result)
        generations[arm.title] = generated
    baselines = {
        name: BaselinePass(g.seconds, g.n_tokens, len(runner.rows)) for name, (g, _) in runner.baselines.items()
    }
    report = ABReport(
        capability=config.capability,
        model=config.model,
        model_dir=str(runner.model_dir),
        data_file=str(runner.data_file),
        dtype=config.dtype,
        backend=config.backend,
        judge=runner.judge.name,
        neurons=describe(runner.neurons),
        baselines=baselines,
        arms=results,
        config=config.to_dict(),
        warnings=provenance_warnings(runner.neurons, config.model, runner.model_dir)
        + [flag for arm in results if arm.role == "main" for flag in arm.guard.flags]
        + [fault for arm in results for fault in arm.guard.faults],
    )
    if annotate is not None:
        annotate(report)
    if config.out_dir is not None:
        from interventions.report import write_report

        write_report(
            report,
            runner.rows,
            runner.row_ids,
            {m: b[0] for m, b in runner.baselines.items()},
            runner.baselines[config.model][1],
            generations,
            Path(config.out_dir),
        )
        runner.store.clear()
    return report


def recipe_settings(config: ABConfig) -> RecipeSettings:
    """The part of ``config`` the arm recipes read."""
    return RecipeSettings(
        edits=tuple(config.edits),
        factors=tuple(config.factors),
        doses=tuple(config.doses),
        model=config.model,
        capability=config.capability,
        run_dir=config.run_dir,
    )
