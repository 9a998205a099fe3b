"""Ctrl-C during ``probe intervene``: finished arms are kept, a rerun resumes to the same report.

Each cut runs the real command in a subprocess and interrupts it with a real SIGINT when a
stage line shows (see tests/support/interrupts.py); the runs no signal reaches (the uninterrupted
reference, the resume) run in this process, under one torch thread as the subprocess has. One
shared-engine cut (the module fixture) serves every case that resumes or reruns it, each on its
own copy. Training's interrupts are in tests/test_interrupts.py.

The runs are as small as the behaviours allow: 3 rows per capability with the collateral ones in
batches of 4 prompts make 4 batches (a cut after the second leaves batches to resume), and 2
placebo sets are the fewest that let the per-arm cut come after a finished set (below
MIN_PLACEBO_SETS every set runs, so both are generated).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.interrupts import assert_interrupted, probe, probe_here

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs in this process match the subprocess's numbers


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
        "2",
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


def _shared_args(model: Path, data: Path, out: Path) -> list[str]:
    return [*_intervene(model, data, out), "--engine", "shared", "--batch-size", "4", "--collateral"]


@pytest.fixture(scope="module")
def whole_and_cut(tiny_model_dir: Path, chat_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An uninterrupted shared-engine run, and one cut by Ctrl-C after its first kept batches (every case that
    resumes or reruns it copies it first)."""
    root = tmp_path_factory.mktemp("kept")
    whole = probe_here(_shared_args(tiny_model_dir, chat_data, root / "whole"), root)
    assert whole.code == 0, whole.stderr
    cut = probe(_shared_args(tiny_model_dir, chat_data, root / "cut"), root, "dpo model: batch 2/")
    assert_interrupted(cut, "finished and kept in", f"--out {root / 'cut'}")
    assert "batch(es) of prompts" in cut.stderr
    assert not (root / "cut" / "ab_report.json").exists()
    return {"whole": root / "whole", "cut": root / "cut", "home": root}


def _per_arm_args(model: Path, data: Path, out: Path) -> list[str]:
    return [*_intervene(model, data, out), "--engine", "per-arm", "--batch-size", "4", "--collateral"]


def _whole_and_per_arm_cut(model: Path, data: Path, root: Path) -> dict[str, Path]:
    """The per-arm engine's uninterrupted run, and one cut by Ctrl-C as its second placebo set starts."""
    whole = probe_here(_per_arm_args(model, data, root / "whole"), root)
    assert whole.code == 0, whole.stderr
    cut = probe(_per_arm_args(model, data, root / "cut"), root, "scale 0.5: placebo 2/2")
    assert_interrupted(cut, "finished and kept in", f"--out {root / 'cut'}")
    assert not (root / "cut" / "ab_report.json").exists()
    return {"whole": root / "whole", "cut": root / "cut", "home": root}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "per-arm"])
def test_intervene_keeps_finished_arms_and_resumes_to_the_same_report(
    whole_and_cut: dict[str, Path], tiny_model_dir: Path, chat_data: Path, tmp_path: Path, engine: str
) -> None:
    """Shared decoding keeps each finished batch of prompts (every pass's tokens); the per-arm engine,
    each finished pass. The shared engine's cut is the module's (copied), the per-arm one's its own."""
    if engine == "shared":
        runs = {**whole_and_cut, "cut": Path(shutil.copytree(whole_and_cut["cut"], tmp_path / "cut"))}
        args = _shared_args
    else:
        runs, args = _whole_and_per_arm_cut(tiny_model_dir, chat_data, tmp_path), _per_arm_args
    cut = runs["cut"]
    kept = sorted(p.name for p in (cut / ".arms").glob("*.json"))
    if engine == "shared":
        assert len(kept) >= 2 and all(name.startswith("shared_dpo_") for name in kept), kept
    else:
        assert "baseline_dpo.json" in kept
    resumed = probe_here(args(tiny_model_dir, chat_data, cut), runs["home"])
    assert resumed.code == 0, resumed.stderr
    assert (
        ("read back" in resumed.stderr)
        if engine == "shared"
        else ("baseline dpo: read back from an interrupted run" in resumed.stderr)
    )
    assert (runs["whole"] / "generations.jsonl").read_bytes() == (cut / "generations.jsonl").read_bytes()
    assert _report(runs["whole"]) == _report(cut)
    assert not (cut / ".arms").exists()


@pytest.mark.slow
def test_intervene_discards_arms_kept_under_other_settings(
    whole_and_cut: dict[str, Path], tiny_model_dir: Path, chat_data: Path, tmp_path: Path
) -> None:
    """The module's cut, rerun into the same --out with fewer new tokens: nothing it kept is read back."""
    out = Path(shutil.copytree(whole_and_cut["cut"], tmp_path / "cut"))
    other = [*_shared_args(tiny_model_dir, chat_data, out), "--max-new-tokens", "6"]
    rerun = probe_here(other, whole_and_cut["home"])
    assert rerun.code == 0, rerun.stderr
    assert "read back" not in rerun.stderr


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
    """A copy of the module's cut with its first kept batch spoiled, resumed in this process."""
    spoil, needle = KEPT_FAULTS[fault]
    out = Path(shutil.copytree(whole_and_cut["cut"], tmp_path / "cut"))
    batch = sorted((out / ".arms").glob("shared_dpo_*.json"))[0]
    key = (out / ".arms" / "fingerprint").read_text().strip()
    batch.write_text(json.dumps(spoil(json.loads(batch.read_text()), key)))
    resumed = probe_here(_shared_args(tiny_model_dir, chat_data, out), whole_and_cut["home"])
    assert resumed.code == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    warnings = [line for line in resumed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and needle in warnings[0], resumed.stderr
    assert ("decoded again" in warnings[0]) or (str(batch) in warnings[0] and "generated again" in warnings[0])
    assert (whole_and_cut["whole"] / "generations.jsonl").read_bytes() == (out / "generations.jsonl").read_bytes()
    assert _report(whole_and_cut["whole"]) == _report(out)
