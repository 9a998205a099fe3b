"""The latent patch: one model's activations at one site plus the other model's share of a set of dictionary latents.

Minder et al.'s "fraction of the KL gap" edit (sparsity-artifacts-crosscoders, ``tools/halfway_interventions.py``,
``CrossCoderSteeringLatent``): at the site, the edited model's activation ``x_self`` becomes

* crosscoder: ``x_self + Σ_{j∈S} f_j (d_j^other − d_j^self)``, with ``f`` the crosscoder's latents on both models'
  activations at that token (the other model runs in lockstep up to the site, :class:`access.lockstep.Lockstep`);
* diff-SAE: ``x_sft + Σ_{j∈S} f_j d_j`` in the SFT model, ``x_dpo − Σ_{j∈S} f_j d_j`` in the DPO model, with ``f``
  the SAE's latents on ``x_dpo − x_sft``.

Latents fire by the dictionary's inference rule (score above its threshold, :mod:`dictionary.coders`). A token
whose activation norm exceeds :attr:`LatentCodec.norm_limit` (the first token of a sequence, an attention sink whose
norm is far outside what the dictionary was trained on) is left as it is. All of it in float32, cast back.

It is an edit kind like any other (:data:`access.edits.EDIT_KINDS` ``latent-patch``): it runs through
:class:`access.outcomes.Outcomes` (both engines: its source's values come from the lockstep, or once per batch for
every arm in the shared engine), and its placebos are random latent sets of the same size drawn from ``pool`` (the
dictionary's live latents).

Example:
    >>> import torch
    >>> codec = LatentCodec("diff-sae", torch.eye(2)[None], torch.zeros(2), torch.eye(2)[None], threshold=0.0)
    >>> sft, dpo = torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[1.0, 2.0]]])
    >>> codec.shift(sft, dpo, torch.tensor([1]), edited="sft").tolist()   # latent 1 carries the whole difference
    [[[0.0, 2.0]]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from access.drivers.base import SiteEdits
from access.edits import Edit, check_same_shape, register
from access.hook_points import n_layers, validate_hook, width
from access.lockstep import Lockstep
from access.sites import EditStats, tracked
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MODELS: tuple[str, ...] = ("sft", "dpo")


@dataclass(frozen=True, eq=False)
class LatentCodec:
    """A trained dictionary in the activations' units: ``encoder`` ``[inputs, d, F]``, ``decoder`` ``[inputs, F, d]``
    (inputs: ``[sft, dpo]`` for a crosscoder, ``[dpo − sft]`` for a diff-SAE)."""

    kind: str  # "crosscoder" or "diff-sae"
    encoder: torch.Tensor
    encoder_bias: torch.Tensor
    decoder: torch.Tensor
    threshold: float
    norm_limit: float = float("inf")
    score_weights: torch.Tensor | None = None  # [F]: weights of the threshold's score (default: decoder norms)

    @property
    def width(self) -> int:
        return int(self.decoder.shape[-1])

    @property
    def latents(self) -> int:
        return int(self.decoder.shape[1])

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.kind.encode())
        weights = [] if self.score_weights is None else [self.score_weights]
        for tensor in (self.encoder, self.encoder_bias, self.decoder, *weights):
            digest.update(tensor.detach().float().contiguous().numpy().tobytes())
        digest.update(f"{self.threshold!r}|{self.norm_limit!r}".encode())
        return digest.hexdigest()

    def codes(self, sft: torch.Tensor, dpo: torch.Tensor) -> torch.Tensor:
        """Latent activations ``[..., F]`` of the two models' activations ``[..., d]`` (float32)."""
        inputs = torch.stack([sft, dpo], dim=-2) if self.kind == "crosscoder" else (dpo - sft).unsqueeze(-2)
        encoder = self.encoder.to(sft.device)
        act = torch.relu(torch.einsum("...id,idf->...f", inputs, encoder) + self.encoder_bias.to(sft.device))
        weights = self.decoder.norm(dim=-1).sum(0) if self.score_weights is None else self.score_weights
        return act * (act * weights.to(sft.device) > self.threshold)

    def shift(self, sft: torch.Tensor, dpo: torch.Tensor, latents: torch.Tensor, edited: str) -> torch.Tensor:
        """What the patch adds to the edited model's activation (module doc); 0 where the norm guard holds."""
        f = self.codes(sft, dpo).index_select(-1, latents.to(sft.device))
        decoder = self.decoder.to(sft.device).index_select(1, latents.to(sft.device))
        if self.kind == "crosscoder":
            mine, other = (0, 1) if edited == "sft" else (1, 0)
            delta = f @ (decoder[other] - decoder[mine])
        else:
            delta = (f @ decoder[0]) * (1.0 if edited == "sft" else -1.0)
        own = sft if edited == "sft" else dpo
        inside = (own.norm(dim=-1, keepdim=True) <= self.norm_limit).to(delta.dtype)
        shifted: torch.Tensor = delta * inside
        return shifted


