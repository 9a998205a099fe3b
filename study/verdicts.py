"""The rules that turn a run's evidence into a verdict per claim of the paper's §7, fixed before any result is read.

Five claims (registered with their statements and sections in :mod:`study.claims`), one function each, every
threshold a named constant below; claim 1c's rule is ``probe localize``'s
(:func:`localize.verdicts.window_carries_change`, read here as a study verdict by :func:`window_carried`), and claim
4 is also read at every point of the localize curve (:func:`units_cause_at_k`) beside its headline verdict at the
A/B's units. The functions read small typed records (:class:`DepthShare`, :class:`Difference`,
:class:`ArmEvidence`), not files, so each rule is tested on hand-made records (``tests/test_report_verdicts.py``) and
``docs/report.md`` states the same rules in words. Nothing here may be tuned to a result.

A verdict is one of:

* ``supported``: the evidence meets the claim's rule;
* ``not supported``: the test ran and could have shown the claim, and did not;
* ``contradicted``: the test ran and showed the opposite, with the same strength of evidence the
  claim would have needed;
* ``cannot be tested here``: the run holds what the test needs, but this setup cannot decide it
  (a ceiling, a factor that rounds to 1 in the model's dtype, too few placebo sets, no behaviour
  change to explain); the reason says which;
* ``not run``: the evidence is missing; the verdict carries the command that produces it.

Example:
    >>> d = Difference(n=160, before=1.0, after=0.994, delta=-0.006, ci_low=-0.02, ci_high=0.0, p_value=1.0)
    >>> alignment_tax(d, "probe models eval").status
    'not supported'
    >>> alignment_tax(None, "probe models eval --out RUN/eval.json").describe()
    'not run (probe models eval --out RUN/eval.json)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from access.factors import PAPER_FACTOR as PAPER_FACTOR  # re-exported: the claims name it
from interventions.cells import Placement, effect_sentence, fmt_outcome, fmt_pct, fmt_percentile
from interventions.evidence import (
    MIN_PLACEBO_SETS,
    UNPLACED,
    ArmEvidence,
    Difference,
    OutcomeEvidence,
    outcome_verdict,
)
from interventions.outcome_kinds import OUTCOMES
from interventions.recipes import recipe_of
from interventions.sequential import OUTCOMES_SKIPPED
from interventions.stats import placebo_compare
from localize.verdicts import WindowResult, window_carries_change
from study.layout import TARGET  # the capability of claims 1c-4, as in the paper

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
CONTRADICTED = "contradicted"
CANNOT_TEST = "cannot be tested here"
NOT_RUN = "not run"
STATUSES: tuple[str, ...] = (SUPPORTED, NOT_SUPPORTED, CONTRADICTED, CANNOT_TEST, NOT_RUN)

FACTOR_TOLERANCE = 1e-12

NO_TARGET_ROWS = (
    f"the evaluation holds no judged {TARGET} row (too few rows were evaluated, or the rule judge could not decide "
    "them: published rows need --judge llm)"
)


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict: ``status`` (one of :data:`STATUSES`), why, and for ``not run`` the command that runs it."""

    claim: int | str  # 1, "1c", 2, ...
    status: str
    reason: str
    command: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict {self.status!r}")

    def describe(self) -> str:
        """'supported', 'cannot be tested here (why)', 'not run (command)'."""
        if self.status == NOT_RUN:
            return f"{NOT_RUN} ({self.command or self.reason})"
        if self.status == CANNOT_TEST:
            return f"{CANNOT_TEST} ({self.reason})"
        return self.status


@dataclass(frozen=True)
class DepthShare:
    """Claim 1's evidence for one capability: the window's share of the summed per-layer mean |Δ| over all layers.

    ``uniform`` is the share the window would hold were |Δ| spread evenly (its layers over all layers);
    ``ci_low``/``ci_high`` the 95% bootstrap interval of ``share`` over the prompts.
    """

    capability: str
    share: float
    ci_low: float
    ci_high: float
    uniform: float


