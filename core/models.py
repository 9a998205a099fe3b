"""Load and check model directories before anything expensive runs: one loader for every stage.

Every mistake a user can make with model paths is caught here with one line that names
the argument: a missing directory, a directory that is not a causal LM, missing,
truncated or corrupted weights, a shard that the index names but the directory lacks,
an unreadable config or tokenizer, a tokenizer whose vocabulary does not fit the model's
embeddings, two models whose tokenizers differ. Training, recording, evaluation and
interventions all load through :func:`load_model` / :func:`load_tokenizer` (or
:func:`load_causal_lm`, both at once), which run :func:`check_model_dir` first, so they
share the pad-token policy (the tokenizer's pad token, else its EOS) and the error messages.

Weights are checked without loading a tensor: a safetensors file is an 8-byte header
length, a JSON header giving every tensor's dtype, shape and byte range, then the data.
Reading the header and comparing the ranges with the file size finds a truncated file, a
garbage header and a zero-byte file in microseconds, where loading would fail deep in
transformers (or, for a header that lies, read past the end). Flipped bytes inside tensor
data cannot be seen this way; the weights fingerprint (:mod:`core.provenance`) is what
ties a model to its exact bytes.

A model directory is data, never code. :func:`check_model_dir` refuses, before anything is
loaded: an ``auto_map`` (a model's own Python code; every loader also passes
``trust_remote_code=False``, so transformers can never ask); a ``.bin`` whose pickle holds
more than tensors (read with ``weights_only=True`` on the meta device, so no byte of data is
allocated); and config sizes (depth, width, MLP width, heads, context, vocabulary, token ids)
that the weights' own tensor shapes do not bear out, so a ``num_hidden_layers`` of 2e9 is one
line and not two billion modules. ``generation_config.json`` contributes only its token ids
(checked); the toolkit decodes with its own settings, and says which keys it ignores.

Example:
    >>> check_model_dir("/nonexistent/sft", "--sft")
    Traceback (most recent call last):
    core.errors.ProbeError: --sft /nonexistent/sft: no such directory; expected a local Hugging Face model directory
    >>> printable("ok\\x1b[2J\\nnext")
    'ok?[2J?next'
    >>> model, tok = load_causal_lm("runs/sft", "--sft")       # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core.errors import ProbeError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

SAFE_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit
_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}


def check_model_dir(path: str | Path, flag: str) -> dict[str, Any]:
    """The directory's ``config.json`` as a dict; raises a one-line :class:`ProbeError` unless config, weights
    (present, whole, tensors only) and tokenizer are all there, no file asks to run the model's own code and the
    config's sizes fit the weights."""
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{flag} {p}: no such directory; expected a local Hugging Face model directory")
    if not p.is_dir():
        raise ProbeError(f"{flag} {p}: not a directory; expected a local Hugging Face model directory")
    config = p / "config.json"
    if not config.is_file():
        raise ProbeError(
            f"{flag} {p}: no config.json; expected a Hugging Face model directory (save_pretrained output)"
        )
    data = _read_json(config, flag)
    if not isinstance(data, dict) or "model_type" not in data:
        raise ProbeError(f"{flag} {config}: not a model config (expected a JSON object with a model_type)")
    refuse_custom_code(config, data, flag)
    tokenizer_config = p / "tokenizer_config.json"
    if tokenizer_config.is_file():
        refuse_custom_code(tokenizer_config, _read_json(tokenizer_config, flag), flag)
    shapes = check_weights(p, flag)
    check_config_sizes(data, shapes, f"{flag} {config}")
    if not tokenizer_config.is_file():
        raise ProbeError(
            f"{flag} {p}: no tokenizer (tokenizer_config.json) found; save the tokenizer next to the model"
        )
    return data


def refuse_custom_code(file: Path, body: Any, flag: str) -> None:
    """One line for a JSON file that names the model's own Python code (an ``auto_map``, at any depth)."""
    found = _auto_map(body)
    if found is not None:
        raise ProbeError(
            f"{flag} {file}: its auto_map names the model's own Python code ({_brief(found)}); the toolkit never "
            "runs a model directory's code (trust_remote_code is off): "
            "use a model whose architecture transformers ships"
        )


def _auto_map(body: Any, depth: int = 0) -> Any:
    if depth > 20:
        return None
    children: Iterable[Any]
    if isinstance(body, dict):
        if "auto_map" in body:
            return body["auto_map"]
        children = body.values()
    elif isinstance(body, list):
        children = body
    else:
        return None
    return next((found for child in children if (found := _auto_map(child, depth + 1)) is not None), None)


