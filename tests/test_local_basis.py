"""The local basis (issue 38): each layer of one model run on the other's input to that layer, recorded in the same
pass as the models, analysed with every metric, and checked against planted ground truth.

The planted-tiny pair's "DPO" is its "SFT" with 16 known units' up_proj rows scaled, nothing else changed, so in the
local basis exactly those units differ, by exactly the factor; the global basis mixes in what flowed from below.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.recall import LOCAL_RECALL_TARGET, planted_recall, recall_table
from core.errors import ProbeError
from probes.config import RecordConfig
from probes.recording import record_run
from probes.store import RunReader
from tests.chat_models import cli, ok, one_error_line
from training.planted import PlantedPair

pytestmark = pytest.mark.usefixtures("one_torch_thread")
HOOKS = ("mlp_out", "attn_out", "resid_post", "mlp_post")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> PlantedPair:
    """The registered planted-tiny pair (8 layers, 16 units x 30), built in a temporary $PROBE_HOME (seconds)."""
    from training.default_pair import ensure_default_pair
    from training.planted import read_planted

    return read_planted(ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root)


@pytest.fixture(scope="module")
def planted_run(planted: PlantedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlp_post of every layer, both local directions, float32, on the pair's multi_turn test rows."""
    out = tmp_path_factory.mktemp("runs") / "planted"
    record_run(_config(planted, out, local="both"), progress=False)
    return out


def _config(planted: PlantedPair, out: Path, **extra: object) -> RecordConfig:
    return RecordConfig(
        sft_dir=planted.sft_dir,
        dpo_dir=planted.dpo_dir,
        data_file=planted.data_dir / "test.jsonl",
        capabilities="multi_turn",
        hooks="mlp_post",
        store_dtype="float32",
        out_dir=out,
        **extra,  # type: ignore[arg-type]
    )


def _values(run_dir: Path) -> dict[str, np.ndarray]:
    with RunReader(run_dir) as run:
        assert run.models() == ["sft", "dpo"]  # the local groups are not models
        assert run.local_directions("multi_turn", "mlp_post") == ["dpo_on_sft", "sft_on_dpo"]
        return {g: run.activations(g, "multi_turn", "mlp_post") for g in ("sft", "dpo", "dpo_on_sft", "sft_on_dpo")}


def test_only_the_planted_units_differ_locally_by_exactly_the_factor(planted: PlantedPair, planted_run: Path) -> None:
    values = _values(planted_run)
    planted_mask = np.zeros(values["sft"].shape[1:], dtype=bool)
    for layer, unit in planted.units:
        planted_mask[layer, unit] = True
    for before, after in (("sft", "dpo_on_sft"), ("sft_on_dpo", "dpo")):
        changed = np.any(values[after] != values[before], axis=0)
        assert not changed[~planted_mask].any(), f"{after} - {before}: a unit that was not planted differs"
        for layer, unit in planted.units:
            np.testing.assert_allclose(
                values[after][:, layer, unit], planted.factor * values[before][:, layer, unit], rtol=1e-4, atol=1e-6
            )
    inflow = np.any(values["dpo"] != values["sft"], axis=0) & ~planted_mask
    assert inflow.sum() > 100  # the global basis: units downstream of a planted one differ without having changed


def test_local_basis_recalls_the_planted_units_for_every_paired_metric(planted: PlantedPair, planted_run: Path) -> None:
    """The issue's verdict rule: the local basis finds the planted units at recall >= 0.95 in its top K (K = 16)."""
    rows = planted_recall(planted_run, planted.units, hook="mlp_post", ks=(None, 64))
    table = recall_table(rows)
    assert {(r.metric, r.basis) for r in rows} == {
        (m, b) for m in ("topk_count", "mean_diff", "effect_size") for b in ("global", "local")
    }
    for row in rows:
        if row.basis == "local" and row.k == len(planted.units) and row.metric != "topk_count":
            assert row.recall >= LOCAL_RECALL_TARGET, table
            assert row.direction == "dpo_on_sft"
    assert "| mean_diff | local (dpo_on_sft) | 16 | 16/16 | 1.00 | PASS |" in table


