"""``synthesize_llm``: the paper's three-stage synthesis with an LLM writing the text.

Stages (RoleMRC §3; the paper used GPT-4o):

1. **Profiles.** Seed personas (the offline generator's seeded names, occupations and
   towns) are expanded by the LLM into standardised profile cards; personality,
   catchphrase, gesture and knowledge domains are chosen from the offline closed
   vocabularies (validated with pydantic), so system prompts and cues stay learnable.
2. **Matching.** Each role is paired with its most relevant passages inside its domains
   and its least relevant passages outside them (3 of each by default), by TF-IDF
   retrieval over the passage pool (:mod:`data_synthesis.llm.retrieval`); test roles only
   see test passages.
3. **Dialogues.** For every episode (free chats, on-scene passage dialogues, ruled chats:
   nested, multi-turn, prioritised) the offline task builder lays out the prompt and the
   ``expect`` block; the LLM writes the character's reply, which must parse
   (:mod:`data_synthesis.llm.replies`) AND pass the rule judge on every capability of the
   task plus knowledge boundary and role style (a reference must keep behaviour and style). Failing replies are repaired
   with the judge's reasons; what still fails is dropped and counted per stage in the summary, never silently.

Output: exactly the offline generator's files, schemas, allocation and seeding rules
(``profiles.jsonl``, ``passages.jsonl``, ``sft.jsonl``, ``dpo.jsonl``, ``test.jsonl``), so
training and probing cannot tell the backends apart; DPO ``rejected`` replies are the
offline builders' realistic violations of the same episode. A ``synthesis_report.json``
next to them records failures, repairs and request counts.

Never good data replaced by worse: the file set is written only once every row exists,
all files to temporary names first and renamed together
(:func:`core.atomic.replace_together`). A run that yields no row for a file it was asked
to fill (every reply invalid: a wrong model, a broken endpoint) raises
:class:`SynthesisFailed` and writes nothing, so an existing dataset in ``out_dir`` stays as
it was. An endpoint that fails, or a Ctrl-C (:class:`~core.errors.Interrupted`), also
leaves ``out_dir`` untouched; every reply received is already in the reply cache, so
rerunning the same command resumes without asking again.

Example:
    >>> synthesize_llm("data/llm", n_roles=40, seed=0, client_config=ClientConfig(model="gpt-4o"), repairs=11)
    Traceback (most recent call last):
    core.errors.ProbeError: repairs must be an integer in [0, 10], got 11
    >>> cfg = ClientConfig.from_env(model="gpt-4o")                      # doctest: +SKIP
    >>> summary = synthesize_llm("data/llm", n_roles=40, seed=0, client_config=cfg)  # doctest: +SKIP
    >>> summary.failures["total_failed"]                                   # doctest: +SKIP
    3
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.atomic import replace_together
from core.capabilities import TASKS, Capability, capabilities_of
from core.errors import Interrupted, ProbeError
from core.paths import check_output_dir
from core.records import to_json
from core.run_dir import DataDir, Writer
from core.schema import DPORow, SFTRow, TestRow, Turn
from data_synthesis.llm import prompts
from data_synthesis.llm.replies import FailureLog, ask_validated
from data_synthesis.llm.retrieval import match_passages
from data_synthesis.offline import vocab
from data_synthesis.offline.chats import free_chat
from data_synthesis.offline.passages import Passage, build_pool
from data_synthesis.offline.profiles import RoleProfile, build_profiles
from data_synthesis.offline.synthesize import (
    SynthesisConfig,
    SynthesisSummary,
    _dpo_row,
    _rng,
    _sft_row,
    _split_pool,
    _summary,
    _test_row,
)
from data_synthesis.offline.tasks import Episode, build_episode, shape_of
from judging.client.client import ClientConfig, LLMClient

log = logging.getLogger("data_synthesis.llm")
REPORT_FILE = "synthesis_report.json"
# Every reference must keep behaviour and style, besides the capabilities its task is judged on.
_CHECKED: tuple[Capability, ...] = (Capability.KNOWLEDGE_BOUNDARY, Capability.ROLE_STYLE)


@dataclass
class LLMSynthesisSummary(SynthesisSummary):
    """The offline summary plus what the LLM cost and what failed (per stage)."""

    failures: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)


class SynthesisFailed(ProbeError):
    """No row for a file the run was asked to fill; nothing was written. Carries the counts for callers."""

    def __init__(self, message: str, failures: dict[str, Any], requests: dict[str, int]) -> None:
        super().__init__(message)
        self.failures = failures
        self.requests = requests


@dataclass
class _Run:
    client: LLMClient
    failures: FailureLog
    repairs: int


@dataclass
class _Built:
    roles: list[RoleProfile]
    matches: dict[str, dict[str, Any]]
    pool: list[Passage]
    test_pool: list[Passage]
    train_pool: list[Passage]
    sft: list[SFTRow]
    dpo: list[DPORow]
    test: list[TestRow]


def synthesize_llm(
    out_dir: str | Path,
    n_roles: int,
    seed: int,
    client_config: ClientConfig,
    *,
    repairs: int = 2,
    passages_per_role: int = 3,
    **options: Any,
) -> LLMSynthesisSummary:
    """Write the offline file set under ``out_dir`` with LLM-written profiles and replies.

    ``options`` are :class:`~data_synthesis.offline.SynthesisConfig` size fields (e.g.
    ``sft_base=1`` for a small run); ``repairs`` is the number of repair rounds per reply;
    ``passages_per_role`` the number of relevant (and of irrelevant) passages matched per role.
    Raises :class:`SynthesisFailed` (nothing written) when a requested file would be empty.
    """
    if isinstance(repairs, bool) or not isinstance(repairs, int) or not 0 <= repairs <= 10:
        raise ProbeError(f"repairs must be an integer in [0, 10], got {repairs!r}")
    cfg = SynthesisConfig(n_roles=n_roles, seed=seed, **options)
    out = check_output_dir(out_dir, "--out", writer=Writer.SYNTHESIZE)
    run = _Run(LLMClient(client_config), FailureLog(), repairs)
    with run.client.stops_explained(
        f"LLM synthesis stopped before writing anything to {out}",
        f"nothing was written to {out}",
        "replies of this run",
    ):
        built = _build(run, cfg, passages_per_role)
    _refuse_empty(out, run, _asked(cfg), built)
    return _write(out, run, client_config, built)


def _build(run: _Run, cfg: SynthesisConfig, passages_per_role: int) -> _Built:
    """Every row of every file, in memory; nothing is written here."""
    pool = build_pool(_rng(cfg.seed, "passages"), cfg.passages_per_domain)
    train_pool, test_pool = _split_pool(cfg, pool)
    roles = _profiles(run, build_profiles(_rng(cfg.seed, "profiles"), cfg.n_roles, cfg.n_test_roles))
    train_roles = [r for r in roles if r.split == "train"]
    test_roles = [r for r in roles if r.split == "test"]
    pools, matches = _match(train_roles, train_pool, passages_per_role)
    test_pools, test_matches = _match(test_roles, test_pool, passages_per_role)
    pools.update(test_pools)
    matches.update(test_matches)
    test = _build_test(run, cfg, test_roles, pools)
    sft, dpo = _build_train(run, cfg, train_roles, pools)
    return _Built(roles, matches, pool, test_pool, train_pool, sft, dpo, test)


def _asked(cfg: SynthesisConfig) -> dict[str, int]:
    """Rows each file would hold if every reply were valid."""
    n_train = cfg.n_roles - cfg.n_test_roles
    return {
        DataDir.PROFILES: cfg.n_roles,
        DataDir.SFT: n_train * (sum(cfg.sft_count(t.name) for t in TASKS) + cfg.free_chats),
        DataDir.DPO: n_train * len(TASKS) * cfg.dpo_per_task,
        DataDir.TEST: sum(cfg.test_count(t.published_count) for t in TASKS),
    }


def _refuse_empty(out: Path, run: _Run, asked: dict[str, int], built: _Built) -> None:
    got = {
        DataDir.PROFILES: len(built.roles),
        DataDir.SFT: len(built.sft),
        DataDir.DPO: len(built.dpo),
        DataDir.TEST: len(built.test),
    }
    empty = [name for name, n in asked.items() if n and not got[name]]
    if not empty:
        return
    failures = run.failures.as_dict()
    example = " ".join(next((e for shown in run.failures.examples.values() for e in shown), "none recorded").split())
    cache = run.client.cache.directory
    retry = (
        f"the replies are cached in {cache}: pass --no-cache to ask again"
        if cache is not None
        else "rerun to ask again"
    )
    raise SynthesisFailed(
        f"LLM synthesis produced no valid rows for {', '.join(empty)}: "
        f"{run.failures.total} replies stayed invalid after {run.repairs} repair round(s) (e.g. {example}); "
        f"nothing was written, {out} is as it was. Check --model and the endpoint; {retry}",
        failures,
        to_json(run.client.stats),
    )


def _write(out: Path, run: _Run, client_config: ClientConfig, built: _Built) -> LLMSynthesisSummary:
    """The offline file set plus the report, replaced together; the summary of what was written."""
    test_ids = {p.id for p in built.test_pool}
    rows: dict[str, list[Any]] = {
        DataDir.PROFILES: [{**to_json(r), "match": built.matches[r.id]} for r in built.roles],
        DataDir.PASSAGES: [{**to_json(p), "split": "test" if p.id in test_ids else "train"} for p in built.pool],
        DataDir.SFT: built.sft,
        DataDir.DPO: built.dpo,
        DataDir.TEST: built.test,
    }
    counts = {name: len(items) for name, items in rows.items()}
    n_test_roles = sum(1 for r in built.roles if r.split == "test")
    base = _summary(
        out,
        counts,
        built.sft,
        built.dpo,
        built.test,
        (len(built.roles) - n_test_roles, n_test_roles),
        (len(built.train_pool), len(built.test_pool)),
    )
    summary = LLMSynthesisSummary(**vars(base), failures=run.failures.as_dict(), requests=to_json(run.client.stats))
    report = {"failures": summary.failures, "requests": summary.requests, "endpoint": client_config.describe()}
    files: dict[Path, str] = {out / name: _jsonl(items) for name, items in rows.items()}
    files[out / REPORT_FILE] = json.dumps(report, indent=2) + "\n"
    try:
        replace_together(files)
    except KeyboardInterrupt:
        raise Interrupted(
            f"Ctrl-C while writing {out}: it holds either the old file set or the complete new one, never a mix; "
            f"{run.client.kept('replies of this run')}"
        ) from None
    except OSError as exc:
        raise ProbeError(
            f"--out {out}: cannot write the dataset ({exc.strerror or exc}); the old files are as they were; "
            f"{run.client.kept('replies of this run')}"
        ) from None
    if run.failures.total:
        per_stage = ", ".join(f"{k}: {v}" for k, v in sorted(run.failures.counts.items()))
        log.warning(
            "LLM synthesis: %d replies still invalid after %d repair round(s) were dropped (%s); details in %s",
            run.failures.total,
            run.repairs,
            per_stage,
            out / REPORT_FILE,
        )
    return summary


def _jsonl(rows: Iterable[Any]) -> str:
    """Rows (records or plain dicts) as JSON lines, byte for byte as the offline writer writes them."""
    return "".join(json.dumps(to_json(r), ensure_ascii=False) + "\n" for r in rows)


# ---------------------------------------------------------------- stage 1
def _profiles(run: _Run, seeds: list[RoleProfile]) -> list[RoleProfile]:
    """LLM-filled profile cards; a persona whose every repair failed is dropped (and counted)."""
    requests = [prompts.profile_request(s.description, s.name) for s in seeds]
    outcomes = ask_validated(
        run.client, requests, prompts.ProfileReply, stage="profiles", failures=run.failures, repairs=run.repairs
    )
    roles = []
    for seed, outcome in zip(seeds, outcomes, strict=True):
        card = outcome.value
        if card is not None:
            roles.append(
                RoleProfile(
                    seed.id,
                    seed.name,
                    card.description,
                    card.personality,
                    card.catchphrase,
                    card.gesture,
                    (card.domains[0], card.domains[1]),
                    seed.split,
                )
            )
    return roles


# ---------------------------------------------------------------- stage 2
def _profile_text(role: RoleProfile) -> str:
    return f"{role.description}. Knows {role.domains[0]} and {role.domains[1]}. {role.personality}."


def _match(
    roles: list[RoleProfile], pool: list[Passage], k: int
) -> tuple[dict[str, list[Passage]], dict[str, dict[str, Any]]]:
    """role id -> its k most relevant + k least relevant passages (and the scores, for profiles.jsonl)."""
    if not roles:
        return {}, {}
    found = match_passages(
        [_profile_text(r) for r in roles],
        [p.text for p in pool],
        passage_domains=[p.domain for p in pool],
        role_domains=[r.domains for r in roles],
        k=k,
    )
    pools = {r.id: [pool[j] for j in m.relevant + m.irrelevant] for r, m in zip(roles, found, strict=True)}
    scores = {
        r.id: {
            "relevant": [pool[j].id for j in m.relevant],
            "relevant_scores": [round(x, 4) for x in m.relevant_scores],
            "irrelevant": [pool[j].id for j in m.irrelevant],
            "irrelevant_scores": [round(x, 4) for x in m.irrelevant_scores],
        }
        for r, m in zip(roles, found, strict=True)
    }
    return pools, scores


# ---------------------------------------------------------------- stage 3
def _refusals(ep: Episode) -> dict[str, str]:
    """The fixed refusal / attempt wording of the offline policy for this episode's shape."""
    shape = shape_of(ep.task)
    if shape.suffix == "refused":
        return {"refusal": vocab.REFUSE_RULE}
    if shape.suffix == "2ndrefused":
        return {"refusal": f"{vocab.REFUSE_AGAIN_PREFIX} {vocab.REFUSE_UNANSWERABLE}"}
    if shape.suffix == "2ndanswer" or (not shape.related and shape.answer and not shape.suffix):
        return {"attempt": vocab.ATTEMPT_PREFIX}
    return {"refusal": vocab.REFUSE_UNANSWERABLE if shape.related else vocab.REFUSE_OUTSIDE}


