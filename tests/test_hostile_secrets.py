"""Secrets, round five: a key in ``--base-url``'s query string or fragment, and a key echoed back in hex or ``\\u``.

Generated cases, each through ``probe judge --judge llm`` in this process:

* every way a query string or fragment can ride on ``--base-url`` (or ``OPENAI_BASE_URL``), alone, after URL
  credentials, behind a scheme the client refuses: one ``error:`` line, exit 2, which shows no character of it, and
  nothing is sent;
* a real server on 127.0.0.1 that echoes the API key back in each of its encodings (as it is, percent-encoded,
  base64, hex and ``\\u``-escaped, each case where it has one), in an error message and in a reply: no 8 consecutive
  characters of any of those forms reach stdout, stderr, the log, the verdicts or any file of the reply cache.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from judging.client.scrub import MIN_SECRET_RUN
from tests.support.cli import exit_of
from tests.support.judge_files import write_judge_files
from tests.support.scripted_server import ScriptedServer

pytestmark = pytest.mark.server
KEY = "sk-live-Qm7vX2pL9tR4wZ8nB3kD6hJ1"
SECRET = "q5ZecretInTheQuery42"


@pytest.fixture(scope="module")
def judge_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_judge_files(tmp_path_factory.mktemp("secrets-judge"), n_roles=2, seed=5)


def _judge(files: tuple[Path, Path], base_url: str | None, tmp: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    data, responses = files
    argv = ["judge", "--data", str(data), "--responses", str(responses), "--judge", "llm", "--limit", "1"]
    argv += ["--model", "m", "--cache-dir", str(tmp / "cache"), "--verdicts-out", str(tmp / "verdicts.jsonl")]
    argv += ["--timeout", "5", "--retries", "0", "--concurrency", "1"]
    capsys.readouterr()
    return exit_of(argv + (["--base-url", base_url] if base_url else []), capsys)


QUERIES = {
    "a key in the query": "http://127.0.0.1:9/v1?api_key={s}",
    "a key among other parameters": "http://127.0.0.1:9/v1?model=x&key={s}&y=1",
    "a fragment": "http://127.0.0.1:9/v1#{s}",
    "a query and a fragment": "https://host.example/v1?k={s}#{s}",
    "a query right after the host": "http://127.0.0.1:9?{s}",
    "after URL credentials": "http://user:pw@127.0.0.1:9/v1?token={s}",
    "percent-encoded": "http://127.0.0.1:9/v1?k=" + quote("{s}") + "%26",
    "behind a refused scheme": "ftp://127.0.0.1/v1?key={s}",
    "with a space, which is refused too": "http://127.0.0.1:9/v 1?key={s}",
}


@pytest.mark.parametrize("source", ["--base-url", "OPENAI_BASE_URL"])
@pytest.mark.parametrize("case", list(QUERIES))
def test_a_base_url_with_a_query_or_fragment_is_one_line_that_does_not_show_it(
    case: str,
    source: str,
    judge_files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = QUERIES[case].format(s=SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    if source == "OPENAI_BASE_URL":
        monkeypatch.setenv("OPENAI_BASE_URL", url)
    code, out, err = _judge(judge_files, url if source == "--base-url" else None, tmp_path, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --base-url holds a query string"), err
    assert SECRET[:MIN_SECRET_RUN] not in out + err and SECRET[-MIN_SECRET_RUN:] not in out + err
    assert not (tmp_path / "verdicts.jsonl").exists()


def _forms(secret: str) -> dict[str, str]:
    raw = secret.encode()
    escaped = "".join(f"\\u{ord(c):04x}" for c in secret)
    return {
        "as it is": secret,
        "percent-encoded": quote(secret, safe=""),
        "every byte percent-encoded": "".join(f"%{b:02X}" for b in raw),
        "base64": base64.b64encode(raw).decode(),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "\\u-escaped": escaped,
        "\\u-escaped, upper case": escaped.upper().replace("\\U", "\\u"),
    }


def _runs(text: str) -> set[str]:
    return {text[i : i + MIN_SECRET_RUN] for i in range(len(text) - MIN_SECRET_RUN + 1)}


def _echo(form: str, fail: bool) -> Callable[[dict[str, Any]], str]:
    def respond(_request: dict[str, Any]) -> str:
        text = f"your key was {form}, kept for you"
        if fail:
            raise RuntimeError(text)  # the server's 500 carries it as its error message
        return "Score: 1\n" + text

    return respond


@pytest.mark.parametrize("fail", [True, False], ids=["in an error message", "in a reply"])
@pytest.mark.parametrize("name", list(_forms(KEY)))
def test_a_key_echoed_in_any_encoding_reaches_no_output_log_or_cache(
    name: str,
    fail: bool,
    judge_files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    form = _forms(KEY)[name]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    with ScriptedServer(lifetime=30) as server:
        server.responder = _echo(form, fail)
        code, out, err = _judge(judge_files, server.base_url, tmp_path, capsys)
    assert code == (2 if fail else 0), err
    runs = _runs(form)
    written = [p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    for where, text in {"stdout": out, "stderr": err, "log": caplog.text, "files": "\n".join(written)}.items():
        assert not [run for run in runs if run in text], (where, text[:500])
    if not fail:
        assert "kept for you" in "\n".join(written)  # the reply was cached, without the key
