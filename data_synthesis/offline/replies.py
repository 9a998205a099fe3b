"""Reply templates: the role's style prefix, the behaviour's body, the nested requirement.

Every assistant reply is ``[*gesture*] <catchphrase> <body>`` with one of four bodies:
the answering passage sentence, a fixed refusal, an attempt ("It is not my field, but
the passage says: ..."), or a free-chat line. Nested requirements then transform the
whole reply (append a phrase or a final word, bullet lines, ALL CAPS, lowercase,
double quotes). Short and formulaic on purpose: the tiny default model must learn it.

Example:
    >>> req = requirement_for("end_with_word", "truly")
    >>> apply_requirement("Quite so! The river is long.", req)
    'Quite so! The river is long. Truly.'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from data_synthesis.offline import vocab
from data_synthesis.offline.profiles import RoleProfile

CONTENT_KINDS: tuple[str, ...] = ("include_phrase", "end_with_word")
FORMAT_KINDS: tuple[str, ...] = vocab.FORMATS


@dataclass(frozen=True)
class Requirement:
    """A nested system instruction the reply must satisfy (checked by the rule judge)."""

    kind: str  # include_phrase | end_with_word | bullets | all_caps | lowercase | quoted
    value: str | None  # the phrase or word, for content kinds
    sentence: str  # as written in the system prompt ("You must ...")
    description: str  # the paper-style extraction: the sentence without its lead


def requirement_for(kind: str, value: str | None = None) -> Requirement:
    if kind == "include_phrase":
        sentence = f"You must include the phrase '{value}' in every reply"
    elif kind == "end_with_word":
        sentence = f"You must end every reply with the word '{value}'"
    elif kind in vocab.FORMAT_SENTENCES:
        sentence = vocab.FORMAT_SENTENCES[kind]
    else:
        raise ValueError(f"unknown requirement kind {kind!r}")
    return Requirement(kind, value, sentence, sentence.removeprefix("You must ").strip())


def style_prefix(profile: RoleProfile, narration: bool) -> str:
    return f"*{profile.gesture}* {profile.catchphrase}" if narration else profile.catchphrase


def styled(profile: RoleProfile, narration: bool, body: str) -> str:
    return f"{style_prefix(profile, narration)} {body}"


def apply_requirement(reply: str, req: Requirement | None, *, prefix: str | None = None) -> str:
    """Transform a finished reply to meet ``req``; ``prefix`` (the style part) becomes its own bullet."""
    if req is None:
        return reply
    if req.kind == "include_phrase":
        phrase = cast(str, req.value)  # content kinds carry their phrase
        return f"{reply} {phrase[0].upper()}{phrase[1:]}."
    if req.kind == "end_with_word":
        return f"{reply} {cast(str, req.value).capitalize()}."
    if req.kind == "bullets":
        if prefix and reply.startswith(prefix + " "):
            return f"- {prefix}\n- {reply[len(prefix) + 1 :]}"
        return f"- {reply}"
    if req.kind == "all_caps":
        return reply.upper()
    if req.kind == "lowercase":
        return reply.lower()
    if req.kind == "quoted":
        return f'"{reply}"'
    raise ValueError(f"unknown requirement kind {req.kind!r}")


def attempt(sentence: str) -> str:
    return f"{vocab.ATTEMPT_PREFIX} {sentence}"
