"""Fault matrix: ``probe synthesize --backend llm`` and ``probe judge`` against a loopback server that fails.

Every case runs the real command (``probe_cli.main.main`` in this process, the real
``openai`` client, a real HTTP server on 127.0.0.1 from :mod:`tests.support.scripted_server`)
with short limits (``--timeout 1 --retries 2 --backoff 0.05``). Each fault is played
twice: once as a *transient* fault (the first request fails, the rest are answered), which
must end in exit 0 after a retry, and once as a *persistent* fault (every request fails),
which must end in exactly one ``error:`` line naming the endpoint and what went wrong, exit
2, and, for synthesize, nothing written. Both must finish within ``BOUND_S``; the measured
seconds are printed per case (``pytest -s``). Afterwards every file the case wrote (data,
reply cache, request log, verdicts) is scanned for the API key, which the server also
echoes back in its 500 message.

The data-loss case of issue #16 is here too: a synthesis whose every reply fails
validation must exit 2 and leave an existing dataset byte for byte as it was (it used to
replace it with empty files and exit 0), and must not create a new one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from data_synthesis.offline import FILES, synthesize
from probe_cli.main import main
from tests.support.judge_files import write_judge_files
from tests.support.ports import free_port
from tests.support.scripted_llm import GoodLLM
from tests.support.scripted_server import Received, ScriptedServer, Step, completion

pytestmark = pytest.mark.server
SECRET = "sk-fault-matrix-DO-NOT-LEAK-31337"
# a 1 s timeout: at 0.5 s an immediate HTTP 429 from the scripted server once read as a timeout on the loaded
# 2-core machine (2026-11-30)
TIMEOUT_S = 1
LIMITS = ["--timeout", str(TIMEOUT_S), "--retries", "2", "--backoff", "0.05"]
ATTEMPTS = 3
BOUND_S = 20.0  # per case, on a loaded 2-core machine; the worst case is 3 x 1 s timeouts or 2 x 1 s Retry-After


@dataclass(frozen=True)
class Fault:
    step: Step | None  # None: nothing listens on the port
    needle: str  # in the error line of the persistent variant
    flags: tuple[str, ...] = ()


FAULTS = {
    "http-500": Fault(Step(500, message=f"upstream rejected key {SECRET}"), "HTTP 500"),
    "http-429": Fault(Step(429), "HTTP 429"),
    "http-429-retry-after": Fault(Step(429, retry_after="1"), "HTTP 429"),
    "non-json-200": Fault(
        Step(body="<<this is not JSON>>", content_type="application/json"), "the body is not valid JSON"
    ),
    "empty-choices": Fault(
        Step(body=json.dumps({**completion("x"), "choices": []}), content_type="application/json"),
        "not a chat completion",
    ),
    "truncated-body": Fault(Step(fault="truncate"), "the connection broke before the reply was complete"),
    "reset-mid-body": Fault(Step(fault="reset"), "the connection broke before the reply was complete"),
    "slower-than-timeout": Fault(Step(delay=3.0, content="late"), f"timed out after {TIMEOUT_S}s"),
    "refused": Fault(None, "refused (is a server listening there?)", ("--retries", "4", "--backoff", "0.1")),
}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    seconds: float


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Result:
    """``probe ARGV`` in this process, with the key in the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    started = time.monotonic()
    with pytest.raises(SystemExit) as info:
        main(argv)
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    return Result(int(info.value.code or 0), out, err, seconds)


def assert_no_key_on_disk(root: Path) -> None:
    written = [p for p in root.rglob("*") if p.is_file()]
    assert written, f"nothing written under {root}"
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path


def assert_one_error_line(result: Result, *needles: str) -> str:
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in (*needles, "after"):
        assert needle in lines[0], lines[0]
    assert SECRET not in result.stderr + result.stdout
    return lines[0]


@pytest.fixture(scope="module")
def judge_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_judge_files(tmp_path_factory.mktemp("fault-judge"), n_roles=2, seed=5)


def command(kind: str, base_url: str, tmp_path: Path, judge_files: tuple[Path, Path], seed: int) -> list[str]:
    common = ["--model", "scripted", "--base-url", base_url, "--cache-dir", str(tmp_path / "cache"), "--json", *LIMITS]
    if kind == "synthesize":
        return [
            "synthesize",
            "--backend",
            "llm",
            "--out",
            str(tmp_path / "out"),
            "--roles",
            "2",
            "--seed",
            str(seed),
            *common,
        ]
    data, responses = judge_files
    return [
        "judge",
        "--data",
        str(data),
        "--responses",
        str(responses),
        "--judge",
        "llm",
        "--limit",
        "1",
        "--verdicts-out",
        str(tmp_path / "verdicts.jsonl"),
        *common,
    ]


def responder(kind: str) -> Callable[[dict], str]:
    return GoodLLM() if kind == "synthesize" else (lambda _request: "Score: 1")


@dataclass
class Endpoint:
    base_url: str
    servers: list[ScriptedServer]

    def requests(self) -> list[Received]:
        return [r for s in self.servers for r in s.chat_requests]


def endpoint(fault: Fault, kind: str, transient: bool) -> Endpoint:
    """A server playing ``fault`` once (then answering) or for ever; for ``refused``, one that starts late or never."""
    if fault.step is None:
        port = free_port()
        found = Endpoint(f"http://127.0.0.1:{port}/v1", [])
        if transient:

            def start_late() -> None:
                found.servers.append(ScriptedServer(responder=responder(kind), port=port, lifetime=60).start())

            timer = threading.Timer(0.4, start_late)
            timer.daemon = True
            timer.start()
        return found
    script = [fault.step] if transient else [fault.step] * 200
    server = ScriptedServer(script, responder=responder(kind), lifetime=60).start()
    return Endpoint(server.base_url, [server])


