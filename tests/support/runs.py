"""A tiny recorded run to analyse and intervene on, and a whole run read back as arrays, to compare two recordings
bit for bit."""

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


def recorded_multi_turn_run(tiny_pair: tuple[Path, Path], root: Path, n_roles: int) -> Path:
    """Synthesize ``n_roles`` roles' rows under ``root/data`` and record the tiny pair's multi_turn ``mlp_out``
    activations on them into ``root/run`` (float32, CPU); the run directory."""
    from data_synthesis.offline import synthesize
    from probes.config import RecordConfig
    from probes.recording import record_run

    synthesize(root / "data", n_roles=n_roles, seed=0)
    config = RecordConfig(
        sft_dir=tiny_pair[0],
        dpo_dir=tiny_pair[1],
        data_file=root / "data" / "test.jsonl",
        capabilities="multi_turn",
        hooks="mlp_out",
        out_dir=root / "run",
        device="cpu",
        dtype="float32",
    )
    record_run(config, progress=False)
    return root / "run"
