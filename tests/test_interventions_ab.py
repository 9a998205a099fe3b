"""End-to-end A/B evaluation on the tiny pair with synthetic data and the rule judge."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from access.factors import PAPER_FACTOR
from core.config_file import from_settings
from core.decoding import GenerationConfig
from core.errors import ProbeError
from interventions.ab import run_ab
from interventions.config import ABConfig
from interventions.plan import plan_ab
from interventions.results import ABReport

REPO = Path(__file__).resolve().parents[1]
UNITS = "1:0-15"  # half of the residual stream after block 1: ablating it must move even a random tiny model
HOOK = "resid_post"


@pytest.fixture(scope="module")
def test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("synth")
    synthesize(out, n_roles=10, seed=0)
    return out / "test.jsonl"


@pytest.fixture(scope="module")
def ab_run(tiny_pair, test_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[ABReport, Path]:
    out = tmp_path_factory.mktemp("ab")
    config = ABConfig(
        model_dir=tiny_pair[1],
        data_file=test_file,
        units=UNITS,
        hook=HOOK,
        capability="multi_turn",
        placebo=3,
        limit=4,
        generation=GenerationConfig(max_new_tokens=8, batch_size=8),
        doses=[0.5],
        n_bootstrap=500,
        collateral=True,
        out_dir=out,
    )
    return run_ab(plan_ab(config)), out


def test_report_files_and_round_trip(ab_run):
    report, out = ab_run
    for name in ("ab_report.json", "ab_report.md", "generations.jsonl"):
        assert (out / name).is_file()
    loaded = ABReport.load(out / "ab_report.json")
    assert loaded.capability == "multi_turn" and loaded.model == "dpo" and loaded.judge == "rules"
    assert [a.factor for a in loaded.scale_arms] == [0.0, 0.5, PAPER_FACTOR]
    assert [a.name for a in loaded.arms] == [f"scale {PAPER_FACTOR!r}", "scale 0.5", "scale 0.0"]
    assert {a.role for a in loaded.arms} == {"main", "dose", "control"}
    assert loaded.main.capability("multi_turn").effect.delta == report.main.capability("multi_turn").effect.delta
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(records) == report.baseline.rows
    assert set(records[0]["intervened"]) == {f"scale {PAPER_FACTOR!r}", "scale 0.5", "scale 0.0"}


def test_every_capability_is_scored_with_paired_statistics(ab_run):
    report, _ = ab_run
    caps = [c.capability for c in report.main.capabilities]
    assert caps[0] == "multi_turn" and report.main.capabilities[0].target
    assert set(caps) == {"multi_turn", "knowledge_boundary", "role_style", "nested", "priority"}  # collateral
    for c in report.main.capabilities:
        assert 0 < c.n_rows <= 4
        e = c.effect
        assert e.n + c.undecided == c.n_rows
        if e.n:
            assert e.delta == pytest.approx(e.after - e.before)
            assert e.ci_low <= e.delta + 1e-12 and e.delta - 1e-12 <= e.ci_high
            assert 0 < e.p_value <= 1
        assert 0 <= c.rouge_l_before <= 1 and math.isfinite(c.bleu_before)


def test_placebo_results_are_attached_to_the_main_arm(ab_run):
    report, _ = ab_run
    assert report.placebo.n_sets == 3 and len(report.placebo.sets) == 3
    real = {tuple(u) for u in report.neurons.units}
    for units in report.placebo.sets:
        assert len(units) == report.neurons.size and not real & {tuple(u) for u in units}
    for c in report.main.capabilities:
        assert c.placebo is not None and len(c.placebo.deltas) == 3
        deltas = c.placebo.deltas
        delta = c.effect.delta
        below, ties = sum(d < delta for d in deltas), sum(d == delta for d in deltas)
        assert c.placebo.percentile == pytest.approx(100 * (below + ties / 2) / 3)
        assert c.placebo.p_empirical == pytest.approx((1 + sum(abs(d) >= abs(delta) - 1e-12 for d in deltas)) / 4)
    assert all(c.placebo is None for arm in report.doses for c in arm.capabilities)


def test_guards_in_float32(ab_run):
    report, _ = ab_run
    main = report.main.guard
    assert main.changed_fraction_in_dtype == 1.0 and not main.factor_rounds_to_one
    assert main.values_changed and main.values_changed > 0  # the paper factor does move float32 values
    control = next(a for a in report.doses if a.role == "control")
    assert control.factor == 0.0 and control.guard.rows_changed > 0, (
        "effect-size guard: ablation must change generations"
    )
    assert not control.guard.is_noop


def test_markdown_table(ab_run):
    report, out = ab_run
    text = (out / "ab_report.md").read_text()
    assert (
        "| capability | n | before | after | Δ (pts) | 95% CI | McNemar p | placebo percentile | generations changed |"
        in text
    )
    assert "## Dose sweep (multi_turn)" in text and "| **multi_turn** |" in text
    for flag in report.main.guard.flags:
        assert flag in text


def test_bfloat16_paper_factor_is_flagged_as_noop(tiny_pair, test_file: Path, tmp_path: Path):
    config = ABConfig(
        model_dir=tiny_pair[1],
        data_file=test_file,
        units=UNITS,
        hook=HOOK,
        capability="multi_turn",
        dtype="bfloat16",
        placebo=2,
        positive_control=False,
        collateral=False,
        limit=3,
        generation=GenerationConfig(max_new_tokens=6),
        n_bootstrap=200,
        out_dir=tmp_path,
    )
    report = run_ab(plan_ab(config))
    guard = report.main.guard
    assert guard.factor_rounds_to_one and guard.is_noop and guard.values_changed == 0
    assert guard.rows_changed == 0 and report.main.capability("multi_turn").effect.delta == 0
    assert any("rounds to exactly 1 in bfloat16" in w for w in report.warnings)
    assert "NO-OP WARNING" in (tmp_path / "ab_report.md").read_text()
    # placebos of a no-op are no-ops
    assert report.placebo.n_sets == 0 and "no-op in bfloat16" in report.placebo.skipped


def test_an_impossible_placebo_fails_before_any_generation(tiny_pair, test_file: Path, tmp_path: Path, monkeypatch):
    from access.edited_generation import ABGenerator
    from core.errors import ProbeError

    def no_generation(*_args, **_kwargs):
        raise AssertionError("generation started before the placebo sets were checked")

    monkeypatch.setattr(ABGenerator, "run", no_generation)
    config = ABConfig(
        model_dir=tiny_pair[1], data_file=test_file, units="1:0-19", hook=HOOK, placebo=1, limit=1, out_dir=tmp_path
    )
    with pytest.raises(ProbeError, match=r"layer 1 has 20 of 32 units selected.*--placebo 0"):
        run_ab(plan_ab(config))
    assert not (tmp_path / "ab_report.json").exists()


def test_example_script_runs(tiny_pair, test_file: Path, tmp_path: Path, capsys):
    spec = importlib.util.spec_from_file_location("before_after", REPO / "examples" / "before_after.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(
        [
            "--model-dir",
            str(tiny_pair[1]),
            "--data",
            str(test_file),
            "--units",
            UNITS,
            "--hook",
            HOOK,
            "--factor",
            "0",
            "--limit",
            "1",
            "--placebo",
            "1",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "multi_turn" in printed and "report:" in printed
    assert (tmp_path / "ab_report.md").is_file()


def test_notebook_is_saved_without_outputs():
    import nbformat

    nb = nbformat.read(REPO / "notebooks" / "dose_sweep.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.slow
def test_notebook_plots_the_dose_sweep(ab_run, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    _, out = ab_run
    monkeypatch.setenv("AB_REPORT", str(out / "ab_report.json"))
    nb = nbformat.read(REPO / "notebooks" / "dose_sweep.ipynb", as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) == 2


def test_the_llm_judge_of_an_ab_run_takes_the_endpoint_limits(tmp_path: Path) -> None:
    from judging import make_judge

    endpoint = {  # the judge's endpoint by the names flags and --config files give it
        "units": UNITS,
        "hook": HOOK,
        "judge": "llm",
        "judge_model": "m",
        "judge_base_url": "http://127.0.0.1:9/v1",
        "out_dir": tmp_path,
    }
    config = from_settings(ABConfig, {**endpoint, "judge_timeout": 0.5, "judge_retries": 1, "judge_backoff": 0.05})
    judge = make_judge(config.judge, config.judge_client())
    assert (judge.config.timeout, judge.config.max_retries, judge.config.backoff_base) == (0.5, 1, 0.05)
    with pytest.raises(ProbeError, match="--judge-retries"):
        from_settings(ABConfig, {**endpoint, "judge_retries": -1}).judge_client()


def test_report_versions(ab_run, tmp_path: Path):
    """Version 1 reports (main + doses) still load; a newer or malformed version is one line."""
    _, out = ab_run
    body = json.loads((out / "ab_report.json").read_text())
    old = json.loads(json.dumps(body))
    old = {
        **{k: v for k, v in old.items() if k not in ("arms", "baselines")},
        "version": 1,
        "main": old["arms"][0],
        "doses": old["arms"][1:],
    }
    for arm in [old["main"], *old["doses"]]:
        for key in ("name", "label", "model", "edits", "placebo"):
            arm.pop(key)
    (tmp_path / "v1.json").write_text(json.dumps(old))
    loaded = ABReport.load(tmp_path / "v1.json")
    assert [a.name for a in loaded.arms] == [a["name"] for a in body["arms"]] and loaded.main.factor == PAPER_FACTOR
    for version in (3, "2", None):
        (tmp_path / "bad.json").write_text(json.dumps({**body, "version": version}))
        with pytest.raises(ProbeError, match=r"bad.json: A/B report version .*this toolkit reads versions 1-2"):
            ABReport.load(tmp_path / "bad.json")


def test_a_malformed_placebo_or_selection_is_one_line(ab_run, tmp_path: Path):
    """A drawn placebo without its sets, or a selection without its rules, is refused, not read as none."""
    _, out = ab_run
    body = json.loads((out / "ab_report.json").read_text())
    main, *others = body["arms"]
    drawn = {k: v for k, v in main["placebo"].items() if k != "sets"}
    for broken, where in (
        ({**body, "arms": [{**main, "placebo": drawn}, *others]}, r"arms\[0\]\.placebo"),
        ({**body, "selection": {"k": 3, "verdict_rule": "placebo"}}, "selection"),
    ):
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(ProbeError, match=rf"^\S*bad.json: not a valid A/B report \({where}: .*\)$"):
            ABReport.load(tmp_path / "bad.json")