def _difference(d: Difference) -> str:
    return effect_sentence(d, rates=True, placebo=False)


def _outcome_text(o: OutcomeEvidence | None, what: str) -> str:
    """``gap closed +12% [+8%, +16%], 97th percentile of 20 placebo sets (moves beyond placebo)`` (three significant
    digits, so that a gap of 1e-6 does not read as 0)."""
    if o is None:
        return f"no {what}"
    percent = o.outcome in OUTCOMES and OUTCOMES[o.outcome].ratio  # a share of the gap

    def num(x: float) -> str:
        return fmt_outcome(x, percent)

    placed = _outcome_placed(o) or "no placebo sets"
    return f"{what} {num(o.delta)} [{num(o.ci_low)}, {num(o.ci_high)}], {placed} ({o.verdict})"


def _outcome_placed(o: OutcomeEvidence, matched: str = "") -> str:
    """``97th percentile of 20 placebo sets``; among the sets drawn where the arm drew fewer, saying so (``4 of 20
    placebo sets drawn (then the verdict could no longer change)``, ``0 of 20 ...``); "" without placebo sets."""
    if o.drawn == 0:
        return f"0 of {o.placebo_sets} placebo sets drawn ({OUTCOMES_SKIPPED})"
    if o.percentile is None or not math.isfinite(o.percentile) or not o.placebo_sets:
        return ""
    sets = (
        f"{o.placebo_sets} {matched}placebo sets"
        if o.drawn is None
        else f"{o.drawn} of {o.placebo_sets} {matched}placebo sets drawn (then the verdict could no longer change)"
    )
    return f"{fmt_percentile(o.percentile)} percentile of {sets}"


def _placement(arm: ArmEvidence) -> Placement | None:
    """Where the arm's Δ falls among its placebo sets, those generated where it did not generate all (no empirical p in
    the evidence, and none in the prose)."""
    sets = arm.placebo_sets if arm.generated is None else arm.generated
    return None if arm.percentile is None else Placement(arm.percentile, math.nan, sets)


# --- claim 1 ---------------------------------------------------------------------------------------------------------


def late_layers(shares: list[DepthShare] | None, command: str, untestable: str | None = None) -> Verdict:
    """Claim 1. Per capability, the window's share of |Δ| is *above* uniform when its 95% CI lies wholly above the
    uniform share, *below* when wholly below. Supported: above for every capability analysed. Contradicted: below for
    every one. Not supported: otherwise. ``untestable``: why the run cannot decide it (e.g. only the window's layers
    were recorded, so no share can be formed); ``shares`` None: not run (``command``)."""
    if untestable:
        return Verdict(1, CANNOT_TEST, untestable)
    if not shares:
        return Verdict(1, NOT_RUN, "no analysis of the recorded activations", command)
    above = [s.capability for s in shares if s.ci_low > s.uniform]
    below = [s.capability for s in shares if s.ci_high < s.uniform]
    listing = "; ".join(
        f"{s.capability} {fmt_pct(s.share)} [{fmt_pct(s.ci_low)}, {fmt_pct(s.ci_high)}] vs {fmt_pct(s.uniform)}"
        for s in shares
    )
    if len(above) == len(shares):
        return Verdict(
            1,
            SUPPORTED,
            f"for every capability the window holds more of |Δ| than a uniform spread, CI excluded: {listing}",
        )
    if len(below) == len(shares):
        return Verdict(
            1,
            CONTRADICTED,
            f"for every capability the window holds less of |Δ| than a uniform spread, CI excluded: {listing}",
        )
    rest = [s.capability for s in shares if s.capability not in above]
    return Verdict(1, NOT_SUPPORTED, f"not above the uniform share with its CI for {', '.join(rest)}: {listing}")


# --- claim 1c --------------------------------------------------------------------------------------------------------

