"""A recording killed with SIGKILL mid-run resumes to arrays identical to an uninterrupted run.

A real subprocess records into a run dir; once a few batch shards exist it is killed with
``kill -9`` (no cleanup code runs: no ``finally``, no atexit, no h5py close). The next
``record_run`` into the same dir must skip what is done and end with exactly the arrays
of a run that was never interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_identical_to_uninterrupted(
    tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    killed_dir = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tiny_pair[0]), str(tiny_pair[1]), str(rolemrc_file), str(killed_dir)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    while _shards(killed_dir) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    done_before = _shards(killed_dir)
    assert done_before >= 2 and not (killed_dir / "activations.h5").exists()  # killed mid-run, before consolidation

    notes = killed_dir / JOURNAL_DIR / "priority" / "notes.txt"
    notes.parent.mkdir(parents=True, exist_ok=True)
    notes.write_text("mine")
    resumed = record_run(_config(tiny_pair, rolemrc_file, killed_dir), progress=False)
    assert sum(resumed.resumed.values()) >= done_before
    assert sum(resumed.resumed.values()) + sum(resumed.recorded.values()) == sum(resumed.counts.values()) == 12

    reference = record_run(_config(tiny_pair, rolemrc_file, tmp_path / "uninterrupted"), progress=False)
    assert reference.counts == resumed.counts
    a, b = run_arrays(tmp_path / "uninterrupted"), run_arrays(killed_dir)
    assert a.keys() == b.keys() and len(a) == 2 * 5
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert _shards(killed_dir) == 0
    # the journal goes with its last shard; a file of the user's stays, with its folder
    assert not (tmp_path / "uninterrupted" / JOURNAL_DIR).exists()
    assert [p.relative_to(killed_dir) for p in (killed_dir / JOURNAL_DIR).rglob("*")] == [
        Path(JOURNAL_DIR, "priority"),
        Path(JOURNAL_DIR, "priority", "notes.txt"),
    ]
