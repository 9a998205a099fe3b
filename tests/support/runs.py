"""Reading a whole run back as arrays, to compare two recordings bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probes.store import RunReader


def run_arrays(run_dir: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with RunReader(run_dir) as run:
        for cap in run.capabilities():
            out[f"{cap}/ids"] = run.samples(cap).sample_ids
            for model in ("sft", "dpo"):
                for hook in run.hooks(cap, model):
                    out[f"{cap}/{model}/{hook}"] = run.activations(model, cap, hook)
    return out
