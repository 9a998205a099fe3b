"""Run configurations for SFT and DPO: recipes, overrides, validation.

One dataclass per stage drives both the library and the CLI, so a run is described the
same way everywhere and its full, resolved form goes into ``provenance.json``. Values
come from three layers, later ones winning: the named *recipe* (``paper`` = the
RoleMRC scripts' hyperparameters, for real models; ``tiny`` = tuned for the embedded
tiny base on CPU), an optional JSON/YAML config file, and explicit arguments (CLI
flags). A field left ``None`` takes the recipe's value in ``__post_init__``. With no
recipe named, a run on the tiny base (or DPO of an SFT model trained from it) uses
``tiny`` and any other model the paper's recipe.

bf16 is ``None`` = automatic: on with a bf16-capable GPU, off otherwise. TRL's own
default (bf16 on) makes CPU training about 6x slower, so a CPU run never uses it and
asking for it explicitly on CPU is an error.

Example:
    >>> cfg = SFTRunConfig(base="tiny", data="data/", out="out/sft")
    >>> cfg.learning_rate, cfg.lr_scheduler
    (0.001, 'cosine')
    >>> SFTRunConfig(base="tiny", data="d", out="o", recipe="paper").learning_rate
    2e-05
    >>> SFTRunConfig(base="models/Llama-3.1-8B", data="d", out="o").recipe
    'paper'
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from core.config_file import read_config_file
from core.errors import ProbeError

SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr")

# Paper: training/sft_llama3.sh and dpo_llama3.sh of LuJunru/RoleMRC (per-device batch x grad-acc x 4 GPUs = 64).
_SFT_RECIPES: dict[str, dict[str, Any]] = {
    "paper": dict(learning_rate=2e-5, lr_scheduler="cosine", warmup_ratio=0.04, epochs=1.0, batch_size=8,
                  grad_accum=2, max_length=4096, weight_decay=0.0, seed=42, gradient_checkpointing=True),
    "tiny": dict(learning_rate=1e-3, lr_scheduler="cosine", warmup_ratio=0.05, epochs=1.0, batch_size=16,
                 grad_accum=1, max_length=320, weight_decay=0.0, seed=0, gradient_checkpointing=False),
}
_DPO_RECIPES: dict[str, dict[str, Any]] = {
    "paper": dict(learning_rate=4e-7, lr_scheduler="linear", warmup_ratio=0.1, epochs=1.0, batch_size=4,
                  grad_accum=4, max_length=3000, weight_decay=0.0, seed=42, gradient_checkpointing=True, beta=0.1),
    "tiny": dict(learning_rate=1e-4, lr_scheduler="linear", warmup_ratio=0.1, epochs=1.0, batch_size=16,
                 grad_accum=1, max_length=320, weight_decay=0.0, seed=0, gradient_checkpointing=False, beta=0.1),
}
RECIPES: dict[str, dict[str, dict[str, Any]]] = {"sft": _SFT_RECIPES, "dpo": _DPO_RECIPES}


@dataclass(kw_only=True)
class _RunConfig:
    """Hyperparameters shared by both stages; ``None`` means "the recipe's value"."""

    data: Path
    out: Path
    recipe: str | None = None  # None: "tiny" for the tiny base (and its children), "paper" for a real model
    learning_rate: float | None = None
    lr_scheduler: str | None = None
    warmup_ratio: float | None = None
    epochs: float | None = None
    max_steps: int = -1  # > 0 overrides epochs
    batch_size: int | None = None
    grad_accum: int | None = None
    max_length: int | None = None
    weight_decay: float | None = None
    seed: int | None = None
    bf16: bool | None = None  # None = auto (GPU with bf16 support)
    gradient_checkpointing: bool | None = None
    max_rows: int | None = None  # use only the first N rows of the data file
    logging_steps: int = 1
    overwrite: bool = False
    _stage: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self.data, self.out = Path(self.data), Path(self.out)
        recipes = RECIPES[self._stage]
        if self.recipe is None:
            self.recipe = "tiny" if self._is_tiny() else "paper"
        if self.recipe not in recipes:
            raise ProbeError(f"--recipe: unknown recipe {self.recipe!r}; expected one of {', '.join(recipes)}")
        for name, value in recipes[self.recipe].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self._validate()

    def _is_tiny(self) -> bool:
        raise NotImplementedError

    def _validate(self) -> None:
        _positive("--learning-rate", self.learning_rate)
        _positive("--epochs", self.epochs)
        for flag, value in (("--batch-size", self.batch_size), ("--grad-accum", self.grad_accum),
                            ("--max-length", self.max_length), ("--logging-steps", self.logging_steps)):
            if not isinstance(value, int) or value < 1:
                raise ProbeError(f"{flag} must be a positive integer, got {value!r}")
        if self.max_length < 16:
            raise ProbeError(f"--max-length must be at least 16 tokens, got {self.max_length}")
        if not 0 <= self.warmup_ratio < 1:
            raise ProbeError(f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ProbeError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if self.lr_scheduler not in SCHEDULERS:
            raise ProbeError(f"--lr-scheduler: unknown schedule {self.lr_scheduler!r}; expected one of {', '.join(SCHEDULERS)}")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ProbeError(f"--max-steps must be a positive integer (or -1 for epochs), got {self.max_steps}")
        if self.max_rows is not None and self.max_rows < 1:
            raise ProbeError(f"--max-rows must be a positive integer, got {self.max_rows}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every resolved field (paths as strings)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name.startswith("_"):
                continue
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out

    @classmethod
    def from_sources(cls, config_file: str | Path | None = None, **overrides: Any) -> Any:
        """Build from a JSON/YAML file, then explicit ``overrides`` (``None`` values are ignored)."""
        values: dict[str, Any] = read_config_file(config_file, cls) if config_file else {}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass(kw_only=True)
class SFTRunConfig(_RunConfig):
    """Supervised fine-tuning of ``base`` (``"tiny"`` or a local HF causal-LM dir) on ``sft.jsonl``.

    ``tiny_spec`` holds :class:`training.tiny_base.TinySpec` overrides when ``base == "tiny"``
    (e.g. ``{"n_layers": 2}`` in tests). ``chat_template``: ``"auto"`` keeps the tokenizer's
    template (TRL adds ``{% generation %}`` markers to the families it knows) and falls back
    to ``"llama3"`` / ``"chatml"`` when the tokenizer has none; a path to a Jinja file is read.
    """

    base: str
    tiny_spec: dict[str, Any] = field(default_factory=dict)
    chat_template: str = "auto"
    assistant_only_loss: bool = True
    _stage: str = field(default="sft", init=False, repr=False)

    def _is_tiny(self) -> bool:
        return str(self.base) == "tiny"

    def _validate(self) -> None:
        super()._validate()
        if not str(self.base).strip():
            raise ProbeError("--base must be 'tiny' or a local Hugging Face model directory")
        from training.tiny_base import TinySpec

        known = {f.name for f in fields(TinySpec)}
        unknown = sorted(set(self.tiny_spec) - known)
        if unknown:
            raise ProbeError(f"tiny_spec: unknown field(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
        try:
            TinySpec(**self.tiny_spec)
        except (TypeError, ValueError) as exc:
            raise ProbeError(str(exc)) from None


@dataclass(kw_only=True)
class DPORunConfig(_RunConfig):
    """DPO of the SFT model in ``sft`` on ``dpo.jsonl``; the reference is ``ref`` (default: the SFT model itself)."""

    sft: Path
    ref: Path | None = None
    beta: float | None = None
    loss_type: str = "sigmoid"
    precompute_ref: bool = False
    _stage: str = field(default="dpo", init=False, repr=False)

    def _is_tiny(self) -> bool:
        """The SFT model descends from the tiny base (its provenance says so)."""
        from training.provenance import read_provenance

        try:
            record = read_provenance(Path(self.sft))
        except ProbeError:
            return False
        return record is not None and record.parent.get("base") == "tiny"

    def _validate(self) -> None:
        super()._validate()
        self.sft = Path(self.sft)
        self.ref = Path(self.ref) if self.ref is not None else None
        _positive("--beta", self.beta)
        if self.loss_type not in ("sigmoid", "hinge", "ipo", "robust"):
            raise ProbeError(f"--loss-type: unknown DPO loss {self.loss_type!r}; expected sigmoid, hinge, ipo or robust")


def _positive(flag: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ProbeError(f"{flag} must be a positive number, got {value!r}")
