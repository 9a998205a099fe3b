"""The A/B report as typed records that round-trip through JSON.

``ab_report.json`` is the interface between a run and whatever reads it later (the
markdown table, the dose-sweep notebook, a user's own script), so every record here has
``to_dict`` and ``from_dict``; unknown keys are ignored on read, so a newer report still
loads in an older notebook.

The no-op guard lives in the result on purpose: an edit that changes no value whatever the
activations (a factor that rounds to 1 in the model's dtype, a zero steering vector), hooks
that never changed a value, or generations identical to the baseline all make the measured Δ
meaningless, and the report says so next to the numbers. The same guard records the opposite
failure, an edit so large (``--factor 1e30``) that the model's logits overflow to inf/NaN or
collapse to a constant: the Δ is then measured on degenerate, mostly empty generations, and
the guard's ``faults`` say so.

Version 2 reports hold any number of arms of any edit kind (``arms``), each with its edits'
full descriptions and its own placebo comparison; version 1 reports (scale arms only:
``main`` and ``doses``) still load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from core.errors import ProbeError


def _pick(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class NoOpGuard:
    """Why a null result might be a no-op rather than a real null."""

    factor: float | None  # scale arms; None for other edits
    dtype: str
    changed_fraction_in_dtype: float  # share of the dtype's values x with cast(x * factor) != x
    values_seen: int | None
    values_changed: int | None  # at the hook, during this arm (torch backend)
    rows: int
    rows_changed: int  # rows whose generated tokens differ from the baseline
    flags: list[str] = field(default_factory=list)
    degenerate_logits: int | None = None  # forward positions whose logits were inf/NaN or constant (LogitWatch)
    faults: list[str] = field(default_factory=list)  # why the arm's generations are broken (not a no-op: garbage)
    edit: str = ""  # what the arm did, in words

    @property
    def factor_rounds_to_one(self) -> bool:
        return self.changed_fraction_in_dtype == 0.0

    @property
    def is_noop(self) -> bool:
        return bool(self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "factor_rounds_to_one": self.factor_rounds_to_one, "is_noop": self.is_noop}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoOpGuard:
        return cls(**_pick(cls, data))


def build_guard(
    edit: str,
    factor: float | None,
    dtype: str,
    changed_fraction: float,
    noop_reason: str | None,
    hook_stats: dict[str, int] | None,
    rows: int,
    rows_changed: int,
) -> NoOpGuard:
    """Fill in the guard, its no-op flags and its faults."""
    stats = hook_stats or {}
    seen, changed, degenerate = stats.get("values_seen"), stats.get("values_changed"), stats.get("degenerate_logits")
    flags: list[str] = []
    if noop_reason:
        flags.append(noop_reason)
    elif changed is not None and changed == 0:
        flags.append("the hooks did not change a single activation value during generation")
    if rows_changed == 0 and rows > 0:
        flags.append(
            f"not a single generated token changed vs the baseline on {rows} prompts: treat Δ=0 as a no-op, "
            "not as a null result"
        )
    faults = (
        [
            f"{edit} broke the model: its logits were inf/NaN or the same for every token at {degenerate} forward "
            "positions, so these generations are degenerate (often empty) and say nothing about the units; "
            "use an edit of moderate size"
        ]
        if degenerate
        else []
    )
    return NoOpGuard(
        factor, dtype, changed_fraction, seen, changed, rows, rows_changed, flags, degenerate, faults, edit
    )


@dataclass
class CapabilityResult:
    """Before/after on one capability's rows for one intervention arm."""

    capability: str
    target: bool
    n_rows: int
    n_scored: int  # rows with a verdict in both arms
    undecided: int
    before: float
    after: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float  # exact McNemar
    discordant_lost: int
    discordant_gained: int
    rows_changed: int
    rouge_l_before: float
    rouge_l_after: float
    bleu_before: float
    bleu_after: float
    placebo: dict[str, Any] | None = None  # percentile, p_empirical, deltas, rows_changed_mean

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapabilityResult:
        return cls(**_pick(cls, data))


