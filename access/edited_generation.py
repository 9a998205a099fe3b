"""A/B generation: the core generation path with edits applied by an editing driver.

A/B evaluation only means something if the two arms differ by the edit alone: same prompts,
same rendering, same batches, same decoding. All of that is
:class:`access.generation.Generator`'s; :class:`ABGenerator` adds the edits (one or several
:class:`access.edits.Edit`, compiled once into site functions) and hands them to a
driver of :data:`access.drivers.DRIVERS` that can edit:

* ``torch`` (default): the site functions as plain forward hooks around ``generate``;
* ``nnsight``: the same site functions inside ``tracer.all()``; tokens are read per step from
  the LM head (greedy only), over the generator's own batches and stop tokens.

Example:
    >>> watch = LogitWatch()
    >>> watch.add(torch.tensor([[0.5, 2.0], [0.0, 0.0], [float("nan"), 1.0]]))   # healthy, flat, NaN
    >>> watch.count
    2
    >>> gen = ABGenerator(model, tokenizer, rows, GenerationConfig(max_new_tokens=32))   # doctest: +SKIP
    >>> base = gen.run()                                                                  # doctest: +SKIP
    >>> abl = gen.run(Scale(neurons, 0.0))                                               # doctest: +SKIP
    >>> sum(a != b for a, b in zip(base.ids, abl.ids))   # rows changed  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from access.driver_table import DEFAULT_DRIVER, EDITING_DRIVERS, editing_driver
from access.drivers.base import SiteEdits, generate_edited
from access.edits import Edit, Scale, site_edits
from access.generation import Generations, Generator
from access.packed_linear import prepacked
from core.decoding import GenerationConfig
from core.errors import ProbeError
from core.schema import TestRow

BACKENDS: tuple[str, ...] = EDITING_DRIVERS
Intervention = Scale  # the former name: Intervention(neurons, factor)


class ABGenerator:
    """Generate responses for fixed rows, repeatably, with or without edits."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        rows: Sequence[TestRow],
        config: GenerationConfig = GenerationConfig(),
        backend: str = DEFAULT_DRIVER,
        where: Callable[[int], str] | None = None,
    ) -> None:
        """``where(i)`` names row ``i`` in rendering errors (default: its index in ``rows``)."""
        editing_driver(backend, config.do_sample)
        self.model, self.backend = model, backend
        self.generator = Generator(model, tokenizer, [r.question for r in rows], config, where)

    def run(self, edit: Edit | Sequence[Edit] | None = None) -> Generations:
        """Generate every row once; ``edit=None`` is the baseline arm. ``hook_stats["degenerate_logits"]``
        counts the forward positions whose logits were broken (see :class:`LogitWatch`)."""
        chosen = [] if edit is None else [edit] if isinstance(edit, Edit) else list(edit)
        editing_driver(self.backend, self.generator.config.do_sample, [e.kind for e in chosen if e.edits_logits])
        plan = site_edits(self.model, chosen) if chosen else None
        packed = prepacked(self.model, *_sources(plan)) if self.backend == DEFAULT_DRIVER else nullcontext()
        with packed, watch_logits(self.model) as watch:
            try:
                generations = generate_edited(self.backend, self.generator, plan)
            except RuntimeError as exc:
                if watch.count == 0:
                    raise
                what = ", ".join(e.label() for e in chosen) or "the unedited model"
                raise ProbeError(
                    f"{what} broke the model's logits (inf/NaN), so sampling failed "
                    f"({str(exc).splitlines()[0]}); use an edit of moderate size"
                ) from None
        generations.hook_stats = {**(generations.hook_stats or {}), "degenerate_logits": watch.count}
        return generations


def _sources(plan: SiteEdits | None) -> list[torch.nn.Module]:
    """The other model an arm's context runs or reads (a patch's source in lockstep, an amplification's source)."""
    source = getattr(plan.around, "source", None) if plan is not None else None
    return [source] if isinstance(source, torch.nn.Module) else []


class LogitWatch:
    """Counts forward positions whose logits are broken: an inf or NaN, or the same value for every token.

    A factor so large that the scaled units overflow breaks the model in one of two ways:
    in float16 the product is inf and NaN spreads to the logits; in float32/bfloat16 the
    next RMSNorm squares it to inf, scales the whole hidden state by 1/sqrt(inf) = 0 and
    every logit becomes 0. A healthy language model produces neither, so either one marks
    the arm's generations as degenerate. Counted on the model's device, read once at the end.
    """

    def __init__(self) -> None:
        self._bad: torch.Tensor | int = 0

    def add(self, logits: torch.Tensor) -> None:
        broken = (~torch.isfinite(logits)).any(-1) | (logits.amax(-1) == logits.amin(-1))
        self._bad = self._bad + broken.sum()

    @property
    def count(self) -> int:
        return int(self._bad)


@contextmanager
def watch_logits(model: PreTrainedModel) -> Iterator[LogitWatch]:
    """Within the block, every output of the model's LM head is checked (:class:`LogitWatch`)."""
    watch = LogitWatch()
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, _i, out: watch.add(out[0] if isinstance(out, tuple) else out))
    try:
        yield watch
    finally:
        handle.remove()
