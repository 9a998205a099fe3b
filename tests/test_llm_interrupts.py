"""Ctrl-C during an LLM call: ``probe synthesize --backend llm`` and ``probe judge`` in a real subprocess.

The loopback server holds one request (the ``HOLD``-th) for a minute, the way a slow or
stuck endpoint does; once the server has received it, the test sends the process a real
SIGINT. The command must exit 130 within ``BOUND_S`` seconds (it used to wait for the held
request: 57 s, with no message), print one ``interrupted:`` line saying how many replies the
reply cache kept and how to resume, and write nothing else. Rerunning the same command must
then give exactly what an uninterrupted run gives, sending only the requests that were not
answered before. The latencies are printed (``pytest -s``).

Only the interrupted run needs a process of its own (a real SIGINT); the uninterrupted run and
the rerun run in this process (:func:`tests.support.interrupts.probe_here`), with the same
environment, which saves two interpreter starts per case.

The scripted model is made deterministic (its answers depend only on the request, not on
the order requests arrive in), so an interrupted-and-resumed run and an uninterrupted one
can be compared byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from data_synthesis.offline import FILES
from tests.support.interrupts import probe_here
from tests.support.judge_files import write_judge_files
from tests.support.scripted_llm import GoodLLM
from tests.support.scripted_server import ScriptedServer

pytestmark = [pytest.mark.server, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-interrupt-DO-NOT-LEAK-2718"
BOUND_S = 8.0  # from SIGINT to exit, on a loaded 2-core machine
HOLD = 12  # the request the server holds


class SteadyLLM(GoodLLM):
    """GoodLLM whose answer depends only on the request: no order-dependent slips or choices."""

    def __init__(self) -> None:
        super().__init__()
        self.slipped = True
        self.order = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        digest = hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).digest()
        with self.order:
            self.calls = int.from_bytes(digest[:4], "big") - 1
            return super().__call__(request)


class Holding:
    """A responder that holds its ``HOLD``-th request until the server stops."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.count = 0
        self.lock = threading.Lock()
        self.held = threading.Event()
        self.server: ScriptedServer | None = None

    def __call__(self, request: dict[str, Any]) -> str:
        with self.lock:
            self.count += 1
            hold = self.count == HOLD
        if hold and self.server is not None:
            self.held.set()
            self.server.hold(60)
        return self.answer(request)


