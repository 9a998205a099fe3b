"""Finished generation arms of one A/B run, kept on disk so that an interrupted run resumes.

An A/B evaluation is a baseline plus one generation pass per factor and per placebo set:
minutes to hours, most of it generating. What is kept is the unit that finishes: passes that
decode together in shared batches (:mod:`access.shared_generation`) keep each finished *batch of
prompts*, with every pass's tokens for it, as ``OUT/.arms/shared_<model>_<hash>_batch_<k>.json``;
a pass decoded alone (a patch, sampling, the nnsight backend) keeps itself whole as
``OUT/.arms/<arm>.json``. Each file is written under a temporary name, then renamed, so a file
there is always whole, and carries the sha256 of its content, its name and the fingerprint below
(:func:`sealed`), and who made it (:func:`made_by`: each model's weights fingerprint and the
tokenizer's, :class:`core.provenance.MadeBy`, and the row ids): a file changed since, or kept by another
run, arm, model or tokenizer, is not used; one ``warning:`` line names it (and both fingerprints, where
they differ) and it is generated again (the shared decoder also refuses a kept batch whose token ids the
model cannot emit). A rerun into the same ``--out`` with the same settings reads
those passes back instead of generating them again; greedy decoding and per-batch
seeded sampling make a generated arm a pure function of the settings, so the resumed
report equals an uninterrupted one. The directory carries the fingerprint of everything
the generations depend on (model weights by path, size and mtime; the data file's bytes;
the rows and neurons chosen; decoding, dtype, device, backend; placebo count and seed;
every model dir used, the patch source too; and who makes the arms, :func:`made_by`, also kept
readable as ``.arms/made_by``: a folder kept by another model or tokenizer is one ``warning:``
naming both fingerprints, then made again); each arm's file name carries the hash of its
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.generation import Generations
from core.atomic import write_atomic
from core.models import warn
from core.provenance import MadeBy, models_made_by, pair_differences, text_sha256
from core.run_dir import InterventionDir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_IRRELEVANT = ("out_dir", "judge", "judge_base_url", "judge_model", "n_bootstrap")
MADE_BY = "made_by"  # JSON in OUT/.arms: who makes the arms kept there (made_by), for people and for the warning


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


def made_by(
    model_dirs: Mapping[str, Path], tokenizer: PreTrainedTokenizerBase, row_ids: Sequence[int]
) -> dict[str, Any]:
    """Who makes an A/B run's kept arms, as each kept file carries it: per model of the pair (``model_dirs``) its
    :class:`core.provenance.MadeBy` fields, and the rows' indices in the data file."""
    from core.provenance import tokenizer_sha256, weights_sha256

    tokens = tokenizer_sha256(tokenizer)
    models = {model: MadeBy(weights_sha256(d), tokens).fields() for model, d in sorted(model_dirs.items())}
    return {"models": models, "rows": [int(r) for r in row_ids]}


def made_by_fault(kept: Any, ours: dict[str, Any]) -> str | None:
    """How ``kept`` (a :func:`made_by` read back) differs from ``ours``, both fingerprints named; None: it does
    not."""
    models = kept.get("models") if isinstance(kept, dict) else None
    said = pair_differences(models, models_made_by(ours["models"]), "this run's")
    rows = kept.get("rows") if isinstance(kept, dict) else None
    if rows != ours["rows"]:
        said.append(f"other rows ({len(rows) if isinstance(rows, list) else 'no'} kept, {len(ours['rows'])} here)")
    return "made by another model or tokenizer, or for other rows: " + "; ".join(said) if said else None


def file_name(arm: str) -> str:
    """A safe file name for an arm key ("patch dpo<-sft 1a2b..." -> "patch_dpo_-sft_1a2b....json")."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", arm) + ".json"


class ArmStore:
    """``OUT/.arms``: one JSON file per finished arm; inactive (keeps nothing) when ``out_dir`` is None.
    ``made_by`` (:func:`made_by`): who makes the arms, kept beside them and bound into ``key``."""

    def __init__(self, out_dir: str | Path | None, key: str, made_by: dict[str, Any] | None = None) -> None:
        self.root = InterventionDir(out_dir).arms if out_dir is not None else None
        self.made_by = made_by
        self.key = key if made_by is None else text_sha256([key, made_by])
        if self.root is not None and self._stamp() != self.key:
            self._say_who_made_it()
            shutil.rmtree(self.root, ignore_errors=True)

    def _stamp(self) -> str | None:
        try:
            return (self.root / "fingerprint").read_text(encoding="utf-8").strip() if self.root else None
        except OSError:
            return None

    def _say_who_made_it(self) -> None:
        """Before a folder kept under other settings is made again: one warning where another model, tokenizer or
        rows made it (other settings alone are the ordinary resume rule, and say nothing)."""
        if self.root is None or self.made_by is None or not any(self.root.glob("*.json")):
            return
        try:
            fault = made_by_fault(json.loads((self.root / MADE_BY).read_text(encoding="utf-8")), self.made_by)
        except (OSError, ValueError):
            fault = "kept without saying who made them (by an older toolkit)"
        if fault is not None:
            warn(f"{self.root}: its kept arms were {fault}; they are generated again")

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
        fault = _seal_fault(kept, self.key, name, self.made_by)
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
            if self.made_by is not None:
                write_atomic(self.root / MADE_BY, json.dumps(self.made_by))
            write_atomic(self.root / "fingerprint", self.key + "\n")
        kept = sealed(body, self.key, name, self.made_by)
        write_atomic(self.root / file_name(name), json.dumps(kept, ensure_ascii=False))

    def finished(self) -> list[str]:
        if self.root is None or not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json"))

    def clear(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def sealed(body: dict[str, Any], key: str, name: str, made_by: dict[str, Any] | None = None) -> dict[str, Any]:
    """``body`` as it is kept: with the fingerprint of the settings that made it, its name, who made it
    (:func:`made_by`, where known) and the sha256 of them all, so a file changed since, or kept by another run, arm
    or model, is told apart from a good one."""
    said = {"settings": key, "name": name} | ({"made_by": made_by} if made_by is not None else {})
    return {**said, "sha256": _digest(body, said), "body": body}


def _digest(body: Any, said: dict[str, Any]) -> str:
    text = json.dumps({**said, "body": body}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _seal_fault(kept: Any, key: str, name: str, made_by: dict[str, Any] | None = None) -> str | None:
    """Why a kept file cannot be used (None: it can)."""
    if isinstance(kept, str):
        return kept
    if not isinstance(kept, dict) or not isinstance(kept.get("body"), dict) or "sha256" not in kept:
        return "not a file this toolkit keeps (no checksum)"
    if made_by is not None and "made_by" in kept and (fault := made_by_fault(kept["made_by"], made_by)):
        return fault
    if kept.get("settings") != key or kept.get("name") != name:
        return "kept under other settings"
    said = {k: kept[k] for k in ("settings", "name", "made_by") if k in kept}
    if kept["sha256"] != _digest(kept["body"], said):
        return "changed since it was kept (its checksum does not match)"
    return None
