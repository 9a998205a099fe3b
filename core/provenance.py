"""Content hashes and versions that tie every artefact to exactly the bytes it came from.

A model directory's ``provenance.json``, a run's settings and a neuron set all name
weights by one fingerprint, :func:`weights_sha256`, so a model can be matched with every
run that recorded it and every neuron set ranked on it, whatever the paths were
(directories get moved, checkpoints get overwritten). The fingerprint hashes *tensors*
(name, dtype, shape, bytes; sorted by name), not files: two saves of identical weights
can differ in their bytes (safetensors header order, metadata), and equal seeds must give
equal fingerprints. Runs also record hashes of the tokenizer vocabulary and special tokens,
of the chat template, and of the data file.

A file that a later command reads back instead of computing it again (kept greedy responses, kept A/B batches,
an attribution cache, a recording's local groups) says who made it with :class:`MadeBy`: these two fingerprints,
under the names ``weights_sha256`` and ``tokenizer_sha256``. Its reader compares them with the model it has and
refuses (or, for a resume's own cache, remakes) one made by another, naming both.

Hashing a 16 GB checkpoint takes a while, so fingerprints are cached per (real path,
size, mtime) of the weight files in ``$PROBE_HOME/file_hashes.json`` (see :mod:`core.home`);
a changed file is re-hashed.

Example:
    >>> text_sha256({"b": 1, "a": [2, 3]}) == text_sha256({"a": [2, 3], "b": 1})   # canonical JSON: key order ignored
    True
    >>> text_sha256("abc")[:12]
    'ba7816bf8f01'
    >>> weights_sha256("runs/../models/sft")          # doctest: +SKIP
    '3f1c...'
    >>> MadeBy("a" * 64, "c" * 64).differences(MadeBy("b" * 64, "c" * 64), "the sft model")
    'weights_sha256 aaaaaaaaaaaa… (the sft model: bbbbbbbbbbbb…)'
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_BLOCK = 1 << 22


def _cache_file() -> Path:
    from core.home import probe_home

    return probe_home() / "file_hashes.json"


def _load_cache() -> dict[str, Any]:
    try:
        cache: dict[str, Any] = json.loads(_cache_file().read_text())
        return cache
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict[str, Any]) -> None:
    from core.atomic import write_atomic

    with suppress(OSError):  # a cache we cannot write only costs time
        write_atomic(_cache_file(), json.dumps(cache), durable=False)


def file_sha256(path: str | os.PathLike[str], cache: dict[str, Any] | None = None) -> str:
    """sha256 of a file's bytes; uses ``cache`` keyed by real path, size and mtime when given."""
    p = Path(path).resolve()
    stat = p.stat()
    key = f"{p}|{stat.st_size}|{stat.st_mtime_ns}"
    if cache is not None and key in cache:
        return str(cache[key])
    digest = hashlib.sha256()
    with p.open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    value = digest.hexdigest()
    if cache is not None:
        cache[key] = value
    return value


def _safetensors_records(path: Path) -> Iterator[bytes]:
    """Per tensor, sorted by name: ``name:DTYPE:shape`` then its raw bytes, read straight from the file.

    Parses the safetensors header itself, so any dtype works (bfloat16 too, which numpy lacks)
    and no tensor is converted.
    """
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
        for name in sorted(k for k in header if k != "__metadata__"):
            info = header[name]
            start, end = info["data_offsets"]
            handle.seek(8 + size + start)
            yield f"{name}:{info['dtype']}:{info['shape']}".encode()
            yield from _blocks(handle, end - start)


def _blocks(handle: Any, n_bytes: int | None = None, block: int = 1 << 20) -> Iterator[bytes]:
    """The next ``n_bytes`` of ``handle`` (all of it when None) in blocks of at most ``block`` bytes."""
    while n_bytes is None or n_bytes > 0:
        chunk = handle.read(block if n_bytes is None else min(block, n_bytes))
        if not chunk:
            return
        if n_bytes is not None:
            n_bytes -= len(chunk)
        yield chunk


def _hashed_files(model_dir: Path) -> list[Path]:
    """The files the fingerprint reads: every ``*.safetensors``, then every ``pytorch_model*.bin`` (not
    ``training_args.bin``, which holds paths). Unlike :func:`core.models.weight_files` (what transformers loads)
    it follows no index and accepts a directory without weights: a fingerprint describes, it does not check."""
    if not model_dir.is_dir():  # the fingerprint of no directory would look like one of an empty directory
        raise FileNotFoundError(errno.ENOENT, "no model directory", str(model_dir))
    return sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("pytorch_model*.bin"))


