"""Estimates follow the machine: every CPU estimate is the reference machine's pace times this machine's
(:func:`core.pace.machine_pace`: the reference rate over the rate measured here), or ``$PROBE_MACHINE_PACE``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

import core.pace
from core.errors import ProbeError
from core.flops import SMOLLM2_135M, Weights
from core.pace import PACE_ENV, REFERENCE_PARAMETERS, REFERENCE_RATE, machine_pace

# every kind of CPU estimate, for the reference model
ESTIMATES: dict[str, Callable[[], float]] = {
    "recording": lambda: core.pace.prompt_seconds(10_000, models=2, parameters=REFERENCE_PARAMETERS),
    "generation": lambda: core.pace.generation_seconds(5_000, 2_000, parameters=REFERENCE_PARAMETERS),
    "evaluation": lambda: core.pace.batched_seconds([[50] * 64, [60] * 30], 64, parameters=REFERENCE_PARAMETERS),
    "attribution": lambda: core.pace.gradient_seconds(10_000, parameters=REFERENCE_PARAMETERS),
    "outcomes": lambda: _outcomes(),
    "localize": lambda: _localize(),
}


def _outcomes() -> float:
    from interventions.outcomes import outcome_seconds

    return outcome_seconds(24, 36, 370.0, 32, 16, REFERENCE_PARAMETERS)


def _localize() -> float:
    from localize.estimate import pass_seconds

    return pass_seconds(10_000, parameters=REFERENCE_PARAMETERS, threads=2)


@pytest.fixture
def _pace_unset(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``$PROBE_MACHINE_PACE`` (the suite sets 1), and the pace measured anew."""
    monkeypatch.delenv(PACE_ENV)
    machine_pace.cache_clear()
    yield
    machine_pace.cache_clear()


def _at(pace: float) -> dict[str, float]:
    machine_pace.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PACE_ENV, str(pace))
        figures = {name: estimate() for name, estimate in ESTIMATES.items()}
    machine_pace.cache_clear()
    return figures


def test_every_cpu_estimate_is_the_reference_figure_times_the_machines_pace() -> None:
    reference, slower, faster = _at(1), _at(2.5), _at(0.5)
    for name in ESTIMATES:
        assert slower[name] == pytest.approx(2.5 * reference[name]), name
        assert faster[name] == pytest.approx(0.5 * reference[name]), name


@pytest.mark.usefixtures("_pace_unset")
def test_the_pace_is_the_reference_rate_over_the_rate_measured_here(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[tuple[int | None, float]] = []

    def half_the_reference(weights: Weights, threads: int | None = None, seconds: float = 3.0) -> float:
        assert weights == SMOLLM2_135M  # the reference model's block
        measured.append((threads, seconds))
        return REFERENCE_RATE / 2

    monkeypatch.setattr(core.pace, "matmul_rate", half_the_reference)
    assert machine_pace() == 2.0
    assert machine_pace() == 2.0 and len(measured) == 1  # measured once per process
    assert measured[0][0] in (1, 2) and measured[0][1] == core.pace.PACE_SECONDS  # the reference's threads, briefly


@pytest.mark.usefixtures("_pace_unset")
def test_the_pace_measured_on_this_machine_is_a_real_rate() -> None:
    """The real measurement: a finite pace, in the range of CPUs a laptop or server has (0.05x-20x the reference)."""
    pace = machine_pace()
    assert math.isfinite(pace) and 0.05 < pace < 20, pace
    assert core.pace.prompt_seconds(1_000, models=1, parameters=REFERENCE_PARAMETERS) == pytest.approx(
        1_000 * core.pace.PROMPT_SECONDS * pace
    )


@pytest.mark.parametrize("said", ["abc", "0", "-1", "nan", "inf", ""])
def test_a_pace_that_is_not_a_positive_number_is_one_line_naming_the_variable(
    said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PACE_ENV, said)
    machine_pace.cache_clear()
    try:
        with pytest.raises(ProbeError) as info:
            machine_pace()
    finally:
        machine_pace.cache_clear()
    message = str(info.value)
    assert message.startswith(f"{PACE_ENV}: expected a positive number") and repr(said) in message
    assert "\n" not in message
