"""The A/B report as typed records that round-trip through JSON.

``ab_report.json`` is the interface between a run and whatever reads it later (the
markdown table, the dose-sweep notebook, a user's own script), so every record here is written
and read by :mod:`core.records`, down to the units (:class:`UnitsSummary`), the baselines
(:class:`BaselinePass`), the placebos (:class:`PlaceboRank` per capability; per arm one of
:class:`PlaceboDrawn`, :class:`PlaceboSkipped`, :class:`NoPlacebo`) and ``--select``'s comparison
(:class:`Selection`, else :class:`NoSelection`). Where the file holds ``{}`` (no placebo, no
selection) an empty record stands for it, and reads nothing else: a malformed block is refused, not
taken for none. Otherwise unknown keys are ignored on read, so a newer report still loads in an
older notebook; a value of the wrong type is refused in one line. A capability's paired statistics
(:class:`~interventions.stats.PairedDelta`) are written flat, under the keys the file has always had.

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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from core.errors import ProbeError
from core.records import OMIT_NONE, flatten, from_json, nonfinite_as_null, to_json
from interventions.stats import DISCORDANT_KEYS, PairedDelta


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
    # computed from the fields above, and written for readers of the JSON alone
    factor_rounds_to_one: bool = field(init=False)
    is_noop: bool = field(init=False)

    def __post_init__(self) -> None:
        self.factor_rounds_to_one = self.changed_fraction_in_dtype == 0.0
        self.is_noop = bool(self.flags)


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
    elif changed is not None and changed == 0 and stats.get("calls", 1):  # no site function ran: a weight or logit edit
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
class PlaceboRank:
    """Where one capability's Δ falls among the Δs of the arm's placebo sets
    (:func:`~interventions.stats.placebo_compare`), and how many generations a set changed on average."""

    percentile: float
    p_empirical: float
    deltas: list[float]
    rows_changed_mean: float | None = field(default=None, metadata=OMIT_NONE)  # A/B arms; lm-eval passes: none
    # sets not run for this rank (interventions.sequential): not generated (compliance) or not teacher-forced (a
    # continuous outcome), since the verdict could no longer change, or none was needed (``skipped`` says why)
    undrawn: int | None = field(default=None, metadata=OMIT_NONE)
    skipped: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class OutcomeResult:
    """One continuous outcome of one arm over the rows (or DPO pairs), teacher-forced (:mod:`access.outcomes`):
    unedited (``before``) and edited (``after``) means, Δ with its paired bootstrap 95% CI over rows, where Δ falls
    among the arm's placebo sets, and the verdict of :func:`interventions.evidence.outcome_verdict`.

    For ``gap_closed`` Δ is ``1 − mean(KL edited) / mean(KL unedited)`` (``before`` 0, ``after`` Δ)."""

    outcome: str  # a key of interventions.outcome_kinds.OUTCOMES
    n: int
    before: float
    after: float
    delta: float
    ci_low: float
    ci_high: float
    placebo: PlaceboRank | None = None
    verdict: str = ""

    @property
    def effect(self) -> PairedDelta:
        """As a paired difference (no McNemar p: not a 0/1 outcome)."""
        nan = float("nan")
        return PairedDelta(self.n, self.before, self.after, self.delta, self.ci_low, self.ci_high, nan)


@dataclass
class CapabilityResult:
    """Before/after on one capability's rows for one intervention arm (``effect`` written flat, in the file's keys)."""

    capability: str
    target: bool
    n_rows: int
    undecided: int  # rows the judge left undecided in one arm or both
    # compliance before/after; its ``n`` is the rows with a verdict in both arms (``n_scored`` in the file)
    effect: PairedDelta = field(metadata=flatten({**DISCORDANT_KEYS, "n": "n_scored"}, after={"undecided": "n_scored"}))
    rows_changed: int
    rouge_l_before: float
    rouge_l_after: float
    bleu_before: float
    bleu_after: float
    placebo: PlaceboRank | None = None  # arms with placebo sets


@dataclass(kw_only=True)
class Placebo:
    """An arm's placebo settings: how many sets, their seed and how they were drawn."""

    n_sets: int
    seed: int
    family: str = ""  # what a set is (random units, same hook point and count per layer; ...); not in version 1


