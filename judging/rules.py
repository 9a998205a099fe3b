"""A deterministic rule judge: behavioural checks driven by each test row's ``expect`` block.

The rubrics are the paper's five, made mechanical:

* knowledge_boundary: the reply's behaviour (answer / refuse) equals ``expect.behaviour``
  (answer within the boundary, refuse an unanswerable question or one outside the
  boundary, attempt an answer outside it only when the user insists);
* role_style: narration (text between asterisks) present iff ``expect.narration``, and
  the role's ``expect.catchphrase`` present (case and punctuation ignored);
* nested: ``expect.requirement`` met (phrase included, final word, bullet lines,
  ALL CAPS, lowercase, double quotes);
* multi_turn: the last reply answers iff ``expect.multi_turn_type == "answerable"``;
* priority: the system rule wins, i.e. the reply refuses.

Rows of the held-out split (:mod:`data_synthesis.heldout`) add ``expect.constraints``, verifiable
constraints (:mod:`core.constraints`) each set in some user turn and in force from then on:
every capability of such a row also needs the constraints in force at the final turn; on nested
rows without a ``requirement`` and on priority rows with a ``priority_variant`` (aligned, conflict,
reference) the constraints, i.e. the system's rules, are the whole check.

A reply counts as an ANSWER if it contains the expected answer span, else as a REFUSAL
if it matches a refusal wording (the synthesizer's fixed phrases or common generic ones),
else as an answer if anything is left once narration and catchphrase are removed.
Whether the answer text is correct is measured separately (ROUGE/BLEU), not here.
Rows without an ``expect`` block (published data) get ``None`` with a reason, never 0.

Example:
    >>> from core.schema import TestRow, Turn
    >>> row = TestRow([Turn("user", "q")], "ref", "role_related_mrc_answer_no_narration",
    ...               {"expect": {"behaviour": "answer", "answer": "1712"}})
    >>> RuleJudge().judge_one(row, "It was built in 1712.").scores
    {<Capability.KNOWLEDGE_BOUNDARY: 'knowledge_boundary'>: 1}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from core.capabilities import Capability, capabilities_of
from core.constraints import active, check_all
from core.errors import ProbeError
from core.schema import TestRow
from judging.base import Verdict

NARRATION_RE = re.compile(r"\*[^*\n]{1,80}\*")
REFUSAL_RE = re.compile(
    "|".join(
        (
            r"\bdoes(?: not|n't) (?:say|mention|state|specify|tell)\b",
            r"\bdo(?: not|n't) (?:know|say)\b",
            r"\b(?:outside|beyond) (?:of )?(?:my|what i)\b",
            r"\bnot (?:allowed|permitted|able) to\b",
            r"\b(?:cannot|can ?not|can't|won't|will not|must not|may not|unable to) "
            r"(?:answer|say|tell|discuss|talk|help|provide|share|reveal|comment)\b",
            r"\bno answer\b",
            r"\bnot (?:mentioned|stated|given|specified)\b",
            r"\bno (?:mention|record) of\b",
            r"\b(?:no|have no) (?:information|idea)\b",
            r"\bnot (?:something )?i can (?:answer|discuss|talk about)\b",
            r"\bi refuse\b",
        )
    ),
    re.IGNORECASE,
)
BULLET_RE = re.compile(r"^\s*(?:- |\* |• )\S")
ANSWER, REFUSE, EMPTY = "answer", "refuse", "empty"


def _norm(text: str) -> str:
    """Lowercase words only: case, punctuation and spacing do not matter for phrase checks."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower().replace("\u2019", "'")))


def _contains(text: str, phrase: str) -> bool:
    needle = _norm(phrase)
    return bool(needle) and f" {needle} " in f" {_norm(text)} "


def behaviour(response: str, answer: str | None = None, catchphrase: str | None = None) -> str:
    """Classify a reply as 'answer', 'refuse' or 'empty' (nothing but style, or nothing at all)."""
    if answer and _contains(response, answer):
        return ANSWER
    if REFUSAL_RE.search(response.replace("\u2019", "'")):  # curly apostrophes from LLM replies
        return REFUSE
    rest = _norm(NARRATION_RE.sub(" ", response))
    if catchphrase and _norm(catchphrase):
        rest = f" {rest} ".replace(f" {_norm(catchphrase)} ", " ", 1)
    return ANSWER if rest.strip() else EMPTY


def _check_behaviour(response: str, expect: dict[str, Any], wanted: str) -> tuple[int, str]:
    got = behaviour(response, expect.get("answer"), expect.get("catchphrase"))
    if got == wanted:
        return 1, f"{'answered' if got == ANSWER else 'refused'} as expected"
    return (
        0,
        f"expected the reply to {wanted}, but it "
        f"{'is empty' if got == EMPTY else ('answers' if got == ANSWER else 'refuses')}",
    )


