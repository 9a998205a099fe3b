"""The A/B report as typed records that round-trip through JSON.

``ab_report.json`` is the interface between a run and whatever reads it later (the
markdown table, the dose-sweep notebook, a user's own script), so every record here has
``to_dict`` and ``from_dict``; unknown keys are ignored on read, so a newer report still
loads in an older notebook.

The no-op guard lives in the result on purpose: a factor that rounds to 1 in the model's
dtype, hooks that never changed a value, or generations identical to the baseline all
make the measured Δ meaningless, and the report says so next to the numbers. The same
guard records the opposite failure, a factor so large (``--factor 1e30``) that the
model's logits overflow to inf/NaN or collapse to a constant: the Δ is then measured on
degenerate, mostly empty generations, and the guard's ``faults`` say so.
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

    factor: float
    dtype: str
    changed_fraction_in_dtype: float  # share of the dtype's values x with cast(x * factor) != x
    values_seen: int | None
    values_changed: int | None  # at the hook, during this arm (torch backend)
    rows: int
    rows_changed: int  # rows whose generated tokens differ from the baseline
    flags: list[str] = field(default_factory=list)
    degenerate_logits: int | None = None  # forward positions whose logits were inf/NaN or constant (LogitWatch)
    faults: list[str] = field(default_factory=list)  # why the arm's generations are broken (not a no-op: garbage)

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


def build_guard(factor: float, dtype: str, changed_fraction: float, hook_stats: dict[str, int] | None, rows: int, rows_changed: int) -> NoOpGuard:
    """Fill in the guard, its no-op flags and its faults."""
    stats = hook_stats or {}
    seen, changed, degenerate = stats.get("values_seen"), stats.get("values_changed"), stats.get("degenerate_logits")
    flags: list[str] = []
    if changed_fraction == 0.0:
        flags.append(f"factor {factor!r} rounds to exactly 1 in {dtype}: x*f == x for every {dtype} value, so the intervention is a no-op (use float32, or |1-f| large enough for {dtype})")
    elif changed is not None and changed == 0:
        flags.append("the hooks did not change a single activation value during generation")
    if rows_changed == 0 and rows > 0:
        flags.append(f"not a single generated token changed vs the baseline on {rows} prompts: treat Δ=0 as a no-op, not as a null result")
    faults = [f"factor {factor!r} broke the model: its logits were inf/NaN or the same for every token at {degenerate} forward "
              "positions, so these generations are degenerate (often empty) and say nothing about the neurons; use a factor of "
              "moderate size"] if degenerate else []
    return NoOpGuard(factor, dtype, changed_fraction, seen, changed, rows, rows_changed, flags, degenerate, faults)


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
    """One factor applied to the selected units, compared with the baseline."""

    factor: float
    role: str  # "main" | "dose" | "control"
    capabilities: list[CapabilityResult]
    guard: NoOpGuard
    seconds: float
    tokens: int

    def capability(self, name: str) -> CapabilityResult:
        for result in self.capabilities:
            if result.capability == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "role": self.role, "capabilities": [asdict(c) for c in self.capabilities],
                "guard": self.guard.to_dict(), "seconds": self.seconds, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArmResult:
        return cls(float(data["factor"]), str(data.get("role", "dose")), [CapabilityResult.from_dict(c) for c in data["capabilities"]],
                   NoOpGuard.from_dict(data["guard"]), float(data.get("seconds", 0.0)), int(data.get("tokens", 0)))


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
    baseline: dict[str, Any]
    main: ArmResult
    doses: list[ArmResult]
    placebo: dict[str, Any]
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def arms(self) -> list[ArmResult]:
        """Main arm and every dose/control arm, sorted by factor."""
        return sorted([self.main, *self.doses], key=lambda a: a.factor)

    def to_dict(self) -> dict[str, Any]:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body["main"] = self.main.to_dict()
        body["doses"] = [d.to_dict() for d in self.doses]
        return {"format": "rolemrc-probe/ab-report", "version": 1, **body}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ABReport:
        if data.get("format") != "rolemrc-probe/ab-report":
            raise ProbeError("not an A/B report (expected format 'rolemrc-probe/ab-report')")
        values = _pick(cls, data)
        values["main"] = ArmResult.from_dict(data["main"])
        values["doses"] = [ArmResult.from_dict(d) for d in data.get("doses", [])]
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> ABReport:
        from core.inputs import read_json

        p = Path(path)
        body = read_json(p, "A/B report")
        try:
            return cls.from_dict(body)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProbeError(f"{p}: not a valid A/B report ({exc})") from None
