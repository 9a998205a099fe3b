"""Decide-first and sequential placebo sets (issue 51): both stopping rules (compliance's generations, the continuous
outcomes' teacher-forced passes) are exact over every completion of the undrawn sets, and on tiny pairs (one whose arm
changes generations, one whose outcomes move within their placebos, one with no difference; the planted pair in
tests/test_interventions_outcomes.py) the default design gives every verdict of ``--placebo-generation all`` while
running fewer placebo passes, and a run cut among them resumes."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import asdict, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interventions.ab as ab
from core.decoding import GenerationConfig
from core.errors import Interrupted
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.evidence import MIN_PLACEBO_SETS, NO_EFFECT, UNDEFINED, ArmEvidence, Difference
from interventions.outcome_runs import placed
from interventions.plan import plan_ab
from interventions.results import ABReport, OutcomeResult
from interventions.select_compare import arm_verdict
from interventions.sequential import WAVE, outcome_reading, outcomes_fixed, reading, verdict_fixed
from interventions.stats import placebo_compare
from study.evidence import arm_evidence
from study.verdicts import paper_scaling, units_cause
from tests.support import completions

UNITS = "1:0-15"  # half of the residual stream after block 1: ablating it moves even a random tiny model
N_SETS = 19  # the fewest sets a verdict rests on: the sequential rule applies


def _reachable(final: Callable[[tuple[int, ...]], Hashable], n: int) -> Callable[[tuple[int, ...]], frozenset]:
    """The readings of all ``n`` sets that some completion of the drawn counts reaches: every outcome of every undrawn
    set, walked one set at a time (each completion's reading is ``final`` of its counts)."""

    @cache
    def reachable(counts: tuple[int, ...]) -> frozenset:
        if sum(counts) == n:
            return frozenset({final(counts)})
        more = [tuple(c + (i == j) for j, c in enumerate(counts)) for i in range(len(counts))]
        return frozenset().union(*(reachable(m) for m in more))

    return reachable


@pytest.mark.parametrize(
    ("delta", "nan_possible", "n", "counted"),
    [
        (0.3, False, 20, True),
        (-0.3, False, 20, True),
        (0.0, False, 20, True),
        (0.3, True, 19, True),
        (-0.3, True, 19, False),
    ],
)
def test_the_stopping_rule_is_exact_over_every_completion(
    delta: float, nan_possible: bool, n: int, counted: bool
) -> None:
    """Stopped means the readers' reading of all N sets is the same for every outcome of the undrawn sets, and not
    stopped means some outcome changes it (against, tied, with the arm's Δ, or not finite); the report it leaves then
    reads the same."""
    kinds = [delta + 1.0, delta, delta - 1.0] + ([math.nan] if nan_possible else [])
    reachable = _reachable(lambda counts: reading(delta, completions.values(kinds, counts), n, counted), n)
    for k in range(n):
        for drawn in completions.counts(k, len(kinds)):
            values = completions.values(kinds, drawn)
            outcomes = set(reachable(drawn))
            fixed = verdict_fixed(delta, values, n, nan_possible=nan_possible, counted=counted)
            assert fixed == (len(outcomes) == 1), (drawn, delta)
            if fixed:  # what the readers then read off the report: the drawn Δs, the sets left undrawn
                assert recorded(delta, values, n, counted) == outcomes.pop(), (drawn, delta)


# (outcome, n, before, after, Δ, CI): one that rises past its floor, one that falls, one that does not
OUTCOME_CASES = {
    "rises": OutcomeResult("gap_closed", 8, 0.0, 0.3, 0.3, 0.2, 0.4),
    "falls": OutcomeResult("margin_change", 8, 1.0, 0.5, -0.5, -0.9, -0.2),
    "no effect": OutcomeResult("reference_change", 8, -1.0, -1.0, 0.004, -0.01, 0.02),
}


@pytest.mark.parametrize(("case", "n"), [("rises", 19), ("falls", 20), ("no effect", 19)])
def test_the_outcomes_stopping_rule_is_exact_over_every_completion(case: str, n: int) -> None:
    """Rule 3, at every wave: stopped means the verdict of all N sets is the same for every outcome of the undrawn
    sets (with, tied, against the arm's Δ, or not finite), not stopped means some outcome changes it; the result it
    leaves then reads that verdict, among the drawn sets, the rest counted undrawn. An outcome that moves is never
    fixed before any set is drawn; one that does not, always (decide first)."""
    result = OUTCOME_CASES[case]
    kinds = [result.delta + 1.0, result.delta, result.delta - 1.0, math.nan]
    reachable = _reachable(lambda counts: outcome_reading(result, completions.values(kinds, counts), n), n)
    for k in range(0, n, WAVE):  # where the rule is read
        for drawn in completions.counts(k, len(kinds)):
            values = completions.values(kinds, drawn)
            outcomes = set(reachable(drawn))
            fixed = outcomes_fixed([result], {result.outcome: values}, n)
            assert fixed == (len(outcomes) == 1), drawn
            if fixed:
                (left,) = placed([result], {result.outcome: values}, n)
                assert left.verdict == outcomes.pop(), drawn
                assert left.placebo is not None and (len(left.placebo.deltas), left.placebo.undrawn or 0) == (k, n - k)
    assert outcomes_fixed([result], {}, n) == (case == "no effect")


def recorded(delta: float, drawn: list[float], n: int, counted: bool) -> tuple[bool, bool, bool]:
    """The readers' reading of a rank that holds the ``drawn`` Δs and ``n - len(drawn)`` undrawn sets:
    :mod:`study.evidence` counts the arm's ``n`` sets, :func:`interventions.select_compare.arm_verdict` the finite
    drawn ones and the undrawn."""
    sets = sum(math.isfinite(d) for d in drawn) + n - len(drawn)
    percentile = placebo_compare(delta, drawn).percentile
    effect = Difference(0, math.nan, math.nan, delta, math.nan, math.nan, math.nan)

    def beyond(sets: int) -> bool:
        return ArmEvidence("", "", effect, placebo_sets=sets, percentile=percentile).beyond_placebo()

    return beyond(n), beyond(sets), counted and sets >= MIN_PLACEBO_SETS


def verdicts(report: ABReport) -> dict[str, Any]:
    """Every verdict a reader gives on the report: per arm and capability ``--select``'s rule verdict, the study's
    reading of the arm (specific, beyond its placebos, its set count), every continuous outcome's verdict; and
    claims 3 and 4 as ``probe report`` decides them."""
    out: dict[str, Any] = {}
    for arm in report.arms:
        evidence = arm_evidence(report, arm)
        out[arm.name] = (
            [(c.capability, arm_verdict(arm, c).status) for c in arm.capabilities],
            (evidence.specific(), evidence.beyond_placebo(), evidence.placebo_sets),
            [(o.outcome, o.verdict) for o in arm.outcomes],
        )
    arms = [arm_evidence(report, arm) for arm in report.arms]
    paper = next((a for a in arms if a.factor is not None and abs(a.factor - 0.999999) < 1e-9), None)
    out["claim 3"] = paper_scaling(paper, "cmd").status
    for sign in (1, -1):
        behaviour = Difference(100, 0.5, 0.5 + 0.3 * sign, 0.3 * sign, 0.2 * sign, 0.4 * sign, 1e-4)
        out[f"claim 4 ({sign:+d})"] = units_cause(arms, behaviour, "cmd", "eval").status
    return out


def placebo_passes(monkeypatch: pytest.MonkeyPatch, config: ABConfig, judge: Any = None) -> tuple[ABReport, int]:
    """The run's report, and how many placebo passes it generated (or read back)."""
    count = [0]
    scored = ab._scored

    def counting(run: Any, one: Any) -> Any:
        count[0] += one.role == "placebo"
        return scored(run, one)

    with monkeypatch.context() as patch:
        patch.setattr(ab, "_scored", counting)
        report = run_ab(plan_ab(config), judge=judge)
    return report, count[0]


def both_designs(monkeypatch: pytest.MonkeyPatch, config: ABConfig, out: Path) -> tuple[ABReport, ABReport, int, int]:
    every, n_every = placebo_passes(monkeypatch, replace(config, placebo_generation="all", out_dir=out / "all"))
    first, n_first = placebo_passes(monkeypatch, replace(config, out_dir=out / "first"))
    return every, first, n_every, n_first


def _config(model_dir: Path, data_file: Path, **kw: Any) -> ABConfig:
    base: dict[str, Any] = {
        "model_dir": model_dir,
        "data_file": data_file,
        "units": UNITS,
        "hook": "resid_post",
        "capability": "multi_turn",
        "placebo": N_SETS,
        "limit": 4,
        "generation": GenerationConfig(max_new_tokens=4, batch_size=8),
        "n_bootstrap": 200,
        "outcomes": "off",
    }
    return ABConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("synth")
    synthesize(out, n_roles=10, seed=0)
    return out / "test.jsonl"


def test_a_pair_with_no_difference_generates_no_placebo_set(tiny_pair, test_file: Path, tmp_path: Path, monkeypatch):
    """Patching the model with its own values changes nothing: no placebo set generates or is teacher-forced (no
    outcome moves), the verdicts are the same."""
    config = _config(tiny_pair[1], test_file, edits="patch", source_dir=tiny_pair[1], positive_control=False)
    every, first, n_every, n_first = both_designs(
        monkeypatch, replace(config, outcomes="on", outcome_pairs=2), tmp_path
    )
    assert verdicts(first) == verdicts(every)
    assert all(not a.guard.rows_changed for a in first.arms)
    assert n_first == 0 < n_every
    report = (tmp_path / "first" / "ab_report.md").read_text()
    assert f"generated 0 of {N_SETS} for compliance (no generation changed" in report
    assert f"teacher-forced 0 of {N_SETS} for the outcomes (no outcome moves: each reads no effect" in report
    assert f"0 of {N_SETS} sets drawn" in report  # the outcomes' placebo cells
    for arm in first.arms:
        assert arm.placebo.n_sets == N_SETS  # every set drawn, none generated or teacher-forced
        for o in arm.outcomes:
            assert o.placebo is not None and (o.placebo.deltas, o.placebo.undrawn) == ([], N_SETS), o.outcome
            assert o.verdict in (NO_EFFECT, UNDEFINED)
        assert [o.verdict for o in arm.outcomes] == [o.verdict for o in every.arm(arm.name).outcomes]


def test_arms_stop_once_fixed_keep_every_verdict_and_a_run_cut_among_them_resumes(
    tiny_pair, test_file: Path, tmp_path: Path, monkeypatch
):
    """Patching four units with the other model's values: on DPO no generation changes (no placebo set generates), on
    SFT some do (sets generate until the verdict is fixed), and on both the outcomes move within their placebos (sets
    are teacher-forced until their verdicts are fixed). A decide-first run cut at its first wave of outcome placebo
    sets resumes from its kept batches; every verdict equals the full design's, and the sets each arm drew are the
    full design's first ones, Δ for Δ."""
    config = _config(tiny_pair[1], test_file, edits="patch", source_dir=tiny_pair[0], units="1:0-3", outcomes="on")
    config = replace(config, positive_control=False, collateral=True, collateral_rows=1, outcome_pairs=2)
    every, n_every = placebo_passes(monkeypatch, replace(config, placebo_generation="all", out_dir=tmp_path / "all"))

    def cut(line: str) -> None:
        if "placebo sets of" in line:  # the first wave of the outcomes' placebo sets
            raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="rerun"):
        run_ab(plan_ab(replace(config, out_dir=tmp_path / "first")), progress=cut)
    lines: list[str] = []
    first = run_ab(plan_ab(replace(config, out_dir=tmp_path / "first")), progress=lines.append)
    assert any("read back" in line for line in lines)
    # the estimates printed first: from no placebo set to all 38, generated and teacher-forced
    assert any(line.startswith(f"4 to {4 + 2 * N_SETS} generation passes over") for line in lines)
    assert any(line.startswith(f"then 4 to {4 + 2 * N_SETS} teacher-forced outcome passes") for line in lines)
    assert verdicts(first) == verdicts(every) and n_every == 2 * N_SETS
    for arm in first.arms:
        full = every.arm(arm.name)
        pairs = [*zip(arm.outcomes, full.outcomes, strict=True), *zip(arm.capabilities, full.capabilities, strict=True)]
        for mine, theirs in pairs:
            np.testing.assert_equal(asdict(mine.effect), asdict(theirs.effect))
            assert mine.placebo is not None and theirs.placebo is not None
            drawn, undrawn = len(mine.placebo.deltas), mine.placebo.undrawn or 0
            assert mine.placebo.deltas == theirs.placebo.deltas[:drawn] and drawn + undrawn == N_SETS
    unchanged, changed = first.arm("patch dpo<-sft"), first.arm("patch sft<-dpo")
    assert not unchanged.guard.rows_changed and changed.guard.rows_changed
    for c in changed.capabilities:  # Δ 0 among 4 placebo Δs of 0: ties count half, so no 15 more sets reach 95%
        assert c.placebo is not None and (len(c.placebo.deltas), c.placebo.undrawn) == (WAVE, N_SETS - WAVE)
    forced = {len(o.placebo.deltas) for a in first.arms for o in a.outcomes if o.placebo is not None}
    assert forced and max(forced) < N_SETS  # every arm stopped early
    report = (tmp_path / "first" / "ab_report.md").read_text()
    assert f"generated 0 of {N_SETS} for compliance (no generation changed" in report
    assert f"generated {WAVE} of {N_SETS} for compliance (then the verdict could no longer change)" in report
    k = min(forced)
    assert f"teacher-forced {k} of {N_SETS} for the outcomes (then the verdict could no longer change)" in report
    assert f"{k} of {N_SETS} sets)" in report  # the cells: "62nd (p = 0.556, 8 of 19 sets)"
    reason = units_cause([arm_evidence(first, a) for a in first.arms], None, "cmd", "eval").reason
    assert f"{k} of {N_SETS} matched placebo sets drawn (then the verdict could no longer change)" in reason
    behaviour = Difference(100, 0.5, 0.8, 0.3, 0.2, 0.4, 1e-4)
    on_compliance = replace(arm_evidence(first, changed), outcomes=())
    reason = units_cause([on_compliance], behaviour, "cmd", "eval").reason
    assert f"50th percentile of {WAVE} placebo sets" in reason  # the prose names the sets the percentile is among


