"""The held-out split (issue 37): the 18 constraint checkers, the split's rows, its overlap check, the gate, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.capabilities import ALL_CAPABILITIES, Capability, capabilities_of
from core.constraints import CHECKERS, check, check_turns
from core.errors import ProbeError
from core.rows import read_test_rows
from core.schema import TestRow, Turn
from data_synthesis.heldout import vocab
from data_synthesis.heldout.build import HeldoutConfig, build_heldout
from data_synthesis.heldout.files import heldout_bytes, offline_training_texts, write_heldout
from data_synthesis.heldout.gate import CAPABILITIES, MODELS, discrimination_gate
from data_synthesis.heldout.overlap import OVERLAP_BOUND, ngram_overlap
from judging.rules import RuleJudge
from tests.support.cli import exit_of, one_line_error

# type -> (constraint, replies that meet it, replies that do not); every type has Unicode and the empty reply
CASES: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    "lowercase": ({}, ["the river is long.", "ça va, élan!"], ["The river.", "ÇA", "1234 !", "", "  \n"]),
    "all_caps": ({}, ["THE RIVER IS LONG.", "ÉLAN VITAL!"], ["THE RIVEr", "Élan", "42", ""]),
    "start_with": (
        {"value": "In short"},
        ["In short, yes.", "*nods* in SHORT: yes", "In short"],
        ["Well, in short yes.", "Inshort yes", "In", ""],
    ),
    "end_with": (
        {"value": "so it goes"},
        ["He left. So it goes.", '"so it goes"', "so—it goes!"],
        ["So it goes, he said.", "so it go", ""],
    ),
    "include_word": (
        {"value": "lantern"},
        ["A LANTERN burns.", "lantern."],
        ["lanterns everywhere", "a lanternfish", ""],
    ),
    "forbid_words": (
        {"value": "very|really"},
        ["It is quite long.", "Everything is fine."],
        ["It is very long.", "REALLY?", ""],
    ),
    "word_frequency": (
        {"value": "meadow", "n": 2},
        ["meadow and Meadow", "a meadow, a meadow, a meadow"],
        ["one meadow", "meadows meadows", ""],
    ),
    "max_words": ({"n": 3}, ["Don't go there.", "Ça va bien."], ["One two three four.", ""]),
    "min_words": ({"n": 4}, ["one two three four", "日本 語 を 話す"], ["one two three", ""]),
    "max_sentences": ({"n": 2}, ["One. Two!", "Version 1.5 is out. Yes."], ["One. Two. Three?", "A! B! C!", ""]),
    "bullet_count": ({"n": 2}, ["- a\n- b", "Intro:\n* one\n• two"], ["- a\n- b\n- c", "-a\n-b", "- a", ""]),
    "wrap_quotes": ({}, ['"Hello there."', "\u201cHello\u201d"], ['"Hello', "Hello", '""', ""]),
    "wrap_brackets": ({}, ["[Hello]", "  [a b]  "], ["[Hello", "(Hello)", "[]", ""]),
    "no_commas": ({}, ["No commas here.", "日本語です。"], ["One, two.", "日本語、です", "全角\uff0c", ""]),
    "postscript": ({}, ["Answer.\nP.S. more", "Answer.\np.s. More"], ["P.S. only", "Answer. P.S. inline", ""]),
    "title": ({}, ["<<Notes>>\nBody", "Body <<A Title>>"], ["<< >>", "<Notes>", "Body", ""]),
    "no_contractions": (
        {},
        ["I do not know.", "The smith's hammer rang."],
        ["I don't know.", "It\u2019s late.", "We'll see.", ""],
    ),
    "max_capital_words": ({"n": 0}, ["I think so.", "Hello there A."], ["It is OK.", "VERY good", ""]),
}


def test_at_least_fifteen_checkers_each_with_cases() -> None:
    assert len(CHECKERS) >= 15
    assert set(CASES) == set(CHECKERS)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_checker_passes_and_fails_hand_written_replies(kind: str) -> None:
    params, good, bad = CASES[kind]
    constraint = {"type": kind, **params}
    for reply in good:
        assert check(reply, constraint)[0], (kind, reply, check(reply, constraint))
    for reply in bad:
        assert not check(reply, constraint)[0], (kind, reply)
    assert "" in bad  # an empty reply meets no constraint


def test_a_constraint_met_only_in_one_turn_fails_the_conversation() -> None:
    lower = {"type": "lowercase", "from_turn": 1}
    bullets = {"type": "bullet_count", "n": 2, "from_turn": 2}
    assert check_turns(["yes.", "- a\n- b", "- c\n- d"], [lower, bullets]) == (
        True,
        "all constraints held over 3 turn(s)",
    )
    ok, why = check_turns(["yes.", "- a\n- b", "- C\n- d"], [lower, bullets])
    assert not ok and why.startswith("turn 3: lowercase")
    ok, why = check_turns(["yes.", "- a", "- c\n- d"], [lower, bullets])
    assert not ok and why.startswith("turn 2: bullet_count")
    # a constraint set in turn 2 does not bind the reply to turn 1
    assert check_turns(["no bullets here."], [lower, bullets])[0]


def test_the_rule_judge_requires_the_constraints_in_force_at_the_final_turn() -> None:
    expect = {"behaviour": "answer", "answer": "1712", "multi_turn_type": "answerable"}
    expect["constraints"] = [
        {"type": "lowercase", "from_turn": 1},
        {"type": "end_with", "value": "bye", "from_turn": 3},
    ]
    turns = [Turn("user", "a"), Turn("assistant", "b"), Turn("user", "c")]
    row = TestRow(turns, "ref", "role_unrelated_mrc_refused_no_narration-2ndanswer", {"expect": expect})
    judge = RuleJudge()
    assert judge.judge_one(row, "built in 1712.").scores == {Capability.MULTI_TURN: 1}  # end_with starts at turn 3
    row3 = TestRow([*turns, Turn("assistant", "d"), Turn("user", "e")], "ref", row.task, {"expect": expect})
    assert judge.judge_one(row3, "built in 1712.").scores == {Capability.MULTI_TURN: 0}
    assert judge.judge_one(row3, "built in 1712, bye").scores == {Capability.MULTI_TURN: 1}
    assert judge.judge_one(row3, "Built in 1712, bye").scores == {Capability.MULTI_TURN: 0}


@pytest.fixture(scope="module")
def rows() -> list[TestRow]:
    return build_heldout(HeldoutConfig())


def test_same_seed_same_bytes_other_seed_other_rows() -> None:
    small = HeldoutConfig(seed=3, per_capability=12)
    assert heldout_bytes(small) == heldout_bytes(HeldoutConfig(seed=3, per_capability=12))
    assert heldout_bytes(small) != heldout_bytes(HeldoutConfig(seed=4, per_capability=12))


def test_every_reference_passes_every_capability_of_its_row(rows: list[TestRow]) -> None:
    judge = RuleJudge()
    for row in rows:
        verdict = judge.judge_one(row, row.reference)
        assert all(v == 1 for v in verdict.scores.values()), (row.task, row.reference, verdict.reasons)


def test_the_judge_is_not_trivial_on_the_split(rows: list[TestRow]) -> None:
    """Constant replies and a reference from another row fail most rows of every capability."""
    judge = RuleJudge()
    for reply in ("", "I cannot answer that.", "Sure! Here is the answer."):
        for cap in ALL_CAPABILITIES:
            scores = [judge.check(r, reply, cap)[0] for r in rows if cap in capabilities_of(r.task)]
            assert sum(s == 1 for s in scores) <= 0.5 * len(scores), (reply, cap)


def test_split_has_all_five_capabilities_levels_triples_and_boundaries(rows: list[TestRow]) -> None:
    counts = {cap: sum(cap in capabilities_of(r.task) for r in rows) for cap in ALL_CAPABILITIES}
    assert counts == dict.fromkeys(ALL_CAPABILITIES, 36)
    assert {r.extra["expect"]["level"] for r in rows} == {1, 2, 3}
    groups = {r.extra["group"] for r in rows}
    assert {"knowledge_boundary/in_scope", "knowledge_boundary/out_of_scope"} <= groups
    triples = [r for r in rows if r.extra["expect"].get("priority_variant")]
    for i in range(0, len(triples), 3):
        aligned, conflict, reference = triples[i : i + 3]
        assert [aligned.extra["expect"]["priority_variant"], conflict.extra["expect"]["priority_variant"]] == [
            "aligned",
            "conflict",
        ]
        assert reference.extra["expect"]["priority_variant"] == "reference"
        rule = aligned.extra["expect"]["constraints"]
        assert conflict.extra["expect"]["constraints"] == rule == reference.extra["expect"]["constraints"]
        assert aligned.question[0] == conflict.question[0] == reference.question[0]  # one system prompt
        assert rule[0]["sentence"] in aligned.question[-1].content
        assert conflict.question[-1].content.startswith(vocab.CONFLICT.split(":")[0])
        # the user's demand in the conflict row contradicts the rule: the reference cannot meet it
        assert not RuleJudge().check(conflict, "", Capability.PRIORITY)[0]


def test_carry_over_rows_have_three_user_turns_and_a_turn_one_constraint(rows: list[TestRow]) -> None:
    multi = [r for r in rows if Capability.MULTI_TURN in capabilities_of(r.task)]
    assert len(multi) == 36
    for row in multi:
        assert [t.role for t in row.question] == ["system", "user", "assistant", "user", "assistant", "user"]
        constraints = row.extra["expect"]["constraints"]
        assert constraints[0]["from_turn"] == 1 and constraints[0]["sentence"] in row.question[1].content
        assert len(constraints) == row.extra["expect"]["level"]
        replies = [t.content for t in row.question if t.role == "assistant"] + [row.reference]
        assert check_turns(replies, constraints)[0]
        # the turn-1 constraint still binds the final reply
        assert not RuleJudge().check(row, _break(constraints[0], row.reference), Capability.MULTI_TURN)[0]


def _break(constraint: dict[str, Any], reply: str) -> str:
    """``reply`` changed so that it no longer meets ``constraint``."""
    kind = constraint["type"]
    if kind in ("max_words", "max_sentences", "max_capital_words"):
        return reply + " AND THEN SOME MORE. AND MORE. " * (constraint["n"] + 3)
    if kind in ("min_words", "bullet_count", "word_frequency", "include_word", "start_with", "title"):
        return "No."
    return {
        "lowercase": reply.upper(),
        "all_caps": reply.lower(),
        "end_with": reply + " Done.",
        "forbid_words": f"{reply} {constraint.get('value', '')}",
        "wrap_quotes": reply + " x",
        "wrap_brackets": reply + " x",
        "no_commas": reply + ", x",
        "postscript": reply.split("\n")[0] + " x",
        "no_contractions": reply + " don't",
    }[kind]


def test_held_out_vocabulary_is_disjoint_from_the_training_split(rows: list[TestRow]) -> None:
    from data_synthesis.offline import vocab as train_vocab

    for ours, theirs in (
        (vocab.FIELD_NAMES, train_vocab.DOMAIN_NAMES),
        (vocab.SIGNATURES, train_vocab.CATCHPHRASES),
        (vocab.ACTIONS, train_vocab.GESTURES),
        (vocab.FIRST_NAMES, train_vocab.FIRST_NAMES),
        (vocab.TEMPERS, train_vocab.PERSONALITIES),
        (vocab.TOWNS + vocab.ROLE_TOWNS, train_vocab.TOWNS + train_vocab.PLACES),
    ):
        assert not set(ours) & set(theirs)
    report = ngram_overlap(rows, offline_training_texts(0), against="offline seed 0")
    assert report.passed and report.shared == 0, report.line()


def test_overlap_check_fails_a_split_that_copies_training_text(rows: list[TestRow]) -> None:
    training = list(offline_training_texts(0))
    copied = [
        TestRow([Turn("user", text)], text, r.task, r.extra) for r, text in zip(rows, training[1:60], strict=False)
    ]
    report = ngram_overlap(rows + copied, training)
    assert not report.passed and report.share > OVERLAP_BOUND and report.rows_with_shared >= 50
    assert "FAIL" in report.line()


def test_gate_bounds_are_inclusive_and_need_every_model() -> None:
    rates = {m: dict.fromkeys(CAPABILITIES, (6, 60)) for m in MODELS}  # exactly 10%
    assert discrimination_gate(rates).holds is True
    rates["sft"]["priority"] = (54, 60)  # exactly 90%
    assert discrimination_gate(rates).holds is True
    rates["base"]["priority"] = (5, 60)
    gate = discrimination_gate(rates)
    assert gate.holds is False and gate.failures == ["base priority 8.3% < 10%"]
    del rates["base"]
    assert discrimination_gate(rates).holds is None


def test_a_bad_constraint_in_a_file_is_one_line_with_its_line(tmp_path: Path) -> None:
    path = write_heldout(tmp_path, HeldoutConfig(per_capability=6))
    lines = path.read_text().splitlines()
    obj = json.loads(lines[3])
    obj["expect"]["constraints"] = [{"type": "shout"}]
    lines[3] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProbeError, match=r"heldout.jsonl:4: .*'type' must be one of lowercase"):
        read_test_rows(path)


def test_cli_writes_the_split_and_reports_the_overlap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = exit_of(
        ["synthesize", "--split", "heldout", "--heldout-rows", "12", "--out", str(tmp_path)], capsys
    )
    assert code == 0, err
    assert "8-gram overlap" in out and "PASS (bound 1%)" in out
    assert len(read_test_rows(tmp_path / "heldout.jsonl")) == 54
    assert (tmp_path / "heldout.jsonl").read_bytes() == heldout_bytes(HeldoutConfig(per_capability=12))
    one_line_error(capsys, ["synthesize", "--split", "heldout", "--roles", "10", "--out", str(tmp_path)], "--roles")
    one_line_error(capsys, ["synthesize", "--heldout-rows", "12", "--out", str(tmp_path / "x")], "--heldout-rows")
    one_line_error(capsys, ["synthesize", "--split", "heldout", "--heldout-rows", "7", "--out", str(tmp_path)], "6")


def test_cli_fails_when_the_out_folder_training_data_overlaps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training files beside the split are what it is measured against: copying its rows in fails the check."""
    write_heldout(tmp_path, HeldoutConfig(per_capability=6))
    rows = [json.loads(line) for line in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    sft = [{"conversations": [*r["question"], {"role": "assistant", "content": r["reference"]}]} for r in rows]
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft))
    (tmp_path / "dpo.jsonl").write_text("")
    code, out, _ = exit_of(["synthesize", "--split", "heldout", "--heldout-rows", "6", "--out", str(tmp_path)], capsys)
    assert code == 1 and "FAIL" in out


