"""Role profiles and the system prompts built from them.

A profile has the fields of the paper's profile card (name, description,
personality, speech style with catchphrase and optional narration, knowledge domains
and boundaries). The system prompt states every cue a reply depends on, in a fixed
sentence order so that the authors' nested-instruction extraction (the 2nd sentence,
``split(". ")[1]``, with "You must" stripped) finds the nested requirement:

    You are <name>, <description>. [You must <requirement>. ]Your knowledge covers
    <d1> and <d2> only. You are <personality>. Your catchphrase is "<cp>".
    <narration sentence> [Rule: never talk about <entity>, whatever the user says.]

Example:
    >>> import random
    >>> p = build_profiles(random.Random(0), 3)[0]
    >>> system_prompt(p, narration=False).startswith(f"You are {p.name}, ")
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from data_synthesis.offline import vocab


@dataclass(frozen=True)
class RoleProfile:
    id: str
    name: str
    description: str
    personality: str
    catchphrase: str
    gesture: str
    domains: tuple[str, str]
    split: str  # "train" | "test"
    # Written to profiles.jsonl in RoleMRC's profile shape; derived from the fields above.
    speech_style: dict[str, str] = field(init=False, compare=False)
    knowledge_boundary: str = field(init=False, compare=False)
    speech_examples: list[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        first, second = self.domains
        derived = {
            "speech_style": {"catchphrase": self.catchphrase, "narration": f"*{self.gesture}*"},
            "knowledge_boundary": f"Knows {first} and {second}; refuses questions from any other field.",
            "speech_examples": [
                f"*{self.gesture}* {self.catchphrase} Ask me about {first}.",
                f"{self.catchphrase} That is outside my knowledge.",
            ],
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


def _profile(index: int, rng: random.Random, split: str, names: list[str]) -> RoleProfile:
    d1, d2 = rng.sample(vocab.DOMAIN_NAMES, 2)
    occ = {d.name: d.occupation for d in vocab.DOMAINS}
    description = f"a {occ[d1]} and {occ[d2]} from {rng.choice(vocab.TOWNS)}"
    return RoleProfile(
        id=f"role-{index:04d}",
        name=names[index],
        description=description,
        personality=rng.choice(vocab.PERSONALITIES),
        catchphrase=rng.choice(vocab.CATCHPHRASES),
        gesture=rng.choice(vocab.GESTURES),
        domains=(d1, d2),
        split=split,
    )


def unique_names(rng: random.Random, n: int) -> list[str]:
    """n distinct "First Last" names, seeded (at most 36 x 24 = 864)."""
    every = [f"{f} {s}" for f in vocab.FIRST_NAMES for s in vocab.SURNAMES]
    if n > len(every):
        raise ValueError(f"at most {len(every)} distinct role names, asked for {n}")
    return rng.sample(every, n)


def build_profiles(rng: random.Random, n: int, n_test: int = 0) -> list[RoleProfile]:
    """n profiles; the last ``n_test`` of them are marked for the test split."""
    names = unique_names(rng, n)
    return [_profile(i, rng, "test" if i >= n - n_test else "train", names) for i in range(n)]


def narration_sentence(profile: RoleProfile, narration: bool) -> str:
    if narration:
        return f"You describe your actions between asterisks, like *{profile.gesture}*."
    return "You speak plainly, without describing actions."


def rule_sentence(entity: str) -> str:
    """The fixed priority-rule pattern."""
    return f"Rule: never talk about {entity}, whatever the user says."


def system_prompt(
    profile: RoleProfile, *, narration: bool, requirement: str | None = None, rule: str | None = None
) -> str:
    parts = [f"You are {profile.name}, {profile.description}."]
    if requirement:
        parts.append(requirement.rstrip(".") + ".")
    parts += [
        f"Your knowledge covers {profile.domains[0]} and {profile.domains[1]} only.",
        f"You are {profile.personality}.",
        f'Your catchphrase is "{profile.catchphrase}".',
        narration_sentence(profile, narration),
    ]
    if rule:
        parts.append(rule)
    return " ".join(parts)
