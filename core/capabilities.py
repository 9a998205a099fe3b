"""The 18 RoleMRC test tasks and the five capabilities they are judged on.

The mapping copies the authors' ``evaluation_config`` (``evaluation/llm_judge.py``)
and ``task_to_dim`` (``interpretation/interpret.py``) exactly, including their
quirks: two tasks count for two capabilities, and the two ``*_no_narration`` /
``*_with_narration`` pairs are *not* split the way their names suggest
(e.g. ``role_related_mrc_refused_no_narration`` is judged on style only).
Grouping the published 1,400-row test split gives 600 / 400 / 158 / 400 / 42 rows.

Example:
    >>> parse_capabilities("multi_turn")
    (<Capability.MULTI_TURN: 'multi_turn'>,)
    >>> [c.value for c in capabilities_of("role_unrelated_mrc_refused_no_narration")]
    ['knowledge_boundary', 'role_style']
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from core.errors import ProbeError


class Capability(str, Enum):
    KNOWLEDGE_BOUNDARY = "knowledge_boundary"
    ROLE_STYLE = "role_style"
    NESTED = "nested"
    MULTI_TURN = "multi_turn"
    PRIORITY = "priority"

    @property
    def paper_name(self) -> str:
        return PAPER_NAMES[self]

    @property
    def panel_title(self) -> str:
        return TITLES[self]


PAPER_NAMES: dict[Capability, str] = {
    Capability.KNOWLEDGE_BOUNDARY: "KNOWLEDGE_RANGE",
    Capability.ROLE_STYLE: "STYLE_COMPLIANCE",
    Capability.NESTED: "NESTED_INSTRUCTION",
    Capability.MULTI_TURN: "MULTI_TURN_INSTRUCTION",
    Capability.PRIORITY: "INSTRUCTION_PRIORITY",
}

TITLES: dict[Capability, str] = {
    Capability.KNOWLEDGE_BOUNDARY: "Knowledge Boundary",
    Capability.ROLE_STYLE: "Role Style",
    Capability.NESTED: "Nested Instructions",
    Capability.MULTI_TURN: "Multi-turn Instructions",
    Capability.PRIORITY: "Prioritized Instructions",
}


@dataclass(frozen=True)
class TaskSpec:
    """One RoleMRC test task: its exact name, the authors' id, and how it is judged."""

    name: str
    paper_id: str
    capabilities: tuple[Capability, ...]
    published_count: int
    # Parameters of the authors' judge templates, where the task has one.
    knowledge_range: str | None = None  # "within" | "outside"
    multi_turn_type: str | None = None  # "answerable" | "unanswerable"


_K, _S, _N, _M, _P = (
    Capability.KNOWLEDGE_BOUNDARY,
    Capability.ROLE_STYLE,
    Capability.NESTED,
    Capability.MULTI_TURN,
    Capability.PRIORITY,
)

TASKS: tuple[TaskSpec, ...] = (
    TaskSpec("role_related_mrc_answer_with_narration", "2.1.1", (_K, _S), 100, knowledge_range="within"),
    TaskSpec("role_related_mrc_answer_no_narration", "2.1.2", (_K,), 100, knowledge_range="within"),
    TaskSpec("role_related_mrc_refused_with_narration", "2.1.3", (_K,), 100, knowledge_range="within"),
    TaskSpec("role_related_mrc_refused_no_narration", "2.1.4", (_S,), 100),
    TaskSpec("role_unrelated_mrc_refused_with_narration", "2.2.1", (_K,), 100, knowledge_range="outside"),
    TaskSpec("role_unrelated_mrc_refused_no_narration", "2.2.2", (_K, _S), 100, knowledge_range="outside"),
    TaskSpec("role_unrelated_mrc_answer_with_narration", "2.2.3", (_K,), 100, knowledge_range="outside"),
    TaskSpec("role_unrelated_mrc_answer_no_narration", "2.2.4", (_S,), 100),
    TaskSpec("role_related_mrc_answer_with_narration-special-content", "3.1.1", (_N,), 58),
    TaskSpec("role_related_mrc_answer_no_narration-special-content", "3.1.2", (_N,), 58),
    TaskSpec("role_related_mrc_answer_with_narration-special-format", "3.1.3", (_N,), 20),
    TaskSpec("role_related_mrc_answer_no_narration-special-format", "3.1.4", (_N,), 22),
    TaskSpec("role_related_mrc_answer_with_narration-refused", "3.1.5", (_P,), 22),
    TaskSpec("role_related_mrc_answer_no_narration-refused", "3.1.6", (_P,), 20),
    TaskSpec("role_related_mrc_refused_with_narration-2ndrefused", "3.2.1", (_M,), 100, multi_turn_type="unanswerable"),
    TaskSpec("role_related_mrc_refused_no_narration-2ndrefused", "3.2.2", (_M,), 100, multi_turn_type="unanswerable"),
    TaskSpec("role_unrelated_mrc_refused_with_narration-2ndanswer", "3.2.3", (_M,), 100, multi_turn_type="answerable"),
    TaskSpec("role_unrelated_mrc_refused_no_narration-2ndanswer", "3.2.4", (_M,), 100, multi_turn_type="answerable"),
)

TASKS_BY_NAME: dict[str, TaskSpec] = {t.name: t for t in TASKS}
ALL_CAPABILITIES: tuple[Capability, ...] = tuple(Capability)

_ALIASES: dict[str, Capability] = {c.value: c for c in Capability}
_ALIASES.update({name.lower(): c for c, name in PAPER_NAMES.items()})
_ALIASES.update({"nested_instructions": _N, "multi_turn_instructions": _M, "instruction_priority": _P})


def task_spec(task: str) -> TaskSpec:
    """The spec of a task name; raises :class:`ProbeError` for an unknown one."""
    try:
        return TASKS_BY_NAME[task]
    except KeyError:
        raise ProbeError(f"unknown task {task!r}; expected one of the 18 RoleMRC task names") from None


def capabilities_of(task: str) -> tuple[Capability, ...]:
    return task_spec(task).capabilities


def tasks_of(capability: Capability) -> tuple[str, ...]:
    return tuple(t.name for t in TASKS if capability in t.capabilities)


def parse_capability(name: str) -> Capability:
    """Accept the CLI name, the paper's name, case-insensitively, with '-' or '_'."""
    key = name.strip().lower().replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    choices = ", ".join(c.value for c in Capability)
    raise ProbeError(
        f"unknown capability {name!r}; expected one of {choices}, a paper name such as MULTI_TURN_INSTRUCTION, or 'all'"
    )


def parse_capabilities(names: str | list[str] | tuple[str, ...]) -> tuple[Capability, ...]:
    """Parse 'all', one name, a comma-separated list, or a list of names (order kept, duplicates dropped)."""
    items = names.split(",") if isinstance(names, str) else [p for n in names for p in n.split(",")]
    items = [i for i in (s.strip() for s in items) if i]
    if not items:
        raise ProbeError("no capability given; expected a capability name or 'all'")
    if any(i.lower() == "all" for i in items):
        return ALL_CAPABILITIES
    out: list[Capability] = []
    for item in items:
        cap = parse_capability(item)
        if cap not in out:
            out.append(cap)
    return tuple(out)
