"""`probe analyze` (exit codes, one-line errors, printed table) and the plot files it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis import AnalysisConfig, analyze_run
from analysis.plots import chromium_available
from core.records import to_json
from probe_cli.main import main
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

SPEC = SyntheticSpec(n_samples=30, n_layers=16, width=24, capabilities=("multi_turn", "nested"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "run"
    write_synthetic_run(path, SPEC)
    return path


def _probe(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_analyze_prints_top_layers_and_writes_outputs(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _probe(
        ["analyze", str(run_dir), "--capability", "multi_turn", "--no-png", "--out", str(tmp_path)], capsys
    )
    assert code == 0
    assert "multi_turn · mlp_out · topk_count" in out and "mean |Δ|" in out
    assert (
        "window: layers 6-15 — default window: the last 20/32 of depth, layers 6-15 of a 16-layer model"
        in out.replace("\n", " ")
    )
    assert "— stable in " in out and "resamples (≥4 of 5 kept)" in out
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "neurons_multi_turn_mlp_out.json").is_file()
    assert not (tmp_path / "neurons_nested_mlp_out.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "40-50"], "error: --layers 40-50: the model has 16 layers (0-15); layer 40 is outside it"),
        (
            ["--layers", "12-31"],
            "error: --layers 12-31: the model has 16 layers (0-15); layer 16 is outside it (leave --layers out",
        ),
        (["--stability-resamples", "-1"], "error: --stability-resamples: expected an integer in [0, 10000], got -1"),
        (["--capability", "bogus"], "error: unknown capability 'bogus'"),
        (["--capability", "priority"], "error: capability 'priority' was not recorded"),
        (
            ["--metric", "median"],
            "error: --metric: expected one of topk_count, mean_diff, effect_size, attribution, got 'median'",
        ),
    ],
)
def test_analyze_user_mistakes_exit_2_with_one_line(
    run_dir: Path, tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    code, _, err = _probe(["analyze", str(run_dir), "--out", str(tmp_path), *args], capsys)
    assert code == 2
    assert err.strip().startswith(message) and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_analyze_without_activations_exits_2_in_a_real_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "probe_cli.main", "analyze", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"error: {tmp_path}: no activations.h5 here; record activations first with `probe run`"
    )


def test_html_plots_are_offline_and_complete(run_dir: Path, tmp_path: Path) -> None:
    result = analyze_run(run_dir, AnalysisConfig(layers="8-15", reorder=True), out_dir=tmp_path, png=False)
    names = {p.name for p in result.plots}
    for cap in ("multi_turn", "nested"):
        assert {f"{cap}_mlp_out_topk_count_maps.html", f"{cap}_mlp_out_topk_count_profile.html"} <= names
    assert "all_mlp_out_topk_count.html" in names
    assert (tmp_path / "plots" / "plotly.min.js").stat().st_size > 1_000_000  # shared, no CDN
    page = (tmp_path / "plots" / "multi_turn_mlp_out_topk_count_maps.html").read_text()
    assert 'src="plotly.min.js"' in page and "cdn.plot.ly" not in page
    assert "DPO \\u2212 SFT" in page and '"zmid":0.0' in page  # JSON-escaped title; diverging scale centred at 0
    assert to_json(result.summary)["capabilities"]["multi_turn"]["mlp_out"]["plots"] == [
        "multi_turn_mlp_out_topk_count_maps.html",
        "multi_turn_mlp_out_topk_count_profile.html",
    ]


@pytest.mark.slow
@pytest.mark.skipif(not chromium_available(), reason="PNG export needs Chromium (kaleido)")
def test_png_export_with_chromium(run_dir: Path, tmp_path: Path) -> None:
    result = analyze_run(run_dir, AnalysisConfig(layers="12-15"), capabilities=["nested"], out_dir=tmp_path, png=True)
    pngs = [p for p in result.plots if p.suffix == ".png"]
    assert len(pngs) == 3 and result.warnings == []
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_probe_run_summary_prints_the_window_once_and_the_stability_per_capability(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from probe_cli.commands.run import _print_top_layers

    _print_top_layers(analyze_run(run_dir, out_dir=tmp_path, plots=False))
    lines = capsys.readouterr().out.splitlines()
    window = [line for line in lines if line.startswith("window: ")]
    assert window == [
        "window: layers 6-15 — default window: the last 20/32 of depth, layers 6-15 of a 16-layer model "
        "(the paper's 12-31 scaled by depth)"
    ]
    for cap in ("multi_turn", "nested"):
        line = next(line for line in lines if line.startswith(f"{cap} / mlp_out: top discrepancy layers "))
        assert " — stable in " in line and line.endswith(("resamples (≥4 of 5 kept)", "target"))
