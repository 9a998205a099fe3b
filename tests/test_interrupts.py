"""Ctrl-C through the real ``probe`` command: one ``interrupted:`` line, exit 130, within seconds, resumable.

Each case runs the command in a subprocess and interrupts it with a real SIGINT (see
tests/support/interrupts.py); where the message promises a resume, rerunning the same
command gives exactly what an uninterrupted run gives (those two runs, which no signal
reaches, run in this process under one torch thread, as the subprocess has one). ``probe
intervene`` has its own file, tests/test_interventions_interrupts.py, so that ``make test``'s
two workers share these slow cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import Interrupted
from tests.support.interrupts import LAUNCHES, ROOT, Outcome, assert_interrupted, probe, probe_here, spawn


def test_an_uncaught_ctrl_c_is_one_generic_line(tmp_path: Path) -> None:
    outcome = probe(["sleep"], tmp_path, "SLEEPING")
    assert_interrupted(outcome, "stopped by Ctrl-C before the command finished; rerun it")


@pytest.mark.parametrize("launch", LAUNCHES)
def test_sigterm_stops_the_command_whatever_sigint_was_at_start(launch: str, tmp_path: Path) -> None:
    """Generated over how a launcher leaves SIGINT: a terminal's default, ignored by ``nohup CMD &`` from a script
    (where SIGTERM once did nothing), its default inside Python, a caller's handler that only takes note."""
    outcome = probe(["sleep"], tmp_path, "SLEEPING", sig=signal.SIGTERM, launch=launch)
    assert_interrupted(outcome, "stopped by SIGTERM before the command finished; rerun it", code=143)
    assert "CALLER'S HANDLER" not in outcome.stderr


def test_the_ctrl_c_helper_works_when_the_suite_ignores_sigint(tmp_path: Path) -> None:
    """``nohup make test &`` runs the suite with SIGINT ignored; the helper's children still answer Ctrl-C."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        outcome = probe(["sleep"], tmp_path, "SLEEPING")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert_interrupted(outcome, "stopped by Ctrl-C before the command finished; rerun it")


def test_a_pytest_process_started_with_sigint_ignored_answers_ctrl_c() -> None:
    """What tests/conftest.py does in every pytest process, checked in a process that a script started in the
    background (SIGINT ignored), as ``nohup make test &`` starts the suite."""
    code = (
        "import os, signal; from tests.support.interrupts import answer_ctrl_c_here; "
        "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN; answer_ctrl_c_here(); "
        "os.kill(os.getpid(), signal.SIGINT)"
    )
    script = f'trap "" INT; {sys.executable} -c "{code}"'
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGINT and done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr


def test_a_sigterm_during_a_group_of_renames_is_delivered_after_it_even_with_sigint_ignored() -> None:
    """The renames that publish a file set finish first, then SIGTERM stops the command (it once vanished when the
    command had started with SIGINT ignored)."""
    from core.atomic import _sigint_deferred
    from probe_cli.main import _sigterm_as_ctrl_c

    done: list[str] = []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), _sigterm_as_ctrl_c(in_process=True), _sigint_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("renamed")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == ["renamed"]


# ``probe`` as a program (``main()`` reading sys.argv), with an exit hook that takes a minute, as a torch teardown
# can take seconds: the command has ended when TEARING DOWN is printed.
TEARDOWN = """
import atexit, sys, time
from probe_cli.main import main

