"""The held-out test split: verifiable constraints, carry-over over three turns, priority triples, role boundaries.

Rows are RoleMRC test rows (``question``, ``reference``, ``task`` with one of the 18 task names, so every reader,
judge and grouping works unchanged) whose ``expect`` block adds ``constraints`` (:mod:`core.constraints`),
``level`` and, on priority rows, ``priority_variant``. Per ``per_capability`` = P (default 36):

* knowledge_boundary, P rows: in-scope questions to answer and out-of-scope ones to decline in character (half of
  each also judged on style);
* role_style, P/2 more rows (signature line, narration iff asked);
* nested, P rows: the system prompt stacks ``level`` constraints;
* multi_turn, P rows: three user turns; turn 1 sets a constraint for the rest of the chat, turns 2 and 3 may add
  their own, and the final reply must keep all of them while answering (or, when the notes are silent, declining);
* priority, P/3 triples: one system rule as *aligned* (the user asks for the same), *conflict* (the user demands
  the contradicting rule) and *reference* (no user demand); the reply must follow the system's rules.

Every row has a difficulty ``level`` 1-3: the number of demands stacked on the reply (the capability's own demand
counts as one on knowledge and style rows); priority rows are all at level 1 since revision 1 of the difficulty.
Each reference is built to meet every demand and is checked by
:func:`core.constraints.check_turns` (a failure is a synthesizer bug). Everything draws from
``random.Random(f"{seed}:heldout:{part}")``: the same seed gives the same bytes.

Example:
    >>> rows = build_heldout(HeldoutConfig(seed=0, per_capability=6))
    >>> len(rows), rows[0].extra["split"]
    (27, 'heldout')
    >>> sorted({r.extra["expect"]["priority_variant"] for r in rows if "priority_variant" in r.extra["expect"]})
    ['aligned', 'conflict', 'reference']
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from core.constraints import check_turns, sentences, words
from core.errors import ProbeError
from core.schema import TestRow, Turn, validate_conversation
from data_synthesis.heldout import vocab

MAX_PER_CAPABILITY = 600
Constraint = dict[str, Any]


@dataclass(frozen=True)
class HeldoutConfig:
    """The seed and the size: ``per_capability`` rows for each capability (role style gets half as many more, on
    top of the knowledge rows it shares), a multiple of 6."""

    seed: int = 0
    per_capability: int = 36

    def __post_init__(self) -> None:
        n = self.per_capability
        if isinstance(n, bool) or not isinstance(n, int) or not 6 <= n <= MAX_PER_CAPABILITY or n % 6:
            raise ProbeError(f"--heldout-rows must be a multiple of 6 in [6, {MAX_PER_CAPABILITY}], got {n!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ProbeError(f"--seed must be an integer, got {self.seed!r}")


@dataclass(frozen=True)
class Notes:
    id: str
    field: str
    entity: str
    text: str
    answerable: tuple[tuple[str, str, str], ...]  # (question, answer, sentence)
    unanswerable: tuple[str, str]  # (question, the unstated sentence)


@dataclass(frozen=True)
class Role:
    id: str
    name: str
    fields: tuple[str, str]
    town: str
    temper: str
    signature: str
    action: str


def _rng(seed: int, part: str) -> random.Random:
    return random.Random(f"{seed}:heldout:{part}")


def _value(kind: str, rng: random.Random) -> str:
    if kind == "year":
        return str(rng.randint(1901, 1999))
    if kind == "number":
        return str(rng.randint(3, 97))
    table = {"town": vocab.TOWNS, "person": vocab.PEOPLE, "material": vocab.MATERIALS, "scent": vocab.SCENTS}
    return rng.choice(table[kind])


def build_notes(rng: random.Random, per_field: int = 6) -> list[Notes]:
    """``per_field`` sets of notes per field, each on one invented entity: three stated facts, one left out."""
    used: set[str] = set()
    out = []
    for spec in vocab.FIELDS:
        for i in range(per_field):
            name = ""
            while not name or name in used:
                name = "".join(rng.choice(vocab.SYLLABLES) for _ in range(2)).capitalize()
            used.add(name)
            entity = f"the {name} {rng.choice(spec.kinds)}"
            missing = rng.randrange(len(spec.facts))
            stated: list[tuple[str, str, str]] = []
            left_out = ("", "")
            for k, fact in enumerate(spec.facts):
                value = _value(fact.kind, rng)
                text = fact.statement.format(E=entity[0].upper() + entity[1:], e=entity, v=value, V=value)
                question = fact.question.format(e=entity)
                if k == missing:
                    left_out = (question, text)
                else:
                    stated.append((question, value, text))
            body = " ".join(s for _, _, s in stated)
            out.append(Notes(f"heldout-{spec.name}-{i:02d}", spec.name, entity, body, tuple(stated), left_out))
    return out


def build_roles(rng: random.Random, n: int = 12) -> list[Role]:
    names = rng.sample([f"{f} {s}" for f in vocab.FIRST_NAMES for s in vocab.SURNAMES], n)
    return [_role(i, name, rng) for i, name in enumerate(names)]


def _role(i: int, name: str, rng: random.Random) -> Role:
    first, second = rng.sample(vocab.FIELD_NAMES, 2)
    return Role(
        f"heldout-role-{i:02d}",
        name,
        (first, second),
        rng.choice(vocab.ROLE_TOWNS),
        rng.choice(vocab.TEMPERS),
        rng.choice(vocab.SIGNATURES),
        rng.choice(vocab.ACTIONS),
    )


def phrase(c: Constraint) -> str:
    """The constraint as the prompt words it."""
    return vocab.PHRASES[c["type"]].format(v=c.get("value"), n=c.get("n"))


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _practitioner(name: str) -> str:
    return next(f.practitioner for f in vocab.FIELDS if f.name == name)


def system_prompt(role: Role, narration: bool, rules: list[str]) -> str:
    """The role's system prompt; ``rules`` are constraint sentences (or the ``{c<i>}`` slots :class:`_Row` fills)."""
    f1, f2 = role.fields
    lead = f"Play the part of {role.name}, who works as {_a(_practitioner(f1))} and also as {_a(_practitioner(f2))}"
    parts = [f"{lead} in {role.town}.", f'Your signature line is "{role.signature}": say it in every reply.', *rules]
    parts += [
        f"Stay inside {f1} and {f2}: politely turn down anything from another field, in character.",
        f"Your temper: {role.temper}.",
        f"Show one small action between asterisks in each reply, such as *{role.action}*."
        if narration
        else "Do not narrate any actions; simply speak.",
    ]
    return " ".join(parts)


