"""Neuron sources and their errors: --units lists, neuron-set files, --top-k, and the CLI's exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from access.factors import PAPER_FACTOR, parse_factors, validate_factor
from access.units import Neuron, NeuronSet
from core.decoding import GenerationConfig
from core.errors import ProbeError
from interventions.config import ABConfig
from interventions.selection import load_neuron_file, parse_units, top_k_of
from probe_cli.main import main


def test_parse_units_lists_and_ranges():
    ns = parse_units("14:3, 14:9,20:0,2:5-7", "mlp_post")
    assert ns.by_layer() == {14: [3, 9], 20: [0], 2: [5, 6, 7]}
    assert ns.hook == "mlp_post" and ns.selection["rule"] == "units"


@pytest.mark.parametrize(
    "spec,match",
    [
        ("14", "LAYER:UNIT"),
        ("a:3", "bad entry"),
        ("3:x", "bad entry"),
        ("3:9-2", "bad entry"),
        ("", "no units"),
        ("1:2,1:2", "listed twice"),
        ("-1:2", "bad entry"),
    ],
)
def test_parse_units_errors(spec, match):
    with pytest.raises(ProbeError, match=match):
        parse_units(spec)


def test_unknown_hook_is_refused():
    with pytest.raises(ProbeError, match="unknown hook point"):
        parse_units("1:2", "mlp_in")


def test_factor_validation():
    assert validate_factor(0) == 0.0 and validate_factor(PAPER_FACTOR) == PAPER_FACTOR
    for bad in (float("nan"), float("inf"), "0.5", None, True):
        with pytest.raises(ProbeError, match="finite number"):
            validate_factor(bad)  # type: ignore[arg-type]
    assert parse_factors("0, 0.5,0.999999") == [0.0, 0.5, 0.999999]
    with pytest.raises(ProbeError, match="'half' is not a number"):
        parse_factors("0,half")


def _neuron_file(tmp_path: Path, neurons: list[Neuron]) -> Path:
    return NeuronSet(neurons, "mlp_out", metric="topk_count", capability="multi_turn").save(tmp_path / "n.json")


def test_neuron_file_and_top_k(tmp_path: Path):
    path = _neuron_file(tmp_path, [Neuron(1, 2, 0.1), Neuron(2, 3, -0.5), Neuron(3, 1, 0.3)])
    assert len(load_neuron_file(path)) == 3
    top = load_neuron_file(path, top_k=2)
    assert [(n.layer, n.unit) for n in top.neurons] == [(2, 3), (3, 1)]
    with pytest.raises(ProbeError, match="only 3 units"):
        top_k_of(top_k_of(load_neuron_file(path), 3), 4)


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", "malformed JSON"),
        ('{"format": "other"}', "not a neuron-set file"),
        ('{"format": "rolemrc-probe/neuron-set", "hook": "mlp_out", "neurons": []}', "non-empty list"),
        (
            '{"format": "rolemrc-probe/neuron-set", "hook": "mlp_out", "neurons": [{"layer": "a", "unit": 1}]}',
            "integers",
        ),
    ],
)
def test_bad_neuron_files(tmp_path: Path, content: str, match: str):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ProbeError, match=match):
        load_neuron_file(path)


def test_config_validation():
    base = {"model_dir": "m", "data_file": "d.jsonl"}
    assert ABConfig(units="1:2", **base).factors == [PAPER_FACTOR, 0.0]
    assert ABConfig(units="1:2", doses=[0.5, 0.0], positive_control=True, **base).factors == [PAPER_FACTOR, 0.5, 0.0]
    for kwargs, match in [
        ({"units": "1:2", "neurons": "x.json"}, "cannot be combined"),
        ({"units": "1:2", "placebo": -1}, "--placebo"),
        ({"units": "1:2", "judge": "gpt"}, "--judge"),
        ({"units": "1:2", "dtype": "int8"}, "--dtype"),
        ({"units": "1:2", "capability": "charm"}, "unknown capability"),
        ({}, "no neurons"),
        ({"units": "1:2", "factor": float("nan")}, "finite number"),
        ({"units": "1:2", "model": "base"}, "--model"),
        (
            {"units": "1:2", "backend": "nnsight", "generation": GenerationConfig(do_sample=True)},
            "decodes greedily only",
        ),
        ({"units": "1:2", "backend": "transformer_lens"}, "captures only and cannot apply edits"),
        ({"units": "1:2", "edits": ["scale", "shift"]}, "--edit: expected one of .*got 'shift'"),
        ({"units": "1:2", "edits": ["mean"]}, "needs a run directory"),
        ({"units": "1:2", "device": "cuda:7"}, "--device cuda:7"),
    ]:
        with pytest.raises(ProbeError, match=match):
            ABConfig(**{**base, **kwargs})
    assert ABConfig(units="1:2").run_dir is None  # no run: the embedded default pair is used


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code), capsys.readouterr().err


@pytest.fixture()
def rows_file(tmp_path: Path) -> Path:
    from core.rows import write_jsonl
    from core.schema import TestRow, Turn

    rows = [
        TestRow(
            [Turn("user", "What is the capital?")], "Elmsworth.", "role_related_mrc_refused_no_narration-2ndrefused"
        )
    ]
    path = tmp_path / "test.jsonl"
    write_jsonl(path, rows)
    return path


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--units", "1:64"], "--units 1:64: unit 64 of layer 1 is outside mlp_out, which has units 0-31"),
        (["--units", "7:0"], "layer 7 (unit 0) is outside the model, which has layers 0-3"),
        (["--units", "1:0", "--factor", "nan"], "--factor: expected a finite number"),
        (["--units", "1:0", "--dose", "0,abc"], "'abc' is not a number"),
        (["--units", "1:0", "--neurons", "x.json"], "cannot be combined"),
    ],
)
def test_cli_errors_exit_2_with_one_line(tiny_model_dir: Path, rows_file: Path, tmp_path: Path, capsys, extra, match):
    code, err = _cli(
        [
            "intervene",
            "--model-dir",
            str(tiny_model_dir),
            "--data",
            str(rows_file),
            "--placebo",
            "0",
            "--out",
            str(tmp_path / "out"),
            *extra,
        ],
        capsys,
    )
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and match in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "ab_report.json").exists()


def test_cli_non_numeric_factor_is_a_usage_error(tiny_model_dir: Path, rows_file: Path, capsys):
    code, err = _cli(
        [
            "intervene",
            "--model-dir",
            str(tiny_model_dir),
            "--data",
            str(rows_file),
            "--units",
            "1:0",
            "--factor",
            "abc",
        ],
        capsys,
    )
    assert code == 2 and "--factor" in err and "Traceback" not in err


def test_cli_bad_neuron_file(tiny_model_dir: Path, rows_file: Path, tmp_path: Path, capsys):
    bad = tmp_path / "neurons.json"
    bad.write_text(
        json.dumps({"format": "rolemrc-probe/neuron-set", "hook": "mlp_out", "neurons": [{"layer": 1, "unit": 999}]})
    )
    code, err = _cli(
        [
            "intervene",
            "--model-dir",
            str(tiny_model_dir),
            "--data",
            str(rows_file),
            "--neurons",
            str(bad),
            "--placebo",
            "0",
        ],
        capsys,
    )
    assert code == 2 and "unit 999 of layer 1 is outside mlp_out" in err and str(bad) in err
    code, err = _cli(
        [
            "intervene",
            "--model-dir",
            str(tiny_model_dir),
            "--data",
            str(rows_file),
            "--neurons",
            str(tmp_path / "missing.json"),
        ],
        capsys,
    )
    assert code == 2 and "no such neuron-set file" in err


def test_provenance_warning_when_ranked_on_other_weights(tiny_model_dir: Path):
    from core.provenance import weights_sha256
    from interventions.plan import provenance_warnings

    ns = NeuronSet([Neuron(1, 2)], "mlp_out", model_hashes={"dpo": "0" * 64})
    warnings = provenance_warnings(ns, "dpo", tiny_model_dir)
    assert len(warnings) == 1 and "may not mean the same thing" in warnings[0]
    ns.model_hashes["dpo"] = weights_sha256(tiny_model_dir)
    assert provenance_warnings(ns, "dpo", tiny_model_dir) == []
    assert provenance_warnings(NeuronSet([Neuron(1, 2)], "mlp_out"), "dpo", tiny_model_dir) == []
