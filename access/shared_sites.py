"""Shared decoding's passes in one forward: each pass's site functions on its own rows, patch sources once per group.

Many passes (arms) of one model decode in one batch (:class:`access.decode_batch.DecodeBatch`): a row is one arm's
copy of one prompt, and an arm's rows are one slice. :func:`arm_sites` attaches one hook per edited site that runs
each arm's site function on that arm's slice alone (so a site function sees exactly the tensor it would see with
the arm decoded on its own), and :class:`Sources` runs each patch's source model once per group of rows (rows with
the same tokens so far see the same source values), handing each patch pass's lockstep its units' values for its
rows just before its site function runs.

Example:
    >>> from access.drivers.base import SiteEdits
    >>> sources = Sources([None, SiteEdits()])   # no patch among these passes
    >>> sources.models, sources.lockstep
    ([], {})
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import torch

from access.lockstep import Lockstep

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.decode_batch import DecodeBatch
    from access.drivers.base import SiteEdits

# attach(model, hook, layer, fn) -> a handle with remove(): where a site's function runs (access.hook_points.attach)
Attach = Callable[["PreTrainedModel", str, int, Callable[[torch.Tensor], torch.Tensor | None]], Any]
SiteFn = Callable[[torch.Tensor], torch.Tensor]


class Sources:
    """The patch sources of the passes: each runs once per group of rows, and each patch pass's lockstep gets, per
    forward, its source's values at its units for its rows."""

    def __init__(self, passes: Sequence[SiteEdits | None]) -> None:
        self.models: list[PreTrainedModel] = []
        self.sites: list[set[tuple[str, int]]] = []
        self.lockstep: dict[int, tuple[Any, int]] = {}  # pass -> (its lockstep, its source's index)
        for number, edits in enumerate(passes):
            around = edits.around if edits is not None else None
            if not isinstance(around, Lockstep):
                continue
            k = next((i for i, m in enumerate(self.models) if m is around.source), len(self.models))
            if k == len(self.models):
                self.models.append(around.source)
                self.sites.append(set())
            self.sites[k] |= set(around.sites)
            self.lockstep[number] = (around, k)
        self.tops = [max(layer for _, layer in sites) for sites in self.sites]
        self._parts: list[dict[tuple[str, int], list[torch.Tensor]]] = [{} for _ in self.models]
        self.values: list[dict[tuple[str, int], torch.Tensor]] = [{} for _ in self.models]

    def needed(self, arms: Sequence[int]) -> set[int]:
        """The sources these passes read."""
        return {self.lockstep[a][1] for a in arms if a in self.lockstep}

    def reset(self, k: int) -> None:
        self._parts[k] = {site: [] for site in self.sites[k]}

    def capture(self, k: int, hook: str, layer: int) -> Callable[[torch.Tensor], None]:
        def keep(x: torch.Tensor) -> None:
            self._parts[k][(hook, layer)].append(x)

        return keep

    def join(self, k: int) -> None:
        """The slices of one source forward, as one tensor per site (the rows of every group, in order)."""
        self.values[k] = {
            site: torch.cat(parts) if len(parts) > 1 else parts[0] for site, parts in self._parts[k].items()
        }
        self._parts[k] = {}

    def fill(self, number: int, groups: torch.Tensor) -> None:
        """Pass ``number``'s lockstep values for the rows whose groups are ``groups``:
        its units of its source's values."""
        lockstep, k = self.lockstep[number]
        lockstep.values = {
            site: self.values[k][site].index_select(0, groups).index_select(-1, units.to(groups.device))
            for site, units in lockstep.sites.items()
        }


@contextmanager
def arm_sites(
    model: PreTrainedModel,
    passes: Sequence[SiteEdits | None],
    sources: Sources,
    attach: Attach,
    batch: Callable[[], list[tuple[int, DecodeBatch]]],
) -> Iterator[None]:
    """One hook per edited site of ``model``, running each pass's site function on that pass's rows of each batch
    the forward running now holds (``batch()``: each with where its rows start in the forward's), and one per patched
    site of each source, keeping its values."""
    by_site: dict[tuple[str, int], list[tuple[int, SiteFn]]] = {}
    for arm, edits in enumerate(passes):
        for hook, layer, fn in edits.sites if edits is not None else []:
            by_site.setdefault((hook, layer), []).append((arm, fn))
    with ExitStack() as stack:
        for (hook, layer), fns in by_site.items():
            stack.callback(attach(model, hook, layer, _dispatch(fns, sources, batch, passes)).remove)
        for k, source in enumerate(sources.models):
            for hook, layer in sources.sites[k]:
                stack.callback(attach(source, hook, layer, sources.capture(k, hook, layer)).remove)
        yield


def _dispatch(
    fns: list[tuple[int, SiteFn]],
    sources: Sources,
    batch: Callable[[], list[tuple[int, DecodeBatch]]],
    passes: Sequence[SiteEdits | None],
) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        for shift, state in batch():
            for arm, site in fns:
                start, stop = state.spans.get(arm, (0, 0))
                start, stop = max(start + shift, 0), min(stop + shift, x.shape[0])
                if start >= stop:
                    continue
                part = x[start:stop]
                if arm in sources.lockstep:
                    assert state.row_group_index is not None
                    sources.fill(arm, state.row_group_index[start - shift : stop - shift])
                before = _raw_counts(passes[arm])
                new = site(part)
                if new is not part:
                    part.copy_(new)
                counts = state.counts.setdefault(arm, {})
                for key, value in _raw_counts(passes[arm]).items():
                    counts[key] = counts.get(key, 0) + value - before.get(key, 0)
        return x

    return fn


def _raw_counts(edits: SiteEdits | None) -> dict[str, Any]:
    """What a pass's site functions have seen so far (its stats; none for an unedited pass), left on the device where
    the stats keep them there (a hook reads no count back)."""
    stats = edits.stats if edits is not None else None
    if stats is None:
        return {}
    raw = getattr(stats, "raw", None)
    return dict(raw()) if raw is not None else dict(stats.as_dict())
