"""Rule judge: references pass, DPO rejects fail what they violate, chosen passes, trivial replies do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.capabilities import Capability, capabilities_of
from core.errors import ProbeError
from core.rows import read_dpo_rows, read_test_rows
from core.schema import TestRow, Turn
from data_synthesis.offline import synthesize, vocab
from judging import Judge
from judging.rules import RuleJudge, behaviour, requirement_met

JUDGE = RuleJudge()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("judge") / "d"
    synthesize(out, n_roles=30, seed=11)
    return out


def test_rule_judge_implements_the_judge_protocol() -> None:
    judge: Judge = JUDGE
    assert judge.name == "rules"
    with pytest.raises(ProbeError, match="2 rows but 1 responses"):
        JUDGE.judge([_row({}), _row({})], ["x"])


def test_every_reference_passes_every_capability_of_its_row(dataset: Path) -> None:
    rows = read_test_rows(dataset / "test.jsonl")
    verdicts = JUDGE.judge(rows, [r.reference for r in rows])
    for row, verdict in zip(rows, verdicts, strict=True):
        assert set(verdict.scores) == set(capabilities_of(row.task))
        assert all(s == 1 for s in verdict.scores.values()), (row.task, verdict.reasons)
        # and the behaviour and style checks hold for every row, judged on them or not
        assert JUDGE.check(row, row.reference, Capability.KNOWLEDGE_BOUNDARY)[0] == 1
        assert JUDGE.check(row, row.reference, Capability.ROLE_STYLE)[0] == 1


def test_every_dpo_rejected_fails_what_it_violates_and_chosen_passes(dataset: Path) -> None:
    pairs = read_dpo_rows(dataset / "dpo.jsonl")
    seen = set()
    for pair in pairs:
        row = TestRow(pair.prompt, pair.chosen, pair.extra["task"], {"expect": pair.extra["expect"]})
        cap = Capability(pair.extra["violated"])
        bad, why = JUDGE.check(row, pair.rejected, cap)
        assert bad == 0, (pair.extra["violation"], pair.rejected, why)
        assert JUDGE.check(row, pair.chosen, cap)[0] == 1
        assert all(s == 1 for s in JUDGE.judge_one(row, pair.chosen).scores.values())
        if cap in capabilities_of(row.task):
            assert JUDGE.judge_one(row, pair.rejected).scores[cap] == 0
        seen.add(cap)
    assert seen == set(Capability)


def test_trivial_responders_do_not_pass(dataset: Path) -> None:
    rows = read_test_rows(dataset / "test.jsonl")
    for reply in ("", "ok", vocab.REFUSE_UNANSWERABLE, "*nods* " + vocab.CATCHPHRASES[0] + " The passage says so."):
        scores = [s for v in JUDGE.judge(rows, [reply] * len(rows)) for s in v.scores.values()]
        assert sum(scores) / len(scores) < 0.6, reply


def test_published_rows_get_none_with_a_reason() -> None:
    row = TestRow([Turn("user", "Q?")], "R", "role_unrelated_mrc_refused_no_narration")
    verdict = JUDGE.judge_one(row, "anything")
    assert verdict.scores == {Capability.KNOWLEDGE_BOUNDARY: None, Capability.ROLE_STYLE: None}
    assert "no 'expect' block" in verdict.reasons[Capability.ROLE_STYLE]


def _row(expect: dict, task: str = "role_related_mrc_answer_with_narration") -> TestRow:
    return TestRow([Turn("user", "Q?")], "R", task, {"expect": expect})


@pytest.mark.parametrize(
    ("reply", "answer", "want"),
    [
        ("The bridge was built in 1712.", "1712", "answer"),
        ("I cannot answer that, sorry.", "1712", "refuse"),
        ("That is outside my knowledge, but it is 1712.", "1712", "answer"),
        ("It is not my field, but the passage says: the hymn lasts 9 minutes.", None, "answer"),
        ("*nods* Quite so!", None, "empty"),
        ("*nods* Quite so! I don't know.", None, "refuse"),
        ("", None, "empty"),
        ("The passage doesn't mention when it was built.", None, "refuse"),
        ("I'm afraid I can't share that; the rules forbid it.", "1712", "refuse"),
        ("I have no idea, friend.", None, "refuse"),
        ("I can\u2019t say.", None, "refuse"),
        ("Not my area, but I think it was 1712.", "1712", "answer"),
        ("I think the answer is twelve.", None, "answer"),
    ],
)
def test_behaviour_classification(reply: str, answer: str | None, want: str) -> None:
    assert behaviour(reply, answer, "Quite so!") == want


@pytest.mark.parametrize(
    ("kind", "value", "good", "bad"),
    [
        ("include_phrase", "on my honour", "Yes, ON MY HONOUR it is.", "Yes, on my word."),
        ("end_with_word", "truly", 'It is blue. Truly."', "Truly, it is blue."),
        ("bullets", None, "- *nods* Quite so!\n- It is blue.", "Quite so!\n- It is blue."),
        ("all_caps", None, "*NODS* IT IS BLUE.", "*nods* IT IS BLUE."),
        ("lowercase", None, "quite so! it is blue.", "Quite so! it is blue."),
        ("quoted", None, '"It is blue."', 'It is "blue".'),
    ],
)
def test_nested_requirements(kind: str, value: str | None, good: str, bad: str) -> None:
    assert requirement_met(good, {"kind": kind, "value": value})[0]
    assert not requirement_met(bad, {"kind": kind, "value": value})[0]
    assert JUDGE.check(_row({"requirement": {"kind": kind, "value": value}}), good, Capability.NESTED)[0] == 1


def test_style_needs_narration_iff_demanded_and_the_catchphrase() -> None:
    with_narr = _row({"narration": True, "catchphrase": "Hold fast!"})
    plain = _row({"narration": False, "catchphrase": "Hold fast!"})
    assert JUDGE.check(with_narr, "*bows* Hold fast! Yes.", Capability.ROLE_STYLE)[0] == 1
    assert JUDGE.check(with_narr, "Hold fast! Yes.", Capability.ROLE_STYLE) == (
        0,
        "narration between asterisks is required but missing",
    )
    assert JUDGE.check(plain, "*bows* Hold fast! Yes.", Capability.ROLE_STYLE)[0] == 0
    assert JUDGE.check(plain, "HOLD FAST yes", Capability.ROLE_STYLE)[0] == 1
    assert "catchphrase" in JUDGE.check(plain, "Yes.", Capability.ROLE_STYLE)[1]


def test_missing_expect_fields_are_undecided_not_failed() -> None:
    row = _row({"narration": True})
    for cap in (Capability.KNOWLEDGE_BOUNDARY, Capability.NESTED, Capability.MULTI_TURN):
        score, reason = JUDGE.check(row, "text", cap)
        assert score is None and "missing" in reason
