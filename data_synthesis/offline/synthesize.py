"""Offline synthesis of a RoleMRC-format dataset: profiles, SFT, DPO and test files.

Scaling rule (documented in docs/data.md): ``n_roles`` roles are made; 20% of them
(at least one) are held out for the test split, together with 4 of the 16 passages of
every domain. The test split has ``round(published_count * n_roles / 100)`` rows per
task (at least 1), so ``n_roles=100`` gives exactly the published 1,400-row histogram
(100 per base task, nested 58/58/20/22, priority 22/20, multi-turn 100 each). Training
files use only the training roles and passages: per role ``sft_per_task[group]``
episodes of each of the 18 tasks plus ``free_chats`` free chats, and ``dpo_per_task``
DPO pairs per task.

Every part draws from its own ``random.Random(f"{seed}:{part}")``, so the same seed
gives the same bytes and changing one part's size leaves the others unchanged. The five
files are replaced together or not at all (:func:`core.rows.write_dataset`), so a
synthesis that fails while writing never leaves a dataset mixing old and new files.

Example:
    >>> import tempfile
    >>> small = synthesize(tempfile.mkdtemp(), n_roles=2, seed=0)   # one training role, one test role
    >>> small.files
    {'profiles.jsonl': 2, 'passages.jsonl': 160, 'sft.jsonl': 72, 'dpo.jsonl': 36, 'test.jsonl': 30}
    >>> SynthesisConfig(n_roles=1)
    Traceback (most recent call last):
    core.errors.ProbeError: --roles must be an integer in [2, 800] (one test role at least), got 1
    >>> summary = synthesize("/tmp/rolemrc-demo", n_roles=10, seed=0)   # doctest: +SKIP
    >>> summary.files["test.jsonl"]                                      # doctest: +SKIP
    140
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.capabilities import TASKS, capabilities_of
from core.errors import ProbeError
from core.records import to_json
from core.rows import write_dataset
from core.run_dir import DataDir
from core.schema import DPORow, Role, SFTRow, TestRow, Turn, validate_conversation
from data_synthesis.offline.chats import free_chat
from data_synthesis.offline.passages import Passage, build_pool
from data_synthesis.offline.profiles import RoleProfile, build_profiles
from data_synthesis.offline.tasks import VIOLATIONS, Episode, build_episode, shape_of

# Note: data_synthesis.llm.synthesis reuses the row builders below (_test_row, _sft_row, _dpo_row,
# _rng, _split_pool, _prepare, _summary) so that both backends write identical schemas and
# seeding; keep their names and signatures stable.
MAX_ROLES = 800
FILES: tuple[str, ...] = (DataDir.PROFILES, DataDir.PASSAGES, *DataDir.SPLITS)


@dataclass(frozen=True)
class SynthesisConfig:
    """Sizes of the offline dataset; validated so that the CLI and library agree."""

    n_roles: int = 40
    seed: int = 0
    test_fraction: float = 0.2
    passages_per_domain: int = 16
    test_passages_per_domain: int = 4
    sft_base: int = 4  # SFT episodes per training role for each of the 8 base tasks
    sft_nested: int = 3
    sft_priority: int = 3
    sft_multi_turn: int = 4
    free_chats: int = 6
    dpo_per_task: int = 2
    style_violation_rate: float = 0.4  # share of DPO rejects that break style rather than behaviour
    test_histogram_roles: int | None = None  # size the test split as for this many roles (default: n_roles)

    def __post_init__(self) -> None:
        if isinstance(self.n_roles, bool) or not isinstance(self.n_roles, int) or not 2 <= self.n_roles <= MAX_ROLES:
            raise ProbeError(
                f"--roles must be an integer in [2, {MAX_ROLES}] (one test role at least), got {self.n_roles!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ProbeError(f"--seed must be an integer, got {self.seed!r}")
        if not 0.0 < self.test_fraction < 1.0 or not 0.0 <= self.style_violation_rate <= 1.0:
            raise ProbeError("test_fraction must be in (0, 1) and style_violation_rate in [0, 1]")
        if not 1 <= self.test_passages_per_domain < self.passages_per_domain:
            raise ProbeError("need 1 <= test_passages_per_domain < passages_per_domain")
        scale = self.test_histogram_roles
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int) or scale < 1):
            raise ProbeError(f"test_histogram_roles must be a positive integer, got {scale!r}")
        counts = (
            self.sft_base,
            self.sft_nested,
            self.sft_priority,
            self.sft_multi_turn,
            self.free_chats,
            self.dpo_per_task,
        )
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
            raise ProbeError("per-task counts must be non-negative integers")

    @property
    def n_test_roles(self) -> int:
        return min(self.n_roles - 1, max(1, round(self.n_roles * self.test_fraction)))

    def sft_count(self, task: str) -> int:
        suffix = shape_of(task).suffix
        if suffix.startswith("special"):
            return self.sft_nested
        if suffix == "refused":
            return self.sft_priority
        return self.sft_multi_turn if suffix.startswith("2nd") else self.sft_base

    def test_count(self, published: int) -> int:
        return max(1, round(published * (self.test_histogram_roles or self.n_roles) / 100))


@dataclass
class SynthesisSummary:
    """What was written: rows per file, per task and file, test rows per capability."""

    out_dir: str
    files: dict[str, int]
    tasks: dict[str, dict[str, int]]  # file name -> task -> rows
    capabilities: dict[str, int]  # test rows per capability (a row counts for each of its capabilities)
    violations: dict[str, int]  # DPO rows per violation kind
    roles: dict[str, int] = field(default_factory=dict)  # split -> roles
    passages: dict[str, int] = field(default_factory=dict)  # split -> passages
    groups: dict[str, int] = field(default_factory=dict)  # held-out split: rows per group (level, priority variant)
    overlap: dict[str, Any] = field(default_factory=dict)  # held-out split: its 8-gram overlap with training data


def _rng(seed: int, part: str) -> random.Random:
    return random.Random(f"{seed}:{part}")


def _check(turns: list[Turn], must_end_with: Role) -> None:
    problem = validate_conversation(turns, must_end_with=must_end_with)
    if problem:  # a synthesizer bug, never a user mistake
        raise AssertionError(f"synthesized an invalid conversation: {problem}")


def _test_row(ep: Episode) -> TestRow:
    _check(ep.prompt, "user")
    return TestRow(
        ep.prompt, ep.chosen, ep.task, {"expect": ep.expect, "role": ep.role.id, "passage_id": ep.passage.id}
    )


def _sft_row(ep: Episode) -> SFTRow:
    turns = [*ep.prompt, Turn("assistant", ep.chosen)]
    _check(turns, "assistant")
    return SFTRow(turns, {**ep.meta(), "category": _category(ep.task)})


def _dpo_row(ep: Episode, rng: random.Random, style_rate: float) -> DPORow:
    _check(ep.prompt, "user")
    style = sorted(k for k in ep.violations if VIOLATIONS[k].value == "role_style")
    behaviour = sorted(k for k in ep.violations if k not in style)
    kind = rng.choice(style if rng.random() < style_rate else behaviour)
    extra = {**ep.meta(), "violation": kind, "violated": VIOLATIONS[kind].value, "expect": ep.expect}
    return DPORow(ep.prompt, ep.chosen, ep.violations[kind], extra)


def _category(task: str) -> str:
    suffix = shape_of(task).suffix
    return {"": "mrc", "refused": "priority"}.get(suffix, "nested" if suffix.startswith("special") else "multi_turn")


def build_test(cfg: SynthesisConfig, roles: list[RoleProfile], pool: list[Passage]) -> list[TestRow]:
    rng = _rng(cfg.seed, "test")
    rows = []
    for spec in TASKS:
        for i in range(cfg.test_count(spec.published_count)):
            rows.append(_test_row(build_episode(spec.name, roles[i % len(roles)], pool, rng)))
    return rows


def build_train(
    cfg: SynthesisConfig, roles: list[RoleProfile], pool: list[Passage]
) -> tuple[list[SFTRow], list[DPORow]]:
    sft_rng, dpo_rng, pick_rng, chat_rng = (_rng(cfg.seed, p) for p in ("sft", "dpo", "dpo-pick", "chat"))
    sft: list[SFTRow] = []
    dpo: list[DPORow] = []
    for role in roles:
        for spec in TASKS:
            sft += [_sft_row(build_episode(spec.name, role, pool, sft_rng)) for _ in range(cfg.sft_count(spec.name))]
            dpo += [
                _dpo_row(build_episode(spec.name, role, pool, dpo_rng), pick_rng, cfg.style_violation_rate)
                for _ in range(cfg.dpo_per_task)
            ]
        sft += [free_chat(role, chat_rng) for _ in range(cfg.free_chats)]
    _rng(cfg.seed, "shuffle-sft").shuffle(sft)
    _rng(cfg.seed, "shuffle-dpo").shuffle(dpo)
    return sft, dpo


def _split_pool(cfg: SynthesisConfig, pool: list[Passage]) -> tuple[list[Passage], list[Passage]]:
    cut = cfg.passages_per_domain - cfg.test_passages_per_domain
    train = [p for p in pool if int(p.id.rsplit("-", 1)[1]) < cut]
    test = [p for p in pool if int(p.id.rsplit("-", 1)[1]) >= cut]
    return train, test


def synthesize(out_dir: str | Path, n_roles: int = 40, seed: int = 0, **options: Any) -> SynthesisSummary:
    """Write profiles/passages/sft/dpo/test JSONL files under ``out_dir``; ``options`` are SynthesisConfig fields."""
    cfg = SynthesisConfig(n_roles=n_roles, seed=seed, **options)
    out = _prepare(out_dir)
    pool = build_pool(_rng(seed, "passages"), cfg.passages_per_domain)
    train_pool, test_pool = _split_pool(cfg, pool)
    profiles = build_profiles(_rng(seed, "profiles"), cfg.n_roles, cfg.n_test_roles)
    train_roles = [r for r in profiles if r.split == "train"]
    test_roles = [r for r in profiles if r.split == "test"]
    test = build_test(cfg, test_roles, test_pool)
    sft, dpo = build_train(cfg, train_roles, train_pool)
    test_ids = {p.id for p in test_pool}
    passages = [{**to_json(p), "split": "test" if p.id in test_ids else "train"} for p in pool]
    counts = write_dataset(
        out,
        {
            DataDir.PROFILES: profiles,
            DataDir.PASSAGES: passages,
            DataDir.SFT: sft,
            DataDir.DPO: dpo,
            DataDir.TEST: test,
        },
    )
    return _summary(out, counts, sft, dpo, test, (len(train_roles), len(test_roles)), (len(train_pool), len(test_pool)))


def _prepare(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ProbeError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProbeError(f"--out {out}: cannot create the directory ({exc.strerror})") from None
    return out


def _summary(
    out: Path,
    counts: dict[str, int],
    sft: list[SFTRow],
    dpo: list[DPORow],
    test: list[TestRow],
    roles: tuple[int, int],
    passages: tuple[int, int],
) -> SynthesisSummary:
    caps: Counter[str] = Counter()
    for row in test:
        caps.update(c.value for c in capabilities_of(row.task))
    tasks = {
        DataDir.SFT: dict(sorted(Counter(str(r.extra["task"]) for r in sft).items())),
        DataDir.DPO: dict(sorted(Counter(str(r.extra["task"]) for r in dpo).items())),
        DataDir.TEST: dict(sorted(Counter(r.task for r in test).items())),
    }
    violations = dict(sorted(Counter(str(r.extra["violation"]) for r in dpo).items()))
    return SynthesisSummary(
        str(out),
        counts,
        tasks,
        dict(caps),
        violations,
        {"train": roles[0], "test": roles[1]},
        {"train": passages[0], "test": passages[1]},
    )
