"""``run_ab``: baseline vs intervened generations on the same prompts, judged, with controls.

The pipeline, in order:

1. resolve the model dir and data file (from the run, or explicit overrides), pick the
   rows (target capability first, then the others as collateral; ``limit`` rows per
   capability, interleaved by task so a small limit still covers every task);
2. resolve the neuron set (file, top K of the run's ranking, or an explicit list) and
   check it against the model;
3. generate the baseline once, then one arm per factor (main, dose sweep, and factor 0
   as the positive control unless disabled), then one arm per placebo set at the main
   factor; every arm uses the same batches and decoding;
4. judge every arm, compute per capability the paired statistics
   (:mod:`interventions.stats`), place the real Δ among the placebo Δs, fill the no-op
   guard; write ``ab_report.json``, ``ab_report.md`` and ``generations.jsonl``.

Example:
    >>> report = run_ab(ABConfig(run_dir="runs/x", capability="multi_turn", placebo=20))   # doctest: +SKIP
    >>> report.main.capability("multi_turn").delta                                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.neuron_sets import NeuronSet
from core.capabilities import Capability
from core.errors import Interrupted, ProbeError
from core.generation import GenerationConfig, Generations
from core.judges import Judge, make_judge
from core.models import load_causal_lm
from core.rows import group_by_capability, read_test_rows, row_location
from core.schema import TestRow
from interventions.arms import ArmStore, fingerprint
from interventions.config import ABConfig
from interventions.generation import ABGenerator, Intervention
from interventions.placebo import placebo_sets
from interventions.results import ABReport, ArmResult, CapabilityResult, build_guard
from interventions.scaling import dtype_noop_fraction
from interventions.scoring import ArmScores, corpus_bleu, score_arm
from interventions.selection import analysed_neuron_set, check_against_model, describe, load_neuron_file, parse_units, ranking_from_run
from interventions.stats import paired_delta, placebo_compare
from probes.hook_points import width

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def resolve_sources(config: ABConfig) -> tuple[Path, Path]:
    """(model_dir, data_file): explicit overrides win, then what the run recorded (the CLI's ``--pair`` fills the rest)."""
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
            raise ProbeError(f"{config.run_dir}: the run does not record a model dir for {config.model!r}; pass --model-dir")
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
    same = [] if not hashes.get("sft") or hashes.get("sft") != hashes.get("dpo") else [
        f"the neuron set was ranked on one model recorded twice (SFT and DPO weights are both {hashes['sft'][:12]}...): "
        "its DPO-SFT discrepancies are noise, so the selected units mean nothing; record a real SFT/DPO pair"]
    return same + _weights_warning(neurons, model, model_dir)


def _weights_warning(neurons: NeuronSet, model: str, model_dir: Path) -> list[str]:
    expected = neurons.model_hashes.get(model)
    if not expected:
        return []
    from core.provenance import weights_sha256

    actual = weights_sha256(model_dir)
    if actual == expected:
        return []
    return [f"the neuron set was ranked on {model} weights {expected[:12]}..., but {model_dir} has weights {actual[:12]}...: "
            "the selected units may not mean the same thing in this model"]


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
        chosen[cap] = interleaved[: config.limit] if config.limit else interleaved
    if not chosen[config.target]:
        raise ProbeError(f"{config.data_file or 'the data file'}: no rows for capability {config.capability!r}")
    unique = sorted({i for indices in chosen.values() for i in indices})
    position = {row: k for k, row in enumerate(unique)}
    return unique, {cap: [position[i] for i in idx] for cap, idx in chosen.items() if idx}


def _scores(arm: ArmScores, cap: Capability, idx: list[int]) -> list[int | None]:
    return [arm.verdicts[i].scores.get(cap) for i in idx]


def capability_result(cap: Capability, target: bool, idx: list[int], base: tuple[Generations, ArmScores],
                      arm: tuple[Generations, ArmScores], n_bootstrap: int, seed: int, with_ci: bool = True) -> CapabilityResult:
    """Paired statistics of one capability for one arm against the baseline (``with_ci=False``: no bootstrap)."""
    before_all, after_all = _scores(base[1], cap, idx), _scores(arm[1], cap, idx)
    pairs = [(b, a) for b, a in zip(before_all, after_all) if b is not None and a is not None]
    stats = paired_delta([b for b, _ in pairs], [a for _, a in pairs], n_resamples=n_bootstrap, seed=seed, with_ci=with_ci)
    return CapabilityResult(
        capability=cap.value, target=target, n_rows=len(idx), n_scored=len(pairs), undecided=len(idx) - len(pairs),
        before=stats.before, after=stats.after, delta=stats.delta, ci_low=stats.ci_low, ci_high=stats.ci_high,
        p_value=stats.mcnemar.p_value, discordant_lost=stats.mcnemar.b, discordant_gained=stats.mcnemar.c,
        rows_changed=sum(base[0].ids[i] != arm[0].ids[i] for i in idx),
        rouge_l_before=float(np.mean([base[1].rouge_l[i] for i in idx])), rouge_l_after=float(np.mean([arm[1].rouge_l[i] for i in idx])),
        bleu_before=float("nan"), bleu_after=float("nan"),
    )


def _with_bleu(result: CapabilityResult, rows: list[TestRow], idx: list[int], base: Generations, arm: Generations) -> CapabilityResult:
    refs = [rows[i].reference for i in idx]
    result.bleu_before = corpus_bleu([base.texts[i] for i in idx], refs)
    result.bleu_after = corpus_bleu([arm.texts[i] for i in idx], refs)
    return result


class _Runner:
    """Holds what every arm shares: model, generator, rows, judge, baseline."""

    def __init__(self, config: ABConfig, progress: Progress, judge: Judge | None) -> None:
        self.config, self.progress = config, progress
        self.model_dir, self.data_file = resolve_sources(config)
        self.neurons = resolve_neurons(config)
        all_rows = read_test_rows(self.data_file)
        unique, self.groups = select_rows(all_rows, config)
        self.rows = [all_rows[i] for i in unique]
        self.row_ids = unique
        self.model, self.tokenizer = load_causal_lm(self.model_dir, "--model-dir", dtype=getattr(torch, config.dtype), device=config.device, eval_mode=True)
        units = [(n.layer, n.unit) for n in self.neurons.neurons]
        self.store = ArmStore(config.out_dir, fingerprint(config.to_dict(), self.model_dir, self.data_file, self.row_ids, units))
        source = f"--units {config.units}" if config.units else str(config.neurons or "the run's neuron set")
        check_against_model(self.neurons, self.model, source)
        self.torch_dtype = self.model.dtype
        # drawn before any generation, so an impossible placebo fails in seconds, not after every arm;
        # none for a factor that is a no-op in the dtype (the placebo arm is skipped, see placebo())
        wanted = config.placebo if dtype_noop_fraction(config.factor, self.torch_dtype) > 0.0 else 0
        self.placebo_sets = placebo_sets(self.neurons, width(self.model, self.neurons.hook), wanted, config.seed)
        self.judge = judge or make_judge(config.judge, config.judge_client())
        gen_config = GenerationConfig(max_new_tokens=config.max_new_tokens, batch_size=config.batch_size, do_sample=config.do_sample,
                                      temperature=config.temperature, top_p=config.top_p, seed=config.seed)
        self.generator = ABGenerator(self.model, self.tokenizer, self.rows, gen_config, config.backend, where=self._row_name)
        self.total_arms = 1 + len(config.factors) + len(self.placebo_sets)

    def start(self) -> None:
        """Generate (or read back) and judge the baseline."""
        self.progress(f"baseline: {len(self.rows)} prompts")
        generations = self._generate("baseline", None)
        self.base = (generations, score_arm(self.judge, self.rows, generations.texts))

    def _generate(self, name: str, intervention: Intervention | None) -> Generations:
        kept = self.store.get(name)
        if kept is not None:
            self.progress(f"{name}: read back from an interrupted run")
            return kept
        return self.store.put(name, self.generator.run(intervention))

    def kept(self) -> str:
        """What an interrupt leaves on disk, and how to resume from it (one line)."""
        done = self.store.finished()
        if not done:
            return "no generation arm had finished, nothing kept; rerun the same command"
        out = self.config.out_dir
        return (f"{len(done)} of {self.total_arms} generation arms finished and kept in {self.store.root}; "
                f"rerun with the same options and --out {out} to resume from them")

    def _row_name(self, i: int) -> str:
        """Row ``i`` of the generated rows by its data file and line."""
        return row_location(self.row_ids[i], self.data_file)

    def arm(self, name: str, neurons: NeuronSet, factor: float) -> tuple[Generations, ArmScores]:
        generations = self._generate(name, Intervention(neurons, factor))
        return generations, score_arm(self.judge, self.rows, generations.texts)

    def results(self, arm: tuple[Generations, ArmScores], full: bool = True) -> list[CapabilityResult]:
        """Per-capability results; ``full=False`` (placebo arms) skips the bootstrap CI and BLEU."""
        out = []
        for cap, idx in self.groups.items():
            result = capability_result(cap, cap == self.config.target, idx, self.base, arm, self.config.n_bootstrap, self.config.seed, full)
            out.append(_with_bleu(result, self.rows, idx, self.base[0], arm[0]) if full else result)
        return out

    def arm_result(self, factor: float, role: str) -> tuple[ArmResult, tuple[Generations, ArmScores]]:
        self.progress(f"{role} arm: factor {factor!r} on {len(self.neurons)} units")
        arm = self.arm(f"factor_{factor!r}", self.neurons, factor)
        rows_changed = sum(a != b for a, b in zip(arm[0].ids, self.base[0].ids))
        guard = build_guard(factor, self.config.dtype, dtype_noop_fraction(factor, self.torch_dtype),
                            arm[0].hook_stats, len(self.rows), rows_changed)
        return ArmResult(factor, role, self.results(arm), guard, arm[0].seconds, arm[0].n_tokens), arm

    def placebo(self, main: ArmResult) -> dict[str, Any]:
        cfg = self.config
        if main.guard.factor_rounds_to_one:
            self.progress(f"placebo skipped: factor {cfg.factor!r} is a no-op in {cfg.dtype}")
            return {"n_sets": 0, "seed": cfg.seed, "factor": cfg.factor, "sets": [], "skipped": f"factor is a no-op in {cfg.dtype}"}
        sets = self.placebo_sets
        deltas: dict[str, list[float]] = {cap.value: [] for cap in self.groups}
        changed: dict[str, list[int]] = {cap.value: [] for cap in self.groups}
        for k, neurons in enumerate(sets):
            self.progress(f"placebo {k + 1}/{len(sets)}")
            for result in self.results(self.arm(f"placebo_{k}", neurons, cfg.factor), full=False):
                deltas[result.capability].append(result.delta)
                changed[result.capability].append(result.rows_changed)
        for result in main.capabilities:
            if sets:
                cmp = placebo_compare(result.delta, deltas[result.capability])
                result.placebo = {"percentile": cmp.percentile, "p_empirical": cmp.p_empirical, "deltas": cmp.placebo,
                                  "rows_changed_mean": float(np.mean(changed[result.capability]))}
        return {"n_sets": len(sets), "seed": cfg.seed, "factor": cfg.factor, "sets": [[[n.layer, n.unit] for n in s.neurons] for s in sets]}


def run_ab(config: ABConfig, progress: Progress | None = None, judge: Judge | None = None) -> ABReport:
    """Run the whole A/B evaluation described by ``config``; write files if ``config.out_dir``.

    ``progress`` receives one line per stage; ``judge`` replaces the judge named in the
    config (any object with the :class:`~core.judges.base.Judge` protocol).
    Ctrl-C raises :class:`~core.errors.Interrupted` naming the arms kept for a resume
    (see :mod:`interventions.arms`).
    """
    runner: _Runner | None = None
    try:
        runner = _Runner(config, progress or _quiet, judge)
        runner.start()
        return _evaluate(runner)
    except (KeyboardInterrupt, Interrupted) as exc:
        kept = runner.kept() if runner is not None else "no generation arm had finished, nothing kept; rerun the same command"
        cause = f" ({exc})" if isinstance(exc, Interrupted) else ""
        raise Interrupted(f"A/B evaluation stopped{cause}: {kept}") from None


def _evaluate(runner: _Runner) -> ABReport:
    config = runner.config
    arms: list[ArmResult] = []
    generations: dict[float, Generations] = {}
    for k, factor in enumerate(config.factors):
        role = "main" if k == 0 else ("control" if factor == 0.0 and factor not in config.doses else "dose")
        result, arm = runner.arm_result(factor, role)
        arms.append(result)
        generations[factor] = arm[0]
    placebo = runner.placebo(arms[0])
    report = ABReport(
        capability=config.capability, model=config.model, model_dir=str(runner.model_dir), data_file=str(runner.data_file),
        dtype=config.dtype, backend=config.backend, judge=runner.judge.name, neurons=describe(runner.neurons),
        baseline={"seconds": runner.base[0].seconds, "tokens": runner.base[0].n_tokens, "rows": len(runner.rows)},
        main=arms[0], doses=arms[1:], placebo=placebo, config=config.to_dict(),
        warnings=provenance_warnings(runner.neurons, config.model, runner.model_dir) + list(arms[0].guard.flags)
        + [fault for arm in arms for fault in arm.guard.faults],
    )
    if config.out_dir is not None:
        from interventions.report import write_report

        write_report(report, runner.rows, runner.row_ids, runner.base, generations, Path(config.out_dir))
        runner.store.clear()
    return report
