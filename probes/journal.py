"""Crash safety: a journal of per-batch shards, consolidated atomically into the HDF5 file.

HDF5 is not crash-safe: a process killed (``kill -9``, OOM killer, power loss) while
h5py is updating metadata can leave a file that no longer opens, taking every batch
already recorded with it. So a recording never writes into the run's HDF5 file in place
(:class:`core.run_dir.RunDir` names the files below):

1. each finished batch (both models, all hooks, its sample metadata) is written to its
   shard in the journal as a temporary file, fsynced, then renamed into
   place: a shard either exists complete or not at all;
2. at the end of the run the shards are appended, in order, to a *copy* of the current
   HDF5 file (through :class:`probes.store.RunWriter`, one shard in memory at a
   time); the copy is fsynced and closed, then renamed over the original, and only then
   are the shards deleted. A write that fails (a full disk, say) closes the copy without
   another write, deletes it, and leaves the original and every shard as they were.

Killed at any moment, the directory holds the last consolidated file plus whole shards.
The next run counts both as done (a shard whose samples are already in the file is a
leftover of step 2 and is dropped), records the rest with the same batch boundaries,
and consolidates: the result is identical to an uninterrupted run. The settings file (written
atomically before the first shard) keeps the settings, so a mismatched rerun is refused
even before anything was consolidated.

Nothing in the journal is trusted as it is found. A shard is named ``<start>.npz`` with nine
digits; any other ``.npz`` in a capability's folder of the journal is refused in one line (it may be a
renamed shard, and guessing would drop a batch or mix in another run's), while files of other
kinds are left alone. A shard is read with :func:`numpy.load`'s rules and more: no pickled
(object) arrays, every member's claimed shape held by its bytes before anything is allocated,
the arrays a batch needs with the shapes and types it needs; a damaged zip or a wrong member
is one line naming the shard and saying to delete it (its batch is then recorded again).
A shard also carries a seal: the sha256 of its members and of the run's binding settings
(``run.json``). On resume a whole shard whose seal does not match (changed since it was recorded,
recorded under other settings, or written by an older toolkit) is removed with one ``warning:`` line,
and its batch is recorded again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import zipfile
import zlib
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import sync_folder, write_atomic
from core.errors import ProbeError
from core.records import to_json
from core.run_dir import RunDir
from probes.samples import SampleColumns
from probes.settings import COMPAT_KEYS, RunSettings
from probes.store import MAX_INFLATION, MODELS, STORED_GROUPS, RunWriter, read_file_settings

_SHARD_TEXT = ("tasks", "prompts")
_SHARD_INTS = ("sample_ids", "prompt_lengths")
SEAL = "seal"  # [settings digest, content digest]


@dataclass(frozen=True)
class Shard:
    """One recorded batch: its samples and {(model, hook): [B, layers, width]} in the store dtype."""

    capability: str
    start: int
    samples: SampleColumns
    activations: dict[tuple[str, str], np.ndarray]


def write_shard(run_dir: Path, shard: Shard, settings: str | None = None) -> Path:
    """Write ``shard`` into the journal, sealed; ``settings``: the run's :func:`settings_digest`, read from
    ``run.json`` when not given (a recorder passes it, computed once per run)."""
    samples = shard.samples
    arrays: dict[str, np.ndarray] = {
        "sample_ids": samples.sample_ids,
        "tasks": np.asarray(samples.tasks, dtype=str),
        "prompt_lengths": samples.prompt_lengths,
        "prompts": np.asarray(samples.prompts, dtype=str),
    }
    for (model, hook), values in shard.activations.items():
        arrays[f"act__{model}__{hook}"] = values
    settings = settings_digest(run_dir) if settings is None else settings
    arrays[SEAL] = np.asarray([settings, content_digest(arrays)])
    path = RunDir(run_dir).shard(shard.capability, shard.start)
    write_atomic(path, lambda handle: np.savez(handle, **arrays))  # type: ignore[arg-type]  # stub: **arrays as allow_pickle
    return path


def read_shard(path: Path, capability: str) -> Shard:
    """One shard, every member checked (see the module doc); a fault is one line naming the shard."""
    arrays = _shard_arrays(path)
    acts = {(model, hook): values for (model, hook), values in _activation_members(arrays, path).items()}
    samples = SampleColumns(
        arrays["sample_ids"],
        [str(t) for t in arrays["tasks"]],
        arrays["prompt_lengths"],
        [str(p) for p in arrays["prompts"]],
    )
    return Shard(capability, int(path.stem), samples, acts)


def settings_digest(run_dir: Path) -> str:
    """The sha256 of the settings in ``run.json`` that bind a run (:data:`probes.settings.COMPAT_KEYS`); "" when
    there is no settings file."""
    existing = RunDir(run_dir).read_settings_file()
    if existing is None:
        return ""
    settings = to_json(RunSettings.read(existing["settings"], str(RunDir(run_dir).settings_file)))
    body = json.dumps({key: settings.get(key) for key in COMPAT_KEYS}, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def content_digest(arrays: dict[str, np.ndarray]) -> str:
    """The sha256 of every member but the seal: names, types, shapes and bytes."""
    digest = hashlib.sha256()
    for name in sorted(n for n in arrays if n != SEAL):
        values = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


def seal_fault(path: Path, settings: str) -> str | None:
    """Why a whole, well-formed shard is not this run's batch as it was recorded (None: it is): no checksum (an
    older toolkit's shard), recorded under other settings (``settings``: :func:`settings_digest`), or changed since."""
    arrays = _shard_arrays(path)
    seal = arrays.get(SEAL)
    if seal is None:
        return "it carries no checksum (an older toolkit's shard)"
    if str(seal[0]) != settings:
        return "it was recorded under other settings"
    if str(seal[1]) != content_digest(arrays):
        return "it changed since it was recorded (its checksum does not match)"
    return None


