"""Load and check model directories before any training step runs.

Every mistake a user can make with model paths is caught here with one line that names
the argument: a missing directory, a directory that is not a causal LM, a tokenizer
whose vocabulary does not fit the model's embeddings, an SFT model whose tokenizer
differs from the reference model's. Chat templates: training needs one whose assistant
spans are marked with ``{% generation %}`` so that the loss skips prompt tokens. A
tokenizer's own template is kept (TRL patches the families it knows); a tokenizer with
none gets the paper's hand-built format for its family (Llama-3 headers, or ChatML).

Example:
    >>> model, tok = load_causal_lm("runs/sft", flag="--sft")       # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import ProbeError

# Architectures the toolkit is tested with (training, hooks); others are attempted with a note.
KNOWN_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gpt2")

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% generation %}{{ message['content'] | trim }}{{ eos_token }}{% endgeneration %}"
    "{% else %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + eos_token }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] | trim }}{{ eos_token }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] | trim) + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
BUILTIN_TEMPLATES = {"llama3": LLAMA3_TEMPLATE, "chatml": CHATML_TEMPLATE}


def check_model_dir(path: Path, flag: str) -> dict[str, Any]:
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
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{flag} {config}: malformed JSON ({exc.msg}, line {exc.lineno})") from None
    if not any(p.glob("*.safetensors")) and not any(p.glob("pytorch_model*.bin")):
        raise ProbeError(f"{flag} {p}: no weights (*.safetensors or pytorch_model*.bin) found")
    if not (p / "tokenizer_config.json").is_file():
        raise ProbeError(f"{flag} {p}: no tokenizer (tokenizer_config.json) found; save the tokenizer next to the model")
    return data


def load_causal_lm(path: Path, flag: str, *, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a checked directory, fp32 by default, offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_dir(path, flag)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise ProbeError(f"{flag} {path}: cannot load as a causal language model ({str(exc).splitlines()[0]})") from None
    check_vocab_fits(model, tokenizer, f"{flag} {path}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def check_vocab_fits(model: Any, tokenizer: Any, where: str) -> None:
    """Every token id the tokenizer can produce must have an embedding row."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ProbeError(f"{where}: tokenizer mismatch: the tokenizer has {len(tokenizer)} tokens but the model embeds only {rows}; "
                         "use the tokenizer saved with this model")


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of the vocabulary, the special tokens and the chat template."""
    import hashlib

    payload = json.dumps({"vocab": sorted(tokenizer.get_vocab().items()), "special": tokenizer.all_special_tokens,
                          "template": tokenizer.chat_template or ""}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def check_same_tokenizer(a: Any, b: Any, what: str) -> None:
    if a.get_vocab() != b.get_vocab():
        raise ProbeError(f"tokenizer mismatch: {what} have different vocabularies; both must come from the same base model")
    if a.all_special_tokens != b.all_special_tokens:
        raise ProbeError(f"tokenizer mismatch: {what} have different special tokens ({a.all_special_tokens} vs {b.all_special_tokens})")


def apply_chat_template_choice(tokenizer: Any, choice: str, model_type: str) -> str:
    """Set the tokenizer's template per ``choice`` (auto | llama3 | chatml | path); returns what was used."""
    if choice == "auto":
        if tokenizer.chat_template:
            return "tokenizer"
        choice = "llama3" if model_type == "llama" else "chatml"
    if choice in BUILTIN_TEMPLATES:
        tokenizer.chat_template = BUILTIN_TEMPLATES[choice]
        return choice
    path = Path(choice)
    if not path.is_file():
        raise ProbeError(f"--chat-template {choice}: expected auto, llama3, chatml or a path to a Jinja template file")
    tokenizer.chat_template = path.read_text(encoding="utf-8")
    return str(path)