def test_probe_analyze_basis_local_writes_its_own_analysis_and_says_its_basis(
    planted: PlantedPair, planted_run: Path
) -> None:
    out = " ".join(
        ok("analyze", planted_run, "--basis", "local", "--metric", "mean_diff", "--top-k", "16", "--no-png").split()
    )
    assert "mean_diff · local basis" in out and "DPO's block l on SFT's input to block l" in out
    local = planted_run / "analysis" / "local"
    summary = json.loads((local / "summary.json").read_text())
    assert summary["settings"]["basis"] == "local"
    chosen = json.loads((local / "neurons_multi_turn_mlp_post.json").read_text())
    assert chosen["selection"]["basis"] == "local" and chosen["selection"]["direction"] == "dpo_on_sft"
    # the default window is the paper's 12-31 scaled to 8 layers; within it, the neuron set is the planted units
    window = {n["layer"] for n in chosen["neurons"]}
    assert {(n["layer"], n["unit"]) for n in chosen["neurons"]} == {u for u in planted.units if u[0] in window}
    page = next((local / "plots").glob("multi_turn_mlp_post_mean_diff_maps.html")).read_text()
    assert "local basis (dpo_on_sft)" in page
    assert not (planted_run / "analysis" / "summary.json").exists()  # the global analysis is a separate set
    other = ok(
        "analyze",
        planted_run,
        "--basis",
        "local",
        "--direction",
        "sft_on_dpo",
        "--no-plots",
        "--out",
        planted_run / "other",
    )
    assert "local basis (sft_on_dpo)" in " ".join(other.split())


def test_a_run_without_the_local_recording_refuses_the_local_basis_in_one_line(
    planted: PlantedPair, tmp_path: Path
) -> None:
    out = tmp_path / "old"
    record_run(_config(planted, out, local="none", layers="6-7"), progress=False)
    with RunReader(out) as run:
        assert run.local_directions("multi_turn", "mlp_post") == [] and run.settings.local == ""
    code, _, err = cli("analyze", out, "--basis", "local", "--no-plots")
    assert code == 2 and "--basis local needs the local recording of multi_turn/mlp_post" in one_error_line(err)
    ok("analyze", out, "--no-plots")  # the global basis, as before
    code, _, err = cli(
        "run",
        "--sft",
        planted.sft_dir,
        "--dpo",
        planted.dpo_dir,
        "--data",
        planted.data_dir / "test.jsonl",
        "-c",
        "multi_turn",
        "--hook",
        "mlp_post",
        "--layers",
        "6-7",
        "--store-dtype",
        "float32",
        "--out",
        out,
    )  # resuming with the default --local dpo_on_sft would mix runs with and without it
    line = one_error_line(err)
    assert code == 2 and "local: run has '', this call asks 'dpo_on_sft'" in line and "layers" not in line


def test_settings_written_before_the_local_field_read_as_no_local_basis() -> None:
    from probes.settings import RunSettings

    assert RunSettings.read({"hooks": ["mlp_out"], "layers": [0]}).local == ""


def _hidden_inputs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True, use_cache=False)
    return tuple(out.hidden_states)