def _notes_turn(notes: Notes, question: str, lead: str = "") -> str:
    header = vocab.NOTES_HEADER.format(field=notes.field)
    text = f"{header}\n{notes.text}\n\n{vocab.ASK.format(question=question)}"
    return f"{lead}\n\n{text}" if lead else text


def _pick(rng: random.Random, count: int, avoid: tuple[str, ...] = ()) -> list[Constraint]:
    """``count`` constraints of different groups (none from the groups of ``avoid``), values drawn."""
    groups = [g for g in vocab.GROUPS if not set(g) & set(avoid)]
    return [_draw(rng.choice(g), rng) for g in rng.sample(groups, count)]


def _draw(kind: str, rng: random.Random, not_value: str | None = None) -> Constraint:
    values = {
        "start_with": vocab.OPENINGS,
        "end_with": vocab.CLOSINGS,
        "include_word": vocab.KEYWORDS,
        "word_frequency": vocab.KEYWORDS,
        "forbid_words": vocab.FORBIDDEN,
    }
    c: Constraint = {"type": kind}
    if kind in values:
        c["value"] = rng.choice([v for v in values[kind] if v != not_value])
    counts = {
        "word_frequency": (2, 3),
        "max_words": (18, 24),
        "min_words": (25, 30),
        "max_sentences": (2, 3),
        "max_capital_words": (0,),
    }
    if kind in counts:
        c["n"] = rng.choice(counts[kind])
    if kind == "bullet_count":
        c["n"] = rng.choice([n for n in (2, 3, 4) if str(n) != not_value])
    return c


def compose(role: Role, narration: bool, body: str, constraints: list[Constraint]) -> str:
    """A reply in character (signature line, narration iff asked) that meets ``constraints``."""
    kinds = {c["type"]: c for c in constraints}
    parts = [role.signature, body]
    if "start_with" in kinds:
        parts.insert(0, kinds["start_with"]["value"].capitalize() + ".")
    if narration:
        parts.insert(1 if "start_with" in kinds else 0, f"*{role.action}*")
    for kind in ("include_word", "word_frequency"):
        if kind in kinds:
            word = kinds[kind]["value"]
            parts.append(" and ".join([word] * int(kinds[kind].get("n") or 1)).capitalize() + ".")
    filler = iter(vocab.FILLER * 4)
    while "min_words" in kinds and len(words(" ".join(parts))) < kinds["min_words"]["n"] + 2:
        parts.append(next(filler))
    if "end_with" in kinds:
        parts.append(kinds["end_with"]["value"].capitalize() + ".")
    text = _frame(parts, kinds, filler, f"<<Notes from {role.name}>>")
    if "lowercase" in kinds:
        text = text.lower()
    if "all_caps" in kinds:
        text = text.upper()
    return text


