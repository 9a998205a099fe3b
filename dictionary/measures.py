"""What a trained dictionary is measured by: FVE, L0, dead latents, relative decoder norms and classes, Latent Scaling.

**Held-out figures** (:func:`evaluate`, on the held-out documents only, latents by the inference threshold):

* FVE per input slot: ``1 − Σ‖x − x̂‖² / Σ‖x − mean(x)‖²`` (for the diff-SAE, of the difference); for the
  crosscoder also the FVE of the *difference* ``dpo − sft`` by ``x̂_dpo − x̂_sft`` (what a patch of every latent
  carries: a crosscoder can reconstruct each model well and their small difference badly);
* L0: the mean number of latents firing per token; dead: latents that never fire on the held-out tokens;
* each latent's firing rate, and its top-activating tokens (for the cards).

**Relative decoder norm and classes** (crosscoder), exactly as diffing-toolkit computes them
(``src/diffing/utils/dictionary/analysis.py``, ``build_push_crosscoder_latent_df``), with SFT as the base and DPO as
the fine-tune: ``x = ((‖d_sft‖ − ‖d_dpo‖) / max(‖d_sft‖, ‖d_dpo‖) + 1) / 2``; **DPO-only** ``x < 0.1``, **SFT-only**
``x > 0.9``, **shared** ``|x − 0.5| < 0.1``, other otherwise (:data:`CLASS_THRESHOLD`).

**Latent Scaling** (Minder et al. 2025; the closed form of diffing-toolkit's ``latent_scaling/closed_form.py``):
for latent ``j`` with activation ``f_j`` and direction ``d`` (its DPO decoder row; for an SFT-leaning latent its SFT
row), ``β = argmin_β Σ_t ‖y_t − β f_tj d‖² = (d · Σ_t f_tj y_t) / (‖d‖² Σ_t f_tj²)`` for two targets per model:
the *error* (the model's activation minus the reconstruction without latent ``j``) and the *reconstruction* without
latent ``j``. The ratios ``nu_error = β_ε(SFT) / β_ε(DPO)`` and ``nu_reconstruction = β_r(SFT) / β_r(DPO)`` (the
paper's nu_epsilon, nu_r) say how much of the latent SFT holds after all: near 0 it is DPO's own; near 1 it is a
sparsity artefact (Complete Shrinkage, Latent Decoupling). **The flag rule, fixed before any pair was measured:** a
model-specific latent is flagged an artefact when ``nu_error ≥ 0.5`` or ``nu_reconstruction ≥ 0.5`` (the other model
holds at least half of it), and its β is *unreliable* when a ratio falls outside ``[−0.1, 2]`` or its own model's β
is not positive (the range Minder et al.'s evaluation keeps, ``tools/setup_to_eval.py``).

Example:
    >>> relative_norm(np.array([1.0, 0.0, 1.0, 0.05]), np.array([0.0, 1.0, 1.0, 1.0])).round(6).tolist()
    [1.0, 0.0, 0.5, 0.025]
    >>> classes(np.array([1.0, 0.0, 0.5, 0.025, 0.75])).tolist()
    ['sft_only', 'dpo_only', 'shared', 'dpo_only', 'other']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dictionary.coders import Coder
from dictionary.store import ShardData, Store
from dictionary.train import inputs_of

CLASS_THRESHOLD = 0.1  # diffing-toolkit's ``treshold``
ARTEFACT_RATIO = 0.5
VALID_RATIO = (-0.1, 2.0)
CLASSES: tuple[str, ...] = ("dpo_only", "sft_only", "shared", "other")
TOP_TOKENS = 8  # top-activating held-out tokens kept per latent


def relative_norm(sft_norm: np.ndarray, dpo_norm: np.ndarray) -> np.ndarray:
    """diffing-toolkit's ``dec_norm_diff`` with SFT as base: 0 DPO-only, 0.5 equal, 1 SFT-only."""
    largest = np.maximum(np.maximum(sft_norm, dpo_norm), 1e-30)
    return np.asarray(((sft_norm - dpo_norm) / largest + 1) / 2)


def classes(x: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, "other", dtype=object)
    out[np.abs(x - 0.5) < CLASS_THRESHOLD] = "shared"
    out[x < CLASS_THRESHOLD] = "dpo_only"
    out[x > 1 - CLASS_THRESHOLD] = "sft_only"
    return out


