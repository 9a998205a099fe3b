"""Data model: the published schemas round-trip, capitalised roles load, the 18 tasks group 600/400/158/400/42."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.capabilities import ALL_CAPABILITIES, TASKS, Capability, capabilities_of, parse_capabilities, tasks_of
from core.errors import ProbeError
from core.rows import group_by_capability, read_dpo_rows, read_sft_rows, read_test_rows, write_jsonl
from core.schema import DPORow, SFTRow, TestRow, Turn
from data_synthesis.validate import validate_file

PUBLISHED_GROUPS = {"knowledge_boundary": 600, "role_style": 400, "nested": 158, "multi_turn": 400, "priority": 42}


def _published_row(task: str, i: int) -> dict:
    """A row shaped like roleMRC_test.jsonl: capitalised roles, earlier Assistant turns for multi-turn tasks."""
    question = [
        {"role": "System", "content": f"You are role {i}. You must stay in character."},
        {"role": "User", "content": f"Passage {i}. Question {i}?"},
    ]
    if "-2nd" in task:
        question += [
            {"role": "Assistant", "content": "No answer present."},
            {"role": "User", "content": "Please try again."},
        ]
    return {"question": question, "reference": f"reference {i}", "task": task}


@pytest.fixture(scope="module")
def published_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("published") / "roleMRC_test.jsonl"
    lines = [json.dumps(_published_row(spec.name, i)) for spec in TASKS for i in range(spec.published_count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_published_test_file_loads_and_groups_like_the_paper(published_file: Path) -> None:
    rows = read_test_rows(published_file)
    assert len(rows) == 1400
    assert all(t.role in ("system", "user", "assistant") for r in rows for t in r.question)
    groups = group_by_capability(rows)
    assert {c.value: len(v) for c, v in groups.items()} == PUBLISHED_GROUPS
    both = [r for r in rows if len(capabilities_of(r.task)) == 2]
    assert len(both) == 200  # the two tasks judged on knowledge AND style
    assert all(r.expect is None for r in rows)


def test_published_rows_round_trip_unchanged_apart_from_role_case(published_file: Path, tmp_path: Path) -> None:
    rows = read_test_rows(published_file)
    out = tmp_path / "again.jsonl"
    assert write_jsonl(out, rows) == 1400
    original = [json.loads(line) for line in published_file.read_text().splitlines()]
    again = [json.loads(line) for line in out.read_text().splitlines()]
    for a, b in zip(original, again, strict=True):
        for turn in a["question"]:
            turn["role"] = turn["role"].lower()
        assert a == b


def test_group_by_capability_keeps_row_indices_and_filters(published_file: Path) -> None:
    rows = read_test_rows(published_file)
    groups = group_by_capability(rows, [Capability.PRIORITY])
    assert list(groups) == [Capability.PRIORITY]
    assert all(rows[i] is row and row.task.endswith("-refused") for i, row in groups[Capability.PRIORITY])


def test_validate_file_detects_kind_and_groups(published_file: Path) -> None:
    report = validate_file(published_file)
    assert (report.kind, report.rows, report.with_expect) == ("test", 1400, 0)
    assert report.capabilities == PUBLISHED_GROUPS


def test_sft_and_dpo_rows_round_trip_with_extra_fields(tmp_path: Path) -> None:
    sft = [
        SFTRow(
            [Turn("system", "You are A."), Turn("assistant", "Hello."), Turn("user", "Hi?"), Turn("assistant", "Yes.")],
            {"task": "free_chat", "category": "free_chat---role_first---no_narration"},
        )
    ]
    dpo = [
        DPORow(
            [Turn("system", "S."), Turn("user", "Q?")],
            "good",
            "bad",
            {"task": TASKS[0].name, "violation": "refused_answerable"},
        )
    ]
    test = [TestRow([Turn("user", "Q?")], "ref", TASKS[3].name, {"expect": {"behaviour": "refuse"}, "id": 7})]
    write_jsonl(tmp_path / "s.jsonl", sft)
    write_jsonl(tmp_path / "d.jsonl", dpo)
    write_jsonl(tmp_path / "t.jsonl", test)
    assert read_sft_rows(tmp_path / "s.jsonl") == sft
    assert read_dpo_rows(tmp_path / "d.jsonl") == dpo
    assert read_test_rows(tmp_path / "t.jsonl") == test
    assert read_test_rows(tmp_path / "t.jsonl")[0].expect == {"behaviour": "refuse"}
    assert validate_file(tmp_path / "d.jsonl").tasks == {TASKS[0].name: 1}


def test_capability_names_paper_names_and_all() -> None:
    assert parse_capabilities("all") == ALL_CAPABILITIES
    assert parse_capabilities("MULTI_TURN_INSTRUCTION") == (Capability.MULTI_TURN,)
    assert parse_capabilities("knowledge_range,role-style,knowledge_boundary") == (
        Capability.KNOWLEDGE_BOUNDARY,
        Capability.ROLE_STYLE,
    )
    assert parse_capabilities(["priority", "nested"]) == (Capability.PRIORITY, Capability.NESTED)
    with pytest.raises(ProbeError, match="unknown capability 'helpfulness'"):
        parse_capabilities("helpfulness")
    with pytest.raises(ProbeError, match="unknown task"):
        capabilities_of("role_related_mrc_answer")


def test_task_table_matches_the_authors_mapping() -> None:
    assert len(TASKS) == 18 and sum(t.published_count for t in TASKS) == 1400
    assert set(tasks_of(Capability.ROLE_STYLE)) == {
        "role_related_mrc_answer_with_narration",
        "role_related_mrc_refused_no_narration",
        "role_unrelated_mrc_refused_no_narration",
        "role_unrelated_mrc_answer_no_narration",
    }
    assert capabilities_of("role_related_mrc_refused_with_narration") == (Capability.KNOWLEDGE_BOUNDARY,)


def test_cli_validate_reports_the_published_grouping(published_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probe_cli.main import main

    with pytest.raises(SystemExit) as done:  # click's standalone mode always exits
        main(["validate", str(published_file), "--json"])
    assert done.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "test" and report["rows"] == 1400 and report["capabilities"] == PUBLISHED_GROUPS
