"""A recording killed with SIGKILL mid-run resumes to arrays identical to an uninterrupted run.

A real subprocess records into a run dir; once a few batch shards exist it is killed with
``kill -9`` (no cleanup code runs: no ``finally``, no atexit, no h5py close). The next
``record_run`` into the same dir must skip what is done and end with exactly the arrays
of a run that was never interrupted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.run_dir import JOURNAL_DIR
from probes.config import RecordConfig
from probes.recording import record_run
from tests.support.runs import run_arrays

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import sys
from probes.config import RecordConfig
from probes.recording import record_run
record_run(RecordConfig(sft_dir=sys.argv[1], dpo_dir=sys.argv[2], data_file=sys.argv[3], out_dir=sys.argv[4],
                        capabilities="multi_turn,priority", hooks="mlp_out,mlp_post", batch_size=1), progress=False)
"""


def _config(tiny_pair, data: Path, out: Path) -> RecordConfig:
    return RecordConfig(
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        data_file=data,
        out_dir=out,
        capabilities="multi_turn,priority",
        hooks="mlp_out,mlp_post",
        batch_size=1,
    )


def _shards(run_dir: Path) -> int:
    return len(list((run_dir / JOURNAL_DIR).glob("*/*.npz"))) if (run_dir / JOURNAL_DIR).is_dir() else 0


@pytest.fixture(scope="module")
def killed_and_whole(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A recording killed with SIGKILL after its first shards, and the same recording never interrupted (its result
    too): the resume test and every seal case copy the killed one and resume it."""
    root = tmp_path_factory.mktemp("sealed")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tiny_pair[0]), str(tiny_pair[1]), str(rolemrc_file), str(root / "killed")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    while _shards(root / "killed") < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    assert _shards(root / "killed") >= 3 and not (root / "killed" / "activations.h5").exists()  # killed mid-run
    whole = record_run(_config(tiny_pair, rolemrc_file, root / "whole"), progress=False)
    return {"killed": root / "killed", "whole": root / "whole", "whole_result": whole}


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_identical_to_uninterrupted(
    killed_and_whole: dict[str, Any], tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    killed_dir = Path(shutil.copytree(killed_and_whole["killed"], tmp_path / "killed"))
    done_before = _shards(killed_dir)
    assert done_before >= 2 and not (killed_dir / "activations.h5").exists()  # killed mid-run, before consolidation

    notes = killed_dir / JOURNAL_DIR / "priority" / "notes.txt"
    notes.parent.mkdir(parents=True, exist_ok=True)
    notes.write_text("mine")
    resumed = record_run(_config(tiny_pair, rolemrc_file, killed_dir), progress=False)
    assert sum(resumed.resumed.values()) >= done_before
    assert sum(resumed.recorded.values()) + sum(resumed.resumed.values()) == sum(resumed.counts.values()) == 12

    assert killed_and_whole["whole_result"].counts == resumed.counts
    a, b = run_arrays(killed_and_whole["whole"]), run_arrays(killed_dir)
    assert a.keys() == b.keys() and len(a) == 2 * 5
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert _shards(killed_dir) == 0
    # the journal goes with its last shard; a file of the user's stays, with its folder
    assert not (killed_and_whole["whole"] / JOURNAL_DIR).exists()
    assert [p.relative_to(killed_dir) for p in (killed_dir / JOURNAL_DIR).rglob("*")] == [
        Path(JOURNAL_DIR, "priority"),
        Path(JOURNAL_DIR, "priority", "notes.txt"),
    ]


def _rewrite(path: Path, change) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    change(arrays)
    with path.open("wb") as handle:
        np.savez(handle, **arrays)


def _fake_activations(arrays: dict) -> None:
    name = next(n for n in arrays if n.startswith("act__"))
    arrays[name] = arrays[name] + np.ones_like(arrays[name])  # well formed, the checksum left as it was


def _other_settings(arrays: dict) -> None:
    arrays["seal"] = np.asarray(["0" * 64, str(arrays["seal"][1])])  # its content's checksum, another run's settings


SHARD_SEALS = {
    "well-formed fake activations": (_fake_activations, "changed since it was recorded"),
    "recorded under other settings": (_other_settings, "recorded under other settings"),
    "no checksum (an older toolkit's shard)": (lambda arrays: arrays.pop("seal"), "carries no checksum"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(SHARD_SEALS))
def test_a_shard_whose_seal_does_not_match_is_recorded_again_with_a_warning(
    fault: str,
    killed_and_whole: dict[str, Any],
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spoil, needle = SHARD_SEALS[fault]
    out = Path(shutil.copytree(killed_and_whole["killed"], tmp_path / "run"))
    shard = sorted((out / JOURNAL_DIR).glob("*/*.npz"))[0]
    _rewrite(shard, spoil)
    capsys.readouterr()
    resumed = record_run(_config(tiny_pair, rolemrc_file, out), progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {shard}: ") and needle in warnings[0], warnings
    assert warnings[0].endswith("removed, its batch is recorded again")
    assert sum(resumed.recorded.values()) >= 1
    a, b = run_arrays(killed_and_whole["whole"]), run_arrays(out)
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
