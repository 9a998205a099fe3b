"""Finished generation arms of one A/B run, kept on disk so that an interrupted run resumes.

An A/B evaluation is a baseline plus one generation pass per factor and per placebo set:
minutes to hours, most of it generating. What is kept is the unit that finishes: passes that
decode together in shared batches (:mod:`access.shared_generation`) keep each finished *batch of
prompts*, with every pass's tokens for it, as ``OUT/.arms/shared_<model>_<hash>_batch_<k>.json``;
a pass decoded alone (a patch, sampling, the nnsight backend) keeps itself whole as
``OUT/.arms/<arm>.json``. Each file is written under a temporary name, then renamed, so a file
there is always whole, and carries the sha256 of its content, its name and the fingerprint below
(:func:`sealed`): a file changed since, or kept by another run or arm, is not used; one
``warning:`` line names it and it is generated again (the shared decoder also refuses a kept
batch whose token ids the model cannot emit). A rerun into the same ``--out`` with the same settings reads
those passes back instead of generating them again; greedy decoding and per-batch
seeded sampling make a generated arm a pure function of the settings, so the resumed
report equals an uninterrupted one. The directory carries the fingerprint of everything
the generations depend on (model weights by path, size and mtime; the data file's bytes;
the rows and neurons chosen; decoding, dtype, device, backend; placebo count and seed;
every model dir used, the patch source too); each arm's file name carries the hash of its
edits' descriptions, so an arm is only ever read back for exactly the same edits;
arms written under another fingerprint are discarded, never reused. Judging and
statistics are recomputed from the texts, so a rerun may change the judge. The
directory is removed once the report is written.

Example:
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> _ = ArmStore(out, "settings-1").put("baseline", Generations([[5, 6]], ["Ahoy."], seconds=0.5))
    >>> ArmStore(out, "settings-1").get("baseline").texts, ArmStore(out, "settings-2").get("baseline")
    (['Ahoy.'], None)
    >>> store = ArmStore(Path("runs/ab"), fingerprint)                  # doctest: +SKIP
    >>> store.get("baseline") or store.put("baseline", generator.run())  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from access.generation import Generations
from core.atomic import write_atomic
from core.models import warn
from core.run_dir import InterventionDir

_IRRELEVANT = ("out_dir", "judge", "judge_base_url", "judge_model", "n_bootstrap")


def fingerprint(
    config: dict[str, Any], model_dirs: list[Path], data_file: Path, row_ids: list[int], units: list[tuple[int, int]]
) -> str:
    """A hash of everything an arm's generations depend on (each arm's own edits are in its name,
    see :func:`file_name`)."""
    from core.models import weight_files
    from core.provenance import file_sha256

    weights = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for d in model_dirs for p in weight_files(d)]
    body = {
        "config": {k: v for k, v in config.items() if k not in _IRRELEVANT},
        "weights": weights,
        "data": file_sha256(data_file),
        "rows": row_ids,
        "units": units,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def file_name(arm: str) -> str:
    """A safe file name for an arm key ("patch dpo<-sft 1a2b..." -> "patch_dpo_-sft_1a2b....json")."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", arm) + ".json"


class ArmStore:
    """``OUT/.arms``: one JSON file per finished arm; inactive (keeps nothing) when ``out_dir`` is None."""

    def __init__(self, out_dir: str | Path | None, key: str) -> None:
        self.root = InterventionDir(out_dir).arms if out_dir is not None else None
        self.key = key
        if self.root is not None and self._stamp() != key:
            shutil.rmtree(self.root, ignore_errors=True)

    def _stamp(self) -> str | None:
        try:
            return (self.root / "fingerprint").read_text(encoding="utf-8").strip() if self.root else None
        except OSError:
            return None

    def get(self, name: str) -> Generations | None:
        """The arm ``name`` if an earlier run finished it with the same fingerprint."""
        body = self.get_body(name)
        try:
            return (
                None
                if body is None
                else Generations(body["ids"], body["texts"], float(body["seconds"]), body.get("hook_stats"))
            )
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, name: str, generations: Generations) -> Generations:
        self.put_body(
            name,
            {
                "ids": generations.ids,
                "texts": generations.texts,
                "seconds": generations.seconds,
                "hook_stats": generations.hook_stats,
            },
        )
        return generations

    def get_body(self, name: str) -> dict[str, Any] | None:
        """The JSON object kept under ``name`` (an arm, or one batch of prompts decoded for every arm), if any.

        A file whose checksum, settings or name do not match (see :func:`sealed`) is not used: one ``warning:``
        line says so, and the caller makes it again."""
        if self.root is None or not (self.root / file_name(name)).is_file():
            return None
        path = self.root / file_name(name)
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            kept = f"unreadable ({type(exc).__name__})"
        fault = _seal_fault(kept, self.key, name)
        if fault is not None:
            warn(f"{path}: {fault}; it is generated again")
            return None
        body: dict[str, Any] = kept["body"]  # checked by _seal_fault
        return body

    def put_body(self, name: str, body: dict[str, Any]) -> None:
        if self.root is None:
            return
        if self._stamp() != self.key:
            self.root.mkdir(parents=True, exist_ok=True)
            write_atomic(self.root / "fingerprint", self.key + "\n")
        write_atomic(self.root / file_name(name), json.dumps(sealed(body, self.key, name), ensure_ascii=False))

    def finished(self) -> list[str]:
        if self.root is None or not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json"))

    def clear(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def sealed(body: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """``body`` as it is kept: with the fingerprint of the settings that made it, its name, and the sha256 of all
    three, so a file changed since, or kept by another run or arm, is told apart from a good one."""
    return {"settings": key, "name": name, "sha256": _digest(body, key, name), "body": body}


def _digest(body: Any, key: str, name: str) -> str:
    text = json.dumps({"settings": key, "name": name, "body": body}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _seal_fault(kept: Any, key: str, name: str) -> str | None:
    """Why a kept file cannot be used (None: it can)."""
    if isinstance(kept, str):
        return kept
    if not isinstance(kept, dict) or not isinstance(kept.get("body"), dict) or "sha256" not in kept:
        return "not a file this toolkit keeps (no checksum)"
    if kept.get("settings") != key or kept.get("name") != name:
        return "kept under other settings"
    if kept["sha256"] != _digest(kept["body"], key, name):
        return "changed since it was kept (its checksum does not match)"
    return None
