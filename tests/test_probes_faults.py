"""Broken disks and files during `probe run`: one line, exit 2, nothing lost, and a resume to the identical file.

A full disk is real here: each recording runs in a process of its own (forked from one
interpreter that imported the toolkit once, :mod:`tests.support.forked`, as is the recording
that a real SIGINT stops) under a file-size limit
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored, so a write past it fails with ``EFBIG`` as it
would with ``ENOSPC``). The limit is placed at each step of a resumed recording: writing a
batch shard, copying the existing ``activations.h5`` into the staging copy, appending
shards to the copy, and finishing it. Each time the command must end in one ``error:`` line
saying what was kept, leave the consolidated file byte for byte as it was and every shard
in the journal, and the next call (no limit) must end with the arrays of a run that never
failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from probes.config import RecordConfig
from probes.recording import record_run
from tests.support.forked import RECORDING, Command, Ended, Interrupt, run_forked
from tests.support.runs import run_arrays


def _args(tiny_pair, data: Path, out: Path, capabilities: str) -> list[str]:
    return [
        "run",
        "-c",
        capabilities,
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


def _config(tiny_pair, data: Path, out: Path, capabilities: str) -> RecordConfig:
    return RecordConfig(
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        data_file=data,
        out_dir=out,
        capabilities=capabilities,
        hooks="mlp_out,mlp_post",
        store_dtype="float32",
        batch_size=2,
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def stages(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``first``: multi_turn recorded; ``reference``: multi_turn then priority, never interrupted."""
    root = tmp_path_factory.mktemp("faults")
    record_run(_config(tiny_pair, rolemrc_file, root / "first", "multi_turn"), progress=False)
    shutil.copytree(root / "first", root / "reference")
    record_run(_config(tiny_pair, rolemrc_file, root / "reference", "multi_turn,priority"), progress=False)
    return {"first": root / "first", "reference": root / "reference"}


