"""One validated settings object for a recording, shared by the library, the CLI and notebooks.

Everything a user can get wrong without loading a model (an unknown capability, hook,
backend, position policy or dtype, a malformed layer spec, a batch size of 0) is
rejected here, in ``__post_init__``, with a one-line :class:`ProbeError`. Checks that
need the model's shape (a layer outside the model) happen in :func:`probes.pair.load_pair`
from ``config.json`` alone, still before any weights are loaded.

Example:
    >>> cfg = RecordConfig(capabilities="multi_turn", hooks="mlp_out,mlp_post", layers="12-31")
    >>> [c.value for c in cfg.capabilities], cfg.hooks, cfg.position
    (['multi_turn'], ('mlp_out', 'mlp_post'), 'last')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.capabilities import Capability, parse_capabilities
from core.errors import ProbeError
from probes.batching import DEFAULT_BATCH_SIZE
from probes.hook_points import HOOK_POINTS, validate_hook

POSITIONS: tuple[str, ...] = ("last", "mean")
BACKENDS: tuple[str, ...] = ("torch", "transformer_lens", "nnsight")
COMPUTE_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
STORE_DTYPES: tuple[str, ...] = ("float16", "float32")
_LAYER_SPEC = re.compile(r"^\s*(all|\d+(\s*-\s*\d*)?(\s*,\s*\d+(\s*-\s*\d*)?)*)\s*$", re.IGNORECASE)


def _choice(value: str, choices: tuple[str, ...], option: str) -> str:
    normalized = str(value).strip().lower().replace("-", "_")
    if normalized == "tl":
        normalized = "transformer_lens"
    if normalized not in choices:
        raise ProbeError(f"{option} {value!r}: expected one of {', '.join(choices)}")
    return normalized


def _hooks(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else [p for v in value for p in str(v).split(",")]
    hooks: list[str] = []
    for item in (i.strip() for i in items):
        if item and validate_hook(item) not in hooks:
            hooks.append(item)
    if not hooks:
        raise ProbeError(f"--hook: no hook point given; expected one or more of {', '.join(HOOK_POINTS)}")
    return tuple(hooks)


def _layers(value: str | list[int] | tuple[int, ...] | None) -> str | tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not _LAYER_SPEC.match(value):
            raise ProbeError(f"--layers {value!r}: expected a range like 12-31, a list like 3,5,7, or 'all'")
        return value.strip()
    layers = tuple(sorted({int(i) for i in value}))
    if not layers or layers[0] < 0:
        raise ProbeError(f"--layers {list(value)!r}: expected non-negative layer indices")
    return layers


@dataclass
class RecordConfig:
    """What to record, from which pair, and where.

    ``sft_dir``/``dpo_dir``/``data_file`` are required by the recorder (the ``probe`` command
    fills them from ``--pair``, see :mod:`probe_cli.pairs`). ``layers`` is a
    spec string (``"12-31"``) or a list of indices, checked against the model later.
    ``device`` None picks ``cuda`` when available, else ``cpu``; ``"auto"`` spreads a large
    model over the visible GPUs (``device_map="auto"``). ``dtype="auto"`` is float32 on CPU
    and bfloat16 elsewhere. A batch holds at most ``batch_size`` prompts and, padded, at most
    ``max_batch_tokens`` tokens (None: derived from the device, see :mod:`probes.batching`). ``out_dir`` None makes a new ``runs/<timestamp>_<capabilities>``.
    """

    sft_dir: Path | None = None
    dpo_dir: Path | None = None
    data_file: Path | None = None
    capabilities: tuple[Capability, ...] | str | list[str] = "multi_turn"
    hooks: tuple[str, ...] | str | list[str] = ("mlp_out",)
    layers: str | tuple[int, ...] | list[int] | None = None
    position: str = "last"
    backend: str = "torch"
    batch_size: int = DEFAULT_BATCH_SIZE
    max_batch_tokens: int | None = None
    device: str | None = None
    dtype: str = "auto"
    store_dtype: str = "float16"
    add_generation_prompt: bool = False
    out_dir: Path | None = None
    seed: int = 0
    runs_root: Path = field(default=Path("runs"))

    def __post_init__(self) -> None:
        self.capabilities = parse_capabilities(self.capabilities)  # type: ignore[arg-type]
        self.hooks = _hooks(self.hooks)
        self.layers = _layers(self.layers)
        self.position = _choice(self.position, POSITIONS, "--position")
        self.backend = _choice(self.backend, BACKENDS, "--backend")
        self.dtype = _choice(self.dtype, COMPUTE_DTYPES, "--dtype")
        self.store_dtype = _choice(self.store_dtype, STORE_DTYPES, "--store-dtype")
        if isinstance(self.batch_size, bool) or int(self.batch_size) < 1:
            raise ProbeError(f"--batch-size must be at least 1, got {self.batch_size}")
        self.batch_size = int(self.batch_size)
        if self.max_batch_tokens is not None:
            if isinstance(self.max_batch_tokens, bool) or int(self.max_batch_tokens) < 1:
                raise ProbeError(f"--max-batch-tokens must be at least 1, got {self.max_batch_tokens}")
            self.max_batch_tokens = int(self.max_batch_tokens)
        if self.device is not None:
            self.device = str(self.device).strip().lower()
            if not re.match(r"^(auto|cpu|cuda(:\d+)?|mps)$", self.device):
                raise ProbeError(f"--device {self.device!r}: expected cpu, cuda, cuda:N, mps or auto")
        for name in ("sft_dir", "dpo_dir", "data_file", "out_dir", "runs_root"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, Path(value))
        for name, what in (("sft_dir", "--sft"), ("dpo_dir", "--dpo")):
            path = getattr(self, name)
            if path is not None and not (path / "config.json").is_file():
                raise ProbeError(f"{what} {path}: not a model directory (expected {path / 'config.json'})")
        if self.data_file is not None and not self.data_file.is_file():
            raise ProbeError(f"--data {self.data_file}: no such file")

    @property
    def capability_names(self) -> list[str]:
        return [c.value for c in self.capabilities]  # type: ignore[union-attr]

    def layer_spec(self) -> str | None:
        """The layer selection as a spec string for :func:`probes.hook_points.parse_layers`."""
        if self.layers is None or isinstance(self.layers, str):
            return self.layers
        return ",".join(str(i) for i in self.layers)

    def describe(self) -> dict[str, Any]:
        return {
            "capabilities": self.capability_names,
            "hooks": list(self.hooks),
            "layers": self.layer_spec() or "all",
            "position": self.position,
            "backend": self.backend,
            "batch_size": self.batch_size,
            "max_batch_tokens": self.max_batch_tokens,
            "dtype": self.dtype,
            "store_dtype": self.store_dtype,
        }