@dataclass
class HeldOut:
    """The held-out figures of one dictionary."""

    tokens: int
    fve: list[float]  # per input slot
    fve_difference: float | None  # the crosscoder's, of dpo − sft (None for one input slot)
    l0: float
    dead: int
    firing: np.ndarray  # [F] fraction of held-out tokens each latent fires on
    mean_activation: np.ndarray  # [F] mean activation over the tokens it fires on
    top: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)  # latent -> (value, sequence, pos)
    max_norm: float = 0.0  # the largest activation norm of either model on these tokens


@torch.no_grad()
def evaluate(coder: Coder, store: Store, shards: list[int], kind: str, top_latents: int = 0) -> HeldOut:
    """Held-out FVE, L0, dead latents and firing rates; the top-activating tokens of every latent (``top_latents``
    > 0: kept for all latents, :data:`TOP_TOKENS` each)."""
    sums = _Sums(coder.inputs, coder.latents)
    best: dict[int, list[tuple[float, int, int]]] = {}
    for index in shards:
        data = store.read(index)
        rows = np.flatnonzero(data.held_out)
        if not rows.size:
            continue
        x = inputs_of(kind, data, rows)
        f = coder.encode(x)
        sums.add(x, coder.decode(f), f)
        sums.max_norm = max(sums.max_norm, float(inputs_of("crosscoder", data, rows).norm(dim=-1).max()))
        if top_latents:
            _keep_top(best, f, data, rows)
    return sums.result(best)


class _Sums:
    def __init__(self, inputs: int, latents: int) -> None:
        self.n = 0
        self.max_norm = 0.0
        self.sq_err = torch.zeros(inputs, dtype=torch.float64)
        self.sum = torch.zeros(inputs, 0, dtype=torch.float64)
        self.sum_sq = torch.zeros(inputs, dtype=torch.float64)
        self.active = torch.zeros(latents, dtype=torch.float64)
        self.mass = torch.zeros(latents, dtype=torch.float64)
        self.diff = torch.zeros(3, dtype=torch.float64)  # squared error, sum of squares; the sum is kept apart
        self.diff_sum = torch.zeros(0, dtype=torch.float64)

    def add(self, x: torch.Tensor, recon: torch.Tensor, f: torch.Tensor) -> None:
        x64 = x.double()
        if self.sum.shape[1] == 0:
            self.sum = torch.zeros(x.shape[1], x.shape[2], dtype=torch.float64)
        self.n += len(x)
        self.sq_err += (x64 - recon.double()).pow(2).sum((0, 2))
        self.sum += x64.sum(0)
        self.sum_sq += x64.pow(2).sum((0, 2))
        self.active += (f > 0).double().sum(0)
        self.mass += f.double().sum(0)
        if x.shape[1] == 2:
            true, recon_diff = x64[:, 1] - x64[:, 0], recon[:, 1].double() - recon[:, 0].double()
            self.diff[0] += (true - recon_diff).pow(2).sum()
            self.diff[1] += true.pow(2).sum()
            self.diff_sum = true.sum(0) if self.diff_sum.numel() == 0 else self.diff_sum + true.sum(0)

    def result(self, top: dict[int, list[tuple[float, int, int]]]) -> HeldOut:
        n = max(self.n, 1)
        total = self.sum_sq - self.sum.pow(2).sum(-1) / n
        fve = [float(1 - e / t) if t > 0 else float("nan") for e, t in zip(self.sq_err, total, strict=True)]
        firing = (self.active / n).numpy()
        mean = torch.where(self.active > 0, self.mass / self.active.clamp_min(1), torch.zeros_like(self.mass))
        l0 = float(self.active.sum() / n)
        fve_difference = None
        if self.diff_sum.numel():
            total_diff = float(self.diff[1] - self.diff_sum.pow(2).sum() / n)
            fve_difference = float(1 - self.diff[0] / total_diff) if total_diff > 0 else float("nan")
        dead = int((self.active == 0).sum())
        return HeldOut(self.n, fve, fve_difference, l0, dead, firing, mean.numpy(), top, self.max_norm)


def _keep_top(
    best: dict[int, list[tuple[float, int, int]]], f: torch.Tensor, data: ShardData, rows: np.ndarray
) -> None:
    values, where = f.topk(min(TOP_TOKENS, len(f)), dim=0)
    for latent in torch.nonzero((values > 0).any(0)).flatten().tolist():
        entries = best.setdefault(latent, [])
        for value, row in zip(values[:, latent].tolist(), where[:, latent].tolist(), strict=True):
            if value > 0:
                token = rows[row]
                entries.append((float(value), int(data.sequence[token]), int(data.position[token])))
        entries.sort(key=lambda e: -e[0])
        del entries[TOP_TOKENS:]


