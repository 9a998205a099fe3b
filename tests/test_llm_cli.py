"""``probe judge`` end to end: real subprocess, real files, a scripted judge endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_synthesis.llm.scripted_server import ScriptedServer
from data_synthesis.offline import synthesize

ROOT = Path(__file__).parents[1]
SECRET = "sk-cli-secret-never-print-42"


def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": SECRET, **(env or {})}
    full_env.pop("OPENAI_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "probe_cli", "judge", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("judgecli")
    synthesize(root / "data", n_roles=3, seed=1)
    rows = [json.loads(line) for line in (root / "data" / "test.jsonl").read_text().splitlines()]
    responses = root / "responses.jsonl"
    # Every third response is a bare refusal, the rest are the references (which pass the rule judge).
    responses.write_text("".join(json.dumps({"index": i, "response": r["reference"] if i % 3 else "I cannot answer that."}) + "\n"
                                 for i, r in enumerate(rows)), encoding="utf-8")
    return root / "data" / "test.jsonl", responses


@pytest.mark.slow
def test_judge_both_reports_scores_undecided_and_agreement(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, responses = files
    replies = iter(["Score: 1", "**0**", "hmm"] * 1000)
    with ScriptedServer(responder=lambda request: next(replies)) as server:
        result = probe("--data", str(data), "--responses", str(responses), "--judge", "both", "--model", "judge-m",
                       "--base-url", server.base_url, "--cache-dir", str(tmp_path / "cache"), "--json",
                       "--verdicts-out", str(tmp_path / "verdicts.jsonl"))
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


@pytest.mark.slow
def test_judge_table_and_errors(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, responses = files
    table = probe("--data", str(data), "--responses", str(responses), "--judge", "rules")
    assert table.returncode == 0, table.stderr
    assert "knowledge_boundary" in table.stdout and "undecided" in table.stdout
    short = tmp_path / "short.jsonl"
    short.write_text('"only one"\n', encoding="utf-8")
    bad = probe("--data", str(data), "--responses", str(short))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "1 responses for" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    down = probe("--data", str(data), "--responses", str(responses), "--judge", "llm", "--model", "m",
                 "--base-url", "http://127.0.0.1:9/v1", "--max-retries", "0", "--cache-dir", str(tmp_path / "c"))
    assert down.returncode == 2 and "Traceback" not in down.stderr
    assert "LLM endpoint http://127.0.0.1:9/v1" in down.stderr and "connection failed" in down.stderr
    wrong = probe("--data", str(data), "--responses", str(responses), "--judge", "gpt")
    assert wrong.returncode == 2 and "--judge" in wrong.stderr
    no_model = probe("--data", str(data), "--responses", str(responses), "--judge", "llm", env={"OPENAI_MODEL": ""})
    assert no_model.returncode == 2 and "no model given" in no_model.stderr
