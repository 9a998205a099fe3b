"""The stack's key/value caches: growing in place, seeded from a stem's, joined from slices, rows selected.

:class:`access.stack.Stack` runs its blocks with a ``transformers`` ``DynamicCache``. Shared decoding
(:mod:`access.shared_generation`) asks more of it: a decode step writes one position into buffers with room to spare
(:func:`growing_layer_class`) instead of copying the whole cache; a prompt pass runs in slices of rows whose caches
are joined afterwards (:func:`joined`), each row starting from its stem's keys and values (:class:`Seed`); groups of
rows fork and finished rows leave (:func:`select_rows`). The values, and so the attention over them, are those of a
plain ``DynamicCache``.

Example:
    >>> import torch
    >>> layer = growing_layer_class()(2)   # room for two more positions
    >>> keys = values = torch.zeros(1, 1, 3, 4)
    >>> layer.update(keys, values)[0].shape
    torch.Size([1, 1, 3, 4])
    >>> layer.update(keys[..., :1, :], values[..., :1, :])[0].shape   # written in place, in the room kept
    torch.Size([1, 1, 4, 4])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedConfig


def new_cache(config: PreTrainedConfig, reserve: int = 0) -> Any:
    """An empty cache; with ``reserve``, its layers keep room for that many more positions (in place)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if reserve:
        cache.layers = [growing_layer_class()(reserve) for _ in cache.layers]
    return cache


@functools.cache
def growing_layer_class() -> type:
    """A ``DynamicLayer`` whose keys and values are views of buffers with room for ``reserve`` more positions: a decode
    step writes its position in place where ``DynamicLayer`` copies the whole cache (``torch.cat``), which cost 14% of a
    shared decode on 2 CPU cores. The values, and so the attention over them, are the same."""
    from transformers.cache_utils import DynamicLayer

    class _GrowingLayer(DynamicLayer):
        def __init__(self, reserve: int) -> None:
            # transformers' unannotated __init__: untyped_calls_exclude does not reach a super() call
            super().__init__()  # type: ignore[no-untyped-call]
            self.reserve = reserve
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start = self.get_seq_length()
            end = start + key_states.shape[-2]
            if self._buffers is None or end > self._buffers[0].shape[-2]:
                capacity = end + self.reserve
                self._buffers = (
                    _with_room(self.keys, key_states, start, capacity),
                    _with_room(self.values, value_states, start, capacity),
                )
            keys, values = self._buffers
            keys[..., start:end, :] = key_states
            values[..., start:end, :] = value_states
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]
            return self.keys, self.values

        def adopt(self, keys: torch.Tensor, values: torch.Tensor, end: int) -> None:
            """Take ``keys`` and ``values``, buffers whose first ``end`` positions are filled, as the layer's."""
            if not self.is_initialized:
                self.lazy_initialization(keys, values)
            self._buffers = (keys, values)
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]

        def reset(self) -> None:
            self._buffers = None
            super().reset()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._buffers is not None and self.get_seq_length() > 0:
                end = self.get_seq_length()
                self._buffers = (_selected(self._buffers[0], indices), _selected(self._buffers[1], indices))
                self.keys, self.values = self._buffers[0][..., :end, :], self._buffers[1][..., :end, :]

    return _GrowingLayer


def _selected(buffer: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``buffer``'s rows ``indices``, in order: where most of them are already in their places (finished rows left,
    :func:`access.decode_batch.settled`), the others are copied into ``buffer`` and its first rows are the result;
    otherwise a new buffer (``index_select``, not indexing: the same rows, a quarter of the time on a CPU)."""
    (moved,) = torch.nonzero(indices != torch.arange(len(indices), device=indices.device), as_tuple=True)
    if len(indices) > buffer.shape[0] or 2 * len(moved) > len(indices):
        return buffer.index_select(0, indices)
    buffer.index_copy_(0, moved, buffer.index_select(0, indices[moved]))
    return buffer[: len(indices)]


def _with_room(old: torch.Tensor | None, new: torch.Tensor, start: int, capacity: int) -> torch.Tensor:
    """A buffer of ``capacity`` positions for rows shaped like ``new``, holding ``old``'s first ``start`` positions."""
    shape = (*new.shape[:-2], capacity, new.shape[-1])
    buffer = new.new_empty(shape)
    if start and old is not None:
        buffer[..., :start, :] = old[..., :start, :]
    return buffer