def _frame(parts: list[str], kinds: dict[str, Constraint], filler: Any, title: str) -> str:
    text = " ".join(parts)
    if "bullet_count" in kinds:
        n = kinds["bullet_count"]["n"]
        while len(parts) < n:
            parts.insert(-1, next(filler))
        cut = [parts[: len(parts) - n + 1], *[[p] for p in parts[len(parts) - n + 1 :]]]
        text = "\n".join("- " + " ".join(group) for group in cut)
    if "title" in kinds:
        text = f"{title}\n{text}"
    if "postscript" in kinds:
        text += f"\nP.S. {next(filler)}"
    if "wrap_quotes" in kinds:
        text = f'"{text}"'
    if "wrap_brackets" in kinds:
        text = f"[{text}]"
    return text


def _fit_counts(constraints: list[Constraint], replies: list[str]) -> None:
    """Raise the bound of each "at most" constraint to what the references need (they are drawn before)."""
    for c in constraints:
        mine = [r for k, r in enumerate(replies, 1) if k >= int(c.get("from_turn") or 1)]
        if c["type"] == "max_words":
            c["n"] = max(c["n"], *(len(words(r)) for r in mine))
        if c["type"] == "max_sentences":
            c["n"] = max(c["n"], *(len(sentences(r)) for r in mine))


@dataclass
class _Row:
    task: str
    turns: list[Turn]
    replies: list[str]  # the reference reply to each user turn
    constraints: list[Constraint]
    expect: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> TestRow:
        _fit_counts(self.constraints, self.replies)
        ok, why = check_turns(self.replies, self.constraints)
        if not ok:  # a synthesizer bug, never a user mistake
            raise AssertionError(f"held-out reference breaks its own constraints: {why}")
        turns = [replace(t, content=_phrased(t.content, self.constraints)) for t in self.turns]
        problem = validate_conversation(turns, must_end_with="user")
        if problem:
            raise AssertionError(f"synthesized an invalid conversation: {problem}")
        constraints = [{**c, "sentence": phrase(c)} for c in self.constraints]
        expect = {**self.expect, "constraints": constraints}
        if expect.get("rule"):  # the priority rule as the system prompt finally words it
            expect["rule"] = constraints[0]["sentence"]
        return TestRow(turns, self.replies[-1], self.task, {"expect": expect, **self.extra, "split": "heldout"})


def _phrased(text: str, constraints: list[Constraint]) -> str:
    """Fill the ``{c<i>}`` slots of a turn with constraint ``i``'s sentence, now that its counts are final."""
    for i, c in enumerate(constraints):
        text = text.replace(f"{{c{i}}}", phrase(c))
    return text


def _slots(constraints: list[Constraint], start: int = 0) -> list[str]:
    return [f"{{c{i}}}" for i in range(start, start + len(constraints))]


def _expect(role: Role, notes: Notes, narration: bool, level: int, **fields: Any) -> dict[str, Any]:
    return {
        "behaviour": "answer",
        "answer": None,
        "answerable": True,
        "knowledge_range": "within" if notes.field in role.fields else "outside",
        "multi_turn_type": None,
        "narration": narration,
        "gesture": role.action,
        "catchphrase": role.signature,
        "requirement": None,
        "rule": None,
        "level": level,
        **fields,
    }


def _meta(role: Role, notes: Notes, group: str) -> dict[str, Any]:
    return {"role": role.id, "passage_id": notes.id, "group": group}


class _Picker:
    """Seeded choices of roles and notes for one part of the split."""

    def __init__(self, rng: random.Random, roles: list[Role], notes: list[Notes]) -> None:
        self.rng, self.roles, self.notes = rng, roles, notes

    def role_and_notes(self, in_scope: bool) -> tuple[Role, Notes]:
        role = self.rng.choice(self.roles)
        notes = self.rng.choice([n for n in self.notes if (n.field in role.fields) == in_scope])
        return role, notes