def check_shard(path: Path, layers: int | None = None, hooks: set[str] | None = None) -> np.ndarray:
    """A shard's sample ids, after checking its members' names, types and claimed sizes (no activations are read).

    ``layers``/``hooks``: what the run records, when known; a shard of other shapes is refused.
    """
    headers = _shard_headers(path)
    _check_shard_members(headers, path, layers, hooks)
    return _shard_arrays(path, only=("sample_ids",))["sample_ids"].astype(np.int64)


def shard_sample_ids(path: Path) -> np.ndarray:
    return check_shard(path)


def _shard_fault(path: Path, what: str) -> ProbeError:
    return ProbeError(f"{path}: {what}; delete this shard and rerun the same command: its batch is recorded again")


def _shard_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each member's (shape, dtype) from its .npy header; the bytes it claims are checked against those it holds."""
    size = path.stat().st_size
    headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                headers[_member_name(info, path)] = _member_header(archive, info, size, path)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise _shard_fault(path, f"not a readable shard ({type(exc).__name__}: {str(exc)[:80]})") from None
    return headers


def _member_name(info: zipfile.ZipInfo, path: Path) -> str:
    if not info.filename.endswith(".npy") or "/" in info.filename:
        raise _shard_fault(path, f"member {info.filename[:60]!r} is not an array")
    return info.filename[:-4]


def _member_header(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, path: Path
) -> tuple[tuple[int, ...], np.dtype]:
    if info.compress_size > size or info.file_size > MAX_INFLATION * max(info.compress_size, 1):
        raise _shard_fault(path, f"member {info.filename!r} claims {info.file_size:,} bytes, more than the file holds")
    with archive.open(info) as handle:
        version = np.lib.format.read_magic(handle)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(handle)
    if dtype.hasobject:
        raise _shard_fault(
            path, f"member {info.filename!r} holds Python objects (a pickle); shards hold only numbers and text"
        )
    if math.prod(shape) * dtype.itemsize > info.file_size:
        raise _shard_fault(path, f"member {info.filename!r} claims shape {shape} but holds {info.file_size:,} bytes")
    return tuple(shape), dtype


