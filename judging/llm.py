"""``LLMJudge``: the paper's LLM-as-judge protocol, made reproducible and honest.

One judge call per (row, capability of its task), as in the authors' ``llm_judge.py``:
a single user message holding a capability rubric (``rubrics/*.txt``, written for this
project) and the conversation rendered as ``System Instruction / User Query / LLM
Response`` lines. Differences from the reference code, on purpose:

* temperature defaults to 0 (the paper used 0.7, so its scores are noisy);
* the score is parsed tolerantly ("Score: 1", "1.", "**1**", "score = 0", "1/1"), and a
  reply that still cannot be read is ``None``, counted separately, never silently 0;
* the reply cache makes a re-judging pass free and an interrupted one resumable.

Example:
    >>> parse_score("**Score:** 1")
    1
    >>> parse_score("score = 0") , parse_score("1.") , parse_score("I cannot grade this") is None
    (0, 1, True)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.capabilities import Capability, capabilities_of, task_spec
from core.errors import ProbeError
from core.schema import TestRow
from judging.base import Verdict

if TYPE_CHECKING:
    from judging.client.client import ClientConfig, LLMClient

log = logging.getLogger("judging")
RUBRIC_DIR = Path(__file__).parent / "rubrics"
_LEADS = (
    "You love to",
    "You will",
    "You must",
    "You prefer to",
    "You would like to",
    "You are used to",
    "You should",
    "You are in the habit of",
)

_MARKUP = re.compile(r"[*_`#>\"']")
_LABELLED = re.compile(
    r"\b(?:final\s+)?(?:score|rating|grade|verdict)\s*(?:is|of|=|:|-)?\s*[:=]?\s*\(?([01])(?:\.0+)?\)?(?![\d.]*\d)",
    re.I,
)
_LEADING = re.compile(r"^[^\w\-]*([01])(?:\.0+)?(?:\s*/\s*1)?(?!\d|\.\d)(?:\W|$)")
_FRACTION = re.compile(r"(?<![\d.])([01])\s*/\s*1(?![\d])")
_BARE = re.compile(r"(?<![\d.\-/])([01])(?:\.0+)?(?![\d/]|\.\d)")


def parse_score(reply: str) -> int | None:
    """0 or 1 read from a judge reply; ``None`` when absent or ambiguous.

    A labelled score ("Score: 1", "rating = 0") wins; otherwise the standalone 0/1 digits
    must all agree: a reply that starts with the score ("1.", "**0**", "1 - it refuses"),
    a fraction ("1/1"), or a lone digit among words. "0 or 1", "2", "0.5" are ``None``.
    """
    text = _MARKUP.sub(" ", reply or "").strip()
    if not text:
        return None
    labelled = {int(m) for m in _LABELLED.findall(text)}
    if labelled:
        return labelled.pop() if len(labelled) == 1 else None
    fractions = {int(m) for m in _FRACTION.findall(text)}
    if fractions:
        return fractions.pop() if len(fractions) == 1 else None
    bare = {int(m) for m in _BARE.findall(text)}
    if len(bare) != 1:
        return None  # no score, or both 0 and 1 ("0 or 1")
    if _LEADING.search(text):
        return bare.pop()
    if re.search(r"\d", _BARE.sub("", text)):
        return None  # other numbers around ("2", "10", "0.5") make a lone digit unreliable
    return bare.pop()


@cache
def rubric(capability: Capability, variant: str | None = None) -> str:
    """The rubric text; knowledge boundary has within/outside and multi-turn answerable/unanswerable variants."""
    path = RUBRIC_DIR / (f"{capability.value}_{variant}.txt" if variant else f"{capability.value}.txt")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProbeError(f"{path}: rubric file missing or unreadable ({exc.strerror}); reinstall the package") from None


def render_conversation(row: TestRow, response: str) -> str:
    """The conversation in the paper's judge format; earlier assistant turns are labelled as such."""
    labels = {"system": "System Instruction", "user": "User Query", "assistant": "Assistant (earlier turn)"}
    lines = [f'{labels[t.role]}: """{t.content.strip()}"""' for t in row.question]
    lines.append(f'LLM Response: """{response.strip()}"""')
    return "\n".join(lines)


def judge_prompt(row: TestRow, response: str, capability: Capability) -> str:
    """The full judge message for one row, response and capability."""
    values = _fields(row)
    values["conversation"] = render_conversation(row, response)
    variant = {Capability.KNOWLEDGE_BOUNDARY: values["range"], Capability.MULTI_TURN: values["type"]}.get(capability)
    text = rubric(capability, variant)
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return re.sub(r"\n{3,}", "\n\n", text)


