"""The hook-point table, without torch: each hook point's name, the module of a block that carries it, its width and
its TransformerLens name. :mod:`access.hook_points` attaches hooks by it; configs, analyses and the CLI read hook
names from here, so that a hook point is named in this one place (``tests/test_registry_names.py``).

Example:
    >>> DEFAULT_HOOK, HOOK_TABLE[DEFAULT_HOOK].width, hooks_reading("attention")
    ('mlp_out', 'd_model', ('attn_out', 'resid_post', 'attn_z'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Part = Literal["attention", "o_proj", "mlp", "down_proj", "block"]


@dataclass(frozen=True)
class HookPoint:
    """One hook point: which module of a block carries it, input or output, its width, its names elsewhere."""

    name: str
    part: Part
    is_input: bool  # the module's input (a pre-hook) rather than its output
    width: Literal["d_model", "d_mlp", "d_attn"]  # d_attn: heads x head_dim, the attention's output projection's input
    tl_name: str  # TransformerLens's name, with {i} for the block
    block_order: int  # when it fires within one block's forward (0 first)


HOOK_TABLE: dict[str, HookPoint] = {
    row.name: row
    for row in (
        HookPoint("mlp_out", "mlp", False, "d_model", "blocks.{i}.hook_mlp_out", 3),
        HookPoint("attn_out", "attention", False, "d_model", "blocks.{i}.hook_attn_out", 1),
        HookPoint("resid_post", "block", False, "d_model", "blocks.{i}.hook_resid_post", 4),
        HookPoint("mlp_post", "down_proj", True, "d_mlp", "blocks.{i}.mlp.hook_post", 2),
        HookPoint("attn_z", "o_proj", True, "d_attn", "blocks.{i}.attn.hook_z", 0),
    )
}
HOOK_POINTS: tuple[str, ...] = tuple(HOOK_TABLE)
MLP_OUT = "mlp_out"  # the MLP's output (d_model wide)
DEFAULT_HOOK = MLP_OUT  # the paper's
RESID_POST = "resid_post"  # the residual stream after a block (d_model wide)
NEURONS = "mlp_post"  # the true MLP neurons (d_mlp wide): what weight edits and the planted pairs address
HEADS = "attn_z"  # each attention head's output before the output projection, heads x head_dim wide
EXECUTION_ORDER: tuple[str, ...] = tuple(sorted(HOOK_TABLE, key=lambda name: HOOK_TABLE[name].block_order))


READS: dict[Part, frozenset[Part]] = {
    "attention": frozenset({"attention"}),
    "o_proj": frozenset({"attention"}),
    "mlp": frozenset({"mlp"}),
    "down_proj": frozenset({"mlp"}),
    "block": frozenset({"attention", "mlp"}),
}  # which sub-layers write into each part's tensor


def hooks_reading(sublayer: Literal["attention", "mlp"]) -> tuple[str, ...]:
    """The hook points whose values the weights of ``sublayer`` (a block's attention or MLP) write into."""
    return tuple(name for name, row in HOOK_TABLE.items() if sublayer in READS[row.part])
