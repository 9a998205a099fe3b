"""Content hashes that tie a run to exactly the weights, tokenizer and data it saw.

A run directory is only comparable with another (or resumable) if it was made from the
same bytes, whatever the paths were: directories get moved, checkpoints get
overwritten. So every run records sha256 hashes of the weight files, of the tokenizer
vocabulary and special tokens, of the chat template, and of the data file.

Hashing a 16 GB checkpoint takes a while, so file hashes are cached per
(real path, size, mtime) in ``$PROBE_HOME/file_hashes.json`` (see :mod:`training.home`);
a changed file is re-hashed.

Example:
    >>> weights_sha256("runs/../models/sft")          # doctest: +SKIP
    '3f1c...'
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth")
_BLOCK = 1 << 22


def _cache_file() -> Path:
    from training.home import probe_home

    return probe_home() / "file_hashes.json"


def _load_cache() -> dict[str, Any]:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict[str, Any]) -> None:
    target = _cache_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".hashes.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump(cache, handle)
        os.replace(tmp, target)
    except OSError:
        pass  # a cache we cannot write only costs time


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


def weight_files(model_dir: str | os.PathLike[str]) -> list[Path]:
    return sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def weights_sha256(model_dir: str | os.PathLike[str]) -> str:
    """One sha256 over ``name:sha256`` lines of the weight files and config.json, in name order."""
    cache = _load_cache()
    files = weight_files(model_dir) + [Path(model_dir) / "config.json"]
    lines = [f"{f.name}:{file_sha256(f, cache)}" for f in files if f.is_file()]
    _save_cache(cache)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def text_sha256(value: Any) -> str:
    """sha256 of a string, or of the canonical JSON of anything else."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, Any]:
    """What must match for two tokenizers to turn the same text into the same ids."""
    return {
        "vocab": sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]),
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def tokenizer_sha256(tokenizer: Any) -> str:
    return text_sha256(tokenizer_fingerprint(tokenizer))


def chat_template_sha256(tokenizer: Any) -> str:
    return text_sha256(tokenizer.chat_template or "")


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for name in ("rolemrc-probe", "torch", "transformers", "transformer-lens", "nnsight", "h5py", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def toolkit_version() -> str:
    return library_versions()["rolemrc-probe"]
