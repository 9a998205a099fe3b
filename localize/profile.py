"""The causal layer and component profile: how much of the gap each sub-layer, each window of them and each head
carries.

Each arm patches whole components with the other model's values (:mod:`localize.passes`), every unit of them:

* **per sub-layer**: the attention output (``attn_out``) of one window of ``width`` layers, and the MLP output
  (``mlp_out``) of the same layers (``width`` 1: each layer alone);
* **windows**: the depth-scaled window (the paper's 12-31 of 32; 11-29 of 30) with both sub-layers, its complement,
  every attention output, every MLP output, and every sub-layer of every layer;
* **heads**: each head of the attention layers that close the most on their own (each head's output before the
  output projection, ``attn_z``).

Sub-layers do not add up: a patch changes what the layers above it receive, so one patch can undo another.

Example:
    >>> [(a.label, a.sublayer, a.layers) for a in profile_arms(6, 2, window=[2, 3, 4, 5])][:3]
    [('attention 0-1', 'attention', (0, 1)), ('MLP 0-1', 'mlp', (0, 1)), ('attention 2-3', 'attention', (2, 3))]
    >>> [a.label for a in profile_arms(6, 6, window=[2, 3, 4, 5])][2:4]
    ['window 2-5 (both sub-layers)', 'outside the window 0-1']
"""

from __future__ import annotations

from dataclasses import dataclass

from access.hook_table import HEADS, HOOK_TABLE
from analysis.window import format_layers
from localize.passes import Arm, UnitSet

SUBLAYERS: dict[str, str] = {
    name: next(h for h, row in HOOK_TABLE.items() if row.part == part and not row.is_input)
    for name, part in (("attention", "attention"), ("mlp", "mlp"))
}  # each sub-layer and the hook point of its output
BOTH = "both"
LABELS = {"attention": "attention", "mlp": "MLP"}
WINDOW, COMPLEMENT, ALL_ATTENTION, ALL_MLP, EVERYTHING = "window", "complement", "every attention", "every MLP", "all"


@dataclass(frozen=True)
class ProfileArm:
    """One profile arm: its label, its kind (``sublayer``, ``window`` or ``head``; a window's ``name``), which
    sub-layers it patches (``attention``, ``mlp`` or ``both``) at which layers, and its head (head arms)."""

    label: str
    kind: str
    sublayer: str
    layers: tuple[int, ...]
    name: str = ""
    head: int | None = None

    def arm(self, d_model: int, heads: int = 0, head_dim: int = 0) -> Arm:
        """The units it patches: every unit of its sub-layers' outputs at its layers (a head: its coordinates)."""
        if self.head is not None:
            return (UnitSet.of(HEADS, [(self.layers[0], self.head)], heads, head_dim),)
        hooks = list(SUBLAYERS.values()) if self.sublayer == BOTH else [SUBLAYERS[self.sublayer]]
        units = [(layer, u) for layer in self.layers for u in range(d_model)]
        return tuple(UnitSet.of(hook, units, d_model) for hook in hooks)


def profile_arms(n_layers: int, width: int, window: list[int]) -> list[ProfileArm]:
    """The sub-layer arms (windows of ``width`` layers) and the named windows (module doc)."""
    arms: list[ProfileArm] = []
    for start in range(0, n_layers, width):
        layers = tuple(range(start, min(start + width, n_layers)))
        span = format_layers(list(layers))
        arms += [ProfileArm(f"{LABELS[s]} {span}", "sublayer", s, layers) for s in SUBLAYERS]
    everything = tuple(range(n_layers))
    outside = tuple(layer for layer in everything if layer not in window)
    named = [
        ProfileArm(f"window {format_layers(window)} (both sub-layers)", "window", BOTH, tuple(window), WINDOW),
        ProfileArm(f"outside the window {format_layers(list(outside))}", "window", BOTH, outside, COMPLEMENT),
        ProfileArm("every attention output", "window", "attention", everything, ALL_ATTENTION),
        ProfileArm("every MLP output", "window", "mlp", everything, ALL_MLP),
        ProfileArm("every sub-layer", "window", BOTH, everything, EVERYTHING),
    ]
    return arms + [a for a in named if a.layers]


def head_arms(layers: list[int], heads: int) -> list[ProfileArm]:
    """One arm per head of each of ``layers``."""
    return [
        ProfileArm(f"head {layer}.{h}", "head", "attention", (layer,), head=h) for layer in layers for h in range(heads)
    ]
