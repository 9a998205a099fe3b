"""Bad input: every error names file and line and what was expected; the CLI exits 2 without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import DataError
from data_synthesis.io import read_dpo_rows, read_sft_rows, read_test_rows, write_jsonl
from data_synthesis.validate import validate_file
from probe_cli.main import main

TASK = "role_related_mrc_answer_no_narration"
GOOD = {"question": [{"role": "System", "content": "You are A."}, {"role": "User", "content": "Q?"}], "reference": "R", "task": TASK}


def _file(tmp_path: Path, lines: list[str], name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _bad(obj: dict) -> str:
    return json.dumps(obj)


def _with(**changes: object) -> dict:
    return {**GOOD, **changes}


CASES = {
    "malformed JSON": ('{"question": [', "malformed JSON"),
    "not an object": ("[1, 2]", "expected a JSON object"),
    "unknown role": (_bad(_with(question=[{"role": "Narrator", "content": "x"}, {"role": "User", "content": "Q?"}])), "unknown role 'Narrator'"),
    "empty conversation": (_bad(_with(question=[])), "non-empty list of turns"),
    "two user turns": (_bad(_with(question=[{"role": "User", "content": "a"}, {"role": "User", "content": "b"}])), "two user turns in a row"),
    "system not first": (_bad(_with(question=[{"role": "User", "content": "a"}, {"role": "System", "content": "b"}])), "system turn may only come first"),
    "ends with assistant": (_bad(_with(question=[{"role": "User", "content": "a"}, {"role": "Assistant", "content": "b"}])), "last turn to be user"),
    "empty content": (_bad(_with(question=[{"role": "User", "content": "  "}])), "content is empty"),
    "unknown task": (_bad(_with(task="role_related_mrc_answer")), "unknown task 'role_related_mrc_answer'"),
    "missing reference": (_bad({k: v for k, v in GOOD.items() if k != "reference"}), "missing field 'reference'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_test_row_names_file_line_and_expectation(tmp_path: Path, case: str) -> None:
    line, message = CASES[case]
    path = _file(tmp_path, [json.dumps(GOOD), "", json.dumps(GOOD), line, json.dumps(GOOD)])
    with pytest.raises(DataError) as info:
        read_test_rows(path)
    assert info.value.line == 4  # blank lines still count
    assert str(info.value).startswith(f"{path}:4: ")
    assert message in str(info.value)


def test_sft_and_dpo_errors_are_line_precise(tmp_path: Path) -> None:
    sft = _file(tmp_path, [json.dumps({"conversations": [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}]}),
                           json.dumps({"conversations": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]})], "sft.jsonl")
    with pytest.raises(DataError, match=r"sft\.jsonl:2: .*last turn to be assistant"):
        read_sft_rows(sft)
    dpo = _file(tmp_path, [json.dumps({"prompt": [{"role": "user", "content": "U"}], "chosen": "c"})], "dpo.jsonl")
    with pytest.raises(DataError, match=r"dpo\.jsonl:1: missing field 'rejected'"):
        read_dpo_rows(dpo)
    with pytest.raises(DataError, match="no such file"):
        read_test_rows(tmp_path / "absent.jsonl")


def test_a_corrupt_line_never_drops_rows_silently(tmp_path: Path) -> None:
    lines = [json.dumps(GOOD)] * 5
    lines[2] = lines[2][:-3]  # truncated write
    with pytest.raises(DataError, match=":3: malformed JSON"):
        read_test_rows(_file(tmp_path, lines))


def test_failed_write_keeps_the_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "rows.jsonl"
    write_jsonl(target, [GOOD])
    before = target.read_bytes()

    def rows():
        yield GOOD
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_jsonl(target, rows())
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_validate_rejects_unknown_kind_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no rows"):
        validate_file(_file(tmp_path, [""]))
    with pytest.raises(DataError, match=":1: cannot tell the file kind"):
        validate_file(_file(tmp_path, [json.dumps({"text": "hi"})]))


@pytest.mark.parametrize("case", ["malformed JSON", "unknown role", "empty conversation", "two user turns", "unknown task"])
def test_cli_reports_bad_rows_in_one_line_and_exits_2(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, [json.dumps(GOOD), CASES[case][0]])
    with pytest.raises(SystemExit) as info:
        main(["validate", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {path}:2: ") and CASES[case][1] in err


def test_cli_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["synthesize", "--out", str(tmp_path), "--roles", "1"], ["synthesize", "--out", str(tmp_path), "--backend", "cloud"],
                 ["validate", str(tmp_path / "absent.jsonl")], ["synthesize", "--out", str(_file(tmp_path, ["x"], "a-file"))]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    assert "Traceback" not in capsys.readouterr().err


def test_cli_subprocess_has_no_traceback(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps(_with(task="no_such_task"))])
    done = subprocess.run([sys.executable, "-m", "probe_cli", "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {path}:1: unknown task 'no_such_task'; expected one of the 18 RoleMRC task names (in a test row)"
