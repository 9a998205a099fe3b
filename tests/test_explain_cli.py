"""``probe explain`` end to end: planted cards, every model shape the suite builds, and every refusal in one line.

Two kinds of run. A *planted* run points at real tiny model directories (base → SFT → DPO,
the SFT's provenance naming the base) whose DPO model writes a known token through one MLP
neuron, with a DPO − SFT shift planted on that neuron's activations, so the analysis ranks
it first and its card must name the token. *Recorded* runs come from ``probe run`` on the
toolkit's tiny Llama (untied), the ChatML model (tied) and the no-BOS Qwen2 model (tied).
"""

from __future__ import annotations

import html
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from analysis.explain_record import ExplainRecord
from core.records import to_json
from tests.chat_models import cli, ok, one_error_line
from tests.support.planted_weights import edit_weights, plant_readout, write_provenance, write_run_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NEURON, COORDINATE = (2, 11), (3, 4)
PROMOTED, SUPPRESSED = 380, 370  # merges of the tiny vocabulary ('sage', 'old'): words, not bytes


@pytest.fixture(scope="module", autouse=True)
def probe_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The weights-fingerprint cache goes to a temporary $PROBE_HOME, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROBE_HOME", str(tmp_path_factory.mktemp("home")))
        yield


def _noise(scale: float, seed: int):
    def edit(w: dict) -> None:
        import torch

        generator = torch.Generator().manual_seed(seed)
        for tensor in w.values():
            tensor.add_(torch.randn(tensor.shape, generator=generator) * scale * tensor.std().clamp_min(1e-3))

    return edit


@pytest.fixture(scope="module")
def planted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """base (the tiny Llama) -> sft (noise, provenance naming the base) -> dpo (planted read-out and gate row),
    and the run."""
    from analysis import AnalysisConfig, analyze_run

    root = tmp_path_factory.mktemp("planted")
    sft = edit_weights(tiny_model_dir, root / "sft", _noise(0.05, 1))
    write_provenance(sft, tiny_model_dir)
    readout = plant_readout(sft, root / "readout", *NEURON, promoted=PROMOTED, suppressed=SUPPRESSED)
    dpo = edit_weights(
        readout, root / "dpo", lambda w: w[f"model.layers.{NEURON[0]}.mlp.gate_proj.weight"][NEURON[1]].mul_(3.0)
    )
    run = write_run_for(root / "run", sft, dpo, {"mlp_post": [NEURON], "mlp_out": [COORDINATE]})
    analyze_run(run, AnalysisConfig(stability_resamples=0), plots=False)
    return {"base": tiny_model_dir, "sft": sft, "dpo": dpo, "run": run, "root": root}


