"""Bad input: every error names file and line and what was expected; the CLI exits 2 without a traceback.

Every JSON and JSONL input goes through one reader (core.inputs), so the byte-level cases
(not UTF-8, a BOM, UTF-16, a directory or a pipe, values nested thousands deep, numbers of
thousands of digits, lone surrogate escapes) are tested once per reader and once per command
that reads a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from access.units import FORMAT, NeuronSet
from core.errors import DataError, ProbeError
from core.records import to_json
from core.rows import read_dpo_rows, read_sft_rows, read_test_rows, write_jsonl
from data_synthesis.validate import validate_file
from judging.files import read_responses
from probe_cli.main import main

TASK = "role_related_mrc_answer_no_narration"
GOOD = {
    "question": [{"role": "System", "content": "You are A."}, {"role": "User", "content": "Q?"}],
    "reference": "R",
    "task": TASK,
}


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
    "unknown role": (
        _bad(_with(question=[{"role": "Narrator", "content": "x"}, {"role": "User", "content": "Q?"}])),
        "unknown role 'Narrator'",
    ),
    "empty conversation": (_bad(_with(question=[])), "non-empty list of turns"),
    "two user turns": (
        _bad(_with(question=[{"role": "User", "content": "a"}, {"role": "User", "content": "b"}])),
        "two user turns in a row",
    ),
    "system not first": (
        _bad(_with(question=[{"role": "User", "content": "a"}, {"role": "System", "content": "b"}])),
        "system turn may only come first",
    ),
    "ends with assistant": (
        _bad(_with(question=[{"role": "User", "content": "a"}, {"role": "Assistant", "content": "b"}])),
        "last turn to be user",
    ),
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
    sft = _file(
        tmp_path,
        [
            json.dumps({"conversations": [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}]}),
            json.dumps({"conversations": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}),
        ],
        "sft.jsonl",
    )
    with pytest.raises(DataError, match=r"sft\.jsonl:2: .*last turn to be assistant"):
        read_sft_rows(sft)
    dpo = _file(tmp_path, [json.dumps({"prompt": [{"role": "user", "content": "U"}], "chosen": "c"})], "dpo.jsonl")
    with pytest.raises(DataError, match=r"dpo\.jsonl:1: missing field 'rejected'"):
        read_dpo_rows(dpo)
    with pytest.raises(DataError, match="no such JSONL file"):
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


@pytest.mark.parametrize(
    "case", ["malformed JSON", "unknown role", "empty conversation", "two user turns", "unknown task"]
)
def test_cli_reports_bad_rows_in_one_line_and_exits_2(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, [json.dumps(GOOD), CASES[case][0]])
    with pytest.raises(SystemExit) as info:
        main(["validate", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {path}:2: ") and CASES[case][1] in err


def test_cli_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["synthesize", "--out", str(tmp_path), "--roles", "1"],
        ["synthesize", "--out", str(tmp_path), "--backend", "cloud"],
        ["validate", str(tmp_path / "absent.jsonl")],
        ["synthesize", "--out", str(_file(tmp_path, ["x"], "a-file"))],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    assert "Traceback" not in capsys.readouterr().err


def test_cli_subprocess_has_no_traceback(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps(_with(task="no_such_task"))])
    done = subprocess.run(
        [sys.executable, "-m", "probe_cli", "validate", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"error: {path}:1: unknown task 'no_such_task'; expected one of the 18 RoleMRC task names (in a test row)"
    )


# ---------------------------------------------------------------- bytes, encodings and paths (core.inputs)

SFT = {"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
DPO = {"prompt": [{"role": "user", "content": "Hi"}], "chosen": "Hello.", "rejected": "Go away."}
NEURONS = {"format": FORMAT, "version": 1, "hook": "mlp_out", "neurons": [{"layer": 1, "unit": 2, "delta": 0.5}]}
READERS = {"test": (read_test_rows, GOOD), "sft": (read_sft_rows, SFT), "dpo": (read_dpo_rows, DPO)}


def _bytes_file(tmp_path: Path, data: bytes, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", sorted(READERS))
def test_non_utf8_bytes_name_the_line_and_column(tmp_path: Path, kind: str) -> None:
    read, row = READERS[kind]
    path = _bytes_file(tmp_path, _line(row) + b"\n\n" + b'{"x": "caf\xe9"}\n')  # latin-1, line 3
    with pytest.raises(DataError) as info:
        read(path)
    assert str(info.value).startswith(f"{path}:3: not UTF-8 text (byte 0xe9 at column 11); expected UTF-8")


def test_random_bytes_in_a_neuron_set_or_responses_file_are_one_data_error(tmp_path: Path) -> None:
    noise = bytes(range(128, 256)) * 4
    with pytest.raises(DataError, match=r"neurons\.json:1: not UTF-8 text"):
        NeuronSet.load(_bytes_file(tmp_path, noise, "neurons.json"))
    with pytest.raises(DataError, match=r"responses\.jsonl:1: not UTF-8 text"):
        read_responses(_bytes_file(tmp_path, noise, "responses.jsonl"), 1)


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_utf8_bom_is_accepted_also_where_cat_joined_two_files(tmp_path: Path, kind: str) -> None:
    read, row = READERS[kind]
    bom = b"\xef\xbb\xbf"
    rows = read(_bytes_file(tmp_path, bom + _line(row) + b"\n" + bom + _line(row) + b"\n"))
    assert [to_json(r) for r in rows] == [
        to_json(r) for r in read(_bytes_file(tmp_path, _line(row) + b"\n" + _line(row), "plain.jsonl"))
    ]


def test_a_neuron_set_with_a_bom_loads(tmp_path: Path) -> None:
    loaded = NeuronSet.load(_bytes_file(tmp_path, b"\xef\xbb\xbf" + _line(NEURONS), "neurons.json"))
    assert loaded.by_layer() == {1: [2]}


def test_utf16_gets_advice_on_converting(tmp_path: Path) -> None:
    path = _bytes_file(tmp_path, json.dumps(GOOD).encode("utf-16"))
    with pytest.raises(
        DataError, match=r":1: is UTF-16 text .* re-save it as UTF-8 \(e\.g\. iconv -f UTF-16 -t UTF-8\)"
    ):
        read_test_rows(path)


def test_a_directory_or_a_pipe_is_named_for_what_it_is(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^{tmp_path}: is a directory; expected a JSONL file$"):
        read_test_rows(tmp_path)
    with pytest.raises(DataError, match="is a directory; expected a neuron-set file"):
        NeuronSet.load(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(DataError, match="is not a regular file"):
        read_test_rows(tmp_path / "pipe")


def test_every_line_ending_numbers_lines_as_an_editor_does(tmp_path: Path) -> None:
    for newline in (b"\n", b"\r\n", b"\r"):
        path = _bytes_file(tmp_path, newline.join([_line(GOOD), b"", b" \t", b'{"question": 1', b""]))
        with pytest.raises(DataError, match=r":4: malformed JSON"):
            read_test_rows(path)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_values_are_one_line_not_a_recursion_error(tmp_path: Path, depth: int) -> None:
    deep = b"[" * depth + b"]" * depth
    path = _bytes_file(tmp_path, _line(GOOD) + b"\n" + _line(GOOD)[:-1] + b', "x": ' + deep + b"}\n")
    with pytest.raises(DataError, match=r":2: nested more than 64 levels deep"):
        read_test_rows(path)
    with pytest.raises(DataError, match=r"neurons\.json: nested more than 64 levels deep"):
        NeuronSet.load(_bytes_file(tmp_path, deep, "neurons.json"))


def test_nesting_up_to_the_limit_round_trips(tmp_path: Path) -> None:
    nested: object = "leaf"
    for _ in range(63):
        nested = [nested]
    rows = read_test_rows(_bytes_file(tmp_path, _line({**GOOD, "x": nested})))
    write_jsonl(tmp_path / "copy.jsonl", rows)
    assert [to_json(r) for r in read_test_rows(tmp_path / "copy.jsonl")] == [to_json(r) for r in rows]


def test_a_number_of_thousands_of_digits_is_one_line(tmp_path: Path) -> None:
    path = _bytes_file(tmp_path, _line(GOOD)[:-1] + b', "id": ' + b"7" * 5000 + b"}\n")
    with pytest.raises(DataError, match=r":1: a number with more than 4300 digits"):
        read_test_rows(path)


def test_a_lone_surrogate_escape_is_refused_where_it_is_read_not_where_it_is_written(tmp_path: Path) -> None:
    pair = _line(GOOD).replace(b'"R"', b'"\\ud83d\\ude00"')
    assert read_test_rows(_bytes_file(tmp_path, pair))[0].reference == "\U0001f600"
    lone = _line(GOOD).replace(b'"R"', b'"\\ud800 and more"')
    with pytest.raises(DataError, match=r":1: the escape \\ud800 is half of a UTF-16 surrogate pair"):
        read_test_rows(_bytes_file(tmp_path, lone, "lone.jsonl"))


def test_a_huge_value_is_quoted_short(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps(_with(task="x" * 1_000_000))])
    with pytest.raises(DataError) as info:
        read_test_rows(path)
    assert "unknown task 'xxxx" in str(info.value) and len(str(info.value)) < len(str(path)) + 200


# ---------------------------------------------------------------- the expect block and neuron sets (type swaps)


@pytest.mark.parametrize(
    "expect,message",
    [
        ([1, 2], "field 'expect': expected an object, got list"),
        (
            {"behaviour": "answer", "answer": ["Rolf"]},
            "field 'expect': field 'answer': expected a string or null, got list",
        ),
        ({"narration": "yes"}, "field 'narration': expected true or false or null, got str"),
        ({"requirement": {"kind": "shout", "value": "x"}}, "'kind' must be one of include_phrase"),
        ({"requirement": {"kind": "end_with_word", "value": 7}}, "'value' must be a string or null, got int"),
    ],
)
def test_a_mistyped_expect_block_fails_at_its_line_not_inside_the_judge(
    tmp_path: Path, expect: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _file(tmp_path, [json.dumps(GOOD), json.dumps(_with(expect=expect))])
    responses = _file(tmp_path, [json.dumps("Rolf did."), json.dumps("Rolf did.")], "responses.jsonl")
    _one_line_error(capsys, ["judge", "--data", str(data), "--responses", str(responses)], f"{data}:2: ", message)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"selection": [1]}, "'selection' must be an object"),
        ({"selection": "top"}, "'selection' must be an object"),
        ({"model_hashes": ["a"]}, "'model_hashes' must be an object"),
        ({"model_hashes": {"sft": 3}}, "'model_hashes' must map model names to hash strings"),
        ({"metric": ["x"]}, "'metric' must be a string"),
        ({"neurons": [{"layer": 1, "unit": 2, "delta": 10**400}]}, "delta must be a finite number"),
        ({"neurons": [{"layer": 1, "unit": 2}, {"layer": 1, "unit": 2}]}, "layer 1 unit 2 is listed twice"),
    ],
)
def test_a_mistyped_neuron_set_is_one_error_naming_the_file(tmp_path: Path, change: dict, message: str) -> None:
    path = _bytes_file(tmp_path, _line({**NEURONS, **change}), "neurons.json")
    with pytest.raises(ProbeError) as info:
        NeuronSet.load(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


# ---------------------------------------------------------------- every command that reads a file

BAD_BYTES = b'{"question": "caf\xe9"}\n'


def test_validate_and_judge_report_non_utf8_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _bytes_file(tmp_path, BAD_BYTES)
    good = _file(tmp_path, [json.dumps(GOOD)], "good.jsonl")
    responses = _file(tmp_path, [json.dumps("R")], "responses.jsonl")
    _one_line_error(capsys, ["validate", str(bad)], f"{bad}:1: not UTF-8 text")
    _one_line_error(capsys, ["judge", "--data", str(bad), "--responses", str(responses)], f"{bad}:1: not UTF-8 text")
    _one_line_error(capsys, ["judge", "--data", str(good), "--responses", str(bad)], f"{bad}:1: not UTF-8 text")
    _one_line_error(capsys, ["validate", str(tmp_path)], f"{tmp_path}: is a directory")


def test_intervene_reports_non_utf8_neurons_and_data_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, neurons = _bytes_file(tmp_path, BAD_BYTES), _bytes_file(tmp_path, b"\x80" * 64, "neurons.json")
    (tmp_path / "model").mkdir()
    common = ["intervene", "--model-dir", str(tmp_path / "model"), "--placebo", "0", "--out", str(tmp_path / "ab")]
    _one_line_error(capsys, [*common, "--data", str(bad), "--units", "0:1"], f"{bad}:1: not UTF-8 text")
    _one_line_error(capsys, [*common, "--data", str(bad), "--neurons", str(neurons)], f"{neurons}:1: not UTF-8 text")
    assert not (tmp_path / "ab").exists()


def test_cli_subprocess_reports_random_bytes_without_a_traceback(tmp_path: Path) -> None:
    path = _bytes_file(tmp_path, bytes(range(128, 256)) * 8)
    done = subprocess.run(
        [sys.executable, "-m", "probe_cli", "validate", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {path}:1: not UTF-8 text (byte 0x80 at column 1)")


# ---------------------------------------------------------------- "run probe analyze" only where analysis can help


def test_a_capability_the_run_never_recorded_is_named_with_the_recorded_ones(tmp_path: Path) -> None:
    from interventions.config import ABConfig
    from interventions.plan import resolve_neurons
    from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

    run = tmp_path / "run"
    write_synthetic_run(run, SyntheticSpec(n_samples=4, n_layers=2, width=4, capabilities=("multi_turn", "role_style")))
    with pytest.raises(ProbeError) as info:
        resolve_neurons(ABConfig(run_dir=run, capability="nested", placebo=0))
    assert "capability 'nested' was not recorded in this run (recorded: multi_turn, role_style)" in str(info.value)
    assert "probe analyze" not in str(info.value)
    with pytest.raises(
        ProbeError, match=r"hook 'attn_out' was not recorded for capability 'multi_turn' \(recorded: mlp_out\)"
    ):
        resolve_neurons(ABConfig(run_dir=run, capability="multi_turn", hook="attn_out", placebo=0))
    with pytest.raises(ProbeError, match=r"no neuron set for capability=multi_turn hook=mlp_out; run `probe analyze"):
        resolve_neurons(ABConfig(run_dir=run, capability="multi_turn", placebo=0))


# ---------------------------------------------------------------- writers: all of a dataset or none of it


def test_a_synthesis_that_fails_while_writing_keeps_every_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    import core.rows
    from core.schema import TestRow

    out = tmp_path / "data"
    assert main_exit(["synthesize", "--out", str(out), "--roles", "2", "--seed", "1"]) in (0, None)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def disk_full(row: object) -> object:
        if isinstance(row, TestRow):
            raise OSError(errno.ENOSPC, "No space left on device")
        return to_json(row)

    monkeypatch.setattr(core.rows, "to_json", disk_full)  # test.jsonl is written last
    capsys.readouterr()
    _one_line_error(
        capsys,
        ["synthesize", "--out", str(out), "--roles", "3", "--seed", "2"],
        f"{out}: could not write test.jsonl (No space left on device); the existing files were kept unchanged",
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_failed_jsonl_write_is_one_line_and_keeps_the_old_file(tmp_path: Path) -> None:
    import errno

    target = tmp_path / "rows.jsonl"
    write_jsonl(target, [GOOD])
    before = target.read_bytes()

    def rows():
        yield GOOD
        raise OSError(errno.EROFS, "Read-only file system")

    with pytest.raises(
        ProbeError, match=r"rows\.jsonl: could not write \(Read-only file system\); any previous file there was kept"
    ):
        write_jsonl(target, rows())
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def main_exit(argv: list[str]) -> int | None:
    try:
        main(argv)
    except SystemExit as exc:
        return exc.code  # type: ignore[return-value]
    return None