def _write_replies(run: _Run, episodes: list[Episode], stage: str) -> list[Episode]:
    """Episodes whose ``chosen`` is the LLM's reply, checked by the rule judge; failures dropped and counted."""
    from judging.rules import RuleJudge

    judge = RuleJudge()

    def check(value: prompts.ReplyText, index: int) -> str | None:
        ep = episodes[index]
        row = TestRow(ep.prompt, ep.chosen, ep.task, {"expect": ep.expect})
        problems = []
        for cap in _CHECKED + tuple(c for c in capabilities_of(ep.task) if c not in _CHECKED):
            score, reason = judge.check(row, value.reply, cap)
            if score != 1:
                problems.append(f"{cap.value}: {reason}")
        return "; ".join(problems) or None

    requests = [prompts.reply_request(ep.prompt, ep.expect, _refusals(ep)) for ep in episodes]
    outcomes = ask_validated(
        run.client, requests, prompts.ReplyText, stage=stage, failures=run.failures, repairs=run.repairs, check=check
    )
    return [
        replace(ep, chosen=o.value.reply.strip())
        for ep, o in zip(episodes, outcomes, strict=True)
        if o.value is not None
    ]


def _build_test(
    run: _Run, cfg: SynthesisConfig, roles: list[RoleProfile], pools: dict[str, list[Passage]]
) -> list[TestRow]:
    rng = _rng(cfg.seed, "test")
    episodes = (
        [
            build_episode(spec.name, roles[i % len(roles)], pools[roles[i % len(roles)].id], rng)
            for spec in TASKS
            for i in range(cfg.test_count(spec.published_count))
        ]
        if roles
        else []
    )
    return [_test_row(ep) for ep in _write_replies(run, episodes, "test")]


