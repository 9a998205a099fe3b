"""``provenance.json``: what produced a model directory, as one typed, versioned record.

Written last into every SFT/DPO output: the data files and their SHA-256, the seeds, the
fully resolved run configuration, the model's own weights fingerprint and its parent's
(:func:`core.provenance.weights_sha256`, the same fingerprint a run's settings store), the
library versions and device, and every logged loss with the final one. A reader of an
activation store can then tell whether two runs used the same models and data.

The record is written and read by :mod:`core.records`; keys a writer added beyond the fields are
kept in ``extra``. Readers go through :meth:`ModelProvenance.read`: files written before the format
and version fields (version 1) have the same keys and open unchanged; another format or a newer
version is refused with one line.

Example:
    >>> record = ModelProvenance.read({"stage": "sft", "final_loss": 0.41, "trainer": "trl"})   # a version-1 file
    >>> record.final_loss, record.extra
    (0.41, {'trainer': 'trl'})
    >>> ModelProvenance.read({"format": FORMAT, "version": 3})
    Traceback (most recent call last):
    core.errors.ProbeError: provenance.json: provenance version 3, newer than this toolkit reads (2); update the toolkit
    >>> write_provenance(out, stage="sft", config=cfg.to_dict(), recorder=losses, ...)   # doctest: +SKIP
    >>> read_provenance(out).final_loss                                                   # doctest: +SKIP
    0.41
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from core.errors import ProbeError
from core.provenance import device_info, library_versions, weights_sha256
from core.records import MERGED, RecordError, from_json, to_json

if TYPE_CHECKING:
    from training.callbacks import LossRecorder

FILE_NAME = "provenance.json"
FORMAT = "rolemrc-probe/model-provenance"
VERSION = 2


@dataclass(frozen=True)
class ModelProvenance:
    """What produced one SFT or DPO model directory."""

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    stage: str = ""
    weights_sha256: str = ""
    created: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    parent: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    device: Any = None
    losses: list[dict[str, Any]] = field(default_factory=list)
    final_loss: float | None = None
    train_summary: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1
    resumed_from_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, metadata=MERGED)  # keys a writer added beyond these

    def brief(self) -> dict[str, Any]:
        """What a child model's provenance repeats of its parent's."""
        return {
            "stage": self.stage,
            "data": self.data,
            "parent": self.parent,
            "final_loss": self.final_loss,
            "created": self.created,
        }

    @classmethod
    def read(cls, body: Any, where: str = FILE_NAME) -> ModelProvenance:
        """``body`` as a record, after its format and version; a file this toolkit cannot read is one line."""
        if not isinstance(body, dict) or body.get("format", FORMAT) != FORMAT:
            raise ProbeError(f'{where}: not a model provenance record (expected "format": "{FORMAT}")')
        version = body.get("version", 1)
        if not isinstance(version, int) or version > VERSION:
            raise ProbeError(
                f"{where}: provenance version {version!r}, newer than this toolkit reads ({VERSION}); "
                "update the toolkit"
            )
        try:
            return from_json(cls, body)
        except RecordError as exc:
            raise ProbeError(f"{where}: malformed provenance record ({exc})") from None


def write_provenance(
    out_dir: Path,
    *,
    stage: str,
    config: dict[str, Any],
    data: dict[str, Any],
    parent: dict[str, Any],
    recorder: LossRecorder,
    extra: dict[str, Any] | None = None,
) -> Path:
    from core.atomic import write_atomic

    extra = dict(extra or {})
    record = ModelProvenance(
        stage=stage,
        weights_sha256=weights_sha256(out_dir),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        config=config,
        seeds={"seed": config.get("seed"), "data_seed": config.get("seed")},
        data=data,
        parent=parent,
        versions=library_versions(),
        device=device_info(),
        losses=recorder.records,
        final_loss=recorder.final_loss,
        train_summary=recorder.summary,
        world_size=int(extra.pop("world_size", 1) or 1),
        resumed_from_step=extra.pop("resumed_from_step", None),
        extra=extra,
    )
    path = Path(out_dir) / FILE_NAME
    write_atomic(path, json.dumps(to_json(record), indent=1, default=str))
    return path


def read_provenance(model_dir: Path) -> ModelProvenance | None:
    """The directory's record, or None when it has none (a base model)."""
    from core.inputs import read_json

    path = Path(model_dir) / FILE_NAME
    if not path.is_file():
        return None
    return ModelProvenance.read(read_json(path, "provenance record"), str(path))
