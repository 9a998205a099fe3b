"""Which layers an analysis looks at: the requested window, clipped to the model and the recording.

The paper reports the SFT/DPO difference concentrated in layers 12–31 of a 32-layer
model, so that is the default window. Three things can shrink it, and each is said
out loud (a warning in ``summary.json`` and on the terminal), never done silently:

1. the model has fewer layers than the window reaches: the window is clipped;
2. the model ends before the *default* window starts (a small demo model): the
   default is scaled to the same fraction of depth (12/32 onwards, i.e. the last
   62.5% of layers);
3. the recording stored only some layers: the window is cut to those.

A window entirely outside the model (other than the default) is a user mistake.

Example:
    >>> resolve_window("12-31", n_model_layers=16, stored=list(range(16)))
    ([12, 13, 14, 15], ['--layers 12-31: the model has 16 layers (0-15); clipped to 12-15'])
"""

from __future__ import annotations

from analysis.config import DEFAULT_LAYERS
from core.errors import ProbeError
from probes.hook_points import parse_layers

_DEFAULT_START_FRACTION = 12 / 32


def format_layers(layers: list[int]) -> str:
    """Compact ranges: [12, 13, 14, 20] -> '12-14,20'.

    >>> format_layers([0, 1, 2, 5, 7, 8])
    '0-2,5,7-8'
    """
    parts: list[str] = []
    start = prev = None
    for layer in sorted(layers):
        if start is None:
            start = prev = layer
        elif layer == prev + 1:
            prev = layer
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = layer
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


def resolve_window(spec: str | None, n_model_layers: int, stored: list[int]) -> tuple[list[int], list[str]]:
    """The layers to analyse and the warnings to show; :class:`ProbeError` if none remain."""
    warnings: list[str] = []
    label = spec if spec is not None else "all"
    model = set(range(n_model_layers))
    if spec is None or spec.strip().lower() in ("", "all"):
        requested = sorted(model)
    else:
        requested = parse_layers(spec, max(n_model_layers, 4096))
    inside = [i for i in requested if i in model]
    if not inside:
        if spec == DEFAULT_LAYERS and n_model_layers > 0:
            start = min(n_model_layers - 1, round(_DEFAULT_START_FRACTION * n_model_layers))
            inside = list(range(start, n_model_layers))
            warnings.append(
                f"--layers {spec} (default): the model has only {n_model_layers} layers; "
                f"using the same fraction of depth instead: {format_layers(inside)}"
            )
        else:
            raise ProbeError(f"--layers {label}: outside the model, which has layers 0-{n_model_layers - 1}")
    elif len(inside) < len(requested):
        warnings.append(
            f"--layers {label}: the model has {n_model_layers} layers (0-{n_model_layers - 1}); clipped to {format_layers(inside)}"
        )
    recorded = [i for i in inside if i in set(stored)]
    if not recorded:
        raise ProbeError(
            f"--layers {label}: none of layers {format_layers(inside)} was recorded in this run (recorded: {format_layers(stored) or 'none'})"
        )
    if len(recorded) < len(inside):
        warnings.append(f"--layers {label}: only layers {format_layers(recorded)} of {format_layers(inside)} were recorded; analysing those")
    return recorded, warnings
