"""``provenance.json``: what produced a model directory, so a probe result can be traced back.

Written last into every SFT/DPO output: the data files and their SHA-256, the seeds, the
fully resolved run configuration, the parent model (its path and weight hashes), the
library versions and device, and every logged loss with the final one. A reader of an
activation store can then tell whether two runs used the same models and data.

Example:
    >>> write_provenance(out, stage="sft", config=cfg.to_dict(), recorder=losses, ...)   # doctest: +SKIP
    >>> read_provenance(out)["final_loss"]                                                # doctest: +SKIP
    0.41
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FILE_NAME = "provenance.json"
LIBRARIES = ("torch", "transformers", "trl", "accelerate", "datasets", "tokenizers", "deepspeed", "rolemrc-probe")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


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


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over a model directory's tensors (name, dtype, shape, bytes; sorted by name).

    Hashes tensors, not files: two saves of identical weights can differ in their bytes
    (safetensors header order, metadata), and equal seeds must give equal digests.
    """
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        for record in _safetensors_records(path):
            digest.update(record)
    for path in sorted(Path(model_dir).glob("pytorch_model*.bin")):  # not training_args.bin (it holds paths)
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in _blocks(handle):
                digest.update(chunk)
    return digest.hexdigest()


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"cuda": torch.cuda.is_available(), "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
    return info


def write_provenance(out_dir: Path, *, stage: str, config: dict[str, Any], data: dict[str, Any],
                     parent: dict[str, Any], recorder: Any, extra: dict[str, Any] | None = None) -> Path:
    record = {
        "stage": stage,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config,
        "seeds": {"seed": config.get("seed"), "data_seed": config.get("seed")},
        "data": data,
        "parent": parent,
        "versions": library_versions(),
        "device": device_info(),
        "losses": recorder.records,
        "final_loss": recorder.final_loss,
        "train_summary": recorder.summary,
        **(extra or {}),
    }
    path = Path(out_dir) / FILE_NAME
    path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    return path


def read_provenance(model_dir: Path) -> dict[str, Any] | None:
    path = Path(model_dir) / FILE_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