def _build_train(
    run: _Run, cfg: SynthesisConfig, roles: list[RoleProfile], pools: dict[str, list[Passage]]
) -> tuple[list[SFTRow], list[DPORow]]:
    sft_rng, dpo_rng, pick_rng, chat_rng = (_rng(cfg.seed, p) for p in ("sft", "dpo", "dpo-pick", "chat"))
    sft_eps: list[Episode] = []
    dpo_eps: list[Episode] = []
    chats: list[SFTRow] = []
    for role in roles:
        for spec in TASKS:
            sft_eps += [
                build_episode(spec.name, role, pools[role.id], sft_rng) for _ in range(cfg.sft_count(spec.name))
            ]
            dpo_eps += [build_episode(spec.name, role, pools[role.id], dpo_rng) for _ in range(cfg.dpo_per_task)]
        chats += [free_chat(role, chat_rng) for _ in range(cfg.free_chats)]
    sft = [_sft_row(ep) for ep in _write_replies(run, sft_eps, "sft")] + _write_chats(
        run, chats, {r.id: r for r in roles}
    )
    dpo = [_dpo_row(ep, pick_rng, cfg.style_violation_rate) for ep in _write_replies(run, dpo_eps, "dpo")]
    _rng(cfg.seed, "shuffle-sft").shuffle(sft)
    _rng(cfg.seed, "shuffle-dpo").shuffle(dpo)
    return sft, dpo


