"""Helpers for interactive exploration (the heatmap explorer notebook): tables and drill-down.

A map says *which* unit moved; the drill-down says *on what*: the prompts on which a
chosen unit is most active, with both models' values side by side, read straight
from the run (one unit's column, not the whole tensor).

The explorer's parameters (``PROBE_RUN_DIR``, ``PROBE_CAPABILITY``, ``PROBE_HOOK``, or the
parameter cell) are checked by :func:`open_explorer`: a missing run, or a capability or hook the
run did not record, is one :class:`~core.errors.ProbeError` naming the parameter and what the
run holds.

Example:
    >>> d = np.array([[0.5, -2.0, 0.1], [0.0, 0.3, -0.4]])   # DPO − SFT at layers 12 and 13, 3 units each
    >>> sft, p = np.zeros_like(d), np.full_like(d, 0.5)
    >>> maps = MetricMaps("multi_turn", "mlp_out", "mean_diff", [12, 13], sft, d, d, p, p, n_samples=40)
    >>> top_units_frame(maps, n=2)[["layer", "unit", "delta"]]
       layer  unit  delta
    0     12     1   -2.0
    1     12     0    0.5
    >>> with RunReader("runs/demo") as run:                                             # doctest: +SKIP
    ...     top_prompts(run, "multi_turn", "mlp_out", layer=19, unit=7, n=5)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.metric_maps import MetricMaps
from analysis.profile import layer_profile, top_units
from core.errors import ProbeError
from core.records import to_json
from probes.store import MODELS, RunReader


def open_explorer(
    run_dir: str | os.PathLike[str], capability: str | None = None, hook: str | None = None
) -> tuple[RunReader, str, str]:
    """The run and the capability and hook the explorer shows (None: the first recorded), each checked in one line."""
    where = "PROBE_RUN_DIR" if os.environ.get("PROBE_RUN_DIR") else "RUN_DIR"
    if not Path(run_dir).is_dir():
        raise ProbeError(f"{where}={str(run_dir)!r}: not a directory; expected a run directory written by `probe run`")
    run = RunReader(Path(run_dir))
    try:
        return run, *_explorer_choice(run, capability, hook)
    except ProbeError:
        run.close()
        raise


def _explorer_choice(run: RunReader, capability: str | None, hook: str | None) -> tuple[str, str]:
    recorded = run.capabilities()
    if not recorded:
        raise ProbeError(f"{run.run_dir}: no recorded samples in this run; record activations first with `probe run`")
    chosen = _named(capability, recorded, "PROBE_CAPABILITY", "capability", run) if capability else recorded[0]
    hooks = [h for h in run.hooks(chosen, "sft") if h in run.hooks(chosen, "dpo")]
    if not hooks:
        raise ProbeError(f"{run.path}: capability {chosen!r} has no activations recorded for both models")
    return chosen, _named(hook, hooks, "PROBE_HOOK", "hook", run) if hook else hooks[0]


def _named(value: str, recorded: list[str], variable: str, what: str, run: RunReader) -> str:
    name = str(value).strip()
    if name not in recorded:
        shown_as = f"{variable}={value!r}" if os.environ.get(variable) else f"{what.upper()} {value!r}"
        raise ProbeError(f"{shown_as}: no {what} of that name in {run.run_dir} (recorded: {', '.join(recorded)})")
    return name


def unit_activations(run: RunReader, capability: str, hook: str, layer: int, unit: int, model: str) -> np.ndarray:
    """(N,) float32 activations of one unit over the capability's samples."""
    _check_model(model)
    stored = run.layers(capability, hook, model)
    if layer not in stored:
        raise ProbeError(f"layer {layer} of {hook} was not recorded (recorded: {stored[0]}-{stored[-1]})")
    dataset = run.dataset(model, capability, hook)
    if not 0 <= unit < dataset.shape[2]:
        raise ProbeError(f"unit {unit} is outside {hook}, which has units 0-{dataset.shape[2] - 1}")
    n = run.n_samples(capability)
    return np.asarray(run.read(model, capability, hook, np.s_[:n, stored.index(layer), unit]), dtype=np.float32)


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise ProbeError(f"model {model!r}: expected one of {', '.join(MODELS)}")


def top_prompts(
    run: RunReader, capability: str, hook: str, layer: int, unit: int, model: str = "dpo", n: int = 10, width: int = 160
) -> pd.DataFrame:
    """The ``n`` prompts on which ``unit`` is most active in ``model`` (signed, descending; ties by row)."""
    _check_model(model)
    values = {m: unit_activations(run, capability, hook, layer, unit, m) for m in MODELS}
    samples = run.samples(capability)
    order = np.lexsort((np.arange(values[model].size), -values[model]))[:n]
    return pd.DataFrame(
        {
            "row": order,
            "sample_id": samples.sample_ids[order],
            "task": [samples.tasks[i] for i in order],
            "sft": values["sft"][order],
            "dpo": values["dpo"][order],
            "dpo_minus_sft": values["dpo"][order] - values["sft"][order],
            "prompt_tail": [_tail(samples.prompts[i], width) for i in order],
        }
    )


def _tail(text: str, width: int) -> str:
    """The end of a prompt (where the last-token activation was taken), on one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else "…" + flat[-width:]


def top_units_frame(maps: MetricMaps, n: int = 20) -> pd.DataFrame:
    """The ``n`` units of largest |Δ| as a table (layer, unit, Δ, per-model values, p, q)."""
    return pd.DataFrame(to_json(top_units(maps, n)))


def profile_frame(maps: MetricMaps, alpha: float = 0.05) -> pd.DataFrame:
    """The ranked per-layer profile as a table."""
    return pd.DataFrame(to_json(layer_profile(maps, alpha)))
