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

Each field's hint is its type and bounds (:mod:`core.config_file`): a config file's values
are checked by them as they are read, and flags and library calls by ``__post_init__``.

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
from typing import Annotated, Any

from core.config_fields import option
from core.config_file import (
    ABOVE_ZERO,
    DIRECTORY,
    MAX_COUNT,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    OptionError,
    Range,
    build_config,
    check_mapping,
    choice,
    typed_config,
)
from core.errors import ProbeError

SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr")
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "robust")

# Paper: training/sft_llama3.sh and dpo_llama3.sh of LuJunru/RoleMRC (per-device batch x grad-acc x 4 GPUs = 64).
_SFT_RECIPES: dict[str, dict[str, Any]] = {
    "paper": {
        "learning_rate": 2e-5,
        "lr_scheduler": "cosine",
        "warmup_ratio": 0.04,
        "epochs": 1.0,
        "batch_size": 8,
        "grad_accum": 2,
        "max_length": 4096,
        "weight_decay": 0.0,
        "seed": 42,
        "gradient_checkpointing": True,
    },
    "tiny": {
        "learning_rate": 1e-3,
        "lr_scheduler": "cosine",
        "warmup_ratio": 0.05,
        "epochs": 1.0,
        "batch_size": 16,
        "grad_accum": 1,
        "max_length": 320,
        "weight_decay": 0.0,
        "seed": 0,
        "gradient_checkpointing": False,
    },
}
_DPO_RECIPES: dict[str, dict[str, Any]] = {
    "paper": {
        "learning_rate": 4e-7,
        "lr_scheduler": "linear",
        "warmup_ratio": 0.1,
        "epochs": 1.0,
        "batch_size": 4,
        "grad_accum": 4,
        "max_length": 3000,
        "weight_decay": 0.0,
        "seed": 42,
        "gradient_checkpointing": True,
        "beta": 0.1,
    },
    "tiny": {
        "learning_rate": 1e-4,
        "lr_scheduler": "linear",
        "warmup_ratio": 0.1,
        "epochs": 1.0,
        "batch_size": 16,
        "grad_accum": 1,
        "max_length": 320,
        "weight_decay": 0.0,
        "seed": 0,
        "gradient_checkpointing": False,
        "beta": 0.1,
    },
}
RECIPES: dict[str, dict[str, dict[str, Any]]] = {"sft": _SFT_RECIPES, "dpo": _DPO_RECIPES}


