"""The two dictionaries, in plain torch: a BatchTopK crosscoder (one decoder per model) and a BatchTopK diff-SAE.

Both read ``x`` of shape ``[batch, inputs, d]``: the crosscoder ``[sft, dpo]`` (``inputs`` 2, one encoder slice and
one decoder per model), the diff-SAE ``[dpo − sft]`` (``inputs`` 1). A latent's pre-activation is
``Σ_m x_m W_enc[m] + b_enc``; BatchTopK keeps, over the whole batch, the ``k × batch`` largest *scores*
``relu(pre) · Σ_m ‖W_dec[m, j]‖`` (the decoder-norm-weighted code of Lindsey et al.'s crosscoder, as
``dictionary_learning``'s ``BatchTopKCrossCoder`` with ``code_normalization: crosscoder``), and the kept latents keep
their ``relu(pre)`` values. Outside training a latent fires when its score exceeds :attr:`Coder.threshold`, the
running mean (EMA, β 0.999) of the smallest score each training batch kept (the same library's inference rule), so
encoding one token does not depend on its batch.

The decoders reconstruct each input: ``x̂_m = f W_dec[m] + b_dec[m]``. Inputs are divided by one scale per input
slot, fixed before training (:func:`scales`: mean ‖x_m‖² becomes ``d``), so that the learning rate means the same at
every layer and model; :meth:`Coder.reconstruct` and the weights returned by :meth:`Coder.weights` work in the
activations' own units.

Example:
    >>> import torch
    >>> coder = Coder(inputs=2, d=8, latents=16, k=2, seed=0)
    >>> x = torch.randn(32, 2, 8)
    >>> f = coder.encode(x, train=True)
    >>> int((f > 0).sum())       # BatchTopK: k x batch latents in all
    64
    >>> coder.reconstruct(x).shape
    torch.Size([32, 2, 8])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

THRESHOLD_BETA = 0.999  # EMA of the smallest kept score (dictionary_learning's BatchTopK trainers)
AUXK_ALPHA = 1 / 32  # weight of the auxiliary loss that revives dead latents (Gao et al. 2024; the same trainers)


@dataclass(frozen=True)
class CoderWeights:
    """A trained dictionary in the activations' own units: what the latent patch (:mod:`access.latent_edits`),
    the cards and the reports read. ``encoder`` ``[inputs, d, F]``, ``decoder`` ``[inputs, F, d]``."""

    encoder: torch.Tensor
    encoder_bias: torch.Tensor
    decoder: torch.Tensor
    decoder_bias: torch.Tensor
    threshold: float
    score_weights: torch.Tensor  # [F]: what a latent's activation is multiplied by before the threshold


class Coder(nn.Module):
    """A BatchTopK dictionary over ``inputs`` activation slots of width ``d`` with ``latents`` latents."""

    scale: torch.Tensor  # [inputs] buffer: what each slot's activations are divided by
    threshold: torch.Tensor  # scalar buffer: the inference threshold on a latent's score (-1 before training)

    def __init__(self, inputs: int, d: int, latents: int, k: int, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        decoder = torch.randn(inputs, latents, d, generator=generator)
        decoder = decoder / decoder.norm(dim=-1, keepdim=True) / math.sqrt(inputs)
        self.decoder = nn.Parameter(decoder)
        self.encoder = nn.Parameter(decoder.transpose(1, 2).clone())  # init with the transpose, as the libraries do
        self.encoder_bias = nn.Parameter(torch.zeros(latents))
        self.decoder_bias = nn.Parameter(torch.zeros(inputs, d))
        self.register_buffer("scale", torch.ones(inputs))
        self.register_buffer("threshold", torch.tensor(-1.0))
        self.k, self.latents, self.inputs = k, latents, inputs

    def decoder_norms(self) -> torch.Tensor:
        """``[inputs, F]``: each latent's decoder norm per input slot (in scaled units)."""
        norms: torch.Tensor = self.decoder.norm(dim=-1)
        return norms

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-activations ``[batch, F]`` of raw activations ``x`` ``[batch, inputs, d]`` (one matrix product)."""
        scaled = (x / self.scale[None, :, None]).reshape(len(x), -1)
        return torch.addmm(self.encoder_bias, scaled, self.encoder.reshape(-1, self.latents))

    def encode(self, x: torch.Tensor, train: bool = False, pre: torch.Tensor | None = None) -> torch.Tensor:
        """Latent activations ``[batch, F]``: BatchTopK over the batch (``train``), else the score threshold
        (``pre``: the pre-activations, when already computed)."""
        act = torch.relu(self.pre(x) if pre is None else pre)
        score = act * self.decoder_norms().sum(0)
        if not train:
            return act * (score > self.threshold)
        kept = min(self.k * x.shape[0], score.numel())
        top = score.flatten().topk(kept, sorted=False)
        mask = torch.zeros_like(score).flatten().scatter_(0, top.indices, 1.0).view_as(score)
        with torch.no_grad():
            positive = top.values[top.values > 0]
            if positive.numel():
                smallest = positive.min()
                new = (
                    smallest
                    if self.threshold < 0
                    else THRESHOLD_BETA * self.threshold + (1 - THRESHOLD_BETA) * smallest
                )
                self.threshold.copy_(new)
        return act * mask

    def decode_scaled(self, f: torch.Tensor) -> torch.Tensor:
        """Reconstructions ``[batch, inputs, d]`` in scaled units (one matrix product)."""
        rows = self.decoder.transpose(0, 1).reshape(self.latents, -1)
        return (f @ rows).view(len(f), self.inputs, -1) + self.decoder_bias

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """Reconstructions ``[batch, inputs, d]`` in the activations' own units."""
        return self.decode_scaled(f) * self.scale[None, :, None]

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    def weights(self) -> CoderWeights:
        """The dictionary in the activations' own units (the scales folded in), detached, float32."""
        scale = self.scale.detach()
        return CoderWeights(
            encoder=(self.encoder.detach() / scale[:, None, None]).float().clone(),
            encoder_bias=self.encoder_bias.detach().float().clone(),
            decoder=(self.decoder.detach() * scale[:, None, None]).float().clone(),
            decoder_bias=(self.decoder_bias.detach() * scale[:, None]).float().clone(),
            threshold=float(self.threshold),
            score_weights=self.decoder_norms().detach().sum(0).float().clone(),
        )


