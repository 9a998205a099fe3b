"""`probe report`: a self-contained page with every section and verdict, from a full run and from runs missing parts.

The full run is a synthetic recording (a discrepancy planted in the last layers), its analysis, a hand-made
A/B report and a hand-made evaluation, so every verdict and figure has its evidence without a model. The page
is opened in headless Chromium with the network unreachable (tests/support/browser.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis import AnalysisConfig, analyze_run
from core.records import to_json
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
    UnitsSummary,
)
from interventions.stats import PairedDelta
from study.report_html import SECTIONS, write_report
from tests.support.cli import exit_of, one_line_error
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

SPEC = SyntheticSpec(n_samples=40, n_layers=16, width=24, capabilities=("multi_turn", "nested"))
MAX_BYTES = 10_000_000


def _result(
    delta: float, low: float, high: float, p: float, deltas: list[float] | None, before: float = 0.6
) -> CapabilityResult:
    placebo = PlaceboRank(100.0 * sum(d < delta for d in deltas) / len(deltas), 0.05, deltas, 2.0) if deltas else None
    return CapabilityResult(
        "multi_turn",
        True,
        30,
        0,
        PairedDelta(30, before, before + delta, delta, low, high, p, 1, 5),
        6,
        0.3,
        0.31,
        9.0,
        9.5,
        placebo,
    )


def _arm(name: str, role: str, result: CapabilityResult, model: str = "dpo", factor: float | None = None) -> ArmResult:
    guard = NoOpGuard(factor, "float32", 1.0, 900, 900, 30, result.rows_changed)
    placebo: ArmPlacebo = (
        PlaceboDrawn(n_sets=len(result.placebo.deltas), seed=0, family="random units", factor=factor, sets=[])
        if result.placebo
        else NoPlacebo()
    )
    return ArmResult(factor, role, [result], guard, 2.0, 300, name=name, label=name, model=model, placebo=placebo)


def ab_report() -> ABReport:
    """Scaling at the paper's factor changes nothing; patching SFT's values into DPO lifts multi_turn beyond 20
    placebos."""
    flat = [0.0] * 18 + [0.033, -0.033]
    arms = [
        _arm("scale 0.999999", "main", _result(0.0, 0.0, 0.0, 1.0, flat), factor=0.999999),
        _arm("scale 0.5", "dose", _result(-0.033, -0.1, 0.0, 1.0, None), factor=0.5),
        _arm("scale 0.0", "control", _result(-0.1, -0.2, 0.0, 0.22, None), factor=0.0),
        _arm("mean", "arm", _result(0.033, -0.033, 0.1, 1.0, flat)),
        _arm("patch dpo<-sft", "arm", _result(0.3, 0.17, 0.43, 0.002, flat)),
    ]
    neurons = UnitsSummary(
        "mlp_out", 6, {14: 3, 15: 3}, "topk_count", "multi_turn", {"rule": "top_k_abs"}, "run", [(14, 1), (15, 2)]
    )
    return ABReport(
        "multi_turn",
        "dpo",
        "dpo-dir",
        "test.jsonl",
        "float32",
        "torch",
        "rules",
        neurons,
        {"dpo": BaselinePass(3.0, 500, 30), "sft": BaselinePass(3.0, 500, 30)},
        arms,
        {"capability": "multi_turn", "placebo": 20, "edits": ["scale", "mean", "patch"]},
    )


def evaluation() -> dict:
    """DPO loses 20 points of multi-turn compliance against SFT, significantly; the other capabilities barely move."""

    def row(cap: str, n: int, base: float, sft: float, dpo: float, ci: list[float], p: float) -> dict:
        return {
            "capability": cap,
            "n": n,
            "base_rate": base,
            "base_ci": [max(0, base - 0.1), min(1, base + 0.1)],
            "sft_rate": sft,
            "sft_ci": [sft - 0.08, min(1, sft + 0.08)],
            "dpo_rate": dpo,
            "dpo_ci": [dpo - 0.08, min(1, dpo + 0.08)],
            "delta": dpo - sft,
            "delta_ci": ci,
            "mcnemar_p": p,
            "sft_minus_base": sft - base,
            "sft_minus_base_ci": [0.1, 0.5],
            "base_mcnemar_p": 0.001,
        }

    table = [
        row("knowledge_boundary", 60, 0.5, 0.5, 0.52, [-0.05, 0.09], 0.7),
        row("multi_turn", 40, 0.4, 0.9, 0.7, [-0.33, -0.08], 0.004),
        row("nested", 16, 0.0, 0.7, 0.6, [-0.3, 0.1], 0.5),
        row("overall", 116, 0.4, 0.7, 0.6, [-0.15, -0.02], 0.03),
    ]
    return {
        "test_file": "test.jsonl",
        "task_counts": {"t": 116},
        "judge": "rules",
        "generation": {"max_new_tokens": 64},
        "sft": {"model_dir": "sft"},
        "dpo": {"model_dir": "dpo"},
        "base": {"model_dir": "base"},
        "table": table,
        "warnings": [],
    }


@pytest.fixture(scope="module")
def bare_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded and analysed run, nothing else."""
    run = tmp_path_factory.mktemp("report") / "bare"
    write_synthetic_run(run, SPEC)
    analyze_run(run, AnalysisConfig(stability_resamples=5), png=False)
    return run


