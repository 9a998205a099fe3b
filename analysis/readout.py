"""What a unit writes into the model's predictions: directions read through the final norm and the unembedding.

No forward pass. A direction ``v`` in the residual stream, if it reached the end of the model
unchanged, would move the logits by ``W_U (g ⊙ v) / rms(x)``: ``g`` the final RMSNorm's
weight, ``W_U`` the unembedding ([vocab, d_model]; the embedding matrix when the embeddings
are tied), ``rms(x)`` the norm's per-token scale. :class:`Lens` computes ``W_U (g ⊙ v)`` (the
direct logit effect per unit of ``v``, before ``1/rms``) and :func:`read_out` lists the
tokens it pushes up (promoted) and down (suppressed). What is read:

``mlp_post`` unit *u* of layer *i* (a true MLP neuron)
    its output direction ``W_down[:, u]``: what one unit of its activation adds to the residual stream.
``mlp_out`` / ``attn_out`` / ``resid_post`` coordinate *c*
    the unit vector ``e_c``, i.e. ``g_c · W_U[:, c]``: the coordinate's own unembedding column
    ("row" in TransformerLens's ``W_U[d_model, vocab]``).
the DPO − SFT mean difference at layer *i* (:func:`mean_difference`)
    the mean over the capability's prompts of DPO's minus SFT's activation at the recorded
    position. For ``mlp_post`` it is taken to the residual stream exactly, by linearity:
    ``W_down^DPO · mean(h^DPO) − W_down^SFT · mean(h^SFT)``, the mean difference of the MLP's output.

What it ignores: the norm's ``1/rms(x)`` (a positive per-token scalar: it scales every token's
logit alike, so the ranking of tokens is exact, only their size is not), and the layers after
*i*, which read and rewrite the direction before it reaches the unembedding (for the last
layers little happens after; for early layers the read-out says what the direction *would*
predict, the logit lens's caveat). Adding the same number to every logit changes no
probability, so only differences between tokens mean anything.

Example:
    >>> lens = Lens(norm=np.ones(2), unembedding=np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]))
    >>> lens.logits(np.array([[2.0, 0.5]])).tolist()
    [[2.0, 0.5, -2.0]]
    >>> [t.token_id for t in read_out(lens, np.array([[2.0, 0.5]]), k=1)[0].promoted]
    [0]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from einops import rearrange, reduce

from access.hook_table import HOOK_TABLE
from analysis.checkpoint import Checkpoint
from analysis.maps import read_window
from core.errors import ProbeError
from probes.store import RunReader


@dataclass(frozen=True)
class TokenScore:
    """One token of a read-out: its id, its text (decoded alone) and its logit effect ``(W_U (g ⊙ v))_t``."""

    token_id: int
    token: str
    logit: float


@dataclass(frozen=True)
class ReadOut:
    """The tokens a direction pushes up most (``promoted``, largest first) and down most (``suppressed``,
    most negative first)."""

    promoted: list[TokenScore]
    suppressed: list[TokenScore]


@dataclass
class Lens:
    """The final norm's weight ``g`` (d_model,) and the unembedding ``W_U`` (vocab, d_model) of one checkpoint."""

    norm: np.ndarray
    unembedding: np.ndarray

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> Lens:
        return cls(checkpoint.final_norm().numpy(), checkpoint.unembedding().numpy())

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        """(K, d_model) directions -> (K, vocab) direct logit effects, in float32 (one BLAS product)."""
        scaled = np.asarray(vectors, dtype=np.float32) * self.norm.astype(np.float32)
        return np.asarray(scaled @ rearrange(self.unembedding, "vocab d -> d vocab"))


def read_out(lens: Lens, vectors: np.ndarray, k: int = 10, decode: Callable[[int], str] = str) -> list[ReadOut]:
    """For each row of ``vectors`` the ``k`` most promoted and most suppressed tokens (ties by token id)."""
    logits = lens.logits(np.atleast_2d(vectors))
    k = min(k, logits.shape[1])
    out = []
    for row in logits:
        up = _extreme(row, k)
        down = _extreme(-row, k)
        out.append(
            ReadOut(
                [TokenScore(int(t), decode(int(t)), float(row[t])) for t in up],
                [TokenScore(int(t), decode(int(t)), float(row[t])) for t in down],
            )
        )
    return out


