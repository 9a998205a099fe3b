"""``probe lmeval`` under ``accelerate launch`` (issue #41): two CPU processes give one process's items.

A real ``accelerate launch --multi_gpu --num_processes 2`` (torchrun underneath; no CUDA, so the processes join over
gloo) of the real command: every rank loads the model and runs every pass (unedited, the edited arm, its placebo
set) with the same edits on its share of the requests; lm-eval gathers the items on rank 0, which alone compares
and writes. Every row of the report (effects, intervals, p-values, placebo percentiles) and every item's scores and
generated text equal a one-process run's (run in this process: one process either way); the items' log-likelihoods
equal it to float32 rounding (relative 1e-5: lm-eval batches each rank's share on its own, so a sequence's padding
partners differ).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import exit_of
from tests.support.lmeval_tasks import plant_answer_unit, write_tasks
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def inputs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("lm_eval")
    tasks = tmp_path_factory.mktemp("lmeval-tasks")
    write_tasks(tasks)
    model, layer = plant_answer_unit(tiny_model_dir, tmp_path_factory.mktemp("planted") / "model")
    return [
        "lmeval",
        "--model-dir",
        str(model),
        "--units",
        f"{layer}:5",
        "--factor",
        "0",
        "--tasks",
        "probe_mc,probe_gen",
        "--include-path",
        str(tasks),
        "--placebo",
        "1",
        "--bootstrap",
        "200",
    ]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=400)


def _outputs(out: Path) -> tuple[list[Any], list[Any]]:
    items = [json.loads(line) for line in (out / "lmeval_items.jsonl").read_text().splitlines()]
    report = json.loads((out / "lmeval_report.json").read_text())
    rows = [arm["rows"] for arm in report["arms"]]
    return sorted(items, key=json.dumps), rows


def test_two_processes_under_accelerate_give_the_one_process_items(
    inputs: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, one_stdout, one_stderr = exit_of([*inputs, "--out", str(tmp_path / "one")], capfd)
    assert code == 0, one_stderr[-3000:]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port()), "--module", "probe_cli.main"]
    two = _run([*launch, *inputs, "--out", str(tmp_path / "two")])
    assert two.returncode == 0
    assert two.stdout.count("-100.0") == one_stdout.count("-100.0") > 0  # rank 0 alone prints the tables
    items, rows = _outputs(tmp_path / "two")
    one_items, one_rows = _outputs(tmp_path / "one")
    assert rows == one_rows  # every effect, interval, p-value and placebo percentile
    assert len(items) == len(one_items) == 24  # 12 items of each task, every one gathered
    for got, want in zip(items, one_items, strict=True):
        assert _without_loglikelihoods(got) == _without_loglikelihoods(want)  # scores and generated text: identical
        # log-likelihoods: lm-eval batches each rank's share apart, so float32 rounding may differ
        assert _loglikelihoods(got) == pytest.approx(_loglikelihoods(want), rel=1e-5)


def _loglikelihoods(item: dict[str, Any]) -> list[float]:
    return [
        float(value)
        for arm in item.values()
        if isinstance(arm, dict)
        for answer in arm["response"]
        if isinstance(answer, list)
        for value in answer
        if isinstance(value, float)
    ]


def _without_loglikelihoods(item: dict[str, Any]) -> dict[str, Any]:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return None if isinstance(value, float) and not float(value).is_integer() else value

    return {k: strip(v) for k, v in item.items() if k != "target"} | {"target": item["target"]}
