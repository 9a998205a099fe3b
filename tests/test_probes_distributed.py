"""Data-parallel recording: two processes on the gloo backend write the file one process writes.

Real ``torchrun`` launches (``python -m torch.distributed.run --standalone``) of the real
``probe run`` command, two CPU processes of one thread each, against a one-process run of
the same command with one thread (in this process: it is one process either way). A first
launch has rank 1 die after its first batch (torchrun then stops rank 0); the next run, one process, records only
what is missing and ends with the same arrays, bit for bit. (A two-process recording from nothing is
tests/test_replicate_nproc.py's record stage.)

``--device auto`` is refused before the processes meet or a model loads, so that check runs
in-process as each rank of a launch (torchrun's environment); that a real torchrun launch
shows such a refusal once, from rank 0, is tests/test_hostile_distributed.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.run_dir import JOURNAL_DIR
from tests.support.launcher_env import DEVICE_AUTO_REFUSED, refused_as_rank
from tests.support.runs import run_arrays

ROOT = Path(__file__).resolve().parents[1]
# the one-process runs made here, like the launched ranks: one thread
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _args(tiny_pair, data: Path, out: Path) -> list[str]:
    return [
        "run",
        "--capability",
        "all",
        "--sft",
        str(tiny_pair[0]),
        "--dpo",
        str(tiny_pair[1]),
        "--data",
        str(data),
        "--out",
        str(out),
        "--hook",
        "mlp_out,mlp_post",
        "--store-dtype",
        "float32",
        "--batch-size",
        "2",
        "--no-analyze",
        "--quiet",
    ]


def _launch(entry: list[str], args: list[str], nproc: int = 2) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *entry,
        *args,
    ]
    return subprocess.run(command, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def one_process(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``probe run`` as one process with one thread, in this process."""
    from probe_cli.main import main

    out = tmp_path_factory.mktemp("dp") / "single"
    with pytest.raises(SystemExit) as done:
        main(_args(tiny_pair, rolemrc_file, out))
    assert done.value.code in (0, None)
    return out


def _assert_identical(a: Path, b: Path) -> None:
    left, right = run_arrays(a), run_arrays(b)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def _calls(run_dir: Path) -> list[dict]:
    import h5py

    with h5py.File(run_dir / "activations.h5") as handle:
        return json.loads(handle.attrs["provenance"])["calls"]


def test_a_killed_rank_then_one_process_resumes(
    tiny_pair, rolemrc_file: Path, one_process: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dp"
    killed = _launch([str(ROOT / "tests" / "support" / "dp_kill_rank.py")], _args(tiny_pair, rolemrc_file, out))
    assert killed.returncode != 0
    kept = list((out / JOURNAL_DIR).glob("*/*.npz"))
    assert kept and not (out / "activations.h5").exists()
    from probe_cli.main import main

    with pytest.raises(SystemExit) as resumed:
        main(_args(tiny_pair, rolemrc_file, out))
    assert resumed.value.code in (0, None)
    _assert_identical(one_process, out)
    assert [c["processes"] for c in _calls(out)] == [1]
    assert not list((out / JOURNAL_DIR).glob("*/*.npz"))
    recorded_now = _calls(out)[-1]["recorded"]
    total = sum(len(v) for k, v in run_arrays(out).items() if k.endswith("/ids"))
    assert 0 < sum(recorded_now.values()) < total  # the kept batches were not recorded again


@pytest.mark.parametrize("rank, lines", [(0, 1), (1, 0)])
def test_device_auto_is_refused_with_several_processes(
    rank: int,
    lines: int,
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each rank of a two-process launch: exit 2 before any model loads, the line from local rank 0 alone."""
    out = tmp_path / "x"
    code, said, err = refused_as_rank(
        monkeypatch, capfd, rank, [*_args(tiny_pair, rolemrc_file, out), "--device", "auto"]
    )
    assert code == 2 and len(said) == lines, err
    assert all(line.startswith(DEVICE_AUTO_REFUSED) for line in said)
    assert "Traceback" not in err and "probes/" not in err and "probe_cli/" not in err
    assert not out.exists()
