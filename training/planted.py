"""A planted-ground-truth pair: "DPO" is "SFT" with a known change confined to K documented MLP units.

Every other pair's differences are whatever training made them, so nothing can say whether a
ranking found "the right" units. Here the answer is known. :func:`plant_units` copies a model
directory and multiplies the **up_proj row** of each chosen MLP unit ``(layer, unit)`` by
``factor`` (in float32, stored back in the tensor's dtype). The gate row is left alone: for a
gated MLP ``down(act(gate(x)) * up(x))`` scaling the up row alone already multiplies that unit's
``mlp_post`` value (the down-projection's input) by ``factor`` on the same input, and nothing
else. Every other tensor (norms, embeddings, unembedding, attention, the other rows of those
up_proj matrices) is byte-identical; ``planted.json`` beside the weights names the units, the
factor, the seed and the SHA-256 of every unchanged tensor, so a reader can check that too.

Units are drawn by a seeded draw without replacement from ``layers x intermediate_size``
(``layers``: every layer unless given), so they spread over layers. Patching exactly these units
of the planted model with the unchanged model's values on the same tokens makes the two models
identical: the whole SFT-to-DPO gap closes, an identity a causal outcome must reproduce.

:func:`build_planted_pair` lays a pair out like every default pair (``data/``, ``sft/``, ``dpo/``);
:mod:`training.default_pair` registers two of them: ``planted`` (SmolLM2-135M-Instruct as "SFT":
the pretrained base, so no training is needed and the pair builds in about a minute from
``probe models fetch-base`` alone) and ``planted-tiny`` (a random tiny Llama, seconds, for tests).

Example:
    >>> import tempfile
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> root = Path(tempfile.mkdtemp())
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> LlamaForCausalLM(config).save_pretrained(root / "sft")
    >>> plant_units(root / "sft", root / "dpo", units=4, factor=3.0, seed=0)
    ((0, 25), (1, 16), (1, 27), (2, 15))
    >>> record = read_planted(root / "dpo")
    >>> record.units == ((0, 25), (1, 16), (1, 27), (2, 15)), record.factor, record.hook
    (True, 3.0, 'mlp_post')
    >>> plant_units(root / "sft", root / "other", units=0)
    Traceback (most recent call last):
    core.errors.ProbeError: --units 0: expected at least 1 planted unit
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from access.hook_table import NEURONS
from core.errors import ProbeError
from core.records import read_record, to_json

if TYPE_CHECKING:
    import torch

PLANTED_FILE = "planted.json"
WEIGHTS = "model.safetensors"
HOOK = NEURONS
UP_ROW = "model.layers.{layer}.mlp.up_proj.weight"
SKIPPED = ("COMPLETE.json", WEIGHTS)  # not copied: the base's build marker would not describe the copy


@dataclass(frozen=True)
class PlantedSpec:
    """What to plant (part of a default pair's recipe)."""

    units: int = 16
    factor: float = 3.0
    seed: int = 0
    layers: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PlantedPair:
    """A planted pair: the unchanged model, the planted one, their data and the planted units."""

    sft_dir: Path  # the unchanged model ("SFT")
    dpo_dir: Path  # the same model with the planted change ("DPO")
    data_dir: Path  # the pair's data (test.jsonl etc.); for a bare planted model, the folder beside it
    hook: str  # "mlp_post"
    units: tuple[tuple[int, int], ...]  # (layer, unit), sorted
    factor: float  # each planted unit's up_proj row is multiplied by this


@dataclass(frozen=True)
class PlantedRecord:
    """``planted.json``: what was changed, and the SHA-256 of every tensor that was not."""

    FORMAT: ClassVar[str] = "rolemrc-planted"
    VERSION: ClassVar[int] = 1
    source: str
    hook: str
    units: list[tuple[int, int]]
    factor: float
    seed: int
    layers: list[int]
    changed: list[str]  # tensors with planted rows
    unchanged_sha256: dict[str, str]  # every other tensor, by name: SHA-256 of its bytes


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes in memory (its dtype's own layout)."""
    flat = tensor.detach().contiguous().reshape(-1)
    import torch

    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def draw_units(
    n_layers: int, d_mlp: int, *, units: int, seed: int, layers: Sequence[int] | None = None
) -> tuple[tuple[int, int], ...]:
    """``units`` distinct (layer, unit) pairs, sorted, drawn by ``seed`` from ``layers`` (default all) x ``d_mlp``.

    >>> draw_units(4, 8, units=3, seed=0)
    ((2, 0), (2, 3), (3, 1))
    """
    chosen = _checked_layers(layers, n_layers)
    _check_count(units, len(chosen) * d_mlp)
    import numpy as np

    flat = np.random.default_rng(seed).choice(len(chosen) * d_mlp, size=units, replace=False)
    return tuple(sorted((chosen[int(i) // d_mlp], int(i) % d_mlp) for i in flat))


def _checked_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    if layers is None:
        return list(range(n_layers))
    chosen = sorted(set(layers))
    bad = [layer for layer in chosen if not 0 <= layer < n_layers]
    if not chosen or bad:
        raise ProbeError(f"--layers {','.join(map(str, layers))}: expected layers in 0-{n_layers - 1}")
    return chosen


def _check_count(units: int, available: int) -> None:
    if units < 1:
        raise ProbeError(f"--units {units}: expected at least 1 planted unit")
    if units > available:
        raise ProbeError(f"--units {units}: expected at most {available} (the units of the chosen layers)")


def _check_factor(factor: float) -> None:
    if not math.isfinite(factor) or factor == 1.0:
        raise ProbeError(f"--factor {factor}: expected a finite number other than 1 (1 plants nothing)")


def _model_shape(source_dir: Path) -> tuple[int, int]:
    """(num_hidden_layers, intermediate_size) of the model at ``source_dir``; one line if it is not one."""
    config_file, weights = source_dir / "config.json", source_dir / WEIGHTS
    if not config_file.is_file() or not weights.is_file():
        raise ProbeError(f"{source_dir}: expected a model directory with config.json and {WEIGHTS}")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        return int(config["num_hidden_layers"]), int(config["intermediate_size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProbeError(f"{config_file}: expected num_hidden_layers and intermediate_size ({exc})") from None


def plant_units(
    source_dir: Path,
    out_dir: Path,
    *,
    units: int = 16,
    factor: float = 3.0,
    seed: int = 0,
    layers: Sequence[int] | None = None,
) -> tuple[tuple[int, int], ...]:
    """Copy the model at ``source_dir`` to ``out_dir`` (absent or empty) with ``units`` planted units; returns them.

    Only the planted units' up_proj rows differ (times ``factor``); ``out_dir/planted.json`` records the rest.
    """
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    _check_factor(factor)
    n_layers, d_mlp = _model_shape(source_dir)
    chosen = draw_units(n_layers, d_mlp, units=units, seed=seed, layers=layers)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ProbeError(f"{out_dir}: expected an absent or empty directory for the planted model")
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source_dir / WEIGHTS), "pt") as handle:
        metadata = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - not a dict
    changed = _plant(tensors, chosen, factor)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(source_dir.iterdir()):
        if path.is_file() and path.name not in SKIPPED:
            shutil.copy2(path, out_dir / path.name)
    save_file(tensors, str(out_dir / WEIGHTS), metadata=metadata)
    record = PlantedRecord(
        source=str(source_dir.resolve()),
        hook=HOOK,
        units=list(chosen),
        factor=float(factor),
        seed=seed,
        layers=sorted({layer for layer, _ in chosen}) if layers is None else sorted(set(layers)),
        changed=sorted(changed),
        unchanged_sha256={name: tensor_sha256(t) for name, t in sorted(tensors.items()) if name not in changed},
    )
    (out_dir / PLANTED_FILE).write_text(json.dumps(to_json(record), indent=1) + "\n", encoding="utf-8")
    return chosen


def _plant(tensors: dict[str, torch.Tensor], chosen: Sequence[tuple[int, int]], factor: float) -> set[str]:
    """Multiply each chosen unit's up_proj row in place (float32 maths); the names of the tensors changed."""
    changed: set[str] = set()
    for layer, unit in chosen:
        name = UP_ROW.format(layer=layer)
        if name not in tensors:
            raise ProbeError(f"no tensor {name}: expected a gated MLP with up_proj (Llama, Qwen2, Mistral style)")
        weight = tensors[name].clone() if name not in changed else tensors[name]
        weight[unit] = (weight[unit].float() * factor).to(weight.dtype)
        tensors[name] = weight
        changed.add(name)
    return changed


def read_planted(pair_or_model_dir: Path) -> PlantedPair:
    """The planted pair of a pair directory (``sft/``, ``dpo/``, ``data/``) or of a planted model directory.

    A planted model named ``dpo`` with an ``sft`` beside it is read as that pair; for any other planted model,
    ``sft_dir`` is the recorded source and ``data_dir`` the ``data`` folder beside the model.
    """
    given = Path(pair_or_model_dir)
    model_dir = given / "dpo" if (given / "dpo" / PLANTED_FILE).is_file() else given
    if not (model_dir / PLANTED_FILE).is_file():
        raise ProbeError(f"{given}: no {PLANTED_FILE} (expected a planted pair or model directory)")
    record = read_record(PlantedRecord, model_dir / PLANTED_FILE, "planted-units record")
    root = model_dir.parent
    in_pair = model_dir.name == "dpo" and (root / "sft").is_dir()
    return PlantedPair(
        sft_dir=root / "sft" if in_pair else Path(record.source),
        dpo_dir=model_dir,
        data_dir=root / "data",
        hook=record.hook,
        units=tuple(sorted((int(layer), int(unit)) for layer, unit in record.units)),
        factor=record.factor,
    )


def build_planted_pair(
    work: Path,
    base: str,
    spec: PlantedSpec,
    *,
    home: Path,
    synthesis: dict[str, Any],
    tiny_spec: dict[str, Any] | None = None,
    report: Callable[[str, int, int], None] | None = None,
) -> dict[str, float]:
    """Synthesize ``work/data``, put the unchanged model in ``work/sft`` (SmolLM2's pretrained base copied, or a
    random tiny Llama built on the data), plant ``spec`` into ``work/dpo``; returns seconds per stage."""
    import time

    from data_synthesis.offline import synthesize

    times: dict[str, float] = {}
    start = time.perf_counter()
    _stage(report, "synthesize", 0, 1)
    synthesize(work / "data", **synthesis)
    _stage(report, "synthesize", 1, 1)
    times["synthesize"] = time.perf_counter() - start
    start = time.perf_counter()
    _stage(report, "base", 0, 1)
    _unchanged_model(work, base, home, tiny_spec or {}, synthesis.get("seed", 0))
    _stage(report, "base", 1, 1)
    times["base"] = time.perf_counter() - start
    start = time.perf_counter()
    _stage(report, "plant", 0, 1)
    plant_units(work / "sft", work / "dpo", units=spec.units, factor=spec.factor, seed=spec.seed, layers=spec.layers)
    _stage(report, "plant", 1, 1)
    times["plant"] = time.perf_counter() - start
    return times


def _unchanged_model(work: Path, base: str, home: Path, tiny_spec: dict[str, Any], seed: int) -> None:
    if base == "tiny":
        from core.run_dir import DataDir
        from training.data import sft_records
        from training.sft import tiny_corpus
        from training.tiny_base import TinySpec, build_tiny_base

        data = DataDir(work / "data")
        records = sft_records(data.sft)
        build_tiny_base(tiny_corpus(records, [data.dpo]), work / "sft", TinySpec(**{"seed": seed, **tiny_spec}))
        return
    from training.smollm2 import ensure_base

    source = ensure_base(home, progress=False)
    (work / "sft").mkdir()
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name != "COMPLETE.json":
            shutil.copy2(path, work / "sft" / path.name)


def _stage(report: Callable[[str, int, int], None] | None, name: str, done: int, total: int) -> None:
    if report:
        report(name, done, total)
