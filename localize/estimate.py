"""What a ``probe localize`` run costs, said before it starts: a range of minutes, from whole teacher-forced passes.

**The model of the cost** (the one place it is stated; docs/localize.md, "Speed", has the arithmetic):

* a **whole pass** runs one direction's rows (prompts and responses) through every block:
  :data:`TOKEN_CPU_SECONDS` CPU seconds a token at one thread, scaled by the model's parameters; the work is matrix
  products, so it is split over ``t`` threads at :func:`thread_speedup` (``1 + 0.8 (t - 1)``);
* an **arm** runs from its fork layer ``L`` (the lowest it patches) up: ``1 - L / n_layers`` of a whole pass; the
  random sets of the placebo band reach layer 0, so each is a whole pass;
* per direction, :data:`FIXED_PASSES`: the unedited model and the target, which is also the patch source (one pass
  for both); an engine call after the first runs the source again up to its highest patched layer (``extra``: the
  heads' call, and each wave of the band whose source values do not fit the memory kept for them);
* the **gradient pass** (both estimates of every unit, :mod:`access.relevance`): :data:`GRADIENT_PASSES` whole
  passes (the target's forward, the model's forward with autograd and the relevance rules, one backward per
  estimator over the embeddings' graph, and the float64 products per unit);
* the **greedy responses**: a pass over the prompts (the prefill), and each generated token as
  :data:`DECODE_TOKENS` prompt tokens (a decoding step reads every weight for a few rows' tokens);
* the **placebo band** is a range: under ``--placebo-design sequential`` the sets at the verdict points are drawn
  only until the verdict can no longer change (:mod:`localize.sequential`): from none (the curves alone fix the
  verdict) to every one (a ranking beats the band in every direction: all its readings need all the sets).

Calibrated on this project's 2-core AMD EPYC machine (Zen 3, AVX2, no GPU), one torch thread, 2026-11-29, under
other sessions' load (3-5 on 2 cores), so a quiet machine should be faster, by less than 1.5x: the default pair's
default run took 30.9 CPU-minutes for 175 whole passes in this count (4.6 ms a token); a shape twin of SmolLM2-135M
(its config, random weights) gave 12.8 CPU-seconds a whole pass of 2,242 tokens (5.7 ms) and 4.4 of them for the
gradient pass; a plain matrix product of a pass's shapes ran at 57-63 GFLOP/s on one thread, which puts a pass's 477
GFLOP of products alone at 8 s. The speed-up of a second thread (0.8) is assumed, not measured on a quiet machine.
On another machine the seconds are scaled by its pace against that one (:func:`core.pace.machine_pace`).

Example:
    >>> fork_fraction(((2, 5),), 10), fork_fraction((), 10)
    (0.8, 0.0)
    >>> from core.pace import REFERENCE_PARAMETERS, machine_pace
    >>> round(pass_seconds(10_000, parameters=REFERENCE_PARAMETERS, threads=1) / machine_pace(), 1)   # the reference
    46.0
    >>> thread_speedup(2)
    1.8
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.pace import scale

TOKEN_CPU_SECONDS = 4.6e-3  # one whole teacher-forced pass, per token, one thread, the reference model (module doc)
GRADIENT_PASSES = 4.5  # the gradient pass over a whole pass of the same rows (4.4 on the shape twin; module doc)
FIXED_PASSES = 2.0  # per direction: the unedited model; the target, which is also the patch source
DECODE_TOKENS = 11.0  # a generated token's cost in prompt tokens (the default run: 37 CPU-s for both generations)
EXTRA_THREAD = 0.8  # what each torch thread beyond the first adds, in threads' worth (assumed: module doc)


def thread_speedup(threads: int) -> float:
    """How many times faster ``threads`` torch threads run a pass than one (on as many cores)."""
    return 1.0 + EXTRA_THREAD * (max(1, threads) - 1)


def threads_used() -> int:
    """The torch threads a pass runs on, at most one per core."""
    import torch

    return max(1, min(torch.get_num_threads(), os.cpu_count() or 1))


def pass_seconds(tokens: float, *, parameters: float, threads: int) -> float:
    """Seconds of one whole teacher-forced pass over ``tokens`` tokens (prompts and responses), on CPU."""
    return tokens * TOKEN_CPU_SECONDS * scale(parameters) / thread_speedup(threads)


def fork_fraction(layers: Iterable[tuple[int, int]], n_layers: int) -> float:
    """The share of a whole pass an arm patching ``(layer, unit)`` units runs (0 for no unit)."""
    lowest = min((layer for layer, _ in layers), default=None)
    return 0.0 if lowest is None else 1.0 - lowest / n_layers


@dataclass(frozen=True)
class BandCost:
    """One direction's placebo band: ``fixed`` random sets always drawn (every set, or the points no verdict reads),
    ``sequential`` sets drawn only while the verdict may change (none to all of them), and ``reruns`` source passes
    the waves add at most (their source values not kept)."""

    fixed: int = 0
    sequential: int = 0
    reruns: int = 0


@dataclass
class Estimate:
    """Seconds per phase with every placebo set drawn, what the sequential band may spare, and each direction's
    arms and whole passes."""

    seconds: dict[str, float] = field(default_factory=dict)
    spared: float = 0.0  # seconds the sequential band spares where the curves alone fix the verdict
    passes: dict[str, tuple[float, float]] = field(default_factory=dict)  # fewest, most
    arms: dict[str, int] = field(default_factory=dict)
    threads: int = 1

    @property
    def total(self) -> float:
        """The most: every placebo set drawn."""
        return sum(self.seconds.values())

    @property
    def least(self) -> float:
        return self.total - self.spared

    def line(self) -> str:
        parts = ", ".join(f"{name} {_clock(s)}" for name, s in self.seconds.items())
        passes = ", ".join(
            f"{d}: {self.arms[d]} arms, {_span(f'{low:.1f}', f'{high:.1f}')} whole passes"
            for d, (low, high) in self.passes.items()
        )
        span = _span(_clock(self.least), _clock(self.total))
        return f"estimate {span} at {self.threads} thread(s) on a quiet CPU ({parts}; {passes})"


def estimate(
    directions: dict[str, list[float]],
    tokens: float,
    prompt_tokens: float,
    new_tokens: float,
    *,
    parameters: float,
    gradient: bool,
    generate: bool,
    band: dict[str, BandCost] | None = None,
    extra: dict[str, float] | None = None,
    threads: int | None = None,
) -> Estimate:
    """The run's estimate (module doc): ``directions`` maps each direction to its arms' fork fractions (the band's
    sets apart, in ``band``), ``tokens`` counts one direction's teacher-forced tokens, ``prompt_tokens`` and
    ``new_tokens`` its generation; ``extra``: whole passes beyond the arms (the source of a later engine call)."""
    used = threads_used() if threads is None else threads
    out = Estimate(threads=used)
    one = pass_seconds(tokens, parameters=parameters, threads=used)
    for name, fractions in directions.items():
        cost = (band or {}).get(name, BandCost())
        passes = FIXED_PASSES + sum(fractions) + (extra or {}).get(name, 0.0) + (GRADIENT_PASSES if gradient else 0.0)
        most = passes + cost.fixed + cost.sequential + cost.reruns
        out.passes[name], out.arms[name] = (most - cost.sequential - cost.reruns, most), len(fractions)
        if generate:
            out.seconds[f"{name} responses"] = one * (prompt_tokens + DECODE_TOKENS * new_tokens) / max(tokens, 1.0)
        if gradient:
            out.seconds[f"{name} gradient"] = GRADIENT_PASSES * one
        out.seconds[f"{name} passes"] = (passes - (GRADIENT_PASSES if gradient else 0.0) + cost.fixed) * one
        if cost.sequential:
            out.seconds[f"{name} placebo"] = (cost.sequential + cost.reruns) * one
            out.spared += (cost.sequential + cost.reruns) * one
    return out


def _span(low: str, high: str) -> str:
    return high if low == high else f"{low} to {high}"


def _clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
