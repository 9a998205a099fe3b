"""LLM client figures against a local scripted endpoint: overhead, concurrency, cache.

Prints (never asserts):
* client overhead per request on an instant local endpoint (openai client + cache write);
* speed-up from bounded concurrency when every reply takes 100 ms (target: >= 5x at 8);
* a rerun answered from the cache: requests sent (target: 0) and replies per second.

Usage: .venv/bin/python benchmarks/bench_llm.py [--n 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# the repo root: the scripted server lives in tests/support
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judging.client.client import ClientConfig, LLMClient
from tests.support.scripted_server import ScriptedServer


def _batch(n: int, tag: str) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{tag} {i}"}] for i in range(n)]


def _timed(client: LLMClient, batch: list[list[dict[str, str]]]) -> float:
    start = time.perf_counter()
    client.chat_many(batch)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    n = parser.parse_args().n
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedServer(responder=lambda _request: "Score: 1", lifetime=600) as fast,
    ):
        cache = Path(tmp) / "cache"
        cfg = ClientConfig(base_url=fast.base_url, model="bench", cache_dir=cache, concurrency=1)
        cold = _timed(LLMClient(cfg), _batch(n, "overhead"))
        print(f"overhead: {n} requests, concurrency 1, instant endpoint: {1000 * cold / n:.1f} ms/request")
        rerun_client = LLMClient(cfg)
        warm = _timed(rerun_client, _batch(n, "overhead"))
        sent = rerun_client.stats.requests
        print(f"cache rerun: {n} replies in {warm:.3f} s ({n / warm:.0f}/s), requests sent {sent} (target 0)")

    def slow(_request: dict) -> str:
        time.sleep(0.1)
        return "ok"

    with ScriptedServer(responder=slow, lifetime=600) as server:
        m = min(n, 48)
        base = ClientConfig(base_url=server.base_url, model="bench", cache_dir=None, concurrency=1)
        serial = _timed(LLMClient(base), _batch(m, "serial"))
        parallel = _timed(LLMClient(base.with_overrides(concurrency=8)), _batch(m, "parallel"))
        speedup = serial / parallel
        print(
            f"concurrency: {m} requests x 100 ms: serial {serial:.2f} s, concurrency 8 {parallel:.2f} s, "
            f"speed-up {speedup:.1f}x"
        )
    ok = sent == 0 and speedup >= 5
    print(f"verdict: {'PASS' if ok else 'BELOW TARGET'} (cache rerun sends 0 requests; concurrency 8 speed-up >= 5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
