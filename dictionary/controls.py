"""The two controls: the null dictionary's count of model-specific latents, and the planted pair's alignment.

**The null dictionary** is the same training on SFT against SFT (:data:`dictionary.train.KINDS` ``null``): both
inputs identical, so any latent it calls SFT-only or DPO-only (:func:`dictionary.measures.classes`) is an artefact
of training. Its count is printed beside the real one; the real count means something only above it.

**The planted pair** (``--pair planted``, :mod:`training.planted`): DPO is SFT with the up_proj rows of 16 known
``mlp_post`` units multiplied by 3, so DPO's residual stream differs first of all along those units' ``down_proj``
columns. For a dictionary at layer L, the planted units at layers ≤ L (for ``resid_post``; exactly L for
``mlp_out``; for ``mlp_post`` the units themselves) are the directions to find. Each is scored by the largest
``|cos|`` between its direction and the selected latents' change directions (the crosscoder's ``d_dpo − d_sft`` of
its DPO-only latents, else the diff-SAE's decoder rows of its live latents), against the same score of
:data:`RANDOM_UNITS` random units of the same layers (the placebo): the planted units' median score, the random
units' median and 95th percentile, and the planted units' share above that 95th percentile.

Example:
    >>> counts = class_counts(np.array([0.05, 0.5, 0.95, 0.7]), np.array([True, True, True, False]))
    >>> counts["dpo_only"], counts["sft_only"], counts["shared"], counts["model_specific"]
    (1, 1, 1, 2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from access.hook_table import HOOK_TABLE, NEURONS, hooks_reading
from dictionary.measures import CLASSES, classes

RANDOM_UNITS = 200


def class_counts(x: np.ndarray, alive: np.ndarray) -> dict[str, int]:
    """Latents per class among the live ones, and ``model_specific`` (SFT-only plus DPO-only)."""
    labels = classes(x[alive])
    counts = {name: int((labels == name).sum()) for name in CLASSES}
    counts["model_specific"] = counts["dpo_only"] + counts["sft_only"]
    counts["alive"] = int(alive.sum())
    return counts


def _unit_directions(checkpoint: Any, hook: str, units: list[tuple[int, int]]) -> np.ndarray:
    """Unit directions at the dictionary's site: ``down_proj`` columns (d_model hooks), one-hot (``mlp_post``)."""
    if HOOK_TABLE[hook].width == "d_mlp":
        out = np.zeros((len(units), checkpoint.shape.d_mlp), dtype=np.float64)
        for row, (_, unit) in enumerate(units):
            out[row, unit] = 1.0
        return out
    from analysis.readout import unit_directions

    return unit_directions(checkpoint, NEURONS, units).astype(np.float64)


def visible(units: tuple[tuple[int, int], ...], hook: str, layer: int) -> list[tuple[int, int]]:
    """The planted units a dictionary at (hook, layer) can see directly.

    >>> visible(((2, 5), (3, 1), (7, 0)), "resid_post", 3), visible(((2, 5), (3, 1)), "mlp_out", 3)
    ([(2, 5), (3, 1)], [(3, 1)])
    """
    if hook not in hooks_reading("mlp"):  # the planted units are MLP units: attention's output never holds them
        return []
    if HOOK_TABLE[hook].part == "block":  # the residual stream: every block's writes up to the layer
        return [u for u in units if u[0] <= layer]
    return [u for u in units if u[0] == layer]


def best_cosines(directions: np.ndarray, latents: np.ndarray) -> np.ndarray:
    """Per direction, the largest |cos| with any row of ``latents`` (0 when there is none)."""
    if not len(latents) or not len(directions):
        return np.zeros(len(directions))
    a = directions / np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-30)
    b = latents / np.maximum(np.linalg.norm(latents, axis=1, keepdims=True), 1e-30)
    return np.asarray(np.abs(a @ b.T).max(axis=1))


def planted_alignment(
    dpo_dir: Path, sft_dir: Path, hook: str, layer: int, latent_directions: np.ndarray, what: str, seed: int
) -> dict[str, Any] | None:
    """The alignment record (module doc), or None when the pair is not a planted one."""
    from analysis.checkpoint import Checkpoint
    from training.planted import PLANTED_FILE, read_planted

    if not (Path(dpo_dir) / PLANTED_FILE).is_file():
        return None
    planted = read_planted(Path(dpo_dir))
    seen = visible(planted.units, hook, layer)
    if not seen:
        return {"units": [], "note": f"no planted unit lies where {hook} at layer {layer} can see it"}
    rng = np.random.default_rng(seed)
    with Checkpoint(sft_dir, "--sft") as checkpoint:
        layers = [u[0] for u in seen]
        randoms = [(int(rng.choice(layers)), int(rng.integers(checkpoint.shape.d_mlp))) for _ in range(RANDOM_UNITS)]
        planted_scores = best_cosines(_unit_directions(checkpoint, hook, seen), latent_directions)
        random_scores = best_cosines(_unit_directions(checkpoint, hook, randoms), latent_directions)
    cut = float(np.quantile(random_scores, 0.95)) if len(random_scores) else float("nan")
    return {
        "latents": what,
        "n_latents": len(latent_directions),
        "units": [
            {"layer": u[0], "unit": u[1], "best_cos": float(s)} for u, s in zip(seen, planted_scores, strict=True)
        ],
        "planted_median": float(np.median(planted_scores)),
        "random_units": RANDOM_UNITS,
        "random_median": float(np.median(random_scores)),
        "random_p95": cut,
        "share_above_random_p95": float(np.mean(planted_scores > cut)),
    }