def _extreme(row: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first, ties by index (without sorting the whole vocabulary)."""
    candidates = np.argpartition(-row, k - 1)[:k] if k < row.size else np.arange(row.size)
    cutoff = row[candidates].min()
    pool = np.flatnonzero(row >= cutoff)
    return pool[np.lexsort((pool, -row[pool]))][:k]


def unit_directions(checkpoint: Checkpoint, hook: str, units: list[tuple[int, int]]) -> np.ndarray:
    """(len(units), d_model): what one unit of each (layer, unit)'s activation writes into the residual stream."""
    d_model = checkpoint.shape.d_model
    out = np.zeros((len(units), d_model), dtype=np.float32)
    if HOOK_TABLE[hook].width == "d_model":
        for i, (_, unit) in enumerate(units):
            out[i, _checked(unit, d_model, hook)] = 1.0
        return out
    downs: dict[int, np.ndarray] = {}
    for i, (layer, unit) in enumerate(units):
        if layer not in downs:
            downs[layer] = checkpoint.mlp_weight(layer, "down").numpy()
        out[i] = downs[layer][:, _checked(unit, checkpoint.shape.d_mlp, hook)]
    return out


def _checked(unit: int, width: int, hook: str) -> int:
    if not 0 <= unit < width:
        raise ProbeError(f"unit {unit} is outside {hook}, which has units 0-{width - 1}")
    return unit


def mean_difference(
    run: RunReader, capability: str, hook: str, layers: list[int], sft: Checkpoint, dpo: Checkpoint
) -> np.ndarray:
    """(len(layers), d_model) float64: the DPO − SFT mean activation per layer, in the residual stream (module doc)."""
    per_model = "n layer unit -> layer unit"  # one model's window at a time: the float64 copies are large
    means = {
        m: reduce(read_window(run, m, capability, hook, layers).astype(np.float64), per_model, "mean")
        for m in ("sft", "dpo")
    }
    if HOOK_TABLE[hook].width == "d_model":
        return np.asarray(means["dpo"] - means["sft"])
    rows = []
    for i, layer in enumerate(layers):
        rows.append(
            dpo.mlp_weight(layer, "down").numpy().astype(np.float64) @ means["dpo"][i]
            - sft.mlp_weight(layer, "down").numpy().astype(np.float64) @ means["sft"][i]
        )
    return np.stack(rows) if rows else np.zeros((0, dpo.shape.d_model))


class TokenText:
    """Token id -> its text decoded alone, from the model directory's ``tokenizer.json`` (no transformers import);
    directories without one go through :func:`core.models.load_tokenizer`."""

    def __init__(self, model_dir: str | Path, flag: str) -> None:
        file = Path(model_dir) / "tokenizer.json"
        if file.is_file():
            from tokenizers import Tokenizer

            self._decode: Callable[[list[int]], str] = Tokenizer.from_file(str(file)).decode
        else:
            from core.chat import decode_text
            from core.models import load_tokenizer

            tokenizer = load_tokenizer(model_dir, flag)
            self._decode = lambda ids: decode_text(tokenizer, ids)
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        if token_id not in self._cache:
            self._cache[token_id] = _decoded(self._decode, token_id)
        return self._cache[token_id]


def _decoded(decode: Any, token_id: int) -> str:
    try:
        return str(decode([token_id], skip_special_tokens=False))
    except TypeError:  # a decode without the keyword
        return str(decode([token_id]))


def shown(token: str) -> str:
    """A token as printed: quoted, whitespace and control characters escaped (``' Paris'``, ``'\\n'``).

    >>> shown(" Paris"), shown("\\n")
    ("' Paris'", "'\\\\n'")
    """
    return repr(token)
