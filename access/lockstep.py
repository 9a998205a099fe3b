"""A source model run in lockstep with a target: at each forward of the target, the same tokens through the source.

Cross-checkpoint patching needs, at every forward of generation, the values the *source*
model computes on exactly the tokens the *target* model is processing: the prompt at the
first forward, then each newly generated token. :class:`Lockstep` hooks the target's
top-level forward (a pre-hook that sees its keyword arguments), runs the source on the same
``input_ids``, ``attention_mask``, ``position_ids`` and ``cache_position`` with a KV cache of
its own (a fresh one whenever the target starts a new sequence), and keeps the source's values
at the needed sites, only the needed units, for the target's site functions to write in.

The source forward stops right after the highest site it must supply (its LM head and the
blocks above never run), so its cache holds just those blocks, which are all it ever reads.
Because both models see the same tokens and the source's cache holds its own keys and values,
a cached generation equals patching a full recomputation of the sequence.

With ``logits=True`` the source instead runs its whole forward, through its LM head, on the same inputs (and the same
``logits_to_keep``), and :attr:`Lockstep.logits` holds its logits for the forward running now: what logit-difference
amplification (:class:`access.amplify.AmplifiedLogits`) reads.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> tiny = LlamaConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2, num_hidden_layers=2)
    >>> target, source = LlamaForCausalLM(tiny), LlamaForCausalLM(tiny)
    >>> with Lockstep(target, source, {("mlp_post", 1): torch.tensor([3, 9])}) as step:
    ...     _ = target(input_ids=torch.tensor([[4, 5, 6]]))
    ...     step.values[("mlp_post", 1)].shape   # the source's units 3 and 9 on the target's 3 tokens
    torch.Size([1, 3, 2])
    >>> with Lockstep(dpo, sft, {("mlp_out", 20): torch.tensor([3, 9])}) as step:   # doctest: +SKIP
    ...     dpo(**batch)
    >>> step.values[("mlp_out", 20)].shape                                             # doctest: +SKIP
    torch.Size([8, 130, 2])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from access.hook_points import attach

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class _SourceDone(Exception):
    """Raised from the source's last needed site to end its forward early."""


class Lockstep:
    def __init__(
        self,
        target: PreTrainedModel,
        source: PreTrainedModel,
        sites: dict[tuple[str, int], torch.Tensor],
        *,
        logits: bool = False,
    ) -> None:
        self.target, self.source, self.sites, self.full = target, source, sites, logits
        self.values: dict[tuple[str, int], torch.Tensor] = {}
        self.logits: torch.Tensor | None = None  # the source's logits at this forward (``logits=True``)
        self._cache: Any = None
        self._handles: list[Any] = []

    def __enter__(self) -> Lockstep:
        self._cache = None
        self._handles = [self.target.register_forward_pre_hook(self._step, with_kwargs=True)]
        self._handles += [attach(self.source, hook, layer, self._keep(hook, layer)) for hook, layer in self.sites]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._cache, self.values, self.logits = [], None, {}, None

    def _keep(self, hook: str, layer: int) -> Any:
        index = self.sites[(hook, layer)]

        def fn(x: torch.Tensor) -> None:
            self.values[(hook, layer)] = x.index_select(-1, index.to(x.device)).clone()
            if len(self.values) == len(self.sites):
                raise _SourceDone

        return fn

    def _step(self, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        past = kwargs.get("past_key_values")
        use_cache = bool(kwargs.get("use_cache")) and past is not None
        if past is None or not use_cache or past.get_seq_length() == 0:
            self._cache = self._new_cache() if use_cache else None
        self.values = {}
        inputs = {key: kwargs.get(key) for key in ("attention_mask", "position_ids", "cache_position")}
        try:
            with torch.no_grad():
                if self.full:
                    keep = kwargs.get("logits_to_keep") or 0
                    out = self.source(
                        input_ids=input_ids,
                        past_key_values=self._cache,
                        use_cache=use_cache,
                        logits_to_keep=keep,
                        **inputs,
                    )
                    self.logits = out.logits
                else:
                    self.source.base_model(
                        input_ids=input_ids, past_key_values=self._cache, use_cache=use_cache, **inputs
                    )
        except _SourceDone:
            pass

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.source.config)