def scales(sample: torch.Tensor) -> torch.Tensor:
    """One scale per input slot: ``sqrt(mean ‖x_m‖² / d)`` over ``sample`` ``[n, inputs, d]``, so that a scaled
    activation has mean squared norm ``d`` (1 where a slot is all zero).

    >>> scales(torch.full((4, 1, 9), 2.0)).tolist()
    [2.0]
    """
    power = sample.double().pow(2).sum(-1).mean(0) / sample.shape[-1]
    return torch.where(power > 0, power.sqrt(), torch.ones_like(power)).float()


def training_loss(coder: Coder, x: torch.Tensor, dead: torch.Tensor, aux_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, latent activations) of one BatchTopK step on ``x``: the mean squared reconstruction error in scaled
    units, plus :data:`AUXK_ALPHA` times the AuxK loss (the ``aux_k`` largest pre-activations among the ``dead``
    latents reconstruct what the live ones left; normalised by the error's variance, as in Gao et al. 2024)."""
    pre = coder.pre(x)
    f = coder.encode(x, train=True, pre=pre)
    error = x / coder.scale[None, :, None] - coder.decode_scaled(f)
    loss = error.pow(2).sum((-1, -2)).mean()
    n_dead = int(dead.sum())
    if n_dead and aux_k:
        pre = torch.relu(pre)[:, dead]
        top = pre.topk(min(aux_k, n_dead), dim=-1)
        aux_f = torch.zeros_like(pre).scatter_(-1, top.indices, top.values)
        aux = torch.einsum("bf,ifd->bid", aux_f, coder.decoder[:, dead])
        residual = error.detach()
        variance = (residual - residual.mean(0)).pow(2).sum((-1, -2)).mean().clamp_min(1e-12)
        loss = loss + AUXK_ALPHA * (residual - aux).pow(2).sum((-1, -2)).mean() / variance
    return loss, f
