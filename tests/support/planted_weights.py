"""Model directories with planted weights, and runs that point at them: for the explain tests.

The tiny test models are random, so nothing they write means anything; these helpers plant
what a test can then look for: a token that one unit writes (:func:`plant_readout`), a
weight edit on known units (:func:`edit_weights`), tied embeddings (:func:`tie_embeddings`),
a sharded copy (:func:`shard`), and a run whose recorded models are those directories with
a planted activation difference on known units (:func:`write_run_for`), so that a unit ranks
first without recording anything.

Example:
    >>> double_gate_row = lambda w: w["model.layers.1.mlp.gate_proj.weight"][5].mul_(2)  # doctest: +SKIP
    >>> dpo = edit_weights(base, tmp / "dpo", double_gate_row)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS = "model.safetensors"


def load_weights(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / WEIGHTS))


def save_weights(model_dir: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, str(Path(model_dir) / WEIGHTS), metadata={"format": "pt"}
    )


def edit_weights(
    src: Path, dst: Path, edit: Callable[[dict[str, Any]], Any], config: dict[str, Any] | None = None
) -> Path:
    """A copy of ``src`` whose tensors ``edit`` changed in place (and whose config.json got ``config``'s keys)."""
    shutil.copytree(src, dst)
    tensors = load_weights(dst)
    edit(tensors)
    save_weights(dst, tensors)
    if config:
        path = Path(dst) / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}, indent=2))
    return Path(dst)


def tie_embeddings(src: Path, dst: Path) -> Path:
    """A copy of an untied model with tied embeddings: no lm_head.weight in the file, the config says so."""
    return edit_weights(src, dst, lambda w: w.pop("lm_head.weight"), {"tie_word_embeddings": True})


def unembedding_key(tensors: dict[str, Any]) -> str:
    return "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight"


def plant_readout(
    src: Path, dst: Path, layer: int, unit: int, promoted: int, suppressed: int, scale: float = 20.0
) -> Path:
    """A copy where MLP neuron (layer, unit) writes token ``promoted`` up and ``suppressed`` down through the lens:
    the final norm's weight set to 1 and those two unembedding rows set to ±``scale`` · W_down[:, unit] / ‖·‖²."""

    def edit(w: dict[str, Any]) -> None:
        direction = w[f"model.layers.{layer}.mlp.down_proj.weight"][:, unit].clone()
        w["model.norm.weight"].fill_(1.0)
        key = unembedding_key(w)
        w[key][promoted] = scale * direction / direction.dot(direction)
        w[key][suppressed] = -scale * direction / direction.dot(direction)

    return edit_weights(src, dst, edit)


def plant_coordinate(src: Path, dst: Path, coordinate: int, promoted: int, scale: float = 20.0) -> Path:
    """A copy where residual coordinate ``coordinate`` reads out as token ``promoted`` (unembedding row e_c · scale)."""

    def edit(w: dict[str, Any]) -> None:
        w["model.norm.weight"].fill_(1.0)
        row = w[unembedding_key(w)][promoted]
        row.zero_()
        row[coordinate] = scale

    return edit_weights(src, dst, edit)


def shard(src: Path, dst: Path) -> Path:
    """A copy whose weights are split over two safetensors files with an index, as large checkpoints are."""
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    tensors = load_weights(dst)
    (Path(dst) / WEIGHTS).unlink()
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for file, members in halves.items():
        save_file({n: tensors[n].contiguous() for n in members}, str(Path(dst) / file), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {n: file for file, members in halves.items() for n in members}}
    (Path(dst) / "model.safetensors.index.json").write_text(json.dumps(index))
    return Path(dst)


def write_run_for(
    run_dir: Path,
    sft: Path,
    dpo: Path,
    planted: dict[str, list[tuple[int, int]]],
    n_samples: int = 24,
    capability: str = "multi_turn",
    seed: int = 0,
) -> Path:
    """A run recorded "from" ``sft``/``dpo`` (their real dirs and fingerprints) with DPO − SFT shifts on the planted
    (layer, unit) of each hook; activations are random otherwise, every layer stored."""
    from core.provenance import weights_sha256
    from probes.store import RunWriter

    config = json.loads((Path(sft) / "config.json").read_text())
    n_layers, widths = (
        config["num_hidden_layers"],
        {"d_model": config["hidden_size"], "d_mlp": config["intermediate_size"]},
    )
    layers = list(range(n_layers))
    rng = np.random.default_rng(seed)
    with RunWriter(run_dir, {"hooks": list(planted), "layers": layers}) as writer:
        for model, path in (("sft", sft), ("dpo", dpo)):
            writer.set_model_info(
                model,
                {
                    "model_dir": str(Path(path).resolve()),
                    "weights_sha256": weights_sha256(path),
                    "n_layers": n_layers,
                    "model_type": config["model_type"],
                    **widths,
                },
            )
        prompts = [f"<|im_start|>user\nquestion {i} about the bridge<|im_end|>\n" for i in range(n_samples)]
        writer.append_samples(
            capability, np.arange(n_samples), ["synthetic"] * n_samples, np.full(n_samples, 9), prompts
        )
        for hook, units in planted.items():
            width = widths["d_mlp" if hook == "mlp_post" else "d_model"]
            sft_acts = rng.standard_normal((n_samples, n_layers, width))
            dpo_acts = sft_acts + 0.1 * rng.standard_normal(sft_acts.shape)
            for layer, unit in units:
                dpo_acts[:, layer, unit] += 4.0
            writer.append_activations("sft", capability, hook, sft_acts.astype(np.float32), layers)
            writer.append_activations("dpo", capability, hook, dpo_acts.astype(np.float32), layers)
    return Path(run_dir)


def write_provenance(sft: Path, base: Path) -> None:
    """An SFT model's provenance.json naming ``base`` (and its fingerprint) as its parent, as training writes it."""
    from core.provenance import weights_sha256
    from core.records import to_json
    from training.provenance import ModelProvenance

    record = ModelProvenance(
        stage="sft",
        weights_sha256=weights_sha256(sft),
        parent={"base": str(Path(base).resolve()), "weights_sha256": weights_sha256(base)},
    )
    (Path(sft) / "provenance.json").write_text(json.dumps(to_json(record), indent=1))
