"""``summary.json`` as a typed, versioned record: one writer, one reader, no guessed keys.

An analysis's summary is read by ``probe run`` and ``probe analyze`` (to print), by the
notebooks and by users' scripts. As a plain dict every reader guessed its shape
(``summary.get("capabilities", summary)`` behind ``isinstance`` checks). Here it is
:class:`AnalysisSummary` of :class:`HookSummary` records: :meth:`AnalysisSummary.load`
refuses a file of another format or version with one line saying what to do, and
``to_dict``/``from_dict`` round-trip exactly.

Example:
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
from typing import Any

from analysis.base_compare import BaseComparison
from analysis.stability import LayerStability
from analysis.window import Window
from core.errors import ProbeError

FORMAT = "rolemrc-probe/analysis-summary"
VERSION = 2


@dataclass(frozen=True)
class HookSummary:
    """The analysis of one capability at one hook point."""

    n_samples: int
    width: int
    layers: str
    n_units: int
    n_significant: int
    share_significant: float
    top_layers: list[dict[str, Any]]
    top_units: list[dict[str, Any]]
    settings: dict[str, Any]
    window: Window | None = None
    stability: LayerStability | None = None
    neuron_set: str | None = None
    plots: list[str] = field(default_factory=list)
    base: BaseComparison | None = None  # SFT − base against DPO − SFT, in a run recorded with --base

    def top_layer_numbers(self) -> list[int]:
        return [int(row["layer"]) for row in self.top_layers]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_samples": self.n_samples,
            "width": self.width,
            "layers": self.layers,
            "window": self.window.to_dict() if self.window else None,
            "n_units": self.n_units,
            "n_significant": self.n_significant,
            "share_significant": self.share_significant,
            "top_layers": self.top_layers,
            "stability": self.stability.to_dict() if self.stability else None,
            "top_units": self.top_units,
            "neuron_set": self.neuron_set,
            "plots": self.plots,
            "settings": self.settings,
            **({"base": self.base.to_dict()} if self.base else {}),
        }

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> HookSummary:
        return cls(
            n_samples=int(body["n_samples"]),
            width=int(body["width"]),
            layers=str(body["layers"]),
            n_units=int(body["n_units"]),
            n_significant=int(body["n_significant"]),
            share_significant=float(body["share_significant"]),
            top_layers=list(body["top_layers"]),
            top_units=list(body["top_units"]),
            settings=dict(body["settings"]),
            window=Window.from_dict(body["window"]) if body.get("window") else None,
            stability=LayerStability.from_dict(body["stability"]) if body.get("stability") else None,
            neuron_set=body.get("neuron_set"),
            plots=list(body.get("plots") or []),
            base=BaseComparison.from_dict(body["base"]) if body.get("base") else None,
        )


@dataclass(frozen=True)
class AnalysisSummary:
    """Everything ``summary.json`` holds: settings, model fingerprints, warnings, and one record per capability × hook."""

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "run_dir": self.run_dir,
            "metric": self.metric,
            "settings": self.settings,
            "model_hashes": self.model_hashes,
            "maps": self.maps,
            "warnings": list(self.warnings),
            "capabilities": {
                cap: {hook: body.to_dict() for hook, body in by_hook.items()}
                for cap, by_hook in self.capabilities.items()
            },
        }

    @classmethod
    def from_dict(cls, body: dict[str, Any], where: str = "summary") -> AnalysisSummary:
        """Refuses another format or version, and a record with missing or mistyped fields, naming ``where``."""
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ProbeError(f'{where}: not an analysis summary (expected "format": "{FORMAT}")')
        if body.get("version") != VERSION:
            raise ProbeError(
                f"{where}: analysis summary version {body.get('version')!r}, this toolkit reads version {VERSION}; "
                "rerun `probe analyze RUN_DIR` to rewrite it"
            )
        try:
            return cls(
                run_dir=str(body["run_dir"]),
                metric=str(body["metric"]),
                settings=dict(body["settings"]),
                model_hashes=dict(body["model_hashes"]),
                maps=str(body["maps"]),
                warnings=[str(w) for w in body["warnings"]],
                capabilities={
                    cap: {hook: HookSummary.from_dict(h) for hook, h in by_hook.items()}
                    for cap, by_hook in body["capabilities"].items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProbeError(
                f"{where}: a malformed analysis summary ({type(exc).__name__}: {exc}); rerun `probe analyze RUN_DIR`"
            ) from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnalysisSummary:
        from core.inputs import read_json

        return cls.from_dict(read_json(Path(path), "analysis summary"), str(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        from core.atomic import write_atomic

        write_atomic(Path(path), json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")
