"""``summary.json`` as a typed, versioned record: one writer, one reader, no guessed keys.

An analysis's summary is read by ``probe run`` and ``probe analyze`` (to print), by the
notebooks and by users' scripts. As a plain dict every reader guessed its shape
(``summary.get("capabilities", summary)`` behind ``isinstance`` checks). Here it is
:class:`AnalysisSummary` of :class:`HookSummary` records, down to the typed rows of the
layer and unit rankings (:class:`analysis.profile.RankedLayer`, :class:`analysis.profile.RankedUnit`),
written and read by :mod:`core.records` (they round-trip exactly); :meth:`AnalysisSummary.load`
refuses a file of another format or version with one line saying what to do.

Example:
    >>> from core.records import to_json
    >>> empty = AnalysisSummary("runs/x", "topk_count", {}, {}, "maps.h5", [], {})
    >>> AnalysisSummary.read(to_json(empty)) == empty   # the file's round trip; to_json writes format and version
    True
    >>> empty.hook("multi_turn", "mlp_out")
    Traceback (most recent call last):
    core.errors.ProbeError: runs/x: no analysis of multi_turn/mlp_out (analysed: none); run `probe analyze runs/x ...`
    >>> summary = AnalysisSummary.load("runs/latest/analysis/summary.json")       # doctest: +SKIP
    >>> summary.hook("multi_turn", "mlp_out").top_layer_numbers()[:3]              # doctest: +SKIP
    [26, 25, 27]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from analysis.base_compare import BaseComparison
from analysis.profile import RankedLayer, RankedUnit
from analysis.stability import LayerStability
from analysis.window import Window
from core.errors import ProbeError
from core.records import OMIT_NONE, RecordError, from_json, to_json

FORMAT = "rolemrc-probe/analysis-summary"
VERSION = 2


@dataclass(frozen=True, kw_only=True)
class HookSummary:
    """The analysis of one capability at one hook point (fields in the file's order)."""

    n_samples: int
    width: int
    layers: str
    window: Window | None = None
    n_units: int
    n_significant: int
    share_significant: float
    top_layers: list[RankedLayer]
    stability: LayerStability | None = None
    top_units: list[RankedUnit]
    neuron_set: str | None = None
    plots: list[str] = field(default_factory=list)
    settings: dict[str, Any]
    base: BaseComparison | None = field(default=None, metadata=OMIT_NONE)  # SFT − base vs DPO − SFT (--base runs)

    def top_layer_numbers(self) -> list[int]:
        return [row.layer for row in self.top_layers]


@dataclass(frozen=True)
class AnalysisSummary:
    """Everything ``summary.json`` holds: settings, model hashes, warnings, and one record per capability × hook."""

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    run_dir: str
    metric: str
    settings: dict[str, Any]
    model_hashes: dict[str, str]
    maps: str
    warnings: list[str]
    capabilities: dict[str, dict[str, HookSummary]]

    def hooks(self) -> Iterator[tuple[str, str, HookSummary]]:
        """(capability, hook, record) in file order."""
        for cap, by_hook in self.capabilities.items():
            for hook, body in by_hook.items():
                yield cap, hook, body

    def hook(self, capability: str, hook: str) -> HookSummary:
        try:
            return self.capabilities[capability][hook]
        except KeyError:
            have = ", ".join(f"{c}/{h}" for c, h, _ in self.hooks()) or "none"
            raise ProbeError(
                f"{self.run_dir}: no analysis of {capability}/{hook} (analysed: {have}); "
                f"run `probe analyze {self.run_dir} -c {capability} --hook {hook}`"
            ) from None

    @classmethod
    def read(cls, body: Any, where: str = "summary") -> AnalysisSummary:
        """Refuses another format or version, and a record with missing or mistyped fields, naming ``where``."""
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ProbeError(f'{where}: not an analysis summary (expected "format": "{FORMAT}")')
        if body.get("version") != VERSION:
            raise ProbeError(
                f"{where}: analysis summary version {body.get('version')!r}, this toolkit reads version {VERSION}; "
                "rerun `probe analyze RUN_DIR` to rewrite it"
            )
        try:
            return from_json(cls, body)
        except RecordError as exc:
            raise ProbeError(f"{where}: a malformed analysis summary ({exc}); rerun `probe analyze RUN_DIR`") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnalysisSummary:
        from core.inputs import read_json

        return cls.read(read_json(Path(path), "analysis summary"), str(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        from core.atomic import write_atomic

        write_atomic(Path(path), json.dumps(to_json(self), indent=1, sort_keys=False) + "\n")