def _fields(row: TestRow) -> dict[str, str]:
    spec = task_spec(row.task)
    expect: dict[str, Any] = row.expect or {}
    rng = str(expect.get("knowledge_range") or spec.knowledge_range or "within")
    kind = str(expect.get("multi_turn_type") or spec.multi_turn_type or "answerable")
    if rng not in ("within", "outside") or kind not in ("answerable", "unanswerable"):
        raise ProbeError(
            f"row of task {row.task}: expect.knowledge_range must be within|outside and multi_turn_type "
            "answerable|unanswerable"
        )
    return {
        "range": rng,
        "type": kind,
        "task_note": _task_note(row.task),
        "style_note": _style_note(expect),
        "requirement": _requirement(row, expect),
        "rule_note": _rule_note(expect),
    }


def _task_note(task: str) -> str:
    if task.startswith("role_unrelated_mrc_answer"):
        return "In this conversation the user insists on getting an answer in any case."
    return ""


def _style_note(expect: dict[str, Any]) -> str:
    notes = []
    narration = expect.get("narration")
    if isinstance(narration, bool):
        notes.append(
            "Narration between asterisks is " + ("required" if narration else "not wanted") + " in this reply."
        )
    catchphrase = expect.get("catchphrase")
    if isinstance(catchphrase, str) and catchphrase:
        notes.append(f"The character's catchphrase is: {catchphrase!r}.")
    return " ".join(notes)


def _requirement(row: TestRow, expect: dict[str, Any]) -> str:
    for key in ("requirement", "nested_requirement", "nested", "special"):
        value = expect.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, dict):
            described = value.get("description") or value.get("text") or value.get("instruction")
            if isinstance(described, str) and described.strip():
                return described.strip()
    return _paper_requirement(row)


def _paper_requirement(row: TestRow) -> str:
    """The authors' extraction: the system prompt's 2nd sentence, its lead ("You must ...") stripped."""
    system = next((t.content for t in row.question if t.role == "system"), "")
    parts = system.split(". ")
    sentence = (parts[1] if len(parts) > 1 else system).strip()
    for lead in _LEADS:
        if sentence.startswith(lead):
            sentence = sentence[len(lead) :].strip()
            break
    return sentence.rstrip(".") or "(see the system instruction)"


def _rule_note(expect: dict[str, Any]) -> str:
    rule = expect.get("rule") or expect.get("priority_rule")
    if not isinstance(rule, str) or not rule.strip():
        return ""
    return "The rule is: " + re.sub(r"^\s*rule\s*:\s*", "", rule.strip(), flags=re.I)


class LLMJudge:
    """Judge protocol implementation backed by any OpenAI-compatible endpoint.

    ``config`` is a :class:`~judging.client.client.ClientConfig`; ``max_tokens`` caps
    the judge's reply (a score needs few tokens; raise it for reasoning models).
    """

    name = "llm"

    def __init__(self, config: ClientConfig, *, max_tokens: int = 16, client: LLMClient | None = None) -> None:
        from judging.client.client import LLMClient

        if max_tokens < 1:
            raise ProbeError(f"judge max_tokens must be at least 1, got {max_tokens}")
        self.config = config
        self.max_tokens = max_tokens
        self.client = client if client is not None else LLMClient(config)

    def judge(self, rows: Sequence[TestRow], responses: Sequence[str]) -> list[Verdict]:
        if len(rows) != len(responses):
            raise ProbeError(f"got {len(responses)} responses for {len(rows)} test rows; expected one response per row")
        jobs = [(i, cap) for i, row in enumerate(rows) for cap in capabilities_of(row.task)]
        prompts = [[{"role": "user", "content": judge_prompt(rows[i], responses[i], cap)}] for i, cap in jobs]
        replies = self.client.chat_many(prompts, max_tokens=self.max_tokens)
        scores: list[dict[Capability, int | None]] = [{} for _ in rows]
        reasons: list[dict[Capability, str]] = [{} for _ in rows]
        for (i, cap), reply in zip(jobs, replies, strict=True):
            score = parse_score(reply.content)
            scores[i][cap] = score
            shown = " ".join(reply.content.split())[:120]
            reasons[i][cap] = f"judge replied {shown!r}" if score is not None else f"unparseable judge reply {shown!r}"
        undecided = sum(1 for s in scores for v in s.values() if v is None)
        if undecided:
            log.warning(
                "LLM judge: %d of %d replies could not be parsed as 0/1; they are undecided (None), not 0",
                undecided,
                len(jobs),
            )
        return [Verdict(s, r) for s, r in zip(scores, reasons, strict=True)]

    def judge_one(self, row: TestRow, response: str) -> Verdict:
        return self.judge([row], [response])[0]
