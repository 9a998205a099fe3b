"""The LLM client against a scripted local HTTP server: retries, backoff, cache, key hygiene.

Every test talks to a real HTTP server on 127.0.0.1 through the real ``openai`` client;
the server plays 429 / 500 / garbage / slow replies from a script and records what it
received, so retries are counted on the wire, not inferred.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from core.errors import ProbeError
from core.records import to_json
from judging.client.client import ClientConfig, LLMClient
from tests.support.scripted_server import ScriptedServer, Step

pytestmark = pytest.mark.server
MSG = [{"role": "user", "content": "Say hi"}]


def config(server: ScriptedServer, tmp_path: Path | None, **kw: object) -> ClientConfig:
    values: dict[str, object] = {
        "base_url": server.base_url,
        "model": "scripted-model",
        "backoff_base": 0.01,
        "backoff_max": 2.0,
        "timeout": 5.0,
        "cache_dir": tmp_path / "cache" if tmp_path else None,
    }
    values.update(kw)
    return ClientConfig(**values)  # type: ignore[arg-type]


def test_every_fault_kind_is_retried_until_a_valid_reply(tmp_path: Path) -> None:
    script = [
        Step(429, retry_after="0"),
        Step(500),
        Step(503),
        Step(body="<html>bad gateway</html>"),
        Step(200, body='{"unexpected": true}'),
        Step(delay=1.0, content="too late"),
        Step(content="hi"),
    ]
    with ScriptedServer(script) as server:
        client = LLMClient(config(server, tmp_path, timeout=0.4, max_retries=6))
        reply = client.chat(MSG)
        assert reply.content == "hi" and not reply.cached
        assert len(server.chat_requests) == 7
        assert to_json(client.stats) == {"requests": 7, "answered": 1, "cache_hits": 0, "retries": 6, "failures": 0}
        body = server.chat_requests[-1].body
        assert (
            body is not None
            and body["model"] == "scripted-model"
            and body["temperature"] == 0.0
            and body["messages"] == MSG
        )


def test_backoff_grows_exponentially_and_honours_retry_after() -> None:
    with ScriptedServer([Step(500), Step(500), Step(500), Step(429, retry_after="0.5"), Step(content="ok")]) as server:
        client = LLMClient(config(server, None, backoff_base=0.1, max_retries=5))
        assert client.chat(MSG).content == "ok"
        times = [r.time for r in server.chat_requests]
    gaps = [b - a for a, b in pairwise(times)]
    # Lower bounds only (a slow machine makes gaps longer, never shorter): 0.1, 0.2, 0.4, then Retry-After 0.5.
    for gap, floor in zip(gaps, (0.1, 0.2, 0.4, 0.5), strict=True):
        assert gap >= floor * 0.95, gaps


def test_exhausted_retries_give_one_clear_line_naming_endpoint_and_status(tmp_path: Path) -> None:
    with ScriptedServer([Step(500)] * 10) as server:
        client = LLMClient(config(server, tmp_path, max_retries=2))
        with pytest.raises(ProbeError) as info:
            client.chat(MSG)
        assert len(server.chat_requests) == 3
    message = str(info.value)
    assert "\n" not in message
    assert server.base_url in message and "HTTP 500" in message and "after 3 attempt(s)" in message
    assert client.stats.failures == 1


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_retried(status: int) -> None:
    with ScriptedServer([Step(status), Step(content="never")]) as server:
        client = LLMClient(config(server, None, max_retries=5))
        with pytest.raises(ProbeError, match=f"HTTP {status}"):
            client.chat(MSG)
        assert len(server.chat_requests) == 1


def test_switches_to_max_completion_tokens_when_the_endpoint_asks() -> None:
    hint = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    with ScriptedServer([Step(400, message=hint)]) as server:
        client = LLMClient(config(server, None, max_tokens=33))
        assert client.chat(MSG).content == "ok" and client.chat([{"role": "user", "content": "2"}]).content == "ok"
        bodies = [r.body or {} for r in server.chat_requests]
    assert bodies[0]["max_tokens"] == 33
    assert [("max_tokens" in b, b.get("max_completion_tokens")) for b in bodies[1:]] == [(False, 33), (False, 33)]


def test_timeouts_and_refused_connections_end_in_clear_errors() -> None:
    with ScriptedServer([Step(delay=1.0, content="slow")] * 3) as server:
        client = LLMClient(config(server, None, timeout=0.2, max_retries=1))
        with pytest.raises(ProbeError, match=r"timed out after 0.2s after 2 attempt\(s\)"):
            client.chat(MSG)
        url = server.base_url
    dead = LLMClient(ClientConfig(base_url=url, model="m", cache_dir=None, max_retries=1, backoff_base=0.01))
    with pytest.raises(ProbeError, match="connection failed"):
        dead.chat(MSG)


def test_cache_makes_a_rerun_free_and_is_keyed_by_request(tmp_path: Path) -> None:
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(5)]
    with ScriptedServer(responder=lambda req: "answer to " + req["messages"][-1]["content"]) as server:
        first = LLMClient(config(server, tmp_path)).chat_many(prompts)
        again = LLMClient(config(server, tmp_path))
        second = again.chat_many(prompts)
        assert len(server.chat_requests) == 5
        assert (
            [r.content for r in first] == [r.content for r in second] == [f"answer to question {i}" for i in range(5)]
        )
        assert all(r.cached for r in second) and again.stats.requests == 0 and again.stats.cache_hits == 5
        # Identical requests within one batch are sent once.
        LLMClient(config(server, None)).chat_many([[{"role": "user", "content": "same"}]] * 4)
        assert len(server.chat_requests) == 6
        # Different sampling parameters or model are different requests.
        again.chat(prompts[0], temperature=0.7)
        LLMClient(config(server, tmp_path, model="other-model")).chat(prompts[0])
        assert len(server.chat_requests) == 8


def test_concurrency_is_bounded() -> None:
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(_request: dict) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return "ok"

    with ScriptedServer(responder=slow) as server:
        LLMClient(config(server, None, concurrency=3)).chat_many(
            [[{"role": "user", "content": str(i)}] for i in range(9)]
        )
    assert 2 <= state["peak"] <= 3


def test_a_fatal_error_stops_the_batch_but_keeps_what_was_answered(tmp_path: Path) -> None:
    def responder(request: dict) -> str:
        text = request["messages"][-1]["content"]
        if text == "q3":
            raise RuntimeError("boom")
        return "a" + text[1:]

    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]
    with ScriptedServer(responder=responder) as server:
        with pytest.raises(ProbeError, match="HTTP 500"):
            LLMClient(config(server, tmp_path, concurrency=1, max_retries=0)).chat_many(prompts)
        answered, port = len(server.chat_requests) - 1, server.port
    with ScriptedServer(responder=lambda r: "a" + r["messages"][-1]["content"][1:], port=port) as server:
        replies = LLMClient(config(server, tmp_path)).chat_many(prompts)
        assert [r.content for r in replies] == [f"a{i}" for i in range(6)]
        assert len(server.chat_requests) == 6 - answered


CRASHING_RUN = textwrap.dedent("""
    import sys
    from judging.client.client import ClientConfig, LLMClient
    config = ClientConfig(base_url=sys.argv[1], model="m", cache_dir=sys.argv[2], concurrency=1)
    LLMClient(config).chat_many([[{"role": "user", "content": f"q{i}"}] for i in range(10)])