# probe localize's verdicts on claim 1c as the study's: its "inconclusive" (the CI holds X) and "n/a" (no gap to close,
# no window arm, a window over Y of the layers) leave the claim undecided by this run
WINDOW_STATUSES = {
    "supported": SUPPORTED,
    "not supported": NOT_SUPPORTED,
    "inconclusive": CANNOT_TEST,
    "n/a": CANNOT_TEST,
}
NOT_MEASURED = "not measured"


def window_carried(results: Sequence[WindowResult] | None, layers: int, total: int, command: str) -> Verdict:
    """Claim 1c, "the change is carried in the window", by ``probe localize``'s rule, fixed there
    (:func:`localize.verdicts.window_carries_change`: the window of ``layers`` of ``total`` layers, both sub-layers
    patched at once, closes at least 80% of the gap at its CI's low end in every direction, holding at most 2/3 of
    the layers). ``results``: the window arm per direction of the run's localize report; None: the run has no localize
    report (not measured: ``command`` measures it)."""
    if results is None:
        return Verdict("1c", NOT_RUN, f"{NOT_MEASURED}: the run holds no localize report of {TARGET}", command)
    found = window_carries_change(results, layers, total)
    status = WINDOW_STATUSES[found.verdict]
    return Verdict("1c", status, found.reason if status != CANNOT_TEST else f"{found.verdict}: {found.reason}")


# --- claim 2 ---------------------------------------------------------------------------------------------------------


def alignment_tax(multi_turn: Difference | None, command: str) -> Verdict:
    """Claim 2, on DPO − SFT compliance on multi_turn (``before`` = SFT, ``after`` = DPO). Supported: DPO lower,
    significant (CI below 0, McNemar p < :data:`ALPHA`). Contradicted: DPO higher, equally significant. Cannot be
    tested: no judged multi_turn row, or SFT complies on none (no room for a tax). Not supported: otherwise."""
    if multi_turn is None:
        return Verdict(2, NOT_RUN, "no evaluation of the pair", command)
    if multi_turn.n == 0:
        return Verdict(2, CANNOT_TEST, NO_TARGET_ROWS)
    text = _difference(multi_turn)
    if multi_turn.significant():
        return Verdict(
            2,
            SUPPORTED if multi_turn.delta < 0 else CONTRADICTED,
            f"DPO {'loses' if multi_turn.delta < 0 else 'gains'} multi-turn compliance against SFT: {text}",
        )
    if multi_turn.before == 0:
        return Verdict(2, CANNOT_TEST, f"SFT complies on no multi_turn row, so DPO has nothing to lose: {text}")
    return Verdict(2, NOT_SUPPORTED, f"no significant multi-turn difference: {text}")


# --- claim 3 ---------------------------------------------------------------------------------------------------------