@pytest.mark.parametrize("transient", [True, False], ids=["transient", "persistent"])
@pytest.mark.parametrize("case", list(FAULTS))
@pytest.mark.parametrize("kind", ["synthesize", "judge"])
def test_fault_ends_in_success_after_a_retry_or_in_one_line(
    kind: str,
    case: str,
    transient: bool,
    tmp_path: Path,
    judge_files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fault = FAULTS[case]
    found = endpoint(fault, kind, transient)
    try:
        argv = command(kind, found.base_url, tmp_path, judge_files, seed=sorted(FAULTS).index(case)) + list(fault.flags)
        result = run(capsys, monkeypatch, argv)
    finally:
        for server in found.servers:
            server.stop()
    outcome = "exit 0" if result.code == 0 else result.stderr.strip()
    print(
        f"\n{kind:10} {case:22} {'transient' if transient else 'persistent':10} {result.seconds:6.2f} "
        f"s  {outcome[:150]}"
    )
    assert result.seconds < BOUND_S, result.seconds
    if transient:
        assert result.code == 0, result.stderr
        report = json.loads(result.stdout)
        stats = report["requests"] if kind == "synthesize" else report["client_stats"]
        assert stats["retries"] >= 1 and stats["failures"] == 0, stats
        if case == "http-429-retry-after":
            first, *rest = found.requests()
            again = next(r for r in rest if r.body == first.body)
            assert again.time - first.time >= 0.95, "Retry-After: 1 was not honoured"
    else:
        line = assert_one_error_line(
            result, found.base_url, fault.needle, f"{ATTEMPTS if not fault.flags else 5} attempt(s)"
        )
        if kind == "synthesize":
            assert "nothing was written" in line and not (tmp_path / "out").exists()
        else:
            assert "no verdict was written" in line and not (tmp_path / "verdicts.jsonl").exists()
        if found.servers:
            assert len(found.requests()) <= ATTEMPTS * 4  # at most --concurrency requests, each tried 3 times
    assert_no_key_on_disk(tmp_path)


# ---- the data loss of issue #16, row 1 -------------------------------------------------------


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("reply", ["no JSON at all", "{}"])
def test_replies_that_all_fail_validation_leave_an_existing_dataset_as_it_was(
    reply: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = tmp_path / "existing"
    synthesize(existing, n_roles=2, seed=0)
    before = _snapshot(existing)
    with ScriptedServer(responder=lambda _request: reply) as server:
        args = ["--model", "scripted", "--base-url", server.base_url, "--roles", "2", *LIMITS]
        kept = run(
            capsys,
            monkeypatch,
            ["synthesize", "--backend", "llm", "--out", str(existing), "--cache-dir", str(tmp_path / "cache"), *args],
        )
        fresh = run(
            capsys, monkeypatch, ["synthesize", "--backend", "llm", "--out", str(tmp_path / "new"), "--no-cache", *args]
        )
    for result in (kept, fresh):
        assert result.code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: LLM synthesis produced no valid rows for "), (
            result.stderr
        )
        assert "nothing was written" in lines[0] and "stayed invalid after 2 repair round(s)" in lines[0]
    assert _snapshot(existing) == before  # same files, same bytes, not even rewritten
    assert sorted(before) == sorted(FILES)
    assert not (tmp_path / "new").exists()
    assert_no_key_on_disk(tmp_path)


def test_library_raises_with_the_counts_and_writes_nothing(tmp_path: Path) -> None:
    from data_synthesis.llm.synthesis import SynthesisFailed, synthesize_llm
    from judging.client.client import ClientConfig

    with ScriptedServer(responder=lambda _request: "{}") as server:
        config = ClientConfig(base_url=server.base_url, model="scripted", cache_dir=None, backoff_base=0.01)
        with pytest.raises(SynthesisFailed) as info:
            synthesize_llm(tmp_path / "out", n_roles=2, seed=0, client_config=config, repairs=1)
        sent = len(server.chat_requests)
    assert info.value.failures["failed"] == {"profiles": 2} and info.value.requests["requests"] == sent == 4
    assert "profiles.jsonl" in str(info.value) and not (tmp_path / "out").exists()


def test_endpoint_flags_are_refused_where_no_endpoint_is_called(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(
        capsys,
        monkeypatch,
        ["synthesize", "--out", str(tmp_path / "out"), "--roles", "2", "--timeout", "5", "--retries", "1"],
    )
    assert result.code == 2 and result.stderr.strip() == (
        "error: --max-retries, --timeout: only for --backend llm (the offline backend calls no endpoint)"
    )
    assert not (tmp_path / "out").exists()


# ---- core.atomic: the writer the synthesis relies on ---------------------------------------


def test_a_file_set_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    from core.atomic import replace_together

    names = ["sft.jsonl", "dpo.jsonl", "test.jsonl"]
    for name in names:
        (tmp_path / name).write_text(f"old {name}\n")

    def disk_full(_handle: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        replace_together(
            {tmp_path / "sft.jsonl": "new", tmp_path / "dpo.jsonl": "new", tmp_path / "test.jsonl": disk_full}
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temporary file left behind
    assert all((tmp_path / n).read_text() == f"old {n}\n" for n in names)


def test_a_ctrl_c_during_the_renames_is_delivered_after_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    import core.atomic as atomic

    real_replace, calls = os.replace, []

    def replace_and_interrupt(src: str, dst: object) -> None:
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace_and_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic.replace_together({tmp_path / f"{i}.jsonl": f"new {i}" for i in range(3)})
    assert len(calls) == 3 and [(tmp_path / f"{i}.jsonl").read_text() for i in range(3)] == [
        f"new {i}" for i in range(3)
    ]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
