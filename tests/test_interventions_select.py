"""`probe intervene --select`: selection rules compared by the causal effect of the same edit, on the tiny pair."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.decoding import GenerationConfig
from core.errors import Interrupted
from core.records import to_json
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.plan import plan_ab
from interventions.select_compare import compare_selections
from interventions.selection import parse_units
from probe_cli.main import main
from tests.support.cli import one_line_error
from tests.support.runs import recorded_multi_turn_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RULES = ["count", "mean_diff", "attribution", "weight"]


@pytest.fixture(scope="module")
def select_run(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded multi_turn run with a saved count analysis (``analysis/``) and an attribution one; mean_diff is not
    analysed, so that rule ranks afresh, and weight is computed from the checkpoints."""
    from analysis import AnalysisConfig, analyze_run

    run = recorded_multi_turn_run(tiny_pair, tmp_path_factory.mktemp("select_run"), n_roles=4)
    analyze_run(run, AnalysisConfig(stability_resamples=0), capabilities=["multi_turn"], hooks=["mlp_out"], plots=False)
    analyze_run(
        run,
        AnalysisConfig(metric="attribution", stability_resamples=0),
        out_dir=run / "analysis_attribution",
        plots=False,
    )
    return run


def _config(run: Path, out: Path, batch_size: int = 8, **extra) -> ABConfig:
    generation = GenerationConfig(max_new_tokens=6, batch_size=batch_size)
    settings = {
        "run_dir": run,
        "factor": 0.0,
        "top_k": 6,
        "placebo": 2,  # placebo sets matched per rule: two show the matching and the count
        "limit": 3,
        "generation": generation,
        "n_bootstrap": 200,
        "outcome_pairs": 2,  # the continuous outcomes run for every rule's arm; 2 DPO pairs measure the margin
    }
    return ABConfig(**{**settings, "out_dir": out, **extra})


@pytest.fixture(scope="module")
def compared(select_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, list[str], Path]:
    out = tmp_path_factory.mktemp("compared") / "ab"
    lines: list[str] = []
    report = compare_selections(_config(select_run, out, select=RULES), progress=lines.append)
    return report, lines, out


def test_one_block_per_rule_each_with_placebos_matched_per_layer_to_its_own_units(compared):
    report, _, out = compared
    rules = report.selection.rules
    assert [r.rule for r in rules] == RULES and report.selection.k == 6
    arms = {arm.name: arm for arm in report.arms}
    assert list(arms) == [f"{rule}: scale 0.0" for rule in RULES]
    for body in rules:
        units = {tuple(u) for u in body.units.units}
        assert len(units) == 6 and body.arms == [f"{body.rule}: scale 0.0"]
        arm = arms[body.arms[0]]
        assert arm.placebo.n_sets == 2
        for drawn in arm.placebo.sets:
            layers = [layer for layer, _ in drawn]
            assert {layer: layers.count(layer) for layer in set(layers)} == body.units.per_layer
            assert not units & {tuple(u) for u in drawn}
        for c in arm.capabilities:
            assert len(c.placebo.deltas) == 2
            assert body.verdicts[arm.name][c.capability].status in ("matters", "not shown", "cannot be decided")
        assert body.verdict == body.verdicts[arm.name]["multi_turn"]
    markdown = (out / "ab_report.md").read_text()
    n_capabilities = len(arms["count: scale 0.0"].capabilities)
    for rule in RULES:
        assert sum(line.startswith(f"| {rule} | scale 0.0 |") for line in markdown.splitlines()) == n_capabilities
    assert "Which rule finds units that matter" in markdown and "Δ per unit (pts)" in markdown
    assert "## Dose sweep" not in markdown  # one factor per rule: no sweep
    saved = json.loads((out / "ab_report.json").read_text())
    assert [r["rule"] for r in saved["selection"]["rules"]] == RULES


def test_each_rule_says_where_its_units_came_from_and_how_they_overlap(compared, select_run: Path):
    from analysis.explain_models import open_models
    from analysis.weight_change import weight_change
    from probes.store import RunReader

    report, _, _ = compared
    rules = {r.rule: r for r in report.selection.rules}
    assert str(select_run / "analysis" / "maps_topk_count.h5") in rules["count"].source
    assert "ranked afresh" in rules["mean_diff"].source
    assert str(select_run / "analysis_attribution") in rules["attribution"].source
    assert "computed from the run's checkpoints" in rules["weight"].source
    with RunReader(select_run) as run, open_models(run) as models:
        relative = weight_change(models.sft, models.dpo, ["mlp_out"], "sft_dpo")["mlp_out"].relative
    window = [2, 3]  # the default window of a 4-layer model
    top = sorted(((relative[layer, unit], layer, unit) for layer in window for unit in range(32)), reverse=True)[:6]
    assert {(layer, unit) for _, layer, unit in top} == {tuple(u) for u in rules["weight"].units.units}
    for rule, body in rules.items():
        mine = {tuple(u) for u in body.units.units}
        for other, o in body.overlap.items():
            theirs = {tuple(u) for u in rules[other].units.units}
            assert o.shared == len(mine & theirs) and o.jaccard == pytest.approx(
                len(mine & theirs) / len(mine | theirs)
            )
            assert 0 <= o.random_jaccard <= 1 and rules[other].overlap[rule] == o


