"""Chat rendering: one way to turn a conversation into token ids, for every stage.

Training, recording, evaluation and interventions all render through
:func:`encode_conversations`, so a prompt is the same token sequence wherever it is used.
The rules, and why:

* Roles are lowercased: the published RoleMRC files write ``System``/``User``/``Assistant``
  and chat templates compare roles to lowercase names.
* The model's own chat template is the whole truth about the sequence. Its text is
  tokenized with ``add_special_tokens=False``, so **no token is added in front of the
  template's own first token**. Counting BOS tokens would be wrong in general: a Llama-3
  template emits one ``<|begin_of_text|>``; a ChatML template (SmolLM2) whose "BOS" is
  ``<|im_start|>`` repeats it at every turn; Qwen2's tokenizer has no BOS at all. This is
  what ``apply_chat_template(tokenize=True)``, TRL and ``transformers serve`` do.
* A message may not contain the text of a control token (``<|im_start|>``, ``<|eot_id|>``,
  ...): the tokenizer would read it as the real token and the prompt would have a turn
  structure the data never had. Such a row is refused with its index, message and token.
* A chat template is a program that came with the model directory. It runs in Jinja's sandbox
  with a budget of steps, time and size (:mod:`core.sandbox`). Whatever it raises (its own
  ``raise_exception``, a Jinja syntax error, a loop past the budget) and a render with no tokens
  is one :class:`ProbeError` naming the template's file and the row, before any forward pass.

Example:
    >>> to_messages([{"role": "System", "content": "Be brief."}, {"role": "User", "content": "Hi"}])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    >>> left_pad([[5, 6, 7], [8]], pad_id=0)[0].tolist()
    [[5, 6, 7], [0, 0, 8]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from core.errors import ProbeError
from core.models import printable
from core.sandbox import install_in_transformers

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedTokenizerBase

Messages = list[dict[str, str]]


class Turn(Protocol):
    """Anything with a role and a content (``core.schema.Turn``)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def to_messages(turns: Sequence[Turn] | Messages) -> Messages:
    """``[{"role", "content"}]`` with lowercased roles, from schema turns or message dicts."""
    return [{"role": str(_get(t, "role")).lower(), "content": str(_get(t, "content"))} for t in turns]


def _get(turn: Any, key: str) -> Any:
    return turn[key] if isinstance(turn, dict) else getattr(turn, key)