def paper_scaling(arm: ArmEvidence | None, command: str) -> Verdict:
    """Claim 3, on the scale arm at :data:`PAPER_FACTOR` (the DPO model, multi_turn), read on compliance and on the
    continuous outcomes (gap closed toward SFT and the DPO margin change on multi-turn DPO pairs).

    The arm *lifts* multi-turn when compliance rises with a specific effect (:meth:`ArmEvidence.specific`), or when
    both the gap closed and the margin change rise beyond their placebos (``moves beyond placebo``,
    :func:`interventions.evidence.outcome_verdict`); it *lowers* it when compliance drops significantly, or when both
    fall beyond their placebos. Cannot be tested: the factor rounds to 1 in the model's dtype; broken generations;
    neither a judged row nor continuous outcomes; a significant compliance rise (or outcomes that move) with too few
    placebo sets to place it; a baseline already at 100% without continuous outcomes. Supported: lifts and does not
    lower. Contradicted: lowers and does not lift. Not supported: otherwise (both at once included)."""
    if arm is None:
        return Verdict(3, NOT_RUN, "no intervention at the paper's factor on multi_turn", command)
    if arm.rounds_to_one:
        return Verdict(
            3,
            CANNOT_TEST,
            f"1 − 1e-6 rounds to exactly 1 in {arm.dtype}, so the edit changes nothing; rerun with --dtype float32",
        )
    if arm.faults:
        return Verdict(3, CANNOT_TEST, f"the edited model's generations are broken: {arm.faults[0]}")
    d = arm.effect
    gap, margin = arm.outcome("gap_closed"), arm.outcome("margin_change")
    continuous = gap is not None
    if d.n == 0 and not continuous:
        return Verdict(3, CANNOT_TEST, "the judge decided no multi_turn row of the intervention")
    parts = [effect_sentence(d, _placement(arm), (arm.rows_changed, d.n), rates=True)] if d.n else []
    if continuous:
        parts += [_outcome_text(gap, "gap closed toward SFT"), _outcome_text(margin, "DPO margin change")]
    text = "; ".join(parts)
    moved = {
        sign: gap is not None and margin is not None and gap.beyond(sign) and margin.beyond(sign) for sign in (1, -1)
    }
    lifts = (arm.specific() and d.delta > 0) or moved[1]
    lowers = (d.n > 0 and d.significant() and d.delta < 0) or moved[-1]
    if lifts and lowers:
        return Verdict(3, NOT_SUPPORTED, f"compliance and the continuous outcomes disagree: {text}")
    if lowers:
        return Verdict(3, CONTRADICTED, f"scaling lowered multi-turn, moving it away from compliance: {text}")
    if lifts:
        return Verdict(3, SUPPORTED, f"scaling lifted multi-turn beyond its placebos: {text}")
    unplaced = d.n > 0 and d.significant() and arm.placebo_sets < MIN_PLACEBO_SETS
    sets = arm.placebo_sets
    if gap is not None and margin is not None and gap.verdict == margin.verdict == UNPLACED:
        unplaced, sets = True, gap.placebo_sets
    if unplaced:
        return Verdict(
            3,
            CANNOT_TEST,
            f"an effect, but only {sets} placebo sets ran, too few to place it (the rule needs "
            f"{MIN_PLACEBO_SETS}; rerun with --placebo 20): {text}",
        )
    if not continuous and d.before >= 1.0 and d.delta == 0:
        return Verdict(
            3, CANNOT_TEST, f"the DPO baseline already complies on every row, so nothing can lift it: {text}"
        )
    return Verdict(3, NOT_SUPPORTED, f"no lift beyond chance and placebo: {text}")


# --- claim 4 ---------------------------------------------------------------------------------------------------------

# Arms that move one model's units toward the other model's: the arms of the directional recipes (mean, patching,
# steering; interventions.recipes.Recipe.directional). If the units carry the behaviour change, such an arm moves
# compliance toward the other model: on DPO with the sign of SFT − DPO, on SFT with the sign of DPO − SFT. Ablation
# (scale 0) has no direction: it can show that the units matter, not that they carry the difference between the two
# models.
ABLATION = "scale 0.0"


def directional(arm_name: str) -> bool:
    """Whether a report's arm moves one model's units toward the other's (its recipe is directional).

    >>> directional("patch dpo<-sft"), directional("steer"), directional(ABLATION)
    (True, True, False)
    """
    recipe = recipe_of(arm_name)
    return recipe is not None and recipe.directional


def expected_sign(arm: ArmEvidence, behaviour: int) -> int:
    """The sign of Δ an arm should show if its units carry the change (``behaviour``: sign of DPO − SFT); 0: none.

    >>> d = Difference(30, 1.0, 0.8, -0.2, -0.3, -0.1, 0.01)
    >>> patch, scale = ArmEvidence("patch dpo<-sft", "dpo", d), ArmEvidence("scale 0.0", "dpo", d)
    >>> expected_sign(patch, -1), expected_sign(scale, -1)
    (1, 0)
    """
    if not directional(arm.name):
        return 0
    return behaviour if arm.model == "sft" else -behaviour


# claim 4 on the continuous outcome: a patch must close at least this share of the gap, at its 95% CI's low end
MIN_GAP_CLOSED = 0.10


