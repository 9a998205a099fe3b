"""Estimated effects of patching every unit, from one backward pass: the gradient of the KL gap, and relevance patching.

Patching a set ``S`` of a model's units with a target model's values on the same tokens moves the teacher-forced gap
``KL(target || model)`` (:mod:`access.outcomes`); to first order, by the sum over ``S`` of each unit's estimate::

    estimate(unit) = sum over positions t of  c[t, unit] * (a_target[t, unit] - a_model[t, unit])

where ``c`` is the derivative of the gap (the sum over rows of each row's mean KL over its response tokens) with
respect to the model's unit at ``t``, taken one of two ways:

``gradient``
    the plain gradient: attribution patching (AtP) of the gap itself;
``relp``
    relevance patching (RelP, arXiv 2508.21258): the same backward pass with layer-wise relevance propagation rules
    in place of the local derivatives of the non-linear parts, which keeps the estimate faithful where saturation
    and cancellation make the gradient a poor guide (RelP's r with activation patching on GPT-2 small's MLP outputs:
    0.992, where AtP reaches 0.195).

The rules (:func:`relevance_rules`), those of AttnLRP's efficient form (Achtibat et al., ICML 2024, the ``lxt``
package), written as forward hooks on one model instance so that the forward values stay bit for bit those of the
model and nothing outside the ``with`` block changes:

==================  ==============================================================================================
RMSNorm             identity rule: the normalising scale ``1 / rms(x)`` is held constant (its derivative dropped)
attention           the attention probabilities are held constant (no derivative reaches the queries or keys):
                    the CP-LRP rule, under which an attention layer is linear in its values
SiLU (the gate)     identity rule: ``act(g)`` passes relevance as if it were ``g * (act(g) / g)`` with the ratio
                    held constant (for SiLU the ratio is ``sigmoid(g)``)
gate x up product   uniform (half) rule: the product's relevance is split equally between its two factors
==================  ==============================================================================================

``lxt`` itself is not used: its 2.1 release patches the transformers classes process-wide with no way back (every
other forward in the process would then run with the rules' modules), and it requires ``bitsandbytes``,
``open_clip_torch`` and ``zennit``, none of which the toolkit otherwise needs (docs/localize.md). Both estimates come
from one forward with autograd and two backward passes: each rule's output carries the exact path and the rule's
path, and :class:`Mode` says which one a backward pass follows.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from access.outcomes import Forced
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> _ = torch.manual_seed(0); sft, dpo = LlamaForCausalLM(config).eval(), LlamaForCausalLM(config).eval()
    >>> rows = [Forced((1, 5, 7, 9, 3), 2), Forced((1, 4, 8, 2), 1)]
    >>> found = gap_attribution(dpo, sft, rows, ["mlp_post"])
    >>> found.estimates["relp"]["mlp_post"].shape          # [rows, layers, units]
    (2, 2, 32)
    >>> bool(found.kl.min() > 0)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from access.hook_points import attach, blocks, n_layers, width
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.outcomes import Forced

ESTIMATORS: tuple[str, ...] = ("gradient", "relp")
GRADIENT_BATCH_TOKENS = 1024  # padded tokens per batch: a backward keeps every layer's activations


class Mode:
    """Which derivative a backward pass through the rules follows: the exact one, or the relevance rule's."""

    def __init__(self) -> None:
        self.relevance = False


class _Either(torch.autograd.Function):
    """Forward: ``exact``'s value (a view of it, bit for bit). Backward: to ``exact`` or to ``rule``, as ``mode``
    says."""

    @staticmethod
    def forward(ctx: Any, exact: torch.Tensor, rule: torch.Tensor, mode: Mode) -> torch.Tensor:  # noqa: ARG004 - rule: a graph input
        ctx.mode = mode
        return exact.view_as(exact)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        return (None, grad, None) if ctx.mode.relevance else (grad, None, None)


def _linearised(x: torch.Tensor, y: torch.Tensor, coefficient: torch.Tensor) -> torch.Tensor:
    """``y``'s value, with ``coefficient`` (held constant) as its derivative with respect to ``x``."""
    return y.detach() + coefficient.detach() * (x - x.detach())


def _either(exact: torch.Tensor, rule: torch.Tensor, mode: Mode) -> torch.Tensor:
    if not exact.requires_grad:
        return exact
    out: torch.Tensor = _Either.apply(exact, rule, mode)  # type: ignore[no-untyped-call]
    return out