atexit.register(lambda: (print("TEARING DOWN", file=sys.stderr, flush=True), time.sleep(60)))
sys.argv = ["probe", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize(("args", "code"), [(["--help"], 0), (["--no-such-option"], 2)], ids=["done", "refused"])
def test_a_signal_after_the_command_ended_exits_at_once_with_its_status(sig: int, args: list[str], code: int) -> None:
    """Ctrl-C once the work is done (the command's line printed, the interpreter tearing down) once gave a traceback
    from inside torch's exit hook, or exit -2 in place of the command's status; it ends the process at once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc, pid = spawn([sys.executable, "-c", TEARDOWN, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("TEARING DOWN"):
            sent = time.monotonic()
            os.kill(pid, sig)
    returned = proc.wait(timeout=120)
    took = time.monotonic() - sent
    assert returned == code and took < 5, (returned, took, "".join(lines))
    assert "Traceback" not in "".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("launch", ["terminal", "nohup"])
def test_sigterm_during_a_pair_build_removes_the_build_folder_in_one_line(launch: str, tmp_path: Path) -> None:
    """A real build of the tiny pair, terminated once its data is written (the 12 MB ``.tiny_pair.build-<pid>``
    folder that SIGTERM used to leave), started from a terminal and as ``nohup probe models default --pair tiny &``
    from a script (where SIGTERM used to be ignored until SIGKILL): one ``interrupted:`` line, exit 143 within the
    bound, nothing of the build left."""
    env = {**os.environ, "PROBE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "probe_cli", "models", "default", "--pair", "tiny", "--quiet"]
    proc, pid = spawn(command, launch, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not list(tmp_path.glob(".tiny_pair.build-*/data/test.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=300)
    outcome = Outcome(proc.returncode, out, err, time.monotonic() - sent)
    assert_interrupted(outcome, "stopped by SIGTERM", code=143)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "file_hashes.json") == [".default_pair.lock"]


# ---- probe train -------------------------------------------------------------------------------

TRAIN = ["--max-steps", "12", "--batch-size", "4", "--max-rows", "48", "--seed", "0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from data_synthesis.offline import synthesize

    out = tmp_path_factory.mktemp("interrupt-data")
    synthesize(out, n_roles=2, seed=0)
    return out


def _sft(data: Path, out: Path) -> list[str]:
    return [
        "train",
        "sft",
        "--base",
        "tiny",
        "--tiny-layers",
        "2",
        "--tiny-width",
        "32",
        "--tiny-mlp",
        "64",
        "--data",
        str(data),
        "--out",
        str(out),
        *TRAIN,
    ]


def _same_model(a: Path, b: Path) -> None:
    first, second = (json.loads((p / "provenance.json").read_text()) for p in (a, b))
    assert first["weights_sha256"] == second["weights_sha256"]
    assert first["losses"] == second["losses"]
    assert second["resumed_from_step"] is not None and first["resumed_from_step"] is None


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_sft_stops_at_a_step_keeps_a_checkpoint_and_resumes_to_the_same_model(data: Path, tmp_path: Path) -> None:
    whole = probe_here(_sft(data, tmp_path / "whole"), tmp_path)
    assert whole.code == 0, whole.stderr
    cut = probe(_sft(data, tmp_path / "cut"), tmp_path, "STEP 4")
    line = assert_interrupted(
        cut, "training stopped at step", "the checkpoint is kept in", "rerun the same command to resume"
    )
    step = int(line.split("stopped at step ")[1].split()[0])
    assert 4 <= step < 12 and (tmp_path / ".cut.partial" / f"checkpoint-{step}").is_dir()
    assert not (tmp_path / "cut").exists()
    resumed = probe_here(_sft(data, tmp_path / "cut"), tmp_path)
    assert resumed.code == 0 and f"resumed from step {step}" in resumed.stdout, resumed.stderr
    _same_model(tmp_path / "whole", tmp_path / "cut")
    assert not (tmp_path / ".cut.partial").exists() and not (tmp_path / "cut" / "resume.json").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_dpo_stops_at_a_step_and_resumes_to_the_same_model(data: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    """12 rows in micro-batches of 2, accumulated in pairs: 3 optimizer steps per epoch, so the run cut after step 3
    resumes in its second epoch."""
    args = [
        "train",
        "dpo",
        "--sft",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--max-steps",
        "6",
        "--batch-size",
        "2",
        "--grad-accum",
        "2",
        "--max-rows",
        "12",
    ]
    whole = probe_here([*args, "--out", str(tmp_path / "whole")], tmp_path)
    assert whole.code == 0, whole.stderr
    assert_interrupted(probe([*args, "--out", str(tmp_path / "cut")], tmp_path, "STEP 3"), "training stopped at step")
    resumed = probe_here([*args, "--out", str(tmp_path / "cut")], tmp_path)
    assert resumed.code == 0, resumed.stderr
    _same_model(tmp_path / "whole", tmp_path / "cut")


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_says_nothing_was_kept(data: Path, tmp_path: Path) -> None:
    """The first Ctrl-C comes while step 3 is under way (the wrapper pauses in it),
    the second once it is acknowledged."""
    outcome = probe(
        _sft(data, tmp_path / "cut"), tmp_path, "BEGIN 3", "Ctrl-C: stopping after this training step", pause=2.0
    )
    assert_interrupted(outcome, "training stopped at once", "nothing kept; rerun the same command to start over")
    assert not (tmp_path / ".cut.partial").exists() and not (tmp_path / "cut").exists()


def test_ctrl_c_during_set_up_keeps_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import training.sft
    from training.config import SFTRunConfig

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(training.sft, "prepare_sft", interrupted)
    try:
        training.sft.train_sft(SFTRunConfig(base="tiny", data=tmp_path, out=tmp_path / "o"))
    except Interrupted as exc:
        assert "stopped while setting up SFT: nothing kept" in str(exc) and exc.exit_code == 130
    except KeyboardInterrupt:
        pytest.fail("a bare KeyboardInterrupt escaped train_sft")
    else:
        pytest.fail("train_sft returned")