def probe(args: list[str], *, interrupt_when: threading.Event | None = None) -> tuple[int, str, str, float | None]:
    """``probe ARGS`` in a subprocess; a SIGINT once ``interrupt_when`` is set. Returns code, out, err, latency."""
    env = {
        **os.environ,
        "OPENAI_API_KEY": SECRET,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("OPENAI_BASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "probe_cli", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    sent = None
    if interrupt_when is not None:
        assert interrupt_when.wait(120), "the held request never arrived"
        time.sleep(0.2)  # let the client settle into waiting for the reply
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, None if sent is None else time.monotonic() - sent


def run_here(args: list[str]) -> tuple[int, str, str, float | None]:
    """``probe ARGS`` in this process, with the environment :func:`probe` gives its subprocess."""
    outcome = probe_here(args, env={"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": None})
    return outcome.code, outcome.stdout, outcome.stderr, None


def assert_interrupted(code: int, err: str, latency: float | None, what: str) -> int:
    """Exit 130 within the bound, one ``interrupted:`` line; returns the number of replies it says were kept."""
    assert code == 130, err
    assert latency is not None and latency < BOUND_S, latency
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: "), err
    assert what in lines[0] and "rerun the same command to resume" in lines[0], lines[0]
    found = re.search(r"(\d+) (?:judge )?replies (?:of this run )?are kept in the reply cache", lines[0])
    assert found is not None, lines[0]
    print(f"\nSIGINT -> exit 130 in {latency:.2f} s: {lines[0]}")
    return int(found.group(1))


def count_cached(cache: Path, kept: int) -> int:
    """Entries in the reply cache: what the message said, plus at most one other request in flight (--concurrency 2)."""
    cached = len(list(cache.glob("??/*.json")))
    assert HOLD - 2 <= kept <= cached <= kept + 1, (kept, cached)
    return cached


def no_key(root: Path) -> None:
    for path in (p for p in root.rglob("*") if p.is_file()):
        assert SECRET.encode() not in path.read_bytes(), path


def whole_interrupted_resumed(
    argv: Callable[[str, str, str], list[str]],
    answer: Callable[..., Any],
    holding: Holding,
    stopped: str,
    outs: tuple[str, str],
    tmp_path: Path,
) -> tuple[str, str, int]:
    """One run to the end into ``outs[0]``; the same command into ``outs[1]`` under Ctrl-C while ``holding`` holds
    requests (it must stop with ``stopped`` and leave ``outs[1]`` unwritten); then the rerun against the same
    endpoint, which must exit 0 and send only what the cache lacks. Returns the stdout of the whole run and of the
    rerun, and the requests of the whole run."""
    with ScriptedServer(responder=answer) as server:
        code, whole, err, _ = run_here(argv(outs[0], "cache-whole", server.base_url))
        assert code == 0, err
        total = len(server.chat_requests)
    with ScriptedServer(responder=holding) as server:
        holding.server = server
        code, out, err, latency = probe(argv(outs[1], "cache", server.base_url), interrupt_when=holding.held)
        port = server.port  # the cache is keyed by endpoint: the rerun talks to the same one
    kept = assert_interrupted(code, err, latency, stopped)
    assert not (tmp_path / outs[1]).exists() and out == ""
    cached = count_cached(tmp_path / "cache", kept)
    with ScriptedServer(responder=answer, port=port) as server:
        code, resumed, err, _ = run_here(argv(outs[1], "cache", server.base_url))
        resent = len(server.chat_requests)
    assert code == 0, err
    assert resent == total - cached  # only what was not answered before the Ctrl-C
    return whole, resumed, total


def test_ctrl_c_during_llm_synthesis_exits_at_once_and_the_rerun_resumes(tmp_path: Path) -> None:
    llm = SteadyLLM()
    holding = Holding(llm)

    def argv(out: str, cache: str, url: str) -> list[str]:
        return [
            "synthesize",
            "--backend",
            "llm",
            "--model",
            "scripted",
            "--base-url",
            url,
            "--roles",
            "2",
            "--seed",
            "4",
            "--out",
            str(tmp_path / out),
            "--cache-dir",
            str(tmp_path / cache),
            "--concurrency",
            "2",
            "--json",
        ]

    whole_interrupted_resumed(
        argv, llm, holding, "LLM synthesis stopped before writing anything", ("whole", "resumed"), tmp_path
    )
    for name in FILES:
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    no_key(tmp_path)


def test_ctrl_c_during_llm_judging_exits_at_once_and_the_rerun_resumes(tmp_path: Path) -> None:
    test_file, responses = write_judge_files(tmp_path, n_roles=2, seed=2)

    def answer(request: dict[str, Any]) -> str:
        return "Score: " + str(hashlib.sha256(request["messages"][-1]["content"].encode()).digest()[0] % 2)

    holding = Holding(answer)

    def argv(name: str, cache: str, url: str) -> list[str]:
        return [
            "judge",
            "--data",
            str(test_file),
            "--responses",
            str(responses),
            "--judge",
            "llm",
            "--model",
            "scripted",
            "--base-url",
            url,
            "--cache-dir",
            str(tmp_path / cache),
            "--concurrency",
            "2",
            "--limit",
            "12",
            "--verdicts-out",
            str(tmp_path / name),
            "--json",
        ]

    whole, resumed, total = whole_interrupted_resumed(
        argv,
        answer,
        holding,
        "LLM judging stopped before any verdict was written",
        ("whole.jsonl", "resumed.jsonl"),
        tmp_path,
    )
    assert total > HOLD
    assert json.loads(resumed)["scores"] == json.loads(whole)["scores"]
    assert (tmp_path / "resumed.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    no_key(tmp_path)
