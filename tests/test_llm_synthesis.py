"""LLM-backed synthesis against a scripted OpenAI-compatible server.

The scripted "LLM" follows the prompts the way a capable model would (it reads the
persona and the reply requirements), but some of its replies are chatty, fenced, or
wrong, so the repair path runs; one persona is never answered validly, so a failure
must be counted and its role dropped. The written files must load through the same
readers as offline output, with the same file set, schemas and ``expect`` blocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.capabilities import Capability, capabilities_of
from core.rows import read_dpo_rows, read_sft_rows, read_test_rows
from data_synthesis.llm.synthesis import REPORT_FILE, synthesize_llm
from data_synthesis.offline import FILES, synthesize
from judging.client.client import ClientConfig
from judging.rules import RuleJudge
from tests.support.scripted_llm import GoodLLM
from tests.support.scripted_server import ScriptedServer

SMALL = {"sft_base": 1, "sft_nested": 1, "sft_priority": 1, "sft_multi_turn": 1, "free_chats": 1, "dpo_per_task": 1}
BROKEN_PERSONA = "role-0001"


@pytest.fixture()
def broken_persona(monkeypatch: pytest.MonkeyPatch) -> None:
    """One seed persona whose name makes the scripted LLM reply '{}' forever."""
    from data_synthesis.llm import synthesis
    from data_synthesis.offline.profiles import build_profiles

    def seeds(rng: Any, n: int, n_test: int = 0) -> list[Any]:
        import dataclasses

        made = build_profiles(rng, n, n_test)
        return [dataclasses.replace(p, name="_never_ " + p.name) if p.id == BROKEN_PERSONA else p for p in made]

    monkeypatch.setattr(synthesis, "build_profiles", seeds)


@pytest.mark.usefixtures("broken_persona")
def test_llm_synthesis_writes_the_offline_file_set_and_counts_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    llm = GoodLLM()
    with ScriptedServer(responder=llm) as server:
        cfg = ClientConfig(
            base_url=server.base_url, model="scripted", cache_dir=tmp_path / "cache", concurrency=4, backoff_base=0.01
        )
        summary = synthesize_llm(tmp_path / "llm", n_roles=5, seed=3, client_config=cfg, **SMALL)
        sent = len(server.chat_requests)
    offline = synthesize(tmp_path / "offline", n_roles=5, seed=3, **SMALL)

    # Same files (plus the report), same schemas, loaded by the same readers.
    names = {p.name for p in (tmp_path / "llm").iterdir()}
    assert names == set(FILES) | {REPORT_FILE}
    test = read_test_rows(tmp_path / "llm" / "test.jsonl")
    sft = read_sft_rows(tmp_path / "llm" / "sft.jsonl")
    dpo = read_dpo_rows(tmp_path / "llm" / "dpo.jsonl")
    off_test = read_test_rows(tmp_path / "offline" / "test.jsonl")
    assert set(test[0].extra) == set(off_test[0].extra) and set(test[0].expect) == set(off_test[0].expect)  # type: ignore[arg-type]
    assert set(dpo[0].extra) == set(read_dpo_rows(tmp_path / "offline" / "dpo.jsonl")[0].extra)
    profiles = [json.loads(line) for line in (tmp_path / "llm" / "profiles.jsonl").read_text().splitlines()]
    off_profile = json.loads((tmp_path / "offline" / "profiles.jsonl").read_text().splitlines()[0])
    assert set(profiles[0]) == set(off_profile) | {"match"}

    # The broken persona is dropped and counted; the repaired replies are counted too.
    assert BROKEN_PERSONA not in {p["id"] for p in profiles} and len(profiles) == 4
    assert summary.failures["failed"] == {"profiles": 1} and summary.failures["total_failed"] == 1
    assert summary.failures["repaired"].get("profiles") == 1 and sum(summary.failures["repaired"].values()) >= 2
    assert "1 replies still invalid after 2 repair round(s) were dropped (profiles: 1)" in caplog.text
    report = json.loads((tmp_path / "llm" / REPORT_FILE).read_text())
    assert report["failures"] == summary.failures and report["requests"]["requests"] == sent

    # Every test row and every test task is there; every reference passes the rule judge.
    assert summary.files["test.jsonl"] == len(test) == offline.files["test.jsonl"]
    assert {r.task for r in test} == {r.task for r in off_test}
    judge = RuleJudge()
    for row in test:
        assert all(s == 1 for s in judge.judge_one(row, row.reference).scores.values()), row.task
    # Matching: relevant passage inside the role's domains, irrelevant outside; test roles only see test passages.
    split = {
        json.loads(line)["id"]: json.loads(line)["split"]
        for line in (tmp_path / "llm" / "passages.jsonl").read_text().splitlines()
    }
    for p in profiles:
        m = p["match"]
        assert len(m["relevant"]) == len(m["irrelevant"]) == 3 and m["relevant_scores"] == sorted(
            m["relevant_scores"], reverse=True
        )
        assert all(i.split("-")[0] in p["domains"] for i in m["relevant"]) and all(
            i.split("-")[0] not in p["domains"] for i in m["irrelevant"]
        )
        assert {split[i] for i in m["relevant"] + m["irrelevant"]} == {p["split"]}
    assert {r.extra["role"] for r in test} <= {p["id"] for p in profiles if p["split"] == "test"}
    # DPO chosen passes the capability the rejected violates.
    for row in dpo:
        cap = Capability(row.extra["violated"])
        probe = type(test[0])(row.prompt, row.chosen, row.extra["task"], {"expect": row.extra["expect"]})
        assert judge.check(probe, row.chosen, cap)[0] == 1 and judge.check(probe, row.rejected, cap)[0] == 0
    assert any(r.extra.get("task") == "free_chat" for r in sft)

    # A rerun is answered entirely from the cache: zero requests, identical bytes.
    with ScriptedServer(responder=llm, port=server.port) as again:
        cfg2 = ClientConfig(base_url=again.base_url, model="scripted", cache_dir=tmp_path / "cache")
        rerun = synthesize_llm(tmp_path / "llm2", n_roles=5, seed=3, client_config=cfg2, **SMALL)
        assert len(again.chat_requests) == 0 and rerun.requests["requests"] == 0
    for name in FILES:
        assert (tmp_path / "llm" / name).read_bytes() == (tmp_path / "llm2" / name).read_bytes(), name


def test_capabilities_cover_the_test_split(tmp_path: Path) -> None:
    with ScriptedServer(responder=GoodLLM()) as server:
        cfg = ClientConfig(base_url=server.base_url, model="scripted", cache_dir=None, concurrency=4)
        summary = synthesize_llm(tmp_path / "out", n_roles=3, seed=0, client_config=cfg, **SMALL)
    rows = read_test_rows(tmp_path / "out" / "test.jsonl")
    caps = {c.value for r in rows for c in capabilities_of(r.task)}
    assert caps == {c.value for c in Capability} and summary.failures["total_failed"] == 0


def test_retrieval_respects_domains_and_is_deterministic() -> None:
    from core.errors import ProbeError
    from data_synthesis.llm.retrieval import match_passages

    passages = [
        "ships sail on tides and ships carry crew",
        "the tide and the ship",
        "bread needs yeast",
        "the ship of bread",
    ]
    domains = ["sea", "sea", "food", "food"]
    m = match_passages(["a sailor on a ship"], passages, passage_domains=domains, role_domains=[["food"]], k=2)[0]
    # The most similar passages overall are about ships, but the role knows food: relevant stays inside its domains.
    assert set(m.relevant) == {2, 3} and m.relevant[0] == 3 and set(m.irrelevant) == {0, 1}
    again = match_passages(["a sailor on a ship"], passages, passage_domains=domains, role_domains=[["food"]], k=2)[0]
    assert again == m
    with pytest.raises(ProbeError, match="both inside and outside"):
        match_passages(["x"], passages, passage_domains=domains, role_domains=[["sea", "food"]])


def test_reply_extraction_and_repair_prompt() -> None:
    from pydantic import BaseModel

    from data_synthesis.llm.replies import InvalidReply, parse_reply, repair_messages

    class Reply(BaseModel):
        reply: str

    assert parse_reply('Use {braces} freely. {"reply": "ok"} trailing', Reply).reply == "ok"
    with pytest.raises(InvalidReply, match="reply: Field required"):
        parse_reply('{"answer": "x"}', Reply)
    fixed = repair_messages([{"role": "user", "content": "q"}], "bad", "reply: Field required")
    assert [m["role"] for m in fixed] == ["user", "assistant", "user"] and "reply: Field required" in fixed[-1][
        "content"
    ]
