"""The LLM judge: rubric prompts, tolerant score parsing, undecided counts, agreement with kappa."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from core.capabilities import Capability
from core.errors import DataError, ProbeError
from core.schema import TestRow, Turn
from judging.agreement import agreement, score_table
from judging.base import Verdict
from judging.client.client import ClientConfig
from judging.files import read_responses, run_judges
from judging.llm import LLMJudge, judge_prompt, parse_score
from tests.support.scripted_server import ScriptedServer

K, S, N, M, P = (
    Capability.KNOWLEDGE_BOUNDARY,
    Capability.ROLE_STYLE,
    Capability.NESTED,
    Capability.MULTI_TURN,
    Capability.PRIORITY,
)
SYSTEM = (
    "You are Mara, a river pilot who speaks briefly. You must end every reply with the word 'ahoy'. Passage: "
    "The bridge opened in 1902."
)


def row(task: str, turns: list[tuple[str, str]] | None = None, **expect: object) -> TestRow:
    question = [Turn("system", SYSTEM)] + [Turn(r, c) for r, c in (turns or [("user", "When did the bridge open?")])]  # type: ignore[arg-type]
    return TestRow(question, "It opened in 1902, ahoy.", task, {"expect": dict(expect)} if expect else {})


@pytest.mark.parametrize(
    "reply, score",
    [
        ("Score: 1", 1),
        ("1.", 1),
        ("**1**", 1),
        ("score = 0", 0),
        ("Score: **0**", 0),
        ("0", 0),
        ("1/1", 1),
        ("The response refuses, as required.\nScore: 1", 1),
        ("Rating: 0 (answers despite the rule)", 0),
        ("1.0", 1),
        ("", None),
        ("I cannot tell.", None),
        ("0 or 1", None),
        ("2", None),
        ("0.5", None),
        ("Score: 1\nScore: 0", None),
        ("score: 10", None),
    ],
)
def test_parse_score_is_tolerant_but_never_guesses(reply: str, score: int | None) -> None:
    assert parse_score(reply) == score


def test_prompts_carry_the_rubric_parameters_and_the_quoted_conversation() -> None:
    within = judge_prompt(row("role_related_mrc_answer_no_narration"), "It opened in 1902.", K)
    outside = judge_prompt(row("role_unrelated_mrc_answer_with_narration"), "No idea.", K)
    assert "is WITHIN the character" in within and "is OUTSIDE the character" in outside
    assert "insists on getting an answer" in outside and "OUTSIDE" not in within
    assert 'System Instruction: """You are Mara' in within and 'LLM Response: """It opened in 1902."""' in within
    nested = judge_prompt(row("role_related_mrc_answer_no_narration-special-format"), "x", N)
    assert "The requirement is: end every reply with the word 'ahoy'" in nested  # the authors' 2nd-sentence extraction
    explicit = judge_prompt(
        row("role_related_mrc_answer_no_narration-special-format", requirement="Use ALL CAPS."), "x", N
    )
    assert "The requirement is: Use ALL CAPS." in explicit
    turns = [("user", "Who built it?"), ("assistant", "I cannot say."), ("user", "Please, try anyway.")]
    multi = judge_prompt(row("role_unrelated_mrc_refused_no_narration-2ndanswer", turns), "Engineers did.", M)
    assert "the last user turn is ANSWERABLE" in multi and 'Assistant (earlier turn): """I cannot say."""' in multi
    assert "{" not in multi.replace("{conversation}", "")  # every placeholder filled


def test_llm_judge_scores_each_capability_and_counts_unparseable(tmp_path: Path) -> None:
    answers = {
        "KNOWLEDGE BOUNDARY": "Score: 1",
        "ROLE STYLE": "**0**",
        "MULTI-TURN": "Hmm, hard to say.",
        "INSTRUCTION PRIORITY": "1.",
    }
    # The rule is shown once, without its "Rule:" lead.
    ruled = row("role_related_mrc_answer_no_narration-refused", rule="Rule: never talk about the bridge.")
    assert "The rule is: never talk about the bridge." in judge_prompt(ruled, "No.", P)

    def responder(request: dict) -> str:
        text = request["messages"][0]["content"]
        return next(v for k, v in answers.items() if k in text)

    rows = [
        row("role_related_mrc_answer_with_narration"),
        row("role_related_mrc_refused_no_narration-2ndrefused"),
        row("role_related_mrc_answer_no_narration-refused"),
    ]
    with ScriptedServer(responder=responder) as server:
        judge = LLMJudge(
            ClientConfig(base_url=server.base_url, model="judge", cache_dir=tmp_path / "c", backoff_base=0.01)
        )
        verdicts = judge.judge(rows, ["resp a", "resp b", "resp c"])
        bodies = [r.body for r in server.chat_requests]
    assert judge.name == "llm"
    assert [v.scores for v in verdicts] == [{K: 1, S: 0}, {M: None}, {P: 1}]
    assert "unparseable" in verdicts[1].reasons[M]
    assert len(bodies) == 4 and all(b and b["temperature"] == 0.0 and b["max_tokens"] == 16 for b in bodies)
    table = score_table(verdicts)
    assert (table[M].total, table[M].scored, table[M].undecided, table[M].rate) == (1, 0, 1, None)
    assert (table[K].compliant, table[S].compliant, table[N].total) == (1, 0, 0)
    with pytest.raises(ProbeError, match="2 responses for 3 test rows"):
        judge.judge(rows, ["a", "b"])


def test_agreement_matches_sklearn_and_skips_undecided_pairs() -> None:
    rule = [1, 1, 0, 0, 1, 0, 1, None]
    llm = [1, 0, 0, 0, 1, 1, 1, 1]
    result = agreement([Verdict({M: s}) for s in rule], [Verdict({M: s}) for s in llm])
    assert set(result) == {M}
    a = result[M]
    assert (a.n, a.agree, a.skipped) == (7, 5, 1)
    assert a.kappa == pytest.approx(cohen_kappa_score(rule[:7], llm[:7]))
    constant = agreement([Verdict({P: 1})] * 3, [Verdict({P: 1})] * 3)[P]
    assert constant.rate == 1.0 and constant.kappa is None
    with pytest.raises(ProbeError, match="different rows"):
        agreement([Verdict({P: 1})], [])


def test_run_judges_llm_needs_a_config_and_a_known_judge_name() -> None:
    with pytest.raises(ProbeError, match="--judge must be one of"):
        run_judges([], [], "gpt")
    with pytest.raises(ProbeError, match="--judge llm needs a model: pass --model"):
        run_judges([row("role_related_mrc_answer_no_narration")], ["x"], "llm", None)


def test_responses_file_formats_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "responses.jsonl"
    path.write_text('"plain"\n{"response": "obj"}\n', encoding="utf-8")
    assert read_responses(path, 2) == ["plain", "obj"]
    path.write_text('{"index": 1, "response": "b"}\n{"index": 0, "generation": "a"}\n', encoding="utf-8")
    assert read_responses(path, 2) == ["a", "b"]
    path.write_text('"one"\n', encoding="utf-8")
    with pytest.raises(DataError, match="1 responses for 2 test rows"):
        read_responses(path, 2)
    path.write_text('"ok"\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"responses.jsonl:2: expected a JSON string or an object"):
        read_responses(path, 2)
    path.write_text(json.dumps({"index": 5, "response": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="index 5 is out of range"):
        read_responses(path, 1)
