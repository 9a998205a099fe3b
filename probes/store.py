"""The on-disk layout of a run's activations: one HDF5 file per run directory.

Layout of the run's HDF5 file (:attr:`core.run_dir.RunDir.activations`; schema version 1)::

    /                                   attrs: schema_version, toolkit_version, settings (JSON), provenance (JSON:
                                               the recording calls, each with capability_rows, every
                                               row of each capability it recorded in the data file)
    /models/{sft,dpo[,base]}            attrs: model_dir, weights_sha256, tokenizer_sha256,
                                               chat_template_sha256, model_type, n_layers,
                                               d_model, d_mlp
    /models/{dpo_on_sft,sft_on_dpo}     attrs: weights_sha256, tokenizer_sha256 (the model whose blocks ran),
                                               inputs_weights_sha256 (the model whose block inputs they ran on)
    /samples/{capability}/sample_ids    (N,) int64   row index in the data file (0-based)
    /samples/{capability}/tasks         (N,) str     RoleMRC task name
    /samples/{capability}/prompt_lengths(N,) int32   rendered prompt length in tokens
    /samples/{capability}/prompts       (N,) str     rendered prompt text
    /activations/{model}/{capability}/{hook}
                                        (N, n_stored_layers, width) float16|float32
                                        (model: sft, dpo, base, or a local group dpo_on_sft, sft_on_dpo)
                                        attrs: layers (stored layer indices), hook_tl_name

``base`` (the model the SFT started from) is there only in runs recorded with ``--base``: older
runs and runs without it simply have no base group, and open as before. The *local* groups
``dpo_on_sft`` (DPO's block *l* run on SFT's input to block *l*) and ``sft_on_dpo`` (the reverse)
sit beside the models with the same shape, layers and hooks (:mod:`access.local_blocks`); a run
holds those its ``settings.local`` names, and runs recorded before them have none.
``settings`` holds everything that must match for two recordings to share a file
(backend, position, hooks, layers, dtypes, data hash, ...). Datasets are chunked
along N, gzip-compressed and grown batch by batch, so memory is bounded by one batch.
Numeric datasets carry HDF5's fletcher32 checksum per chunk: a damaged chunk is reported
by :class:`RunReader` as one line naming the capability, model and hook, never read as
silently wrong numbers (files written before the checksum still open).
Row *j* of every dataset under one capability is the same prompt, and a completed recording holds every row of
the capability: a dataset or sample record shorter than the capability (its ``capability_rows``; in a file
written before them, its sample records) is damage, one line when the capability is read, never analysed on
the shorter set. A local group says which models made it; one made by other models than the run's ``sft``
and ``dpo`` is refused in one line naming both fingerprints (files written before that record open as before).

:class:`RunReader` is the read API that analysis and notebooks use. A run file is checked before
it is trusted: its metadata (every attribute, the layout of every group and dataset, the chunk
index) is first read by a separate Python process (``python -m probes.store FILE``), because
HDF5 itself crashes on some damaged metadata (one flipped byte in the type of the ``settings``
attribute is a segfault). That process returns the metadata as JSON, or one line saying what
is wrong, or dies; each of the last two becomes one :class:`~core.errors.ProbeError` here.
The metadata is then typed and checked against itself: ``settings`` is JSON whose sha256
matches ``settings_sha256`` (when written), every dataset has its ``layers``, the hooks, layers
and dtype match the settings (and the settings file beside it), datasets with external
storage or virtual datasets are refused (they would read other files as activations), and
every size a dataset claims is held in the file: all its chunks allocated, inside the file,
and at most :data:`MAX_INFLATION` times the file's size, so a crafted shape cannot allocate
more memory than the file could ever decompress to.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from einops import rearrange

from access.directions import DIRECTIONS
from core.errors import ProbeError
from core.hdf5 import first_line
from core.records import to_json
from core.run_dir import RunDir
from probes.samples import SAMPLE_FIELDS, SampleColumns
from probes.settings import COMPAT_KEYS, RunSettings

SCHEMA_VERSION = 1
MODELS: tuple[str, ...] = ("sft", "dpo")  # every run has both
# recorded when asked (``probe run --base``); a run without it has no base group
OPTIONAL_MODELS: tuple[str, ...] = ("base",)
ALL_MODELS: tuple[str, ...] = MODELS + OPTIONAL_MODELS
# one model's blocks run on the other's block inputs (access.directions), recorded unless ``--local none``
LOCAL_GROUPS: tuple[str, ...] = tuple(DIRECTIONS)
STORED_GROUPS: tuple[str, ...] = ALL_MODELS + LOCAL_GROUPS
STORE_DTYPES: tuple[str, ...] = ("float16", "float32")
MAX_INFLATION = 1100  # deflate cannot expand data more than ~1032-fold; a claim beyond that is not in the file
MAX_MODEL_LAYERS = 100_000
CHECK_TIMEOUT_S = 300
_STR = h5py.string_dtype(encoding="utf-8")
_ROOT_ATTRS = ("schema_version", "toolkit_version", "settings", "settings_sha256", "provenance")
CAPABILITY_ROWS = "capability_rows"  # in each recording call's provenance: {capability: its rows in the data file}
INPUTS_WEIGHTS = "inputs_weights_sha256"  # of a local group: the model whose block inputs its blocks ran on
_CHECKED: dict[tuple[Any, ...], dict[str, Any]] = {}


def settings_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredDataset:
    """What the file says about one activations dataset, checked."""

    rows: int
    width: int
    dtype: str
    layers: list[int]
    tl_name: str


class RunReader:
    """Read-only access to a run's activations, after the file's metadata was checked (see the module doc).

    Example:
        >>> import tempfile
        >>> run_dir = Path(tempfile.mkdtemp()); _ = (run_dir / "activations.h5").write_bytes(b"not HDF5")
        >>> RunReader(run_dir)   # its metadata is read in a separate process first
        Traceback (most recent call last):
        core.errors.ProbeError: .../activations.h5: not a readable HDF5 file (...file signature not found))
        >>> run = RunReader("runs/2026-11-22_multi_turn")           # doctest: +SKIP
        >>> x = run.activations("dpo", "multi_turn", "mlp_out")     # doctest: +SKIP
        >>> x.shape, x.dtype                                        # doctest: +SKIP
        ((400, 32, 4096), dtype('float32'))
        >>> run.layers("multi_turn", "mlp_out")                     # doctest: +SKIP
        [0, 1, 2, ..., 31]
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = RunDir(run_dir).activations
        if not self.path.is_file():
            raise ProbeError(f"{self.run_dir}: no {self.path.name} here; record activations first with `probe run`")
        layout = checked_metadata(self.path)
        self.settings = _settings(layout["root"], self.path)
        self._models = {m: _model_info(layout["models"].get(m, {}), m, self.path) for m in STORED_GROUPS}
        self._samples: dict[str, int] = {cap: _sample_rows(fields, cap, self.path) for cap, fields in layout["samples"]}
        self._datasets = {
            (m, c, h): _stored(info, f"activations/{m}/{c}/{h}", self.path) for m, c, h, info in layout["activations"]
        }
        _check_against_settings(self, self.path)
        _check_against_run_json(self.run_dir, self.settings, self.path)
        _check_local_made_by(self, self.path)
        self._short = _short_groups(self, _capability_rows(layout["root"].get("provenance")))
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            raise ProbeError(f"{self.path}: not a readable HDF5 file ({exc})") from None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def model_info(self, model: str) -> dict[str, Any]:
        return dict(self._models.get(model, {}))

    def models(self) -> list[str]:
        """The models with recorded activations: ``sft``, ``dpo`` and, in a run recorded with ``--base``, ``base``."""
        return [m for m in ALL_MODELS if any(key[0] == m for key in self._datasets)]

    def local_directions(self, capability: str, hook: str) -> list[str]:
        """The local directions (:mod:`access.directions`) recorded for ``capability`` and ``hook``; [] in old runs."""
        return [d for d in LOCAL_GROUPS if (d, capability, hook) in self._datasets]

    def capabilities(self) -> list[str]:
        """Capabilities with at least one recorded sample, in file order."""
        return [cap for cap, rows in self._samples.items() if rows > 0]

    def hooks(self, capability: str, model: str = "sft") -> list[str]:
        return [h for m, c, h in self._datasets if m == model and c == capability]

    def _stored(self, model: str, capability: str, hook: str) -> StoredDataset:
        found = self._datasets.get((model, capability, hook))
        if found is None:
            have = ", ".join(self.capabilities()) or "none"
            raise ProbeError(
                f"{self.path}: no activations for model={model} capability={capability} hook={hook} (capabilities "
                f"recorded: {have})"
            )
        return found

    def _dataset(self, model: str, capability: str, hook: str) -> h5py.Dataset:
        self._stored(model, capability, hook)
        return self._file[f"activations/{model}/{capability}/{hook}"]

    def n_samples(self, capability: str) -> int:
        """The capability's rows, each recorded in every dataset; a group shorter than the capability is one
        :class:`ProbeError` (module doc)."""
        if capability in self._short:
            raise ProbeError(self._short[capability])
        return self._samples.get(capability, 0)

    def layers(self, capability: str, hook: str, model: str = "sft") -> list[int]:
        return list(self._stored(model, capability, hook).layers)

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
            raise ProbeError(
                f"{self.path}: the {what} are damaged on disk ({str(exc).splitlines()[0]}); the file cannot "
                "be repaired (its journal was consumed when it was written): record again into a new --out"
            ) from None

    def dataset(self, model: str, capability: str, hook: str) -> h5py.Dataset:
        """The raw h5py dataset, for slicing without loading everything (see :meth:`read` for a checked slice)."""
        return self._dataset(model, capability, hook)

    def read(self, model: str, capability: str, hook: str, selection: Any) -> np.ndarray:
        """``dataset[selection]`` without loading the rest; a damaged chunk is one line naming what it holds."""
        dataset = self._dataset(model, capability, hook)
        with self._damage_named(f"activations of model {model}, capability {capability}, hook {hook}"):
            values: np.ndarray = dataset[selection]
            return values

    def samples(self, capability: str) -> SampleColumns:
        if capability not in self._samples:
            raise ProbeError(
                f"{self.path}: no samples of capability {capability!r} (recorded: "
                f"{', '.join(self.capabilities()) or 'none'})"
            )
        n = self.n_samples(capability)
        group = self._file[f"samples/{capability}"]
        with self._damage_named(f"sample records of capability {capability}"):
            return self._sample_info(group, n)

    @staticmethod
    def _sample_info(group: h5py.Group, n: int) -> SampleColumns:
        return SampleColumns(
            sample_ids=group["sample_ids"][:n],
            tasks=[_plain(t) for t in group["tasks"][:n]],
            prompt_lengths=group["prompt_lengths"][:n],
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


def read_file_settings(path: Path) -> RunSettings:
    """The ``settings`` of one activations file, checked as :class:`RunReader` checks them."""
    return _settings(checked_metadata(path)["root"], path)


# --- the metadata, read by a child process -------------------------------------------------------------------------


def checked_metadata(path: Path) -> dict[str, Any]:
    """The file's metadata as plain JSON, read by ``python -m probes.store`` (cached while the file is unchanged)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = _metadata_in_child(path)
    return _CHECKED[key]


def _metadata_in_child(path: Path) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "probes.store", str(path)],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": _import_root()},
        )
    except subprocess.TimeoutExpired:
        raise ProbeError(
            f"{path}: reading its HDF5 metadata did not finish in {CHECK_TIMEOUT_S} s; the file is damaged or "
            "crafted: record again into a new --out"
        ) from None
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if "error" in report:
        raise ProbeError(f"{path}: {report['error']}")
    if done.returncode == 0 and "root" in report:
        return report
    how = (
        f"crashed the HDF5 library (signal {-done.returncode})"
        if done.returncode < 0
        else f"failed (exit status {done.returncode})"
    )
    raise ProbeError(
        f"{path}: the file's HDF5 metadata is damaged: reading it {how}; the file cannot be repaired: "
        "record again into a new --out"
    )


def _import_root() -> str:
    """PYTHONPATH for the child: this toolkit's root first, so the child runs this very module."""
    root = str(Path(__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH", "")
    return f"{root}{os.pathsep}{rest}" if rest else root


class _Refused(Exception):
    """A structural fault found by the child; its text is the one line the user sees."""


def _walk(path: Path) -> dict[str, Any]:
    """(In the child.) Every piece of metadata the reader uses, each read once, with the layout checks."""
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise _Refused(f"not a readable HDF5 file ({str(exc).splitlines()[0]})") from None
    size = path.stat().st_size
    with handle:
        root = {name: _attr(handle, name, "/") for name in _ROOT_ATTRS if name in handle.attrs}
        models = {
            m: {k: _attr(handle[f"models/{m}"], k, f"models/{m}") for k in handle[f"models/{m}"].attrs}
            for m in STORED_GROUPS
            if isinstance(handle.get(f"models/{m}"), h5py.Group)
        }
        samples = [
            [cap, _sample_fields(group, cap, size)]
            for cap, group in _members(handle, "samples", "a group per capability")
        ]
        activations = []
        for model, group in _members(handle, "activations", "a group per model"):
            for cap, by_hook in _members(group, f"activations/{model}", "a group per capability", root_name=False):
                for hook, dataset in _members(
                    by_hook, f"activations/{model}/{cap}", "a dataset per hook", kind=h5py.Dataset, root_name=False
                ):
                    activations.append([model, cap, hook, _activation_info(dataset, size)])
    return {"root": root, "models": models, "samples": samples, "activations": activations}


def _members(
    parent: h5py.Group, name: str, expected: str, kind: type = h5py.Group, root_name: bool = True
) -> list[tuple[str, Any]]:
    group = parent.get(name) if root_name else parent
    if group is None:
        return []
    if not isinstance(group, h5py.Group):
        raise _Refused(f"{name} is a dataset; expected a group holding {expected}")
    out = []
    for key in group:
        item = group.get(key)
        if not isinstance(item, kind):
            what = (
                "a dataset"
                if isinstance(item, h5py.Dataset)
                else "a group"
                if isinstance(item, h5py.Group)
                else "a dangling link"
            )
            raise _Refused(f"{name}/{key} is {what}; expected {expected}")
        out.append((key, item))
    return out


def _attr(obj: Any, name: str, where: str) -> Any:
    try:
        value = _plain(obj.attrs[name])
    except Exception as exc:  # in the guard process: any failure to read is damage, said in one line
        raise _Refused(f"the attribute {name!r} of {where} cannot be read ({first_line(exc)})") from None
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        raise _Refused(
            f"the attribute {name!r} of {where} holds {type(value).__name__}; expected text or numbers"
        ) from None
    try:
        text.encode("utf-8")  # h5py hands invalid UTF-8 over as lone surrogates
    except UnicodeEncodeError:
        raise _Refused(f"the attribute {name!r} of {where} is not valid UTF-8 text; the file is damaged") from None
    return value


def _sample_fields(group: h5py.Group, cap: str, size: int) -> dict[str, Any]:
    fields = {}
    for name in SAMPLE_FIELDS:
        dataset = group.get(name)
        if not isinstance(dataset, h5py.Dataset):
            raise _Refused(
                f"samples/{cap}/{name} is missing or not a dataset; expected the per-sample {name} (was the file "
                "written by `probe run`?)"
            )
        _check_storage(dataset, size)
        try:
            kind = "text" if h5py.check_string_dtype(dataset.dtype) else dataset.dtype.kind
            values = dataset[:]  # read whole: these are small, and a damaged string heap must crash here, not later
            for text in rearrange(values, "... -> (...)") if kind == "text" else ():
                text.decode("utf-8") if isinstance(text, bytes) else text.encode("utf-8")  # invalid UTF-8 raises
        except Exception as exc:  # the guard process
            raise _Refused(
                f"samples/{cap}/{name} cannot be read ({first_line(exc)}); record again into a new --out"
            ) from None
        fields[name] = {"shape": list(dataset.shape), "kind": kind}
    return fields


def _activation_info(dataset: h5py.Dataset, size: int) -> dict[str, Any]:
    _check_storage(dataset, size)
    info = {
        "shape": list(dataset.shape),
        "dtype": str(dataset.dtype),
        "layers": _attr(dataset, "layers", dataset.name) if "layers" in dataset.attrs else None,
        "tl_name": _attr(dataset, "hook_tl_name", dataset.name) if "hook_tl_name" in dataset.attrs else "",
    }
    if dataset.ndim == 3 and dataset.shape[0] > 0 and dataset.dtype.kind == "f":
        try:
            dataset[:1]  # one chunk: the type conversion and the first index lookup, where damaged metadata crashes
            dataset[-1:]
        except OSError:
            pass  # damaged chunk data is the reader's to report, naming what it holds
    return info


def _check_storage(dataset: h5py.Dataset, size: int) -> None:
    """Refuse external storage and virtual datasets, and a shape the file does not hold the bytes for."""
    plist = dataset.id.get_create_plist()
    if dataset.is_virtual or plist.get_external_count() > 0:
        kind = "a virtual dataset" if dataset.is_virtual else "stored in external files"
        raise _Refused(
            f"{dataset.name} is {kind}, which would read other files as its data; a run file holds its own data: "
            "record again into a new --out"
        )
    claimed = math.prod(dataset.shape) * dataset.dtype.itemsize
    if dataset.chunks is None:
        held = dataset.id.get_storage_size() if plist.get_layout() != h5py.h5d.COMPACT else claimed
        if held < claimed:
            raise _Refused(
                f"{dataset.name} claims {dataset.shape} ({claimed:,} bytes) but holds {held:,} bytes; "
                "the file is truncated or crafted"
            )
        return
    if claimed > MAX_INFLATION * size:
        raise _Refused(
            f"{dataset.name} claims shape {dataset.shape} ({claimed:,} bytes), "
            f"more than a {size:,}-byte file can hold; the file is damaged or crafted"
        )
    needed = math.prod(math.ceil(n / c) for n, c in zip(dataset.shape, dataset.chunks, strict=True))
    allocated = dataset.id.get_num_chunks()
    if allocated < needed:
        raise _Refused(
            f"{dataset.name} claims shape {dataset.shape} but only {allocated} of its {needed} chunks were written; "
            "the file is damaged or crafted: record again into a new --out"
        )
    for index in range(allocated):
        chunk = dataset.id.get_chunk_info(index)
        if chunk.byte_offset is None or chunk.byte_offset + chunk.size > size:
            raise _Refused(f"{dataset.name}: chunk {index} lies outside the file; the file is truncated or damaged")


def _child_main(argv: list[str]) -> None:
    """``python -m probes.store FILE``: the file's metadata, or ``{"error": ...}``, as one JSON line on stdout."""
    try:
        report = _walk(Path(argv[0]))
    except _Refused as exc:
        report = {"error": str(exc)}
    except Exception as exc:  # the guard process turns any failure into one line for its parent
        report = {"error": f"the file's metadata cannot be read ({first_line(exc)}); record again into a new --out"}
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    os._exit(0)


# --- typing the metadata --------------------------------------------------------------------------------------------


def _settings(root: dict[str, Any], path: Path) -> RunSettings:
    text = root.get("settings")
    if not isinstance(text, str):
        found = "no 'settings' attribute" if text is None else f"a 'settings' attribute holding {type(text).__name__}"
        raise ProbeError(
            f"{path}: {found}; expected the run settings as JSON text (was the file written by `probe run`?)"
        )
    expected = root.get("settings_sha256")
    if expected is not None and expected != settings_sha256(text):
        raise ProbeError(
            f"{path}: the 'settings' attribute does not match its checksum (settings_sha256); the file is damaged: "
            "record again into a new --out"
        )
    version = root.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ProbeError(
            f"{path}: schema_version {version!r}, newer than this toolkit reads ({SCHEMA_VERSION}); update the toolkit"
        )
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProbeError(
            f"{path}: the 'settings' attribute is not JSON ({str(exc)[:80]}); the file is damaged: "
            "record again into a new --out"
        ) from None
    return RunSettings.read(body, f"{path}: attribute 'settings'")


def _model_info(info: dict[str, Any], model: str, path: Path) -> dict[str, Any]:
    for key in ("n_layers", "d_model", "d_mlp"):
        value = info.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 < value <= MAX_MODEL_LAYERS * (1 if key == "n_layers" else 100)
        ):
            raise ProbeError(
                f"{path}: models/{model} attribute {key} is {value!r}; "
                "expected a positive integer of a real model's size"
            )
    return info


def _sample_rows(fields: dict[str, Any], cap: str, path: Path) -> int:
    rows = set()
    for name, kind in SAMPLE_FIELDS.items():
        shape, found = fields[name]["shape"], fields[name]["kind"]
        if len(shape) != 1 or (found != kind if kind == "text" else found not in "iu"):
            raise ProbeError(
                f"{path}: samples/{cap}/{name} has shape {tuple(shape)} of {found}; expected one "
                f"{'text' if kind == 'text' else 'integer'} per sample"
            )
        rows.add(shape[0])
    if len(rows) > 1:
        raise ProbeError(
            f"{path}: the sample records of {cap} have different lengths ({sorted(rows)}); the file is damaged"
        )
    return int(rows.pop())


def _stored(info: dict[str, Any], name: str, path: Path) -> StoredDataset:
    shape, layers = info["shape"], info["layers"]
    if len(shape) != 3:
        raise ProbeError(f"{path}: {name} has shape {tuple(shape)}; expected (samples, layers, width)")
    if info["dtype"] not in STORE_DTYPES:
        raise ProbeError(f"{path}: {name} holds {info['dtype']}; expected one of {', '.join(STORE_DTYPES)}")
    if layers is None:
        raise ProbeError(
            f"{path}: {name} has no 'layers' attribute; expected the recorded layer numbers (was the file written by "
            "`probe run`?)"
        )
    if isinstance(layers, int):
        layers = [layers]
    if (
        not isinstance(layers, list)
        or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers)
        or len(set(layers)) != len(layers)
        or len(layers) != shape[1]
    ):
        raise ProbeError(
            f"{path}: {name} attribute 'layers' is {str(layers)[:60]}; expected {shape[1]} distinct layer numbers, "
            "one per stored layer"
        )
    if not isinstance(info["tl_name"], str):
        raise ProbeError(f"{path}: {name} attribute 'hook_tl_name' is not text")
    return StoredDataset(shape[0], shape[2], info["dtype"], layers, info["tl_name"])


def _check_against_settings(run: RunReader, path: Path) -> None:
    """The file's datasets must be what its settings say was recorded."""
    s = run.settings
    for (model, cap, hook), stored in run._datasets.items():
        name = f"activations/{model}/{cap}/{hook}"
        if model not in STORED_GROUPS:
            raise ProbeError(f"{path}: {name}: unknown model {model!r}; expected {', '.join(STORED_GROUPS)}")
        if cap not in run._samples:
            raise ProbeError(f"{path}: {name} has no sample records (samples/{cap}); the file is damaged")
        if s.hooks and hook not in s.hooks:
            raise ProbeError(
                f"{path}: {name}: hook {hook} is not among the run's settings hooks ({', '.join(s.hooks)}); the run "
                "does not match its own settings"
            )
        if s.layers and stored.layers != list(s.layers):
            raise ProbeError(
                f"{path}: {name} stores layers {stored.layers[:8]} but the run's settings say {list(s.layers)[:8]}; "
                "the run does not match its own settings"
            )
        if s.store_dtype and stored.dtype != s.store_dtype:
            raise ProbeError(
                f"{path}: {name} holds {stored.dtype} but the run's settings say store_dtype {s.store_dtype}; the run "
                "does not match its own settings"
            )
        other = run._datasets.get(("dpo" if model == "sft" else "sft", cap, hook))  # base is checked against sft
        if other is not None and (other.width, other.layers) != (stored.width, stored.layers):
            raise ProbeError(
                f"{path}: {name} and its other model's dataset differ in width or layers; the file is damaged"
            )
        depth = run._models.get(model, {}).get("n_layers")
        if isinstance(depth, int) and max(stored.layers, default=-1) >= depth:
            raise ProbeError(
                f"{path}: {name} stores layer {max(stored.layers)} of a {depth}-layer model; the file is damaged"
            )


def _check_local_made_by(run: RunReader, path: Path) -> None:
    """A local group must have been made by the run's own models: its blocks' model and its inputs' (module doc)."""
    from core.provenance import MadeBy

    for direction in LOCAL_GROUPS:
        info = run.model_info(direction)
        found = MadeBy.read(info)
        if found is None:
            continue  # written before local groups said who made them
        said = (
            [found] if isinstance(found, str) else _local_differences(run, direction, found, info.get(INPUTS_WEIGHTS))
        )
        if said:
            raise ProbeError(
                f"{path}: the local group {direction} was made by other models than the run's: {'; '.join(said)}; "
                "it belongs to another recording: record again into a new --out"
            )


def _local_differences(run: RunReader, direction: str, found: Any, inputs: Any) -> list[str]:
    """How a local group's makers (``found``, a MadeBy, and its ``inputs`` weights) differ from the run's models."""
    from core.provenance import MadeBy, short_sha

    source, blocks = DIRECTIONS[direction]
    expected = MadeBy.read(run.model_info(blocks))
    said = [found.differences(expected, f"the run's {blocks} model")] if isinstance(expected, MadeBy) else []
    recorded = run.model_info(source).get("weights_sha256")
    if inputs != recorded:
        said.append(f"{INPUTS_WEIGHTS} {short_sha(str(inputs))} (the run's {source} model: {short_sha(str(recorded))})")
    return [s for s in said if s]


def _capability_rows(provenance: Any) -> dict[str, int]:
    """Per capability, its rows in the data file as the recording calls said them (the latest call's last);
    {} for a file written before they did, or an unreadable provenance (the guard read it as text)."""
    try:
        body = json.loads(provenance) if isinstance(provenance, str) else None
    except (ValueError, RecursionError):
        return {}
    calls = body.get("calls") if isinstance(body, dict) else None
    rows: dict[str, int] = {}
    for call in calls if isinstance(calls, list) else [body]:
        said = call.get(CAPABILITY_ROWS) if isinstance(call, dict) else None
        if isinstance(said, dict):
            rows |= {c: n for c, n in said.items() if isinstance(n, int) and not isinstance(n, bool)}
    return rows


def _short_groups(run: RunReader, capability_rows: dict[str, int]) -> dict[str, str]:
    """Per capability whose sample records or a dataset hold other than the capability's rows, the line that says
    so (module doc)."""
    short = {}
    for cap, samples in run._samples.items():
        expected = capability_rows.get(cap, samples)
        whose = "its rows in the data file (capability_rows)" if cap in capability_rows else "its sample records"
        groups = {"its sample records": samples} | {
            f"activations/{m}/{c}/{h}": d.rows for (m, c, h), d in run._datasets.items() if c == cap
        }
        wrong = sorted((rows, name) for name, rows in groups.items() if rows != expected)
        if wrong:
            rows, name = wrong[0]
            short[cap] = (
                f"{run.path}: the recording of {cap} is damaged: {name} holds {rows} rows, but {cap} has {expected} "
                f"({whose}); a completed recording holds every row of it, and nothing is analysed on another set: "
                "record again into a new --out"
            )
    return short


def _check_against_run_json(run_dir: Path, settings: RunSettings, path: Path) -> None:
    """The settings file beside the HDF5 file binds the directory: where both exist they must agree."""
    run = RunDir(run_dir)
    existing = run.read_settings_file()
    if existing is None:
        return
    beside = RunSettings.read(existing["settings"], str(run.settings_file))
    diffs = [key for key in COMPAT_KEYS if getattr(beside, key) != getattr(settings, key)]
    if diffs:
        raise ProbeError(
            f"{path}: its settings differ from {run.settings_file} in {', '.join(diffs[:4])}; the run does not match "
            "its own settings (was one of the files copied from another run?)"
        )


class RunWriter:
    """Append-only writer for the layout above (resume and crash safety live in :mod:`probes.journal`).

    Example:
        >>> with RunWriter(run_dir, settings) as w:                                 # doctest: +SKIP
        ...     w.set_model_info("sft", {...})
        ...     w.append_samples("multi_turn", ids, tasks, lengths, prompts)
        ...     w.append_activations("sft", "multi_turn", "mlp_out", batch, layers)
    """

    def __init__(
        self,
        run_dir: str | Path,
        settings: RunSettings | dict[str, Any],
        toolkit_version: str = "0.1.0",
        chunk_rows: int = 64,
    ) -> None:
        self.path = RunDir(run_dir).activations
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = h5py.File(self.path, "a")
        self.chunk_rows = chunk_rows
        if "settings" not in self._file.attrs:
            self._file.attrs["schema_version"] = SCHEMA_VERSION
            self._file.attrs["toolkit_version"] = toolkit_version
            body = settings if isinstance(settings, dict) else to_json(settings)
            text = json.dumps(to_json(RunSettings.read(body)), sort_keys=True)
            self._file.attrs["settings"] = text
            self._file.attrs["settings_sha256"] = settings_sha256(text)

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
            compress = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if tail else {}
            checksum = {"fletcher32": True} if dtype is not _STR else {}
            self._file.create_dataset(
                name, shape=(0, *tail), maxshape=(None, *tail), dtype=dtype, chunks=chunks, **compress, **checksum
            )
        ds = self._file[name]
        start = ds.shape[0]
        ds.resize(start + len(values), axis=0)
        ds[start:] = values
        return ds

    def append_samples(
        self, capability: str, sample_ids: np.ndarray, tasks: list[str], prompt_lengths: np.ndarray, prompts: list[str]
    ) -> None:
        base = f"samples/{capability}"
        self._grow(f"{base}/sample_ids", np.asarray(sample_ids, dtype=np.int64), np.int64)
        self._grow(f"{base}/tasks", np.asarray(tasks, dtype=object), _STR)
        self._grow(f"{base}/prompt_lengths", np.asarray(prompt_lengths, dtype=np.int32), np.int32)
        self._grow(f"{base}/prompts", np.asarray(prompts, dtype=object), _STR)

    def append_activations(
        self, model: str, capability: str, hook: str, values: np.ndarray, layers: list[int], tl_name: str = ""
    ) -> None:
        """Append (batch, n_stored_layers, width) rows; the store dtype is fixed by the first batch."""
        ds = self._grow(f"activations/{model}/{capability}/{hook}", values, values.dtype)
        if "layers" not in ds.attrs:
            ds.attrs["layers"] = np.asarray(layers, dtype=np.int32)
            ds.attrs["hook_tl_name"] = tl_name

    def flush(self) -> None:
        self._file.flush()


if __name__ == "__main__":
    _child_main(sys.argv[1:])
