"""The rankings a faithfulness curve compares: each orders every unit of a hook point, most changed first.

=====================  =========================================================================  ============
ranking                score of a unit (larger first)                                              needs
=====================  =========================================================================  ============
``count``              |Δ| of the paper's top-k% membership count (``topk_count``), DPO vs SFT      the run
``mean_diff``          |Δ| of the mean activation, DPO vs SFT on the same prompts (global basis)     the run
``local_mean_diff``    the same in the local basis (each DPO layer on SFT's input to it)            the run, local
``local_effect_size``  |d_z| of the paired difference, local basis                                  the run, local
``attribution``        the share of the gap the unit's patch closes by the gradient of the gap      a pass here
                       (:mod:`access.relevance`, ``gradient``), in the curve's direction
``relp``               the same by relevance patching (``relp``)                                    a pass here
``weight``             the relative SFT -> DPO change of the unit's own weights                     checkpoints
=====================  =========================================================================  ============

The activation rankings read the run's recording (the capability's prompts of the training distribution, at the
run's position), so the units are chosen on other rows than the held-out rows the curve is measured on. The
estimated rankings are computed on the curve's own rows, in each direction (DPO's units for DPO <- SFT, SFT's for SFT
<- DPO); every other ranking is the same in both directions. Units at the ``attn_z`` hook point are **heads**: a
head's score is the sum of its ``head_dim`` coordinates' scores, and its weights are its query, key, value and
output-projection weights. Units a ranking cannot score (layers the run did not record) come last; ties, among them
every score of 0, are broken by a seeded random order, so that no layer is favoured.

:data:`RANKINGS` is the table (name, label, what it needs, how it is computed), shaped like
:mod:`analysis`'s registry rows so that it can join them.

Example:
    >>> order = unit_order(np.array([[0.0, 3.0], [1.0, 3.0]]), seed=0)
    >>> [divmod(int(i), 2) for i in order[:2]], sorted(divmod(int(i), 2) for i in order[2:])
    ([(0, 1), (1, 1)], [(0, 0), (1, 0)])
    >>> RANKINGS["weight"].needs
    'checkpoints'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.rankings import ATTRIBUTION, EFFECT_SIZE, MEAN_DIFF, TOPK_COUNT, ranking
from core.errors import ProbeError

if TYPE_CHECKING:
    from access.relevance import GapAttribution
    from probes.store import RunReader

COUNT = "count"  # the paper's ranking, as --select names it
WEIGHT = "weight"
RELP = "relp"
LOCAL_MEAN_DIFF, LOCAL_EFFECT_SIZE = (ranking(name).rule_name("local") for name in (MEAN_DIFF, EFFECT_SIZE))
ESTIMATED = {ATTRIBUTION: "gradient", RELP: "relp"}  # ranking -> its estimator in access.relevance


@dataclass(frozen=True)
class Inputs:
    """What the rankings are computed from: the run, the pair's directories, the unit grouping, the gradient passes."""

    run: RunReader
    capability: str
    hook: str
    sft_dir: Path
    dpo_dir: Path
    n_layers: int
    group: int  # coordinates per unit: head_dim at attn_z, else 1
    attribution: dict[str, GapAttribution]  # per direction (the model the direction edits), when computed


Scores = dict[str, np.ndarray]  # per direction: [n_layers, units], larger first (the same array for both, mostly)


@dataclass(frozen=True)
class Ranking:
    """One ranking: its name, label, what it needs (``run``, ``local``, ``pass``, ``checkpoints``) and how it scores."""

    name: str
    label: str
    needs: str
    compute: Callable[[Inputs, tuple[str, ...]], Scores]

    @property
    def needs_pass(self) -> bool:
        """Whether it is computed from a gradient pass through the pair here (the estimated rankings)."""
        return self.needs == "pass"


def _activation(metric: str, basis: str) -> Callable[[Inputs, tuple[str, ...]], Scores]:
    def compute(inputs: Inputs, directions: tuple[str, ...]) -> Scores:
        from analysis.config import AnalysisConfig
        from analysis.local_basis import basis_maps

        config = AnalysisConfig(metric=metric, basis=basis, layers="all", stability_resamples=0)
        maps = basis_maps(inputs.run, inputs.capability, inputs.hook, config)
        scores = np.full((inputs.n_layers, maps.width), np.nan)
        scores[maps.layers] = np.abs(np.nan_to_num(maps.delta, nan=0.0))
        return dict.fromkeys(directions, grouped(scores, inputs.group))

    return compute


def _estimated(ranking: str) -> Callable[[Inputs, tuple[str, ...]], Scores]:
    def compute(inputs: Inputs, directions: tuple[str, ...]) -> Scores:
        out = {}
        for direction in directions:
            found = inputs.attribution.get(direction)
            if found is None:
                raise ProbeError(f"ranking {ranking}: no gradient pass for the {direction} direction")
            out[direction] = grouped(found.closed(ESTIMATED[ranking], inputs.hook), inputs.group)
        return out

    return compute


