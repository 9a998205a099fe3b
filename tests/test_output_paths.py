"""Output paths of the wrong kind are refused in one line, before any work, by the one check in core.paths.

Before the check, ``analyze --out FILE`` died with ``FileExistsError`` after computing every
map, ``judge --verdicts-out DIR`` with ``IsADirectoryError`` after judging, and ``--out
FILE/sub`` with ``NotADirectoryError``. Each command here gets a path of the wrong kind and
must exit 2 with one ``error:`` line naming the option, and leave the disk as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.errors import ProbeError
from core.paths import check_output_dir, check_output_file
from core.run_dir import Writer
from tests.support.cli import one_line_error
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

ANY = Writer.JUDGE  # outside every run folder, any command may write
TASK = "role_related_mrc_answer_no_narration"
ROW = {
    "question": [{"role": "user", "content": "Where is the bridge?"}],
    "reference": "North.",
    "task": TASK,
    "expect": {"behaviour": "answer", "answer": "North"},
}


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory nobody may create files in: read-only permission bits, or for root (who ignores them) sysfs."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked
    try:
        (Path("/sys") / ".probe-write-test").touch()
    except OSError:
        return Path("/sys")
    pytest.skip("no directory here is closed to root")


# ---------------------------------------------------------------- the check itself


def test_a_directory_option_accepts_new_and_existing_directories(tmp_path: Path) -> None:
    assert check_output_dir(tmp_path, "--out", writer=ANY) == tmp_path
    assert check_output_dir(tmp_path / "a" / "b", "--out", writer=ANY) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists() and _listing(tmp_path) == []


def test_a_file_option_accepts_a_new_or_existing_file(tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_text("x")
    assert check_output_file(tmp_path / "old.jsonl", "--verdicts-out", writer=ANY) == tmp_path / "old.jsonl"
    assert check_output_file(tmp_path / "new" / "v.jsonl", "--verdicts-out", writer=ANY) == tmp_path / "new" / "v.jsonl"
    assert _listing(tmp_path) == ["old.jsonl"]


@pytest.mark.parametrize(
    "case,needle",
    [
        ("dir option is a file", "exists and is not a directory"),
        ("dir option below a file", "is a file, not a directory"),
        ("file option is a directory", "is a directory; expected a file name"),
        ("file option below a file", "is a file, not a directory"),
        ("dangling link", "symbolic link to a missing target"),
    ],
)
def test_wrong_kinds_of_path_are_refused_in_one_line(tmp_path: Path, case: str, needle: str) -> None:
    (tmp_path / "a-file").write_text("x")
    os.symlink(tmp_path / "gone", tmp_path / "link")
    check, path = {
        "dir option is a file": (check_output_dir, tmp_path / "a-file"),
        "dir option below a file": (check_output_dir, tmp_path / "a-file" / "sub"),
        "file option is a directory": (check_output_file, tmp_path),
        "file option below a file": (check_output_file, tmp_path / "a-file" / "v.jsonl"),
        "dangling link": (check_output_dir, tmp_path / "link"),
    }[case]
    with pytest.raises(ProbeError) as info:
        check(path, "--out", writer=ANY)
    assert str(info.value).startswith(f"--out {path}: ") and needle in str(info.value) and "\n" not in str(info.value)


def test_a_place_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    locked = _unwritable_dir(tmp_path)
    for check, path in ((check_output_dir, locked / "new" / "run"), (check_output_file, locked / "v.jsonl")):
        with pytest.raises(ProbeError, match=rf"^--out {path}: cannot write in {locked} \("):
            check(path, "--out", writer=ANY)


# ---------------------------------------------------------------- every command, before any work


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paths_run") / "run"
    write_synthetic_run(root, SyntheticSpec(n_samples=8, n_layers=4, width=8, capabilities=("multi_turn",)))
    return root


def test_analyze_out_file_is_refused_before_any_map(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "summary.txt"
    target.write_text("keep me")
    before = _listing(run_dir)
    one_line_error(
        capsys,
        ["analyze", str(run_dir), "--out", str(target), "--no-plots"],
        f"--out {target}: exists and is not a directory",
    )
    assert target.read_text() == "keep me" and _listing(run_dir) == before


def test_analyze_default_out_in_an_unwritable_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    run = tmp_path / "run"
    write_synthetic_run(run, SyntheticSpec(n_samples=4, n_layers=2, width=4, capabilities=("multi_turn",)))
    run.chmod(0o500)
    try:
        one_line_error(
            capsys, ["analyze", str(run), "--no-plots"], f"the default --out {run / 'analysis'}: cannot write in {run}"
        )
    finally:
        run.chmod(0o700)


@pytest.mark.parametrize("kind", ["directory", "below a file"])
def test_judge_verdicts_out_of_the_wrong_kind_is_refused_before_judging(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data, responses = tmp_path / "test.jsonl", tmp_path / "responses.jsonl"
    data.write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    responses.write_text(json.dumps("North.") + "\n", encoding="utf-8")
    target = tmp_path / "verdicts" if kind == "directory" else data / "verdicts.jsonl"
    if kind == "directory":
        target.mkdir()
    before = _listing(tmp_path)
    one_line_error(
        capsys,
        ["judge", "--data", str(data), "--responses", str(responses), "--verdicts-out", str(target)],
        f"--verdicts-out {target}: ",
    )
    assert _listing(tmp_path) == before


def test_synthesize_out_below_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    one_line_error(
        capsys, ["synthesize", "--out", str(tmp_path / "a-file" / "data"), "--roles", "2"], "is a file, not a directory"
    )
    assert _listing(tmp_path) == ["a-file"]


def test_intervene_out_file_is_refused_before_the_model_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").write_text("x")
    one_line_error(
        capsys,
        [
            "intervene",
            "--model-dir",
            str(tmp_path / "no-model"),
            "--data",
            str(tmp_path / "no-data.jsonl"),
            "--units",
            "0:1",
            "--out",
            str(tmp_path / "out"),
        ],
        f"--out {tmp_path / 'out'}: exists and is not a directory",
    )


@pytest.mark.parametrize("command", ["sft", "dpo"])
def test_train_out_below_a_file_is_refused_before_training(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    source = ["--base", "tiny"] if command == "sft" else ["--sft", str(tmp_path)]
    one_line_error(
        capsys,
        ["train", command, *source, "--data", str(tmp_path), "--out", str(tmp_path / "a-file" / "model")],
        "is a file, not a directory",
    )
    assert _listing(tmp_path) == ["a-file"]


def test_models_commands_refuse_output_paths_of_the_wrong_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    one_line_error(
        capsys, ["models", "default", "--home", str(tmp_path / "a-file")], "--home", "exists and is not a directory"
    )
    one_line_error(
        capsys,
        ["models", "fetch-base", "--home", str(tmp_path / "a-file" / "home")],
        "--home",
        "is a file, not a directory",
    )
    one_line_error(
        capsys,
        ["models", "eval", "--sft", str(tmp_path), "--dpo", str(tmp_path), "--out", str(tmp_path)],
        f"--out {tmp_path}: is a directory; expected a file name",
    )
    assert _listing(tmp_path) == ["a-file"]
