"""Load an SFT/DPO pair and refuse one whose activations could not be compared.

Comparing "neuron 1234 of layer 19" across two models only means something if both
have the same architecture, the same widths, the same module layout and see the same
token ids for the same prompt. :func:`load_pair` checks this in three steps, each
before any forward pass, and names every difference it finds:

1. the two ``config.json`` files (architecture, layer count, widths, heads, vocab size),
   which costs nothing;
2. the two tokenizers (vocabulary, special tokens) and chat templates;
3. after loading, the module layout (every parameter's name and shape).

Example:
    >>> from types import SimpleNamespace as Config
    >>> sft = Config(model_type="llama", num_hidden_layers=2, hidden_size=64, intermediate_size=256)
    >>> shape_of(sft)
    ModelShape(model_type='llama', n_layers=2, d_model=64, d_mlp=256, max_positions=None)
    >>> compare_configs(sft, Config(**{**vars(sft), "intermediate_size": 128}))
    ['intermediate_size: sft 256 vs dpo 128']
    >>> pair = load_pair("models/sft", "models/dpo", device="cpu", dtype="float32")   # doctest: +SKIP
    >>> pair.shape.n_layers, pair.shape.d_mlp                                          # doctest: +SKIP
    (32, 14336)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.hook_points import ARCHITECTURES
from core.chat import context_length
from core.errors import ProbeError
from core.models import check_model_dir, load_model, load_tokenizer, tokenizer_differences

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_CONFIG_KEYS: tuple[str, ...] = (
    "model_type",
    "architectures",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "head_dim",
)


@dataclass(frozen=True)
class ModelShape:
    """The shape facts of a model, read from its config.json."""

    model_type: str
    n_layers: int
    d_model: int
    d_mlp: int
    max_positions: int | None = None  # the context the model was built for (max_position_embeddings)


def read_config(model_dir: str | Path) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(model_dir), trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ProbeError(f"{model_dir}: cannot read config.json ({str(exc).splitlines()[0]})") from None


def shape_of(config: Any, model_dir: str | Path = "") -> ModelShape:
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ProbeError(
            f"{model_dir}: unsupported architecture {model_type!r}; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    arch = ARCHITECTURES[model_type]
    d_model = int(config.hidden_size)
    d_mlp = getattr(config, arch.intermediate_size_attr, None) or 4 * d_model
    return ModelShape(model_type, int(config.num_hidden_layers), d_model, int(d_mlp), context_length(config))


def _diff(label: str, a: Any, b: Any, names: tuple[str, str]) -> str | None:
    return None if a == b else f"{label}: {names[0]} {a!r} vs {names[1]} {b!r}"


def compare_configs(sft: object, dpo: object, names: tuple[str, str] = ("sft", "dpo")) -> list[str]:
    """Differences between two configs on the keys that fix the activation layout."""
    problems = [_diff(key, getattr(sft, key, None), getattr(dpo, key, None), names) for key in _CONFIG_KEYS]
    return [p for p in problems if p]


def compare_tokenizers(sft: PreTrainedTokenizerBase, dpo: PreTrainedTokenizerBase) -> list[str]:
    """Differences in vocabulary, special tokens and chat template."""
    return tokenizer_differences(sft, dpo, ("sft", "dpo"))


def compare_layouts(sft: PreTrainedModel, dpo: PreTrainedModel, names: tuple[str, str] = ("sft", "dpo")) -> list[str]:
    """Differences in parameter names and shapes (the module layout)."""
    a = {name: tuple(p.shape) for name, p in sft.named_parameters()}
    b = {name: tuple(p.shape) for name, p in dpo.named_parameters()}
    problems = [f"parameter {n} only in {names[0]}" for n in sorted(set(a) - set(b))[:3]]
    problems += [f"parameter {n} only in {names[1]}" for n in sorted(set(b) - set(a))[:3]]
    problems += [f"parameter {n}: shape {a[n]} vs {b[n]}" for n in sorted(set(a) & set(b)) if a[n] != b[n]][:3]
    return problems


def _refuse(problems: list[str], sft_dir: Path, dpo_dir: Path) -> None:
    if problems:
        raise ProbeError(f"the pair {sft_dir} / {dpo_dir} is not comparable: " + "; ".join(problems))


def resolve_device(device: str | None) -> str:
    """None -> cuda if available else cpu; anything else as given ("auto" = device_map auto)."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProbeError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        return torch.float32 if on_cpu else torch.bfloat16
    return getattr(torch, dtype)


