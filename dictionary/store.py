"""The activation store: both models' activations at one layer and hook, per token, in fsynced shards.

A folder (``OUT/store`` by default)::

    store.json            what binds the store: the pair's weights and tokenizer fingerprints (core.provenance),
                          layer, hook, dtype, context, the text's digest and mix; written before the first shard
    shards/000000.npz     one shard per plan step: ``sft`` [n, d] and ``diff`` (dpo − sft, computed in float32
                          before rounding) [n, d] float16, the token ids, each token's sequence and position in it,
                          the held-out flag, and a seal (the store's digest and the content's)

Storing SFT and the *difference* keeps the difference exact to float16's relative precision (about 1e-3 of itself),
where two rounded activations would lose a difference that is small against them; DPO is ``sft + diff``.

A shard is written to a temporary name, fsynced and renamed (:func:`core.atomic.write_atomic`), so a Ctrl-C or a
``kill -9`` loses at most the shard being written; the next harvest into the same store skips every sealed shard and
writes the rest. A store made for another pair, layer, hook, text or dtype is refused in one line.

Example:
    >>> import tempfile
    >>> store = Store(Path(tempfile.mkdtemp()) / "store")
    >>> binding = {"sft_weights_sha256": "a", "layer": 3}
    >>> store.bind(binding, {"tokens": 10})
    >>> store.bind({"sft_weights_sha256": "b", "layer": 3}, {})
    Traceback (most recent call last):
    core.errors.ProbeError: .../store was harvested for another pair or setting (sft_weights_sha256: a, not b); ...
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import write_atomic
from core.errors import ProbeError
from core.run_dir import DictionaryDir
from probes.journal import SEAL, content_digest

FORMAT = 1


@dataclass(frozen=True)
class ShardData:
    """One shard's arrays."""

    sft: np.ndarray  # [n, d] float16
    diff: np.ndarray  # [n, d] float16: dpo − sft
    tokens: np.ndarray  # [n] int32: the token at each activation
    sequence: np.ndarray  # [n] int32: the plan index of its sequence
    position: np.ndarray  # [n] int32: its position in that sequence
    held_out: np.ndarray  # [n] bool

    def models(self) -> tuple[np.ndarray, np.ndarray]:
        """(sft, dpo) in float32."""
        sft = self.sft.astype(np.float32)
        return sft, sft + self.diff.astype(np.float32)


class Store:
    """The store folder (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.manifest = self.root / DictionaryDir(".").store_manifest.name
        self.shards = self.root / "shards"

    def shard(self, index: int) -> Path:
        return self.shards / f"{index:06d}.npz"

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest.is_file():
            return None
        try:
            body = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ProbeError(
                f"{self.manifest}: not a store manifest ({type(exc).__name__}); delete the store"
            ) from None
        if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("binding"), dict):
            raise ProbeError(
                f"{self.manifest}: not a store manifest of this toolkit (format {FORMAT}); delete the store"
            )
        return body

    def bind(self, binding: dict[str, Any], plan: dict[str, Any]) -> None:
        """Write the manifest, or check the existing one binds the same (one line naming the first difference)."""
        existing = self.read_manifest()
        if existing is not None:
            old = existing["binding"]
            differ = [k for k in sorted(set(old) | set(binding)) if old.get(k) != binding.get(k)]
            if differ:
                key = differ[0]
                raise ProbeError(
                    f"{self.root} was harvested for another pair or setting ({key}: {old.get(key)}, not "
                    f"{binding.get(key)}); give another --out, or delete the store to harvest anew"
                )
            return
        self.root.mkdir(parents=True, exist_ok=True)
        body = {"format": FORMAT, "binding": binding, "plan": plan}
        write_atomic(self.manifest, json.dumps(body, indent=1, sort_keys=True))

    def digest(self) -> str:
        manifest = self.read_manifest()
        if manifest is None:
            return ""
        return hashlib.sha256(json.dumps(manifest["binding"], sort_keys=True).encode()).hexdigest()

    def write(self, index: int, data: ShardData) -> Path:
        arrays = {
            "sft": data.sft,
            "diff": data.diff,
            "tokens": data.tokens,
            "sequence": data.sequence,
            "position": data.position,
            "held_out": data.held_out,
        }
        arrays[SEAL] = np.asarray([self.digest(), content_digest(arrays)])
        path = self.shard(index)
        write_atomic(path, lambda handle: np.savez(handle, **arrays))  # type: ignore[arg-type]  # numpy's stub
        return path

    def sealed(self, index: int) -> bool:
        """Whether shard ``index`` is whole and this store's; a damaged or foreign one is removed (rewritten)."""
        path = self.shard(index)
        if not path.is_file():
            return False
        try:
            arrays = _load(path)
            seal = arrays.pop(SEAL)
            whole = str(seal[0]) == self.digest() and str(seal[1]) == content_digest(arrays)
        except (OSError, ValueError, KeyError, EOFError):
            whole = False
        if not whole:
            path.unlink()
        return whole

    def remove_temporaries(self) -> None:
        """Temporary shards a killed harvest left (never renamed into place)."""
        if self.shards.is_dir():
            for leftover in self.shards.glob(".*.tmp"):
                leftover.unlink(missing_ok=True)

    def read(self, index: int) -> ShardData:
        path = self.shard(index)
        try:
            arrays = _load(path)
        except (OSError, ValueError, EOFError) as exc:
            raise ProbeError(
                f"{path}: a damaged shard ({type(exc).__name__}); delete it and rerun to harvest it again"
            ) from None
        try:
            names = ShardData.__dataclass_fields__
            return ShardData(**{name: arrays[name] for name in names})
        except KeyError as exc:
            raise ProbeError(f"{path}: a shard without {exc}; delete it and rerun to harvest it again") from None

    def count(self) -> int:
        return len(list(self.shards.glob("*.npz"))) if self.shards.is_dir() else 0

    def iter_shards(self, indices: list[int]) -> Iterator[ShardData]:
        for index in indices:
            yield self.read(index)


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
