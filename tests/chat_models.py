"""Builders for tiny random chat models that look like the ones users bring (not a test file).

The toolkit's own tiny models are Llama-3 style: one ``<|begin_of_text|>``, untied
embeddings, 32 layers. Users bring other shapes, and every Llama-3 assumption left in
the code breaks on one of them. Two builders reproduce those shapes in a couple of
seconds each, saved with ``save_pretrained`` (model + tokenizer + template):

* :func:`build_chatml_model`: SmolLM2-135M-Instruct in miniature. ``LlamaForCausalLM``
  with 5 layers (not 32, not a multiple of 4), hidden size 72 with 9 attention heads /
  3 KV heads, tied embeddings; a byte-level BPE tokenizer whose BOS *and* pad are
  ChatML's turn tokens (``bos_token="<|im_start|>"``, which opens every turn,
  ``eos_token = pad_token = "<|im_end|>"``); SmolLM2's exact chat template, which
  inserts a default system prompt when the first message is not a system one and has
  no ``{% generation %}`` markers.
* :func:`build_nobos_model`: Qwen2-0.5B-Instruct in miniature. ``Qwen2ForCausalLM`` with
  3 layers, tied embeddings, attention biases; a tokenizer with **no BOS token at all**
  (eos ``<|im_end|>``, pad ``<|endoftext|>``), Qwen2's ChatML template with its own
  default system prompt, and a generation config with two stop ids, as Qwen2 ships.

The tokenizer is trained on the text of a synthesized RoleMRC data directory, so real
prompts tokenize into a few hundred tokens, not thousands of bytes.

Example:
    >>> sorted(SPECS)
    ['chatml', 'nobos']
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QWEN2_DEFAULT_SYSTEM = "You are a helpful assistant."


@dataclass(frozen=True)
class ChatModelSpec:
    """What differs between the two tiny chat models."""

    name: str
    architecture: str  # "llama" or "qwen2"
    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    n_kv_heads: int
    special_tokens: tuple[str, ...]
    bos_token: str | None
    eos_token: str
    pad_token: str
    template: str
    default_system: str
    generation_eos: tuple[str, ...]  # the generation config's eos_token_id (one or several)
    vocab_size: int = 512
    seed: int = 0


SPECS: dict[str, ChatModelSpec] = {
    "chatml": ChatModelSpec(
        name="chatml",
        architecture="llama",
        n_layers=5,
        hidden_size=72,
        intermediate_size=144,
        n_heads=9,
        n_kv_heads=3,
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        template=SMOLLM2_TEMPLATE,
        default_system=SMOLLM2_DEFAULT_SYSTEM,
        generation_eos=("<|im_end|>",),
    ),
    "nobos": ChatModelSpec(
        name="nobos",
        architecture="qwen2",
        n_layers=3,
        hidden_size=64,
        intermediate_size=128,
        n_heads=4,
        n_kv_heads=2,
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        template=QWEN2_TEMPLATE,
        default_system=QWEN2_DEFAULT_SYSTEM,
        generation_eos=("<|im_end|>", "<|endoftext|>"),
    ),
}


def corpus_from_data(data_dir: str | Path) -> list[str]:
    """Every message text of a synthesized data directory (sft, dpo and test rows), one document per line."""
    texts: list[str] = []
    for name, keys in (("sft.jsonl", ("conversations",)), ("dpo.jsonl", ("prompt",)), ("test.jsonl", ("question",))):
        path = Path(data_dir) / name
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for key in keys:
                texts += [str(turn["content"]) for turn in row.get(key, [])]
            texts += [str(row[k]) for k in ("chosen", "rejected", "reference") if isinstance(row.get(k), str)]
    return texts


def train_chat_tokenizer(corpus: Iterable[str], spec: ChatModelSpec) -> Any:
    """A byte-level BPE tokenizer with the spec's special tokens and template (no post-processor: nothing added)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(spec.special_tokens),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(corpus), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=spec.bos_token,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        chat_template=spec.template,
        model_max_length=2048,
    )


def _config(spec: ChatModelSpec, tokenizer: Any) -> Any:
    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if spec.architecture == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(rope_theta=100000.0, **common)
    from transformers import Qwen2Config

    return Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common)


def build_chat_model(spec: ChatModelSpec | str, corpus: Iterable[str], out_dir: str | Path) -> Path:
    """Train the tokenizer, initialise the model from ``spec.seed``, save both (and the template) to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = SPECS[spec] if isinstance(spec, str) else spec
    tokenizer = train_chat_tokenizer(corpus, spec)
    config = _config(spec, tokenizer)
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in spec.generation_eos]
    model.generation_config.eos_token_id = ids[0] if len(ids) == 1 else ids
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_chatml_model(corpus: Iterable[str], out_dir: str | Path) -> Path:
    return build_chat_model("chatml", corpus, out_dir)


def build_nobos_model(corpus: Iterable[str], out_dir: str | Path) -> Path:
    return build_chat_model("nobos", corpus, out_dir)


def perturbed_copy(src: str | Path, dst: str | Path, seed: int = 1, scale: float = 0.2) -> Path:
    """``src`` with small seeded weight perturbations (a stand-in "DPO" model that needs no training)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(dst)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp_min(1e-3))
    model.save_pretrained(dst)
    return Path(dst)


# --- the CLI, in-process (shared by the tests that drive `probe` on these models) ---------------------------------


def cli(*argv: str | Path) -> tuple[int, str, str]:
    """Run ``probe ARGV`` in-process, as the console script does: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from probe_cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def ok(*argv: str | Path) -> str:
    code, out, err = cli(*argv)
    assert code == 0, f"probe {' '.join(map(str, argv))} exited {code}:\n{err[-3000:]}"
    return out


def one_error_line(err: str) -> str:
    """The stderr of a refused command: exactly one non-blank line, starting with ``error:`` (nothing else, not even
    a weight-loading bar: a refusal comes before anything expensive)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]