def printable(text: str, limit: int = 200) -> str:
    """``text`` on one line, its control characters (terminal escapes, newlines) shown as ``?``, cut to ``limit``."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _brief(value: Any, limit: int = 80) -> str:
    """A value from a hostile file as one short printable line (JSON, so ``"5"`` and ``5`` differ)."""
    return printable(json.dumps(value, ensure_ascii=False, default=str), limit)


def _read_json(path: Path, flag: str) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ProbeError(f"{flag} {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ProbeError(f"{flag} {path}: not UTF-8 text; the file is damaged") from None
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{flag} {path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    except RecursionError:
        raise ProbeError(f"{flag} {path}: JSON nested too deeply to be a model file") from None


def weight_files(path: str | Path, flag: str = "--model") -> list[Path]:
    """The weight files transformers will read from ``path``: the shards an index names, else the
    single-file weights; a :class:`ProbeError` when there are none or a named shard is missing."""
    p = Path(path)
    for single, index_name in (("model.safetensors", SAFE_INDEX), ("pytorch_model.bin", BIN_INDEX)):
        if (p / single).is_file():
            return [p / single]
        if (p / index_name).is_file():
            return _shards(p / index_name, flag)
    files = sorted(p.glob("*.safetensors")) or sorted(p.glob("pytorch_model*.bin"))
    if not files:
        raise ProbeError(f"{flag} {p}: no weights (*.safetensors or pytorch_model*.bin) found")
    return files


def _shards(index: Path, flag: str) -> list[Path]:
    body = _read_json(index, flag)
    weight_map = body.get("weight_map") if isinstance(body, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise ProbeError(
            f'{flag} {index}: not a weight index (expected a non-empty "weight_map" of tensor name -> shard file)'
        )
    shards = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ProbeError(
            f"{flag} {index.parent}: shard {missing[0]}{more} named in {index.name} is missing; "
            "copy the whole model directory again"
        )
    return shards


Shapes = dict[str, list[int]]


def check_weights(path: str | Path, flag: str = "--model") -> Shapes:
    """Every weight file is present, readable, whole (safetensors: header and byte ranges) and holds only tensors
    (``.bin``: a pickle read with ``weights_only``); returns every tensor's shape by name."""
    shapes: Shapes = {}
    for file in weight_files(path, flag):
        try:
            size = file.stat().st_size
            if size == 0:
                raise ProbeError(f"{flag} {file}: empty weights file (0 bytes); the copy or save did not finish")
            shapes.update(
                check_safetensors(file, size, flag)
                if file.suffix == ".safetensors"
                else check_pickled_weights(file, flag)
            )
        except OSError as exc:
            raise ProbeError(f"{flag} {file}: cannot read the weights ({exc.strerror or exc})") from None
    return shapes