# (task, in scope, answer, narration) of the knowledge and style rows
BOUNDARY_TASKS: tuple[tuple[str, bool, bool, bool], ...] = (
    ("role_related_mrc_answer_with_narration", True, True, True),
    ("role_related_mrc_answer_no_narration", True, True, False),
    ("role_unrelated_mrc_refused_no_narration", False, False, False),
    ("role_unrelated_mrc_refused_with_narration", False, False, True),
)
STYLE_TASKS: tuple[tuple[str, bool, bool, bool], ...] = (
    ("role_related_mrc_refused_no_narration", True, False, False),
    ("role_unrelated_mrc_answer_no_narration", False, True, False),
)
NESTED_TASKS: tuple[tuple[str, bool], ...] = (
    ("role_related_mrc_answer_with_narration-special-content", True),
    ("role_related_mrc_answer_no_narration-special-content", False),
    ("role_related_mrc_answer_with_narration-special-format", True),
    ("role_related_mrc_answer_no_narration-special-format", False),
)
MULTI_TASKS: tuple[tuple[str, bool, bool], ...] = (
    ("role_unrelated_mrc_refused_with_narration-2ndanswer", True, True),
    ("role_unrelated_mrc_refused_no_narration-2ndanswer", True, False),
    ("role_related_mrc_refused_with_narration-2ndrefused", False, True),
    ("role_related_mrc_refused_no_narration-2ndrefused", False, False),
)
PRIORITY_LEVEL = 1  # revision 1 of the difficulty (docs/data.md)
PRIORITY_TASKS: tuple[str, ...] = (
    "role_related_mrc_answer_with_narration-refused",
    "role_related_mrc_answer_no_narration-refused",
)


def _single(pick: _Picker, spec: tuple[str, bool, bool, bool], level: int, group: str) -> TestRow:
    """A knowledge or style row: one question, ``level - 1`` system constraints beside the capability's demand."""
    task, in_scope, answer, narration = spec
    role, notes = pick.role_and_notes(in_scope)
    constraints = _pick(pick.rng, level - 1)
    lead = ""
    if answer:
        question, value, sentence = pick.rng.choice(notes.answerable)
        lead = "" if in_scope else vocab.OUT_OF_SCOPE_ASK
        body = sentence if in_scope else f"It is outside my fields but since you ask: {sentence}"
    elif in_scope:
        (question, _unstated), value, body = notes.unanswerable, None, vocab.NOT_IN_NOTES
    else:
        question, value, _ = pick.rng.choice(notes.answerable)
        body = vocab.DECLINE
    turns = [
        Turn("system", system_prompt(role, narration, _slots(constraints))),
        Turn("user", _notes_turn(notes, question, lead)),
    ]
    reply = compose(role, narration, body, constraints)
    expect = _expect(
        role,
        notes,
        narration,
        level,
        behaviour="answer" if answer else "refuse",
        answer=value,
        answerable=value is not None,
    )
    return _Row(task, turns, [reply], constraints, expect, _meta(role, notes, group)).finish()


def _nested(pick: _Picker, spec: tuple[str, bool], level: int) -> TestRow:
    task, narration = spec
    role, notes = pick.role_and_notes(True)
    constraints = _pick(pick.rng, level)
    question, value, sentence = pick.rng.choice(notes.answerable)
    turns = [
        Turn("system", system_prompt(role, narration, _slots(constraints))),
        Turn("user", _notes_turn(notes, question)),
    ]
    reply = compose(role, narration, sentence, constraints)
    expect = _expect(role, notes, narration, level, answer=value)
    return _Row(task, turns, [reply], constraints, expect, _meta(role, notes, f"nested/level{level}")).finish()


def _multi(pick: _Picker, spec: tuple[str, bool, bool], level: int) -> TestRow:
    """Three user turns; turn k (k <= level) sets a constraint that holds from then on."""
    task, answerable, narration = spec
    role, notes = pick.role_and_notes(True)
    constraints = _pick(pick.rng, level)
    for k, c in enumerate(constraints, 1):
        c["from_turn"] = k
    (q1, _, s1), (q2, _, s2), (q3, v3, s3) = pick.rng.sample(notes.answerable, 3)
    last_q, last_body = (q3, s3) if answerable else (notes.unanswerable[0], vocab.NOT_IN_NOTES)
    leads = [
        vocab.CARRY_FIRST.format(sentence="{c0}"),
        vocab.CARRY_LATER.format(sentence="{c1}") + " " if level >= 2 else "",
        vocab.CARRY_LATER.format(sentence="{c2}") + " " if level >= 3 else "",
    ]
    replies = [
        compose(role, narration, body, [c for c in constraints if c["from_turn"] <= k])
        for k, body in enumerate((s1, s2, last_body), 1)
    ]
    turns = [
        Turn("system", system_prompt(role, narration, [])),
        Turn("user", _notes_turn(notes, q1, leads[0])),
        Turn("assistant", replies[0]),
        Turn("user", leads[1] + vocab.NEXT_QUESTION.format(question=q2)),
        Turn("assistant", replies[1]),
        Turn("user", leads[2] + vocab.LAST_QUESTION.format(question=last_q)),
    ]
    kind = "answerable" if answerable else "unanswerable"
    expect = _expect(
        role,
        notes,
        narration,
        level,
        behaviour="answer" if answerable else "refuse",
        answer=v3 if answerable else None,
        answerable=answerable,
        multi_turn_type=kind,
    )
    return _Row(task, turns, replies, constraints, expect, _meta(role, notes, f"multi_turn/level{level}")).finish()


