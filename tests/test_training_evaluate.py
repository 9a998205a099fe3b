"""Per-capability evaluation of a pair: generation + rule judge + paired statistics."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from core.capabilities import TASKS
from core.rows import read_test_rows
from core.stats import wilson
from data_synthesis.offline import synthesize
from training.eval_config import PairEvalConfig
from training.evaluate import (
    ModelEvaluation,
    PairEvaluation,
    add_base_columns,
    comparison_table,
    evaluate_pair,
    mcnemar_from_scores,
    select_rows,
)


@pytest.fixture(scope="module")
def test_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evaldata")
    synthesize(out, n_roles=5, seed=0)
    return out / "test.jsonl"


def test_select_rows_covers_every_task(test_file: Path) -> None:
    rows = read_test_rows(test_file)
    picked = select_rows(rows, 18)
    assert len(picked) == 18 and {r.task for r in picked} == {t.name for t in TASKS}
    assert select_rows(rows, None) == rows and select_rows(rows, 10_000) == rows


def test_paired_statistics() -> None:
    assert mcnemar_from_scores([1, 1, 0], [1, 1, 0]) == 1.0
    assert mcnemar_from_scores([1] * 12, [0] * 12) < 0.001
    low, high = wilson(8, 10)
    assert 0.4 < low < 0.8 < high < 1.0
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_table_counts_rows_in_each_of_their_capabilities() -> None:
    sft = ModelEvaluation(
        "a", ["", "", ""], [{"knowledge_boundary": 1, "role_style": 0}, {"multi_turn": 1}, {"multi_turn": None}]
    )
    dpo = ModelEvaluation(
        "b", ["", "", ""], [{"knowledge_boundary": 1, "role_style": 1}, {"multi_turn": 0}, {"multi_turn": 1}]
    )
    table = {r.capability: r for r in comparison_table(sft, dpo)}
    assert table["role_style"].sft_rate == 0.0 and table["role_style"].dpo_rate == 1.0
    assert (table["multi_turn"].sft_pass, table["multi_turn"].n) == (1, 1)  # undecided rows excluded
    assert (table["overall"].sft_pass, table["overall"].n) == (1, 2)  # row 0 fails on style
    assert table["overall"].dpo_pass == 2 and "priority" not in table


def test_the_dpo_minus_sft_interval_is_paired_and_brackets_the_difference() -> None:
    # 40 rows: DPO loses 10 that SFT passed and gains 2; both judged everywhere
    sft_scores = [1] * 30 + [0] * 10
    dpo_scores = [1] * 20 + [0] * 10 + [1] * 2 + [0] * 8
    sft = ModelEvaluation("a", [""] * 40, [{"multi_turn": v} for v in sft_scores])
    dpo = ModelEvaluation("b", [""] * 40, [{"multi_turn": v} for v in dpo_scores])
    row = {r.capability: r for r in comparison_table(sft, dpo)}["multi_turn"]
    low, high = row.delta_ci
    assert row.delta == pytest.approx(-0.2)
    assert low < -0.2 < high < 0.0  # 8 more losses than gains in 40 pairs: the interval excludes 0
    assert row.mcnemar_p == pytest.approx(0.0386, abs=1e-3)
    same = {r.capability: r for r in comparison_table(sft, sft)}["multi_turn"]
    assert same.delta_ci == (0.0, 0.0) and not same.has_base
    table = add_base_columns(
        comparison_table(sft, dpo), ModelEvaluation("base", [""] * 40, [{"multi_turn": 0}] * 40), sft
    )
    row = {r.capability: r for r in table}["multi_turn"]
    assert row.has_base and row.sft_minus_base == pytest.approx(0.75) and row.sft_minus_base_ci is not None
    assert 0.5 < row.sft_minus_base_ci[0] < 0.75 < row.sft_minus_base_ci[1] <= 1.0


def test_the_stored_table_keeps_its_keys_in_order_and_reads_back_as_the_same_typed_rows(tmp_path: Path) -> None:
    from core.records import read_record
    from study.stored import EvalRecord

    sft = ModelEvaluation("sft", [""] * 40, [{"multi_turn": v} for v in [1] * 30 + [0] * 10])
    dpo = ModelEvaluation("dpo", [""] * 40, [{"multi_turn": v} for v in [1] * 20 + [0] * 20])
    base = ModelEvaluation("base", [""] * 40, [{"multi_turn": 0}] * 40)
    table = add_base_columns(comparison_table(sft, dpo), base, sft)
    result = PairEvaluation("test.jsonl", {"t": 40}, "rules", {}, sft, dpo, table, base)
    path = result.save(tmp_path / "eval.json")
    stored = json.loads(path.read_text())["table"]
    assert list(stored[0]) == [
        *("capability", "n", "sft_pass", "sft_rate", "sft_ci", "dpo_pass", "dpo_rate", "dpo_ci", "delta"),
        *("delta_ci", "mcnemar_p", "base_pass", "base_rate", "base_ci", "sft_minus_base", "sft_minus_base_ci"),
        "base_mcnemar_p",
    ]
    assert read_record(EvalRecord, path, "evaluation").table == table
    without_base = PairEvaluation("test.jsonl", {"t": 40}, "rules", {}, sft, dpo, comparison_table(sft, dpo))
    assert "base_rate" not in json.loads(without_base.save(tmp_path / "plain.json").read_text())["table"][0]


@pytest.mark.slow
def test_evaluate_pair_on_tiny_models(tiny_pair: tuple[Path, Path], test_file: Path, tmp_path: Path) -> None:
    from access.generation import GenerationConfig

    sft, dpo = tiny_pair
    config = PairEvalConfig(
        test_file, sft_dir=sft, dpo_dir=dpo, max_rows=18, generation=GenerationConfig(max_new_tokens=6, batch_size=9)
    )
    result = evaluate_pair(config)
    assert result.judge == "rules" and result.base is None
    assert sum(result.task_counts.values()) == 18 and len(result.sft.responses) == 18
    caps = [r.capability for r in result.table]
    assert caps[-1] == "overall" and set(caps[:-1]) == {
        "knowledge_boundary",
        "role_style",
        "nested",
        "multi_turn",
        "priority",
    }
    assert all(0.0 <= r.sft_rate <= 1.0 and 0.0 <= r.mcnemar_p <= 1.0 for r in result.table)
    saved = result.save(tmp_path / "eval.json")
    assert saved.read_text().startswith("{")


@pytest.mark.slow
def test_each_models_generation_in_a_log_says_its_estimate_when_it_starts(
    tiny_pair: tuple[Path, Path],
    test_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``probe models eval`` and the replicate's evaluate stage say how long each model's generation should take
    before it starts (every batch decoding to the token limit, at the CPU pace), and count its batches in a log."""
    from access.generation import GenerationConfig
    from core.pace import batched_seconds
    from core.rows import read_test_rows
    from training import evaluate
    from training.evaluate import batch_plan, select_rows

    sft, dpo = tiny_pair
    generation = GenerationConfig(max_new_tokens=4, batch_size=6)
    config = PairEvalConfig(test_file, sft_dir=sft, dpo_dir=dpo, max_rows=12, generation=generation)

    def started() -> list[str]:
        evaluate_pair(config)
        return [line for line in capsys.readouterr().err.splitlines() if ": starting, " in line]

    # a tiny model's pace is its layers' fixed cost, not its size: the first batch gives the estimate
    assert started() == [
        f"generating ({m}): starting, 2 batches; estimate after the first batch" for m in ("sft", "dpo")
    ]
    big = 1e12  # a model this size: hours, so whole seconds say the estimate to the per mille
    monkeypatch.setattr(evaluate, "parameter_count", lambda _: big)
    lines = started()
    assert [line.split(":")[0] for line in lines] == ["generating (sft)", "generating (dpo)"]
    said = re.fullmatch(r"generating \(sft\): starting, 2 batches; estimate (\S+)", lines[0])
    assert said, lines
    from transformers import AutoTokenizer

    from core.chat import encode_conversations

    rows = select_rows(read_test_rows(test_file), 12)
    tokenizer = AutoTokenizer.from_pretrained(sft)
    prompts = encode_conversations(tokenizer, [r.question for r in rows], add_generation_prompt=True)
    batches = batch_plan([len(p) for p in prompts], 6)
    assert [len(b) for b in batches] == [6, 6]
    expected = batched_seconds([[len(prompts[i]) for i in b] for b in batches], 4, parameters=big)
    assert _seconds(said[1]) == pytest.approx(expected, abs=1)


def _seconds(clock: str) -> int:
    """``'1h2m3s'`` -> 3723 (core.progress's clock text read back)."""
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([hms])", clock))
