"""Which layers an analysis looks at, and why: the :class:`Window` every output reports.

The paper reports the SFT/DPO difference concentrated in layers 12–31 of a 32-layer
model, i.e. the last 20/32 of its depth. Three cases:

1. no ``--layers`` (``spec=None``): the *default window*, the paper's window scaled by
   depth: layers ``floor(12·L/32 + 0.5)`` to ``L-1`` of an L-layer model (12/32 of
   depth rounded half *up*, not Python's half-to-even ``round``): 12-31 for L=32,
   11-29 for L=30, 11-27 for L=28, 2-3 for L=4;
2. an explicit ``--layers``: used as given; a layer outside the model is a
   :class:`ProbeError` naming the model's depth (nothing is clipped silently);
3. either way, when the recording stored only some of those layers, the window is
   cut to them, and the cut is a warning (``summary.json`` and the terminal) and part
   of the reason.

Example:
    >>> window = resolve_window(None, n_model_layers=30, stored=list(range(30)))
    >>> print(window.describe())
    layers 11-29 — default window: the last 20/32 of depth, layers 11-29 of a 30-layer model
    (the paper's 12-31 scaled by depth)
    >>> resolve_window("12-20", n_model_layers=30, stored=list(range(30))).reason
    '--layers 12-20 (given)'
    >>> resolve_window("12-31", n_model_layers=30, stored=list(range(30)))
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --layers 12-31: the model has 30 layers (0-29); layer 30 is outside it
    (leave --layers out for the default window 11-29, the paper's 12-31 scaled by depth)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from access.hook_points import layer_ranges, parse_layers
from core.errors import ProbeError
from core.records import SKIP

if TYPE_CHECKING:
    from probes.store import RunReader


def format_layers(layers: list[int]) -> str:
    """Compact ranges: [12, 13, 14, 20] -> '12-14,20'.

    >>> format_layers([0, 1, 2, 5, 7, 8])
    '0-2,5,7-8'
    """
    runs: list[list[int]] = []
    for layer in sorted(layers):
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)


def model_depth(run: RunReader, stored: Iterable[int]) -> int:
    """The model's depth from the run's recorded model info, else the highest stored layer + 1 (0 if none)."""
    declared = run.model_info("sft").get("n_layers")
    if isinstance(declared, int) and declared > 0:
        return declared
    return max(stored, default=-1) + 1


def default_window(n_model_layers: int) -> list[int]:
    """The paper's 12-31 of 32 scaled by depth: ``(12·L + 16) // 32`` (= floor(12·L/32 + 0.5)) to ``L-1``.

    >>> [format_layers(default_window(n)) for n in (4, 12, 28, 30, 32, 80)]
    ['2-3', '5-11', '11-27', '11-29', '12-31', '30-79']
    """
    return list(range((12 * n_model_layers + 16) // 32, n_model_layers))


@dataclass(frozen=True)
class Window:
    """The analysed layers, the ``--layers`` given (None: the default), why these layers, and the model's depth.

    ``warnings`` (not part of the record) are the cuts to say out loud.

    >>> from core.records import from_json, to_json
    >>> to_json(Window([3, 4], "3-4", "--layers 3-4 (given)", 8, ("cut",)))
    {'layers': [3, 4], 'spec': '3-4', 'reason': '--layers 3-4 (given)', 'n_model_layers': 8}
    >>> from_json(Window, _)
    Window(layers=[3, 4], spec='3-4', reason='--layers 3-4 (given)', n_model_layers=8, warnings=())
    """

    layers: list[int]
    spec: str | None
    reason: str
    n_model_layers: int
    warnings: tuple[str, ...] = field(default=(), metadata=SKIP)

    def describe(self) -> str:
        """One line: the layers, then why."""
        return f"layers {format_layers(self.layers)} — {self.reason}"


def resolve_window(spec: str | None, n_model_layers: int, stored: list[int]) -> Window:
    """The window for ``--layers spec`` (None or blank: the default) on this model and recording; see the module doc."""
    if n_model_layers < 1:
        raise ProbeError(
            "the model's depth is unknown (no n_layers in the run and no stored layer); cannot choose a layer window"
        )
    text = (spec or "").strip()
    if text:
        requested = _explicit(text, n_model_layers)
        reason, label = f"--layers {text} (given)", f"--layers {text}"
    else:
        requested = default_window(n_model_layers)
        span = format_layers(requested)
        reason = (
            f"default window: the last 20/32 of depth, layers {span} of a {n_model_layers}-layer model (the "
            "paper's 12-31 scaled by depth)"
        )
        label = f"default window {span}"
    in_run = set(stored)
    recorded = [i for i in requested if i in in_run]
    if not recorded:
        raise ProbeError(
            f"{label}: none of layers {format_layers(requested)} was recorded in this run (recorded: "
            f"{format_layers(stored) or 'none'})"
        )
    warnings: tuple[str, ...] = ()
    if len(recorded) < len(requested):
        warnings = (
            f"{label}: only layers {format_layers(recorded)} of {format_layers(requested)} were recorded; "
            "analysing those",
        )
        reason += f"; cut to {format_layers(recorded)}, the layers recorded"
    return Window(recorded, text or None, reason, n_model_layers, warnings)


def _explicit(spec: str, n_model_layers: int) -> list[int]:
    """``parse_layers`` against the model; a layer outside it is an error that names the model's depth."""
    # a malformed spec fails here
    outside = [max(lo, n_model_layers) for lo, hi in layer_ranges(spec, n_model_layers) if hi >= n_model_layers]
    if not outside:
        return parse_layers(spec, n_model_layers)
    raise ProbeError(
        f"--layers {spec}: the model has {n_model_layers} layers (0-{n_model_layers - 1}); "
        f"layer {outside[0]} is outside it (leave --layers out for the default window "
        f"{format_layers(default_window(n_model_layers))}, the paper's 12-31 scaled by depth)"
    )
