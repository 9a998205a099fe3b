"""Drivers: one registry of the ways into a model, the capture-and-edit contract, and what recorders share.

A driver is a way into a Hugging Face model. Every driver *captures* (records hook points);
``torch`` and ``nnsight`` also *edit* (generate with functions applied at hook points, see
:class:`SiteEdits`); ``transformer_lens`` captures only. Each is one row of :data:`DRIVERS`,
the only place its name is written.

A recorder wraps one loaded Hugging Face model and turns a left-padded batch into
``{hook: [batch, n_stored_layers, width]}`` float32 tensors on the CPU, already reduced
to one vector per prompt by the position policy. Reducing inside the hook, on the
model's device, is what keeps memory at one batch of *vectors* rather than one batch
of full sequences.

Two invariants are checked on every forward, whatever the backend:

* every requested hook point fires **exactly once** (a module reused across layers, or
  an MLP that bypasses its down-projection, would otherwise record garbage silently);
* every captured tensor has the width the architecture table promises; in particular
  ``mlp_post`` is ``intermediate_size`` wide (TransformerLens adapters have returned
  d_model-wide tensors under that name).

Example:
    >>> backend = make_backend("torch", model, hooks=("mlp_out",), layers=[12, 13], position="last")  # doctest: +SKIP
    >>> out = backend.record(batch)                          # {"mlp_out": [B, 2, d_model]}          # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from einops import rearrange, reduce

from access.batches import TokenBatch
from access.driver_table import driver, editing_driver
from access.hook_points import module_for, width
from access.hook_table import HOOK_TABLE
from core.clock import GENERATION, timed
from core.errors import ProbeError
from core.models import input_embedding

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.generation import Generations, Generator

SiteFn = Callable[[torch.Tensor], torch.Tensor]


def _load(target: str) -> Any:
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass
class SiteEdits:
    """What an editing driver applies while it generates.

    ``sites``: ``(hook, layer, fn)``; at every forward, the hook point's tensor ``[batch, pos, width]``
    is replaced by ``fn(tensor)`` (which may work in place). ``around``: entered around the whole
    generation (e.g. a second model run in lockstep). ``stats``: an object with ``as_dict()`` saying
    what the site functions saw.
    """

    sites: list[tuple[str, int, SiteFn]] = field(default_factory=list)
    around: AbstractContextManager[Any] | None = None
    stats: Any = None


@timed(GENERATION)
def generate_edited(name: str, generator: Generator, edits: SiteEdits | None) -> Generations:
    """Generate ``generator``'s rows once through driver ``name`` with ``edits`` applied (``None``: unedited)."""
    entry = editing_driver(name, generator.config.do_sample)
    assert entry.edit is not None  # editing_driver refuses a driver that cannot edit
    generate: Callable[[Generator, SiteEdits | None], Generations] = _load(entry.edit)
    return generate(generator, edits)


class HookFiringError(ProbeError):
    """A hook point fired zero or several times in one forward: the model does not fit the architecture table."""


class Backend(Protocol):
    """A recorder: the capture half of a driver."""

    name: str
    hooks: tuple[str, ...]
    layers: list[int]
    position: str

    def record(self, batch: TokenBatch) -> dict[str, torch.Tensor]:
        """{hook: [B, len(layers), width]} float32 on the CPU."""
        ...


def reduce_positions(x: torch.Tensor, attention_mask: torch.Tensor, position: str) -> torch.Tensor:
    """[B, T, W] -> [B, W] float32: the last real token, or the mean over real tokens after the first.

    ``response_last`` / ``response_mean`` (teacher-forced responses, :mod:`probes.responses`): the response is the end
    of each left-padded row, so its last token is index -1 as for ``last``; the mean is over the tokens
    ``attention_mask`` marks, which is then the response mask, all of them.

    For ``last`` on a float32 ``x`` the result is a view of ``x``; copy it to keep it.

    Batches are left-padded, so the last real token is always at index -1. The mean skips
    the first real token (a BOS, or a ChatML ``<|im_start|>``): under causal attention its
    activation depends on that token alone, the same in every prompt, so it carries no
    information about the prompt, and in most LLMs it is an attention sink with outsized
    values that would swamp the mean.

    >>> x = torch.arange(12.).reshape(1, 4, 3); m = torch.tensor([[0, 1, 1, 1]])
    >>> reduce_positions(x, m, "last").tolist(), reduce_positions(x, m, "mean").tolist()
    ([[9.0, 10.0, 11.0]], [[7.5, 8.5, 9.5]])
    """
    if position in ("last", "response_last"):
        return x[:, -1].float()
    # ``attention_mask`` is the response mask (TokenBatch.reduce_mask): every response token counts
    if position == "response_mean":
        weights = attention_mask.to(device=x.device, dtype=torch.float32)
        return _weighted_sum(weights / reduce(weights, "b t -> b 1", "sum").clamp(min=1.0), x)
    mask = attention_mask.to(x.device).clone()
    first = mask.argmax(dim=1)  # index of the first real token in each row
    rows = torch.arange(mask.shape[0], device=mask.device)
    lengths = reduce(mask, "b t -> b", "sum")
    mask[rows[lengths > 1], first[lengths > 1]] = 0  # keep it only for a one-token prompt
    weights = mask.to(torch.float32)
    return _weighted_sum(weights / reduce(weights, "b t -> b 1", "sum"), x)  # rows sum to 1


