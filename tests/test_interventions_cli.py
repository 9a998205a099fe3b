"""`probe run` -> `probe analyze` -> `probe intervene` on the tiny pair: the report, with placebo results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe_cli.main import main


@pytest.fixture(scope="module")
def analysed_run(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from analysis import analyze_run
    from data_synthesis.offline import synthesize
    from probes.config import RecordConfig
    from probes.recording import record_run

    root = tmp_path_factory.mktemp("intervene_run")
    synthesize(root / "data", n_roles=10, seed=0)
    result = record_run(RecordConfig(sft_dir=tiny_pair[0], dpo_dir=tiny_pair[1], data_file=root / "data" / "test.jsonl",
                                     capabilities="multi_turn", hooks="mlp_out", out_dir=root / "run", device="cpu", dtype="float32"),
                        progress=False)
    run_dir = Path(getattr(result, "run_dir", root / "run"))
    analyze_run(run_dir, layers="0-3", capabilities=["multi_turn"], hooks=["mlp_out"], top_k=32, plots=False)
    return run_dir


@pytest.mark.slow
def test_intervene_on_a_recorded_run(analysed_run: Path, tmp_path: Path, capsys):
    out = tmp_path / "ab"
    try:
        main(["intervene", str(analysed_run), "--capability", "multi_turn", "--top-k", "8", "--factor", "0", "--placebo", "2",
              "--limit", "3", "--max-new-tokens", "6", "--out", str(out)])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    report = json.loads((out / "ab_report.json").read_text())
    assert report["neurons"]["size"] == 8 and report["neurons"]["hook"] == "mlp_out"
    assert report["model_dir"].endswith("dpo") and report["data_file"].endswith("test.jsonl")
    assert report["placebo"]["n_sets"] == 2
    target = report["arms"][0]["capabilities"][0]
    assert target["capability"] == "multi_turn" and len(target["placebo"]["deltas"]) == 2
    assert "placebo pct" in (out / "ab_report.md").read_text()
    printed = capsys.readouterr().out
    assert "scale ×0.0 (main)" in printed and "multi_turn" in printed and str(out / "ab_report.md") in printed


def test_intervene_defaults_to_the_runs_neuron_set(analysed_run: Path, tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["intervene", str(analysed_run), "--capability", "nested", "--placebo", "0", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "capability 'nested' was not recorded in this run (recorded: multi_turn)" in err and "probe analyze" not in err
