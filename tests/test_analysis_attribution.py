"""Gradient attribution as a ranking metric (issue #25, part 3).

- On a tiny pair whose DPO member differs a little from its SFT member, the attribution of every unit of a
  layer rank-correlates (Spearman ≥ 0.8) with the true Δm of patching that one unit to its SFT value;
- ``probe analyze --metric attribution`` writes ``maps_attribution.h5``, a neuron set (the file ``probe
  intervene --neurons`` reads) and reuses the attribution pass on the next call;
- ``dpo_margin`` runs on the DPO pairs the run was recorded with.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from core.chat import pad_id_of
from core.records import to_json
from core.rows import read_test_rows
from probes.attribution import Item, attribute_batch, patched_deltas
from probes.config import RecordConfig
from probes.recording import record_run
from probes.responses import teacher_forced
from tests.support.cli import exit_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def close_pair(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny base and a copy perturbed by 2% (small differences: the regime a first-order estimate is for)."""
    from access.pair import load_pair
    from tests.chat_models import perturbed_copy

    dpo = perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("close") / "dpo", seed=1, scale=0.02)
    return load_pair(tiny_model_dir, dpo, device="cpu", dtype="float32")


@pytest.mark.parametrize("hook, layer, width, positions", [("mlp_post", 3, 64, "all"), ("mlp_out", 1, 32, "response")])
def test_attribution_rank_correlates_with_true_single_unit_patching(
    close_pair,
    rolemrc_file: Path,
    hook: str,
    layer: int,
    width: int,
    positions: str,
) -> None:
    rows = read_test_rows(rolemrc_file)[:6]
    items = [
        Item(*teacher_forced(close_pair.tokenizer, row.question, "It lies beyond what I know."), k)
        for k, row in enumerate(rows)
    ]
    pad = pad_id_of(close_pair.tokenizer)
    _, out = attribute_batch(close_pair.sft, close_pair.dpo, items, pad, [(hook, layer)], positions)
    estimated = out[(hook, layer)][0].sum(dim=0).numpy()
    true = patched_deltas(close_pair.sft, close_pair.dpo, items, pad, hook, layer, range(width), positions)
    assert np.abs(true).max() > 0
    rho = spearmanr(estimated, true).statistic
    print(f"{hook} layer {layer} ({positions}): Spearman {rho:.3f} over {width} units")
    assert rho >= 0.8


@pytest.fixture(scope="module")
def small_run(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("attr-run") / "run"
    record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[1],
            data_file=rolemrc_file,
            out_dir=out,
            capabilities="priority",
            hooks="mlp_out,mlp_post",
            position="response_mean",
        ),
        progress=False,
    )
    return out


def test_probe_analyze_metric_attribution_writes_maps_and_a_neuron_set(small_run: Path, capsys) -> None:
    from access.units import NeuronSet
    from analysis.maps import load_maps

    args = ["analyze", str(small_run), "--metric", "attribution", "--no-png", "--top-k", "8"]
    code, out, err = exit_of(args, capsys)
    assert code == 0, err
    assert "priority · mlp_out · attribution" in out
    maps = {m.hook: m for m in load_maps(small_run / "analysis" / "maps_attribution.h5")}
    assert maps["mlp_post"].delta.shape == (2, 64) and maps["mlp_post"].settings["m"] == "reference_logprob"
    units = NeuronSet.load(small_run / "analysis" / "neurons_priority_mlp_out.json")
    assert units.metric == "attribution" and len(units) == 8
    assert (small_run / "analysis" / "plots" / "priority_mlp_out_attribution_maps.html").is_file()
    args[args.index("--no-png")] = "--no-plots"
    cached = small_run / "attribution_reference_logprob.h5"
    before = cached.stat().st_mtime_ns
    assert exit_of(args, capsys)[0] == 0 and cached.stat().st_mtime_ns == before  # the pass is reused


def test_dpo_margin_runs_on_the_runs_dpo_pairs(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    from analysis import AnalysisConfig, analyze_run

    pairs = tmp_path / "dpo.jsonl"
    with pairs.open("w") as handle:
        for row in read_test_rows(rolemrc_file):
            handle.write(
                json.dumps(
                    {
                        "prompt": [to_json(t) for t in row.question],
                        "chosen": "Gladly, here it is.",
                        "rejected": "No.",
                        "task": row.task,
                    }
                )
                + "\n"
            )
    out = tmp_path / "run"
    record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[1],
            data_file=pairs,
            out_dir=out,
            capabilities="priority",
            position="response_mean",
            response="chosen",
        ),
        progress=False,
    )
    result = analyze_run(
        out, AnalysisConfig(metric="attribution", attribution_m="dpo_margin", stability_resamples=0), plots=False
    )
    maps = result.maps[("priority", "mlp_out")]
    assert maps.settings["m"] == "dpo_margin" and np.isfinite(maps.delta).all() and np.abs(maps.delta).max() > 0
    with pytest.raises(Exception, match="DPO file"):
        # reference_logprob: a DPO file has no reference
        analyze_run(out, AnalysisConfig(metric="attribution", stability_resamples=0), plots=False)
