"""The continuous outcomes of an A/B arm by name, one :class:`Outcome` row each: torch-free, so that reading a report
(:mod:`interventions.results`, :mod:`interventions.report`, the study) reads the labels and the verdict floors here.

A row says what :mod:`access.outcomes` measured for it (the unedited and edited per-row arrays of
:class:`~access.outcomes.ArmOutcomes`), how Δ is taken from them (a difference of means, or for a ratio
``1 − mean(after) / mean(before)``), its name in tables and the smallest Δ that counts
(:func:`interventions.evidence.outcome_verdict`). :func:`interventions.outcome_runs.outcome_results` computes every
row for every arm, in the order of :data:`OUTCOMES`. A new outcome is one row here (plus its tests), on arrays
``ArmOutcomes`` holds.

Example:
    >>> OUTCOMES["gap_closed"].ratio, OUTCOMES["kl"].relative, OUTCOMES["margin_change"].floor
    (True, True, 0.1)
    >>> outcome_label("margin_change"), outcome_label("from a newer toolkit")
    ('DPO margin, nats', 'from a newer toolkit')
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """One continuous outcome of an arm.

    Args:
        name: its key in ``ab_report.json`` (``OutcomeResult.outcome``).
        label: its name in tables.
        floor: the smallest |Δ| that counts, in its own units (fixed 2026-11-27 before any default-pair outcome was
            read): below it the verdict is ``no effect``.
        before: the :class:`~access.outcomes.ArmOutcomes` array of the unedited model, one value per row.
        after: the array of the edited model.
        ratio: Δ = 1 − mean(after) / mean(before) (the report's ``before`` 0, ``after`` Δ), shown as a percentage;
            else Δ = mean(after) − mean(before).
        relative: the floor is a share of the mean unedited value (``before``), not an absolute amount.
    """

    name: str
    label: str
    floor: float
    before: str
    after: str
    ratio: bool = False
    relative: bool = False


# 1% of the SFT/DPO gap; 1% of the unedited KL (read as the gap closed, the same statistic); 0.01 nats per reference
# token; 0.1 nats of a DPO pair's summed margin
OUTCOMES: dict[str, Outcome] = {
    outcome.name: outcome
    for outcome in (
        Outcome("gap_closed", "gap closed", 0.01, "kl_unedited", "kl", ratio=True),
        Outcome("kl", "KL(target ‖ model), nats", 0.01, "kl_unedited", "kl", relative=True),
        Outcome("reference_change", "reference log-prob/token, nats", 0.01, "reference_unedited", "reference_logprob"),
        Outcome("margin_change", "DPO margin, nats", 0.1, "margin_unedited", "margin"),
    )
}


def outcome_label(name: str) -> str:
    """The outcome's name in tables (its key, for an outcome this toolkit does not know)."""
    outcome = OUTCOMES.get(name)
    return name if outcome is None else outcome.label
