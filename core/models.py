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

Example:
    >>> model, tok = load_causal_lm("runs/sft", "--sft")       # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import ProbeError


SAFE_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
                "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}


def check_model_dir(path: str | Path, flag: str) -> dict[str, Any]:
    """The directory's ``config.json`` as a dict; raises a one-line :class:`ProbeError` unless config, weights
    (present and whole) and tokenizer are all there."""
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{flag} {p}: no such directory; expected a local Hugging Face model directory")
    if not p.is_dir():
        raise ProbeError(f"{flag} {p}: not a directory; expected a local Hugging Face model directory")
    config = p / "config.json"
    if not config.is_file():
        raise ProbeError(f"{flag} {p}: no config.json; expected a Hugging Face model directory (save_pretrained output)")
    data = _read_json(config, flag)
    if not isinstance(data, dict) or "model_type" not in data:
        raise ProbeError(f"{flag} {config}: not a model config (expected a JSON object with a model_type)")
    check_weights(p, flag)
    if not (p / "tokenizer_config.json").is_file():
        raise ProbeError(f"{flag} {p}: no tokenizer (tokenizer_config.json) found; save the tokenizer next to the model")
    _read_json(p / "tokenizer_config.json", flag)
    return data


def _read_json(path: Path, flag: str) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ProbeError(f"{flag} {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ProbeError(f"{flag} {path}: not UTF-8 text; the file is damaged") from None
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{flag} {path}:{exc.lineno}: malformed JSON ({exc.msg})") from None


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
        raise ProbeError(f"{flag} {index}: not a weight index (expected a non-empty \"weight_map\" of tensor name -> shard file)")
    shards = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ProbeError(f"{flag} {index.parent}: shard {missing[0]}{more} named in {index.name} is missing; "
                         "copy the whole model directory again")
    return shards


def check_weights(path: str | Path, flag: str = "--model") -> list[Path]:
    """Every weight file is present, readable and whole (safetensors: header and byte ranges); returns them."""
    files = weight_files(path, flag)
    for file in files:
        try:
            size = file.stat().st_size
            if size == 0:
                raise ProbeError(f"{flag} {file}: empty weights file (0 bytes); the copy or save did not finish")
            if file.suffix == ".safetensors":
                check_safetensors(file, size, flag)
            else:
                with file.open("rb"):
                    pass
        except OSError as exc:
            raise ProbeError(f"{flag} {file}: cannot read the weights ({exc.strerror or exc})") from None
    return files


def check_safetensors(file: Path, size: int, flag: str) -> None:
    """The header parses and every tensor's byte range lies inside the file and matches its dtype and shape."""
    damaged = f"{flag} {file}: damaged safetensors file"
    with file.open("rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 2 or length > _MAX_HEADER or 8 + length > size:
            raise ProbeError(f"{damaged} (header length {length} does not fit a {size}-byte file); it is truncated or not safetensors")
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
        raise ProbeError(f"{damaged}: truncated (the header describes {end} bytes of tensor data, the file holds {available}); "
                         "copy or save the model again")


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
            raise ProbeError(f"{damaged} (tensor {name!r}: byte range {begin}-{stop} does not match its dtype and shape)")
        end = max(end, stop)
    return end


def load_tokenizer(path: str | Path, flag: str = "--model") -> Any:
    """The directory's tokenizer, with a pad token (EOS when it has none)."""
    from transformers import AutoTokenizer

    check_model_dir(path, flag)
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
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    check_model_dir(path, flag)
    kwargs: dict[str, Any] = {"dtype": dtype or torch.float32}
    if device == "auto":
        kwargs["device_map"] = "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
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


def check_vocab_fits(model: Any, tokenizer: Any, where: str) -> None:
    """Every token id the tokenizer can produce must have an embedding row."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ProbeError(f"{where}: tokenizer mismatch: the tokenizer has {len(tokenizer)} tokens but the model embeds only {rows}; "
                         "use the tokenizer saved with this model")


def tokenizer_differences(a: Any, b: Any, labels: tuple[str, str] = ("sft", "dpo"), chat_template: bool = True) -> list[str]:
    """Differences in vocabulary, special tokens and (optionally) chat template, one line each, naming examples."""
    first, second = labels
    problems: list[str] = []
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    if vocab_a != vocab_b:
        only_a = sorted(set(vocab_a) - set(vocab_b))[:3]
        only_b = sorted(set(vocab_b) - set(vocab_a))[:3]
        moved = sum(1 for t in set(vocab_a) & set(vocab_b) if vocab_a[t] != vocab_b[t])
        problems.append(f"tokenizer vocabulary: {len(vocab_a)} vs {len(vocab_b)} tokens, {moved} with different ids, "
                        f"only in {first} e.g. {only_a}, only in {second} e.g. {only_b}")
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            problems.append(f"tokenizer {attr}: {first} {getattr(a, attr)!r} vs {second} {getattr(b, attr)!r}")
    if a.all_special_tokens != b.all_special_tokens:
        problems.append(f"special tokens: {first} {a.all_special_tokens} vs {second} {b.all_special_tokens}")
    if chat_template and (a.chat_template or "") != (b.chat_template or ""):
        problems.append("chat template differs (the two tokenizers would render the same conversation differently)")
    return problems


def check_same_tokenizer(a: Any, b: Any, what: str, labels: tuple[str, str] = ("policy", "reference")) -> None:
    """Refuse two tokenizers that would give other ids for the same text (the chat template may differ)."""
    problems = tokenizer_differences(a, b, labels, chat_template=False)
    if problems:
        raise ProbeError(f"tokenizer mismatch: {what} must come from the same base model: {'; '.join(problems)}")