def _gap_sentence(name: str, gap: OutcomeEvidence) -> str:
    """'patch dpo<-sft closes 12.0% [8.0, 16.0] of the SFT→DPO gap, at the 97th percentile of 20 matched placebo
    sets'."""

    def pct(x: float) -> str:
        return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}"

    said = _outcome_placed(gap, "matched ")
    placed = "with no placebo sets" if not said else (f"with {said}" if gap.drawn == 0 else f"at the {said}")
    return f"{name} closes {pct(gap.delta)}% [{pct(gap.ci_low)}, {pct(gap.ci_high)}] of the SFT→DPO gap, {placed}"


PATCH_RECIPE = "patch"  # the --edit recipe of claim 4's patch arms (patch dpo<-sft, patch sft<-dpo)


def is_patch(arm_name: str) -> bool:
    """Whether a report's arm is a patch arm (of :data:`PATCH_RECIPE`)."""
    recipe = recipe_of(arm_name)
    return recipe is not None and recipe.name == PATCH_RECIPE


def claim4_untestable(edits: Sequence[str], placebo: int) -> str | None:
    """One line saying that claim 4 cannot be tested on the gap closed (:func:`units_cause_by_gap`) by an A/B of these
    ``--edit`` recipes and ``--placebo`` sets, and what to pass instead; None where it can (said before anything runs).

    >>> claim4_untestable(["scale", "patch"], 20) is None
    True
    >>> claim4_untestable(["scale"], 10).split("; ")[1].split(" (")[0]
    'pass --edit scale,patch --placebo 19 or more'
    """
    lacking = [f"no patch arm (--edit {','.join(edits)})"] if PATCH_RECIPE not in edits else []
    lacking += [f"--placebo {placebo}"] if placebo < MIN_PLACEBO_SETS else []
    if not lacking:
        return None
    fixes = [f"--edit {','.join([*edits, PATCH_RECIPE])}"] if PATCH_RECIPE not in edits else []
    fixes += [f"--placebo {MIN_PLACEBO_SETS} or more"] if placebo < MIN_PLACEBO_SETS else []
    fallback = (
        " (without a patch arm it is judged on compliance, which needs SFT and DPO to differ on multi_turn)"
        if PATCH_RECIPE not in edits
        else ""
    )
    return (
        f"claim 4 (the units cause the change) cannot be tested with these options: its rule needs a patch arm with "
        f"at least {MIN_PLACEBO_SETS} placebo sets, and this run has {' and '.join(lacking)}; pass {' '.join(fixes)}"
        + fallback
    )


def units_cause_by_gap(arms: list[ArmEvidence], command: str) -> Verdict | None:
    """Claim 4 on the continuous outcome, where a patch arm (:func:`is_patch`) has one; None otherwise.

    The gap is the KL between the two models on the teacher-forced responses; patching the units with the other
    model's values closes a share of it (:mod:`interventions.outcomes`). Not supported: no gap to close (the
    models agree on those tokens: the unedited KL is 0 on every row). Cannot be tested: every patch arm's generations
    are broken, or none ran with :data:`MIN_PLACEBO_SETS` placebo sets. Supported: a patch closes the gap beyond its
    placebos (``moves beyond placebo``) with the low end of its 95% CI at :data:`MIN_GAP_CLOSED` or more, and no patch
    widens it beyond its placebos. Contradicted: patches only widen it beyond their placebos. Not supported:
    otherwise."""
    patched = [(a, g) for a in arms if is_patch(a.name) and (g := a.outcome("gap_closed")) is not None]
    if not patched:
        return None
    valid = [(a, g) for a, g in patched if not a.faults]
    if not valid:
        return Verdict(4, CANNOT_TEST, f"every patch arm's generations are broken: {patched[0][0].faults[0]}")
    if not any(math.isfinite(g.delta) for _, g in valid):
        return Verdict(
            4,
            NOT_SUPPORTED,
            "the two models agree on the teacher-forced tokens (KL 0 on every row): there is no SFT→DPO gap for "
            "the units to explain",
        )
    listing = "; ".join(_gap_sentence(a.name, g) for a, g in valid)
    placed = [(a, g) for a, g in valid if g.placebo_sets >= MIN_PLACEBO_SETS]
    if not placed:
        return Verdict(
            4,
            CANNOT_TEST,
            f"no patch arm ran with {MIN_PLACEBO_SETS} or more placebo sets; rerun with --placebo 20 ({command}): "
            f"{listing}",
        )
    status = gap_status([g for _, g in placed])
    if status == SUPPORTED:
        return Verdict(4, SUPPORTED, listing)
    if status == CONTRADICTED:
        return Verdict(4, CONTRADICTED, f"patching moves the models apart beyond placebo: {listing}")
    return Verdict(
        4,
        NOT_SUPPORTED,
        f"no patch closes {100 * MIN_GAP_CLOSED:.0f}% or more of the gap beyond its placebos: {listing}",
    )