def _tensor_digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        if path.suffix == ".safetensors":
            for record in _safetensors_records(path):
                digest.update(record)
            continue
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in _blocks(handle):
                digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(model_dir: str | os.PathLike[str]) -> str:
    """The one weights fingerprint: SHA-256 over the directory's tensors (see the module docstring), cached."""
    directory = Path(model_dir).resolve()
    files = _hashed_files(directory)
    stats = [f.stat() for f in files]
    key = "tensors|" + "|".join(f"{f}:{s.st_size}:{s.st_mtime_ns}" for f, s in zip(files, stats, strict=True))
    cache = _load_cache()
    if key not in cache:
        cache[key] = _tensor_digest(files)
        _save_cache(cache)
    return str(cache[key])


def text_sha256(value: Any) -> str:
    """sha256 of a string, or of the canonical JSON of anything else."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """What must match for two tokenizers to turn the same text into the same ids."""
    return {
        "vocab": sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]),
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def tokenizer_sha256(tokenizer: PreTrainedTokenizerBase) -> str:
    return text_sha256(tokenizer_fingerprint(tokenizer))


def chat_template_sha256(tokenizer: PreTrainedTokenizerBase) -> str:
    return text_sha256(tokenizer.chat_template or "")


def short_sha(value: str) -> str:
    """A fingerprint as messages show it: its first 12 hex digits."""
    return f"{value[:12]}…"


@dataclass(frozen=True)
class MadeBy:
    """Who made a file that is read back: the model's :func:`weights_sha256` and its :func:`tokenizer_sha256`
    (module doc). Stored as the fields :attr:`FIELDS` of a JSON object or the attributes of an HDF5 object."""

    weights_sha256: str
    tokenizer_sha256: str

    FIELDS: ClassVar[tuple[str, str]] = ("weights_sha256", "tokenizer_sha256")

    @classmethod
    def of(cls, model_dir: str | os.PathLike[str], tokenizer: PreTrainedTokenizerBase) -> MadeBy:
        return cls(weights_sha256(model_dir), tokenizer_sha256(tokenizer))

    def fields(self) -> dict[str, str]:
        return {"weights_sha256": self.weights_sha256, "tokenizer_sha256": self.tokenizer_sha256}

    @classmethod
    def read(cls, body: Mapping[str, Any]) -> MadeBy | str | None:
        """The fingerprints ``body`` carries; None when it carries neither (written before them); a string saying
        what is wrong when they are not two sha256 digests."""
        values = [body.get(name) for name in cls.FIELDS]
        if all(v is None for v in values):
            return None
        for name, value in zip(cls.FIELDS, values, strict=True):
            if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
                return f"'{name}' is {str(value)[:20]!r}; expected a sha256 (64 hex digits)"
        return cls(str(values[0]), str(values[1]))

    def differences(self, expected: MadeBy, whose: str) -> str | None:
        """The fingerprints that differ from ``expected`` (the ones of ``whose``, e.g. "this run's dpo model"),
        each with both values; None when both match."""
        said = [
            f"{name} {short_sha(mine)} ({whose}: {short_sha(theirs)})"
            for name, mine, theirs in zip(self.FIELDS, self.values(), expected.values(), strict=True)
            if mine != theirs
        ]
        return "; ".join(said) or None

    def values(self) -> tuple[str, str]:
        return self.weights_sha256, self.tokenizer_sha256


def models_made_by(model_fields: Mapping[str, Mapping[str, str]]) -> dict[str, MadeBy]:
    """``{model: MadeBy}`` from ``{model: MadeBy.fields()}``, as a file of a pair's models keeps them."""
    return {model: MadeBy(**fields) for model, fields in model_fields.items()}


def pair_differences(kept: Any, ours: Mapping[str, MadeBy], whose: str) -> list[str]:
    """How ``kept`` (``{model: MadeBy fields}`` read back from a file) differs from ``ours``: one phrase per model
    whose fingerprints are missing or differ, naming both (``whose``: e.g. "this run's", before the model's name).

    >>> ours = {"sft": MadeBy("a" * 64, "c" * 64)}
    >>> pair_differences({"sft": {"weights_sha256": "b" * 64, "tokenizer_sha256": "c" * 64}}, ours, "the run's")
    ["sft model: weights_sha256 bbbbbbbbbbbb… (the run's sft model: aaaaaaaaaaaa…)"]
    """
    said = []
    for model, expected in ours.items():
        entry = kept.get(model) if isinstance(kept, dict) else None
        found = MadeBy.read(entry if isinstance(entry, dict) else {})
        if not isinstance(found, MadeBy):
            said.append(f"{model} model: {found or 'no fingerprint'}")
        elif differ := found.differences(expected, f"{whose} {model} model"):
            said.append(f"{model} model: {differ}")
    return said


LIBRARIES = (
    "rolemrc-probe",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "tokenizers",
    "transformer-lens",
    "nnsight",
    "h5py",
    "numpy",
    "gguf",
    "deepspeed",
)


def library_versions() -> dict[str, str]:
    """Python and the versions of the libraries that shape results (absent ones are left out)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def device_info() -> dict[str, object]:
    import torch

    info: dict[str, object] = {"cuda": torch.cuda.is_available(), "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
    return info


def toolkit_version() -> str:
    return library_versions().get("rolemrc-probe", "unknown")
