"""``explain_<capability>_<hook>.json`` as a typed, versioned record: one writer, one reader, no guessed keys.

:class:`ExplainRecord` holds what ``probe explain`` found for one capability and hook point:
a :class:`NeuronCard` per top unit, the read-out of the DPO − SFT mean difference per layer,
the agreement between the weight-change and activation rankings, and where every input came
from (run, window, the models' directories and weights fingerprints, the lens). The records
are plain dataclasses, turned into JSON values and back by their type hints (:mod:`core.records`),
so no field list is written twice. A float that is not finite (a relative weight change from an
all-zero row is +inf) is stored as ``null`` and read back as NaN. :meth:`ExplainRecord.load`
refuses another format or version with one line.

Example:
    >>> from core.records import from_json, to_json
    >>> card = NeuronCard(3, 7, {"topk_count": 1}, 0.25, 0.1, 0.4, 0.001, 0.01, 12.0, 52.0, {}, ReadOut([], []), {})
    >>> from_json(NeuronCard, to_json(card)) == card
    True
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from analysis.agreement import LayerAgreement, TopOverlap
from analysis.readout import ReadOut, TokenScore
from analysis.window import Window
from core.errors import ProbeError
from core.records import RecordError, from_json, nonfinite_as_null, to_json

FORMAT = "rolemrc-probe/explain"
VERSION = 1
__all__ = [
    "Agreement",
    "ExplainRecord",
    "LayerReadOut",
    "NeuronCard",
    "PromptHit",
    "ReadOut",
    "TokenScore",
]


@dataclass(frozen=True)
class PromptHit:
    """One of the prompts on which a unit is most active in one model, with both models' values there.

    ``prompt_tail``: the prompt's end, where a last-token activation was taken; ``distinct_tail``: its end once
    the end all the capability's prompts share (a fixed last turn) is cut off, which is what tells them apart.
    """

    row: int
    sample_id: int
    task: str
    sft: float
    dpo: float
    prompt_tail: str
    distinct_tail: str


@dataclass(frozen=True)
class NeuronCard:
    """Everything said about one unit: ranks, Δ with its CI, weight change, read-out, top prompts.

    ``ranks``: 1-based rank within the window under each ranking (``topk_count``, ``mean_diff``,
    ``effect_size`` by |Δ|; ``weights_sft_dpo``, ``weights_base_sft`` by relative weight change).
    ``delta``, ``ci_low``/``ci_high`` (95% percentile bootstrap over prompts), ``p``, ``q``,
    ``sft``, ``dpo``: the analysis metric's values. ``weight_change``: per transition the unit's
    ``relative``, ``absolute`` and per-component relative change. ``top_prompts``: per model.
    """

    layer: int
    unit: int
    ranks: dict[str, int]
    delta: float
    ci_low: float
    ci_high: float
    p: float
    q: float
    sft: float
    dpo: float
    weight_change: dict[str, dict[str, float]]
    readout: ReadOut
    top_prompts: dict[str, list[PromptHit]]


@dataclass(frozen=True)
class LayerReadOut:
    """The DPO − SFT mean difference at one layer: its norm and what it pushes up and down through the lens."""

    layer: int
    norm: float
    readout: ReadOut


@dataclass(frozen=True)
class Agreement:
    """Weight change of one transition (``sft_dpo``, ``base_sft``) against the activation ranking."""

    transition: str
    layers: list[LayerAgreement]
    top: TopOverlap


@dataclass(frozen=True)
class ExplainRecord:
    """``explain_<capability>_<hook>.json`` (module doc). ``models``: role -> ``{dir, weights_sha256}``."""

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    run_dir: str
    capability: str
    hook: str
    metric: str
    analysis_settings: dict[str, Any]
    window: Window
    position: str
    n_samples: int
    models: dict[str, dict[str, str]]
    lens: dict[str, Any]
    cards: list[NeuronCard]
    mean_difference: list[LayerReadOut]
    agreement: list[Agreement]
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, body: Any, where: str = "explain record") -> ExplainRecord:
        """``body`` as a record, after its format and version; what this toolkit cannot read is one line."""
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ProbeError(f'{where}: not an explain record (expected "format": "{FORMAT}")')
        if body.get("version") != VERSION:
            raise ProbeError(
                f"{where}: explain record version {body.get('version')!r}, this toolkit reads version {VERSION}; "
                "rerun `probe explain RUN_DIR -c CAPABILITY`"
            )
        try:
            return from_json(cls, body)
        except RecordError as exc:
            raise ProbeError(f"{where}: a malformed explain record ({exc}); rerun `probe explain`") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ExplainRecord:
        from core.inputs import read_json

        return cls.read(read_json(Path(path), "explain record"), str(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        from core.atomic import write_atomic

        body = nonfinite_as_null(to_json(self))
        write_atomic(Path(path), json.dumps(body, indent=1, allow_nan=False, ensure_ascii=False) + "\n")
