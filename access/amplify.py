"""Amplification's two mechanisms: a weight blend applied in place, and a logit edit from a source run in lockstep.

:class:`WeightBlend` (the ``expo`` and ``expo-units`` edits of :mod:`access.edits`) sets chosen parameters of a host
model, or chosen rows and columns of them, to ``source + alpha * (host - source)`` for the whole block, and puts the
host's own bits back on exit (also on error). It goes tensor by tensor: each blend is computed in float32 and cast
back to the parameter's dtype (a whole float32 tensor is blended in place by ``torch.lerp``, in one pass), so the
temporary memory is at most one tensor's; the host's original values of what it changes
are kept on the CPU, because a blend cast to bfloat16 cannot be undone exactly by computing it backwards. A tensor
whose host and source values are equal is left alone (it blends to itself at any ``alpha``) and costs no copy.
``alpha = 1`` is the host itself and ``alpha = 0`` the source, exactly: those two are written without arithmetic.

:class:`AmplifiedLogits` (the ``lda`` edit) replaces each forward's logits ``l`` of the host by
``(1 + alpha) * l - alpha * l_source`` (that is ``l + alpha * (l - l_source)``, in float32), where ``l_source`` comes
from the source model run on the same tokens by :class:`access.lockstep.Lockstep` through to its logits. Written in
that form, ``alpha = 0`` gives the host's logits and ``alpha = -1`` the source's, bit for bit.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> tiny = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_attention_heads=2,
    ...                    num_hidden_layers=2)
    >>> _ = torch.manual_seed(0); host, source = LlamaForCausalLM(tiny), LlamaForCausalLM(tiny)
    >>> before = host.model.norm.weight.clone()
    >>> with WeightBlend(host, source, 0.0, whole_model(host)):
    ...     torch.equal(host.lm_head.weight, source.lm_head.weight)
    True
    >>> torch.equal(host.model.norm.weight, before)   # equal in both models: never touched
    True
    >>> ids = torch.tensor([[3, 4, 5]])
    >>> with AmplifiedLogits(host, source, -1.0):
    ...     torch.equal(host(input_ids=ids).logits, source(input_ids=ids).logits)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from access.hook_points import module_path
from access.hook_table import MLP_OUT, NEURONS
from access.lockstep import Lockstep
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.stack import Stack

# the gated MLP's parameters a unit-restricted blend edits, by hook point: (projection, dimension of the unit)
UNIT_PARAMETERS: dict[str, tuple[tuple[str, int], ...]] = {
    # an mlp_post unit is a hidden neuron: its gate and up rows make it, its down_proj column writes it out
    NEURONS: (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)),
    # an mlp_out unit is one coordinate of the MLP's output: the down_proj row (and bias) that computes it
    MLP_OUT: (("down_proj", 0),),
}


@dataclass(frozen=True)
class BlendTarget:
    """One parameter to blend, by name; ``dim`` and ``index``: only those rows (0) or columns (1), else all of it."""

    name: str
    dim: int | None = None
    index: tuple[int, ...] = ()


def whole_model(model: PreTrainedModel) -> list[BlendTarget]:
    """Every parameter of ``model`` (a tied embedding once)."""
    return [BlendTarget(name) for name, _ in model.named_parameters()]


def unit_targets(model: PreTrainedModel, hook: str, by_layer: dict[int, list[int]]) -> list[BlendTarget]:
    """The rows and columns of the gated MLP's projections that make the ``hook`` units of each layer
    (:data:`UNIT_PARAMETERS`); :class:`ProbeError` for another hook point or an MLP without gate/up/down."""
    if hook not in UNIT_PARAMETERS:
        raise ProbeError(
            f"expo-units blends the MLP weights of mlp_post or mlp_out units, not {hook} units; "
            "select units at --hook mlp_post or mlp_out"
        )
    names = dict(model.named_parameters())
    out: list[BlendTarget] = []
    for layer, units in sorted(by_layer.items()):
        mlp = module_path(model, MLP_OUT, layer)
        for projection, dim in UNIT_PARAMETERS[hook]:
            weight = f"{mlp}.{projection}.weight"
            if weight not in names:
                raise ProbeError(
                    f"expo-units needs a gated MLP (gate_proj, up_proj, down_proj); {model.config.model_type} "
                    f"has no {weight}"
                )
            out.append(BlendTarget(weight, dim, tuple(units)))
            bias = f"{mlp}.{projection}.bias"
            if bias in names and dim == 0:  # a row's bias belongs to the unit; a column has none
                out.append(BlendTarget(bias, 0, tuple(units)))
    return out


def blended(host: torch.Tensor, source: torch.Tensor, alpha: float) -> torch.Tensor:
    """``source + alpha * (host - source)`` in float32 (as ``torch.lerp`` from host toward source by ``1 - alpha``, the
    same arithmetic as the in-place blend), cast to ``host``'s dtype (exact at ``alpha`` 0 and 1).

    >>> blended(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0]), 3.0).tolist()
    [3.0, 4.0]
    """
    if alpha == 1.0:
        return host.clone()
    if alpha == 0.0:
        return source.to(host.dtype, copy=True)
    return host.float().lerp(source.float(), 1.0 - alpha).to(host.dtype)  # host + (1 - alpha)(source - host)


class WeightBlend:
    """Within the block, ``targets`` of ``host`` hold ``source + alpha * (host - source)`` (module doc)."""

    def __init__(
        self, host: PreTrainedModel, source: PreTrainedModel, alpha: float, targets: Sequence[BlendTarget]
    ) -> None:
        self.host, self.source, self.alpha, self.targets = host, source, alpha, list(targets)
        self._saved: list[tuple[nn.Parameter, BlendTarget, torch.Tensor]] = []
        self.changed = 0  # parameters (whole or in part) the blend changed

    def __enter__(self) -> WeightBlend:
        hosts, sources = dict(self.host.named_parameters()), dict(self.source.named_parameters())
        self._saved = []
        try:
            with torch.no_grad():
                for target in self.targets:
                    self._blend(target, hosts[target.name], sources[target.name])
        except BaseException:
            self._restore()
            raise
        self.changed = len(self._saved)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def lowest_block(self, stack: Stack) -> int:
        """The lowest block of the host's ``stack`` holding a parameter this blend targets (0: one outside the blocks,
        such as the embeddings or the head): an arm with it runs the blocks from there up."""
        return stack.lowest_block(target.name for target in self.targets)

    def _blend(self, target: BlendTarget, param: nn.Parameter, source: nn.Parameter) -> None:
        index = None if target.dim is None else torch.tensor(target.index, dtype=torch.long, device=param.device)
        mine = param.data if index is None else param.data.index_select(target.dim or 0, index)
        theirs = source.data.to(param.device)
        theirs = theirs if index is None else theirs.index_select(target.dim or 0, index)
        if torch.equal(mine, theirs):
            return
        self._saved.append((param, target, mine.detach().to("cpu", copy=True)))
        if index is None and param.dtype == torch.float32 and self.alpha not in (0.0, 1.0):
            mine.lerp_(theirs, 1.0 - self.alpha)  # in place, one pass: host + (1 - alpha)(source - host)
        else:
            self._write(param, target, blended(mine, theirs, self.alpha))
        written = param.data if index is None else param.data.index_select(target.dim or 0, index)
        if not torch.isfinite(written).all():
            raise ProbeError(
                f"alpha {self.alpha!r} overflows {str(param.dtype).removeprefix('torch.')} in {target.name}; "
                "use a smaller alpha or a wider --dtype"
            )

    def _restore(self) -> None:
        with torch.no_grad():
            while self._saved:
                param, target, original = self._saved.pop()
                self._write(param, target, original.to(param.device))

    @staticmethod
    def _write(param: nn.Parameter, target: BlendTarget, values: torch.Tensor) -> None:
        if target.dim is None:
            param.data.copy_(values)
        else:
            index = torch.tensor(target.index, dtype=torch.long, device=param.device)
            param.data.index_copy_(target.dim, index, values)


class AmplifiedLogits:
    """Within the block, each forward of ``host`` returns ``l + alpha * (l - l_source)`` as its logits (module doc).

    Not a :class:`Lockstep` itself (it holds one): shared decoding computes logits with its own head and so must not
    take it for a patch source; an arm with it decodes arm by arm.
    """

    def __init__(self, host: PreTrainedModel, source: PreTrainedModel, alpha: float) -> None:
        self.host, self.source, self.alpha = host, source, alpha
        self.lockstep = Lockstep(host, source, {}, logits=True)
        self._handle: Any = None

    def __enter__(self) -> AmplifiedLogits:
        self.lockstep.__enter__()
        self._handle = self.host.register_forward_hook(self._amplify)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.lockstep.__exit__(*exc)

    def _amplify(self, _module: nn.Module, _args: tuple[Any, ...], output: Any) -> Any:
        logits, source = getattr(output, "logits", None), self.lockstep.logits
        if logits is None or source is None or source.shape != logits.shape:
            raise ProbeError(
                "lda: the host's and the source's logits do not line up (a forward without logits, "
                f"or shapes {None if logits is None else tuple(logits.shape)} and "
                f"{None if source is None else tuple(source.shape)})"
            )
        output.logits = amplified(logits, source, self.alpha)
        return output


def amplified(logits: torch.Tensor, source: torch.Tensor, alpha: float) -> torch.Tensor:
    """``(1 + alpha) * logits - alpha * source`` in float32: ``logits`` themselves at ``alpha = 0``, ``source``'s at
    ``alpha = -1``, bit for bit (the one formula of logit-difference amplification, decoding and teacher forcing).

    >>> amplified(torch.tensor([2.0, 1.0]), torch.tensor([1.0, 1.0]), 1.0).tolist()
    [3.0, 1.0]
    """
    return (1.0 + alpha) * logits.float() - alpha * source.to(logits.device).float()
