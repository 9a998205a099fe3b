"""From the passes to the report: every curve point with its CI, the placebo band, each ranking's summaries, the
profile, both verdicts (:mod:`localize.summaries`, :mod:`localize.verdicts`).

Example:
    >>> estimated_curve(np.array([[0.5, 0.25], [0.125, 0.0]]), np.array([0, 2, 1, 3]), [0, 1, 2, 4]).tolist()
    [0.0, 0.5, 0.625, 0.875]
"""

from __future__ import annotations

import platform
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from access.relevance import ESTIMATORS
from localize.measured import ZERO
from localize.records import (
    CurvePoint,
    DirectionInfo,
    LocalizeReport,
    PlaceboPoint,
    ProfileRow,
    RankingSummary,
    Stat,
    VerdictRecord,
)
from localize.sequential import verdict_with
from localize.summaries import Band, Interval, Resampled, cmd, cpr, cpr_log, first_reaching, pearson
from localize.verdicts import VERDICT_POINTS, RankingEvidence, WindowResult, window_carries_change

if TYPE_CHECKING:
    from localize.measured import Measured
    from localize.passes import RowGap

PRINTED_POINTS = VERDICT_POINTS  # the f(k) every summary carries: 0.2% and 2%


def estimated_curve(closed: np.ndarray, order: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """The estimates' prediction of a ranking's curve: the summed estimated shares closed of its top ``sizes`` units
    (``closed`` ``[layers, units]``, ``order`` flat indices)."""
    running = np.concatenate([[0.0], np.cumsum(closed.reshape(-1)[order])])
    return np.asarray(running[list(sizes)])


def _resampled(m: Measured) -> Resampled:
    return Resampled(len(m.plan.rows), m.plan.config.n_bootstrap, m.plan.config.seed)


def ranking_evidence(m: Measured) -> list[RankingEvidence]:
    """What the ranking verdict reads of every ranking in every direction, without the placebo band (which the
    sequential band draws after it, :mod:`localize.band`)."""
    resampled = _resampled(m)
    return [
        _ranking(m, resampled, m.gaps[d.name], ranking, d.name)[2]
        for d in m.directions
        for ranking in m.plan.config.ranking_list
    ]


def assemble(m: Measured) -> LocalizeReport:
    """The report of one run (module doc)."""
    plan = m.plan
    resampled = _resampled(m)
    points, summaries, evidence = [], [], []
    for direction in m.directions:
        gaps = m.gaps[direction.name]
        for ranking in plan.config.ranking_list:
            curve, summary, proof = _ranking(m, resampled, gaps, ranking, direction.name)
            points += curve
            summaries.append(summary)
            evidence.append(proof)
    placebo = [p for d in m.directions for p in _placebo(m, d.name)]
    profile = [row for d in m.directions for row in _profile(m, resampled, d.name)]
    return LocalizeReport(
        run_dir=str(plan.run_dir),
        out_dir=str(plan.out.root),
        capability=plan.config.capability,
        hook=plan.config.hook,
        unit="head" if plan.shape.group > 1 else "unit",
        n_layers=plan.shape.n_layers,
        units_per_layer=plan.shape.units_per_layer,
        total_units=plan.shape.total,
        split=plan.split,
        row_ids=list(plan.row_ids),
        window=list(plan.window),
        directions=_directions(m),
        points=points,
        placebo=placebo,
        summaries=summaries,
        profile=profile,
        ranking_verdict=_ranking_verdict(m, evidence),
        claim_1c=_claim_1c(m, profile),
        planted=[list(u) for u in plan.planted],
        settings=_settings(plan.config),
        seconds=dict(m.seconds),
        estimate_s=m.estimate_s,
        estimate_least_s=m.estimate_least_s,
        machine=_machine(),
        warnings=list(m.warnings),
    )


def _ranking(
    m: Measured, resampled: Resampled, gaps: dict[Hashable, RowGap], ranking: str, direction: str
) -> tuple[list[CurvePoint], RankingSummary, RankingEvidence]:
    """One ranking's points (k = 0 first), its summary and the verdict's evidence."""
    from localize.rankings import RANKINGS

    plan, total = m.plan, m.plan.shape.total
    keys = [ZERO, *(("curve", ranking, p.label) for p in plan.points)]
    sizes = [0, *(plan.units(p) for p in plan.points)]
    labels = ["0", *(p.label for p in plan.points)]
    values, samples = zip(*(resampled.gap(gaps[k]) for k in keys), strict=True)
    estimates = {e: _estimated(m, e, ranking, direction, sizes) for e in ESTIMATORS if direction in m.attribution}
    points = [
        CurvePoint(
            ranking,
            direction,
            label,
            size,
            size / total,
            float(v),
            *_ci(v, s)[1:],
            {e: float(c[i]) for e, c in estimates.items()},
        )
        for i, (label, size, v, s) in enumerate(zip(labels, sizes, values, samples, strict=True))
    ]
    x = np.array(sizes[1:]) / total
    f, f_samples = np.array(values[1:]), np.stack(samples[1:], axis=1)
    log_area, log_samples = float(cpr_log(x, f)), cpr_log(x, f_samples)
    summary = RankingSummary(
        ranking,
        RANKINGS[ranking].label,
        direction,
        _stat(float(cpr(x, f)), cpr(x, f_samples)),
        _stat(float(cmd(x, f)), cmd(x, f_samples)),
        _stat(log_area, log_samples),
        first_reaching(sizes[1:], f, 0.5),
        first_reaching(sizes[1:], f, 0.8),
        {p.k: p.f for p in points if p.k in PRINTED_POINTS},
        {e: pearson(c[1:], f) for e, c in estimates.items()},
        m.sources[ranking],
    )
    evidence = RankingEvidence(ranking, direction, log_area, log_samples, dict(summary.f_at), {})
    return points, summary, evidence


def _estimated(m: Measured, estimator: str, ranking: str, direction: str, sizes: list[int]) -> np.ndarray:
    from localize.rankings import grouped

    closed = grouped(m.attribution[direction].closed(estimator, m.plan.config.hook), m.plan.shape.group)
    return estimated_curve(closed, m.orders[(ranking, direction)], sizes)


def _ci(value: float, samples: np.ndarray) -> tuple[float, float, float]:
    interval = Interval.of(float(value), samples)
    return interval.value, interval.ci_low, interval.ci_high


def _stat(value: float, samples: np.ndarray) -> Stat:
    return Stat(*_ci(value, samples))


def _drawn(m: Measured, direction: str, label: str) -> int:
    return m.placebo_drawn.get((direction, label), m.plan.config.placebo)


def _bands(m: Measured) -> dict[tuple[str, str], list[float]]:
    """Each direction's random sets' f at each placebo point: the sets drawn (every one but under the sequential
    band, :mod:`localize.band`)."""
    from localize.band import values_at

    return {
        (d.name, p.label): values_at(m, d.name, p.label, _drawn(m, d.name, p.label))
        for d in m.directions
        for p in m.plan.placebo_points
    }


def _ranking_verdict(m: Measured, evidence: list[RankingEvidence]) -> VerdictRecord:
    """The ranking verdict on the band as drawn; where the sequential band stopped early, the verdict every
    completion of its undrawn sets gives (:func:`localize.sequential.settled_verdict`), and how many were drawn."""
    from localize.sequential import drawn_line, read_cells, settled_verdict

    n_sets, bands = m.plan.config.placebo, _bands(m)
    read = read_cells([d.name for d in m.directions], [p.label for p in m.plan.placebo_points], n_sets)
    short = {cell: len(bands[cell]) for cell in read if len(bands[cell]) < n_sets}
    if not short:
        return VerdictRecord(**vars(verdict_with(evidence, bands)))
    verdict = settled_verdict(evidence, {cell: bands[cell] for cell in read}, n_sets)
    return VerdictRecord(verdict.verdict, f"{verdict.reason}; {drawn_line(short, n_sets)}")


def _placebo(m: Measured, direction: str) -> list[PlaceboPoint]:
    out = []
    bands = _bands(m)
    for point in m.plan.placebo_points:
        band = Band.of(bands[(direction, point.label)])
        size = m.plan.units(point)
        out.append(
            PlaceboPoint(
                direction,
                point.label,
                size,
                size / m.plan.shape.total,
                band.values,
                band.p01,
                band.p05,
                band.p50,
                band.p95,
                band.p99,
                m.plan.config.placebo - len(band.values),
            )
        )
    return out


def _profile(m: Measured, resampled: Resampled, direction: str) -> list[ProfileRow]:
    rows = []
    for arm in [*m.profile, *m.heads]:
        gap = m.gaps[direction].get(("profile", arm.label))
        if gap is None:
            continue
        value, samples = resampled.gap(gap)
        _, low, high = _ci(value, samples)
        rows.append(
            ProfileRow(
                direction, arm.label, arm.kind, arm.sublayer, list(arm.layers), arm.head, value, low, high, arm.name
            )
        )
    return rows


def _claim_1c(m: Measured, profile: list[ProfileRow]) -> VerdictRecord:
    from localize.profile import WINDOW

    results = [WindowResult(r.direction, r.f, r.ci_low, r.ci_high) for r in profile if r.name == WINDOW]
    verdict = window_carries_change(results, len(m.plan.window), m.plan.shape.n_layers)
    return VerdictRecord(verdict.verdict, verdict.reason)


def _directions(m: Measured) -> list[DirectionInfo]:
    out = []
    for d in m.directions:
        zero = m.gaps[d.name][ZERO]
        out.append(
            DirectionInfo(
                d.name, d.label, d.meaning, m.responses[d.name], float(np.mean(zero.kl_unedited)), len(zero.kl)
            )
        )
    return out


def _settings(config: object) -> dict[str, object]:
    from dataclasses import fields
    from pathlib import Path

    return {f.name: (str(v) if isinstance(v := getattr(config, f.name), Path) else v) for f in fields(config)}  # type: ignore[arg-type]


def _machine() -> str:
    import os

    import torch

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)"
    )