def select_rows(cache: Any, indices: list[int], device: torch.device) -> None:
    """Keep only rows ``indices`` of ``cache`` (in that order; a row may repeat), in place."""
    if cache is not None:
        cache.batch_select_indices(torch.tensor(indices, device=device))


def joined(caches: list[Any], layers: range, into: Any, seed: int = 0, trims: list[int] | None = None) -> Any:
    """One cache holding the rows of ``caches`` in order (each filled for ``layers`` by one slice's forward); a slice
    whose forward left out ``trims[k]`` padding positions after the ``seed`` positions it started from gets zeros there
    (the mask hides them). Into a growing cache (:func:`new_cache` with a reserve), each slice is copied once, straight
    into the buffers with room to spare."""
    trims = trims or [0] * len(caches)
    for index in layers:
        parts = [c.layers[index] for c in caches]
        layer = into.layers[index]
        grows = isinstance(layer, growing_layer_class())
        if grows:
            width = parts[0].keys.shape[-2] + trims[0]
            keys, values = (
                _filled([getattr(p, kind) for p in parts], seed, trims, width + layer.reserve)
                for kind in ("keys", "values")
            )
            layer.adopt(keys, values, width)
            continue
        keys = torch.cat([_widened(p.keys, seed, t) for p, t in zip(parts, trims, strict=True)])
        values = torch.cat([_widened(p.values, seed, t) for p, t in zip(parts, trims, strict=True)])
        into.update(keys, values, index)
    return into


def _filled(slices: list[torch.Tensor], seed: int, trims: list[int], capacity: int) -> torch.Tensor:
    """A buffer of ``capacity`` positions holding ``slices`` one after another along the rows, each widened as
    :func:`_widened` widens it (zeros at its trimmed positions)."""
    first = slices[0]
    buffer = first.new_empty(sum(x.shape[0] for x in slices), *first.shape[1:-2], capacity, first.shape[-1])
    start = 0
    for x, trim in zip(slices, trims, strict=True):
        rows = buffer[start : start + x.shape[0]]
        rows[..., :seed, :] = x[..., :seed, :]
        rows[..., seed : seed + trim, :] = 0
        rows[..., seed + trim : trim + x.shape[-2], :] = x[..., seed:, :]
        start += x.shape[0]
    return buffer


def _widened(x: torch.Tensor, seed: int, trim: int) -> torch.Tensor:
    """``x`` with ``trim`` positions of zeros inserted after its first ``seed``."""
    if not trim:
        return x
    return torch.cat([x[..., :seed, :], x.new_zeros(*x.shape[:-2], trim, x.shape[-1]), x[..., seed:, :]], dim=-2)


@dataclass
class Seed:
    """Where a prompt pass's rows start: row ``r`` from ``cache``'s row ``rows[r]`` (its stem's keys and values;
    -1: none, which the mask hides), for ``layers``."""

    cache: Any
    layers: range
    rows: torch.Tensor
    _padded: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @classmethod
    def of(cls, cache: Any, layers: range, rows: list[int]) -> Seed | None:
        if cache is None:
            return None
        return cls(cache, layers, torch.tensor(rows, device=cache.layers[layers.start].keys.device))

    def take(self, part: slice, into: Any) -> Any:
        """``into`` holding the stems of rows ``part``."""
        for index in self.layers:
            if index not in self._padded:  # a last row of zeros, for the rows without a stem
                layer = self.cache.layers[index]
                self._padded[index] = (_zero_row(layer.keys), _zero_row(layer.values))
            keys, values = self._padded[index]
            rows = self.rows[part].remainder(keys.shape[0])
            into.update(keys.index_select(0, rows), values.index_select(0, rows), index)
        return into


def _zero_row(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x.new_zeros(1, *x.shape[1:])])
