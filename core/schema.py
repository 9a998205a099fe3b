"""The three RoleMRC row kinds, as plain typed records.

The published files are the schema: test rows ``{question, reference, task}``,
SFT rows ``{conversations}``, DPO rows ``{prompt, chosen, rejected}``, each turn
``{role, content}``. Roles are lowercased on read (the published test file writes
``System``/``User``/``Assistant``; chat templates only know lowercase roles). Any
other field of a row (our ``expect`` block, an ``id``) is kept in ``extra`` and
written back unchanged beside the row's own fields (:data:`core.records.MERGED`), so a
published file round-trips through :func:`core.records.to_json`.

Validation lives in :func:`validate_conversation` so that every reader, and every
synthesizer, checks conversations the same way. A test row's ``expect`` block (written by
our synthesizers, read by the rule judge) is type-checked by :func:`validate_expect` when
the row is read, so a hand-edited block fails at its file and line, not inside the judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from core.constraints import constraints_problem
from core.records import MERGED

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")


@dataclass(frozen=True)
class Turn:
    role: Role
    content: str


@dataclass
class TestRow:
    """A prompt (ending with a user turn), its reference answer, and its task name."""

    question: list[Turn]
    reference: str
    task: str
    extra: dict[str, Any] = field(default_factory=dict, metadata=MERGED)

    __test__ = False  # not a pytest class

    @property
    def expect(self) -> dict[str, Any] | None:
        """Machine-checkable expectations written by the offline synthesizer (absent in published files)."""
        return self.extra.get("expect")


@dataclass
class SFTRow:
    """A whole conversation; loss is taken on the assistant turns."""

    conversations: list[Turn]
    extra: dict[str, Any] = field(default_factory=dict, metadata=MERGED)


@dataclass
class DPORow:
    """A prompt (ending with a user turn) with a preferred and a dispreferred reply."""

    prompt: list[Turn]
    chosen: str
    rejected: str
    extra: dict[str, Any] = field(default_factory=dict, metadata=MERGED)


EXPECT_TYPES: dict[str, type] = {
    "behaviour": str,
    "answer": str,
    "answerable": bool,
    "knowledge_range": str,
    "multi_turn_type": str,
    "narration": bool,
    "gesture": str,
    "catchphrase": str,
    "requirement": dict,
    "rule": str,
    "constraints": list,
    "priority_variant": str,
    "level": int,
}
REQUIREMENT_KINDS: tuple[str, ...] = ("include_phrase", "end_with_word", "bullets", "all_caps", "lowercase", "quoted")
_REQUIREMENT_TEXT = ("value", "sentence", "description")
_TYPE_NAMES = {str: "a string", bool: "true or false", dict: "an object", list: "a list", int: "an integer"}


def validate_expect(expect: Any) -> str | None:
    """Return what is wrong with an ``expect`` block, or None.

    Every known field may be null or absent (the rule judge then leaves that capability
    undecided); when present it has the documented type (docs/data.md). Unknown fields are
    kept, as everywhere in a row.
    """
    if not isinstance(expect, dict):
        return f"expected an object, got {type(expect).__name__}"
    for name, kind in EXPECT_TYPES.items():
        value = expect.get(name)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            return f"field {name!r}: expected {_TYPE_NAMES[kind]} or null, got {type(value).__name__}"
    problem = constraints_problem(expect.get("constraints") or [])
    if problem:
        return f"field 'constraints': {problem}"
    requirement = expect.get("requirement")
    return None if requirement is None else _requirement_problem(requirement)


def _requirement_problem(requirement: dict[str, Any]) -> str | None:
    if requirement.get("kind") not in REQUIREMENT_KINDS:
        return f"field 'requirement': 'kind' must be one of {', '.join(REQUIREMENT_KINDS)}"
    for name in _REQUIREMENT_TEXT:
        value = requirement.get(name)
        if value is not None and not isinstance(value, str):
            return f"field 'requirement': {name!r} must be a string or null, got {type(value).__name__}"
    return None


def validate_conversation(turns: list[Turn], *, must_end_with: Role | None) -> str | None:
    """Return what is wrong with a conversation, or None if it is well formed.

    Rules: not empty; at most one system turn and only first; after it, user and
    assistant alternate (either may speak first, as in RoleMRC's role-first
    dialogues); no empty content; and the last turn is ``must_end_with`` if given.
    """
    if not turns:
        return "expected a non-empty list of turns"
    for i, turn in enumerate(turns):
        if turn.role == "system" and i != 0:
            return f"turn {i}: a system turn may only come first"
        if not turn.content.strip():
            return f"turn {i} ({turn.role}): content is empty"
    dialogue = turns[1:] if turns[0].role == "system" else turns
    if not dialogue:
        return "expected at least one user or assistant turn after the system turn"
    for i in range(1, len(dialogue)):
        if dialogue[i].role == dialogue[i - 1].role:
            return f"turns out of order: two {dialogue[i].role} turns in a row; user and assistant must alternate"
    if must_end_with is not None and turns[-1].role != must_end_with:
        return f"expected the last turn to be {must_end_with}, got {turns[-1].role}"
    return None
