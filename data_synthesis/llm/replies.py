"""Validated LLM replies: JSON extraction, pydantic schemas, repair rounds, failure counts.

LLMs wrap JSON in prose or code fences, drop fields, or answer off-task. Every reply is
(1) cut down to its first JSON object, (2) validated against a pydantic model, and
(3) optionally checked by a semantic ``check`` (e.g. "the refusal really refuses").
An invalid reply is *repaired*: the conversation is sent again with the bad reply and
the exact validation error appended, asking for a corrected reply. Because that is a
new conversation it gets its own cache entry, so repairs are cached too. Whatever is
still invalid after ``repairs`` rounds is recorded in :class:`FailureLog` and reported;
nothing is dropped silently.

Example:
    >>> from pydantic import BaseModel
    >>> class Pair(BaseModel):
    ...     a: int
    >>> parse_reply('Sure! ```json\\n{"a": 3}\\n```', Pair).a
    3
    >>> parse_reply("no json here", Pair)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    data_synthesis.llm.replies.InvalidReply: no JSON object found in the reply
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from judging.client.client import LLMClient, Messages

ModelT = TypeVar("ModelT", bound=BaseModel)
Check = Callable[[Any, int], "str | None"]


class InvalidReply(Exception):
    """A reply that does not match its schema; the message is fed back in the repair prompt."""


def extract_json(text: str) -> Any:
    """The first JSON object in ``text`` (code fences and surrounding prose are ignored)."""
    decoder = json.JSONDecoder()
    for start, char in enumerate(text):
        if char != "{":
            continue
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise InvalidReply("no JSON object found in the reply")


def parse_reply(text: str, schema: type[ModelT]) -> ModelT:
    """The reply as a validated ``schema`` instance, or :class:`InvalidReply` saying what is wrong."""
    data = extract_json(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
        raise InvalidReply(f"the JSON does not match the schema ({problems})") from None


def repair_messages(messages: Messages, bad_reply: str, problem: str) -> Messages:
    """The conversation plus the bad reply and a request to fix exactly ``problem``."""
    return [
        *messages,
        {"role": "assistant", "content": bad_reply or "(empty reply)"},
        {
            "role": "user",
            "content": f"That reply is invalid: {problem}. Reply again with only the corrected JSON object, "
            "nothing else.",
        },
    ]


@dataclass
class FailureLog:
    """Replies that stayed invalid after every repair, per stage, with the last error of each."""

    counts: Counter[str] = field(default_factory=Counter)
    repaired: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, stage: str, problem: str) -> None:
        self.counts[stage] += 1
        shown = self.examples.setdefault(stage, [])
        if len(shown) < 3:
            shown.append(problem[:200])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "failed": dict(sorted(self.counts.items())),
            "repaired": dict(sorted(self.repaired.items())),
            "total_failed": self.total,
            "examples": self.examples,
        }


@dataclass
class Outcome(Generic[ModelT]):
    value: ModelT | None
    problem: str | None = None


def ask_validated(
    client: LLMClient,
    requests: Sequence[Messages],
    schema: type[ModelT],
    *,
    stage: str,
    failures: FailureLog,
    repairs: int = 2,
    check: Check | None = None,
) -> list[Outcome[ModelT]]:
    """One validated ``schema`` per request (``None`` + problem where every repair failed).

    ``check(value, index)`` returns a problem string for a reply that parses but is wrong
    in substance; it is repaired like a schema error.
    """
    outcomes: list[Outcome[ModelT]] = [Outcome(None, "not asked") for _ in requests]
    pending = list(range(len(requests)))
    conversations = [list(m) for m in requests]
    for round_ in range(repairs + 1):
        if not pending:
            break
        replies = client.chat_many([conversations[i] for i in pending])
        still: list[int] = []
        for i, reply in zip(pending, replies, strict=True):
            try:
                value = parse_reply(reply.content, schema)
                problem = check(value, i) if check is not None else None
                if problem:
                    raise InvalidReply(problem)
            except InvalidReply as exc:
                outcomes[i] = Outcome(None, str(exc))
                conversations[i] = repair_messages(conversations[i], reply.content, str(exc))
                still.append(i)
                continue
            outcomes[i] = Outcome(value)
            if round_:
                failures.repaired[stage] += 1
        pending = still
    for i in pending:
        failures.add(stage, outcomes[i].problem or "invalid reply")
    return outcomes
