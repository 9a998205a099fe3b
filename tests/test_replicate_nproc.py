"""``probe replicate --nproc N`` (issue #41): the record, intervene, localize and evaluate stages run under the launcher
on this machine.

The stages are started as their ``probe`` commands under ``python -m probes.distributed`` with two CPU processes.
The record and evaluate stages are real launches here: each leaves its stage complete (the replicate checks that
skip it next time say so), the evaluation equals the one-process stage's file, and the command line that reproduces
the run keeps ``--nproc 2``.

For the intervene and localize stages, what is replicate's own is the command line and the ``--config`` file it
hands the launcher; that ``probe intervene`` and ``probe localize`` under a real two-process launch write the
one-process report is tests/test_interventions_parallel.py's and tests/test_localize.py's. So here the launcher is
asked for exactly that command, which then runs as one process in this interpreter, and must leave the stage
complete.

The record stage is launched once for the module: its recording is the same for every test here (the localize
options change the localize run, not the recording: checked below), and the intervene and localize tests start
from copies of it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from core.pair_dirs import PairDirs
from core.run_dir import RunDir
from study import replicate
from study.replicate_checks import evaluation_complete, intervention_complete, recorded_complete
from study.replicate_config import ReplicateOptions

pytestmark = pytest.mark.slow


def _launcher_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PROBE_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))


def _options(tiny_pair, chat_data: Path, out_dir: Path) -> ReplicateOptions:
    return ReplicateOptions(
        data_file=chat_data / "test.jsonl",
        out_dir=out_dir,
        models=PairDirs(tiny_pair[0], tiny_pair[1]),
        eval_rows=6,
        eval_split="test",
        max_new_tokens=4,
        limit=4,
        placebo=1,
        nproc=2,
    )


@pytest.fixture(scope="module")
def recorded(tiny_pair, chat_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The record stage under the launcher, once: (its run directory, what the stage said)."""
    root = tmp_path_factory.mktemp("nproc-record")
    with pytest.MonkeyPatch.context() as patch:
        _launcher_env(patch, root / "home")
        said = replicate._record_launched(_options(tiny_pair, chat_data, root / "run"))
    return root / "run", said


@pytest.fixture
def options(
    tiny_pair, chat_data: Path, recorded: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ReplicateOptions:
    """This test's options, its run directory a copy of the launched recording."""
    _launcher_env(monkeypatch, tmp_path / "home")
    shutil.copytree(recorded[0], tmp_path / "run")
    return _options(tiny_pair, chat_data, tmp_path / "run")


def test_record_and_evaluate_run_under_the_launcher(
    options: ReplicateOptions, recorded: tuple[Path, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert "--nproc 2" in options.command()
    assert recorded[1] == "recorded by 2 processes"
    assert recorded_complete(options)
    capfd.readouterr()
    assert replicate._evaluate_launched(options).startswith("judged by 2 processes")
    assert capfd.readouterr().out.count("full result ->") == 1  # rank 0 alone reports
    assert not list((tmp_path / "home").glob("journal/eval/*"))  # the journal goes once the result is judged
    assert evaluation_complete(options)
    launched = json.loads(RunDir(options.out_dir).eval_file.read_text())
    single = replace(options, out_dir=tmp_path / "single", nproc=1)
    replicate._evaluate(single, lambda _line: None)
    assert json.loads(RunDir(single.out_dir).eval_file.read_text()) == launched


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[str], str]]:
    """What replicate asks the launcher for, each (nproc, probe's arguments, stage) run as ``probe ARGS`` in this
    interpreter, its config file read while it still exists."""
    from probe_cli.main import main

    calls: list[tuple[int, list[str], str]] = []

    def run_here(nproc: int, args: list[str], stage: str) -> None:
        calls.append((nproc, args, stage))
        with pytest.raises(SystemExit) as done:
            main(args)
        assert done.value.code in (0, None)

    monkeypatch.setattr(replicate, "launched", run_here)
    return calls


def test_intervene_runs_under_the_launcher(options: ReplicateOptions, asked: list[tuple[int, list[str], str]]) -> None:
    replicate._analyze(options.out_dir)
    config = replicate.ab_config(options)
    assert replicate._intervene_launched(options, config).startswith("A/B by 2 processes")
    [(nproc, args, stage)] = asked
    assert (nproc, args[:2], stage) == (2, ["intervene", str(options.out_dir)], "intervene")
    assert intervention_complete(options.out_dir, options.intervention())


def test_localize_runs_under_the_launcher(options: ReplicateOptions, asked: list[tuple[int, list[str], str]]) -> None:
    from study.replicate_checks import localize_complete

    small = replace(options, localize_limit=2, localize_placebo=0)  # no random sets: seconds
    assert "mlp_post" in replicate.record_config(small).hooks  # the recording the stage ranks from
    assert replicate.record_config(small) == replicate.record_config(options)  # the shared recording is this one
    assert replicate.localize_blocked(replicate.localize_config(small)) is None
    config = replicate.localize_config(small)
    assert replicate._localize_launched(small, config).startswith("localized by 2 processes")
    [(nproc, args, stage)] = asked
    assert (nproc, args[:2], stage) == (2, ["localize", str(small.out_dir)], "localize")
    assert localize_complete(small.out_dir, small.localization())
    assert not localize_complete(small.out_dir, replace(small, localize_limit=3).localization())  # other options: run
