"""The training copy of a chat template: proven to render the model's own token ids, and marking exactly the replies.

TRL's assistant-only loss trains the tokens a template wraps in ``{% generation %}``. Real
templates (SmolLM2's, Qwen2's) have no markers, so SFT trains with a copy that has them
(:func:`core.templates.training_template`) and saves the model with its own. That is only
sound if, for every conversation shape the data has, the copy renders the *same ids* as the
model's own template, with and without the generation prompt, and its markers cover exactly
each assistant message's content and end-of-turn token. Checked here for every template the
toolkit ships or patches, over the conversations of every synthesized task (single-turn,
two-turn multi-turn, nested instructions, free chat whose first reply precedes the user),
the DPO prompts with their chosen replies, and the test prompts.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.chat import Messages, encode_text, render_text, to_messages
from core.errors import ProbeError
from core.templates import (
    CHATML_TEMPLATE,
    LLAMA3_TEMPLATE,
    has_generation_markers,
    patch_generation_markers,
    training_template,
)
from tests.chat_models import QWEN2_TEMPLATE, SMOLLM2_TEMPLATE, cli, corpus_from_data, one_error_line

_MARKERS = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")


def unmarked(template: str) -> str:
    """``template`` with its ``{% generation %}`` markers removed (what most real templates look like)."""
    return _MARKERS.sub("", template)


@dataclass(frozen=True)
class Case:
    """A template, the tokenizer it belongs to, and how it renders an assistant turn."""

    tokenizer: str  # "llama3", "chatml", "nobos" or "qwen2-base"
    template: str
    sources: tuple[str, ...]  # where the training copy may come from
    trims: bool  # the template trims message content
    end: str  # the end-of-turn token text after each reply


CASES: dict[str, Case] = {
    "llama3 (shipped, marked)": Case("llama3", LLAMA3_TEMPLATE, ("own",), True, "<|eot_id|>"),
    "llama3 without markers": Case("llama3", unmarked(LLAMA3_TEMPLATE), ("trl", "patched"), True, "<|eot_id|>"),
    "chatml (shipped, marked)": Case("chatml", CHATML_TEMPLATE, ("own",), True, "<|im_end|>"),
    "chatml without markers": Case("chatml", unmarked(CHATML_TEMPLATE), ("trl", "patched"), True, "<|im_end|>"),
    "smollm2": Case("chatml", SMOLLM2_TEMPLATE, ("trl", "patched"), False, "<|im_end|>"),
    "qwen2": Case("nobos", QWEN2_TEMPLATE, ("trl", "patched"), False, "<|im_end|>"),
    # Qwen2 *base*: EOS is <|endoftext|>, turns end with <|im_end|>, a special token the tokenizer does not list
    # among all_special_tokens; the reply's <|im_end|> must still be trained, or the model never learns to stop
    "qwen2 with a base tokenizer": Case("qwen2-base", QWEN2_TEMPLATE, ("trl", "patched"), False, "<|im_end|>"),
}


@pytest.fixture(scope="module")
def tokenizers(chat_bases: dict[str, Path], chat_data: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from training.tiny_base import train_tokenizer

    base = AutoTokenizer.from_pretrained(chat_bases["nobos"])
    base.eos_token = "<|endoftext|>"
    assert "<|im_end|>" not in base.all_special_tokens
    return {
        "llama3": train_tokenizer(corpus_from_data(chat_data), 512),
        "chatml": AutoTokenizer.from_pretrained(chat_bases["chatml"]),
        "nobos": AutoTokenizer.from_pretrained(chat_bases["nobos"]),
        "qwen2-base": base,
    }


@pytest.fixture(scope="module")
def conversations(chat_data: Path) -> dict[str, list[Messages]]:
    """Every SFT row (all tasks), every DPO prompt + chosen reply, every test prompt; plus the SFT rows without
    their system turn (so a template's default system prompt comes into play)."""
    from core.rows import read_dpo_rows, read_sft_rows, read_test_rows

    sft = read_sft_rows(chat_data / "sft.jsonl")
    tasks = {row.extra["task"] for row in sft}
    assert len(tasks) >= 19 and "free_chat" in tasks  # every task of the synthesizer is here
    training = [to_messages(row.conversations) for row in sft]
    training += [
        [*to_messages(row.prompt), {"role": "assistant", "content": row.chosen}]
        for row in read_dpo_rows(chat_data / "dpo.jsonl")
    ]
    prompts = [to_messages(row.question) for row in read_test_rows(chat_data / "test.jsonl")]
    shapes = {tuple(m["role"] for m in c) for c in training}
    assert ("system", "user", "assistant") in shapes and ("system", "user", "assistant", "user", "assistant") in shapes
    assert ("system", "assistant", "user", "assistant", "user", "assistant") in shapes  # the role speaks first
    no_system = [c[1:] for c in training if c[1]["role"] == "user"]
    return {"training": training, "prompts": prompts, "no_system": no_system}


def _prepared(tokenizers: dict[str, Any], case: Case) -> Any:
    tokenizer = tokenizers[case.tokenizer]
    tokenizer.chat_template = case.template
    return tokenizer


def _ids(tokenizer: Any, messages: Messages, template: str, generation_prompt: bool) -> list[int]:
    return encode_text(
        tokenizer, render_text(tokenizer, messages, add_generation_prompt=generation_prompt, template=template)
    )


def _every_rendering(conversations: list[Messages]) -> list[tuple[Messages, bool]]:
    """Each conversation whole (with and without the generation prompt when it ends on a user turn) and each prefix
    that ends before a reply, with the generation prompt: every sequence training, recording and generation use."""
    out: list[tuple[Messages, bool]] = []
    for messages in conversations:
        out.append((messages, False))
        if messages[-1]["role"] == "user":
            out.append((messages, True))
        out += [(messages[:i], True) for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_the_training_copy_renders_the_models_own_ids(
    name: str, tokenizers: dict[str, Any], conversations: dict[str, list[Messages]]
) -> None:
    case = CASES[name]
    tokenizer = _prepared(tokenizers, case)
    copy = training_template(tokenizer, conversations["training"])
    assert copy.source in case.sources and has_generation_markers(copy.template)
    assert tokenizer.chat_template == case.template  # the tokenizer keeps its own template
    renderings = _every_rendering(conversations["training"] + conversations["prompts"] + conversations["no_system"])
    assert sum(g for _, g in renderings) > 100 and sum(not g for _, g in renderings) > 100
    for messages, generation_prompt in renderings:
        own = _ids(tokenizer, messages, case.template, generation_prompt)
        assert _ids(tokenizer, messages, copy.template, generation_prompt) == own, (name, messages, generation_prompt)
        assert (
            own
            == tokenizer.apply_chat_template(
                messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
            )["input_ids"]
        )  # what TRL and `transformers serve` see


def _runs(mask: list[int]) -> int:
    return sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))


