"""``probe judge`` end to end: real subprocess, real files, a scripted judge endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.judge_files import write_judge_files
from tests.support.scripted_server import ScriptedServer

ROOT = Path(__file__).parents[1]
SECRET = "sk-cli-secret-never-print-42"


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": SECRET, **(env or {})}
    full_env.pop("OPENAI_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "probe_cli", "judge", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def probe_here(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """The same command in this process (no interpreter start-up): exit code, stdout, stderr."""
    from probe_cli.main import main

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for key, value in {"OPENAI_API_KEY": SECRET, **(env or {})}.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["judge", *args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # Every third response is a bare refusal, the rest are the references (which pass the rule judge).
    return write_judge_files(
        tmp_path_factory.mktemp("judgecli"),
        n_roles=3,
        seed=1,
        respond=lambda i, row: {"index": i, "response": row["reference"] if i % 3 else "I cannot answer that."},
    )


@pytest.mark.slow
def test_judge_both_reports_scores_undecided_and_agreement(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, responses = files
    replies = iter(["Score: 1", "**0**", "hmm"] * 1000)
    with ScriptedServer(responder=lambda _request: next(replies)) as server:
        result = probe(
            "--data",
            str(data),
            "--responses",
            str(responses),
            "--judge",
            "both",
            "--model",
            "judge-m",
            "--base-url",
            server.base_url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--json",
            "--verdicts-out",
            str(tmp_path / "verdicts.jsonl"),
        )
        sent = len(server.chat_requests)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    llm, rules = report["scores"]["llm"], report["scores"]["rules"]
    assert sum(s["total"] for s in llm.values()) == sent == report["client_stats"]["requests"]
    assert sum(s["undecided"] for s in llm.values()) == sent // 3  # every "hmm" is undecided, not 0
    assert all(s["undecided"] == 0 for s in rules.values())
    for cap, a in report["agreement"].items():
        assert a["n"] == llm[cap]["scored"] and a["skipped"] == llm[cap]["undecided"]
        assert a["kappa"] is None or -1.0 <= a["kappa"] <= 1.0
    verdicts = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    assert len(verdicts) == report["rows"] and set(verdicts[0]) >= {"index", "task", "rules", "llm", "llm_reasons"}
    assert SECRET not in result.stdout + result.stderr
    assert not any(SECRET.encode() in p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())


def test_judge_table_and_errors(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, responses = files

    def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        return probe_here(capsys, monkeypatch, "--data", str(data), *args, env=env)

    code, out, _ = run("--responses", str(responses), "--judge", "rules")
    assert code == 0 and "knowledge_boundary" in out and "undecided" in out
    short = tmp_path / "short.jsonl"
    short.write_text('"only one"\n', encoding="utf-8")
    code, _, err = run("--responses", str(short))
    assert code == 2 and err.startswith("error: ") and "1 responses for" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(
        "--responses",
        str(responses),
        "--judge",
        "llm",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--max-retries",
        "0",
        "--cache-dir",
        str(tmp_path / "c"),
    )
    assert (
        code == 2
        and "LLM endpoint http://127.0.0.1:9/v1" in err
        and "connection failed" in err
        and "Traceback" not in err
    )
    code, _, err = run("--responses", str(responses), "--judge", "gpt")
    assert code == 2 and "--judge" in err
    code, _, err = run("--responses", str(responses), "--judge", "llm", env={"OPENAI_MODEL": ""})
    assert code == 2 and "no model given" in err
    uncached = tmp_path / "uncached"
    with ScriptedServer(responder=lambda _request: "1") as server:
        code, out, err = run(
            "--responses",
            str(responses),
            "--judge",
            "llm",
            "--model",
            "m",
            "--limit",
            "2",
            "--base-url",
            server.base_url,
            "--no-cache",
            "--cache-dir",
            str(uncached),
            "--json",
        )
    assert code == 0, err
    assert not uncached.exists() and len(server.chat_requests) == json.loads(out)["client_stats"]["requests"] >= 2
