"""Decide-first and sequential placebo generation (issue 51): the stopping rule is exact over every completion of the
undrawn sets, and on tiny pairs (one whose arm changes generations, one with no difference; the planted pair in
tests/test_interventions_outcomes.py) the default design gives every verdict of ``--placebo-generation all`` while
generating fewer placebo passes."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import interventions.ab as ab
from core.decoding import GenerationConfig
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.evidence import MIN_PLACEBO_SETS, ArmEvidence, Difference
from interventions.plan import plan_ab
from interventions.results import ABReport
from interventions.select_compare import arm_verdict
from interventions.sequential import WAVE, reading, verdict_fixed
from interventions.stats import placebo_compare
from study.evidence import arm_evidence
from study.verdicts import paper_scaling, units_cause

UNITS = "1:0-15"  # half of the residual stream after block 1: ablating it moves even a random tiny model
N_SETS = 19  # the fewest sets a verdict rests on: the sequential rule applies


@cache
def _counts(n: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to split ``n`` sets among ``parts`` kinds of Δ."""
    if parts == 1:
        return [(n,)]
    return [(k, *rest) for k in range(n + 1) for rest in _counts(n - k, parts - 1)]


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
    final = {
        counts: reading(delta, [v for v, k in zip(kinds, counts, strict=True) for _ in range(k)], n, counted)
        for counts in _counts(n, len(kinds))
    }
    for k in range(n):
        for drawn in _counts(k, len(kinds)):
            values = [v for v, c in zip(kinds, drawn, strict=True) for _ in range(c)]
            outcomes = {
                final[tuple(a + b for a, b in zip(drawn, rest, strict=True))] for rest in _counts(n - k, len(kinds))
            }
            fixed = verdict_fixed(delta, values, n, nan_possible=nan_possible, counted=counted)
            assert fixed == (len(outcomes) == 1), (drawn, delta)
            if fixed:  # what the readers then read off the report: the drawn Δs, the sets left undrawn
                assert recorded(delta, values, n, counted) == outcomes.pop(), (drawn, delta)


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
    from dataclasses import replace

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


def test_an_arm_that_changes_generations_keeps_every_verdict(tiny_pair, test_file: Path, tmp_path: Path, monkeypatch):
    """Ablating half the residual stream changes generations: the arm draws placebo sets until its verdict is fixed."""
    config = _config(tiny_pair[1], test_file, edits="scale", factor=0.0, collateral=True, collateral_rows=2)
    every, first, n_every, n_first = both_designs(monkeypatch, config, tmp_path)
    assert verdicts(first) == verdicts(every)
    (arm,) = first.arms
    assert arm.guard.rows_changed, "ablating half the stream must change a generation on the tiny pair"
    for c in arm.capabilities:  # Δ 0 among 4 placebo Δs of 0: ties count half, so no 15 more sets reach 95%
        assert c.placebo is not None and (len(c.placebo.deltas), c.placebo.undrawn) == (WAVE, N_SETS - WAVE)
    assert (n_first, n_every) == (WAVE, N_SETS)
    report = (tmp_path / "first" / "ab_report.md").read_text()
    assert f"generated {WAVE} of {N_SETS} for compliance (then the verdict could no longer change)" in report
    behaviour = Difference(100, 0.5, 0.8, 0.3, 0.2, 0.4, 1e-4)
    reason = units_cause([arm_evidence(first, arm)], behaviour, "cmd", "eval").reason
    assert f"50th percentile of {WAVE} placebo sets" in reason  # the prose names the sets the percentile is among


def test_a_pair_with_no_difference_generates_no_placebo_set(tiny_pair, test_file: Path, tmp_path: Path, monkeypatch):
    """Patching the model with its own values changes nothing: no placebo set generates, the verdicts are the same."""
    config = _config(tiny_pair[1], test_file, edits="patch", source_dir=tiny_pair[1], positive_control=False)
    every, first, n_every, n_first = both_designs(monkeypatch, config, tmp_path)
    assert verdicts(first) == verdicts(every)
    assert all(not a.guard.rows_changed for a in first.arms)
    assert n_first == 0 < n_every
    report = (tmp_path / "first" / "ab_report.md").read_text()
    assert f"generated 0 of {N_SETS} for compliance (no generation changed" in report
    for arm in first.arms:
        assert arm.placebo.n_sets == N_SETS  # every set drawn (the continuous outcomes use them), none generated


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