@pytest.mark.slow
def test_evaluate_pair_on_the_held_out_split_reports_groups_and_the_gate(
    tiny_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    from core.decoding import GenerationConfig
    from training.eval_config import PairEvalConfig
    from training.evaluate import evaluate_pair

    sft, dpo = tiny_pair
    test = write_heldout(tmp_path, HeldoutConfig(per_capability=6))
    config = PairEvalConfig(
        test,
        sft_dir=sft,
        dpo_dir=dpo,
        base_dir=sft,
        max_rows=27,
        generation=GenerationConfig(max_new_tokens=4, batch_size=27),
    )
    result = evaluate_pair(config)
    assert {g.group.split("/")[0] for g in result.groups} == {c.value for c in ALL_CAPABILITIES}
    assert all(g.rate(m)[0] is not None for g in result.groups for m in ("base", "sft", "dpo"))
    assert result.gate["holds"] is False  # random tiny models comply on nothing
    assert result.gate["line"].startswith("gate FAILS")


@pytest.mark.slow
def test_models_eval_reads_the_held_out_split_by_default(
    tiny_pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROBE_HOME", str(tmp_path))
    sft, dpo = (str(p) for p in tiny_pair)
    argv = ["models", "eval", "--sft", sft, "--dpo", dpo, "--max-rows", "5", "--max-new-tokens", "2"]
    code, out, err = exit_of(argv, capsys)
    assert code == 0, err
    assert str(tmp_path / "heldout" / "seed-0" / "heldout.jsonl") in " ".join(out.split())
    assert "gate not decided" in out and "no base model was evaluated" in out
    one_line_error(capsys, [*argv, "--split", "train"], "--split", "heldout, test")
