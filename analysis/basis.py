"""The basis of a map: *global* (DPO and SFT on the same prompt) or *local* (each layer on the same input).

**global** (the paper's maps, the default): at layer *l*, DPO's value minus SFT's, both models run on the same
prompt. Each layer of DPO also receives different inputs from the layers below it, so a unit's difference is
mostly what flowed into it, and differences accumulate with depth.

**local**: at layer *l*, DPO's block *l* run on SFT's input to block *l* (its residual stream), minus SFT's own
value there (direction ``dpo_on_sft``); or DPO's own value minus SFT's block *l* run on DPO's input
(``sft_on_dpo``). The inputs are the same, so the only difference left is block *l*'s own weights: which units
changed, not what flowed from them. It needs a run recorded with the local groups (``probe run --local``, on by
default; :mod:`access.local_blocks`); a run recorded before them is refused in one line.

Every metric (:mod:`analysis.maps`) takes the two stored groups :func:`basis_models` names as its "before" and
"after", so counts, mean differences, effect sizes, FDR, stability and neuron sets work unchanged in either basis;
the maps' ``settings`` carry ``basis`` (and ``direction``), and so does every report written from them.

Example:
    >>> describe_basis("global")
    'global basis: DPO vs SFT on the same prompt (each layer also differs by what flowed in from below)'
    >>> describe_basis("local", "dpo_on_sft")
    "local basis (dpo_on_sft): DPO's block l on SFT's input to block l vs SFT's own (only block l's weights differ)"
    >>> basis_of_settings({"models": ["sft", "dpo_on_sft"]}), basis_of_settings({})
    (('local', 'dpo_on_sft'), ('global', None))
    >>> with RunReader("runs/old") as run:                                   # doctest: +SKIP
    ...     basis_models(run, "multi_turn", "mlp_post", "local")
    Traceback (most recent call last):
    core.errors.ProbeError: runs/old: --basis local needs the local recording of multi_turn/mlp_post, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.directions import DIRECTIONS, local_pair
from core.errors import ProbeError
from core.run_dir import AnalysisDir, RunDir

if TYPE_CHECKING:
    from probes.store import RunReader

GLOBAL_MODELS: tuple[str, str] = ("sft", "dpo")


def basis_models(
    run: RunReader, capability: str, hook: str, basis: str, direction: str | None = None
) -> tuple[str, str]:
    """The stored groups (before, after) whose difference is ``basis``'s DPO − SFT map; one line when not recorded.

    ``direction`` None: the recorded one (``dpo_on_sft`` when both were).
    """
    if basis == "global":
        return GLOBAL_MODELS
    recorded = run.local_directions(capability, hook)
    if not recorded:
        raise ProbeError(
            f"{run.run_dir}: --basis local needs the local recording of {capability}/{hook}, which this run does not "
            "have (recorded before it, or with --local none); record again with `probe run --local dpo_on_sft` into "
            "a new --out, or use --basis global"
        )
    chosen = direction or recorded[0]
    if chosen not in recorded:
        raise ProbeError(
            f"--direction {chosen}: not recorded for {capability}/{hook} in {run.run_dir} (recorded: "
            f"{', '.join(recorded)})"
        )
    return local_pair(chosen)


def basis_of_settings(settings: dict[str, Any]) -> tuple[str, str | None]:
    """(basis, direction) of a map from its ``settings`` (maps without ``models`` are global)."""
    models = tuple(settings.get("models", GLOBAL_MODELS))
    local = [m for m in models if m in DIRECTIONS]
    return ("local", local[0]) if local else ("global", None)


def describe_basis(basis: str, direction: str | None = None) -> str:
    """What a basis means, in words, for every report that states which one it used."""
    if basis == "global":
        return "global basis: DPO vs SFT on the same prompt (each layer also differs by what flowed in from below)"
    if direction == "sft_on_dpo":
        return (
            "local basis (sft_on_dpo): DPO's own value vs SFT's block l on DPO's input to block l (only block l's "
            "weights differ)"
        )
    return (
        f"local basis ({direction or 'dpo_on_sft'}): DPO's block l on SFT's input to block l vs SFT's own (only "
        "block l's weights differ)"
    )


def analysis_dir(run_dir: str | Path, basis: str, out_dir: str | Path | None = None) -> AnalysisDir:
    """Where an analysis in ``basis`` goes: ``out_dir``, else ``RUN_DIR/analysis`` (global) or
    ``RUN_DIR/analysis/local`` (local), so the two never replace each other's files."""
    if out_dir is not None:
        return AnalysisDir(out_dir)
    root = RunDir(run_dir).analysis
    return root if basis == "global" else root.local