def _norm_rule(mode: Mode) -> Callable[[Any, tuple[Any, ...], Any], Any]:
    def hook(module: Any, args: tuple[Any, ...], output: Any) -> Any:
        x = args[0]
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        return _either(output, _linearised(x, output, module.weight * scale.to(x.dtype)), mode)

    return hook


def _constant_rule(mode: Mode) -> Callable[[nn.Module, tuple[Any, ...], Any], Any]:
    """Queries and keys: the exact path, or none (the attention probabilities held constant)."""

    def hook(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> Any:
        return _either(output, output.detach(), mode)

    return hook


def _activation_rule(mode: Mode) -> Callable[[nn.Module, tuple[Any, ...], Any], Any]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        x = args[0]
        if isinstance(module, nn.SiLU) or type(module).__name__ == "SiLUActivation":
            ratio = torch.sigmoid(x)
        else:
            ratio = output / torch.where(x == 0, torch.ones_like(x), x)
        return _either(output, _linearised(x, output, ratio), mode)

    return hook


def _half_rule(mode: Mode) -> Callable[[nn.Module, tuple[Any, ...]], Any]:
    """The down-projection's input, the gate x up product: half of its relevance to each factor."""

    def hook(_module: nn.Module, args: tuple[Any, ...]) -> Any:
        x = args[0]
        return (_either(x, _linearised(x, x, torch.full((), 0.5, dtype=x.dtype, device=x.device)), mode), *args[1:])

    return hook


@contextmanager
def relevance_rules(model: PreTrainedModel) -> Iterator[Mode]:
    """The relevance rules (module doc) on ``model``'s modules, as hooks removed on exit; set ``mode.relevance`` before
    each backward pass. Register capture hooks *after* entering, so that they see the rules' outputs."""
    mode = Mode()
    handles = []
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            handles.append(module.register_forward_hook(_norm_rule(mode)))
    for block in blocks(model):
        attention: Any = block.self_attn
        mlp: Any = block.mlp
        for name in ("q_proj", "k_proj"):
            handles.append(getattr(attention, name).register_forward_hook(_constant_rule(mode)))
        if hasattr(mlp, "gate_proj"):
            handles.append(mlp.act_fn.register_forward_hook(_activation_rule(mode)))
            handles.append(mlp.down_proj.register_forward_pre_hook(_half_rule(mode)))
    try:
        yield mode
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class GapAttribution:
    """Per estimator (:data:`ESTIMATORS`) and hook point, ``[rows, layers, units]``: each unit's estimated change of its
    row's mean KL(target || model) if it took the target's values at every position of the row (negative: the patch
    closes the gap). ``kl``: each row's unedited mean KL, the gap the estimates are read against."""

    estimates: dict[str, dict[str, np.ndarray]]
    kl: np.ndarray

    def closed(self, estimator: str, hook: str) -> np.ndarray:
        """``[layers, units]``: the share of the whole gap (the rows' mean KL) each unit's patch is estimated to
        close."""
        return np.asarray(-self.estimates[estimator][hook].sum(0) / self.kl.sum())


def gap_attribution(
    model: PreTrainedModel,
    target: PreTrainedModel,
    rows: Sequence[Forced],
    hooks: Sequence[str],
    *,
    max_batch_tokens: int = GRADIENT_BATCH_TOKENS,
    progress: Callable[[int, int], None] | None = None,
) -> GapAttribution:
    """Both estimates (module doc) for every unit of ``hooks`` at every layer, on the teacher-forced ``rows``: per batch
    of rows one forward of the target, one forward of ``model`` with autograd, and one backward per estimator."""
    if not rows:
        raise ProbeError("gap attribution: no rows to teacher-force")
    layers = n_layers(model)
    out = {e: {h: np.zeros((len(rows), layers, width(model, h))) for h in hooks} for e in ESTIMATORS}
    kl = np.zeros(len(rows))
    batches = attribution_batches(rows, max_batch_tokens)
    with _frozen(model), _frozen(target):
        for b, batch in enumerate(batches):
            found, batch_kl = _batch_attribution(model, target, [rows[i] for i in batch], hooks)
            kl[batch] = batch_kl
            for estimator, per_hook in found.items():
                for hook, values in per_hook.items():
                    out[estimator][hook][batch] = values
            if progress is not None:
                progress(b + 1, len(batches))
    return GapAttribution(out, kl)


def attribution_batches(rows: Sequence[Forced], max_batch_tokens: int = GRADIENT_BATCH_TOKENS) -> list[list[int]]:
    """The row batches of :func:`gap_attribution` (indices into ``rows``)."""
    from access.outcomes import pack

    return pack(rows, max_batch_tokens, 64)


@contextmanager
def _frozen(model: PreTrainedModel) -> Iterator[None]:
    """No parameter gradient: the graph starts at the input embeddings (restored on exit)."""
    before = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    try:
        yield
    finally:
        for param, flag in zip(model.parameters(), before, strict=True):
            param.requires_grad_(flag)


def _batch_attribution(
    model: PreTrainedModel, target: PreTrainedModel, seqs: Sequence[Forced], hooks: Sequence[str]
) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    sites = [(hook, layer) for hook in hooks for layer in range(n_layers(model))]
    inputs = _padded(seqs, next(model.parameters()).device)
    with torch.no_grad(), _captured(target, sites) as values:
        target_hidden = target.base_model(**inputs, use_cache=False).last_hidden_state
        log_t = [torch.log_softmax(h.double(), -1) for h in _head(target, target_hidden, seqs)]
        wanted = {site: value.detach() for site, value in values.items()}
    with ExitStack() as stack:
        mode = stack.enter_context(relevance_rules(model))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(_from_embeddings(model))
        seen = stack.enter_context(_captured(model, sites))
        hidden = model.base_model(**inputs, use_cache=False).last_hidden_state
        row_kl = torch.stack(
            [
                torch.nn.functional.kl_div(torch.log_softmax(h.double(), -1), t, log_target=True, reduction="none")
                .sum(-1)
                .mean()
                for h, t in zip(_head(model, hidden, seqs), log_t, strict=True)
            ]
        )
        tensors = [seen[site] for site in sites]
        found: dict[str, dict[str, np.ndarray]] = {}
        for estimator in ESTIMATORS:
            mode.relevance = estimator == "relp"
            grads = torch.autograd.grad(row_kl.sum(), tensors, retain_graph=estimator != ESTIMATORS[-1])
            found[estimator] = _per_unit(sites, grads, tensors, wanted, inputs["attention_mask"], hooks)
    return found, row_kl.detach().cpu().numpy()


def _per_unit(
    sites: list[tuple[str, int]],
    grads: Sequence[torch.Tensor],
    tensors: Sequence[torch.Tensor],
    wanted: dict[tuple[str, int], torch.Tensor],
    mask: torch.Tensor,
    hooks: Sequence[str],
) -> dict[str, np.ndarray]:
    """Per hook ``[rows, layers, units]``: the derivative times the change to the target's value, summed over the
    row's real positions."""
    weights = mask.to(grads[0].device, torch.float64)[..., None]
    per_hook: dict[str, list[np.ndarray]] = {hook: [] for hook in hooks}
    for (hook, _), grad, mine in zip(sites, grads, tensors, strict=True):
        delta = wanted[(hook, _)].double() - mine.detach().double()
        per_hook[hook].append((grad.double() * delta * weights).sum(1).cpu().numpy())
    return {hook: np.stack(rows, axis=1) for hook, rows in per_hook.items()}


def _padded(seqs: Sequence[Forced], device: torch.device) -> dict[str, torch.Tensor]:
    from access.batches import position_ids_for
    from core.chat import left_pad

    ids, mask = left_pad([s.ids for s in seqs], 0)
    return {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": position_ids_for(mask).to(device),
    }


def _head(model: PreTrainedModel, hidden: torch.Tensor, seqs: Sequence[Forced]) -> list[torch.Tensor]:
    """Per row, the LM head's logits at the positions that predict its response tokens (left-padded rows end
    together)."""
    head = model.get_output_embeddings()
    length = hidden.shape[1]
    return [head(hidden[row, length - s.n_response - 1 : length - 1]) for row, s in enumerate(seqs)]


@contextmanager
def _from_embeddings(model: PreTrainedModel) -> Iterator[None]:
    handle = model.get_input_embeddings().register_forward_hook(lambda _m, _i, out: out.detach().requires_grad_(True))
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def _captured(
    model: PreTrainedModel, sites: Sequence[tuple[str, int]]
) -> Iterator[dict[tuple[str, int], torch.Tensor]]:
    """Each site's tensor as the forward computed it (in the graph, when autograd is on)."""
    seen: dict[tuple[str, int], torch.Tensor] = {}
    handles = []
    for hook, layer in sites:

        def keep(x: torch.Tensor, key: tuple[str, int] = (hook, layer)) -> None:
            seen[key] = x

        handles.append(attach(model, hook, layer, keep))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()