def test_the_rules_share_one_baseline_and_one_set_of_passes(compared):
    report, lines, _ = compared
    # the SFT baseline too: the continuous outcomes teacher-force its greedy responses (issue 36)
    assert list(report.baselines) == ["dpo", "sft"]
    assert lines.count(next(line for line in lines if "generation passes over" in line)) == 1
    passes = 2 + sum(1 + arm.placebo.n_sets for arm in report.arms)  # the baselines, then each rule's own passes
    assert any(
        line.startswith(f"{passes} generation passes over") and "2 baseline(s), 4 arm(s)" in line for line in lines
    )
    assert sum("passes decode together" in line for line in lines) == 2  # one shared decode per model
    assert all(arm.outcome("gap_closed") is not None for arm in report.arms)  # every rule's arm has the outcomes
    assert not any("decode arm by arm" in line or line.startswith("baseline (") for line in lines)


def test_a_rule_whose_units_equal_another_rules_gives_identical_figures(select_run: Path, tmp_path: Path):
    units = parse_units("2:1,2:5,3:0,3:7", "mlp_out")
    lines: list[str] = []
    plan = plan_ab(_config(select_run, tmp_path / "ab", placebo=2), selections={"first": units, "second": units})
    report = run_ab(plan, progress=lines.append)
    first, second = (to_json(report.arm(f"{rule}: scale 0.0")) for rule in ("first", "second"))
    for body in (first, second):
        for key in ("name", "label", "seconds"):
            body.pop(key)
        body["guard"].pop("edit")  # the arm's label, which names its rule
    assert first == second
    # two baselines (the outcomes' SFT one too), one arm, two placebos
    assert any(line.startswith("5 generation passes over") for line in lines)


def test_a_killed_select_run_resumes_to_the_same_report(compared, select_run: Path, tmp_path: Path):
    """Killed at its first batch, then rerun: the same report and generations as the uninterrupted run of the same
    options (the ``compared`` fixture)."""
    whole, _, whole_out = compared

    def stop_after_one_batch(line: str) -> None:
        if "batch 1/" in line:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="rerun with the same options"):
        compare_selections(_config(select_run, tmp_path / "cut", select=RULES), progress=stop_after_one_batch)
    assert (tmp_path / "cut" / ".arms").is_dir() and not (tmp_path / "cut" / "ab_report.json").exists()
    lines: list[str] = []
    resumed = compare_selections(_config(select_run, tmp_path / "cut", select=RULES), progress=lines.append)
    assert any("read back" in line for line in lines)

    def figures(report) -> list:
        return [
            (arm.name, [(c.capability, c.effect.delta, c.rows_changed, c.placebo.deltas) for c in arm.capabilities])
            for arm in report.arms
        ]

    assert figures(resumed) == figures(whole) and resumed.selection == whole.selection
    assert (tmp_path / "cut" / "generations.jsonl").read_bytes() == (whole_out / "generations.jsonl").read_bytes()


def test_bad_select_input_is_one_line(select_run: Path, tmp_path: Path, capsys):
    out = str(tmp_path / "x")
    base = ["intervene", str(select_run), "--out", out]
    one_line_error(capsys, [*base, "--select", "count,size"], "--select", "got 'size'", "count, mean_diff")
    one_line_error(
        capsys, [*base, "--select", "count", "--units", "2:1"], "cannot be combined with --neurons or --units"
    )
    one_line_error(
        capsys,
        [*base, "--select", "count", "--neurons", str(select_run / "analysis" / "neurons_multi_turn_mlp_out.json")],
        "cannot be combined",
    )
    one_line_error(capsys, [*base, "--select", "count", "--dose", "0.5"], "leave out --dose")
    line = one_line_error(capsys, [*base, "--select", "count,attribution", "--hook", "resid_post"], "resid_post")
    assert "was not recorded" in line
    bare = tmp_path / "bare"  # the same recording without its analyses
    bare.mkdir()
    for name in ("activations.h5", "run.json"):
        (bare / name).write_bytes((select_run / name).read_bytes())
    line = one_line_error(
        capsys, ["intervene", str(bare), "--select", "count,attribution", "--out", out], "--select attribution"
    )
    assert f"probe analyze {bare} --metric attribution -c multi_turn --hook mlp_out" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_probe_intervene_select_end_to_end(select_run: Path, tmp_path: Path, capsys):
    out = tmp_path / "ab"
    args = ["--top-k", "4", "--placebo", "2", "--limit", "2", "--max-new-tokens", "4", "--no-collateral"]
    args += ["--outcome-pairs", "2"]  # the outcomes run for both rules' arms; 2 DPO pairs measure the margin
    with pytest.raises(SystemExit) as exc:
        main(["intervene", str(select_run), "--select", "count,weight", *args, "--out", str(out)])
    printed = capsys.readouterr().out
    assert exc.value.code in (0, None)
    report = json.loads((out / "ab_report.json").read_text())
    assert [a["name"] for a in report["arms"]] == ["count: scale 0.0", "weight: scale 0.0"]  # factor 0 by default
    assert report["config"]["select"] == ["count", "weight"] and report["config"]["factor"] == 0.0
    assert "Which rule finds units that matter" in printed and "| weight | scale 0.0 | **multi_turn** |" in printed
    assert np.isfinite(report["arms"][0]["capabilities"][0]["delta"])