def gap_status(placed: Sequence[OutcomeEvidence]) -> str:
    """Claim 4's rule on the gap closed by patches placed among enough placebo sets: supported when one closes it
    beyond its placebos with the low end of its 95% CI at :data:`MIN_GAP_CLOSED` or more and none widens it beyond
    theirs; contradicted when they only widen it; not supported otherwise."""
    closes = any(g.beyond(1) and g.ci_low >= MIN_GAP_CLOSED for g in placed)
    widens = any(g.beyond(-1) for g in placed)
    if closes and not widens:
        return SUPPORTED
    return CONTRADICTED if widens and not closes else NOT_SUPPORTED


# claim 4 at every k: the localize curve's points where no random set of their size was patched
NO_PLACEBO_AT_K = "no placebo at this k"


@dataclass(frozen=True)
class CurvePointEvidence:
    """One point of a ranking's localize curve in one direction (``direction``: its label, e.g. ``DPO <- SFT``): the
    gap closed by patching its top ``units`` with the other model's values, its 95% CI, and the gap closed by each
    random set of the same size (empty: no placebo at this k)."""

    k: str
    units: int
    direction: str
    f: float
    ci_low: float
    ci_high: float
    placebo: tuple[float, ...] = ()


@dataclass(frozen=True)
class KVerdict:
    """Claim 4 at one point of the curve: a status of :data:`STATUSES` or :data:`NO_PLACEBO_AT_K`, and why."""

    k: str
    units: int
    status: str
    reason: str


def units_cause_at_k(points: Sequence[CurvePointEvidence]) -> list[KVerdict]:
    """Claim 4 judged at every point of the curve of the paper's ranking (``probe localize``), beside its headline
    verdict at the A/B's units: the directions at a point are its two patch arms, each placed among the random sets of
    its size by :func:`interventions.evidence.outcome_verdict` (the same :data:`MIN_PLACEBO_SETS` and percentile), then
    :func:`gap_status`. Not supported: no gap to close. Cannot be tested: random sets there, but fewer than
    :data:`MIN_PLACEBO_SETS` in every direction. :data:`NO_PLACEBO_AT_K`: no random set of its size was patched (no
    verdict is made up).

    >>> p = CurvePointEvidence("2%", 40, "DPO <- SFT", 0.5, 0.3, 0.7, tuple([0.0] * 20))
    >>> [v.status for v in units_cause_at_k([p, CurvePointEvidence("10%", 200, "DPO <- SFT", 0.9, 0.8, 1.0)])]
    ['supported', 'no placebo at this k']
    """
    out = []
    grid = dict.fromkeys((p.units, p.k) for p in sorted(points, key=lambda p: p.units))  # two k may share a size
    for units, k in grid:
        here = [p for p in points if (p.units, p.k) == (units, k)]
        gaps = [(p.direction, _curve_gap(p)) for p in here]
        listing = "; ".join(_gap_sentence(direction, g) for direction, g in gaps)
        placed = [g for _, g in gaps if g.placebo_sets >= MIN_PLACEBO_SETS]
        if not any(math.isfinite(p.f) for p in here):
            status, listing = NOT_SUPPORTED, f"no SFT→DPO gap to close: {listing}"
        elif placed:
            status = gap_status(placed)
        elif any(p.placebo for p in here):
            status, listing = CANNOT_TEST, f"fewer than {MIN_PLACEBO_SETS} placebo sets at this k: {listing}"
        else:
            status = NO_PLACEBO_AT_K
        out.append(KVerdict(k, units, status, listing))
    return out