def _weighted_sum(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[B, T] weights, [B, T, W] x -> [B, W] float32 Σ_t weights·x, one GEMM in x's dtype (no fp32 copy of x)."""
    rows = rearrange(weights.to(x.dtype), "b t -> b 1 t")
    return rearrange(torch.bmm(rows, x), "b 1 w -> b w").float()


class Collector:
    """Receives hook tensors, reduces them, counts firings, checks widths, assembles the result.

    Each hook point's result lives in one ``[B, n_layers, W]`` float32 buffer on the model's
    input device, allocated before the forward; every layer's reduced vector is copied into
    its slot. Two reasons: copying each vector to the CPU inside the forward would
    synchronise a GPU once per layer (a launch-bound model stalls), and per-layer tensors
    kept alive between the forward's large temporaries fragment glibc's heap (measured on
    CPU: peak RSS 4-7x a plain forward's at batch 32). The buffer goes to the CPU in one copy.
    """

    def __init__(self, model: PreTrainedModel, hooks: Sequence[str], layers: Sequence[int], position: str) -> None:
        self.hooks, self.layers, self.position = tuple(hooks), list(layers), position
        self.widths = {hook: width(model, hook) for hook in self.hooks}
        self.device = input_embedding(model).device
        self._slot = {layer: j for j, layer in enumerate(self.layers)}
        self.reset(None)

    def reset(self, attention_mask: torch.Tensor | None) -> None:
        self.mask = attention_mask
        self.counts = {(h, layer): 0 for h in self.hooks for layer in self.layers}
        self.n_stored = 0
        n = 0 if attention_mask is None else attention_mask.shape[0]
        self.buffers = {h: torch.empty(n, len(self.layers), self.widths[h], device=self.device) for h in self.hooks}

    @property
    def complete(self) -> bool:
        return self.n_stored == len(self.counts)

    def take(self, hook: str, layer: int, x: torch.Tensor) -> None:
        """Record one hook point's [B, T, W] tensor (called from inside the forward)."""
        self._check(hook, layer, self.counts[(hook, layer)] + 1, x.shape[-1])
        assert self.mask is not None
        self._store(hook, layer, reduce_positions(x.detach(), self.mask, self.position))

    def take_reduced(self, hook: str, layer: int, fired: int, full_width: int, value: torch.Tensor) -> None:
        """Record an already reduced [B, W] value, with the firing count observed for it."""
        self._check(hook, layer, fired, full_width)
        self._store(hook, layer, value.detach())

    def _store(self, hook: str, layer: int, value: torch.Tensor) -> None:
        self.buffers[hook][:, self._slot[layer]].copy_(value)  # casts, and crosses devices under device_map="auto"
        self.n_stored += 1  # _check has refused a second firing, so each (hook, layer) counts once

    def _check(self, hook: str, layer: int, fired: int, full_width: int) -> None:
        self.counts[(hook, layer)] = fired
        if fired != 1:
            raise HookFiringError(
                f"hook point {hook} at layer {layer} fired {fired} times in one forward pass, expected exactly once; "
                "the model's modules do not match the architecture table (a module used twice, or bypassed)"
            )
        if full_width != self.widths[hook]:
            what = "intermediate_size" if HOOK_TABLE[hook].width == "d_mlp" else "hidden_size"
            raise HookFiringError(
                f"hook point {hook} at layer {layer} has width {full_width}, expected {self.widths[hook]} ({what})"
            )

    def result(self) -> dict[str, torch.Tensor]:
        missing = [f"{h}@{layer}" for (h, layer), n in self.counts.items() if n == 0]
        if missing:
            raise HookFiringError(
                f"hook points never fired in the forward pass: {', '.join(missing[:6])}; "
                "the model's modules do not match the architecture table"
            )
        return {h: self.buffers[h].cpu() for h in self.hooks}


def make_backend(
    name: str,
    model: PreTrainedModel,
    *,
    hooks: Sequence[str],
    layers: Sequence[int],
    position: str,
    tokenizer: PreTrainedTokenizerBase | None = None,
    model_dir: Any = None,
) -> Backend:
    """Build driver ``name``'s recorder around one loaded model."""
    recorder: Backend = _load(driver(name).capture)(
        model, hooks, layers, position, tokenizer=tokenizer, model_dir=model_dir
    )
    recorder.name = name
    return recorder


def check_distinct_modules(model: PreTrainedModel, hooks: Sequence[str], layers: Sequence[int]) -> None:
    """Refuse a model whose blocks share module objects: one hook would then stand for several layers."""
    for hook in hooks:
        seen: dict[int, int] = {}
        for layer in layers:
            module_id = id(module_for(model, hook, layer)[0])
            if module_id in seen:
                raise HookFiringError(
                    f"hook point {hook}: layers {seen[module_id]} and {layer} are the same module object, "
                    "so its hook would fire once per use; the recorder does not support shared blocks"
                )
            seen[module_id] = layer
