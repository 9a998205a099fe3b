"""``probe lmeval``'s own tasks: ``probe_heldout`` by default (the held-out rows of the capability, judged by their
constraint checkers), ``probe_test`` with ``--split test``; offline, on the tiny pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.capabilities import Capability, capabilities_of
from core.records import to_json
from core.rows import read_test_rows
from data_synthesis.heldout.files import heldout_test_file
from interventions.config import ABConfig
from interventions.plan import select_rows
from lmeval.config import LMEvalConfig
from lmeval.tasks import own_task_docs, process_results
from tests.support.cli import exit_of, one_line_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _multi_turn_rows() -> list[Any]:
    rows = read_test_rows(heldout_test_file())
    return [r for r in rows if Capability.MULTI_TURN in capabilities_of(r.task)]


def test_an_item_is_the_rule_judges_score_on_the_capability() -> None:
    row = next(r for r in _multi_turn_rows() if r.extra["expect"]["constraints"])
    doc = {"capability": "multi_turn", "row": json.dumps(to_json(row))}
    assert process_results(doc, [row.reference]) == {"compliance": 1.0}
    assert process_results(doc, [""]) == {"compliance": 0.0}
    # the constraint set in turn 1 still binds the last turn: the reference in lower case breaks an all-caps rule
    caps = next(r for r in _multi_turn_rows() if r.extra["expect"]["constraints"][0]["type"] == "all_caps")
    doc["row"] = json.dumps(to_json(caps))
    assert process_results(doc, [caps.reference]) == {"compliance": 1.0}
    assert process_results(doc, [caps.reference.lower()]) == {"compliance": 0.0}


def test_the_items_are_probe_intervenes_rows_in_its_order(tiny_pair: tuple[Path, Path]) -> None:
    from core.chat import encode_conversations, encode_text
    from core.models import load_tokenizer

    ab = ABConfig(model_dir=tiny_pair[1], units="1:0")
    tokenizer = load_tokenizer(tiny_pair[1], "--model-dir")
    docs = own_task_docs(tokenizer, ab, heldout_test_file())
    rows = read_test_rows(heldout_test_file())
    picked, _ = select_rows(rows, ab)
    assert [d["line"] for d in docs] == [i + 1 for i in picked] and len(docs) == 36
    # each prompt is the token sequence probe intervene generates from (the chat template, the generation prompt)
    for doc in docs[:3]:
        row = rows[doc["line"] - 1]
        assert (
            encode_text(tokenizer, doc["prompt"])
            == encode_conversations(tokenizer, [row.question], add_generation_prompt=True)[0]
        )


def test_the_split_picks_the_task() -> None:
    assert LMEvalConfig(model_dir="m", units="1:0").tasks == ["probe_heldout"]
    assert LMEvalConfig(model_dir="m", units="1:0", split="test").tasks == ["probe_test"]
    assert LMEvalConfig(model_dir="m", units="1:0", tasks="mmlu").tasks == ["mmlu"]


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--chat-template"], ["--tasks probe_heldout", "leave out --chat-template"]),
        (["--split", "test"], ["--tasks probe_test", "give a RUN_DIR"]),
        (["--split", "train"], ["--split: expected one of heldout, test, got 'train'"]),
    ],
)
def test_what_the_own_tasks_cannot_do_is_one_line(
    tiny_pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str], argv: list[str], needles: list[str]
) -> None:
    pytest.importorskip("lm_eval")
    one_line_error(capsys, ["lmeval", "--model-dir", str(tiny_pair[1]), "--units", "1:0", *argv], *needles)


@pytest.mark.slow
def test_lmeval_runs_the_heldout_task_by_default(
    tiny_pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lm_eval")
    out = tmp_path / "lmeval"
    argv = ["lmeval", "--model-dir", str(tiny_pair[1]), "--units", "1:0-15", "--factor", "0", "--limit", "3"]
    code, printed, err = exit_of([*argv, "--bootstrap", "200", "--out", str(out)], capsys)
    assert code == 0, err
    report = json.loads((out / "lmeval_report.json").read_text())
    assert report["tasks"] == ["probe_heldout"] and "probe_heldout" in printed
    items = [json.loads(line) for line in (out / "lmeval_items.jsonl").read_text().splitlines()]
    assert len(items) == 3 and all(item["task"] == "probe_heldout" for item in items)
    row = report["arms"][0]["rows"][0]
    assert (row["metric"], row["n"], row["binary"]) == ("compliance", 3, True)
    assert report["baseline"]["lm_eval_results"]["probe_heldout"]["compliance,none"] == row["before"]


def test_an_ab_reports_split_is_the_default_task(tmp_path: Path) -> None:
    from lmeval.config import ab_defaults

    (tmp_path / "ab_report.json").write_text(json.dumps({"config": {"units": "1:0", "split": "heldout"}}))
    assert ab_defaults(tmp_path)["split"] == "heldout"
    (tmp_path / "ab_report.json").write_text(json.dumps({"config": {"units": "1:0"}}))  # before the split was recorded
    assert ab_defaults(tmp_path)["split"] == "test"