def _check_shard_members(
    headers: dict[str, tuple[tuple[int, ...], np.dtype]], path: Path, layers: int | None, hooks: set[str] | None
) -> None:
    missing = [name for name in (*_SHARD_INTS, *_SHARD_TEXT) if name not in headers]
    if missing:
        raise _shard_fault(
            path,
            f"no {missing[0]!r} array; expected sample_ids, tasks, prompt_lengths, prompts and act__<model>__<hook>",
        )
    rows = headers["sample_ids"][0][:1]
    for name, (shape, dtype) in headers.items():
        expected = _member_rule(name, dtype, hooks)
        if expected:
            raise _shard_fault(path, f"member {name!r} holds {dtype} {shape}; expected {expected}")
        if name == SEAL:
            if shape != (2,):
                raise _shard_fault(path, f"member {name!r} has shape {shape}; expected two checksums")
            continue
        if len(shape) != (3 if name.startswith("act__") else 1) or shape[:1] != rows or not rows or rows[0] < 1:
            raise _shard_fault(
                path,
                f"member {name!r} has shape {shape}; expected {rows[0] if rows else 'N'} rows "
                f"{'of (layers, width)' if name.startswith('act__') else ''}".rstrip(),
            )
        if layers is not None and name.startswith("act__") and shape[1] != layers:
            raise _shard_fault(path, f"member {name!r} holds {shape[1]} layers; the run records {layers}")


def _member_rule(name: str, dtype: np.dtype, hooks: set[str] | None) -> str:
    """What member ``name`` must be, when its dtype or name is wrong; '' when it is right."""
    if name in _SHARD_INTS:
        return "" if dtype.kind in "iu" else "integers"
    if name in _SHARD_TEXT or name == SEAL:
        return "" if dtype.kind == "U" else "text"
    parts = name.split("__")
    if (
        len(parts) != 3
        or parts[0] != "act"
        or parts[1] not in STORED_GROUPS
        or (hooks is not None and parts[2] not in hooks)
    ):
        models = "|".join(STORED_GROUPS)
        return f"one of sample_ids, tasks, prompt_lengths, prompts, seal, act__<{models}>__<hook of this run>"
    return "" if dtype.kind == "f" else "floating-point activations"