@register
@dataclass(frozen=True)
class LatentPatch(Edit):
    """Add the other model's share of latent set ``latents`` to the edited model at ``(hook, layer)`` (module doc)."""

    kind: ClassVar[str] = "latent-patch"
    hook: str
    layer: int
    latents: tuple[int, ...]
    codec: LatentCodec = field(compare=False)
    edited: str = "sft"  # which model of the pair this edit is applied to
    source: PreTrainedModel | None = field(default=None, compare=False)
    set_name: str = "latents"
    pool: tuple[int, ...] = ()  # where placebo sets are drawn from (the live latents)

    def __post_init__(self) -> None:
        validate_hook(self.hook)
        if self.edited not in MODELS:
            raise ProbeError(f"latent-patch: the edited model is sft or dpo, got {self.edited!r}")
        bad = [j for j in self.latents if not 0 <= j < self.codec.latents]
        if bad:
            raise ProbeError(f"latent-patch: latent {bad[0]} is outside the dictionary (0-{self.codec.latents - 1})")

    def check(self, model: PreTrainedModel) -> None:
        total = n_layers(model)
        if not 0 <= self.layer < total:
            raise ProbeError(f"latent-patch: layer {self.layer} is outside the model, which has layers 0-{total - 1}")
        if width(model, self.hook) != self.codec.width:
            raise ProbeError(
                f"latent-patch: the dictionary is {self.codec.width} wide; {self.hook} is {width(model, self.hook)} "
                "wide in this model"
            )
        if self.source is None:
            raise ProbeError("latent-patch: no source model given (the other model of the pair)")
        check_same_shape(model, self.source, "source", self.kind)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:
        assert self.source is not None  # check() refuses a patch without a source
        site = (self.hook, self.layer)
        lockstep = Lockstep(model, self.source, {site: torch.arange(self.codec.width)})
        index = torch.tensor(self.latents, dtype=torch.long)

        def fn(x: torch.Tensor) -> torch.Tensor:
            other = lockstep.values[site].to(device=x.device, dtype=torch.float32)
            own = x.to(torch.float32)
            sft, dpo = (own, other) if self.edited == "sft" else (other, own)
            out = (own + self.codec.shift(sft, dpo, index, self.edited)).to(x.dtype)
            stats.count(x if tracked(x) else None, out if tracked(x) else None)
            return out

        return SiteEdits([(self.hook, self.layer, fn)], lockstep)

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:  # noqa: ARG002 - the Edit interface
        return [replace(self, latents=latents, set_name="random latents") for latents in self.random_sets(n, seed)]

    def random_sets(self, n: int, seed: int) -> list[tuple[int, ...]]:
        """``n`` random sets of this set's size from :attr:`pool` (all latents where none is given)."""
        pool = np.asarray(self.pool or range(self.codec.latents))
        if len(self.latents) > len(pool):
            raise ProbeError(
                f"latent-patch: a set of {len(self.latents)} latents is larger than the pool ({len(pool)})"
            )
        rng = np.random.default_rng([seed, len(self.latents)])
        return [tuple(sorted(int(j) for j in rng.choice(pool, len(self.latents), replace=False))) for _ in range(n)]

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        return None if self.latents else "no latents: the patch adds nothing"

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "hook": self.hook,
            "layer": self.layer,
            "edited": self.edited,
            "dictionary": self.codec.kind,
            "dictionary_sha256": self.codec.fingerprint(),
            "set": self.set_name,
            "latents": list(self.latents),
        }

    def label(self) -> str:
        other = "dpo" if self.edited == "sft" else "sft"
        return f"latent patch {self.edited}<-{other}: {self.set_name} ({len(self.latents)})"


def codec_from(kind: str, weights: Any, norm_limit: float = float("inf")) -> LatentCodec:
    """A codec from a dictionary's weights (``encoder``, ``encoder_bias``, ``decoder``, ``threshold``,
    ``score_weights`` attributes)."""
    return LatentCodec(
        kind,
        weights.encoder,
        weights.encoder_bias,
        weights.decoder,
        float(weights.threshold),
        norm_limit,
        getattr(weights, "score_weights", None),
    )


def latent_sets(sets: dict[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Named latent sets as sorted tuples, empty ones dropped.

    >>> latent_sets({"a": [3, 1], "b": []})
    {'a': (1, 3)}
    """
    return {name: tuple(sorted(int(j) for j in s)) for name, s in sets.items() if len(s)}
