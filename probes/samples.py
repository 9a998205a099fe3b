"""The per-sample columns of one capability: one record under one spelling, from rendering to the HDF5 file.

Row j of every column is the same prompt. The names are those of the datasets under
``/samples/{capability}/`` in ``activations.h5`` and of the arrays in a journal shard, so a
column has one name in memory and on disk: ``sample_ids`` (the row's index in the data file),
``tasks`` (its RoleMRC task name), ``prompt_lengths`` (the rendered sequence's length in tokens)
and ``prompts`` (the rendered text). A prompt set, a batch, a shard and
:meth:`probes.store.RunReader.samples` all carry this record.

Example:
    >>> columns = SampleColumns([4, 9], ["t1", "t2"], [7, 5], ["<s>a", "<s>b"])
    >>> part = columns.take([1])
    >>> len(columns), part.sample_ids.tolist(), part.prompt_lengths.dtype, part.prompts
    (2, [9], dtype('int32'), ['<s>b'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SAMPLE_FIELDS: dict[str, str] = {"sample_ids": "i", "tasks": "text", "prompt_lengths": "i", "prompts": "text"}


@dataclass(frozen=True)
class SampleColumns:
    """Per-sample metadata of one capability, aligned with its activation rows (module doc)."""

    sample_ids: np.ndarray  # (N,) int64
    tasks: list[str]
    prompt_lengths: np.ndarray  # (N,) int32
    prompts: list[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_ids", np.asarray(self.sample_ids, dtype=np.int64))
        object.__setattr__(self, "prompt_lengths", np.asarray(self.prompt_lengths, dtype=np.int32))
        object.__setattr__(self, "tasks", list(self.tasks))
        object.__setattr__(self, "prompts", list(self.prompts))

    def __len__(self) -> int:
        return len(self.sample_ids)

    def take(self, rows: Sequence[int] | np.ndarray) -> SampleColumns:
        """The rows at ``rows`` (positions, in the order given)."""
        positions = np.asarray(rows, dtype=np.int64)
        return SampleColumns(
            self.sample_ids[positions],
            [self.tasks[i] for i in positions],
            self.prompt_lengths[positions],
            [self.prompts[i] for i in positions],
        )