def _patched(
    dpo: torch.nn.Module, sft_inputs: tuple[torch.Tensor, ...], batch: dict[str, torch.Tensor], hook: str, layer: int
) -> torch.Tensor:
    """An independent route to the same value: DPO's whole forward, with block ``layer``'s input replaced by SFT's."""
    from access.hook_points import attach, blocks

    kept: list[torch.Tensor] = []

    def swap(_module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:  # type: ignore[type-arg]
        if args:
            return (sft_inputs[layer], *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": sft_inputs[layer]}

    handles = [
        blocks(dpo)[layer].register_forward_pre_hook(swap, with_kwargs=True),
        attach(dpo, hook, layer, lambda x: kept.append(x.detach().clone())),
    ]
    try:
        with torch.no_grad():
            dpo(**batch, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return kept[0]


@pytest.mark.parametrize("family", ["tiny", "chatml", "nobos"])
def test_local_values_equal_patching_the_block_input_on_real_model_families(
    family: str,
    tiny_model_dir: Path,
    chat_bases: dict[str, Path],
    tmp_path: Path,
) -> None:
    """Llama-3 style (BOS once, untied, the tiny base), SmolLM2 style (ChatML, BOS opening every turn, tied, 5
    layers) and Qwen2 style (no BOS, tied, attention biases, 3 layers): the value recorded in the same forward as SFT
    equals DPO's own forward with SFT's input patched into that block, for every hook point, on a left-padded batch
    reduced by the mean (which reads every position, so masks and rotary positions must be right)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from access.batches import TokenBatch, position_ids_for
    from access.drivers.base import reduce_positions
    from access.drivers.torch_hooks import TorchBackend
    from access.local_blocks import LocalRecorder
    from tests.chat_models import perturbed_copy

    base = tiny_model_dir if family == "tiny" else chat_bases[family]
    dpo_dir = perturbed_copy(base, tmp_path / "dpo", seed=3, scale=0.3)
    sft = AutoModelForCausalLM.from_pretrained(base).eval()
    dpo = AutoModelForCausalLM.from_pretrained(dpo_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.padding_side = "left"
    chats = [
        [{"role": "user", "content": "Who built the northern bridge?"}],
        [
            {"role": "system", "content": "You are an archivist."},
            {"role": "user", "content": "Answer."},
            {"role": "assistant", "content": "The bridge is granite."},
            {"role": "user", "content": "And the flood?"},
        ],
    ]
    texts = [tokenizer.apply_chat_template(c, tokenize=False) for c in chats]
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    mask = encoded["attention_mask"]
    assert (mask == 0).any()  # left padding is exercised
    batch = TokenBatch(encoded["input_ids"], mask, position_ids_for(mask))
    inputs = {"input_ids": batch.input_ids, "attention_mask": mask, "position_ids": batch.position_ids}
    layers = list(range(sft.config.num_hidden_layers))
    recorder = LocalRecorder(sft, dpo, HOOKS, layers, "mean")
    backend = TorchBackend(sft, HOOKS, layers, "mean")
    local = recorder.record(batch, lambda: backend.record(batch))
    assert set(recorder.last) == set(HOOKS)
    sft_inputs = _hidden_inputs(sft, inputs)
    for hook in HOOKS:
        for layer in layers:
            expected = reduce_positions(_patched(dpo, sft_inputs, inputs, hook, layer), mask, "mean")
            torch.testing.assert_close(local[hook][:, layer], expected, rtol=1e-4, atol=1e-5)
    same = LocalRecorder(sft, sft, HOOKS, layers, "mean").record(batch, lambda: None)
    for hook in HOOKS:  # a model against itself: the local value is its own, bit for bit
        assert torch.equal(same[hook], backend.record(batch)[hook])


def test_local_choice_is_checked_like_every_option() -> None:
    with pytest.raises(ProbeError, match="--local"):
        RecordConfig(capabilities="multi_turn", local="sideways")


def test_the_local_selection_rules_pick_the_planted_units(planted: PlantedPair, planted_run: Path) -> None:
    """``--select local_mean_diff`` and ``local_effect_size`` rank in the local basis over the analysis window: their
    top K are exactly the planted units in that window (every other unit scores 0 there, and is never picked)."""
    from interventions.select_rules import rule_sets

    k = len(planted.units)
    sets = rule_sets(planted_run, "multi_turn", "mlp_post", ["local_mean_diff", "local_effect_size", "mean_diff"], k)
    for rule in ("local_mean_diff", "local_effect_size"):
        window = {
            layer
            for part in sets[rule].window.split(",")
            for layer in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)
        }
        in_window = {(layer, unit) for layer, unit in planted.units if layer in window}
        assert len(in_window) >= 4, "the planted-tiny pair plants units inside the default window"
        assert {(n.layer, n.unit) for n in sets[rule].units.neurons} == in_window, rule
        assert "local basis" in sets[rule].source
    assert "local basis" not in sets["mean_diff"].source


def test_the_study_shows_claim_1s_local_profile_beside_its_verdict(planted_run: Path, tmp_path: Path) -> None:
    """The report's claim 1 keeps its global-basis verdict and adds the target's top layers in both bases, each
    said in words; on the planted pair only layers that hold planted units differ in the local basis."""
    import shutil

    from analysis.config import AnalysisConfig
    from analysis.run import analyze_run
    from study.gather import gather_study
    from study.report_html import render

    run = Path(shutil.copytree(planted_run, tmp_path / "run"))
    analyze_run(run, AnalysisConfig(stability_resamples=0), png=False)
    study = gather_study(run)
    local = study.local_profile
    assert local is not None and local.hook == study.hook == "mlp_post"
    planted_layers = {layer for layer, _ in read_planted_units(run)}
    moved = {r.layer for r in local.local_layers if r.mean_abs_delta > 0}
    assert moved and moved <= planted_layers  # in the local basis only layers holding planted units differ at all
    page = render(study)
    claim_1 = page.split('<section id="claim-1">', 1)[1].split("</section>", 1)[0]
    assert "local</td>" in claim_1 and "global</td>" in claim_1 and "reads the global basis only" in claim_1


def read_planted_units(run: Path) -> tuple[tuple[int, int], ...]:
    from training.planted import read_planted

    with RunReader(run) as reader:
        return read_planted(Path(reader.model_info("dpo")["model_dir"])).units