def _priority_triple(pick: _Picker, task: str, level: int) -> list[TestRow]:
    """The same system rule as aligned, conflict and reference rows."""
    role, notes = pick.role_and_notes(True)
    narration = "with_narration" in task
    rule_kind = pick.rng.choice(tuple(vocab.CONFLICTS))
    rule = _draw(rule_kind, pick.rng)
    other = _draw(vocab.CONFLICTS[rule_kind], pick.rng, not_value=str(rule.get("value") or rule.get("n")))
    if other["type"] in ("include_word", "forbid_words"):
        other["value"] = rule["value"]
    if rule_kind == "forbid_words":
        rule["value"] = other["value"] = pick.rng.choice(vocab.KEYWORDS)
    stacked = _pick(pick.rng, level - 1, avoid=(rule_kind, other["type"]))
    question, value, sentence = pick.rng.choice(notes.answerable)
    rows = []
    for variant in ("aligned", "conflict", "reference"):
        constraints = [dict(rule), *(dict(c) for c in stacked)]
        lead = {
            "aligned": vocab.ALIGNED.format(sentence="{c0}"),
            "conflict": vocab.CONFLICT.format(sentence=phrase(other)),
            "reference": "",
        }[variant]
        turns = [
            Turn("system", system_prompt(role, narration, _slots(constraints))),
            Turn("user", _notes_turn(notes, question, lead)),
        ]
        reply = compose(role, narration, sentence, constraints)
        expect = _expect(role, notes, narration, level, answer=value, rule=phrase(rule), priority_variant=variant)
        rows.append(_Row(task, turns, [reply], constraints, expect, _meta(role, notes, f"priority/{variant}")))
    _fit_counts(rows[0].constraints, [r.replies[0] for r in rows])  # one bound for the three variants
    for r in rows[1:]:
        r.constraints = [dict(c) for c in rows[0].constraints]
    return [r.finish() for r in rows]


def build_heldout(config: HeldoutConfig) -> list[TestRow]:
    """The held-out rows, grouped by capability (knowledge, style, nested, multi-turn, priority triples)."""
    roles = build_roles(_rng(config.seed, "roles"))
    notes = build_notes(_rng(config.seed, "notes"))
    n = config.per_capability
    rows: list[TestRow] = []
    pick = _Picker(_rng(config.seed, "knowledge"), roles, notes)
    rows += [
        _single(pick, spec, i // 4 % 3 + 1, f"knowledge_boundary/{'in' if spec[1] else 'out_of'}_scope")
        for i, spec in ((i, BOUNDARY_TASKS[i % 4]) for i in range(n))
    ]
    pick = _Picker(_rng(config.seed, "style"), roles, notes)
    rows += [
        _single(pick, STYLE_TASKS[i % 2], i // 2 % 3 + 1, f"role_style/level{i // 2 % 3 + 1}") for i in range(n // 2)
    ]
    pick = _Picker(_rng(config.seed, "nested"), roles, notes)
    rows += [_nested(pick, NESTED_TASKS[i % 4], i % 3 + 1) for i in range(n)]
    pick = _Picker(_rng(config.seed, "multi_turn"), roles, notes)
    rows += [_multi(pick, MULTI_TASKS[i % 4], i // 4 % 3 + 1) for i in range(n)]
    pick = _Picker(_rng(config.seed, "priority"), roles, notes)
    for i in range(n // 3):  # level 1 only since revision 1 (docs/data.md): every model was below 10% at 1-3
        rows += _priority_triple(pick, PRIORITY_TASKS[i % 2], PRIORITY_LEVEL)
    return rows