@dataclass(kw_only=True)
class PlaceboDrawn(Placebo):
    """The placebo sets an arm was compared with."""

    factor: float | None  # the arm's (scale arms)
    # per set, each edit's units ([[layer, unit], ...]) or direction ({"layer", "norm"}); a list of them for several
    sets: list[Any]


@dataclass(kw_only=True)
class PlaceboSkipped(Placebo):
    """An arm that could have had placebo sets and has none (``--placebo 0``, or an edit that is a no-op)."""

    skipped: str  # why


@dataclass
class NoPlacebo:
    """An arm without placebo sets (the doses, the positive control): ``{}`` in the report."""

    n_sets: ClassVar[int] = 0


@dataclass
class Coherence:
    """An arm's coherence guard (:mod:`interventions.coherence`): the perplexity of its generated output under the
    ``judge`` model (SFT), and that of its model's baseline output."""

    perplexity: float
    baseline: float
    tokens: int  # generated tokens scored (the arm's)
    judge: str = "sft"

    def cell(self) -> str:
        """``12.3→15.8``: baseline then arm (``n/a`` where a side has no tokens)."""
        return f"{_ppl(self.baseline)}→{_ppl(self.perplexity)}"


def _ppl(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


# read in this order: a version-1 skipped placebo also holds a factor and (empty) sets
ArmPlacebo = PlaceboSkipped | PlaceboDrawn | NoPlacebo


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
    edits: list[dict[str, Any]] = field(default_factory=list)  # each edit's full description (its kind's own keys)
    placebo: ArmPlacebo = field(default_factory=NoPlacebo)  # where each Δ falls among them: in capabilities
    outcomes: list[OutcomeResult] = field(default_factory=list)  # on the target capability's rows; none before #36
    coherence: Coherence | None = None  # its output's perplexity under SFT (None: not measured)

    def __post_init__(self) -> None:
        self.name = self.name or f"scale {self.factor!r}"

    def outcome(self, name: str) -> OutcomeResult | None:
        """The continuous outcome ``name`` (a key of :data:`interventions.outcome_kinds.OUTCOMES`), None where the arm
        has none."""
        return next((o for o in self.outcomes if o.outcome == name), None)

    def capability(self, name: str) -> CapabilityResult:
        for result in self.capabilities:
            if result.capability == name:
                return result
        raise KeyError(name)


FORMAT = "rolemrc-probe/ab-report"
VERSION = 2


@dataclass
class UnitsSummary:
    """The units an edit touches (:func:`interventions.selection.describe`): size, count per layer, provenance."""

    hook: str
    size: int
    per_layer: dict[int, int]  # layer -> units, by layer
    metric: str
    capability: str
    selection: dict[str, Any]  # the neuron set's own record of how it was chosen (access.units)
    run_dir: str
    units: list[tuple[int, int]]  # (layer, unit)


@dataclass
class RuleVerdict:
    """A selection rule's verdict on one capability (:mod:`interventions.select_compare`), and why."""

    status: str  # matters, not shown, cannot be decided
    reason: str


@dataclass
class Overlap:
    """Two rules' units: how many they share, their Jaccard index, and that of random sets with the same per-layer
    counts (mean and 95th percentile)."""

    shared: int
    jaccard: float
    random_jaccard: float
    random_p95: float


@dataclass
class RuleSelection:
    """One rule of ``--select``: its units and where they came from, its arms and their verdicts."""

    rule: str
    metric: str
    source: str  # the ranking, in words
    window: str  # the layers it ranked
    units: UnitsSummary
    arms: list[str]
    verdict: RuleVerdict  # its first arm's, on the target capability
    verdicts: dict[str, dict[str, RuleVerdict]]  # arm -> capability -> verdict
    overlap: dict[str, Overlap]  # by the other rule


@dataclass
class Selection:
    """What ``--select`` compared: the top ``k`` units of each rule, judged by ``verdict_rule``."""

    k: int
    verdict_rule: str
    rules: list[RuleSelection]


@dataclass
class NoSelection:
    """A run without ``--select``: ``{}`` in the report."""


@dataclass
class BaselinePass:
    """One model's unedited generation pass over the rows."""

    seconds: float
    tokens: int
    rows: int


@dataclass
class ABReport:
    """Everything ``probe intervene`` writes to ``ab_report.json``."""

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    capability: str
    model: str
    model_dir: str
    data_file: str
    dtype: str
    backend: str
    judge: str
    neurons: UnitsSummary
    baselines: dict[str, BaselinePass]  # per model that generated a baseline
    arms: list[ArmResult]  # in the order they ran; the main arm first
    config: dict[str, Any]  # ABConfig.to_dict(): the settings by their flat names
    warnings: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    selection: Selection | NoSelection = field(default_factory=NoSelection)
    # the continuous outcomes: which response tokens they teacher-forced ("" without outcomes), how many DPO pairs
    responses: str = ""
    outcome_pairs: int = 0
    baseline: BaselinePass = field(init=False)  # the intervened model's, for readers of the JSON alone, as the next
    placebo: ArmPlacebo = field(init=False)  # the main arm's

    def __post_init__(self) -> None:
        if not self.arms:
            raise ValueError("no arms")
        self.baseline, self.placebo = self.baselines[self.model], self.main.placebo

    @property
    def main(self) -> ArmResult:
        return next((a for a in self.arms if a.role == "main"), self.arms[0])

    @property
    def split(self) -> str:
        """The split the rows came from (``--split``): reports written before it was recorded judged the test one."""
        return str(self.config.get("split", "test"))

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

    def units_of(self, arm: ArmResult) -> UnitsSummary:
        """The units ``arm`` edited: its rule's under ``--select``, else the report's."""
        rules = self.selection.rules if isinstance(self.selection, Selection) else []
        return next((r.units for r in rules if arm.name in r.arms), self.neurons)

    def save(self, path: Path) -> None:
        """Strict JSON (NaN and inf as null), atomically."""
        from core.atomic import write_atomic

        write_atomic(path, json.dumps(nonfinite_as_null(to_json(self)), indent=1, allow_nan=False) + "\n")

    @classmethod
    def read(cls, body: Any) -> ABReport:
        """A report's JSON as a report (versions 1 and 2); :class:`ProbeError` for another format or version."""
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ProbeError(f"not an A/B report (expected format {FORMAT!r})")
        version = body.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
            raise ProbeError(
                f"A/B report version {version!r}: this toolkit reads versions 1-{VERSION}; "
                "a newer report needs a newer toolkit"
            )
        return from_json(cls, body if version == VERSION else _from_version_1(body))

    @classmethod
    def load(cls, path: str | Path) -> ABReport:
        from core.inputs import read_json

        p = Path(path)
        body = read_json(p, "A/B report")
        try:
            return cls.read(body)
        except ProbeError as exc:
            raise ProbeError(f"{p}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProbeError(f"{p}: not a valid A/B report ({exc})") from None


def _from_version_1(body: dict[str, Any]) -> dict[str, Any]:
    """A version-1 report (scale arms only: ``main``, ``doses``, one ``baseline``, the main arm's ``placebo``)
    in version 2's shape."""
    main = {**body["main"], "placebo": body.get("placebo") or {}}
    return {**body, "arms": [main, *body.get("doses", [])], "baselines": {body["model"]: body["baseline"]}}