""")


@pytest.mark.slow
def test_cache_survives_a_killed_run_and_the_resume_pays_only_for_the_rest(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    def responder(request: dict) -> str:
        text = request["messages"][-1]["content"]
        if int(text[1:]) >= 4:
            time.sleep(20)  # the run is killed while waiting here
        return "a" + text[1:]

    with ScriptedServer(responder=responder) as server:
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_RUN, server.base_url, str(cache)], cwd=Path(__file__).parents[1]
        )
        try:
            deadline = time.monotonic() + 60
            while len(server.chat_requests) < 5 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        port = server.port
    assert len(list(cache.glob("??/*.json"))) == 4
    assert not list(cache.glob("??/.*.tmp"))
    with ScriptedServer(responder=lambda r: "a" + r["messages"][-1]["content"][1:], port=port) as server:
        prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
        resumed = LLMClient(ClientConfig(base_url=server.base_url, model="m", cache_dir=cache)).chat_many(prompts)
        assert len(server.chat_requests) == 6  # q4..q9 only
        rerun = LLMClient(ClientConfig(base_url=server.base_url, model="m", cache_dir=cache))
        assert [r.content for r in rerun.chat_many(prompts)] == [r.content for r in resumed]
        assert len(server.chat_requests) == 6 and rerun.stats.requests == 0


def test_the_key_is_sent_but_never_written_to_cache_or_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-test-DO-NOT-LEAK-0123456789"
    monkeypatch.setenv("MY_LLM_KEY", secret)
    caplog.set_level(logging.DEBUG)
    with ScriptedServer([Step(429, retry_after="0"), Step(content="fine"), Step(401)]) as server:
        client = LLMClient(config(server, tmp_path, api_key_env="MY_LLM_KEY"))
        client.chat(MSG)
        with pytest.raises(ProbeError) as info:
            client.chat([{"role": "user", "content": "again"}])
        sent = {k.lower(): v for k, v in server.chat_requests[0].headers.items()}
    assert sent["authorization"] == f"Bearer {secret}"
    assert secret not in str(info.value) and secret not in caplog.text and secret not in repr(client.config)
    written = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert any(p.name == "requests.log" for p in written) and len(written) >= 2
    for path in written:
        assert secret.encode() not in path.read_bytes(), path


def test_config_validation_and_environment() -> None:
    with pytest.raises(ProbeError, match="--base-url"):
        ClientConfig(base_url="localhost:8000", model="m")
    with pytest.raises(ProbeError, match="no model given"):
        ClientConfig(base_url="http://127.0.0.1:1/v1", model="")
    with pytest.raises(ProbeError) as info:
        ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key_env="sk-abc123")
    assert "sk-abc123" not in str(info.value)
    with pytest.raises(ProbeError, match="--concurrency"):
        ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", concurrency=0)
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "env-model"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("OPENAI_API_KEY", raising=False)
        cfg = ClientConfig.from_env(concurrency=None, max_retries=1)
        assert (cfg.base_url, cfg.model, cfg.concurrency, cfg.max_retries) == (
            "http://127.0.0.1:9/v1",
            "env-model",
            4,
            1,
        )
        assert ClientConfig.from_env(base_url="http://127.0.0.1:7/v1", model="flag").model == "flag"
        assert cfg.api_key() == "EMPTY"  # local servers need no key
        with pytest.raises(ProbeError, match="set the environment variable OPENAI_API_KEY"):
            ClientConfig(base_url="https://api.openai.com/v1", model="gpt-4o").api_key()


@pytest.mark.slow
def test_ctrl_c_stops_sending_and_keeps_the_answers(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    def responder(request: dict) -> str:
        time.sleep(0.3)
        return "a" + request["messages"][-1]["content"][1:]

    with ScriptedServer(responder=responder) as server:
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_RUN, server.base_url, str(cache)],
            cwd=Path(__file__).parents[1],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while len(server.chat_requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        sent_before_stop = len(server.chat_requests)
        time.sleep(0.5)
        assert len(server.chat_requests) == sent_before_stop  # nothing more is sent after the interrupt
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    assert sent_before_stop <= 4 < 10  # the queued requests were dropped, not sent
    assert len(list(cache.glob("??/*.json"))) >= sent_before_stop - 1  # every answered request is cached


def test_a_call_from_inside_a_running_event_loop_works() -> None:
    """A notebook cell runs inside ipykernel's event loop: the exchange then runs on a loop of its own thread."""
    import asyncio

    async def cell(url: str) -> str:
        client = LLMClient(ClientConfig(base_url=url, model="m", cache_dir=None, max_retries=0))
        return client.chat(MSG).content

    with ScriptedServer(responder=lambda _request: "from a notebook") as server:
        assert asyncio.run(cell(server.base_url)) == "from a notebook"