@dataclass
class ArmResult:
    """One arm (edits applied to one model of the pair), compared with that model's baseline."""

    factor: float | None  # scale arms
    role: str  # "main" | "dose" | "control" | "arm"
    capabilities: list[CapabilityResult]
    guard: NoOpGuard
    seconds: float
    tokens: int
    name: str = ""  # e.g. "scale 0.0", "mean", "patch dpo<-sft", "steer"
    label: str = ""  # what it did, in words
    model: str = "dpo"  # the model that generated
    edits: list[dict[str, Any]] = field(default_factory=list)  # each edit's full description
    # n_sets, seed, family, skipped; per-capability results in capabilities
    placebo: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name = self.name or f"scale {self.factor!r}"

    def capability(self, name: str) -> CapabilityResult:
        for result in self.capabilities:
            if result.capability == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**body, "capabilities": [asdict(c) for c in self.capabilities], "guard": self.guard.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArmResult:
        values = _pick(cls, data)
        values["factor"] = None if data.get("factor") is None else float(data["factor"])
        values["role"] = str(data.get("role", "dose"))
        values["capabilities"] = [CapabilityResult.from_dict(c) for c in data["capabilities"]]
        values["guard"] = NoOpGuard.from_dict(data["guard"])
        values["seconds"], values["tokens"] = float(data.get("seconds", 0.0)), int(data.get("tokens", 0))
        return cls(**values)


FORMAT = "rolemrc-probe/ab-report"
VERSION = 2


@dataclass
class ABReport:
    """Everything ``probe intervene`` writes to ``ab_report.json``."""

    capability: str
    model: str
    model_dir: str
    data_file: str
    dtype: str
    backend: str
    judge: str
    neurons: dict[str, Any]
    baselines: dict[str, dict[str, Any]]  # per model that generated a baseline: seconds, tokens, rows
    arms: list[ArmResult]  # in the order they ran; the main arm first
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    # --select: each rule's units, their source and overlap, the verdicts (interventions.select_compare)
    selection: dict[str, Any] = field(default_factory=dict)

    @property
    def baseline(self) -> dict[str, Any]:
        """The intervened model's baseline."""
        return self.baselines[self.model]

    @property
    def placebo(self) -> dict[str, Any]:
        """The main arm's placebo settings."""
        return self.main.placebo

    @property
    def main(self) -> ArmResult:
        return next((a for a in self.arms if a.role == "main"), self.arms[0])

    @property
    def doses(self) -> list[ArmResult]:
        """Every scale arm but the main one (doses and the positive control)."""
        return [a for a in self.scale_arms if a is not self.main]

    @property
    def scale_arms(self) -> list[ArmResult]:
        """The scale arms, sorted by factor: the dose sweep."""
        return sorted((a for a in self.arms if a.factor is not None), key=lambda a: a.factor or 0.0)

    def arm(self, name: str) -> ArmResult:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def units_of(self, arm: ArmResult) -> dict[str, Any]:
        """The units ``arm`` edited (``neurons``'s description): its rule's under ``--select``, else the report's."""
        rule = next((r for r in self.selection.get("rules", []) if arm.name in r["arms"]), None)
        return rule["units"] if rule else self.neurons

    def to_dict(self) -> dict[str, Any]:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body["arms"] = [a.to_dict() for a in self.arms]
        body.update(baseline=self.baseline, placebo=self.placebo)  # for readers of the JSON alone
        return {"format": FORMAT, "version": VERSION, **body}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ABReport:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProbeError(f"not an A/B report (expected format {FORMAT!r})")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
            raise ProbeError(
                f"A/B report version {version!r}: this toolkit reads versions 1-{VERSION}; "
                "a newer report needs a newer toolkit"
            )
        values = _pick(cls, data)
        if version == 1:
            values["arms"] = [ArmResult.from_dict(a) for a in [data["main"], *data.get("doses", [])]]
            values["arms"][0].placebo = data.get("placebo") or {}
            values["baselines"] = {data["model"]: data["baseline"]}
        else:
            values["arms"] = [ArmResult.from_dict(a) for a in data["arms"]]
        if not values["arms"]:
            raise ValueError("no arms")
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> ABReport:
        from core.inputs import read_json

        p = Path(path)
        body = read_json(p, "A/B report")
        try:
            return cls.from_dict(body)
        except ProbeError as exc:
            raise ProbeError(f"{p}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProbeError(f"{p}: not a valid A/B report ({exc})") from None
