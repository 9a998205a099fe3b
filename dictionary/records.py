"""The records a dictionary run passes between its steps: what preparation gives, what the run returns, and JSON.

Kept apart from :mod:`dictionary.run` so that the report and the causal test read them without importing the run.

Example:
    >>> import numpy as np
    >>> to_jsonable({"x": np.float32(0.5), "y": [float("nan")], "z": np.arange(2)})
    {'x': 0.5, 'y': [None], 'z': [0, 1]}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from access.pair import ModelShape
    from dictionary.config import DictionaryConfig
    from dictionary.store import Store
    from dictionary.text import TextMix


@dataclass
class Prepared:
    """What step 1-2 give: the checked site, the text, the store and its plan."""

    config: DictionaryConfig
    shape: ModelShape
    layer: int
    out: Path
    tokenizer: PreTrainedTokenizerBase
    mix: TextMix
    store: Store
    plan: list[list[list[int]]]
    binding: dict[str, Any] = field(default_factory=dict)


@dataclass
class DictionaryResult:
    """What a run wrote; in a helper process of a data-parallel harvest (``is_main`` False), nothing but its share
    of the store."""

    out: Path
    summary: dict[str, Any]
    files: list[Path]
    is_main: bool = True


def to_jsonable(value: Any) -> Any:
    """Dataclasses, numpy and paths as JSON values."""
    import numpy as np

    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:
        return None
    return value
