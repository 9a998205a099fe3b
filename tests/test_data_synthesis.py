"""Offline synthesis: same seed same bytes, published proportions, disjoint test split, all tasks, reloadable."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from core.capabilities import TASKS
from core.errors import ProbeError
from core.rows import group_by_capability, read_dpo_rows, read_sft_rows, read_test_rows
from data_synthesis.offline import FILES, VIOLATIONS, SynthesisConfig, synthesize
from data_synthesis.offline.passages import build_pool
from data_synthesis.offline.tasks import shape_of

ALL_TASKS = {t.name for t in TASKS}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "d"
    synthesize(out, n_roles=20, seed=3)
    return out


def test_same_seed_same_bytes_other_seed_other_bytes(dataset: Path, tmp_path: Path) -> None:
    synthesize(tmp_path / "again", n_roles=20, seed=3)
    synthesize(tmp_path / "other", n_roles=20, seed=4)
    for name in FILES:
        assert (tmp_path / "again" / name).read_bytes() == (dataset / name).read_bytes(), name
    assert (tmp_path / "other" / "test.jsonl").read_bytes() != (dataset / "test.jsonl").read_bytes()


def test_roles_100_gives_the_published_histogram(tmp_path: Path) -> None:
    summary = synthesize(
        tmp_path,
        n_roles=100,
        seed=0,
        sft_base=0,
        sft_nested=0,
        sft_priority=0,
        sft_multi_turn=0,
        free_chats=0,
        dpo_per_task=0,
    )
    rows = read_test_rows(tmp_path / "test.jsonl")
    assert Counter(r.task for r in rows) == {t.name: t.published_count for t in TASKS}
    assert (
        {c.value: len(v) for c, v in group_by_capability(rows).items()}
        == summary.capabilities
        == {"knowledge_boundary": 600, "role_style": 400, "nested": 158, "multi_turn": 400, "priority": 42}
    )
    assert summary.files["test.jsonl"] == 1400 and summary.roles == {"train": 80, "test": 20}


def test_outputs_reload_and_summary_counts_match(dataset: Path) -> None:
    sft, dpo, test = (
        read_sft_rows(dataset / "sft.jsonl"),
        read_dpo_rows(dataset / "dpo.jsonl"),
        read_test_rows(dataset / "test.jsonl"),
    )
    cfg = SynthesisConfig(n_roles=20, seed=3)
    train_roles = 20 - cfg.n_test_roles
    # 58 -> 12, 20 -> 4, 22 -> 4 at 20 roles
    assert len(test) == sum(cfg.test_count(t.published_count) for t in TASKS) == 280
    assert len(dpo) == train_roles * 18 * cfg.dpo_per_task
    assert len(sft) == train_roles * (sum(cfg.sft_count(t.name) for t in TASKS) + cfg.free_chats)
    assert len(sft) >= 1000  # enough for the tiny model to learn at small --roles
    profiles = [json.loads(line) for line in (dataset / "profiles.jsonl").read_text().splitlines()]
    assert len(profiles) == 20 and {
        "name",
        "description",
        "personality",
        "speech_style",
        "domains",
        "knowledge_boundary",
    } <= set(profiles[0])


def test_training_files_cover_every_task_and_carry_task_fields(dataset: Path) -> None:
    sft, dpo = read_sft_rows(dataset / "sft.jsonl"), read_dpo_rows(dataset / "dpo.jsonl")
    assert {r.extra["task"] for r in sft} == ALL_TASKS | {"free_chat"}
    assert {r.extra["task"] for r in dpo} == ALL_TASKS
    assert {r.extra["category"] for r in sft} >= {"mrc", "nested", "priority", "multi_turn"}
    assert any(r.extra["category"].startswith("free_chat---role_first") for r in sft)
    assert any(r.conversations[1].role == "assistant" for r in sft)  # role-first dialogues exist
    for row in dpo:
        assert row.chosen != row.rejected
        assert VIOLATIONS[row.extra["violation"]].value == row.extra["violated"]
    assert set(Counter(r.extra["violation"] for r in dpo)) == set(VIOLATIONS)


def test_test_split_roles_and_passages_never_seen_in_training(dataset: Path) -> None:
    test = read_test_rows(dataset / "test.jsonl")
    train = read_sft_rows(dataset / "sft.jsonl") + read_dpo_rows(dataset / "dpo.jsonl")  # type: ignore[operator]
    test_roles, test_passages = {r.extra["role"] for r in test}, {r.extra["passage_id"] for r in test}
    train_roles = {r.extra["role"] for r in train}
    train_passages = {r.extra["passage_id"] for r in train if "passage_id" in r.extra}
    assert test_roles and not test_roles & train_roles
    assert test_passages and not test_passages & train_passages
    texts = {t.content for r in read_sft_rows(dataset / "sft.jsonl") for t in r.conversations}
    names = [
        json.loads(x)["name"] for x in (dataset / "profiles.jsonl").read_text().splitlines() if '"split": "test"' in x
    ]
    assert names and not any(name in text for name in names for text in texts)


def test_test_rows_behave_as_their_task_says(dataset: Path) -> None:
    for row in read_test_rows(dataset / "test.jsonl"):
        shape, expect = shape_of(row.task), row.expect
        assert expect is not None and expect["narration"] == shape.narration
        assert expect["knowledge_range"] == ("within" if shape.related else "outside")
        assert ("*" in row.reference) == shape.narration
        assert (expect["requirement"] is not None) == shape.suffix.startswith("special")
        assert (expect["rule"] is not None) == (shape.suffix == "refused")
        if expect["rule"]:
            assert expect["rule"] in row.question[0].content
        if expect["requirement"]:  # the authors' extraction finds the requirement as the 2nd sentence
            assert (
                row.question[0].content.split(". ")[1].removeprefix("You must ") == expect["requirement"]["description"]
            )
        if expect["answerable"]:
            assert expect["answer"] in row.question[1].content
        assert len(row.question) == (4 if shape.suffix.startswith("2nd") else 2)


def test_passage_pool_has_domains_answerable_and_unanswerable_questions() -> None:
    import random

    pool = build_pool(random.Random(0))
    assert len(pool) >= 100 and len({p.domain for p in pool}) >= 8
    assert len({p.entity for p in pool}) == len(pool)
    for p in pool:
        assert all(q.answer in p.text and q.sentence in p.text for q in p.answerable)
        assert p.unanswerable and all(q.sentence not in p.text for q in p.unanswerable)


def test_bad_config_is_a_probe_error(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="--roles must be an integer"):
        synthesize(tmp_path, n_roles=1)
    with pytest.raises(ProbeError, match="--seed"):
        synthesize(tmp_path, n_roles=4, seed="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        synthesize(tmp_path, n_roles=4, no_such_option=1)
    assert not list(tmp_path.iterdir())  # nothing written on bad arguments


@pytest.mark.slow
def test_cli_synthesize_200_roles_and_json_summary(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from probe_cli.main import app

    result = CliRunner().invoke(app, ["synthesize", "--out", str(tmp_path), "--roles", "200", "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["files"]["test.jsonl"] == 2800 and summary["capabilities"]["priority"] == 84
    assert len(read_test_rows(tmp_path / "test.jsonl")) == 2800
    table = CliRunner().invoke(app, ["synthesize", "--out", str(tmp_path / "small"), "--roles", "5"])
    assert table.exit_code == 0 and "Test rows per capability" in table.output and "free_chat" in table.output


def test_test_split_can_be_sized_apart_from_the_training_roles(tmp_path: Path) -> None:
    summary = synthesize(tmp_path, n_roles=20, seed=3, test_histogram_roles=10)
    assert (
        len((tmp_path / "test.jsonl").read_text(encoding="utf-8").splitlines()) == 140
    )  # the published 1,400-row histogram at 10 roles
    assert summary.files["test.jsonl"] == 140 and sum(summary.capabilities.values()) >= 140
    with pytest.raises(ProbeError, match="test_histogram_roles"):
        synthesize(tmp_path / "bad", n_roles=20, test_histogram_roles=0)
