"""Data-parallel ``probe models eval`` (issue #41): two processes on the gloo backend give the one-process result.

A real ``torchrun`` launch (``python -m torch.distributed.run --standalone``) of the real command, two CPU processes
of one thread each, whose rank 1 dies keeps the finished batches in the journal; a one-process resume (in this
process, one thread) generates only the rest and gives the result one process gives from nothing: the batches are
one plan (prompt-length order, ``--batch-size`` rows each), so the saved JSON (responses, scores, every statistic) is
identical. That two processes from nothing give the one-process file, report once and remove their journal is
tests/test_replicate_nproc.py's evaluate stage (the same ``probe models eval`` under the launcher).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import training.evaluate as evaluate
from access.generation import GenerationConfig
from data_synthesis.offline import synthesize
from training.eval_config import PairEvalConfig

ROOT = Path(__file__).resolve().parents[1]
ROWS, BATCH, TOKENS = 12, 2, 6
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evaldata")
    synthesize(out, n_roles=5, seed=0)
    return out / "test.jsonl"


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PROBE_HOME": str(home),
    }


def _args(tiny_pair, test_file: Path, out: Path) -> list[str]:
    return [
        "models",
        "eval",
        "--sft",
        str(tiny_pair[0]),
        "--dpo",
        str(tiny_pair[1]),
        "--test",
        str(test_file),
        "--max-rows",
        str(ROWS),
        "--batch-size",
        str(BATCH),
        "--max-new-tokens",
        str(TOKENS),
        "--out",
        str(out),
    ]


def _run(command: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=_env(home), cwd=ROOT, capture_output=True, text=True, timeout=300)


def _launch(entry: list[str], args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    return _run([*launcher, *entry, *args], home)


@pytest.fixture(scope="module")
def one_process(tiny_pair, test_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``probe models eval`` as one process with one thread, in this process."""
    from probe_cli.main import main

    root = tmp_path_factory.mktemp("eval-one")
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as done:
        patch.setenv("PROBE_HOME", str(root / "home"))
        main(_args(tiny_pair, test_file, root / "eval.json"))
    assert done.value.code in (0, None)
    return json.loads((root / "eval.json").read_text())


def test_a_killed_rank_then_one_process_resumes(
    tiny_pair, test_file: Path, one_process: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    args = _args(tiny_pair, test_file, tmp_path / "eval.json")
    killed = _launch([str(ROOT / "tests" / "support" / "dp_kill_eval.py")], args, home)
    assert killed.returncode != 0 and not (tmp_path / "eval.json").exists()
    kept = list(home.glob("journal/eval/*/*/*.json"))
    assert kept
    monkeypatch.setenv("PROBE_HOME", str(home))
    calls = []
    generate = evaluate.generate_unedited
    monkeypatch.setattr(
        evaluate, "generate_unedited", lambda g, parts, *kept: (calls.append(len(parts)), generate(g, parts, *kept))[1]
    )
    config = PairEvalConfig(
        test_file,
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        max_rows=ROWS,
        generation=GenerationConfig(max_new_tokens=TOKENS, batch_size=BATCH),
    )
    result = evaluate.evaluate_pair(config)
    assert json.loads(json.dumps(evaluate.to_json(result))) == one_process
    assert sum(calls) == 2 * ROWS // BATCH - len(kept)  # only the missing batches were generated
