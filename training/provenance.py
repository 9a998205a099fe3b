"""``provenance.json``: what produced a model directory, so a probe result can be traced back.

Written last into every SFT/DPO output: the data files and their SHA-256, the seeds, the
fully resolved run configuration, the model's own weights fingerprint and its parent's (:func:`core.provenance.weights_sha256`), the
library versions and device, and every logged loss with the final one. A reader of an
activation store can then tell whether two runs used the same models and data.

Example:
    >>> write_provenance(out, stage="sft", config=cfg.to_dict(), recorder=losses, ...)   # doctest: +SKIP
    >>> read_provenance(out)["final_loss"]                                                # doctest: +SKIP
    0.41
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from core.provenance import device_info, library_versions, weights_sha256

FILE_NAME = "provenance.json"


def write_provenance(out_dir: Path, *, stage: str, config: dict[str, Any], data: dict[str, Any],
                     parent: dict[str, Any], recorder: Any, extra: dict[str, Any] | None = None) -> Path:
    record = {
        "stage": stage,
        "weights_sha256": weights_sha256(out_dir),  # the fingerprint every run that records this model stores
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