@pytest.fixture(scope="module")
def full_run(bare_run: Path) -> Path:
    run = Path(shutil.copytree(bare_run, bare_run.parent / "full"))
    (run / "interventions" / "ab").mkdir(parents=True)
    (run / "interventions" / "ab" / "ab_report.json").write_text(json.dumps(to_json(ab_report())))
    (run / "eval.json").write_text(json.dumps(evaluation()))
    return run


def test_a_full_run_gets_every_section_verdict_and_figure(full_run: Path) -> None:
    path, study = write_report(full_run)
    page = path.read_text(encoding="utf-8")
    print(f"report size: {path.stat().st_size / 1e6:.2f} MB")
    assert path.stat().st_size <= MAX_BYTES
    verdicts = {v.claim: v for v in study.verdicts}
    assert [verdicts[c].describe() for c in (1, 2, 3)] == ["supported", "supported", "not supported"]
    assert verdicts[4].status == "supported" and "patch dpo<-sft" in verdicts[4].reason
    # no localize report: claim 1c is not measured, and the page says which command measures it
    assert verdicts["1c"].status == "not run" and verdicts["1c"].reason.startswith("not measured")
    assert f"probe localize {full_run} -c multi_turn" in page.split('<section id="localize">', 1)[1]
    for key in SECTIONS:
        assert f'<section id="{key}">' in page, key
    for verdict in study.verdicts:
        assert f'data-claim="{verdict.claim}" data-status="{verdict.status}"' in page
    # plotly.js once, then one script per figure
    assert page.count("<script") == 1 + page.count('class=figure data-figure="')
    assert "cdn.plot.ly" not in page.split("</script>", 1)[1] and "https://" not in page.split("</script>", 1)[1]
    names = {"depth-share", "layer-profile", "heatmap-multi_turn", "heatmap-nested", "compliance", "dose-0"}
    assert names | {"placebo-0-0", "placebo-0-3", "placebo-0-4"} <= set(_figures(page))


def _figures(page: str) -> list[str]:
    return [part.split('"', 1)[0] for part in page.split('class=figure data-figure="')[1:]]


def test_missing_parts_are_named_with_the_command_that_adds_them(
    bare_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = exit_of(["report", str(bare_run)], capsys)
    assert code == 0 and "Traceback" not in err
    rows = [line for line in out.splitlines() if "│ not run" in line]
    assert len(rows) == 4 and "probe localize" in rows[0] and "probe models eval" in rows[1]
    assert "probe intervene" in rows[2]
    for needle in (
        "missing: interventions on multi_turn",
        f"probe intervene {bare_run} -c multi_turn",
        "missing: an evaluation of the pair",
        "missing: neuron cards of multi_turn",
        f"probe explain {bare_run} -c multi_turn",
    ):
        assert needle in out, needle
    page = (bare_run / "report.html").read_text(encoding="utf-8")
    table = page.split('<section id="verdicts">', 1)[1].split("</section>", 1)[0]
    assert 'data-claim="1" data-status="supported"' in table and table.count('data-status="not run"') == 4
    assert 'data-claim="1c" data-status="not run"' in table and "not measured" in table
    assert "Not in this run: an evaluation of the pair" in page and "Not in this run: any intervention" in page


def test_broken_or_partial_runs_still_give_a_report(
    bare_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Path(shutil.copytree(bare_run, tmp_path / "run"))
    (run / "interventions" / "bad").mkdir(parents=True)
    (run / "interventions" / "bad" / "ab_report.json").write_text("{not json")
    (run / "eval.json").write_text('{"table": "nope"}')
    (run / "analysis" / "explain_multi_turn_mlp_out.json").write_text("[]")
    code, out, err = exit_of(["report", str(run), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0 and not err.strip(), err
    assert "ignored, not readable" in out and "not a valid evaluation" in out and "not an explain record" in out
    shutil.rmtree(run / "analysis")
    _, study = write_report(run, tmp_path / "r2.html")
    assert study.verdicts[0].describe() == f"not run (probe analyze {run})"  # claim 1
    window_only = tmp_path / "window"
    write_synthetic_run(
        window_only, SyntheticSpec(n_samples=20, n_layers=16, width=12, stored_layers=tuple(range(6, 16)))
    )
    analyze_run(window_only, AnalysisConfig(stability_resamples=0), plots=False)
    _, study = write_report(window_only)
    assert study.verdicts[0].status == "cannot be tested here" and "record without --layers" in study.verdicts[0].reason


def test_no_run_at_all_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, ["report", str(tmp_path)], "not a run directory", "probe replicate")
    assert not (tmp_path / "report.html").exists()


def test_the_page_renders_offline_in_chromium(full_run: Path, tmp_path: Path) -> None:
    from tests.support.browser import open_page, skip_reason

    why = skip_reason()
    if why:
        pytest.skip(why)
    path, study = write_report(full_run, tmp_path / "report.html")
    rendered = open_page(path)
    assert rendered.errors() == [] and rendered.requests == []
    assert set(SECTIONS) <= rendered.ids
    assert rendered.verdicts == {str(v.claim): v.status for v in study.verdicts}
    assert set(rendered.figures) == set(_figures(path.read_text(encoding="utf-8")))
    assert all(rendered.figures.values()), [name for name, drawn in rendered.figures.items() if not drawn]
