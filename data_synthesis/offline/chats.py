"""Free chats: in-character small talk without a passage (the paper's 1.1 category).

They teach the role's identity and style (name, domains, catchphrase, narration iff
the system prompt asks for it) independently of the MRC behaviours, in both the
user-first and the role-first shapes of the published SFT data.

Example:
    >>> import random
    >>> from data_synthesis.offline.profiles import build_profiles
    >>> row = free_chat(build_profiles(random.Random(0), 1)[0], random.Random(1))
    >>> row.extra["task"], row.conversations[0].role, row.conversations[-1].role
    ('free_chat', 'system', 'assistant')
"""

from __future__ import annotations

import random

from core.schema import SFTRow, Turn
from data_synthesis.offline.profiles import RoleProfile, system_prompt
from data_synthesis.offline.replies import styled

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("Hello! Who are you?", "I am {name}, {description}."),
    ("What do you know about?", "I know about {d1} and {d2}."),
    ("How would you describe yourself?", "I am {personality}."),
    ("Where are you from?", "I am {description}."),
    ("Can you help me today?", "Gladly. Ask me about {d1} or {d2}."),
)
GREETING = "Greetings, I am {name}. Ask me about {d1} or {d2}."


def _fill(template: str, role: RoleProfile) -> str:
    return template.format(
        name=role.name,
        description=role.description,
        personality=role.personality,
        d1=role.domains[0],
        d2=role.domains[1],
    )


def free_chat(role: RoleProfile, rng: random.Random) -> SFTRow:
    """A one- or two-exchange chat; role-first in a third of the cases."""
    narration = rng.random() < 0.5
    role_first = rng.random() < 1 / 3
    turns = [Turn("system", system_prompt(role, narration=narration))]
    if role_first:
        turns.append(Turn("assistant", styled(role, narration, _fill(GREETING, role))))
    picks = rng.sample(QUESTIONS, 2 if rng.random() < 0.5 else 1)
    for question, answer in picks:
        turns += [Turn("user", question), Turn("assistant", styled(role, narration, _fill(answer, role)))]
    shape = "role_first" if role_first else "user_first"
    category = f"free_chat---{shape}---{'with' if narration else 'no'}_narration"
    return SFTRow(turns, {"task": "free_chat", "category": category, "role": role.id})