def _shard_arrays(path: Path, only: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The checked members of a shard (all, or ``only`` these), read without pickles."""
    headers = _shard_headers(path)
    _check_shard_members(headers, path, None, None)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in headers if only is None or name in only}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        raise _shard_fault(path, f"a damaged member ({type(exc).__name__}: {str(exc)[:80]})") from None


def _activation_members(arrays: dict[str, np.ndarray], path: Path) -> dict[tuple[str, str], np.ndarray]:
    acts = {tuple(k.split("__")[1:3]): v for k, v in arrays.items() if k.startswith("act__")}
    hooks = {hook for _, hook in acts}
    unpaired = [f"{m}/{h}" for h in sorted(hooks) for m in MODELS if (m, h) not in acts]
    if not acts or unpaired:
        raise _shard_fault(
            path,
            f"no activations for {unpaired[0] if unpaired else 'any model'}; a shard holds both models' activations",
        )
    return acts  # type: ignore[return-value]  # keys act__<model>__<hook>__...: the slice is (model, hook)


def committed_ids(run_dir: Path, capability: str) -> np.ndarray:
    """Sample ids of a capability already in the consolidated file (rows complete for every dataset)."""
    if not RunDir(run_dir).activations.is_file():
        return np.zeros(0, dtype=np.int64)
    from probes.store import RunReader

    with RunReader(run_dir) as run:
        if capability not in run.capabilities():
            return np.zeros(0, dtype=np.int64)
        return run.samples(capability).sample_ids


@dataclass(frozen=True)
class ConsolidationPlan:
    """What goes into the file: settings (created once) and per-model provenance."""

    settings: dict[str, Any]
    model_info: dict[str, dict[str, Any]]
    layers: list[int]
    tl_names: dict[str, str]
    toolkit_version: str
    provenance: dict[str, Any]


def consolidate(run_dir: Path, capabilities: list[str], plan: ConsolidationPlan) -> dict[str, int]:
    """Append every pending shard to a copy of the run's HDF5 file and swap it in atomically.

    Returns rows appended per capability. Shards whose samples are already in the file are
    dropped without appending (leftovers of a consolidation killed after its rename).

    The copy is written by a separate Python process (:func:`_write_staging`): when a write
    fails (a full disk), HDF5 keeps dirty chunks in its caches and retries them on every
    later close, and h5py has crashed the process doing so. The child reports the first
    error and exits without closing anything; this process only deletes the copy, so the
    original file and every shard stay as they were, and says how to resume.
    """
    run = RunDir(run_dir)
    pending = {cap: run.shards(cap) for cap in capabilities}
    target = run.activations
    if target.is_file() and not any(pending.values()):
        _drop_empty_journal(run)
        return dict.fromkeys(capabilities, 0)
    for paths in pending.values():
        for path in paths:
            check_shard(path, len(plan.layers), set(plan.tl_names))
    staging = run.consolidating
    try:
        appended = _write_staging_in_child(run_dir, capabilities, pending, plan)
        os.replace(RunDir(staging).activations, target)
        sync_folder(run_dir)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise write_failure(run_dir, exc) from None
    for paths in pending.values():
        for path in paths:
            path.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    _drop_empty_journal(run)
    return appended


def _drop_empty_journal(run: RunDir) -> None:
    """The journal exists only while it holds something: empty capability folders, then the journal, are removed
    (a folder holding a file of the user's stays)."""
    folders = [p for p in run.journal.iterdir() if p.is_dir()] if run.journal.is_dir() else []
    for folder in [*folders, run.journal]:
        with suppress(OSError):
            folder.rmdir()


def _write_staging_in_child(
    run_dir: Path, capabilities: list[str], pending: dict[str, list[Path]], plan: ConsolidationPlan
) -> dict[str, int]:
    """Run :func:`_write_staging` in ``python -m probes.journal``; its failure comes back as an OSError."""
    import subprocess
    import sys

    job = {
        "run_dir": str(run_dir),
        "capabilities": capabilities,
        "pending": {c: [str(p) for p in ps] for c, ps in pending.items()},
        "plan": asdict(plan),
    }
    done = subprocess.run(
        [sys.executable, "-m", "probes.journal"], input=json.dumps(job), capture_output=True, text=True
    )
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if done.returncode == 0 and "appended" in report:
        return {str(cap): int(n) for cap, n in report["appended"].items()}
    if "refused" in report:
        raise ProbeError(report["refused"])
    if "error" in report:
        raise OSError(report.get("errno"), report["error"])
    number = _errno_in(done.stderr)  # it crashed before reporting: HDF5's messages still name the errno
    if number:
        raise OSError(number, os.strerror(number))
    how = f"stopped by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    raise OSError(None, f"the HDF5 writer process failed, {how}")


def _write_staging(
    run_dir: Path, capabilities: list[str], pending: dict[str, list[Path]], plan: ConsolidationPlan
) -> dict[str, int]:
    """The new file, complete, fsynced and closed, beside the old one (in the child process)."""
    staging, target = RunDir(run_dir).consolidating, RunDir(run_dir).activations
    new = RunDir(staging).activations
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    if target.is_file():
        shutil.copyfile(target, new)
    appended = dict.fromkeys(capabilities, 0)
    # no `with`: a failed write must not be retried on close
    writer = RunWriter(staging, plan.settings, toolkit_version=plan.toolkit_version)
    writer.file.attrs["provenance"] = json.dumps(
        _with_history(writer.file.attrs.get("provenance"), plan.provenance), sort_keys=True
    )
    # base only in a run recorded with --base; a local group's entry says which models made it (probes.recording)
    for model in (m for m in STORED_GROUPS if m in plan.model_info):
        writer.set_model_info(model, plan.model_info[model])
    for cap in capabilities:
        appended[cap] = _append_capability(writer, cap, pending[cap], plan)
    writer.close()
    with new.open("rb+") as handle:
        os.fsync(handle.fileno())
    return appended


def _errno_in(text: str) -> int | None:
    """>>> _errno_in("file write failed: ..., errno = 28, error message = 'No space left on device'")
    28
    """
    import re

    found = re.search(r"errno = (\d+)", text)
    return int(found.group(1)) if found else None


def _child_main() -> None:
    """``python -m probes.journal``: a consolidation job on stdin, one JSON line on stdout; no cleanup on failure."""
    job = json.loads(sys.stdin.read())
    try:
        appended = _write_staging(
            Path(job["run_dir"]),
            job["capabilities"],
            {c: [Path(p) for p in ps] for c, ps in job["pending"].items()},
            ConsolidationPlan(**job["plan"]),
        )
        report: dict[str, Any] = {"appended": appended}
    except ProbeError as exc:
        report = {"refused": str(exc)}
    except (OSError, RuntimeError) as exc:
        text = str(exc) or type(exc).__name__
        number = getattr(exc, "errno", None) or _errno_in(text)  # h5py's OSError names the errno only in its text
        report = {"errno": number, "error": os.strerror(number) if number else text.splitlines()[0][:300]}
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    os._exit(0 if "appended" in report else 3)


def write_failure(run_dir: Path, exc: OSError) -> ProbeError:
    """A failed write (disk full, read-only, no permission) as one line: what is kept, and how to resume."""
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc)).splitlines()[0]
    run = RunDir(run_dir)
    kept = f"{run.shard_count()} recorded batches are kept in {run.journal}"
    kept += f" and {run.activations} is unchanged" if run.activations.is_file() else ""
    return ProbeError(
        f"{run_dir}: writing failed ({reason}); {kept}; free space (or fix permissions) and rerun the same "
        "command to resume"
    )


