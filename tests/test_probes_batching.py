"""Token-budget batches: every prompt recorded once, in the same rows, with the values of fixed-size batches.

The plan (:func:`probes.batching.plan_batches`) decides which prompts share a forward; a
user relies on three things: no batch exceeds the budget unless one prompt alone does, no
prompt is dropped or recorded twice, and the recorded values do not depend on the batching
beyond float32 round-off.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from probes.batching import pending_batches, plan_batches
from probes.config import RecordConfig
from probes.recording import record_run
from probes.store import RunReader
from tests.support.runs import run_arrays

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("seed", range(20))
def test_plan_covers_every_prompt_once_within_both_limits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = sorted(rng.integers(5, 1000, size=int(rng.integers(1, 60))).tolist())
    batch_size, budget = int(rng.integers(1, 10)), int(rng.integers(100, 4000))
    spans = plan_batches(lengths, batch_size, budget)
    assert [p for a, b in spans for p in range(a, b)] == list(range(len(lengths)))
    for a, b in spans:
        assert b - a <= batch_size
        assert b - a == 1 or (b - a) * max(lengths[a:b]) <= budget
    # greedy: the next prompt would not have fitted
    for (a, b), _ in pairwise(spans):
        assert b - a == batch_size or (b - a + 1) * max(lengths[a : b + 1]) > budget


def test_budget_below_one_prompt_gives_each_its_own_batch() -> None:
    assert plan_batches([900, 950, 1000], batch_size=8, max_batch_tokens=100) == [(0, 1), (1, 2), (2, 3)]


def test_pending_keeps_only_missing_positions_of_a_partly_done_batch() -> None:
    spans = plan_batches([10] * 7, batch_size=3, max_batch_tokens=None)
    assert pending_batches(spans, list(range(100, 107)), done={100, 101, 102, 103}) == [[4, 5], [6]]


def _config(tiny_pair, data: Path, out: Path, capabilities: str = "all", **kw) -> RecordConfig:
    return RecordConfig(
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        data_file=data,
        out_dir=out,
        capabilities=capabilities,
        hooks="mlp_out,mlp_post",
        store_dtype="float32",
        **kw,
    )


def _calls(run_dir: Path) -> list[dict]:
    with h5py.File(run_dir / "activations.h5") as handle:
        return json.loads(handle.attrs["provenance"])["calls"]


def test_token_budget_matches_fixed_batches_row_for_row(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    fixed = record_run(_config(tiny_pair, rolemrc_file, tmp_path / "fixed", batch_size=4), progress=False)
    with RunReader(fixed.run_dir) as run:
        longest = max(int(run.samples(c).prompt_lengths.max()) for c in run.capabilities())
    budget = 2 * longest - 1  # smaller than two long prompts: they must go one per batch
    budgeted = record_run(
        _config(tiny_pair, rolemrc_file, tmp_path / "budget", batch_size=64, max_batch_tokens=budget), progress=False
    )
    a, b = run_arrays(fixed.run_dir), run_arrays(budgeted.run_dir)
    assert a.keys() == b.keys() and budgeted.counts == fixed.counts
    largest = 0.0
    for key in a:
        if key.endswith("/ids"):
            np.testing.assert_array_equal(a[key], b[key])  # the same prompt in the same row
        else:
            largest = max(largest, float(np.abs(a[key] - b[key]).max()))
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    print(f"largest difference, fixed batches of 4 vs a {budget}-token budget: {largest:.3g}")
    assert _calls(budgeted.run_dir)[-1]["max_batch_tokens"] == budget


def test_resume_with_other_batch_limits_records_each_prompt_once_and_says_so(
    tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    first = record_run(_config(tiny_pair, rolemrc_file, out, capabilities="multi_turn", batch_size=3), progress=False)
    second = record_run(_config(tiny_pair, rolemrc_file, out, batch_size=5, max_batch_tokens=10_000), progress=False)
    assert second.resumed["multi_turn"] == first.counts["multi_turn"] and second.recorded["multi_turn"] == 0
    reference = record_run(_config(tiny_pair, rolemrc_file, tmp_path / "ref", batch_size=3), progress=False)
    with RunReader(out) as run, RunReader(reference.run_dir) as ref:
        for cap in ref.capabilities():
            assert sorted(run.samples(cap).sample_ids) == sorted(ref.samples(cap).sample_ids)
            assert len(set(run.samples(cap).sample_ids.tolist())) == len(run.samples(cap).sample_ids)
    calls = _calls(out)
    assert [(c["batch_size"], c["max_batch_tokens"]) for c in calls] == [(3, 2048), (5, 10_000)]
    assert calls[0]["recorded"] == {"multi_turn": first.counts["multi_turn"]}


def test_a_start_that_recorded_nothing_does_not_bind_the_directory(
    tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    # a failed start's leftovers
    (out / "run.json").write_text(json.dumps({"settings": {"hooks": ["attn_out"], "layers": [0]}}))
    result = record_run(_config(tiny_pair, rolemrc_file, out, batch_size=8), progress=False)
    assert sum(result.recorded.values()) == sum(result.counts.values()) > 0
    assert json.loads((out / "run.json").read_text())["settings"]["hooks"] == ["mlp_out", "mlp_post"]


def test_run_help_documents_the_token_budget() -> None:
    from probe_cli.main import app

    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--max-batch-tokens" in result.output and "padded tokens" in result.output


def test_bad_budget_is_one_line() -> None:
    from core.errors import ProbeError

    with pytest.raises(ProbeError, match=r"--max-batch-tokens: expected an integer in \[1, 1048576\], got 0"):
        RecordConfig(max_batch_tokens=0)
