"""The continuous outcomes of every A/B arm (issue 36), end to end on the planted-tiny pair: patching the planted units
closes the whole gap beyond every placebo set, ``--outcomes only`` reuses a run's greedy responses and gives the same
numbers, and the report carries them through JSON, markdown and a reload."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.decoding import GenerationConfig
from core.errors import ProbeError
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.evidence import MOVES, NO_EFFECT
from interventions.plan import plan_ab
from interventions.results import ABReport
from training.default_pair import ensure_default_pair
from training.planted import read_planted


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory):
    return read_planted(ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root)


def _config(planted, out: Path, **kw) -> ABConfig:
    units = ",".join(f"{layer}:{unit}" for layer, unit in planted.units)
    base = {
        "model_dir": planted.dpo_dir,
        "source_dir": planted.sft_dir,
        "data_file": planted.data_dir / "test.jsonl",
        "units": units,
        "hook": planted.hook,
        "edits": "patch",
        "capability": "multi_turn",
        "placebo": 19,
        "limit": 4,
        "generation": GenerationConfig(max_new_tokens=4, batch_size=8),
        "n_bootstrap": 300,
        # two DPO pairs: the margin is still measured and ranked among the placebos (its n is checked); the default
        # 16 long pairs were most of the tokens of every teacher-forced pass
        "outcome_pairs": 2,
        "out_dir": out,
    }
    return ABConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def patched(planted, tmp_path_factory: pytest.TempPathFactory) -> tuple[ABReport, Path]:
    out = tmp_path_factory.mktemp("ab")
    return run_ab(plan_ab(_config(planted, out))), out


def test_patching_the_planted_units_closes_the_gap_beyond_every_placebo(patched) -> None:
    report, _ = patched
    assert report.responses.startswith("greedy") and report.outcome_pairs > 0
    # patch runs both ways: each model's arms force the other model's greedy responses, and the report says which
    said = report.responses
    assert "(sft model's baseline) for the arms on dpo" in said and "(dpo model's baseline) for the arms on sft" in said
    for arm in report.arms:
        gap = arm.outcome("gap_closed")
        assert gap is not None and gap.n == 4
        assert gap.delta == pytest.approx(1.0, abs=1e-4), arm.name  # nothing else differs: an identity
        assert gap.placebo is not None and len(gap.placebo.deltas) == 19
        assert max(gap.placebo.deltas) <= 0.1
        assert gap.placebo.percentile == 100.0 and gap.verdict == MOVES
        margin = arm.outcome("margin_change")
        assert margin is not None and margin.n == report.outcome_pairs


def test_decide_first_placebos_give_the_full_designs_verdicts_on_the_planted_pair(planted, patched, tmp_path) -> None:
    """Issue 51: the default (decide-first, sequential placebo sets) and ``--placebo-generation all`` give the same
    verdict, claim for claim and arm for arm, on the planted pair (patching moves the generations both ways)."""
    from tests.test_interventions_sequential import verdicts

    first, _ = patched
    every = run_ab(plan_ab(_config(planted, tmp_path / "all", placebo_generation="all")))
    assert verdicts(first) == verdicts(every)
    generated = [len(c.placebo.deltas) for a in first.arms for c in a.capabilities if c.placebo is not None]
    assert sum(generated) <= sum(len(c.placebo.deltas) for a in every.arms for c in a.capabilities if c.placebo)


def test_outcomes_round_trip_and_render(patched) -> None:
    report, out = patched
    again = ABReport.load(out / "ab_report.json")
    assert again.arms[0].outcomes == report.arms[0].outcomes
    assert again.responses == report.responses
    text = (out / "ab_report.md").read_text()
    assert "## Continuous outcomes on multi_turn" in text and "gap closed" in text
    assert "responses teacher-forced" in text
    kept = [json.loads(line) for line in (out / "responses_sft.jsonl").read_text().splitlines()]
    assert len(kept) == 4 and all(k["token_ids"] for k in kept)


def test_an_old_report_without_outcomes_still_loads(patched, tmp_path: Path) -> None:
    _, out = patched
    body = json.loads((out / "ab_report.json").read_text())
    for arm in body["arms"]:
        del arm["outcomes"]
    del body["responses"], body["outcome_pairs"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(body))
    old = ABReport.load(path)
    assert old.responses == "" and all(not a.outcomes for a in old.arms)


def test_outcomes_only_reuses_the_runs_greedy_responses(planted, patched, tmp_path: Path) -> None:
    report, out = patched
    only = run_ab(plan_ab(_config(planted, tmp_path / "only", outcomes="only", responses=str(out))))
    assert not (tmp_path / "only" / "generations.jsonl").exists()
    assert only.baselines[only.model].rows == 0  # nothing generated
    for a, b in zip(report.arms, only.arms, strict=True):
        assert [(o.outcome, o.delta, o.verdict) for o in a.outcomes] == [
            (o.outcome, o.delta, o.verdict) for o in b.outcomes
        ]
    assert "responses teacher-forced" in (tmp_path / "only" / "ab_report.md").read_text()


def test_outcomes_only_needs_responses_it_can_read(planted, tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="--outcomes only generates nothing"):
        _config(planted, tmp_path, outcomes="only")
    with pytest.raises(ProbeError, match=r"responses_sft\.jsonl not found"):
        run_ab(plan_ab(_config(planted, tmp_path / "o", outcomes="only", responses=str(tmp_path))))


def test_no_units_changed_reads_no_effect_and_references_are_measured(planted, tmp_path: Path) -> None:
    """Scaling by the paper's factor barely moves the model: its gap closed is far below 1e-4 and reads no effect."""
    report = run_ab(
        plan_ab(
            _config(planted, tmp_path / "s", edits="scale", placebo=0, positive_control=False, responses="reference")
        )
    )
    gap = report.arms[0].outcome("gap_closed")
    assert gap is not None and abs(gap.delta) < 1e-4 and gap.verdict == NO_EFFECT
    ref = report.arms[0].outcome("reference_change")
    assert ref is not None and math.isfinite(ref.delta)
    assert report.responses == "reference"


def test_claim_4_is_supported_for_the_planted_units(patched) -> None:
    from study.evidence import arm_evidence
    from study.verdicts import SUPPORTED, units_cause

    report, _ = patched
    verdict = units_cause([arm_evidence(report, a) for a in report.arms], None, "I", "E")
    assert verdict.status == SUPPORTED, verdict.reason
    assert "patch dpo<-sft closes 100.0%" in verdict.reason and "100th percentile of 19 matched placebo sets" in (
        verdict.reason
    )


def test_claim_4_is_not_supported_on_a_pair_with_no_difference(planted, tmp_path: Path) -> None:
    from study.evidence import arm_evidence
    from study.verdicts import NOT_SUPPORTED, units_cause

    # "SFT" is DPO's own weights; no placebo sets: the rule needs none to see there is no gap
    same = run_ab(plan_ab(_config(planted, tmp_path / "same", source_dir=planted.dpo_dir, placebo=0)))
    gap = same.arms[0].outcome("gap_closed")
    assert gap is not None and math.isnan(gap.delta)  # no gap to close
    verdict = units_cause([arm_evidence(same, a) for a in same.arms], None, "I", "E")
    assert verdict.status == NOT_SUPPORTED and "no SFT→DPO gap" in verdict.reason, verdict.reason


def test_a_missing_responses_file_is_refused_before_anything_runs() -> None:
    with pytest.raises(ProbeError, match=r"--responses nowhere\.jsonl: expected greedy"):
        ABConfig(model_dir="m", data_file="d", units="1:0", responses="nowhere.jsonl")
