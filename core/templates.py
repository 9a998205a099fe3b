"""Chat templates: the built-in families, and a training copy with ``{% generation %}`` markers.

TRL's assistant-only loss (``assistant_only_loss=True``) masks every token that the chat
template does not wrap in ``{% generation %}...{% endgeneration %}``. Most real templates
(SmolLM2's ChatML, Llama-3.1's) have no such markers, so training needs a *copy* of the
template with them, and that copy is only acceptable if it renders exactly the token ids of
the model's own template. :func:`training_template` builds it in three tries:

1. the template already has markers: used as is;
2. TRL knows the template (``trl.chat_template_utils.get_training_chat_template``);
3. a generic patch: the ``for message in messages`` loop body is kept for every role but
   the assistant, whose branch is re-emitted as header + ``{% generation %}`` content and
   end-of-turn token ``{% endgeneration %}`` + trailer, with header, end-of-turn and trailer
   *measured* by rendering a probe conversation with the model's own template. Everything
   else in the template (a default system prompt inserted on the first turn, the
   generation prompt) stays the model's own.

Whatever the source, :func:`prove_same_rendering` then renders every conversation of the
training data, and every prefix of it ending in a generation prompt, with both templates,
and refuses the copy on the first difference. The model is saved with its own template.

Example:
    >>> has_generation_markers(LLAMA3_TEMPLATE), has_generation_markers("{{ messages }}")
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from core.chat import Messages, control_token_texts, encode_text, render_text, set_template, to_messages
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% generation %}{{ message['content'] | trim }}{{ eos_token }}{% endgeneration %}"
    "{% else %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) "
    "+ eos_token }}{% endif %}{% endfor %}"
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
BUILTIN_TEMPLATES: dict[str, str] = {"llama3": LLAMA3_TEMPLATE, "chatml": CHATML_TEMPLATE}

_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")
_LOOP_TAG = re.compile(r"\{%-?\s*(for\s+(\w+)\s+in\s+(\w+)[^%]*|endfor)\s*-?%\}")
_SENTINEL = "Zq7SENTINELx"
_PROBE: Messages = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": f"  {_SENTINEL}  "},
]


def has_generation_markers(template: str | None) -> bool:
    return template is not None and _MARKER.search(template) is not None


@dataclass(frozen=True)
class TrainingTemplate:
    """The template to train with and where it came from (``own``, ``trl``, ``patched``)."""

    template: str
    source: str


def _loop_span(template: str) -> tuple[int, int, str]:
    """(body start, body end, loop variable) of the ``for ... in messages`` loop; nested loops are skipped over."""
    depth, body, var = 0, -1, ""
    for match in _LOOP_TAG.finditer(template):
        is_for = match.group(1).startswith("for")
        if body < 0:
            if is_for and match.group(3) == "messages":
                body, var, depth = match.end(), match.group(2), 1
            continue
        depth += 1 if is_for else -1
        if depth == 0:
            return body, match.start(), var
    raise ProbeError(
        "the chat template has no `for message in messages` loop the toolkit can mark for assistant-only loss"
    )


def _measure_assistant_turn(tokenizer: PreTrainedTokenizerBase, template: str) -> tuple[str, bool, str, str]:
    """(header, content trimmed?, end-of-turn token text, trailer) of an assistant message."""
    probe = lambda: "the toolkit's probe conversation (system, user, assistant)"  # noqa: E731
    before = render_text(tokenizer, _PROBE[:2], add_generation_prompt=False, template=template, where=probe)
    full = render_text(tokenizer, _PROBE, add_generation_prompt=False, template=template, where=probe)
    if not full.startswith(before) or _SENTINEL not in full:
        raise ProbeError(
            "the chat template does not render a conversation as a prefix of its continuation; "
            "pass --chat-template with a template that has {% generation %} markers"
        )
    turn = full[len(before) :]
    trimmed = f"  {_SENTINEL}  " not in turn
    content = _SENTINEL if trimmed else f"  {_SENTINEL}  "
    header, trailer = turn.split(content, 1)
    # every special token the tokenizer knows, not only ``all_special_tokens``: a Qwen2-base-style tokenizer (eos
    # <|endoftext|>) closes turns with <|im_end|>, an added special token it does not list there
    end = next((t for t in (tokenizer.eos_token, *control_token_texts(tokenizer)) if t and trailer.startswith(t)), "")
    return header, trimmed, end, trailer[len(end) :]


def turn_end_token(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The special token that ends an assistant turn in the tokenizer's own template (``<|eot_id|>``,
    ``<|im_end|>``), or None when the template has none or cannot be measured."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        return _measure_assistant_turn(tokenizer, tokenizer.chat_template)[2] or None
    except Exception:  # a template that cannot render the probe simply has no measurable end token
        return None


def _jinja_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def patch_generation_markers(tokenizer: PreTrainedTokenizerBase, template: str) -> str:
    """A copy of ``template`` whose assistant content and end-of-turn token are in ``{% generation %}``."""
    body_start, body_end, var = _loop_span(template)
    header, trimmed, eot, trailer = _measure_assistant_turn(tokenizer, template)
    content = f"{var}['content']" + (" | trim" if trimmed else "")
    assistant = (
        f"{{{{ {_jinja_string(header)} }}}}{{% generation %}}{{{{ {content} }}}}"
        f"{{{{ {_jinja_string(eot)} }}}}{{% endgeneration %}}{{{{ {_jinja_string(trailer)} }}}}"
    )
    body = template[body_start:body_end]
    patched_body = f"{{% if {var}['role'] == 'assistant' %}}{assistant}{{% else %}}{body}{{% endif %}}"
    return template[:body_start] + patched_body + template[body_end:]


def _trl_template(tokenizer: PreTrainedTokenizerBase) -> str | None:
    try:
        from trl.chat_template_utils import get_training_chat_template
    except ImportError:
        return None
    try:
        return get_training_chat_template(tokenizer)
    except (ValueError, KeyError, TypeError):
        return None


def rendering_cases(conversations: Sequence[Messages]) -> list[tuple[Messages, bool]]:
    """Each conversation whole, and each prefix that ends before an assistant turn with the generation prompt."""
    cases: list[tuple[Messages, bool]] = []
    for conversation in conversations:
        messages = to_messages(conversation)
        cases.append((messages, False))
        cases += [(messages[:i], True) for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    return cases


def prove_same_rendering(
    tokenizer: PreTrainedTokenizerBase, own: str, copy: str, conversations: Sequence[Messages]
) -> int:
    """Render every case with both templates; returns the number of cases, raises on the first difference."""
    cases = rendering_cases(conversations)
    for number, (messages, generation_prompt) in enumerate(cases):
        where = partial("rendering case {} of the training data".format, number)
        a = encode_text(
            tokenizer,
            render_text(tokenizer, messages, add_generation_prompt=generation_prompt, template=own, where=where),
        )
        b = encode_text(
            tokenizer,
            render_text(tokenizer, messages, add_generation_prompt=generation_prompt, template=copy, where=where),
        )
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            raise ProbeError(
                f"the training copy of the chat template renders case {number} (generation prompt: "
                f"{generation_prompt}) differently from the model's own at token {at}; "
                "pass --chat-template with a marked template"
            )
    return len(cases)


def training_template(tokenizer: PreTrainedTokenizerBase, conversations: Sequence[Messages]) -> TrainingTemplate:
    """The tokenizer's template with generation markers, proven to render like the original (module docstring)."""
    own = tokenizer.chat_template
    if not own:
        raise ProbeError("the tokenizer has no chat template; pass --chat-template llama3, chatml or a Jinja file")
    if has_generation_markers(own):
        return TrainingTemplate(own, "own")
    trl = _trl_template(tokenizer)
    if trl and has_generation_markers(trl):
        candidate = TrainingTemplate(trl, "trl")
    else:
        candidate = TrainingTemplate(patch_generation_markers(tokenizer, own), "patched")
    prove_same_rendering(tokenizer, own, candidate.template, conversations)
    return candidate


def choose_chat_template(tokenizer: PreTrainedTokenizerBase, choice: str) -> str:
    """Set the tokenizer's own template per ``choice`` (auto | llama3 | chatml | path); returns what was used.

    ``auto`` keeps the tokenizer's template and refuses a tokenizer without one: guessing a
    format for a model trained on another would teach it a second one.
    """
    if choice == "auto":
        if not tokenizer.chat_template:
            raise ProbeError("the tokenizer has no chat template; pass --chat-template llama3, chatml or a Jinja file")
        return "tokenizer"
    if choice in BUILTIN_TEMPLATES:
        set_template(tokenizer, BUILTIN_TEMPLATES[choice], f"the built-in {choice} template")
        return choice
    from pathlib import Path

    path = Path(choice)
    if not path.is_file():
        raise ProbeError(f"--chat-template {choice}: expected auto, llama3, chatml or a path to a Jinja template file")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ProbeError(f"--chat-template {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ProbeError(f"--chat-template {path}: not UTF-8 text; expected a Jinja template file") from None
    if not text.strip():
        raise ProbeError(f"--chat-template {path}: the file is empty; expected a Jinja template")
    set_template(tokenizer, text, str(path))
    return str(path)