@dataclass
class ModelPair:
    """Both models (eval mode, no grad needed), the shared tokenizer and provenance."""

    sft: PreTrainedModel
    dpo: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    sft_dir: Path
    dpo_dir: Path
    shape: ModelShape
    device: str
    dtype: Any
    info: dict[str, dict[str, Any]] = field(default_factory=dict)

    def models(self) -> dict[str, PreTrainedModel]:
        return {"sft": self.sft, "dpo": self.dpo}


def check_pair_configs(sft_dir: str | Path, dpo_dir: str | Path) -> ModelShape:
    """Step 1 only (configs): cheap, so the CLI can validate --layers before loading weights."""
    sft_dir, dpo_dir = Path(sft_dir), Path(dpo_dir)
    check_model_dir(sft_dir, "--sft")
    check_model_dir(dpo_dir, "--dpo")
    config_a, config_b = read_config(sft_dir), read_config(dpo_dir)
    _refuse(compare_configs(config_a, config_b), sft_dir, dpo_dir)
    return shape_of(config_a, sft_dir)


def model_info(model_dir: Path, shape: ModelShape, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    from core.provenance import chat_template_sha256, tokenizer_sha256, weights_sha256

    return {
        "model_dir": str(model_dir.resolve()),
        "weights_sha256": weights_sha256(model_dir),
        "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "chat_template_sha256": chat_template_sha256(tokenizer),
        "model_type": shape.model_type,
        "n_layers": shape.n_layers,
        "d_model": shape.d_model,
        "d_mlp": shape.d_mlp,
    }


def load_pair(sft_dir: str | Path, dpo_dir: str | Path, device: str | None = None, dtype: str = "auto") -> ModelPair:
    """Load both models after checking they are comparable; raises ProbeError naming what differs."""
    sft_dir, dpo_dir = Path(sft_dir), Path(dpo_dir)
    shape = check_pair_configs(sft_dir, dpo_dir)
    tok_a, tok_b = load_tokenizer(sft_dir, "--sft"), load_tokenizer(dpo_dir, "--dpo")
    _refuse(compare_tokenizers(tok_a, tok_b), sft_dir, dpo_dir)
    if not tok_a.chat_template:
        raise ProbeError(
            f"{sft_dir}: the tokenizer has no chat template; prompts cannot be rendered as the model was trained"
        )
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    sft = load_model(sft_dir, "--sft", dtype=torch_dtype, device=device, eval_mode=True)
    dpo = load_model(dpo_dir, "--dpo", dtype=torch_dtype, device=device, eval_mode=True)
    _refuse(compare_layouts(sft, dpo), sft_dir, dpo_dir)
    info = {"sft": model_info(sft_dir, shape, tok_a), "dpo": model_info(dpo_dir, shape, tok_b)}
    return ModelPair(sft, dpo, tok_a, sft_dir, dpo_dir, shape, device, torch_dtype, info)


def check_base_config(sft_dir: str | Path, base_dir: str | Path) -> None:
    """The third model (``--base``) must have the pair's architecture and widths (configs only, nothing loaded)."""
    check_model_dir(Path(base_dir), "--base")
    problems = compare_configs(read_config(sft_dir), read_config(base_dir), ("sft", "base"))
    if problems:
        raise ProbeError(f"--base {base_dir} is not comparable with --sft {sft_dir}: " + "; ".join(problems))


def load_base(base_dir: str | Path, pair: ModelPair) -> tuple[PreTrainedModel, dict[str, Any]]:
    """(model, provenance) of the base model, refused unless it reads the pair's token ids and has its module layout.

    The base is fed the pair's token ids (rendered with the SFT tokenizer's chat template), so its vocabulary and
    special tokens must be the pair's; its own chat template may differ (a base model may have none).
    """
    base_dir = Path(base_dir)
    check_base_config(pair.sft_dir, base_dir)
    tokenizer = load_tokenizer(base_dir, "--base")
    problems = tokenizer_differences(pair.tokenizer, tokenizer, ("sft", "base"), chat_template=False)
    if not problems:
        model = load_model(base_dir, "--base", dtype=pair.dtype, device=pair.device, eval_mode=True)
        problems = compare_layouts(pair.sft, model, ("sft", "base"))
    if problems:
        raise ProbeError(f"--base {base_dir} is not comparable with --sft {pair.sft_dir}: " + "; ".join(problems))
    return model, model_info(base_dir, pair.shape, tokenizer)
