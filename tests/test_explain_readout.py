"""The read-out lens: planted tokens come out on top, tied and untied embeddings, and it is the model's own arithmetic.

A unit's read-out is ``W_U (g ⊙ v)``. On copies of the tiny models whose unembedding is planted
(two rows set to ± a neuron's output direction, one row to a residual coordinate) the planted
tokens must be first; and for every shape the suite builds (the toolkit's untied Llama, the
same with tied embeddings, the ChatML and the no-BOS Qwen2 models, both tied) the lens must
equal what transformers computes, ``lm_head(norm.weight * v)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.checkpoint import Checkpoint
from analysis.readout import Lens, TokenText, read_out, unit_directions
from core.errors import ProbeError
from tests.support.planted_weights import edit_weights, plant_coordinate, plant_readout, tie_embeddings

PROMOTED, SUPPRESSED, COORDINATE_TOKEN = 200, 201, 202


@pytest.fixture(scope="module")
def tied(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tie_embeddings(tiny_model_dir, tmp_path_factory.mktemp("tied") / "model")


@pytest.mark.parametrize("embeddings", ["untied", "tied"])
def test_a_planted_unembedding_names_the_unit_s_token(
    embeddings: str, tiny_model_dir: Path, tied: Path, tmp_path: Path
) -> None:
    source = tiny_model_dir if embeddings == "untied" else tied
    planted = plant_readout(source, tmp_path / "neuron", layer=2, unit=11, promoted=PROMOTED, suppressed=SUPPRESSED)
    planted = plant_coordinate(planted, tmp_path / "both", coordinate=5, promoted=COORDINATE_TOKEN)
    with Checkpoint(planted, "--dpo") as model:
        assert model.tied is (embeddings == "tied")
        assert model.unembedding_name == ("model.embed_tokens.weight" if model.tied else "lm_head.weight")
        lens, decode = Lens.of(model), TokenText(planted, "--dpo")
        neuron = read_out(lens, unit_directions(model, "mlp_post", [(2, 11)]), k=3, decode=decode)[0]
        coordinate = read_out(lens, unit_directions(model, "mlp_out", [(1, 5)]), k=3, decode=decode)[0]
    assert neuron.promoted[0].token_id == PROMOTED and neuron.promoted[0].logit == pytest.approx(20.0, rel=1e-4)
    assert neuron.suppressed[0].token_id == SUPPRESSED and neuron.suppressed[0].logit == pytest.approx(-20.0, rel=1e-4)
    assert coordinate.promoted[0].token_id == COORDINATE_TOKEN and coordinate.promoted[0].logit == pytest.approx(20.0)
    from transformers import AutoTokenizer

    assert neuron.promoted[0].token == AutoTokenizer.from_pretrained(planted).decode([PROMOTED])


def _model_logits(model_dir: Path, vectors: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        x = torch.from_numpy(vectors.astype(np.float32))
        return model.lm_head(model.model.norm.weight * x).numpy()


@pytest.mark.parametrize("shape", ["llama_untied", "llama_tied", "chatml", "nobos"])
def test_the_lens_is_the_model_s_own_unembedding(
    shape: str, tiny_model_dir: Path, tied: Path, chat_bases: dict[str, Path], tmp_path: Path
) -> None:
    source = {"llama_untied": tiny_model_dir, "llama_tied": tied}.get(shape) or chat_bases[shape]
    # a norm that matters
    norm = edit_weights(source, tmp_path / "m", lambda w: w["model.norm.weight"].uniform_(0.5, 1.5))
    with Checkpoint(norm, "--dpo") as model:
        assert model.tied is (shape != "llama_untied")
        units = [(0, 1), (model.shape.n_layers - 1, 3)]
        vectors = np.concatenate(
            [
                unit_directions(model, "mlp_post", units),
                np.random.default_rng(0).standard_normal((2, model.shape.d_model)),
            ]
        )
        ours = Lens.of(model).logits(vectors)
    np.testing.assert_allclose(ours, _model_logits(norm, vectors), rtol=1e-4, atol=1e-5)


def test_untied_config_without_lm_head_is_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = edit_weights(tiny_model_dir, tmp_path / "broken", lambda w: w.pop("lm_head.weight"))
    with pytest.raises(ProbeError, match=r"not tied, but the weights hold no lm_head\.weight"):
        Checkpoint(broken, "--dpo")


def test_an_unsupported_family_is_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    other = edit_weights(tiny_model_dir, tmp_path / "gemma2", lambda _w: None, {"model_type": "gemma2"})
    with pytest.raises(ProbeError, match=r"explain reads llama, mistral, qwen2, qwen3 checkpoints.*not 'gemma2'"):
        Checkpoint(other, "--dpo")