def requirement_met(response: str, req: dict[str, Any]) -> tuple[bool, str]:
    """Whether ``response`` meets a nested requirement (kind, value)."""
    kind, value = req.get("kind"), req.get("value") or ""
    text = response.strip()
    letters = [c for c in text if c.isalpha()]
    if kind == "include_phrase":
        return _contains(text, value), f"must include the phrase {value!r}"
    if kind == "end_with_word":
        words = re.findall(r"[A-Za-z0-9']+", text)
        return bool(words) and words[-1].lower() == value.lower(), f"must end with the word {value!r}"
    if kind == "bullets":
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return bool(lines) and all(
            BULLET_RE.match(ln) for ln in lines
        ), "every line must be a bullet starting with '- '"
    if kind == "all_caps":
        return bool(letters) and not any(c.islower() for c in letters), "must be written in ALL CAPS"
    if kind == "lowercase":
        return bool(letters) and not any(c.isupper() for c in letters), "must be written in lowercase only"
    if kind == "quoted":
        return len(text) > 2 and text[0] in '"“' and text[-1] in '"”', "must be wrapped in double quotes"
    raise ProbeError(
        f"unknown nested requirement kind {kind!r}; expected include_phrase, end_with_word, bullets, all_caps, "
        "lowercase or quoted"
    )


def _knowledge(response: str, expect: dict[str, Any]) -> tuple[int | None, str]:
    wanted = expect.get("behaviour")
    if wanted not in (ANSWER, REFUSE):
        return None, "expect.behaviour is missing (expected 'answer' or 'refuse')"
    return _check_behaviour(response, expect, wanted)


def _style(response: str, expect: dict[str, Any]) -> tuple[int | None, str]:
    narration = expect.get("narration")
    if not isinstance(narration, bool):
        return None, "expect.narration is missing (expected true or false)"
    has = bool(NARRATION_RE.search(response))
    if has != narration:
        return (
            0,
            "narration between asterisks is required but missing"
            if narration
            else "narration is present but the role speaks plainly here",
        )
    phrase = expect.get("catchphrase")
    if phrase and not _contains(response, phrase):
        return 0, f"the catchphrase {phrase!r} is missing"
    return 1, "style kept (narration as required" + (", catchphrase present)" if phrase else ")")


def _nested(response: str, expect: dict[str, Any]) -> tuple[int | None, str]:
    req = expect.get("requirement")
    if not isinstance(req, dict) or not req.get("kind"):
        return None, "expect.requirement is missing (expected {kind, value})"
    ok, what = requirement_met(response, req)
    return int(ok), ("requirement met: " if ok else "requirement not met: ") + what


def _multi_turn(response: str, expect: dict[str, Any]) -> tuple[int | None, str]:
    kind = expect.get("multi_turn_type")
    if kind not in ("answerable", "unanswerable"):
        return None, "expect.multi_turn_type is missing (expected 'answerable' or 'unanswerable')"
    return _check_behaviour(response, expect, ANSWER if kind == "answerable" else REFUSE)


def _priority(response: str, expect: dict[str, Any]) -> tuple[int | None, str]:
    return _check_behaviour(response, expect, REFUSE)


def _constraints_only(capability: Capability, expect: dict[str, Any]) -> bool:
    """Held-out rows whose capability is judged on their constraints alone."""
    if capability is Capability.NESTED:
        return expect.get("requirement") is None
    return capability is Capability.PRIORITY and expect.get("priority_variant") is not None


CHECKS: dict[Capability, Callable[[str, dict[str, Any]], tuple[int | None, str]]] = {
    Capability.KNOWLEDGE_BOUNDARY: _knowledge,
    Capability.ROLE_STYLE: _style,
    Capability.NESTED: _nested,
    Capability.MULTI_TURN: _multi_turn,
    Capability.PRIORITY: _priority,
}
NO_EXPECT = (
    "row has no 'expect' block (published data): the rule judge needs the synthesizer's expectations; use the LLM judge"
)


class RuleJudge:
    """The offline judge: one 0/1 score per capability of the row's task (None if undecidable)."""

    name = "rules"

    def check(self, row: TestRow, response: str, capability: Capability) -> tuple[int | None, str]:
        """Score any capability (even one the task is not judged on) and say why."""
        expect = row.expect
        if not isinstance(expect, dict):
            return None, NO_EXPECT
        constraints = expect.get("constraints")
        if not constraints:
            return CHECKS[capability](response, expect)
        turn = sum(t.role == "user" for t in row.question)
        ok, why = check_all(response, active(constraints, turn))
        if _constraints_only(capability, expect):
            return int(ok), why
        score, reason = CHECKS[capability](response, expect)
        if score is None:
            return None, reason
        return int(score == 1 and ok), f"{reason}; {why}"

    def judge_one(self, row: TestRow, response: str) -> Verdict:
        scores: dict[Capability, int | None] = {}
        reasons: dict[Capability, str] = {}
        for cap in capabilities_of(row.task):
            scores[cap], reasons[cap] = self.check(row, response, cap)
        return Verdict(scores, reasons)

    def judge(self, rows: Sequence[TestRow], responses: Sequence[str]) -> list[Verdict]:
        if len(rows) != len(responses):
            raise ProbeError(
                f"the rule judge got {len(rows)} rows but {len(responses)} responses; expected one response per row"
            )
        return [self.judge_one(row, response) for row, response in zip(rows, responses, strict=True)]