def test_the_planted_neuron_s_card_names_its_token(planted: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    printed = ok("explain", planted["run"], "-c", "multi_turn", "--top", "3")
    token = AutoTokenizer.from_pretrained(planted["dpo"]).decode([PROMOTED])
    assert f"{NEURON[0]}:{NEURON[1]}" in printed and repr(token) in printed
    record = ExplainRecord.load(planted["run"] / "analysis" / "explain_multi_turn_mlp_post.json")
    card = record.cards[0]
    assert (card.layer, card.unit) == NEURON
    assert card.readout.promoted[0].token_id == PROMOTED and card.readout.suppressed[0].token_id == SUPPRESSED
    assert card.ranks["topk_count"] == 1 and card.ranks["weights_sft_dpo"] == 1 and card.ranks["mean_diff"] == 1
    assert set(card.weight_change) == {"sft_dpo", "base_sft"} and card.weight_change["sft_dpo"][
        "gate"
    ] == pytest.approx(2.0, rel=1e-5)
    assert card.ci_low <= card.delta <= card.ci_high and card.delta > 0.5
    assert [h.row for h in card.top_prompts["dpo"]] and all(
        h.dpo >= card.top_prompts["dpo"][-1].dpo for h in card.top_prompts["dpo"]
    )
    assert record.models["base"]["dir"] == str(planted["base"].resolve()) and not record.lens["tied_embeddings"]
    assert [a.transition for a in record.agreement] == ["sft_dpo", "base_sft"]
    assert (
        [r.layer for r in record.mean_difference]
        == record.window.layers
        == [a.layer for a in record.agreement[0].layers]
    )
    assert record.agreement[0].top.units[0] == list(NEURON)  # the planted neuron tops both rankings
    assert ExplainRecord.read(json.loads(json.dumps(to_json(record)))) == record
    analysis = planted["run"] / "analysis"
    for name in (
        "weight_change.h5",
        "explain_multi_turn_mlp_out.json",
        "explain_multi_turn_mlp_post.html",
        "plots/weight_change_mlp_post.html",
        "plots/explain_multi_turn_mlp_post_agreement.html",
    ):
        assert (analysis / name).is_file(), name
    assert html.escape(repr(token)) in (analysis / "explain_multi_turn_mlp_post.html").read_text(encoding="utf-8")


def test_the_card_s_delta_and_ranks_are_the_analysis_s_own(planted: dict[str, Path]) -> None:
    from analysis import load_maps

    ok("explain", planted["run"], "-c", "multi_turn", "--top", "5", "--hook", "mlp_out", "--no-plots")
    record = ExplainRecord.load(planted["run"] / "analysis" / "explain_multi_turn_mlp_out.json")
    maps = next(m for m in load_maps(planted["run"] / "analysis" / "maps_topk_count.h5") if m.hook == "mlp_out")
    for rank, card in enumerate(record.cards, start=1):
        row = maps.layers.index(card.layer)
        assert card.delta == maps.delta[row, card.unit] and card.ranks["topk_count"] == rank
        assert card.ci_low <= card.delta <= card.ci_high
    assert (record.cards[0].layer, record.cards[0].unit) == COORDINATE


@pytest.mark.parametrize("case", ["missing", "other_weights", "other_shape", "top", "unanalysed", "capability"])
def test_bad_input_is_one_error_line(case: str, planted: dict[str, Path], tmp_path: Path) -> None:
    run, extra = planted["run"], []
    if case == "missing":
        moved = edit_weights(planted["sft"], tmp_path / "sft", lambda _w: None)
        run = write_run_for(tmp_path / "run", moved, planted["dpo"], {"mlp_post": [NEURON]})
        from analysis import AnalysisConfig, analyze_run

        analyze_run(run, AnalysisConfig(stability_resamples=0), plots=False)
        shutil.rmtree(moved)
    elif case == "other_weights":
        extra = ["--dpo", str(planted["base"])]
    elif case == "other_shape":

        def narrower(w: dict) -> None:
            for name in [n for n in w if "mlp" in n]:
                w[name] = (w[name][:, :48] if "down_proj" in name else w[name][:48]).clone()

        extra = ["--dpo", str(edit_weights(planted["dpo"], tmp_path / "narrow", narrower, {"intermediate_size": 48}))]
    elif case == "top":
        extra = ["--top", "100000"]
    elif case == "unanalysed":
        run = write_run_for(tmp_path / "raw", planted["sft"], planted["dpo"], {"mlp_post": [NEURON]})
    elif case == "capability":
        extra = ["-c", "priority"]
    argv = ["explain", run, *(["-c", "multi_turn"] if case != "capability" else []), *extra]
    code, _, err = cli(*argv)
    line = one_error_line(err)
    assert code == 2
    expected = {
        "missing": "sft model",
        "other_weights": "not the ones the run recorded",
        "other_shape": "differ in shape",
        "top": "--top 100000: the analysis of multi_turn/mlp_out ranks only",
        "unanalysed": "probe analyze",
        "capability": "not recorded in this run",
    }[case]
    assert expected in line, line
    if case == "missing":
        assert "is missing" in line and "--sft" in line


def _recorded(model: Path, data: Path, root: Path) -> Path:
    dpo = edit_weights(model, root / "dpo", _noise(0.2, 2))
    ok(
        "run",
        "-c",
        "multi_turn",
        "--sft",
        model,
        "--dpo",
        dpo,
        "--data",
        data / "test.jsonl",
        "--hook",
        "mlp_post,mlp_out",
        "--out",
        root / "run",
        "--quiet",
        "--no-analyze",
    )
    ok("analyze", root / "run", "--no-plots", "--stability-resamples", "0")
    return root / "run"


@pytest.mark.parametrize("shape", ["llama", "chatml", "nobos"])
def test_recorded_runs_of_every_shape_are_explained(
    shape: str, tiny_model_dir: Path, chat_bases: dict[str, Path], chat_data: Path, tmp_path: Path
) -> None:
    model = tiny_model_dir if shape == "llama" else chat_bases[shape]
    run = _recorded(model, chat_data, tmp_path)
    printed = ok("explain", run, "-c", "multi_turn", "--top", "3", "--no-plots", "--permutations", "200")
    assert "no base → SFT weight change" in printed  # a base model has no provenance: said, not guessed
    record = ExplainRecord.load(run / "analysis" / "explain_multi_turn_mlp_post.json")
    assert record.lens["tied_embeddings"] is (shape != "llama") and len(record.cards) == 3
    assert len(record.mean_difference) == len(record.window.layers) and all(r.norm > 0 for r in record.mean_difference)
    card = record.cards[0]
    import torch
    from transformers import AutoModelForCausalLM

    dpo = AutoModelForCausalLM.from_pretrained(tmp_path / "dpo", dtype=torch.float32).eval()
    with torch.no_grad():
        direction = dpo.model.layers[card.layer].mlp.down_proj.weight[:, card.unit]
        logits = dpo.lm_head(dpo.model.norm.weight * direction).numpy()
    assert card.readout.promoted[0].token_id == int(np.argmax(logits))
    assert card.readout.suppressed[0].token_id == int(np.argmin(logits))


def _card_cell() -> str:
    import nbformat

    notebook = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "heatmap_explorer.ipynb", as_version=4)
    return next(c.source for c in notebook.cells if c.cell_type == "code" and "neuron_card(" in c.source)