def _limits(stages: dict[str, Path]) -> dict[str, int]:
    first = (stages["first"] / "activations.h5").stat().st_size
    final = (stages["reference"] / "activations.h5").stat().st_size
    return {"shard": 4_000, "copy": first // 2, "append": (first + final) // 2, "finish": final - 2_000}


STEPS = ("shard", "copy", "append", "finish")
CTRL_C = "ctrl-c"


@pytest.fixture(scope="module")
def launched(
    stages: dict[str, Path], tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Ended]]:
    """Each ``probe run`` of this module that must end as a process of its own, and how it ended: per step, on a copy
    of ``first`` under the step's file-size limit; for ``ctrl-c``, into a new run dir at batch size 1 (many shards),
    with a real SIGINT once three shards are written. One interpreter imports the toolkit once and forks a process
    per command (tests/support/forked.py)."""
    work = tmp_path_factory.mktemp("launched")
    outs = {step: Path(shutil.copytree(stages["first"], work / step / "run")) for step in STEPS}
    outs[CTRL_C] = work / CTRL_C / "run"
    limits = _limits(stages)
    commands = [
        Command(_args(tiny_pair, rolemrc_file, outs[step], "multi_turn,priority"), limits[step]) for step in STEPS
    ]
    batch_of_one = [a if a != "2" else "1" for a in _args(tiny_pair, rolemrc_file, outs[CTRL_C], "multi_turn,priority")]
    commands.append(Command(batch_of_one, interrupt=Interrupt(str(outs[CTRL_C] / "journal" / "*" / "*.npz"), 3)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    ends = run_forked(commands, work / "ends", env, RECORDING)
    return {name: (outs[name], end) for name, end in zip([*STEPS, CTRL_C], ends, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_a_full_disk_at_each_step_loses_nothing_and_resumes(
    step: str, stages: dict[str, Path], launched: dict[str, tuple[Path, Ended]], tiny_pair, rolemrc_file: Path
) -> None:
    out, failed = launched[step]
    before = _sha(stages["first"] / "activations.h5")
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert len(errors) == 1 and "Traceback" not in failed.stderr
    assert "writing failed (File too large)" in errors[0] and "rerun the same command to resume" in errors[0]
    assert _sha(out / "activations.h5") == before  # the consolidated file is untouched
    assert not (out / ".consolidate").exists()
    shards = list((out / "journal").glob("*/*.npz"))
    if step != "shard":
        assert shards and f"{len(shards)} recorded batches are kept" in errors[0]
    resumed = record_run(_config(tiny_pair, rolemrc_file, out, "multi_turn,priority"), progress=False)
    assert resumed.recorded["priority"] == (resumed.counts["priority"] if step == "shard" else 0)
    reference, result = run_arrays(stages["reference"]), run_arrays(out)
    assert reference.keys() == result.keys()
    for key in reference:
        np.testing.assert_array_equal(reference[key], result[key], err_msg=key)


def test_a_damaged_chunk_is_one_line_naming_what_it_holds(stages: dict[str, Path], tmp_path: Path, capsys) -> None:
    from probe_cli.main import main

    out = Path(shutil.copytree(stages["reference"], tmp_path / "run"))
    path = out / "activations.h5"
    with h5py.File(path, "r") as handle:
        dataset = handle["activations/dpo/priority/mlp_post"]
        assert dataset.fletcher32
        chunk = dataset.id.get_chunk_info(0)
    raw = bytearray(path.read_bytes())
    middle = chunk.byte_offset + chunk.size // 2
    raw[middle : middle + 8] = bytes(255 - b for b in raw[middle : middle + 8])
    path.write_bytes(bytes(raw))
    with pytest.raises(SystemExit) as stop:
        main(["analyze", str(out), "--capability", "priority", "--hook", "mlp_post"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    message = err.strip().splitlines()[-1]
    assert "activations of model dpo, capability priority, hook mlp_post are damaged" in message
    assert "record again into a new --out" in message


def test_a_prompt_longer_than_the_context_is_refused_by_file_and_line(
    tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    from core.errors import ProbeError

    limit = json.loads((tiny_pair[0] / "config.json").read_text())["max_position_embeddings"]
    rows = rolemrc_file.read_text().splitlines()
    long_row = json.loads(next(r for r in rows if "2ndrefused" in r or "multi" in r.lower()))
    long_row["question"][0]["content"] += " archive" * (2 * limit)
    data = tmp_path / "long.jsonl"
    data.write_text("\n".join([*rows[:3], json.dumps(long_row)]) + "\n")
    with pytest.raises(
        ProbeError,
        match=rf"long.jsonl:4 \(data row 3\): the prompt is \d+ tokens, longer than the model's context of {limit}",
    ):
        record_run(_config(tiny_pair, data, tmp_path / "run", "all"), progress=False)
    assert not (tmp_path / "run" / "run.json").exists()


def test_one_model_twice_is_recorded_with_a_warning(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    result = record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[0],
            data_file=rolemrc_file,
            out_dir=tmp_path / "run",
            capabilities="priority",
        ),
        progress=False,
    )
    assert result.warnings and "hold identical weights" in result.warnings[0]


@pytest.mark.slow
def test_ctrl_c_during_recording_says_what_was_kept_and_resumes_identically(
    stages: dict[str, Path], launched: dict[str, tuple[Path, Ended]], tiny_pair, rolemrc_file: Path
) -> None:
    out, stopped = launched[CTRL_C]
    err, took = stopped.stderr, stopped.signalled
    assert took is not None, "the recording finished before it could be interrupted"
    print(f"probe run stopped {took:.2f} s after SIGINT")
    assert stopped.returncode == 130 and took < 10, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]
    assert lines[-1].startswith("interrupted: recording stopped;") and "recorded batches are kept in" in lines[-1]
    assert "rerun the same command" in lines[-1] and "Traceback" not in err
    resumed = record_run(_config(tiny_pair, rolemrc_file, out, "multi_turn,priority"), progress=False)
    assert sum(resumed.resumed.values()) > 0
    reference, result = run_arrays(stages["reference"]), run_arrays(out)
    for key in reference:
        # batch size 1 vs 2: round-off
        np.testing.assert_allclose(reference[key], result[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("kind", ["file", "below_a_file"])
def test_run_out_of_the_wrong_kind_is_one_line_before_any_work(
    kind: str, tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    from probe_cli.main import main

    existing = tmp_path / "notes.txt"
    existing.write_text("keep me")
    out = existing if kind == "file" else existing / "sub"
    with pytest.raises(SystemExit) as stop:
        main(_args(tiny_pair, rolemrc_file, out, "priority"))
    err = capsys.readouterr().err.strip().splitlines()
    said = (
        f"error: --out: expected a directory (or a path to create one), got '{out}'"
        if kind == "file"
        else f"error: --out {out}"
    )
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(said), err
    assert existing.read_text() == "keep me"
