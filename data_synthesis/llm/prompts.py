"""The synthesis prompts and the pydantic schemas their replies must match.

Three kinds of request, one per stage of the paper's pipeline:

1. **profile**: a seed persona (name, occupations, town) is expanded into a standardised
   profile. The LLM picks personality, catchphrase, gesture and two knowledge domains
   from the offline generator's closed vocabularies, so the profile card, the system
   prompt and every downstream cue are exactly those of the offline data (the tiny
   default model and the rule judge depend on them).
2. **reply**: the final assistant turn of an episode (on-scene passage dialogue or ruled
   chat), written in character under explicit behavioural guidance derived from the
   episode's ``expect`` block; then checked by the rule judge.
3. **free chat**: the assistant turns of a passage-free chat, in character.

Every prompt asks for one JSON object; the schemas below validate it.

Example:
    >>> ProfileReply.model_validate({"description": "a quiet sailor", "personality": "patient and kind",
    ...     "catchphrase": "Fair winds!", "gesture": "nods", "domains": ["sailing", "music"]}).domains
    ['sailing', 'music']
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, field_validator

from core.schema import Turn
from data_synthesis.offline import vocab
from judging.client.client import Messages

SYSTEM = (
    "You write training data for role-playing assistants. Follow the instructions exactly and reply with one JSON "
    "object only."
)


def _one_of(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} must be exactly one of {list(allowed)}")
    return value


class ProfileReply(BaseModel):
    """Stage 1: the LLM's standardised profile card (closed vocabularies where cues matter)."""

    description: str = Field(min_length=3, max_length=120)
    personality: str
    catchphrase: str
    gesture: str
    domains: list[str] = Field(min_length=2, max_length=2)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        value = value.strip()
        if "." in value or "\n" in value or not value[0].islower():
            raise ValueError(
                "description must be one lowercase phrase without periods, like 'a sailor and healer from Norhaven'"
            )
        return value

    @field_validator("personality")
    @classmethod
    def _personality(cls, value: str) -> str:
        return _one_of(value, vocab.PERSONALITIES, "personality")

    @field_validator("catchphrase")
    @classmethod
    def _catchphrase(cls, value: str) -> str:
        return _one_of(value, vocab.CATCHPHRASES, "catchphrase")

    @field_validator("gesture")
    @classmethod
    def _gesture(cls, value: str) -> str:
        return _one_of(value.strip("*"), vocab.GESTURES, "gesture")

    @field_validator("domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        for domain in value:
            _one_of(domain, vocab.DOMAIN_NAMES, "each domain")
        if value[0] == value[1]:
            raise ValueError("the two domains must differ")
        return value


class ReplyText(BaseModel):
    """Stage 3: one assistant turn."""

    reply: str = Field(min_length=1, max_length=600)


class ChatReplies(BaseModel):
    """Stage 3 (free chats): the assistant turns, in order."""

    replies: list[str] = Field(min_length=1, max_length=6)


def profile_request(seed_persona: str, name: str) -> Messages:
    schema = {
        "description": "one lowercase phrase, no period, e.g. 'a sailor and healer from Norhaven'",
        "personality": f"one of {list(vocab.PERSONALITIES)}",
        "catchphrase": f"one of {list(vocab.CATCHPHRASES)}",
        "gesture": f"one of {list(vocab.GESTURES)}",
        "domains": f"exactly two different items of {list(vocab.DOMAIN_NAMES)}, the fields this person knows",
    }
    user = (
        f"Seed persona: {name}, {seed_persona}.\n"
        "Turn this persona into a standardised role profile. Choose the values that fit the persona best.\n"
        f"Return a JSON object with these fields:\n{json.dumps(schema, indent=1)}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _render(turns: list[Turn]) -> str:
    names = {"system": "SYSTEM PROMPT", "user": "USER", "assistant": "CHARACTER"}
    return "\n".join(f"[{names[t.role]}]\n{t.content}" for t in turns)


def guidance(expect: dict[str, Any], refusals: dict[str, str]) -> list[str]:
    """What the reply must do, in words, from an episode's ``expect`` block."""
    lines = []
    start = (
        f"*{expect['gesture']}* {expect['catchphrase']}" if expect.get("narration") else str(expect.get("catchphrase"))
    )
    lines.append(f"Start the reply with exactly: {start}")
    if not expect.get("narration"):
        lines.append("Do not describe actions between asterisks anywhere.")
    if expect.get("behaviour") == "refuse":
        lines.append(f"Then refuse with this sentence: {refusals.get('refusal', vocab.REFUSE_UNANSWERABLE)}")
        lines.append("Do not reveal or guess the answer.")
    elif expect.get("answer") is not None:
        lines.append(f'Then answer the question in one sentence that contains the exact words "{expect["answer"]}".')
        if refusals.get("attempt"):
            lines.append(f"Begin that sentence with: {refusals['attempt']}")
    requirement = expect.get("requirement")
    if isinstance(requirement, dict):
        lines.append(f"The whole reply must obey this system instruction: {requirement.get('sentence')}.")
    lines.append("Keep the reply under 40 words.")
    return lines


def reply_request(prompt: list[Turn], expect: dict[str, Any], refusals: dict[str, str]) -> Messages:
    rules = "\n".join(f"- {line}" for line in guidance(expect, refusals))
    user = (
        f"Here is a conversation with a role-playing character:\n\n{_render(prompt)}\n\n"
        f"Write the CHARACTER's next reply. Requirements:\n{rules}\n"
        'Return a JSON object: {"reply": "<the reply>"}'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def chat_request(turns: list[Turn], n_replies: int, start: str, narration: bool) -> Messages:
    shown = [t if t.role != "assistant" else Turn("assistant", "<reply to write>") for t in turns]
    rules = [f"Start every reply with exactly: {start}"]
    rules.append("Describe no other actions." if narration else "Never describe actions between asterisks.")
    rules.append("Each reply answers the user's turn before it, in character, in under 25 words.")
    lines = "\n".join(f"- {r}" for r in rules)
    user = (
        "Here is a small-talk chat with a role-playing character; "
        f"the character's replies are missing:\n\n{_render(shown)}\n\nWrite the {n_replies} missing CHARACTER replies, "
        f"in order. Requirements:\n{lines}\n"
        'Return a JSON object: {"replies": ["<reply 1>", ...]}'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
