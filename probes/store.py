"""The on-disk layout of a run's activations: one HDF5 file per run directory.

Layout of ``RUN_DIR/activations.h5`` (schema version 1)::

    /                                   attrs: schema_version, toolkit_version, settings (JSON)
    /models/{sft,dpo}                   attrs: model_dir, weights_sha256, tokenizer_sha256,
                                               chat_template_sha256, model_type, n_layers,
                                               d_model, d_mlp
    /samples/{capability}/sample_ids    (N,) int64   row index in the data file (0-based)
    /samples/{capability}/tasks         (N,) str     RoleMRC task name
    /samples/{capability}/prompt_lengths(N,) int32   rendered prompt length in tokens
    /samples/{capability}/prompts       (N,) str     rendered prompt text
    /activations/{model}/{capability}/{hook}
                                        (N, n_stored_layers, width) float16|float32
                                        attrs: layers (stored layer indices), hook_tl_name

``settings`` holds everything that must match for two recordings to share a file
(backend, position, hooks, layers, dtypes, data hash, ...). Datasets are chunked
along N, gzip-compressed and grown batch by batch, so memory is bounded by one batch.
Numeric datasets carry HDF5's fletcher32 checksum per chunk: a damaged chunk is reported
by :class:`RunReader` as one line naming the capability, model and hook, never read as
silently wrong numbers (files written before the checksum still open).
Row *j* of every dataset under one capability is the same prompt.

:class:`RunReader` is the read API that analysis and notebooks use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from core.errors import ProbeError
from probes.settings import RunSettings

ACTIVATIONS_FILE = "activations.h5"
SCHEMA_VERSION = 1
MODELS: tuple[str, ...] = ("sft", "dpo")
_STR = h5py.string_dtype(encoding="utf-8")


def activations_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / ACTIVATIONS_FILE


@dataclass(frozen=True)
class SampleInfo:
    """Per-sample metadata of one capability, aligned with its activation rows."""

    sample_ids: np.ndarray  # (N,) int64
    tasks: list[str]
    prompt_lengths: np.ndarray  # (N,) int32
    prompts: list[str]


class RunReader:
    """Read-only access to a run's activations.

    Example:
        >>> run = RunReader("runs/2026-11-22_multi_turn")           # doctest: +SKIP
        >>> x = run.activations("dpo", "multi_turn", "mlp_out")     # doctest: +SKIP
        >>> x.shape, x.dtype                                        # doctest: +SKIP
        ((400, 32, 4096), dtype('float32'))
        >>> run.layers("multi_turn", "mlp_out")                     # doctest: +SKIP
        [0, 1, 2, ..., 31]
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = activations_path(run_dir)
        if not self.path.is_file():
            raise ProbeError(f"{self.run_dir}: no {ACTIVATIONS_FILE} here; record activations first with `probe run`")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            raise ProbeError(f"{self.path}: not a readable HDF5 file ({exc})") from None
        self.settings = RunSettings.from_dict(json.loads(self._file.attrs.get("settings", "{}")), str(self.path))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def model_info(self, model: str) -> dict[str, Any]:
        group = self._file.get(f"models/{model}")
        return {} if group is None else {k: _plain(v) for k, v in group.attrs.items()}

    def capabilities(self) -> list[str]:
        """Capabilities with at least one recorded sample, in file order."""
        group = self._file.get("samples")
        return [] if group is None else [c for c in group if len(group[c]["sample_ids"]) > 0]

    def hooks(self, capability: str, model: str = "sft") -> list[str]:
        group = self._file.get(f"activations/{model}/{capability}")
        return [] if group is None else list(group)

    def _dataset(self, model: str, capability: str, hook: str) -> h5py.Dataset:
        name = f"activations/{model}/{capability}/{hook}"
        if name not in self._file:
            have = ", ".join(self.capabilities()) or "none"
            raise ProbeError(f"{self.path}: no activations for model={model} capability={capability} hook={hook} (capabilities recorded: {have})")
        return self._file[name]

    def n_samples(self, capability: str) -> int:
        """Samples complete for both models (rows beyond that belong to an unfinished batch)."""
        lengths = [len(self._file[f"samples/{capability}/sample_ids"])]
        for model in MODELS:
            for hook in self.hooks(capability, model):
                lengths.append(self._file[f"activations/{model}/{capability}/{hook}"].shape[0])
        return min(lengths)

    def layers(self, capability: str, hook: str, model: str = "sft") -> list[int]:
        return [int(i) for i in self._dataset(model, capability, hook).attrs["layers"]]

    def activations(self, model: str, capability: str, hook: str, dtype: np.dtype | type = np.float32) -> np.ndarray:
        """All complete rows, shape (N, n_stored_layers, width)."""
        n = self.n_samples(capability)
        with self._damage_named(f"activations of model {model}, capability {capability}, hook {hook}"):
            return np.asarray(self._dataset(model, capability, hook)[:n], dtype=dtype)

    @contextmanager
    def _damage_named(self, what: str) -> Iterator[None]:
        """A chunk whose checksum fails (or that does not decompress) becomes one line, not an h5py traceback."""
        try:
            yield
        except OSError as exc:
            raise ProbeError(f"{self.path}: the {what} are damaged on disk ({str(exc).splitlines()[0]}); the file cannot "
                             "be repaired (its journal was consumed when it was written): record again into a new --out") from None

    def dataset(self, model: str, capability: str, hook: str) -> h5py.Dataset:
        """The raw h5py dataset, for slicing without loading everything (see :meth:`read` for a checked slice)."""
        return self._dataset(model, capability, hook)

    def read(self, model: str, capability: str, hook: str, selection: Any) -> np.ndarray:
        """``dataset[selection]`` without loading the rest; a damaged chunk is one line naming what it holds."""
        dataset = self._dataset(model, capability, hook)
        with self._damage_named(f"activations of model {model}, capability {capability}, hook {hook}"):
            return dataset[selection]

    def samples(self, capability: str) -> SampleInfo:
        n = self.n_samples(capability)
        group = self._file[f"samples/{capability}"]
        with self._damage_named(f"sample records of capability {capability}"):
            return self._sample_info(group, n)

    @staticmethod
    def _sample_info(group: h5py.Group, n: int) -> SampleInfo:
        return SampleInfo(
            sample_ids=np.asarray(group["sample_ids"][:n], dtype=np.int64),
            tasks=[_plain(t) for t in group["tasks"][:n]],
            prompt_lengths=np.asarray(group["prompt_lengths"][:n], dtype=np.int32),
            prompts=[_plain(p) for p in group["prompts"][:n]],
        )


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class RunWriter:
    """Append-only writer for the layout above (resume and crash safety live in :mod:`probes.journal`).

    Example:
        >>> with RunWriter(run_dir, settings) as w:                                 # doctest: +SKIP
        ...     w.set_model_info("sft", {...})
        ...     w.append_samples("multi_turn", ids, tasks, lengths, prompts)
        ...     w.append_activations("sft", "multi_turn", "mlp_out", batch, layers)
    """

    def __init__(self, run_dir: str | Path, settings: RunSettings | dict[str, Any], toolkit_version: str = "0.1.0",
                 chunk_rows: int = 64) -> None:
        self.path = activations_path(run_dir)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = h5py.File(self.path, "a")
        self.chunk_rows = chunk_rows
        if "settings" not in self._file.attrs:
            self._file.attrs["schema_version"] = SCHEMA_VERSION
            self._file.attrs["toolkit_version"] = toolkit_version
            body = settings if isinstance(settings, dict) else settings.to_dict()
            self._file.attrs["settings"] = json.dumps(RunSettings.from_dict(body).to_dict(), sort_keys=True)

    @property
    def file(self) -> h5py.File:
        return self._file

    def close(self) -> None:
        if self._file.id.valid:
            try:
                self._file.flush()
            finally:
                self._file.close()

    def abandon(self) -> None:
        """Close after a failed write without raising again: no h5py object outlives the error (HDF5 would
        otherwise retry the failing flush at interpreter exit, and has crashed doing so)."""
        try:
            self.close()
        except (OSError, RuntimeError, ValueError):
            if self._file.id.valid:
                self._file.id.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def set_model_info(self, model: str, info: dict[str, Any]) -> None:
        group = self._file.require_group(f"models/{model}")
        for key, value in info.items():
            group.attrs[key] = value

    def _grow(self, name: str, values: np.ndarray, dtype: Any) -> h5py.Dataset:
        if name not in self._file:
            tail = values.shape[1:]
            chunks = (self.chunk_rows, *tail) if tail else (max(self.chunk_rows, 1024),)
            compress = dict(compression="gzip", compression_opts=4, shuffle=True) if tail else {}
            checksum = dict(fletcher32=True) if dtype is not _STR else {}
            self._file.create_dataset(name, shape=(0, *tail), maxshape=(None, *tail), dtype=dtype, chunks=chunks, **compress, **checksum)
        ds = self._file[name]
        start = ds.shape[0]
        ds.resize(start + len(values), axis=0)
        ds[start:] = values
        return ds

    def append_samples(self, capability: str, sample_ids: np.ndarray, tasks: list[str], prompt_lengths: np.ndarray, prompts: list[str]) -> None:
        base = f"samples/{capability}"
        self._grow(f"{base}/sample_ids", np.asarray(sample_ids, dtype=np.int64), np.int64)
        self._grow(f"{base}/tasks", np.asarray(tasks, dtype=object), _STR)
        self._grow(f"{base}/prompt_lengths", np.asarray(prompt_lengths, dtype=np.int32), np.int32)
        self._grow(f"{base}/prompts", np.asarray(prompts, dtype=object), _STR)

    def append_activations(self, model: str, capability: str, hook: str, values: np.ndarray, layers: list[int], tl_name: str = "") -> None:
        """Append (batch, n_stored_layers, width) rows; the store dtype is fixed by the first batch."""
        ds = self._grow(f"activations/{model}/{capability}/{hook}", values, values.dtype)
        if "layers" not in ds.attrs:
            ds.attrs["layers"] = np.asarray(layers, dtype=np.int32)
            ds.attrs["hook_tl_name"] = tl_name

    def flush(self) -> None:
        self._file.flush()
