"""Data-parallel attribution (issue #41): two processes on the gloo backend write the file one process writes.

Real ``torchrun`` launches (``python -m torch.distributed.run --standalone``) of the real ``probe analyze
--metric attribution`` command, two CPU processes of one thread each, against a one-process pass. The batches
are one plan dealt to the ranks, and rank 0 sums them in plan order, so on CPU the file is equal bit for bit
(docs/scaling.md states the tolerance across devices: rtol 1e-5). A launch whose rank 1 dies after its first batch
keeps the finished batches; a one-process resume computes only the rest and ends with the same file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import probes.attribution as attribution
from probes.config import RecordConfig
from probes.distributed import World
from probes.recording import record_run

ROOT = Path(__file__).resolve().parents[1]
FILE = "attribution_reference_logprob.h5"
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _launch(entry: list[str], run: Path) -> subprocess.CompletedProcess[str]:
    args = ["analyze", str(run), "--metric", "attribution", "--no-plots", "--stability-resamples", "0"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *entry, *args]
    return subprocess.run(command, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("attr-dp") / "run"
    config = RecordConfig(
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        data_file=rolemrc_file,
        out_dir=out,
        capabilities="all",
        hooks="mlp_out,mlp_post",
        position="response_mean",
    )
    record_run(config, progress=False)
    return out


@pytest.fixture(scope="module")
def one_process(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = Path(shutil.copytree(recorded, tmp_path_factory.mktemp("attr-one") / "run"))
    return attribution.attribute_run(run, world=World())


def _arrays(path: Path) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    with h5py.File(path) as f:
        f.visititems(lambda name, item: found.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return found


def _assert_identical(a: Path, b: Path) -> None:
    left, right = _arrays(a), _arrays(b)
    assert left.keys() == right.keys() and len(left) > 4
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def test_the_plan_has_a_batch_for_each_rank(one_process: Path) -> None:
    with h5py.File(one_process) as f:
        assert len(f.keys()) >= 2  # one plan per capability: at least two batches to deal


def test_two_processes_write_the_one_process_file(recorded: Path, one_process: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(recorded, tmp_path / "run"))
    done = _launch(["-m", "probe_cli"], run)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("summary:") == 1  # rank 0 alone goes on to the maps
    _assert_identical(one_process, run / FILE)
    assert not (run / "attribution_reference_logprob.journal").exists()


def test_a_killed_rank_then_one_process_resumes(
    recorded: Path, one_process: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Path(shutil.copytree(recorded, tmp_path / "run"))
    killed = _launch([str(ROOT / "tests" / "support" / "dp_kill_attribution.py")], run)
    assert killed.returncode != 0
    kept = list((run / "attribution_reference_logprob.journal").glob("*/*.npz"))
    assert kept and not (run / FILE).exists()
    computed: list[Path] = []
    write_batch = attribution._write_batch
    monkeypatch.setattr(
        attribution, "_write_batch", lambda path, result: (computed.append(path), write_batch(path, result))
    )
    attribution.attribute_run(run, world=World())
    _assert_identical(one_process, run / FILE)
    assert computed and not {p.name for p in computed} & {p.name for p in kept}  # only what was missing
