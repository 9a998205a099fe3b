"""Data parallelism fails cleanly (issue 22, class 6, and the device errors of class 8).

- Any ``--device`` string this machine cannot serve is one ``error:`` line naming the flag and
  what the machine has, exit 2, before a model loads or the run dir appears; under torchrun
  the line comes once, from rank 0.
- A rank that waits for a peer that never starts stops after ``PROBE_JOIN_TIMEOUT`` seconds
  with one line, and Ctrl-C stops the wait at once.
- A rank killed with ``kill -9`` is named by rank 0 in one line; Ctrl-C to a launch is one
  ``interrupted:`` line, and ``python -m probes.distributed`` (torchrun with the ranks' exit
  status) exits 130.

The launches run a small entry point (tests/support/dp_peers.py) where the real recording adds
nothing but minutes; ``probe run`` itself is launched for the device check and the missing peer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.devices import check_device, cuda_count, mps_available
from core.errors import ProbeError
from tests.support.cli import one_line_error
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PEERS = str(ROOT / "tests" / "support" / "dp_peers.py")
DEVICES = settings(
    derandomize=True,
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SPELLED = st.sampled_from(
    [
        "cuda",
        "cuda:0",
        "cuda:1",
        "cuda:7",
        "CUDA:2",
        "mps",
        "MPS",
        "cuda:99999",
        "gpu",
        "cpu:0",
        "mps:0",
        "auto:1",
        "cuda:-1",
        "cuda:",
        "tpu",
        "cuda:1.5",
        "",
        " ",
        "cuda0",
        "Cuda:0 ",
        "xla",
    ]
)
DEVICE_STRINGS = SPELLED | st.text(max_size=24)


def _run_args(tiny_pair: tuple[Path, Path], data: Path, out: Path) -> list[str]:
    """``probe run`` on the tiny pair's multi_turn rows, quiet and without analysis."""
    sft, dpo = (str(d) for d in tiny_pair)
    models = ["--sft", sft, "--dpo", dpo]
    return [
        "run",
        "--capability",
        "multi_turn",
        *models,
        "--data",
        str(data),
        "--out",
        str(out),
        "--no-analyze",
        "--quiet",
    ]


def _available() -> set[str]:
    names = {"cpu", "auto"} | ({"mps"} if mps_available() else set())
    return names | ({"cuda"} | {f"cuda:{i}" for i in range(cuda_count())} if cuda_count() else set())


def _machine_has(device: str) -> bool:
    name = device.strip().lower()
    return name in _available() or (
        name.startswith("cuda:") and name[5:].isdigit() and f"cuda:{int(name[5:])}" in _available()
    )


@DEVICES
@given(device=DEVICE_STRINGS)
def test_any_device_string_is_served_or_refused_in_one_line_naming_the_flag(device: str) -> None:
    if _machine_has(device):
        assert check_device(device, "--device", allow_auto=True) in _available()
        return
    with pytest.raises(ProbeError) as info:
        check_device(device, "--device", allow_auto=True)
    message = str(info.value)
    assert message.startswith("--device ") and "\n" not in message
    assert "available here: cpu" in message