@pytest.mark.parametrize("name", list(CASES))
def test_the_markers_cover_exactly_each_reply_and_its_end_token(
    name: str, tokenizers: dict[str, Any], conversations: dict[str, list[Messages]]
) -> None:
    case = CASES[name]
    tokenizer = _prepared(tokenizers, case)
    copy = training_template(tokenizer, conversations["training"])
    end = tokenizer.convert_tokens_to_ids(case.end)
    content: Callable[[str], str] = (lambda text: text.strip()) if case.trims else (lambda text: text)
    for messages in conversations["training"] + conversations["no_system"]:
        rendered = tokenizer.apply_chat_template(
            messages, chat_template=copy.template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = rendered["input_ids"], rendered["assistant_masks"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        assert tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "".join(
            content(r) + case.end for r in replies
        )
        assert _runs(mask) == len(replies)  # one contiguous span per reply: no header, no user text inside
        assert [i for i, m in zip(ids, mask, strict=True) if m].count(end) == len(replies)
        assert sum(i == end and not m for i, m in zip(ids, mask, strict=True)) == sum(
            1 for m in messages if m["role"] != "assistant"
        ) + (1 if case.template in (SMOLLM2_TEMPLATE, QWEN2_TEMPLATE) and messages[0]["role"] != "system" else 0)


@pytest.mark.parametrize("name", ["smollm2", "qwen2"])
def test_a_reply_before_any_system_turn_is_refused_not_mistrained(name: str, tokenizers: dict[str, Any]) -> None:
    """The patch re-emits an assistant turn without the template's default-system branch, so a conversation whose very
    first message is a reply would render differently; the proof catches it and refuses (one line) instead of
    training on it."""
    tokenizer = _prepared(tokenizers, CASES[name])
    first_reply = [
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Bye."},
    ]
    with pytest.raises(ProbeError) as info:
        training_template(tokenizer, [first_reply])
    assert "\n" not in str(info.value) and "--chat-template" in str(info.value)


@pytest.mark.parametrize(
    "template",
    [
        "{{ bos_token }}{{ messages | map(attribute='content') | join('\\n') }}",
        "{% for turn in conversation %}{{ turn['content'] }}{% endfor %}",
    ],
)
def test_a_template_the_patcher_cannot_handle_is_one_line(template: str, tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["chatml"]
    tokenizer.chat_template = template
    with pytest.raises(ProbeError) as info:
        patch_generation_markers(tokenizer, template)
    message = str(info.value)
    assert "\n" not in message and "for message in messages" in message
    with pytest.raises(ProbeError, match="for message in messages"):
        training_template(tokenizer, [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]])


@pytest.mark.slow
def test_probe_train_sft_refuses_a_tokenizer_without_a_template(
    chat_bases: dict[str, Path], chat_data: Path, tmp_path: Path
) -> None:
    base = Path(shutil.copytree(chat_bases["chatml"], tmp_path / "no-template"))
    (base / "chat_template.jinja").unlink()
    config = (base / "tokenizer_config.json").read_text()
    assert "chat_template" not in config
    out = tmp_path / "sft"
    code, _, err = cli(
        "train", "sft", "--base", base, "--data", chat_data, "--out", out, "--recipe", "tiny", "--max-steps", "1"
    )
    line = one_error_line(err)  # refused before any weight loads: not even a loading bar
    assert code == 2 and f"--base {base}" in line and "no chat template" in line and "--chat-template" in line
    assert not out.exists() and not list(tmp_path.glob(".sft*"))  # no output and no partial directory left behind


def test_the_messages_loop_is_found_past_nested_loops() -> None:
    from core.templates import _loop_span

    template = (
        "{% for tool in tools %}T{% endfor %}{% for m in messages[1:] %}{% for x in m.parts %}X{% endfor %}B{% "
        "endfor %}Z"
    )
    start, stop, var = _loop_span(template)
    assert template[start:stop] == "{% for x in m.parts %}X{% endfor %}B" and var == "m"
