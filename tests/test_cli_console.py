"""What result-printing commands tell a reader who is not at a terminal, and what they warn about.

A scripted before/after evaluation pipes ``probe intervene`` to a log; at rich's default
80 columns the table's headers and cells were cut (``befo…``, ``McN…``, ``plac…``). Output
that is not a terminal is now printed full width (:mod:`probe_cli.console`). The same
printing flags results that cannot mean anything: a factor so large that the model's
logits break (``--factor 1e30`` used to score empty generations in silence), and one model
given twice to ``probe models eval`` (or ranked against itself for a neuron set).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from probe_cli.console import WIDE, console
from probe_cli.main import main


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("console-data")
    synthesize(out, n_roles=2, seed=0)
    return out


@pytest.fixture(autouse=True)
def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich reads COLUMNS when it is set; the defect shows at its default width, 80."""
    monkeypatch.delenv("COLUMNS", raising=False)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    captured = capsys.readouterr()
    return captured.out, captured.err


def intervene(model: Path, data: Path, out: Path, factor: str) -> list[str]:
    return [
        "intervene",
        "--model-dir",
        str(model),
        "--data",
        str(data / "test.jsonl"),
        "--units",
        "1:0,1:3,2:5",
        "--factor",
        factor,
        "--placebo",
        "2",
        "--limit",
        "2",
        "--max-new-tokens",
        "6",
        "--out",
        str(out),
    ]


def test_piped_intervene_tables_are_not_cut(
    tiny_model_dir: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = run([*intervene(tiny_model_dir, data, tmp_path / "ab", "0.5"), "--collateral"], capsys)
    assert "…" not in out
    header = next(line for line in out.splitlines() if "capability" in line and "McNemar" in line)
    for column in ("before", "after", "Δ (pts)", "95% CI", "McNemar p", "placebo percentile", "generations changed"):
        assert column in header, header
    assert "knowledge_boundary" in out and str(tmp_path / "ab" / "ab_report.md") in out


def test_the_console_is_wide_off_a_terminal_and_terminal_sized_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert console().width == WIDE and console(stderr=True).width == WIDE

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100


def test_a_factor_that_breaks_the_model_is_flagged(
    tiny_model_dir: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = run(intervene(tiny_model_dir, data, tmp_path / "ab", "1e30"), capsys)
    assert "INVALID: scale ×1e+30 broke the model" in out
    report = json.loads((tmp_path / "ab" / "ab_report.json").read_text())
    guard = report["arms"][0]["guard"]
    assert guard["degenerate_logits"] > 0 and guard["faults"] and any("1e+30" in w for w in report["warnings"])
    assert "**INVALID:** scale ×1e+30" in (tmp_path / "ab" / "ab_report.md").read_text()
    control = next(d for d in report["arms"] if d["factor"] == 0.0)
    assert control["guard"]["faults"] == [] and control["guard"]["degenerate_logits"] == 0


def test_an_ordinary_factor_is_not_flagged(
    tiny_model_dir: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = run(intervene(tiny_model_dir, data, tmp_path / "ab", "0.5"), capsys)
    assert "INVALID" not in out
    assert json.loads((tmp_path / "ab" / "ab_report.json").read_text())["arms"][0]["guard"]["degenerate_logits"] == 0


def test_models_eval_warns_about_one_model_given_twice(
    tiny_model_dir: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "same"
    os.symlink(tiny_model_dir, link)
    _, err = run(
        [
            "models",
            "eval",
            "--sft",
            str(tiny_model_dir),
            "--dpo",
            str(link),
            "--test",
            str(data / "test.jsonl"),
            "--max-rows",
            "2",
            "--max-new-tokens",
            "2",
            "--out",
            str(tmp_path / "eval.json"),
        ],
        capsys,
    )
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "--sft and --dpo are the same model" in warnings[0]
    assert "DPO-SFT difference will be 0" in warnings[0]
    assert json.loads((tmp_path / "eval.json").read_text())["warnings"] == [warnings[0].removeprefix("warning: ")]


def test_models_eval_of_two_models_does_not_warn(
    tiny_pair: tuple[Path, Path], data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = run(
        [
            "models",
            "eval",
            "--sft",
            str(tiny_pair[0]),
            "--dpo",
            str(tiny_pair[1]),
            "--test",
            str(data / "test.jsonl"),
            "--max-rows",
            "2",
            "--max-new-tokens",
            "2",
        ],
        capsys,
    )
    assert "warning:" not in err


def test_a_neuron_set_ranked_on_one_model_twice_is_flagged(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from access.units import Neuron, NeuronSet
    from interventions.plan import provenance_warnings

    monkeypatch.setenv("PROBE_HOME", str(tmp_path))  # the weights fingerprint is cached there

    same = NeuronSet([Neuron(1, 0)], hook="mlp_out", model_hashes={"sft": "ab" * 32, "dpo": "ab" * 32})
    assert any("one model recorded twice" in w for w in provenance_warnings(same, "dpo", tiny_model_dir))
    pair = NeuronSet([Neuron(1, 0)], hook="mlp_out", model_hashes={"sft": "ab" * 32, "dpo": "cd" * 32})
    assert not any("one model recorded twice" in w for w in provenance_warnings(pair, "sft", tiny_model_dir))
