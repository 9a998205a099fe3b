"""The read-out on the real SmolLM2-135M-Instruct: tied embeddings, so the unembedding is the embedding matrix.

SmolLM2's safetensors hold no ``lm_head.weight``; the lens must read ``model.embed_tokens.weight``
and give exactly what the loaded model computes, ``lm_head(norm.weight * v)``. Uses the base that
set-up fetched into ``$PROBE_HOME`` (``probe models fetch-base``); skipped where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_dir() -> Path:
    from training import smollm2

    base = smollm2.base_dir()
    if smollm2.verify_base(base) is not None:
        pytest.skip(f"{base} absent: run `probe models fetch-base` (set-up) first")
    return base


def test_smollm2_reads_out_through_its_embedding_matrix(base_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from analysis.checkpoint import Checkpoint
    from analysis.readout import Lens, unit_directions
    from analysis.weight_change import weight_change

    with Checkpoint(base_dir, "--base") as model:
        assert model.tied and not model.has("lm_head.weight") and model.unembedding_name == "model.embed_tokens.weight"
        assert (model.shape.n_layers, model.shape.d_model, model.shape.d_mlp) == (30, 576, 1536)
        vectors = np.concatenate(
            [
                unit_directions(model, "mlp_post", [(0, 5), (26, 311), (29, 1535)]),
                unit_directions(model, "resid_post", [(29, 100)]),
                np.random.default_rng(0).standard_normal((2, 576)).astype(np.float32),
            ]
        )
        ours = Lens.of(model).logits(vectors)
        unchanged = weight_change(model, model, ["mlp_post", "resid_post"], "sft_dpo")
    assert all(not c.relative.any() for c in unchanged.values())
    hf = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        theirs = hf.lm_head(hf.model.norm.weight * torch.from_numpy(vectors)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()