@dataclass(kw_only=True)
@typed_config
class _RunConfig:
    """Hyperparameters shared by both stages; ``None`` means "the recipe's value"."""

    data: Path = option(help="Directory with the stage's data file, sft.jsonl or dpo.jsonl (or the file itself).")
    out: Annotated[Path, DIRECTORY] = option(help="Output model directory.")
    recipe: str | None = option(
        None,
        "Hyperparameter recipe: 'paper' (RoleMRC's scripts; the default for a real model) or 'tiny' "
        "(the default for the embedded tiny base and its children).",
    )
    learning_rate: Annotated[float, ABOVE_ZERO] | None = option(None, "Peak learning rate.", aliases=["--lr"])
    lr_scheduler: str | None = option(None, f"{', '.join(SCHEDULERS)}.")
    warmup_ratio: Annotated[float, Range(0, 1, high_open=True)] | None = option(
        None, "Fraction of steps spent warming up."
    )
    epochs: Annotated[float, ABOVE_ZERO] | None = option(None, "Training epochs (ignored when --max-steps is given).")
    max_steps: Annotated[int, Range(-1, MAX_COUNT)] = option(
        -1, "Stop after this many optimizer steps (-1: train for --epochs)."
    )
    batch_size: Annotated[int, POSITIVE] | None = option(None, "Per-device batch size.")
    grad_accum: Annotated[int, POSITIVE] | None = option(None, "Gradient accumulation steps.")
    max_length: Annotated[int, Range(16, MAX_COUNT)] | None = option(None, "Truncate sequences to this many tokens.")
    weight_decay: Annotated[float, NON_NEGATIVE] | None = option(None, "Weight decay.")
    seed: Annotated[int, SEED] | None = option(
        None, "Seed for initialisation and data order (same seed, same model on CPU)."
    )
    bf16: bool | None = option(
        None, "bfloat16 training: on with a bf16 GPU, off on CPU by default (an explicit --bf16 on CPU is an error)."
    )
    gradient_checkpointing: bool | None = option(None, "Trade speed for memory.")
    max_rows: Annotated[int, POSITIVE] | None = option(None, "Train on the first N rows only.")
    logging_steps: Annotated[int, POSITIVE] = option(1, "Log the loss every N optimizer steps.")
    overwrite: bool = option(False, "Replace an existing --out once the new run has finished.")
    _stage: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self.data, self.out = Path(self.data), Path(self.out)
        recipes = RECIPES[self._stage]
        if self.recipe is None:
            self.recipe = "tiny" if self._is_tiny() else "paper"
        choice("recipe", self.recipe, recipes)
        for name, value in recipes[self.recipe].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self._validate()

    def _is_tiny(self) -> bool:
        raise NotImplementedError

    def _validate(self) -> None:
        choice("lr_scheduler", self.lr_scheduler, SCHEDULERS)
        if self.max_steps == 0:
            raise OptionError("max_steps", "a positive integer (or -1: train for --epochs)", self.max_steps)

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
        """Build from a JSON/YAML file, then explicit ``overrides`` (``None`` values are ignored; ``tiny_spec`` adds
        to the file's)."""
        return build_config(cls, config_file, overrides, merge=["tiny_spec"])


@dataclass(kw_only=True)
class SFTRunConfig(_RunConfig):
    """Supervised fine-tuning of ``base`` (``"tiny"`` or a local HF causal-LM dir) on ``sft.jsonl``.

    ``tiny_spec`` holds :class:`training.tiny_base.TinySpec` overrides when ``base == "tiny"``
    (e.g. ``{"n_layers": 2}`` in tests). ``chat_template``: ``"auto"`` keeps the tokenizer's
    template (TRL adds ``{% generation %}`` markers to the families it knows) and falls back
    to ``"llama3"`` / ``"chatml"`` when the tokenizer has none; a path to a Jinja file is read.
    """

    base: str = option(help="'tiny' or a local Hugging Face causal-LM directory.")
    tiny_spec: dict[str, Any] = option(default_factory=dict, flag=None)  # flags: --tiny-layers, --tiny-width, ...
    chat_template: str = option("auto", "auto, llama3, chatml, or a Jinja file.")
    assistant_only_loss: bool = option(True, "Loss on the assistant turns only.")
    _stage: str = field(default="sft", init=False, repr=False)

    def _is_tiny(self) -> bool:
        return str(self.base) == "tiny"

    def _validate(self) -> None:
        super()._validate()
        if not str(self.base).strip():
            raise ProbeError("--base must be 'tiny' or a local Hugging Face model directory")
        from training.tiny_base import TinySpec

        try:
            TinySpec(**check_mapping(TinySpec, self.tiny_spec, "tiny_spec"))
        except (TypeError, ValueError) as exc:
            raise ProbeError(str(exc)) from None


@dataclass(kw_only=True)
class DPORunConfig(_RunConfig):
    """DPO of the SFT model in ``sft`` on ``dpo.jsonl``; the reference is ``ref`` (default: the SFT model itself)."""

    sft: Path = option(help="The SFT model directory (policy start and reference).")
    ref: Path | None = option(None, "Reference model (default: the SFT model).")
    beta: Annotated[float, ABOVE_ZERO] | None = option(None, "DPO beta (default: the recipe's).")
    loss_type: str = option("sigmoid", f"{', '.join(LOSS_TYPES)} (the paper: sigmoid).")
    precompute_ref: bool = option(False, "Compute reference log-probs once before training.")
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
        choice("loss_type", self.loss_type, LOSS_TYPES)