def _write_chats(run: _Run, chats: Sequence[SFTRow], roles: dict[str, RoleProfile]) -> list[SFTRow]:
    """Free chats whose assistant turns the LLM rewrote in character (style checked)."""

    def shape(row: SFTRow) -> tuple[RoleProfile, bool, str]:
        role = roles[str(row.extra["role"])]
        narration = "with_narration" in str(row.extra.get("category", ""))
        return role, narration, (f"*{role.gesture}* {role.catchphrase}" if narration else role.catchphrase)

    def check(value: prompts.ChatReplies, index: int) -> str | None:
        row = chats[index]
        role, narration, _ = shape(row)
        wanted = sum(1 for t in row.conversations if t.role == "assistant")
        if len(value.replies) != wanted:
            return f"expected exactly {wanted} replies, got {len(value.replies)}"
        for i, reply in enumerate(value.replies, 1):
            if role.catchphrase not in reply:
                return f"reply {i} lacks the catchphrase {role.catchphrase!r}"
            if narration != (f"*{role.gesture}*" in reply) or (not narration and "*" in reply):
                return f"reply {i} must {'' if narration else 'not '}describe actions between asterisks"
        return None

    requests = []
    for row in chats:
        _, narration, start = shape(row)
        requests.append(
            prompts.chat_request(
                row.conversations, sum(1 for t in row.conversations if t.role == "assistant"), start, narration
            )
        )
    outcomes = ask_validated(
        run.client,
        requests,
        prompts.ChatReplies,
        stage="free_chat",
        failures=run.failures,
        repairs=run.repairs,
        check=check,
    )
    rewritten = []
    for row, outcome in zip(chats, outcomes, strict=True):
        if outcome.value is None:
            continue
        replies = iter(r.strip() for r in outcome.value.replies)
        turns = [Turn("assistant", next(replies)) if t.role == "assistant" else t for t in row.conversations]
        rewritten.append(SFTRow(turns, dict(row.extra)))
    return rewritten
