"""Build the tiny base model locally: a byte-level BPE tokenizer and a random Llama.

No weights can be downloaded here, so the embedded default pair starts from a model
the toolkit makes itself. The tokenizer uses Llama-3's special tokens and a chat
template with ``{% generation %}`` markers around assistant text, which TRL's
``assistant_only_loss`` needs. The template emits ``{{ bos_token }}`` and the
tokenizer does *not* add BOS again, so every rendering has exactly one BOS whether it
is tokenized by ``apply_chat_template`` or by ``tokenizer(text)``.

Example:
    >>> spec = TinySpec(n_layers=4, hidden_size=32)
    >>> path = build_tiny_base(["some corpus line", ...], "out/tiny", spec)   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.templates import LLAMA3_TEMPLATE

if TYPE_CHECKING:  # heavy imports stay inside the functions: TinySpec is read by config validation
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

BOS, EOT, PAD = "<|begin_of_text|>", "<|eot_id|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", EOT, PAD]


@dataclass(frozen=True)
class TinySpec:
    """Shape of the tiny Llama. 32 layers by default, so the paper's window 12-31 exists."""

    n_layers: int = 32
    hidden_size: int = 64
    intermediate_size: int = 256
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 2048
    max_positions: int = 1024
    seed: int = 0
    # Optional pretraining on the corpus itself (plain causal LM, every token in the loss), so the
    # base knows the language of the domain before SFT teaches the chat format; 0 = random base.
    pretrain_steps: int = 0
    pretrain_lr: float = 2e-3
    pretrain_batch_size: int = 16
    pretrain_max_length: int = 256
    # Depth up-scaling: pretrain a shallow model of this many layers (cheap steps), then grow it to
    # n_layers by inserting blocks whose output projections are zero (exact identities at first,
    # trained by SFT/DPO afterwards). 0 = pretrain at full depth.
    pretrain_layers: int = 0
    # What the warm start trains on (training.pretrain): "plain" documents, every token in the loss, or
    # "chat" -- the SFT conversations through the chat template, loss on assistant spans only.
    pretrain_format: str = "plain"

    def __post_init__(self) -> None:
        from training.pretrain import PRETRAIN_FORMATS

        if self.pretrain_format not in PRETRAIN_FORMATS:
            raise ValueError(
                f"tiny_spec.pretrain_format: expected one of {', '.join(PRETRAIN_FORMATS)}, "
                f"got {self.pretrain_format!r}"
            )


def train_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOT,
        pad_token=PAD,
        chat_template=LLAMA3_TEMPLATE,
        padding_side="left",
        model_max_length=1024,
    )


def build_tiny_base(
    corpus: Iterable[str],
    out_dir: str | os.PathLike[str],
    spec: TinySpec = TinySpec(),
    report: Callable[[int, int], None] | None = None,
    conversations: Sequence[list[dict[str, str]]] | None = None,
) -> Path:
    """Train the tokenizer on ``corpus``, initialise a Llama from ``spec.seed``, warm it up when
    ``spec.pretrain_steps > 0`` (on ``corpus``, or on ``conversations`` when ``spec.pretrain_format == "chat"``;
    ``report(step, total)`` follows it), save both to ``out_dir``."""
    import torch
    from transformers import LlamaForCausalLM

    corpus = list(corpus)
    tokenizer = train_tokenizer(corpus, spec.vocab_size)
    config = _llama_config(spec, tokenizer)
    shallow = 0 < spec.pretrain_layers < spec.n_layers and spec.pretrain_steps > 0
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(
        config.__class__(**{**config.to_dict(), "num_hidden_layers": spec.pretrain_layers}) if shallow else config
    )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    if spec.pretrain_steps > 0:
        _warm_up(model, tokenizer, spec, corpus, conversations, report)
    if shallow:
        from training.pretrain import grow_depth

        model = grow_depth(model, config, seed=spec.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "tiny_spec.json").write_text(__import__("json").dumps(asdict(spec), indent=1))
    return out


def _llama_config(spec: TinySpec, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """The full-depth Llama config of ``spec``, with the tokenizer's size and special ids."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        max_position_embeddings=spec.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _warm_up(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    spec: TinySpec,
    corpus: list[str],
    conversations: Sequence[list[dict[str, str]]] | None,
    report: Callable[[int, int], None] | None,
) -> None:
    """Pretrain ``model`` on the corpus (or the SFT conversations, for ``pretrain_format == "chat"``)."""
    from training.pretrain import encode_chat, encode_plain, pretrain_causal_lm

    if spec.pretrain_format == "chat":
        if not conversations:
            raise ValueError("tiny_spec.pretrain_format 'chat' needs the SFT conversations")
        docs = encode_chat(tokenizer, conversations, spec.pretrain_max_length)
    else:
        docs = encode_plain(tokenizer, corpus, spec.pretrain_max_length)
    pretrain_causal_lm(
        model,
        tokenizer,
        docs,
        steps=spec.pretrain_steps,
        learning_rate=spec.pretrain_lr,
        batch_size=spec.pretrain_batch_size,
        seed=spec.seed,
        report=report,
    )