def check_safetensors(file: Path, size: int, flag: str) -> Shapes:
    """The header parses and every tensor's byte range lies inside the file and matches its dtype and shape;
    returns the shapes."""
    damaged = f"{flag} {file}: damaged safetensors file"
    with file.open("rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 2 or length > _MAX_HEADER or 8 + length > size:
            raise ProbeError(
                f"{damaged} (header length {length} does not fit a {size}-byte file); "
                "it is truncated or not safetensors"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ProbeError(f"{damaged} (its header is not valid JSON)") from None
    if not isinstance(header, dict):
        raise ProbeError(f"{damaged} (its header is not a JSON object)")
    end = _tensor_data_end(header, damaged)
    available = size - 8 - length
    if end > available:
        raise ProbeError(
            f"{damaged}: truncated (the header describes {end} bytes of tensor data, the file holds {available}); "
            "copy or save the model again"
        )
    return {name: [int(d) for d in info["shape"]] for name, info in header.items() if name != "__metadata__"}


def check_pickled_weights(file: Path, flag: str) -> Shapes:
    """A ``.bin`` state dict read as transformers will read it (``weights_only``: tensors and plain containers, no
    code), onto the meta device so no tensor data is allocated; returns the shapes."""
    import pickle
    import zipfile

    import torch

    try:
        state = torch.load(file, map_location="meta", weights_only=True, mmap=zipfile.is_zipfile(file))
    except pickle.UnpicklingError as exc:
        refused = next((ln.strip() for ln in str(exc).splitlines() if "GLOBAL" in ln), "it holds more than tensors")
        raise ProbeError(
            f"{flag} {file}: refused: the pickle asks to run code, "
            f"not only to hold tensors ({printable(refused, 120)}); "
            "the toolkit loads .bin weights only with weights_only=True; save the model as safetensors"
        ) from None
    except Exception as exc:  # a damaged zip or pickle raises anything from EOFError to RuntimeError
        raise ProbeError(f"{flag} {file}: damaged or not a PyTorch weights file ({_first_line(exc)})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ProbeError(f"{flag} {file}: not a state dict (expected a mapping of tensor name to tensor)")
    return {str(name): list(tensor.shape) for name, tensor in state.items()}


def _tensor_data_end(header: dict[str, Any], damaged: str) -> int:
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in info["data_offsets"])
            count = 1
            for dim in info["shape"]:
                count *= int(dim)
            width = _DTYPE_BYTES.get(str(info["dtype"]))
        except (KeyError, TypeError, ValueError):
            raise ProbeError(f"{damaged} (tensor {name!r} has no valid dtype, shape and data_offsets)") from None
        if begin < 0 or stop < begin or (width is not None and stop - begin != count * width):
            raise ProbeError(
                f"{damaged} (tensor {name!r}: byte range {begin}-{stop} does not match its dtype and shape)"
            )
        end = max(end, stop)
    return end


# config keys (and their older spellings) whose values size the model transformers builds
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
_WIDTHS = (
    "hidden_size",
    "n_embd",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "head_dim",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "vocab_size",
)
_CONTEXT = ("max_position_embeddings", "n_positions", "n_ctx")
_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
_POSITIONS = ("wpe.weight", "embed_positions.weight", "position_embeddings.weight")
MAX_CONTEXT = 1 << 24  # tokens; a rotary model's context has no tensor to check it against


def check_config_sizes(config: dict[str, Any], shapes: Shapes, where: str) -> None:
    """Refuse, before transformers builds anything, a config size the weights do not bear out: each is a positive
    whole number, the depth is the number of layers the tensors hold, the vocabulary and width are the embedding's,
    no width exceeds every tensor's, and the context is the position table's (or at most :data:`MAX_CONTEXT`)."""
    sizes = {key: _size(config, key, where) for key in (*_LAYERS, *_WIDTHS, *_CONTEXT) if config.get(key) is not None}
    largest = max((d for shape in shapes.values() for d in shape), default=0)
    for key in _WIDTHS:
        if key in sizes and sizes[key] > largest:
            raise ProbeError(
                f"{where}: {key} {sizes[key]} is larger than any dimension of the weights' tensors (at most "
                f"{largest}); the config does not belong to these weights"
            )
    _check_depth(sizes, shapes, where)
    _check_embedding(sizes, shapes, where)
    _check_context(sizes, shapes, where)
    heads, kv = sizes.get("num_attention_heads"), sizes.get("num_key_value_heads")
    if heads and kv and heads % kv:
        raise ProbeError(f"{where}: num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    # only their type: transformers' own configs carry ids like -1, and generation checks its own
    for key in _TOKEN_IDS:
        _check_token_ids(config.get(key), key, None, where, allow_negative=True)
    if isinstance(config.get("text_config"), dict):
        check_config_sizes(config["text_config"], shapes, f"{where} (text_config)")


def _size(config: dict[str, Any], key: str, where: str) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProbeError(f"{where}: {key} must be a positive whole number, got {_brief(value)}")
    return value


def _check_depth(sizes: dict[str, int], shapes: Shapes, where: str) -> None:
    key = next((k for k in _LAYERS if k in sizes), None)
    if key is None:
        return
    held = {int(m.group(1)) for name in shapes if (m := _LAYER_INDEX.search(name))}
    bound = len(held) if held else len(shapes)
    if sizes[key] > bound:
        what = f"{bound} layers" if held else f"{bound} tensors in all"
        raise ProbeError(
            f"{where}: {key} {sizes[key]}, but the weights hold {what}; the config does not belong to these weights"
        )


def _named(shapes: Shapes, suffixes: tuple[str, ...]) -> tuple[str, list[int]] | None:
    return next(((name, shape) for name, shape in shapes.items() if name.endswith(suffixes) and len(shape) == 2), None)


def _check_embedding(sizes: dict[str, int], shapes: Shapes, where: str) -> None:
    found = _named(shapes, _EMBEDDINGS)
    if found is None:
        return
    name, (rows, width) = found
    if "vocab_size" in sizes and sizes["vocab_size"] != rows:
        raise ProbeError(
            f"{where}: vocab_size {sizes['vocab_size']}, but the embedding {name} has {rows} rows; "
            "the config does not belong to these weights"
        )
    hidden = next((sizes[k] for k in ("hidden_size", "n_embd") if k in sizes), None)
    if hidden is not None and hidden != width:
        raise ProbeError(
            f"{where}: hidden size {hidden}, but the embedding {name} is {width} wide; "
            "the config does not belong to these weights"
        )


def _check_context(sizes: dict[str, int], shapes: Shapes, where: str) -> None:
    key = next((k for k in _CONTEXT if k in sizes), None)
    if key is None:
        return
    table = _named(shapes, _POSITIONS)
    if table is not None and sizes[key] > table[1][0]:
        raise ProbeError(
            f"{where}: {key} {sizes[key]}, but the position table {table[0]} has {table[1][0]} rows; "
            "the config does not belong to these weights"
        )
    if sizes[key] > MAX_CONTEXT:
        raise ProbeError(
            f"{where}: {key} {sizes[key]} is beyond any real model's context; the toolkit reads contexts of at most "
            f"{MAX_CONTEXT} tokens"
        )


def _check_token_ids(value: Any, key: str, vocab: int | None, where: str, allow_negative: bool = False) -> None:
    """None, a token id or (a list of) token ids below ``vocab``; one line otherwise."""
    if value is None:
        return
    ids = value if isinstance(value, list) and value and key == "eos_token_id" else [value]
    lowest = -1 if allow_negative else 0
    for token in ids:
        if (
            isinstance(token, bool)
            or not isinstance(token, int)
            or token < lowest
            or (vocab is not None and token >= vocab)
        ):
            bound = f" below the vocabulary size {vocab}" if vocab is not None else ""
            raise ProbeError(f"{where}: {key} {_brief(value)} is not a token id (a whole number from {lowest}{bound})")


def _load_errors() -> tuple[type[BaseException], ...]:
    """What transformers raises for a directory it cannot read (a config its strict dataclasses refuse included)."""
    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError

    return OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, StrictDataclassError


def load_config(path: str | Path, flag: str = "--model") -> PreTrainedConfig:
    """The directory's transformers config, from a checked directory, never running its code."""
    from transformers import AutoConfig

    check_model_dir(path, flag)
    try:
        config: PreTrainedConfig = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
        return config
    except _load_errors() as exc:
        raise ProbeError(f"{flag} {path}: cannot read config.json ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return printable(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def load_tokenizer(path: str | Path, flag: str = "--model") -> PreTrainedTokenizerBase:
    """The directory's tokenizer, with a pad token (EOS when it has none); its chat template will render within
    the toolkit's budget (:mod:`core.sandbox`), also where transformers or TRL render it."""
    from transformers import AutoTokenizer

    from core.sandbox import install_in_transformers

    install_in_transformers()
    check_model_dir(path, flag)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except _load_errors() as exc:
        raise ProbeError(f"{flag} {path}: cannot load the tokenizer ({_first_line(exc)})") from None
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | Path, flag: str, *, dtype: torch.dtype | None = None, device: str = "cpu", eval_mode: bool = False
) -> PreTrainedModel:
    """The causal LM in ``path`` (fp32 by default); ``device="auto"`` spreads it with ``device_map``."""
    import torch
    from transformers import AutoModelForCausalLM

    config = check_model_dir(path, flag)
    kwargs: dict[str, Any] = {
        "dtype": dtype or torch.float32,
        "trust_remote_code": False,
        "weights_only": True,
        "use_safetensors": weight_files(path, flag)[0].suffix == ".safetensors",
        "generation_config": generation_config(Path(path), config, flag),
    }
    if device == "auto":
        kwargs["device_map"] = "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except _load_errors() as exc:
        raise ProbeError(f"{flag} {path}: cannot load as a causal language model ({_first_line(exc)})") from None
    if device not in ("auto", "cpu"):
        # transformers wraps PreTrainedModel.to in functools.wraps, which mypy reads as an unbound function
        model.to(device)  # type: ignore[arg-type]
    if eval_mode:
        model.eval()
        model.requires_grad_(False)
    return model


GENERATION_FILE = "generation_config.json"
_GENERATION_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# keys that change nothing here: bookkeeping, and what every generate call of the toolkit sets itself
_GENERATION_UNUSED = frozenset(
    {
        "_from_model_config",
        "transformers_version",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict_in_generate",
        "output_scores",
        "output_logits",
        "max_new_tokens",
        "max_length",
        "do_sample",
        "temperature",
        "top_p",
        "top_k",
    }
)
_warned: set[str] = set()


def warn(message: str) -> None:
    """One ``warning:`` line on stderr, once per process for the same message."""
    import sys

    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr, flush=True)


def generation_config(path: Path, config: dict[str, Any], flag: str) -> Any:
    """The generation config the model gets: only the token ids of its ``generation_config.json`` (each checked
    against the vocabulary; config.json's when there is no file). The toolkit decodes with its own settings, so any
    other key is ignored, with one warning naming the keys; a file that cannot be read is ignored with one warning."""
    from transformers import GenerationConfig

    file = path / GENERATION_FILE
    body = _generation_body(file, flag) if file.exists() else {k: v for k, v in config.items() if k in _GENERATION_IDS}
    vocab = config.get("vocab_size") if isinstance(config.get("vocab_size"), int) else None
    ids: dict[str, Any] = {}
    for key in _GENERATION_IDS:
        try:
            _check_token_ids(body.get(key), key, vocab, "")
            ids[key] = body.get(key)
        except ProbeError:
            if file.exists():
                warn(
                    f"{flag} {file}: {key} {_brief(body.get(key))} is not a token id below the vocabulary size "
                    f"{vocab}; ignored"
                )
    ignored = sorted(k for k in body if k not in _GENERATION_IDS and k not in _GENERATION_UNUSED)
    if ignored and file.exists():
        warn(
            f"{flag} {file}: ignored {printable(', '.join(ignored))}: the toolkit decodes with its own settings "
            "(greedy unless sampling is asked for; --max-new-tokens)"
        )
    return GenerationConfig(**{k: v for k, v in ids.items() if v is not None})


def _generation_body(file: Path, flag: str) -> dict[str, Any]:
    try:
        body = _read_json(file, flag)
    except ProbeError as exc:
        warn(f"{exc}; ignored: the toolkit decodes with its own settings")
        return {}
    if not isinstance(body, dict):
        warn(f"{flag} {file}: not a JSON object; ignored: the toolkit decodes with its own settings")
        return {}
    return body


def load_causal_lm(
    path: str | Path, flag: str, *, dtype: torch.dtype | None = None, device: str = "cpu", eval_mode: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) from a checked directory, fp32 by default, offline."""
    tokenizer = load_tokenizer(path, flag)
    model = load_model(path, flag, dtype=dtype, device=device, eval_mode=eval_mode)
    check_vocab_fits(model, tokenizer, f"{flag} {path}")
    return model, tokenizer


def same_directory(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one directory (symlinks, ``..`` and relative paths resolved)."""
    try:
        return Path(a).resolve() == Path(b).resolve() or Path(a).samefile(b)
    except OSError:
        return False


def input_embedding(model: PreTrainedModel) -> torch.Tensor:
    """The input embedding matrix ``[vocab, d_model]``; its device is where token ids go."""
    return cast("torch.Tensor", model.get_input_embeddings().weight)


def check_vocab_fits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, where: str) -> None:
    """Every token id the tokenizer can produce must have an embedding row."""
    rows = input_embedding(model).shape[0]
    if len(tokenizer) > rows:
        raise ProbeError(
            f"{where}: tokenizer mismatch: the tokenizer has {len(tokenizer)} tokens but the model embeds only {rows}; "
            "use the tokenizer saved with this model"
        )


def tokenizer_differences(
    a: PreTrainedTokenizerBase,
    b: PreTrainedTokenizerBase,
    labels: tuple[str, str] = ("sft", "dpo"),
    chat_template: bool = True,
) -> list[str]:
    """Differences in vocabulary, special tokens and (optionally) chat template, one line each, naming examples."""
    first, second = labels
    problems: list[str] = []
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    if vocab_a != vocab_b:
        only_a = sorted(set(vocab_a) - set(vocab_b))[:3]
        only_b = sorted(set(vocab_b) - set(vocab_a))[:3]
        moved = sum(1 for t in set(vocab_a) & set(vocab_b) if vocab_a[t] != vocab_b[t])
        problems.append(
            f"tokenizer vocabulary: {len(vocab_a)} vs {len(vocab_b)} tokens, {moved} with different ids, "
            f"only in {first} e.g. {only_a}, only in {second} e.g. {only_b}"
        )
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            problems.append(f"tokenizer {attr}: {first} {getattr(a, attr)!r} vs {second} {getattr(b, attr)!r}")
    if a.all_special_tokens != b.all_special_tokens:
        problems.append(f"special tokens: {first} {a.all_special_tokens} vs {second} {b.all_special_tokens}")
    if chat_template and (a.chat_template or "") != (b.chat_template or ""):
        problems.append("chat template differs (the two tokenizers would render the same conversation differently)")
    return problems


def check_same_tokenizer(
    a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase, what: str, labels: tuple[str, str] = ("policy", "reference")
) -> None:
    """Refuse two tokenizers that would give other ids for the same text (the chat template may differ)."""
    problems = tokenizer_differences(a, b, labels, chat_template=False)
    if problems:
        raise ProbeError(f"tokenizer mismatch: {what} must come from the same base model: {'; '.join(problems)}")