@dataclass
class Scaling:
    """Latent Scaling of every latent: β per target and model (with ``d`` the latent's leaning model's decoder row),
    the two ratios (the other model's β over its own), and the verdict per latent (module doc)."""

    beta: dict[str, np.ndarray]  # "error_sft", "error_dpo", "reconstruction_sft", "reconstruction_dpo"
    nu_error: np.ndarray
    nu_reconstruction: np.ndarray
    leaning: np.ndarray  # "dpo" or "sft": whose decoder row is d
    tokens: int

    def verdicts(self) -> np.ndarray:
        """Per latent: ``specific`` (both ratios below :data:`ARTEFACT_RATIO`), ``artefact`` or ``unreliable``."""
        low, high = VALID_RATIO
        own = (
            np.where(self.leaning == "dpo", self.beta["error_dpo"], self.beta["error_sft"]),
            np.where(self.leaning == "dpo", self.beta["reconstruction_dpo"], self.beta["reconstruction_sft"]),
        )
        valid = (own[0] > 0) & (own[1] > 0)
        for nu in (self.nu_error, self.nu_reconstruction):
            valid &= np.isfinite(nu) & (nu >= low) & (nu <= high)
        artefact = (self.nu_error >= ARTEFACT_RATIO) | (self.nu_reconstruction >= ARTEFACT_RATIO)
        return np.where(~valid, "unreliable", np.where(artefact, "artefact", "specific"))


@torch.no_grad()
def latent_scaling(coder: Coder, store: Store, shards: list[int], leaning: np.ndarray, max_tokens: int) -> Scaling:
    """The closed-form β of every latent over up to ``max_tokens`` training tokens (module doc), in float64."""
    decoder = coder.weights().decoder.double()  # [2, F, d] in activation units
    rows = torch.arange(decoder.shape[1])
    side = torch.from_numpy((leaning == "sft").astype(np.int64))
    direction = decoder[side, rows]  # [F, d]: the leaning model's row
    sums: dict[str, torch.Tensor] = {}
    c = torch.zeros(decoder.shape[1], dtype=torch.float64)
    seen = 0
    for index in shards:
        if seen >= max_tokens:
            break
        data = store.read(index)
        picked = np.flatnonzero(~data.held_out)[: max_tokens - seen]
        x = inputs_of("crosscoder", data, picked)
        f = coder.encode(x).double()
        recon = coder.decode(f.float()).double()
        for m, name in enumerate(("sft", "dpo")):
            error = x[:, m].double() - recon[:, m]
            _add(sums, f"error_{name}", error.T @ f)  # [d, F]
            _add(sums, f"reconstruction_{name}", recon[:, m].T @ f)
        c += f.pow(2).sum(0)
        seen += len(picked)
    beta = {}
    norm2 = direction.pow(2).sum(-1) * c
    for m, name in enumerate(("sft", "dpo")):
        own = decoder[m]  # the latent's row in this model: removed from (added back to) the target
        error = (direction * sums[f"error_{name}"].T).sum(-1) + c * (direction * own).sum(-1)
        recon = (direction * sums[f"reconstruction_{name}"].T).sum(-1) - c * (direction * own).sum(-1)
        beta[f"error_{name}"] = _safe(error, norm2)
        beta[f"reconstruction_{name}"] = _safe(recon, norm2)
    nu: dict[str, np.ndarray] = {}
    dpo_side = leaning == "dpo"
    for target in ("error", "reconstruction"):
        other = np.where(dpo_side, beta[f"{target}_sft"], beta[f"{target}_dpo"])
        own_beta = np.where(dpo_side, beta[f"{target}_dpo"], beta[f"{target}_sft"])
        with np.errstate(divide="ignore", invalid="ignore"):
            nu[target] = np.where(own_beta != 0, other / own_beta, np.nan)
    return Scaling(beta, nu["error"], nu["reconstruction"], leaning, seen)


def _add(sums: dict[str, torch.Tensor], key: str, value: torch.Tensor) -> None:
    sums[key] = sums[key] + value if key in sums else value


def _safe(numerator: torch.Tensor, denominator: torch.Tensor) -> np.ndarray:
    out = torch.where(denominator > 0, numerator / denominator.clamp_min(1e-300), torch.full_like(numerator, np.nan))
    return out.numpy()


def summary_of(held: HeldOut) -> dict[str, Any]:
    return {
        "held_out_tokens": held.tokens,
        "fve": held.fve,
        "fve_difference": held.fve_difference,
        "l0": held.l0,
        "dead": held.dead,
        "alive": int((held.firing > 0).sum()),
    }