def _weight(inputs: Inputs, directions: tuple[str, ...]) -> Scores:
    if inputs.group > 1:
        scores = head_weight_change(inputs.sft_dir, inputs.dpo_dir, inputs.n_layers, inputs.group)
    else:
        from analysis.checkpoint import Checkpoint
        from analysis.weight_change import weight_change

        with Checkpoint(inputs.sft_dir, "the SFT model") as sft, Checkpoint(inputs.dpo_dir, "the DPO model") as dpo:
            scores = weight_change(sft, dpo, [inputs.hook], "sft_dpo")[inputs.hook].relative
    return dict.fromkeys(directions, np.nan_to_num(scores, posinf=np.finfo(np.float64).max))


RANKINGS: dict[str, Ranking] = {
    row.name: row
    for row in (
        Ranking(COUNT, "the paper's count (topk_count)", "run", _activation(TOPK_COUNT, "global")),
        Ranking(MEAN_DIFF, "mean_diff (global basis)", "run", _activation(MEAN_DIFF, "global")),
        Ranking(LOCAL_MEAN_DIFF, "mean_diff (local basis)", "local", _activation(MEAN_DIFF, "local")),
        Ranking(LOCAL_EFFECT_SIZE, "effect_size (local basis)", "local", _activation(EFFECT_SIZE, "local")),
        Ranking(ATTRIBUTION, "gradient attribution of the gap", "pass", _estimated(ATTRIBUTION)),
        Ranking(RELP, "relevance patching (RelP) of the gap", "pass", _estimated(RELP)),
        Ranking(WEIGHT, "weight change", "checkpoints", _weight),
    )
}


def grouped(scores: np.ndarray, group: int) -> np.ndarray:
    """``[layers, coordinates]`` scores as ``[layers, units]``: each unit the sum of its ``group`` coordinates."""
    if group == 1:
        return scores
    layers, width = scores.shape
    return np.asarray(scores.reshape(layers, width // group, group).sum(-1))


def head_weight_change(sft_dir: Path, dpo_dir: Path, n_layers: int, head_dim: int) -> np.ndarray:
    """``[layers, heads]``: the relative change ``||w_dpo - w_sft|| / ||w_sft||`` of each head's own weights (its
    query rows, its key-value head's key and value rows, and its output-projection columns, with their biases)."""
    from access.hook_points import ARCHITECTURES
    from analysis.checkpoint import Checkpoint

    with Checkpoint(sft_dir, "the SFT model") as sft, Checkpoint(dpo_dir, "the DPO model") as dpo:
        heads = int(sft.config.num_attention_heads)
        share = heads // int(getattr(sft.config, "num_key_value_heads", None) or heads)  # query heads per kv head
        arch = ARCHITECTURES[sft.shape.model_type]
        out = np.zeros((n_layers, heads))
        for layer in range(n_layers):
            delta, before = np.zeros(heads), np.zeros(heads)
            parts = [
                (f"{arch.attention}.{p}.{kind}", repeat)
                for p, repeat in (("q_proj", 1), ("k_proj", share), ("v_proj", share))
                for kind in ("weight", "bias")
            ]
            for part, repeat in [*parts, (f"{arch.attention}.{arch.o_proj}.weight", 0)]:
                name = sft.block_name(layer, part)
                if not sft.has(name):
                    continue
                a, b = sft.tensor(name).double().numpy(), dpo.tensor(name).double().numpy()
                if repeat == 0:  # the output projection reads head h from its columns
                    a, b = a.T, b.T
                d, w = _rows(a, b, head_dim)
                delta += np.repeat(d, max(repeat, 1))
                before += np.repeat(w, max(repeat, 1))
            with np.errstate(divide="ignore", invalid="ignore"):
                out[layer] = np.where(before > 0, np.sqrt(delta / before), np.where(delta > 0, np.inf, 0.0))
    return out


def _rows(a: np.ndarray, b: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums of squares of ``b - a`` and of ``a`` over each block of ``size`` rows (one head's rows; a bias is one
    value per row)."""
    a2 = a.reshape(a.shape[0] // size, -1)
    b2 = b.reshape(b.shape[0] // size, -1)
    return ((b2 - a2) ** 2).sum(1), (a2**2).sum(1)


def unit_order(scores: np.ndarray, seed: int) -> np.ndarray:
    """Every unit's flat index (``layer * units + unit``), largest score first; NaN last; ties in a seeded random
    order."""
    flat = np.nan_to_num(scores.reshape(-1).astype(np.float64), nan=-np.inf)
    tie_break = np.random.default_rng(seed).permutation(flat.size)
    return np.lexsort((tie_break, -flat))


def ranking_names(spec: str | list[str]) -> list[str]:
    """``"count,relp"`` (or a list) as known rankings without repeats; empty or unknown is one error."""
    from core.config_file import OptionError

    names = spec.split(",") if isinstance(spec, str) else [str(n) for n in spec]
    out: list[str] = []
    for name in (n.strip() for n in names):
        if name and name not in RANKINGS:
            raise OptionError("rankings", f"rankings from {', '.join(RANKINGS)}", name)
        if name and name not in out:
            out.append(name)
    if not out:
        raise OptionError("rankings", f"one or more of {', '.join(RANKINGS)}", spec)
    return out
