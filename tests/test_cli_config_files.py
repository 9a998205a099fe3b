"""``--config FILE`` on `probe run` and `probe analyze`: the file sets config fields, flags override it.

The config dataclasses' field defaults are the only defaults; a config file names some
fields, and what a flag gives wins. A typo in a key is an error naming the file, not a
silent fallback to a default.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.summary import AnalysisSummary
from tests.support.cli import exit_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pair(tiny_pair, data: Path) -> list[str]:  # type: ignore[no-untyped-def]
    return ["--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--data", str(data)]


def test_run_reads_a_config_file_and_flags_override_it(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "record.json"
    config.write_text(json.dumps({"capabilities": "priority", "hooks": ["mlp_post"], "batch-size": 2, "store_dtype": "float32"}))
    out = tmp_path / "run"
    code, _, err = exit_of(["run", "--config", str(config), "--hook", "mlp_out", "--out", str(out), "--no-analyze", "-q",
                          *_pair(tiny_pair, rolemrc_file)], capsys)
    assert code == 0, err
    settings = json.loads((out / "run.json").read_text())["settings"]
    assert settings["hooks"] == ["mlp_out"] and settings["store_dtype"] == "float32"  # the flag won; the file set the rest
    assert (out / "activations.h5").is_file()


def test_analyze_reads_a_config_file_and_flags_override_it(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    assert exit_of(["run", "-c", "multi_turn", "--out", str(out), "--no-analyze", "-q", *_pair(tiny_pair, rolemrc_file)], capsys)[0] == 0
    config = tmp_path / "analysis.yaml"
    config.write_text("metric: mean_diff\ntop-k: 5\nstability_resamples: 0\n")
    code, _, err = exit_of(["analyze", str(out), "--config", str(config), "--metric", "topk_count", "--no-plots"], capsys)
    assert code == 0, err
    summary = AnalysisSummary.load(out / "analysis" / "summary.json")
    assert summary.metric == "topk_count" and summary.settings["top_k"] == 5 and summary.settings["stability_resamples"] == 0
    assert summary.hook("multi_turn", "mlp_out").stability is None


@pytest.mark.parametrize("content, message", [
    (json.dumps({"batch_sise": 2}), r"--config .*bad.json: unknown option\(s\) batch_sise; expected some of .*batch_size"),
    (b"\xff\xfe\x00garbage", r"--config .*bad.json"),
    (json.dumps([1, 2]), r"--config .*bad.json: expected a mapping of option names to values, got list"),
])
def test_a_bad_config_file_is_one_line(content, message: str, tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import re

    bad = tmp_path / "bad.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, _, err = exit_of(["run", "-c", "priority", "--config", str(bad), "--out", str(tmp_path / "r"), *_pair(tiny_pair, rolemrc_file)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and re.search(message, lines[0]), err
    assert not (tmp_path / "r").exists()


def test_intervene_reads_a_config_file_and_flags_override_it(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "ab.json"
    config.write_text(json.dumps({"units": "1:0,2:3", "placebo": 1, "limit": 1, "max_new_tokens": 4, "capability": "priority",
                                  "collateral": False, "positive_control": False}))
    out = tmp_path / "ab"
    code, _, err = exit_of(["intervene", "--config", str(config), "--placebo", "0", "--model-dir", str(tiny_pair[1]),
                          "--data", str(rolemrc_file), "--out", str(out)], capsys)
    assert code == 0, err
    report = json.loads((out / "ab_report.json").read_text())
    assert report["config"]["placebo"] == 0 and report["config"]["max_new_tokens"] == 4 and report["config"]["capability"] == "priority"
