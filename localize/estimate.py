"""What a ``probe localize`` run costs, said before it starts: passes, tokens and seconds at the measured CPU pace.

One teacher-forced pass runs every row (prompt and response) through the blocks from the arm's fork layer up (the
lowest layer it patches): a fraction ``1 - fork / n_layers`` of a whole pass. Per direction the engine also runs the
target once, the unedited model once and the patch source once (up to its highest patched layer), and the gradient
pass costs :data:`GRADIENT_PASSES` whole passes (the target's forward, the model's forward with autograd, one backward
per estimator). The greedy responses cost one generation per direction (:func:`core.pace.generation_seconds`).
docs/localize.md has the arithmetic for the default pair and the issue's full design.

Example:
    >>> fork_fraction(((2, 5),), 10), fork_fraction((), 10)
    (0.8, 0.0)
    >>> round(pass_seconds(10_000, parameters=REFERENCE_PARAMETERS), 1)
    13.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core.pace import PROMPT_SECONDS, REFERENCE_PARAMETERS, generation_seconds

# The target's forward, the model's forward with autograd and one backward per estimator, over a plain forward of the
# same rows: 4.46 (SmolLM2-135M, 4 held-out rows, one thread, this project's 2-core machine at load average 9-14,
# 2026-11-29; a ratio, so the load mostly cancels: docs/localize.md).
GRADIENT_PASSES = 4.5
FIXED_PASSES = 3.0  # per direction: the target, the unedited model, the patch source


def pass_seconds(tokens: float, *, parameters: float) -> float:
    """Seconds of one whole teacher-forced pass over ``tokens`` tokens (prompts and responses), on CPU."""
    return tokens * PROMPT_SECONDS * parameters / REFERENCE_PARAMETERS


def fork_fraction(layers: Iterable[tuple[int, int]], n_layers: int) -> float:
    """The share of a whole pass an arm patching ``(layer, unit)`` units runs (0 for no unit)."""
    lowest = min((layer for layer, _ in layers), default=None)
    return 0.0 if lowest is None else 1.0 - lowest / n_layers


@dataclass
class Estimate:
    """Seconds per phase, and the passes each direction runs (whole-pass equivalents)."""

    seconds: dict[str, float] = field(default_factory=dict)
    passes: dict[str, float] = field(default_factory=dict)
    arms: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def line(self) -> str:
        parts = ", ".join(f"{name} {_clock(s)}" for name, s in self.seconds.items())
        passes = ", ".join(f"{d}: {self.arms[d]} arms, {p:.1f} whole passes" for d, p in self.passes.items())
        return f"estimate {_clock(self.total)} ({parts}; {passes})"


def estimate(
    directions: dict[str, list[float]],
    tokens: float,
    prompt_tokens: float,
    new_tokens: float,
    *,
    parameters: float,
    gradient: bool,
    generate: bool,
) -> Estimate:
    """The run's estimate: ``directions`` maps each direction to its arms' fork fractions, ``tokens`` counts one
    direction's teacher-forced tokens, ``prompt_tokens``/``new_tokens`` its generation."""
    out = Estimate()
    one = pass_seconds(tokens, parameters=parameters)
    for name, fractions in directions.items():
        passes = FIXED_PASSES + sum(fractions)
        out.passes[name], out.arms[name] = passes + (GRADIENT_PASSES if gradient else 0.0), len(fractions)
        if generate:
            out.seconds[f"{name} responses"] = generation_seconds(prompt_tokens, new_tokens, parameters=parameters)
        if gradient:
            out.seconds[f"{name} gradient"] = GRADIENT_PASSES * one
        out.seconds[f"{name} passes"] = passes * one
    return out


def _clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
