"""Loads a JSONL file beside this module for the example tasks: no hub, no ``datasets`` cache, any working directory.

lm-eval calls it through ``custom_dataset: !function local_data.load`` with the task's
``dataset_kwargs`` (``file: NAME.jsonl``) and its metadata.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load(file: str, **_: Any) -> Any:
    import datasets

    path = Path(__file__).with_name(file)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
