"""Data-parallel ``probe intervene``: two processes on the gloo backend write the one-process report.

Real ``torchrun`` launches (``python -m torch.distributed.run --standalone``) of the real ``probe intervene``
command on the tiny pair, with scale, patch and placebo arms, two CPU processes of one thread each, against a
one-process run of the same command with one thread (in this process: one process either way):
``generations.jsonl`` is byte-identical and ``ab_report.json`` equal once its timings are masked. A second launch
has rank 1 die after its first batch of prompts; a one-process resume (in this process too) then decodes only the
batches still missing and writes the same report.

``--device auto`` is refused before the processes meet or a model loads, so that check runs in-process as each
rank of a launch (torchrun's environment); that a real torchrun launch shows such a refusal once, from rank 0, is
tests/test_hostile_distributed.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from probe_cli.main import main
from tests.support.cli import exit_of
from tests.support.launcher_env import DEVICE_AUTO_REFUSED, refused_as_rank
from tests.support.runs import recorded_multi_turn_run

ROOT = Path(__file__).resolve().parents[1]
# the one-process runs made here, like the launched ranks: one thread
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
TIMINGS = ("seconds",)  # the fields a second run may change: every pass's seconds


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


@pytest.fixture(scope="module")
def lively_pair(tiny_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny pair with its matrices drawn again at unit gain (std 1/sqrt(fan-in)): the tiny pair's small
    initialisation answers every prompt alike, which would make equal generations prove little; these differ
    from prompt to prompt (29 distinct 6-token answers to 40 test prompts), so a batch dealt to the wrong rows
    shows."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from tests.chat_models import perturbed_copy

    root = tmp_path_factory.mktemp("lively")
    sft = Path(shutil.copytree(tiny_pair[0], root / "sft"))
    model = AutoModelForCausalLM.from_pretrained(sft)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) / param.shape[1] ** 0.5)
    model.save_pretrained(sft)
    return sft, perturbed_copy(sft, root / "dpo", seed=1, scale=0.2)


@pytest.fixture(scope="module")
def analysed_run(lively_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from analysis import AnalysisConfig, analyze_run

    run_dir = recorded_multi_turn_run(lively_pair, tmp_path_factory.mktemp("dp_intervene"), n_roles=10)
    analyze_run(
        run_dir, AnalysisConfig(layers="0-3", top_k=32), capabilities=["multi_turn"], hooks=["mlp_out"], plots=False
    )
    return run_dir


def _args(run_dir: Path, out: Path) -> list[str]:
    """The A/B every run here makes: 8 rows in batches of 2, so each shared pass is 4 batches, 2 per rank, and the
    killed rank keeps one batch and leaves one for the resume (the least that shows both)."""
    return [
        "intervene",
        str(run_dir),
        "-c",
        "multi_turn",
        "--split",
        "test",
        "--edit",
        "scale,patch",
        "--factor",
        "0",
        "--top-k",
        "6",
        "--placebo",
        "2",
        "--limit",
        "8",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "6",
        "--bootstrap",
        "200",
        "--outcomes",
        "off",
        "--out",
        str(out),
    ]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)


def _launch(entry: list[str], args: list[str], nproc: int = 2) -> subprocess.CompletedProcess[str]:
    return _run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *entry, *args]
    )


@pytest.fixture(scope="module")
def one_process(analysed_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``probe intervene`` as one process with one thread, in this process (shared by both comparisons)."""
    out = tmp_path_factory.mktemp("dp_ab") / "single"
    with pytest.raises(SystemExit) as done:
        main(_args(analysed_run, out))
    assert done.value.code in (0, None)
    return out


def _masked(value: Any) -> Any:
    """The report with every timing field (and the output folder it names) blanked."""
    if isinstance(value, dict):
        return {
            k: "<masked>" if any(t in k for t in TIMINGS) or k in ("out_dir", "paths") else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _assert_same_report(single: Path, other: Path) -> None:
    assert (single / "generations.jsonl").read_bytes() == (other / "generations.jsonl").read_bytes()
    rows = [json.loads(line) for line in (single / "generations.jsonl").read_text().splitlines()]
    assert len({row["baseline"] for row in rows}) >= len(rows) // 2  # answers differ: the comparison means something
    left, right = (_masked(json.loads((d / "ab_report.json").read_text())) for d in (single, other))
    assert left == right


def test_two_processes_write_the_one_process_report(analysed_run: Path, one_process: Path, tmp_path: Path) -> None:
    out = tmp_path / "dp"
    done = _launch(["-m", "probe_cli"], _args(analysed_run, out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "ab_report.json").read_text())
    assert {a["name"] for a in report["arms"]} >= {"scale 0.0", "patch dpo<-sft"}
    assert all(a["placebo"].get("n_sets") == 2 for a in report["arms"] if a["role"] == "main")
    _assert_same_report(one_process, out)
    assert "2 processes share" in done.stderr and "memory per process (each of the 2" in done.stderr
    assert done.stdout.count("every arm on multi_turn") <= 1  # only rank 0 reports
    assert not (out / ".arms").exists()


def test_a_killed_rank_then_one_process_resumes(
    analysed_run: Path, one_process: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dp"
    killed = _launch([str(ROOT / "tests" / "support" / "dp_kill_ab_rank.py")], _args(analysed_run, out))
    assert killed.returncode != 0
    lines = [line for line in killed.stderr.splitlines() if line.startswith("error:")]
    assert lines and "rank 1 of 2 died" in lines[0] and f"--out {out}" in lines[0], killed.stderr[-3000:]
    assert list((out / ".arms").glob("shared_*.json"))
    capfd.readouterr()
    code, _, resumed = exit_of(_args(analysed_run, out), capfd)
    assert code == 0, resumed[-3000:]
    read_back = resumed.count("read back")
    decoded = sum("batch " in line and "read back" not in line for line in resumed.splitlines())
    assert read_back > 0 and decoded > 0  # kept batches read back, only the missing ones decoded
    _assert_same_report(one_process, out)


@pytest.mark.parametrize("rank, lines", [(0, 1), (1, 0)])
def test_device_auto_is_refused_with_several_processes(
    rank: int,
    lines: int,
    analysed_run: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each rank of a two-process launch: exit 2 before any model loads, the line from local rank 0 alone."""
    code, said, err = refused_as_rank(
        monkeypatch, capfd, rank, [*_args(analysed_run, tmp_path / "x"), "--device", "auto"]
    )
    assert code == 2 and len(said) == lines, err
    assert all(line.startswith(DEVICE_AUTO_REFUSED) for line in said)
    assert "Traceback" not in err and "interventions/" not in err and "probe_cli/" not in err
