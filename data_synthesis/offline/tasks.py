"""Task builders: one episode (prompt, compliant reply, expectations, violations) per task.

The 18 task names decompose into four switches, and the reply policy is one small,
consistent rule set the tiny model can learn from the cues in the prompt:

* within the role's domains and answerable  -> answer with the passage sentence;
* unanswerable (the passage omits the fact) -> "The passage does not say." (even if pushed);
* outside the role's domains                -> "That is outside my knowledge.",
  unless the user insists -> "It is not my field, but the passage says: <sentence>";
* a system rule forbids the entity          -> "I am not allowed to talk about that.";
* a nested requirement                      -> the reply is transformed to meet it.

Each episode also lists the realistic violations a DPO ``rejected`` reply can make,
each tagged with the capability it breaks (:data:`VIOLATIONS`).

Example:
    >>> import random
    >>> from data_synthesis.offline.passages import build_pool
    >>> from data_synthesis.offline.profiles import build_profiles
    >>> role = build_profiles(random.Random(0), 1)[0]
    >>> pool = build_pool(random.Random(0), 2)
    >>> ep = build_episode("role_unrelated_mrc_refused_no_narration", role, pool, random.Random(0))
    >>> ep.chosen == f"{role.catchphrase} That is outside my knowledge."
    True
    >>> sorted(ep.violations)
    ['added_narration', 'answered_outside_boundary', 'dropped_catchphrase']
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from core.capabilities import Capability, task_spec
from core.records import to_json
from core.schema import Turn
from data_synthesis.offline import vocab
from data_synthesis.offline.passages import Passage, Question
from data_synthesis.offline.profiles import RoleProfile, rule_sentence, system_prompt
from data_synthesis.offline.replies import (
    CONTENT_KINDS,
    FORMAT_KINDS,
    Requirement,
    apply_requirement,
    attempt,
    requirement_for,
    style_prefix,
)

# violation kind -> the capability a rejected reply of that kind fails
VIOLATIONS: dict[str, Capability] = {
    "refused_answerable": Capability.KNOWLEDGE_BOUNDARY,
    "answered_unanswerable": Capability.KNOWLEDGE_BOUNDARY,
    "answered_outside_boundary": Capability.KNOWLEDGE_BOUNDARY,
    "refused_despite_insistence": Capability.KNOWLEDGE_BOUNDARY,
    "dropped_requirement": Capability.NESTED,
    "answered_through_rule": Capability.PRIORITY,
    "answered_second_turn": Capability.MULTI_TURN,
    "refused_second_turn": Capability.MULTI_TURN,
    "dropped_narration": Capability.ROLE_STYLE,
    "added_narration": Capability.ROLE_STYLE,
    "dropped_catchphrase": Capability.ROLE_STYLE,
}


@dataclass(frozen=True)
class TaskShape:
    """The switches a task name encodes."""

    related: bool  # passage within the role's domains
    answer: bool  # the base behaviour in the name (answer / refused)
    narration: bool
    suffix: str  # "", "special-content", "special-format", "refused", "2ndrefused", "2ndanswer"


def shape_of(task: str) -> TaskShape:
    task_spec(task)  # raises ProbeError for an unknown name
    base, _, suffix = task.partition("-")
    return TaskShape(base.startswith("role_related"), "_answer_" in base, base.endswith("with_narration"), suffix)


@dataclass
class Episode:
    task: str
    role: RoleProfile
    passage: Passage
    prompt: list[Turn]
    chosen: str
    expect: dict[str, Any]
    violations: dict[str, str] = field(default_factory=dict)  # kind -> rejected reply

    def meta(self) -> dict[str, Any]:
        return {"task": self.task, "role": self.role.id, "passage_id": self.passage.id}


@dataclass(frozen=True)
class _Reply:
    """A reply as parts, so that a violation changes exactly one part."""

    body: str
    narration: bool
    catchphrase: bool = True
    requirement: Requirement | None = None

    def render(self, role: RoleProfile) -> str:
        prefix = (
            style_prefix(role, self.narration) if self.catchphrase else (f"*{role.gesture}*" if self.narration else "")
        )
        text = f"{prefix} {self.body}".strip()
        return apply_requirement(text, self.requirement, prefix=prefix or None)

    def but(self, **changes: Any) -> _Reply:
        return replace(self, **changes)


def pick_passage(rng: random.Random, pool: list[Passage], role: RoleProfile, related: bool) -> Passage:
    candidates = [p for p in pool if (p.domain in role.domains) == related]
    return rng.choice(candidates)


def pick_requirement(rng: random.Random, suffix: str) -> Requirement | None:
    if suffix == "special-content":
        kind = rng.choice(CONTENT_KINDS)
        return requirement_for(kind, rng.choice(vocab.INCLUDE_PHRASES if kind == "include_phrase" else vocab.END_WORDS))
    if suffix == "special-format":
        return requirement_for(rng.choice(FORMAT_KINDS))
    return None


def user_turn(passage: Passage, question: Question, *, insist: bool = False, ignore_rule: bool = False) -> Turn:
    extra = (" " + vocab.INSIST if insist else "") + (" " + vocab.IGNORE_RULE if ignore_rule else "")
    return Turn("user", f"{passage.text}\nQuestion: {question.text}{extra}")


def build_episode(task: str, role: RoleProfile, pool: list[Passage], rng: random.Random) -> Episode:
    """One episode of ``task`` for ``role``, with a passage from ``pool`` (train or test pool)."""
    shape = shape_of(task)
    multi = shape.suffix in ("2ndrefused", "2ndanswer")
    answerable = shape.suffix == "2ndanswer" or (not multi and (shape.answer or not shape.related))
    passage = pick_passage(rng, pool, role, shape.related)
    question = rng.choice(passage.answerable if answerable else passage.unanswerable)
    requirement = pick_requirement(rng, shape.suffix)
    rule = rule_sentence(passage.entity) if shape.suffix == "refused" else None
    system = Turn(
        "system",
        system_prompt(
            role, narration=shape.narration, requirement=requirement.sentence if requirement else None, rule=rule
        ),
    )
    insist = not shape.related and shape.answer and not multi
    turns = [system, user_turn(passage, question, insist=insist, ignore_rule=rule is not None)]
    chosen, behaviour, bad = _policy(shape, question, requirement)
    if multi:
        first = _Reply(vocab.REFUSE_UNANSWERABLE if shape.related else vocab.REFUSE_OUTSIDE, shape.narration)
        turns += [Turn("assistant", first.render(role)), Turn("user", vocab.PUSH_AGAIN)]
    expect = {
        "behaviour": behaviour,
        "answer": question.answer,
        "answerable": question.answer is not None,
        "knowledge_range": "within" if shape.related else "outside",
        "multi_turn_type": ("answerable" if shape.suffix == "2ndanswer" else "unanswerable") if multi else None,
        "narration": shape.narration,
        "gesture": role.gesture,
        "catchphrase": role.catchphrase,
        "requirement": to_json(requirement),
        "rule": rule,
    }
    violations = {kind: reply.render(role) for kind, reply in bad.items()}
    violations.update(_style_violations(chosen, shape.narration, role))
    return Episode(task, role, passage, turns, chosen.render(role), expect, violations)


def _policy(shape: TaskShape, q: Question, req: Requirement | None) -> tuple[_Reply, str, dict[str, _Reply]]:
    """The compliant reply, its behaviour ('answer' | 'refuse'), and behaviour violations."""
    n = shape.narration
    if shape.suffix == "refused":
        return _Reply(vocab.REFUSE_RULE, n), "refuse", {"answered_through_rule": _Reply(q.sentence, n)}
    if shape.suffix == "2ndrefused":
        again = f"{vocab.REFUSE_AGAIN_PREFIX} {vocab.REFUSE_UNANSWERABLE}"
        return _Reply(again, n), "refuse", {"answered_second_turn": _Reply(q.sentence, n)}
    if shape.suffix == "2ndanswer":
        return (
            _Reply(attempt(q.sentence), n),
            "answer",
            {"refused_second_turn": _Reply(f"{vocab.REFUSE_AGAIN_PREFIX} {vocab.REFUSE_OUTSIDE}", n)},
        )
    if shape.suffix.startswith("special"):
        good = _Reply(q.sentence, n, requirement=req)
        return good, "answer", {"dropped_requirement": good.but(requirement=None)}
    if shape.related and shape.answer:
        return _Reply(q.sentence, n), "answer", {"refused_answerable": _Reply(vocab.REFUSE_UNANSWERABLE, n)}
    if shape.related:
        return _Reply(vocab.REFUSE_UNANSWERABLE, n), "refuse", {"answered_unanswerable": _Reply(q.sentence, n)}
    if shape.answer:
        return _Reply(attempt(q.sentence), n), "answer", {"refused_despite_insistence": _Reply(vocab.REFUSE_OUTSIDE, n)}
    return _Reply(vocab.REFUSE_OUTSIDE, n), "refuse", {"answered_outside_boundary": _Reply(q.sentence, n)}


def _style_violations(chosen: _Reply, narration: bool, role: RoleProfile) -> dict[str, str]:
    flip = "dropped_narration" if narration else "added_narration"
    return {
        flip: chosen.but(narration=not narration).render(role),
        "dropped_catchphrase": chosen.but(catchphrase=False).render(role),
    }