def _curve_gap(point: CurvePointEvidence) -> OutcomeEvidence:
    """A curve point as the gap-closed outcome of a patch arm, placed among its random sets."""
    sets = [v for v in point.placebo if math.isfinite(v)]
    percentile = placebo_compare(point.f, sets).percentile if sets else None
    ci = (point.ci_low, point.ci_high)
    verdict = outcome_verdict("gap_closed", point.f, ci, percentile, len(sets))
    return OutcomeEvidence("gap_closed", point.f, *ci, percentile, len(sets), verdict)


def units_cause(
    arms: list[ArmEvidence] | None, behaviour: Difference | None, command: str, eval_command: str
) -> Verdict:
    """Claim 4. Needs the behaviour change (DPO − SFT on multi_turn, from the evaluation) and the arms that move one
    model's units toward the other's (mean, patch both ways, steer), each against its placebos. Cannot be tested: the
    change is not significant (nothing to cause), or no arm has :data:`MIN_PLACEBO_SETS` placebo sets. Supported: an
    arm shows a specific effect (:meth:`ArmEvidence.specific`) in the direction of the other model, and none against
    it. Contradicted: specific effects only against it. Not supported: otherwise (ablation alone shows only that the
    units matter, and is reported beside it).

    Where a patch arm carries the continuous outcomes, the claim is judged on the gap it closes instead
    (:func:`units_cause_by_gap`), which needs no compliance difference between the models."""
    if not arms:
        return Verdict(4, NOT_RUN, "no ablation, mean, patching or steering arm on multi_turn", command)
    by_gap = units_cause_by_gap(arms, command)
    if by_gap is not None:
        return by_gap
    if behaviour is None:
        return Verdict(4, NOT_RUN, "no evaluation of the pair, so no behaviour change to explain", eval_command)
    if behaviour.n == 0:
        return Verdict(4, CANNOT_TEST, f"{NO_TARGET_ROWS}, so the behaviour change is unknown")
    if not behaviour.significant():
        return Verdict(
            4,
            CANNOT_TEST,
            f"SFT and DPO comply alike on multi_turn ({_difference(behaviour)}): "
            "there is no behaviour change for the units to cause",
        )
    placed = [a for a in arms if a.placebo_sets >= MIN_PLACEBO_SETS and not a.faults]
    if not placed:
        most = max(a.placebo_sets for a in arms)
        return Verdict(
            4,
            CANNOT_TEST,
            f"no arm ran with {MIN_PLACEBO_SETS} or more placebo sets (at most {most}); "
            f"rerun with --placebo 20: {command}",
        )
    sign = behaviour.sign()
    toward = [a.name for a in placed if a.specific() and expected_sign(a, sign) == a.effect.sign() != 0]
    against = [a.name for a in placed if a.specific() and expected_sign(a, sign) == -a.effect.sign() != 0]
    ablation = [a.name for a in placed if a.specific() and a.name == ABLATION]
    listing = "; ".join(f"{a.name} ({a.model}): {effect_sentence(a.effect, _placement(a))}" for a in placed)
    if toward and not against:
        return Verdict(
            4, SUPPORTED, f"{', '.join(toward)} moved compliance toward the other model beyond placebo: {listing}"
        )
    if against and not toward:
        return Verdict(
            4,
            CONTRADICTED,
            f"{', '.join(against)} moved compliance away from the other model beyond placebo: {listing}",
        )
    extra = " (ablation shows the units matter, not that they carry the SFT/DPO difference)" if ablation else ""
    return Verdict(4, NOT_SUPPORTED, f"no arm moved compliance toward the other model beyond placebo{extra}: {listing}")
