"""`probe run` -> `probe analyze` -> `probe intervene` on the tiny pair: the report, with placebo results."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from core.rows import read_test_rows
from interventions.config import ABConfig
from interventions.results import ABReport
from probe_cli.main import main
from tests.support.runs import recorded_multi_turn_run


@pytest.fixture(scope="module")
def analysed_run(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from analysis import AnalysisConfig, analyze_run

    run_dir = recorded_multi_turn_run(tiny_pair, tmp_path_factory.mktemp("intervene_run"), n_roles=10)
    analyze_run(
        run_dir, AnalysisConfig(layers="0-3", top_k=32), capabilities=["multi_turn"], hooks=["mlp_out"], plots=False
    )
    return run_dir


@pytest.mark.slow
def test_intervene_on_a_recorded_run(every_arm) -> None:
    """``probe intervene RUN`` with the run's defaults (held-out split, its DPO pairs, its top units): the launch of
    ``every_arm``, whose first arm is the main scale ×0 with its placebos."""
    report, out, printed = every_arm
    assert report["neurons"]["size"] == 6 and report["neurons"]["hook"] == "mlp_out"
    assert report["model_dir"].endswith("dpo")
    # the held-out split by default; the DPO margin still measured on the run's own (training) pairs
    assert report["data_file"].endswith("heldout.jsonl") and report["config"]["split"] == "heldout"
    assert report["outcome_pairs"] > 0 and report["config"]["dpo_file"].endswith("dpo.jsonl")
    assert report["placebo"]["n_sets"] == 2
    target = report["arms"][0]["capabilities"][0]
    assert target["capability"] == "multi_turn" and len(target["placebo"]["deltas"]) == 2
    assert "placebo percentile" in (out / "ab_report.md").read_text()
    assert "scale ×0.0 (main)" in printed and "multi_turn" in printed and str(out / "ab_report.md") in printed
    assert ABReport.load(out / "ab_report.json").split == "heldout"
    del report["config"]["split"]  # a report written before the split was recorded: it judged the test split
    assert ABReport.read(report).split == "test"


def test_intervene_reads_the_split_asked(analysed_run: Path) -> None:
    from data_synthesis.heldout.files import heldout_test_file
    from interventions.plan import resolve_sources, resolved_config

    data = analysed_run.parent / "data"
    default = ABConfig(run_dir=analysed_run, units="1:0")
    assert resolve_sources(default)[1] == heldout_test_file()
    assert resolve_sources(replace(default, split="test"))[1] == data / "test.jsonl"
    assert resolve_sources(replace(default, split="test", data_file=data / "sft.jsonl"))[1] == data / "sft.jsonl"
    # the report records the split its rows belong to, and held-out rows take the run's DPO pairs for the margin
    heldout = resolved_config(default, read_test_rows(heldout_test_file()))
    assert (heldout.split, heldout.dpo_file) == ("heldout", data / "dpo.jsonl")
    given = replace(default, data_file=data / "test.jsonl")
    assert resolved_config(given, read_test_rows(data / "test.jsonl")).split == "test"


def test_an_unknown_split_is_one_line(analysed_run: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["intervene", str(analysed_run), "--split", "train", "--out", str(tmp_path / "ab")])
    assert exc.value.code == 2
    assert "--split: expected one of heldout, test, got 'train'" in capsys.readouterr().err


def test_intervene_defaults_to_the_runs_neuron_set(analysed_run: Path, tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["intervene", str(analysed_run), "--capability", "nested", "--placebo", "0", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert (
        "capability 'nested' was not recorded in this run (recorded: multi_turn)" in err and "probe analyze" not in err
    )


ALL_EDITS = ["scale 0.0", "scale 0.5", "mean", "patch dpo<-sft", "patch sft<-dpo", "steer"]


@pytest.fixture(scope="module")
def every_arm(analysed_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    import contextlib
    import io

    out = tmp_path_factory.mktemp("every-arm") / "ab"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), pytest.raises(SystemExit) as exc:
        main(
            [
                "intervene",
                str(analysed_run),
                "-c",
                "multi_turn",
                "--edit",
                "scale,mean",
                "--edit",
                "patch,steer",
                "--factor",
                "0",
                "--dose",
                "0.5",
                "--top-k",
                "6",
                "--placebo",
                "2",
                "--limit",
                "2",
                "--max-new-tokens",
                "4",
                "--no-collateral",
                "--outcome-pairs",  # the outcomes run for every arm; 2 of the run's DPO pairs measure the margin
                "2",
                "--out",
                str(out),
            ]
        )
    assert exc.value.code in (0, None)
    return json.loads((out / "ab_report.json").read_text()), out, buffer.getvalue()


def test_every_edit_kind_is_an_arm_of_one_report_with_its_placebos(every_arm):
    report, out, printed = every_arm
    assert report["version"] == 2 and [a["name"] for a in report["arms"]] == ALL_EDITS
    arms = {a["name"]: a for a in report["arms"]}
    assert {a["model"] for a in report["arms"]} == {"dpo", "sft"} and arms["patch sft<-dpo"]["model"] == "sft"
    assert set(report["baselines"]) == {"dpo", "sft"}
    for name in ("scale 0.0", "mean", "patch dpo<-sft", "patch sft<-dpo", "steer"):
        target = arms[name]["capabilities"][0]
        assert arms[name]["placebo"]["n_sets"] == 2 and len(target["placebo"]["deltas"]) == 2, name
        for column in ("delta", "ci_low", "ci_high", "p_value", "rows_changed"):
            assert column in target
    assert arms["scale 0.5"]["placebo"] == {} and arms["scale 0.5"]["role"] == "dose"
    assert arms["steer"]["placebo"]["family"].startswith("random directions")
    assert (
        arms["mean"]["edits"][0]["kind"] == "set" and arms["mean"]["edits"][0]["source"] == "sft mean over multi_turn"
    )
    assert arms["patch dpo<-sft"]["edits"][0] == {
        "kind": "patch",
        "source": "sft",
        "hook": "mlp_out",
        "units": report["neurons"]["units"],
    }
    steer = arms["steer"]["edits"]
    assert [e["layer"] for e in steer] == sorted({u[0] for u in report["neurons"]["units"]}) and all(
        len(e["vector"]) == 32 for e in steer
    )
    markdown = (out / "ab_report.md").read_text()
    assert "## Every arm on multi_turn" in markdown and all(f"| {name} |" in markdown for name in ALL_EDITS)
    assert "every arm on multi_turn" in printed and "patch DPO ← SFT" in printed
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert set(records[0]["intervened"]) == set(ALL_EDITS) and set(records[0]["baselines"]) == {"dpo", "sft"}


def test_the_mean_and_steer_arms_read_the_runs_means(analysed_run: Path, every_arm):
    import numpy as np

    from probes.store import RunReader

    report, _, _ = every_arm
    arms = {a["name"]: a for a in report["arms"]}
    with RunReader(analysed_run) as run:
        layers = run.layers("multi_turn", "mlp_out")
        sft, dpo = (run.activations(m, "multi_turn", "mlp_out").astype(np.float64).mean(axis=0) for m in ("sft", "dpo"))
    values = arms["mean"]["edits"][0]["values"]
    for (layer, unit), value in zip(report["neurons"]["units"], values, strict=True):
        assert value == pytest.approx(sft[layers.index(layer), unit])
    for edit in arms["steer"]["edits"]:
        np.testing.assert_allclose(edit["vector"], sft[layers.index(edit["layer"])] - dpo[layers.index(edit["layer"])])


def test_edits_that_need_what_is_missing_are_one_line(analysed_run: Path, tiny_pair, tmp_path: Path, capsys):
    from tests.support.cli import one_line_error

    one_line_error(
        capsys,
        [
            "intervene",
            str(analysed_run),
            "-c",
            "nested",
            "--edit",
            "mean",
            "--top-k",
            "2",
            "--out",
            str(tmp_path / "a"),
        ],
        "capability 'nested' was not recorded in",
    )
    data = analysed_run.parent / "data" / "test.jsonl"
    one_line_error(
        capsys,
        [
            "intervene",
            "--model-dir",
            str(tiny_pair[1]),
            "--data",
            str(data),
            "--units",
            "1:0-3",
            "--edit",
            "steer",
            "--out",
            str(tmp_path / "b"),
        ],
        "--edit steer needs a run directory",
    )
    one_line_error(
        capsys,
        ["intervene", str(analysed_run), "--edit", "scale,ablate", "--out", str(tmp_path / "c")],
        "--edit: expected one of scale, mean, patch, steer, expo, expo-units, lda, got 'ablate'",
    )
    one_line_error(
        capsys,
        ["intervene", str(analysed_run), "--backend", "transformer_lens", "--out", str(tmp_path / "d")],
        "captures only and cannot apply edits",
    )
    one_line_error(
        capsys,
        ["intervene", str(analysed_run), "--units", "0:0-300000000", "--out", str(tmp_path / "e")],
        "beyond any model's layers and units",
    )
    one_line_error(
        capsys, ["intervene", str(analysed_run), "--factor", "1e308", "--out", str(tmp_path / "f")], "overflows float32"
    )
    assert not any((tmp_path / name).exists() for name in "abcdef")


def test_a_config_file_names_the_edits_and_the_out_dir(analysed_run: Path, tmp_path: Path, capsys):
    config = tmp_path / "ab.yaml"
    out = tmp_path / "from-config"
    config.write_text(
        f"edits: [mean]\ntop_k: 2\nplacebo: 0\nlimit: 1\nmax_new_tokens: 2\ncollateral: false\nout_dir: {out}\n"
    )
    with pytest.raises(SystemExit) as exc:
        main(["intervene", str(analysed_run), "--config", str(config)])
    assert exc.value.code in (0, None), capsys.readouterr().err
    report = json.loads((out / "ab_report.json").read_text())
    assert [a["name"] for a in report["arms"]] == ["mean"] and report["arms"][0]["role"] == "main"
