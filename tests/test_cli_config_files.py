"""``--config FILE`` on every command: the file sets config fields or options, flags override it.

The config dataclasses' field defaults are the only defaults; a config file names some
fields, and what a flag gives wins. A typo in a key is an error naming the file, not a
silent fallback to a default.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.summary import AnalysisSummary
from tests.support.cli import exit_of, one_line_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pair(tiny_pair, data: Path) -> list[str]:
    return ["--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--data", str(data)]


def test_run_reads_a_config_file_and_flags_override_it(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    config = tmp_path / "record.json"
    config.write_text(
        json.dumps({"capabilities": "priority", "hooks": ["mlp_post"], "batch-size": 2, "store_dtype": "float32"})
    )
    out = tmp_path / "run"
    code, _, err = exit_of(
        [
            "run",
            "--config",
            str(config),
            "--hook",
            "mlp_out",
            "--out",
            str(out),
            "--no-analyze",
            "-q",
            *_pair(tiny_pair, rolemrc_file),
        ],
        capsys,
    )
    assert code == 0, err
    settings = json.loads((out / "run.json").read_text())["settings"]
    # the flag won; the file set the rest
    assert settings["hooks"] == ["mlp_out"] and settings["store_dtype"] == "float32"
    assert (out / "activations.h5").is_file()


def test_analyze_reads_a_config_file_and_flags_override_it(
    tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert (
        exit_of(
            ["run", "-c", "multi_turn", "--out", str(out), "--no-analyze", "-q", *_pair(tiny_pair, rolemrc_file)],
            capsys,
        )[0]
        == 0
    )
    config = tmp_path / "analysis.yaml"
    config.write_text("metric: mean_diff\ntop-k: 5\nstability_resamples: 0\n")
    code, _, err = exit_of(
        ["analyze", str(out), "--config", str(config), "--metric", "topk_count", "--no-plots"], capsys
    )
    assert code == 0, err
    summary = AnalysisSummary.load(out / "analysis" / "summary.json")
    assert (
        summary.metric == "topk_count"
        and summary.settings["top_k"] == 5
        and summary.settings["stability_resamples"] == 0
    )
    assert summary.hook("multi_turn", "mlp_out").stability is None


@pytest.mark.parametrize(
    "content, message",
    [
        (
            json.dumps({"batch_sise": 2}),
            r"--config .*bad.json: unknown option\(s\) batch_sise; expected some of .*batch_size",
        ),
        (b"\xff\xfe\x00garbage", r"--config .*bad.json"),
        (json.dumps([1, 2]), r"--config .*bad.json: expected a mapping of option names to values, got list"),
    ],
)
def test_a_bad_config_file_is_one_line(
    content, message: str, tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    import re

    bad = tmp_path / "bad.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, _, err = exit_of(
        ["run", "-c", "priority", "--config", str(bad), "--out", str(tmp_path / "r"), *_pair(tiny_pair, rolemrc_file)],
        capsys,
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and re.search(message, lines[0]), err
    assert not (tmp_path / "r").exists()


def test_intervene_reads_a_config_file_and_flags_override_it(
    tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    config = tmp_path / "ab.json"
    config.write_text(
        json.dumps(
            {
                "units": "1:0,2:3",
                "placebo": 1,
                "limit": 1,
                "max_new_tokens": 4,
                "capability": "priority",
                "collateral": False,
                "positive_control": False,
            }
        )
    )
    out = tmp_path / "ab"
    code, _, err = exit_of(
        [
            "intervene",
            "--config",
            str(config),
            "--placebo",
            "0",
            "--model-dir",
            str(tiny_pair[1]),
            "--data",
            str(rolemrc_file),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    report = json.loads((out / "ab_report.json").read_text())
    assert (
        report["config"]["placebo"] == 0
        and report["config"]["max_new_tokens"] == 4
        and report["config"]["capability"] == "priority"
    )


# synthesize, validate, judge and models: the file names the command's options by long name


def test_synthesize_reads_a_config_file_and_a_flag_overrides_it(tmp_path: Path, capsys) -> None:
    config = tmp_path / "synth.yaml"
    config.write_text(f"roles: 3\nseed: 5\nout: {tmp_path / 'from_file'}\njson: true\n")
    code, out, err = exit_of(["synthesize", "--config", str(config), "--seed", "6"], capsys)
    assert code == 0, err
    assert json.loads(out)["files"]["profiles.jsonl"] == 3  # roles and --json came from the file
    code, _, err = exit_of(["synthesize", "--roles", "3", "--seed", "6", "--out", str(tmp_path / "from_flags")], capsys)
    assert code == 0, err
    for name in ("sft.jsonl", "dpo.jsonl", "test.jsonl"):  # the flag's seed won: byte-identical to the all-flags call
        assert (tmp_path / "from_file" / name).read_bytes() == (tmp_path / "from_flags" / name).read_bytes()


def test_judge_reads_its_options_from_a_config_file(rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps("I cannot say.") + "\n" for _ in rolemrc_file.read_text().splitlines()))
    config = tmp_path / "judge.json"
    config.write_text(
        json.dumps({"judge": "rules", "data": str(rolemrc_file), "responses": str(responses), "limit": 2, "json": True})
    )
    code, out, err = exit_of(["judge", "--config", str(config)], capsys)
    assert code == 0, err
    assert json.loads(out)["rows"] == 2
    code, out, err = exit_of(["judge", "--config", str(config), "--limit", "3"], capsys)
    assert code == 0 and json.loads(out)["rows"] == 3, err


def test_validate_takes_its_kind_from_a_config_file(rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    config = tmp_path / "validate.yaml"
    config.write_text("kind: sft\n")
    one_line_error(capsys, ["validate", str(rolemrc_file), "--config", str(config)], f"{rolemrc_file}:1:", "SFT row")
    code, out, err = exit_of(
        ["validate", str(rolemrc_file), "--config", str(config), "--kind", "test", "--json"], capsys
    )
    assert code == 0 and json.loads(out)["kind"] == "test", err


def test_models_eval_reads_a_config_file(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    result = tmp_path / "eval.json"
    config = tmp_path / "eval.yaml"
    config.write_text(f"max-rows: 4\nmax-new-tokens: 2\nbatch-size: 2\nout: {result}\n")
    code, _, err = exit_of(
        [
            "models",
            "eval",
            "--sft",
            str(tiny_pair[0]),
            "--dpo",
            str(tiny_pair[1]),
            "--test",
            str(rolemrc_file),
            "--config",
            str(config),
        ],
        capsys,
    )
    assert code == 0, err
    saved = json.loads(result.read_text())
    assert sum(saved["task_counts"].values()) == 4 and len(saved["sft"]["responses"]) == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["synthesize"],
        ["validate", "x.jsonl"],
        ["judge"],
        ["models", "default"],
        ["models", "eval"],
        ["models", "fetch-base"],
    ],
)
def test_every_command_refuses_an_unknown_key_naming_the_file(argv: list[str], tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("max-retriez: 2\n")
    one_line_error(
        capsys, [*argv, "--config", str(bad)], f"--config {bad}: unknown option(s) max_retriez; expected some of "
    )


@pytest.mark.parametrize(
    "content, message",
    [
        ("roles: 3000\n", "roles: expected an integer in [2, 800], got 3000"),
        ("seed: abc\n", "seed: expected an integer in [0, 4294967295], got 'abc'"),
        ("backend: gpt\n", "expected one of offline, llm, got 'gpt'"),
        ("model: m\n", "--model: only for --backend llm"),
    ],
)
def test_a_bad_value_in_a_command_config_is_one_line_and_writes_nothing(
    content: str, message: str, tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    one_line_error(capsys, ["synthesize", "--config", str(bad), "--out", str(tmp_path / "data")], message)
    assert not (tmp_path / "data").exists()
