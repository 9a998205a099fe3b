"""Ctrl-C during ``probe intervene``: finished arms are kept, a rerun resumes to the same report.

Each case runs the real command in a subprocess and interrupts it with a real SIGINT when a
stage line shows (see tests/support/interrupts.py). Training's interrupts are in
tests/test_interrupts.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.interrupts import assert_interrupted, probe


def _intervene(model: Path, data: Path, out: Path) -> list[str]:
    return [
        "intervene",
        "--model-dir",
        str(model),
        "--data",
        str(data / "test.jsonl"),
        "--units",
        "1:0,1:3,2:5,3:7",
        "--factor",
        "0.5",
        "--placebo",
        "6",
        "--limit",
        "3",
        "--max-new-tokens",
        "12",
        "--out",
        str(out),
    ]


def _report(out: Path) -> dict:
    """The report without what legitimately differs between two runs: timings and paths."""
    body = json.loads((out / "ab_report.json").read_text())
    for arm in body["arms"]:
        arm.pop("seconds")
    body["baseline"].pop("seconds")
    for baseline in body["baselines"].values():
        baseline.pop("seconds")
    body.pop("paths")
    body["config"].pop("out_dir")
    return body


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "per-arm"])
def test_intervene_keeps_finished_arms_and_resumes_to_the_same_report(
    tiny_model_dir: Path, chat_data: Path, tmp_path: Path, engine: str
) -> None:
    """Shared decoding keeps each finished batch of prompts (every pass's tokens); the per-arm engine,
    each finished pass."""

    def args(out: Path) -> list[str]:
        return [*_intervene(tiny_model_dir, chat_data, out), "--engine", engine, "--batch-size", "4", "--collateral"]

    whole = probe(args(tmp_path / "whole"), tmp_path)
    assert whole.code == 0, whole.stderr
    cut = probe(
        args(tmp_path / "cut"), tmp_path, "dpo model: batch 2/" if engine == "shared" else "scale 0.5: placebo 2/6"
    )
    assert_interrupted(cut, "finished and kept in", f"--out {tmp_path / 'cut'}")
    kept = sorted(p.name for p in (tmp_path / "cut" / ".arms").glob("*.json"))
    if engine == "shared":
        assert kept and all(name.startswith("shared_dpo_") for name in kept) and "batch(es) of prompts" in cut.stderr
    else:
        assert "baseline_dpo.json" in kept
    assert not (tmp_path / "cut" / "ab_report.json").exists()
    resumed = probe(args(tmp_path / "cut"), tmp_path)
    assert resumed.code == 0, resumed.stderr
    assert (
        ("read back" in resumed.stderr)
        if engine == "shared"
        else ("baseline dpo: read back from an interrupted run" in resumed.stderr)
    )
    assert (tmp_path / "whole" / "generations.jsonl").read_bytes() == (
        tmp_path / "cut" / "generations.jsonl"
    ).read_bytes()
    assert _report(tmp_path / "whole") == _report(tmp_path / "cut")
    assert not (tmp_path / "cut" / ".arms").exists()


@pytest.mark.slow
def test_intervene_discards_arms_kept_under_other_settings(
    tiny_model_dir: Path, chat_data: Path, tmp_path: Path
) -> None:
    cut = probe(_intervene(tiny_model_dir, chat_data, tmp_path / "cut"), tmp_path, "scale 0.5: placebo 1/6")
    assert_interrupted(cut, "kept in")
    other = [*_intervene(tiny_model_dir, chat_data, tmp_path / "cut"), "--max-new-tokens", "6"]
    rerun = probe(other, tmp_path)
    assert rerun.code == 0, rerun.stderr
    assert "read back" not in rerun.stderr


def _shared_args(model: Path, data: Path, out: Path) -> list[str]:
    return [*_intervene(model, data, out), "--engine", "shared", "--batch-size", "4", "--collateral"]


@pytest.fixture(scope="module")
def whole_and_cut(tiny_model_dir: Path, chat_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An uninterrupted shared-engine run, and one cut after its first kept batches."""
    root = tmp_path_factory.mktemp("kept")
    whole = probe(_shared_args(tiny_model_dir, chat_data, root / "whole"), root)
    assert whole.code == 0, whole.stderr
    cut = probe(_shared_args(tiny_model_dir, chat_data, root / "cut"), root, "dpo model: batch 2/")
    assert_interrupted(cut, "finished and kept in")
    return {"whole": root / "whole", "cut": root / "cut", "home": root}


def _spoil_tokens(kept: dict, _key: str) -> dict:
    """Another real token in the first row (well formed, the checksum left as it was)."""
    row = kept["body"]["tokens"][0][0]
    row[0] = (row[0] + 1) % 100
    return kept


def _out_of_range(kept: dict, key: str) -> dict:
    """Token ids past any vocabulary, sealed with a checksum that matches: the decoder's own check must catch it."""
    from interventions.arms import sealed

    kept["body"]["tokens"][0][0][0] = 10**9
    return sealed(kept["body"], key, kept["name"])


def _other_settings(kept: dict, _key: str) -> dict:
    from interventions.arms import sealed

    return sealed(kept["body"], "f" * 64, kept["name"])


KEPT_FAULTS = {
    "out-of-range ids, checksum not updated": (
        lambda kept, _key: {**kept, "body": {**kept["body"], "tokens": [[[10**9]]]}},
        "its checksum does not match",
    ),
    "out-of-range ids, checksum matching": (_out_of_range, "holds token ids outside the model's vocabulary"),
    "well-formed fake tokens": (_spoil_tokens, "its checksum does not match"),
    "kept under other settings": (_other_settings, "kept under other settings"),
    "no checksum (an older toolkit's file)": (lambda kept, _key: kept["body"], "no checksum"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(KEPT_FAULTS))
def test_a_kept_batch_that_does_not_check_is_decoded_again_with_a_warning(
    fault: str, whole_and_cut: dict[str, Path], tiny_model_dir: Path, chat_data: Path, tmp_path: Path
) -> None:
    spoil, needle = KEPT_FAULTS[fault]
    out = Path(shutil.copytree(whole_and_cut["cut"], tmp_path / "cut"))
    batch = sorted((out / ".arms").glob("shared_dpo_*.json"))[0]
    key = (out / ".arms" / "fingerprint").read_text().strip()
    batch.write_text(json.dumps(spoil(json.loads(batch.read_text()), key)))
    resumed = probe(_shared_args(tiny_model_dir, chat_data, out), whole_and_cut["home"])
    assert resumed.code == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    warnings = [line for line in resumed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and needle in warnings[0], resumed.stderr
    assert ("decoded again" in warnings[0]) or (str(batch) in warnings[0] and "generated again" in warnings[0])
    assert (whole_and_cut["whole"] / "generations.jsonl").read_bytes() == (out / "generations.jsonl").read_bytes()
    assert _report(whole_and_cut["whole"]) == _report(out)