def _with_history(previous: str | None, call: dict[str, Any]) -> dict[str, Any]:
    """This call's provenance, with ``calls``: one entry per call that added rows (batch limits, device, counts)."""
    earlier = json.loads(previous) if previous else {}
    history = earlier.get("calls", [])
    return {**call, "calls": [*history, {k: v for k, v in call.items() if k != "versions"}]}


def _append_capability(writer: RunWriter, capability: str, shards: list[Path], plan: ConsolidationPlan) -> int:
    existing = writer.file.get(f"samples/{capability}/sample_ids")
    done = set(np.asarray(existing[:], dtype=np.int64).tolist()) if existing is not None else set()
    appended = 0
    for path in shards:
        shard = read_shard(path, capability)
        keep = np.array([int(i) not in done for i in shard.samples.sample_ids], dtype=bool)
        if not keep.any():
            continue
        idx = np.flatnonzero(keep)
        new = shard.samples.take(idx)
        writer.append_samples(capability, new.sample_ids, new.tasks, new.prompt_lengths, new.prompts)
        for (model, hook), values in sorted(shard.activations.items()):
            writer.append_activations(model, capability, hook, values[idx], plan.layers, plan.tl_names[hook])
        done.update(new.sample_ids.tolist())
        appended += len(idx)
    return appended


def h5_settings(run_dir: Path) -> dict[str, Any] | None:
    """The settings of the consolidated file, read and checked as :class:`probes.store.RunReader` does."""
    path = RunDir(run_dir).activations
    if not path.is_file():
        return None
    settings: dict[str, Any] = to_json(read_file_settings(path))
    return settings


if __name__ == "__main__":
    _child_main()
