"""Load and check model directories before anything expensive runs: one loader for every stage.

Every mistake a user can make with model paths is caught here with one line that names
the argument: a missing directory, a directory that is not a causal LM, missing weights
or tokenizer, a tokenizer whose vocabulary does not fit the model's embeddings, two
models whose tokenizers differ. Training, recording, evaluation and interventions all
load through :func:`load_causal_lm`, so they share the pad-token policy (the tokenizer's
pad token, else its EOS) and the error messages.

Example:
    >>> model, tok = load_causal_lm("runs/sft", "--sft")       # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import ProbeError


def check_model_dir(path: str | Path, flag: str) -> dict[str, Any]:
    """The directory's ``config.json`` as a dict; raises a one-line :class:`ProbeError` if it is not a model dir."""
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{flag} {p}: no such directory; expected a local Hugging Face model directory")
    if not p.is_dir():
        raise ProbeError(f"{flag} {p}: not a directory; expected a local Hugging Face model directory")
    config = p / "config.json"
    if not config.is_file():
        raise ProbeError(f"{flag} {p}: no config.json; expected a Hugging Face model directory (save_pretrained output)")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProbeError(f"{flag} {config}: malformed JSON ({exc})") from None
    if not any(p.glob("*.safetensors")) and not any(p.glob("pytorch_model*.bin")):
        raise ProbeError(f"{flag} {p}: no weights (*.safetensors or pytorch_model*.bin) found")
    if not (p / "tokenizer_config.json").is_file():
        raise ProbeError(f"{flag} {p}: no tokenizer (tokenizer_config.json) found; save the tokenizer next to the model")
    return data


def load_tokenizer(path: str | Path, flag: str = "--model") -> Any:
    """The directory's tokenizer, with a pad token (EOS when it has none)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, KeyError) as exc:
        raise ProbeError(f"{flag} {path}: cannot load the tokenizer ({str(exc).splitlines()[0]})") from None
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, flag: str, *, dtype: Any = None, device: str = "cpu", eval_mode: bool = False) -> Any:
    """The causal LM in ``path`` (fp32 by default); ``device="auto"`` spreads it with ``device_map``."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype or torch.float32}
    if device == "auto":
        kwargs["device_map"] = "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ProbeError(f"{flag} {path}: cannot load as a causal language model ({str(exc).splitlines()[0]})") from None
    if device not in ("auto", "cpu"):
        model.to(device)
    if eval_mode:
        model.eval()
        model.requires_grad_(False)
    return model


def load_causal_lm(path: str | Path, flag: str, *, dtype: Any = None, device: str = "cpu",
                   eval_mode: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) from a checked directory, fp32 by default, offline."""
    check_model_dir(path, flag)
    tokenizer = load_tokenizer(path, flag)
    model = load_model(path, flag, dtype=dtype, device=device, eval_mode=eval_mode)
    check_vocab_fits(model, tokenizer, f"{flag} {path}")
    return model, tokenizer


def check_vocab_fits(model: Any, tokenizer: Any, where: str) -> None:
    """Every token id the tokenizer can produce must have an embedding row."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ProbeError(f"{where}: tokenizer mismatch: the tokenizer has {len(tokenizer)} tokens but the model embeds only {rows}; "
                         "use the tokenizer saved with this model")


def check_same_tokenizer(a: Any, b: Any, what: str) -> None:
    if a.get_vocab() != b.get_vocab():
        raise ProbeError(f"tokenizer mismatch: {what} have different vocabularies; both must come from the same base model")
    if a.all_special_tokens != b.all_special_tokens:
        raise ProbeError(f"tokenizer mismatch: {what} have different special tokens ({a.all_special_tokens} vs {b.all_special_tokens})")
