"""The nnsight backend: the same scaling written as an nnsight intervention.

``TransformersModel`` wraps the already loaded HF module (no copy). The edit sits inside
``tracer.all()`` so it applies at the prompt forward *and* at every decoding step (an
edit outside the loop would touch the prompt forward only; see stack notes §4). nnsight
0.8 cuts an open-ended loop short when generation stops and skips code after it, so the
generated tokens are collected *inside* the loop, one ``argmax`` of the LM head per step,
into a list created before the block. That is exactly greedy decoding when the model's
generation config adds no logits processors, which :func:`generate_greedy` checks.

Example:
    >>> lm = wrap(model, tokenizer)                                                # doctest: +SKIP
    >>> steps = generate_greedy(lm, model, input_ids, mask, kwargs, intervention)  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.errors import ProbeError

if TYPE_CHECKING:
    from interventions.generation import Intervention

_PROCESSOR_FIELDS = ("repetition_penalty", "no_repeat_ngram_size", "encoder_repetition_penalty", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id", "sequence_bias")


def wrap(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Any:
    """An nnsight ``TransformersModel`` around ``model`` (shared weights, no copy)."""
    from nnsight.modeling.transformers import TransformersModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformersModel(model, tokenizer=tokenizer, task="text-generation")


def _check_plain_greedy(model: PreTrainedModel) -> None:
    config = model.generation_config
    for name in _PROCESSOR_FIELDS:
        value = getattr(config, name, None)
        if value not in (None, 1.0, 0, [], {}):
            raise ProbeError(f"the nnsight backend reads greedy tokens from raw logits, but the model's generation config sets {name}={value!r}; use --backend torch")


def _envoy(lm: Any, path: str) -> Any:
    envoy = lm
    for part in path.split("."):
        envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
    return envoy


def _head_path(model: PreTrainedModel) -> str:
    head = model.get_output_embeddings()
    return next(name for name, module in model.named_modules() if module is head)


def generate_greedy(lm: Any, model: PreTrainedModel, input_ids: torch.Tensor, mask: torch.Tensor,
                    kwargs: dict[str, Any], intervention: Intervention | None) -> torch.Tensor:
    """Greedy new tokens [batch, steps] with the intervention applied at every forward."""
    from interventions.generation import edit_locations

    _check_plain_greedy(model)
    edits = [] if intervention is None else edit_locations(model, intervention)
    factor = 1.0 if intervention is None else intervention.factor
    head = _envoy(lm, _head_path(model))
    targets = [(_envoy(lm, path), is_input, index.to(input_ids.device)) for path, is_input, index in edits]
    steps: list[torch.Tensor] = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        with lm.generate({"input_ids": input_ids, "attention_mask": mask}, **kwargs) as tracer:
            for _ in tracer.all():
                for envoy, is_input, index in targets:
                    value = envoy.input if is_input else envoy.output
                    tensor = value[0] if isinstance(value, tuple) else value
                    tensor[:, :, index] = (tensor[:, :, index].to(torch.float32) * factor).to(tensor.dtype)
                steps.append(head.output[:, -1].argmax(-1).save())
    if not steps:
        return torch.empty((input_ids.shape[0], 0), dtype=torch.long)
    return torch.stack([torch.as_tensor(s) for s in steps], dim=1).cpu()