@DEVICES
@given(device=DEVICE_STRINGS.filter(lambda d: not _machine_has(d) and "\x00" not in d))
def test_probe_run_refuses_a_device_it_lacks_before_loading(
    device: str,
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import access.pair

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded before the device was checked")

    monkeypatch.setattr(access.pair, "load_pair", no_load)
    out = tmp_path / f"run-{abs(hash(device))}"
    one_line_error(
        capsys,
        [*_run_args(tiny_pair, rolemrc_file, out), f"--device={device}"],
        "--device",
    )
    assert not out.exists()


@pytest.mark.parametrize("local_rank, lines", [(0, 1), (1, 0)])
def test_under_a_launcher_an_argument_error_is_printed_by_local_rank_0_alone(
    local_rank: int,
    lines: int,
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-process as each rank; a silent rank's wait for torchrun to stop it (``SPEAKER_GRACE``) is zero here."""
    from tests.support.cli import exit_of
    from tests.support.launcher_env import as_rank

    for bad in (["--device", "gpu"], ["--batch-size", "0"], ["--device", "cuda:3"]):
        with as_rank(monkeypatch, local_rank):
            code, _, err = exit_of(
                [*_run_args(tiny_pair, rolemrc_file, tmp_path / "run"), *bad],
                capsys,
            )
        assert code == 2 and len([line for line in err.splitlines() if line.startswith("error: ")]) == lines, err


# ---------------------------------------------------------------- launches


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }


def _lines(stderr: str, prefix: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def _no_traceback_of_ours(stderr: str) -> None:
    assert "probes/" not in stderr and "probe_cli/" not in stderr and "core/" not in stderr, stderr[-3000:]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *args]


def _launch(*args: str) -> list[str]:
    return [sys.executable, "-m", "probes.distributed", "--standalone", "--nproc-per-node=2", *args]


def _probe_run(tiny_pair, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "probe_cli",
        "run",
        "--capability",
        "multi_turn",
        "--sft",
        str(tiny_pair[0]),
        "--dpo",
        str(tiny_pair[1]),
        "--data",
        str(data),
        "--out",
        str(out),
        "--hook",
        "mlp_out",
        "--no-analyze",
        "--quiet",
        *extra,
    ]


@pytest.mark.slow
def test_a_device_torchrun_lacks_is_one_line_from_rank_0(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    if cuda_count() > 1:
        pytest.skip("this machine has the second GPU the test asks for")
    out = tmp_path / "run"
    done = subprocess.run(
        _torchrun(*_probe_run(tiny_pair, rolemrc_file, out, "--device", "cuda:1")),
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    said = _lines(done.stderr, "error:")
    assert len(said) == 1 and said[0].startswith("error: --device cuda:1: ") and "available here: cpu" in said[0], (
        done.stderr[-3000:]
    )
    _no_traceback_of_ours(done.stderr)
    assert not out.exists()


@pytest.mark.parametrize(
    "rank, said",
    [
        (0, "only 1 of the 2 processes (WORLD_SIZE=2) started within 1 s"),
        (1, "rank 1 of 2 could not reach rank 0 at MASTER_ADDR=127.0.0.1"),
    ],
)
def test_each_rank_says_which_peer_it_waited_for_within_the_join_timeout(
    rank: int, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from probes.distributed import World, joined

    for name, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PROBE_JOIN_TIMEOUT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(ProbeError) as info, joined(World(rank, 2, rank)):
        pass
    assert str(info.value).startswith(said) and "PROBE_JOIN_TIMEOUT" in str(info.value)
    assert time.monotonic() - started < 1 + 3


@pytest.mark.slow
def test_a_missing_peer_ends_in_one_line_within_the_join_timeout(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    said = "error: only 1 of the 2 processes (WORLD_SIZE=2) started within 2 s"
    env = _env(
        WORLD_SIZE="2",
        RANK="0",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        PROBE_JOIN_TIMEOUT="2",
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *_probe_run(tiny_pair, rolemrc_file, tmp_path / "run")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(said), done.stderr[-3000:]
    assert "PROBE_JOIN_TIMEOUT" in lines[0]
    assert took < 2 + 40  # the timeout, plus starting Python and torch on a loaded 2-core machine
    assert not (tmp_path / "run").exists()


def test_ctrl_c_stops_the_wait_for_a_missing_peer_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from core.errors import Interrupted
    from probes.distributed import World, joined

    for name, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PROBE_JOIN_TIMEOUT": "60",
    }.items():
        monkeypatch.setenv(name, value)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(Interrupted) as info, joined(World(0, 2, 0)):
        pass
    assert time.monotonic() - started < 1 + 2
    assert str(info.value).startswith(
        "stopped while the 2 processes of the data-parallel run were meeting; nothing was recorded"
    )


@pytest.mark.slow
def test_a_killed_rank_is_named_once_by_rank_0() -> None:
    done = subprocess.run(_launch(PEERS, "die"), env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "error: rank 1 of 2 died (killed, or out of memory?)"
    ]


@pytest.mark.slow
def test_ctrl_c_to_a_launch_is_one_interrupted_line_and_exit_130() -> None:
    launch = subprocess.Popen(
        _launch(PEERS, "wait"),
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        said = ""
        while said.count("JOINED") < 2:  # the two ranks share the pipe: their lines may interleave
            line = launch.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the launch ended before both ranks joined: {said!r}"
            said += line
        stopped = time.monotonic()
        os.killpg(launch.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: every process of the group
        _, stderr = launch.communicate(timeout=60)
    finally:
        launch.kill()
    assert time.monotonic() - stopped < 15
    assert launch.returncode == 130, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.strip()] == [
        "interrupted: stopped; rerun the same command to resume"
    ]