def test_the_notebook_s_card_cell_shows_the_picked_unit(planted: dict[str, Path], tmp_path: Path, capsys) -> None:
    """The heatmap notebook's card cell, run on the notebook's own maps: a card for its unit, or one line why not."""
    import IPython.display

    from analysis.config import AnalysisConfig
    from analysis.maps import compute_maps
    from probes.store import RunReader
    from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

    shown: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
        for run_dir in (planted["run"], tmp_path / "synthetic"):
            if run_dir != planted["run"]:
                write_synthetic_run(
                    run_dir, SyntheticSpec(n_samples=12, n_layers=4, width=8, capabilities=("multi_turn",))
                )
            with RunReader(run_dir) as run:
                maps = compute_maps(
                    run,
                    "multi_turn",
                    "mlp_post" if run_dir == planted["run"] else "mlp_out",
                    [2, 3],
                    AnalysisConfig(metric="mean_diff", stability_resamples=0),
                )
            exec(
                _card_cell(),
                {
                    "RUN_DIR": str(run_dir),
                    "maps": maps,
                    "layer": NEURON[0],
                    "unit": NEURON[1] % maps.width,
                    "hook": maps.hook,
                    "METRIC": "mean_diff",
                },
            )
    from transformers import AutoTokenizer

    token = AutoTokenizer.from_pretrained(planted["dpo"]).decode([PROMOTED])
    assert (
        len(shown) == 1 and f"layer {NEURON[0]} · unit {NEURON[1]}" in shown[0] and html.escape(repr(token)) in shown[0]
    )
    # ranked against the notebook's maps (the planted neuron is first by mean Δ)
    assert "<th>mean_diff</th><td>1</td>" in shown[0]
    assert "no neuron card: " in capsys.readouterr().out