def test_probe_replicate_passes_the_placebo_generation_to_its_intervention() -> None:
    from core.errors import ProbeError
    from study.replicate_config import ReplicateOptions

    options = ReplicateOptions(pair="tiny", out_dir=Path("runs/x"), data_file=Path("d.jsonl"), placebo_generation="all")
    assert options.intervention()["placebo_generation"] == "all"
    assert "--placebo-generation all" in options.command()  # the command that runs it again
    with pytest.raises(ProbeError, match="--placebo-generation: expected one of decide-first, all"):
        ReplicateOptions(pair="tiny", out_dir=Path("runs/x"), data_file=Path("d.jsonl"), placebo_generation="some")


class OtherJudge:
    """The rule judge's verdicts under another judge's name: a judge whose undecided rows may depend on the response,
    for all the stopping rule knows."""

    name = "other"

    def judge(self, rows: Any, responses: Any) -> Any:
        from judging.rules import RuleJudge

        return RuleJudge().judge(rows, responses)


def test_another_judge_stops_as_early_where_its_delta_is_not_significant(
    tiny_pair, test_file: Path, tmp_path: Path, monkeypatch
):
    """Undrawn sets might then have no finite Δ, which only a significant Δ's verdict reads: this arm's is not."""
    config = _config(tiny_pair[1], test_file, edits="scale", factor=0.0, out_dir=tmp_path)
    report, generated = placebo_passes(monkeypatch, config, OtherJudge())
    assert report.judge == "other" and generated == WAVE
