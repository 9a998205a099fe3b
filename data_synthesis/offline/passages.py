"""A passage pool generated from structured facts, so every answer is exact.

Each passage describes one invented entity (a comet, a fern, a schooner...) of one
domain in three fact sentences chosen from the domain's four fact slots. The three
stated slots give answerable questions whose answer is a verbatim sentence of the
passage (the answer value is its exact span); the omitted slot gives an unanswerable
question about the same entity. Invented names keep answers out of any model's world
knowledge, and the domain label in the passage header makes the knowledge boundary
decidable: a passage is within a role's boundary iff its domain is one of the role's.

Example:
    >>> import random
    >>> pool = build_pool(random.Random(0), per_domain=2)
    >>> len(pool), pool[0].domain
    (20, 'astronomy')
    >>> pool[0].answerable[0].answer in pool[0].text
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from data_synthesis.offline import vocab
from data_synthesis.offline.vocab import DOMAINS, DomainSpec, SlotSpec


@dataclass(frozen=True)
class Question:
    slot: str
    text: str
    answer: str | None  # the exact value span (None: not stated in the passage)
    sentence: str  # the passage sentence that answers it (or a plausible unstated one)


@dataclass(frozen=True)
class Passage:
    id: str
    domain: str
    entity: str  # "the Kelvar comet"
    text: str  # "Passage (astronomy): The Kelvar comet ..."
    answerable: tuple[Question, ...]
    unanswerable: tuple[Question, ...]


def _name(rng: random.Random, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(vocab.SYLLABLES) for _ in range(2)).capitalize()
        if word not in used:
            used.add(word)
            return word


def value_of(kind: str, rng: random.Random) -> str:
    """A random value of one slot kind."""
    if kind == "year":
        return str(rng.randint(1100, 1899))
    if kind == "number":
        return str(rng.randint(2, 90))
    table = {
        "person": vocab.PERSONS,
        "place": vocab.PLACES,
        "colour": vocab.COLOURS,
        "metal": vocab.METALS,
        "ailment": vocab.AILMENTS,
        "spice": vocab.SPICES,
    }
    return rng.choice(table[kind])


def _sentence(slot: SlotSpec, entity: str, value: str) -> str:
    return slot.sentence.format(E=entity[0].upper() + entity[1:], e=entity, v=value)


def _question(slot: SlotSpec, entity: str, value: str | None, sentence: str) -> Question:
    return Question(slot.name, slot.question.format(e=entity), value, sentence)


def _passage(domain: DomainSpec, index: int, rng: random.Random, used: set[str]) -> Passage:
    entity = f"the {_name(rng, used)} {rng.choice(domain.kinds)}"
    missing = rng.randrange(len(domain.slots))
    answerable, unanswerable, sentences = [], [], []
    for i, slot in enumerate(domain.slots):
        value = value_of(slot.value_kind, rng)
        sentence = _sentence(slot, entity, value)
        if i == missing:
            unanswerable.append(_question(slot, entity, None, sentence))
        else:
            sentences.append(sentence)
            answerable.append(_question(slot, entity, value, sentence))
    text = f"Passage ({domain.name}): " + " ".join(sentences)
    return Passage(f"{domain.name}-{index:03d}", domain.name, entity, text, tuple(answerable), tuple(unanswerable))


def build_pool(rng: random.Random, per_domain: int = 16) -> list[Passage]:
    """``per_domain`` passages for each of the 10 domains, domain by domain."""
    used: set[str] = set()
    return [_passage(domain, i, rng, used) for domain in DOMAINS for i in range(per_domain)]