def control_token_texts(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The text of every special token the tokenizer knows (longest first)."""
    texts = set(tokenizer.all_special_tokens)
    for token in getattr(tokenizer, "added_tokens_decoder", {}).values():
        if getattr(token, "special", False):
            texts.add(str(token.content))
    return sorted((t for t in texts if t), key=len, reverse=True)


def check_no_control_text(messages: Messages, controls: Sequence[str], where: Callable[[], str]) -> None:
    """Refuse a message that contains control-token text (see the module docstring).

    ``where()`` names the conversation; it is called only when refusing (naming a row may read its file).
    """
    for number, message in enumerate(messages, start=1):
        for text in controls:
            if text in message["content"]:
                raise ProbeError(
                    f"{where()}: message {number} ({message['role']}) contains the text of the control token "
                    f"{text!r}, which would be read as that token and change the turn structure; "
                    "remove it from the data"
                )


TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")  # where transformers reads it


def set_template(tokenizer: PreTrainedTokenizerBase, template: str, source: str) -> None:
    """Give the tokenizer ``template``, remembering ``source`` (a file, a built-in name) for error messages."""
    tokenizer.chat_template = template
    tokenizer.probe_template_source = (template, source)


def template_source(tokenizer: PreTrainedTokenizerBase, template: str | None = None) -> str:
    """Where the template in use came from: the file :func:`set_template` was given, else the model directory's
    file that holds it (``chat_template.jinja`` ...), else a description."""
    own = tokenizer.chat_template
    if template is not None and template != own:
        return "the training copy of the chat template"
    remembered = getattr(tokenizer, "probe_template_source", None)
    if remembered and remembered[0] == own:
        return str(remembered[1])
    directory = Path(str(getattr(tokenizer, "name_or_path", "") or "."))
    return next((str(directory / name) for name in TEMPLATE_FILES if (directory / name).is_file()), "the chat template")


def render_text(
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    *,
    add_generation_prompt: bool,
    template: str | None = None,
    where: Callable[[], str] = lambda: "a conversation",
) -> str:
    """The template's text for ``messages`` (``template`` overrides the tokenizer's own).

    A template is a model directory's Jinja program, run in transformers' sandbox with the toolkit's budget
    (:func:`core.sandbox.install_in_transformers`): whatever it raises (its own ``raise_exception``, a syntax
    error, an undefined name, a type error, a loop or a value past the budget) is one :class:`ProbeError` naming
    the template's file (and line, for a syntax error) and the conversation ``where()`` names.
    """
    install_in_transformers()
    try:
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, chat_template=template
        )
        return cast(str, text)  # tokenize=False: the text
    except Exception as exc:  # the template's own failure, of any kind, is the template's fault
        line = getattr(exc, "lineno", None)
        source = template_source(tokenizer, template) + (f":{line}" if isinstance(line, int) and line > 0 else "")
        raise ProbeError(
            f"{source}: the chat template fails on {where()} ({type(exc).__name__}: "
            f"{printable(str(exc).strip() or '-')}); fix the template or pass another one"
        ) from None


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of rendered text, with nothing added in front or behind."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_conversations(
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Sequence[Turn] | Messages],
    *,
    add_generation_prompt: bool,
    where: Callable[[int], str] = lambda i: f"conversation {i}",
) -> list[list[int]]:
    """Token ids of each conversation rendered by the tokenizer's chat template (see module docstring).

    ``where(i)`` names conversation ``i`` in errors (e.g. ``"data row 383"``).
    """
    if not getattr(tokenizer, "chat_template", None):
        named = getattr(tokenizer, "name_or_path", "")
        raise ProbeError(
            f"{named + ': ' if named else ''}the tokenizer has no chat template; prompts cannot be rendered as "
            "the model was trained (save the template with the tokenizer)"
        )
    controls = control_token_texts(tokenizer)
    encoded: list[list[int]] = []
    for index, turns in enumerate(conversations):
        messages = to_messages(turns)
        here = partial(where, index)
        check_no_control_text(messages, controls, here)
        text = render_text(tokenizer, messages, add_generation_prompt=add_generation_prompt, where=here)
        ids = encode_text(tokenizer, text)
        if not ids:
            raise ProbeError(
                f"{template_source(tokenizer)}: the chat template renders {where(index)} as an empty prompt "
                "(no tokens); a template must render the conversation's messages"
            )
        encoded.append(ids)
    return encoded


def context_length(config: PreTrainedConfig) -> int | None:
    """The longest sequence a model was built for (``max_position_embeddings``), if its config says."""
    value = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(value) if value else None


def check_context(ids: Sequence[Sequence[int]], limit: int | None, where: Callable[[int], str], extra: int = 0) -> None:
    """Refuse, before any forward, a prompt that (with ``extra`` new tokens) does not fit the model's context.

    A longer sequence is not an error in PyTorch: positions past the trained range give
    activations the model never produced in training, silently, or run out of memory.

    >>> check_context([[1] * 5], 4, lambda i: f"row {i + 1}")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: row 1: the prompt is 5 tokens, longer than the model's context of 4 tokens
    (max_position_embeddings); shorten or drop the row
    """
    if limit is None:
        return
    for index, row in enumerate(ids):
        if len(row) + extra > limit:
            plus = f" plus {extra} new tokens" if extra else ""
            raise ProbeError(
                f"{where(index)}: the prompt is {len(row)} tokens{plus}, longer than the model's context of {limit} "
                "tokens (max_position_embeddings); shorten or drop the "
                f"row{', or lower --max-new-tokens' if extra else ''}"
            )


def decode_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], *, skip_special_tokens: bool = False) -> str:
    """The text of one sequence of token ids (transformers types ``decode`` as also returning a batch's texts)."""
    return cast(str, tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


def pad_id_of(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id used for left padding: the pad token, else EOS."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ProbeError("the tokenizer has neither a pad nor an eos token; cannot left-pad batches")
    return int(pad)


def left_pad(
    batch: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids [B, T] and attention_mask [B, T], padded on the left."""
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, ids in enumerate(batch):
        input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids) :] = 1
    return input_ids.to(device), mask.to(device)
