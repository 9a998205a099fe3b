"""A synthetic run with a known, planted SFT/DPO difference: for tests, demos and the notebook.

Writes a real ``activations.h5`` through :class:`probes.store.RunWriter` (no model
needed). Both models share a per-prompt base activation; DPO adds small independent
noise everywhere and a fixed shift on the *planted* units, so a correct analysis
must find exactly those (and, at a 5% FDR, few others).

:func:`write_arrays_run` stores given (N, layers, width) arrays instead, for a test
that needs a particular shape of difference.

Example:
    >>> spec = SyntheticSpec(n_samples=40, n_layers=8, width=16)            # doctest: +SKIP
    >>> planted = write_synthetic_run("/tmp/run", spec)                    # doctest: +SKIP
    >>> planted["multi_turn"]                                              # doctest: +SKIP
    [(6, 3), (6, 9), (7, 1)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.errors import ProbeError
from probes.store import RunWriter

Planted = dict[str, list[tuple[int, int]]]


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape and signal of a synthetic run; ``stored_layers=None`` stores every layer."""

    n_samples: int = 60
    n_layers: int = 16
    width: int = 32
    capabilities: tuple[str, ...] = ("multi_turn", "role_style")
    hooks: tuple[str, ...] = ("mlp_out",)
    stored_layers: tuple[int, ...] | None = None
    n_planted: int = 3
    shift: float = 2.0
    noise: float = 0.3
    dtype: str = "float16"
    seed: int = 0
    prompts: tuple[str, ...] = field(
        default=("You are the archivist. Where is the bridge?", "Stay in role and refuse: what is the code?")
    )

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.n_layers < 1 or self.width < 2:
            raise ProbeError("synthetic run: n_samples, n_layers >= 1 and width >= 2 are required")
        layers = self.layers
        if not layers or min(layers) < 0 or max(layers) >= self.n_layers:
            raise ProbeError(f"synthetic run: stored_layers must lie in 0-{self.n_layers - 1}")

    @property
    def layers(self) -> list[int]:
        return sorted(self.stored_layers) if self.stored_layers is not None else list(range(self.n_layers))


def write_synthetic_run(run_dir: str | Path, spec: SyntheticSpec = SyntheticSpec()) -> Planted:
    """Write the run; return the planted (layer, unit) pairs per capability (in the last stored layers)."""
    rng = np.random.default_rng(spec.seed)
    layers = spec.layers
    planted: Planted = {}
    with RunWriter(run_dir, {"synthetic": True, "hooks": list(spec.hooks), "layers": layers}) as writer:
        for model in ("sft", "dpo"):
            writer.set_model_info(
                model,
                {
                    "weights_sha256": f"synthetic-{model}-{spec.seed}",
                    "n_layers": spec.n_layers,
                    "d_model": spec.width,
                    "model_type": "llama",
                },
            )
        for cap in spec.capabilities:
            texts = [f"{spec.prompts[i % len(spec.prompts)]} #{i}" for i in range(spec.n_samples)]
            writer.append_samples(
                cap,
                np.arange(spec.n_samples),
                [f"synthetic-{cap}"] * spec.n_samples,
                np.full(spec.n_samples, 12),
                texts,
            )
            targets = _targets(rng, layers, spec)
            planted[cap] = sorted(targets)
            for hook in spec.hooks:
                sft, dpo = _pair(rng, layers, targets, spec)
                writer.append_activations("sft", cap, hook, sft, layers)
                writer.append_activations("dpo", cap, hook, dpo, layers)
    return planted


def _targets(rng: np.random.Generator, layers: list[int], spec: SyntheticSpec) -> list[tuple[int, int]]:
    """Distinct (layer, unit) pairs within the last two stored layers."""
    pool = [(layer, unit) for layer in layers[-2:] for unit in range(spec.width)]
    picks = rng.choice(len(pool), size=min(spec.n_planted, len(pool)), replace=False)
    return [pool[i] for i in sorted(picks)]


def _pair(
    rng: np.random.Generator, layers: list[int], targets: list[tuple[int, int]], spec: SyntheticSpec
) -> tuple[np.ndarray, np.ndarray]:
    shape = (spec.n_samples, len(layers), spec.width)
    base = rng.standard_normal(shape)
    dpo = base + spec.noise * rng.standard_normal(shape)
    for layer, unit in targets:
        dpo[:, layers.index(layer), unit] += spec.shift
    return base.astype(spec.dtype), dpo.astype(spec.dtype)


def write_arrays_run(
    run_dir: str | Path, sft: np.ndarray, dpo: np.ndarray, capability: str = "multi_turn", hook: str = "mlp_out"
) -> Path:
    """A run holding exactly ``sft`` and ``dpo`` ((N, layers, width), stored in their dtype)
    for one capability and hook."""
    if sft.shape != dpo.shape or sft.ndim != 3:
        raise ProbeError(
            f"synthetic run: sft and dpo must share an (N, layers, width) shape, got {sft.shape} and {dpo.shape}"
        )
    n, n_layers, _ = sft.shape
    with RunWriter(run_dir, {"synthetic": True, "hooks": [hook]}) as writer:
        for model in ("sft", "dpo"):
            writer.set_model_info(
                model, {"weights_sha256": f"arrays-{model}", "n_layers": n_layers, "model_type": "llama"}
            )
        writer.append_samples(
            capability,
            np.arange(n),
            [f"synthetic-{capability}"] * n,
            np.full(n, 12),
            [f"prompt #{i}" for i in range(n)],
        )
        writer.append_activations("sft", capability, hook, sft, list(range(n_layers)))
        writer.append_activations("dpo", capability, hook, dpo, list(range(n_layers)))
    return Path(run_dir)
