"""End to end against a REAL OpenAI-compatible server: ``transformers serve`` on 127.0.0.1.

The served model is the session's tiny random Llama, so its replies are byte soup:
exactly the situation where a pipeline must count failures instead of inventing data.
We assert that requests really reached the server (its own access log), that judge
replies that cannot be parsed are undecided (None), not 0, that LLM synthesis reports
its failures per stage, and that whatever rows it does write pass the schema readers.
The server is stopped by its PID in the fixture teardown, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.capabilities import Capability
from core.schema import TestRow, Turn
from judging.agreement import score_table
from judging.client.client import ClientConfig
from judging.llm import LLMJudge
from tests.support.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.server]
STARTUP_SECONDS = 120


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200 and json.loads(response.read()).get("status") == "ok"
    except (OSError, ValueError):
        return False


class Served:
    def __init__(self, base_url: str, model: str, log: Path) -> None:
        self.base_url, self.model, self.log = base_url, model, log

    def chat_posts(self) -> int:
        """Chat completion requests in the server's own access log."""
        return self.log.read_text(encoding="utf-8", errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    pytest.importorskip(
        "fastapi", reason="`transformers serve` needs transformers[serving] (pinned in the test extras)"
    )
    pytest.importorskip(
        "uvicorn", reason="`transformers serve` needs transformers[serving] (pinned in the test extras)"
    )
    root = tmp_path_factory.mktemp("serve")
    hub_cache = root / "hub"
    hub_cache.mkdir()  # /v1/models answers 500 without an existing hub cache (stack.md §7)
    port, log = free_port(), root / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "TOKENIZERS_PARALLELISM": "false"}
    command = [
        str(Path(sys.executable).parent / "transformers"),
        "serve",
        str(tiny_model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
    ]
    with log.open("w") as handle:
        proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _healthy(f"http://127.0.0.1:{port}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"transformers serve did not become healthy (exit {proc.poll()}):\n{log.read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield Served(f"http://127.0.0.1:{port}/v1", str(tiny_model_dir), log)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _config(served: Served, cache: Path, **kw: object) -> ClientConfig:
    values: dict[str, object] = {
        "base_url": served.base_url,
        "model": served.model,
        "cache_dir": cache,
        "concurrency": 2,
        "max_retries": 1,
        "backoff_base": 0.05,
        "timeout": 60.0,
        "max_tokens": 24,
    }
    values.update(kw)
    return ClientConfig(**values)  # type: ignore[arg-type]


def test_judging_pass_through_a_real_server(served: Served, tmp_path: Path) -> None:
    system = Turn("system", "You are Mara, a river pilot. Passage: The bridge opened in 1902.")
    rows = [
        TestRow([system, Turn("user", "When did the bridge open?")], "1902.", "role_related_mrc_answer_with_narration"),
        TestRow(
            [system, Turn("user", "Who built it?"), Turn("assistant", "I cannot say."), Turn("user", "Try anyway.")],
            "No answer.",
            "role_related_mrc_refused_no_narration-2ndrefused",
        ),
    ]
    before = served.chat_posts()
    judge = LLMJudge(_config(served, tmp_path / "cache"))
    verdicts = judge.judge(rows, ["*nods* In 1902.", "I still cannot say."])
    assert served.chat_posts() - before == 3  # K + S for row 0, M for row 1: every call reached the server
    assert judge.client.stats.requests == 3 and judge.client.stats.failures == 0
    assert set(verdicts[0].scores) == {Capability.KNOWLEDGE_BOUNDARY, Capability.ROLE_STYLE}
    table = score_table(verdicts)
    for cap in (Capability.KNOWLEDGE_BOUNDARY, Capability.ROLE_STYLE, Capability.MULTI_TURN):
        assert table[cap].total == 1 and table[cap].scored + table[cap].undecided == 1
    # A second pass is answered from the cache: no new request reaches the server.
    again = LLMJudge(_config(served, tmp_path / "cache"))
    assert [v.scores for v in again.judge(rows, ["*nods* In 1902.", "I still cannot say."])] == [
        v.scores for v in verdicts
    ]
    assert served.chat_posts() - before == 3 and again.client.stats.cache_hits == 3


def test_wrong_model_name_is_a_clear_error(served: Served, tmp_path: Path) -> None:
    from core.errors import ProbeError
    from judging.client.client import LLMClient

    client = LLMClient(_config(served, tmp_path / "c", model="not-the-served-path"))
    with pytest.raises(ProbeError) as info:
        client.chat([{"role": "user", "content": "hi"}])
    assert "HTTP 400" in str(info.value) and served.base_url in str(info.value) and "\n" not in str(info.value)


def test_llm_synthesis_through_a_real_server_counts_every_failure(served: Served, tmp_path: Path) -> None:
    from data_synthesis.llm.synthesis import SynthesisFailed, synthesize_llm

    before = served.chat_posts()
    small = {"sft_base": 1, "sft_nested": 1, "sft_priority": 1, "sft_multi_turn": 1, "free_chats": 1, "dpo_per_task": 1}
    with pytest.raises(SynthesisFailed) as info:
        synthesize_llm(
            tmp_path / "out", n_roles=2, seed=0, client_config=_config(served, tmp_path / "cache"), repairs=1, **small
        )
    # The tiny random model cannot write a JSON profile: every persona fails after one repair round,
    # and every failure is counted (2 personas x 2 attempts reached the server).
    assert served.chat_posts() - before == 4 == info.value.requests["requests"]
    assert info.value.failures["failed"] == {"profiles": 2} and info.value.failures["examples"]["profiles"]
    # No row for any file: nothing is written (it used to write an empty dataset and succeed).
    assert "no valid rows for profiles.jsonl" in str(info.value) and not (tmp_path / "out").exists()
