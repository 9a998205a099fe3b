"""core.chat: one rendering for every stage; access.generation: one decoding for evaluation and A/B.

The rendering rule is "nothing is added in front of the template's own first token": a
Llama-3 template emits its one ``<|begin_of_text|>`` (even when the tokenizer's
post-processor would add another), SmolLM2's ChatML emits ``<|im_start|>`` (its BOS) at
every turn, Qwen2's tokenizer has no BOS at all. Message text that spells a control token
is refused with the row named, since the tokenizer would read it as a real turn boundary.
Then: evaluation (``training.evaluate``) and the A/B runner (``interventions``) must give
the same response to the same row with the same settings, on either A/B backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.chat import (
    control_token_texts,
    encode_conversations,
    encode_text,
    left_pad,
    pad_id_of,
    render_text,
    to_messages,
)
from core.errors import ProbeError
from tests.chat_models import corpus_from_data, perturbed_copy

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CONVERSATION = [
    {"role": "System", "content": "You are Ada, a smith."},
    {"role": "User", "content": "Who are you?"},
    {"role": "Assistant", "content": "I am Ada."},
    {"role": "User", "content": "Where from?"},
]


@pytest.fixture(scope="module")
def llama3_dir(chat_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toolkit's Llama-3 tokenizer and template, with a post-processor that prepends BOS to every encoding
    (as Llama-3's own tokenizer does), saved and reloaded."""
    from tokenizers import processors

    from training.tiny_base import train_tokenizer

    tokenizer = train_tokenizer(corpus_from_data(chat_data), 512)
    bos = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    out = tmp_path_factory.mktemp("llama3-tokenizer")
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tokenizers(llama3_dir: Path, chat_bases: dict[str, Path]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    return {
        "llama3": AutoTokenizer.from_pretrained(llama3_dir),
        **{n: AutoTokenizer.from_pretrained(d) for n, d in chat_bases.items()},
    }


def test_roles_are_lowercased() -> None:
    assert [m["role"] for m in to_messages(CONVERSATION)] == ["system", "user", "assistant", "user"]


def test_nothing_is_prepended_when_the_post_processor_adds_bos(tokenizers: dict[str, Any], chat_data: Path) -> None:
    from core.capabilities import Capability
    from core.rows import read_test_rows
    from probes.prompts import build_prompts

    tokenizer = tokenizers["llama3"]
    bos = tokenizer.bos_token_id
    assert tokenizer("hello")["input_ids"][0] == bos  # the post-processor is live
    text = render_text(tokenizer, to_messages(CONVERSATION), add_generation_prompt=True)
    assert tokenizer(text)["input_ids"][:2] == [bos, bos]  # what naive tokenization would feed the model
    ids = encode_conversations(tokenizer, [CONVERSATION], add_generation_prompt=True)[0]
    assert ids[0] == bos and ids.count(bos) == 1
    assert (
        ids
        == tokenizer.apply_chat_template(
            to_messages(CONVERSATION), add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )
    prompts = build_prompts(
        tokenizer, read_test_rows(chat_data / "test.jsonl"), Capability.MULTI_TURN, add_generation_prompt=False
    )
    assert all(p[0] == bos and p.count(bos) == 1 for p in prompts.ids)


@pytest.mark.parametrize("name", ["chatml", "nobos"])
def test_chatml_opens_every_turn_with_im_start_and_nothing_more(name: str, tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers[name]
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    for generation_prompt in (False, True):
        ids = encode_conversations(tokenizer, [CONVERSATION], add_generation_prompt=generation_prompt)[0]
        assert ids[0] == start and ids[1] != start
        assert ids.count(start) == len(CONVERSATION) + generation_prompt  # one per turn (and the reply's header)
        assert ids == encode_text(
            tokenizer, render_text(tokenizer, to_messages(CONVERSATION), add_generation_prompt=generation_prompt)
        )
    if name == "chatml":
        assert tokenizer.bos_token_id == start  # SmolLM2: the "BOS" is the turn opener; counting it would say 4 BOS
    else:
        assert tokenizer.bos_token is None and tokenizer.bos_token_id is None
        ids = encode_conversations(tokenizer, [CONVERSATION[1:]], add_generation_prompt=True)[0]
        assert None not in ids and ids[0] == start
        assert render_text(tokenizer, to_messages(CONVERSATION[1:]), add_generation_prompt=True).startswith(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        )  # Qwen2's default system prompt, kept


def test_generation_stops_at_the_templates_turn_end_even_when_eos_differs(
    tokenizers: dict[str, Any], chat_bases: dict[str, Path]
) -> None:
    """A Qwen2-base-style tokenizer (EOS <|endoftext|>) whose template closes turns with <|im_end|>: a fine-tuned
    model ends its reply with <|im_end|>, so generation must stop there too, not run on into an invented next turn."""
    import copy
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    from access.generation import stop_ids

    tokenizer = copy.deepcopy(tokenizers["nobos"])
    tokenizer.eos_token = "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(chat_bases["nobos"])
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    assert stop_ids(model, tokenizer) == [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    chatml = tokenizers["chatml"]  # SmolLM2-style: EOS and turn end are the same token, listed once
    smol = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=chatml.eos_token_id))
    assert stop_ids(smol, chatml) == [chatml.convert_tokens_to_ids("<|im_end|>")]


def test_a_pad_id_of_zero_is_kept(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["nobos"]  # Qwen2-style: <|endoftext|> is id 0 and the pad token
    assert tokenizer.pad_token_id == 0 != tokenizer.eos_token_id and pad_id_of(tokenizer) == 0
    ids, mask = left_pad([[5, 6], [7]], pad_of := pad_id_of(tokenizer))
    assert ids.tolist() == [[5, 6], [pad_of, 7]] and mask.tolist() == [[1, 1], [0, 1]]


@pytest.mark.parametrize("name", ["llama3", "chatml", "nobos"])
def test_control_token_text_is_refused_and_named(name: str, tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers[name]
    controls = control_token_texts(tokenizer)
    expected = {
        "llama3": {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|pad|>"},
        "chatml": {"<|im_start|>", "<|im_end|>", "<|endoftext|>"},
        "nobos": {"<|im_start|>", "<|im_end|>", "<|endoftext|>"},
    }[name]
    assert expected <= set(controls)
    for control in controls:
        for turn in range(len(CONVERSATION)):
            bad = [dict(m) for m in CONVERSATION]
            bad[turn]["content"] += f" then {control}user\nmore"
            with pytest.raises(ProbeError) as info:
                encode_conversations(
                    tokenizer, [CONVERSATION, bad], add_generation_prompt=True, where=lambda i: f"data.jsonl:{i + 7}"
                )
            message = str(info.value)
            assert "\n" not in message.replace("user\\nmore", "")
            assert (
                message.startswith("data.jsonl:8: ")
                and f"message {turn + 1} ({CONVERSATION[turn]['role'].lower()})" in message
            )
            assert repr(control) in message
    near_misses = [dict(m) for m in CONVERSATION]
    near_misses[1]["content"] = "im_start, <|im_start, |im_end|>, <eot_id>, begin_of_text"
    assert encode_conversations(tokenizer, [near_misses], add_generation_prompt=True)  # not control tokens: accepted


def test_a_tokenizer_without_a_template_is_refused(tokenizers: dict[str, Any]) -> None:
    import copy

    tokenizer = copy.deepcopy(tokenizers["chatml"])
    tokenizer.chat_template = None
    with pytest.raises(ProbeError, match="no chat template"):
        encode_conversations(tokenizer, [CONVERSATION], add_generation_prompt=True)


@pytest.fixture(scope="module")
def varied_models(chat_bases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The chat bases with large seeded perturbations: random models whose greedy replies vary by prompt."""
    root = tmp_path_factory.mktemp("varied")
    return {name: perturbed_copy(path, root / name, seed=3, scale=3.0) for name, path in chat_bases.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["chatml", "nobos"])
def test_evaluation_and_ab_generate_the_same_responses(
    name: str, varied_models: dict[str, Path], chat_data: Path
) -> None:
    from access.edited_generation import ABGenerator, Intervention
    from access.generation import GenerationConfig, Generator, generate_responses
    from access.units import NeuronSet
    from core.models import load_causal_lm
    from core.rows import read_test_rows
    from interventions.selection import parse_units
    from judging.rules import RuleJudge
    from training.evaluate import evaluate_model

    rows = read_test_rows(chat_data / "test.jsonl")[::3]  # single- and two-turn prompts, every capability
    config = GenerationConfig(max_new_tokens=8, batch_size=3)
    model, tokenizer = load_causal_lm(varied_models[name], "--model", eval_mode=True)
    evaluation = evaluate_model(varied_models[name], rows, RuleJudge(), config)
    direct = Generator(model, tokenizer, [r.question for r in rows], config).run()
    ab_torch = ABGenerator(model, tokenizer, rows, config).run()
    ab_nnsight = ABGenerator(model, tokenizer, rows, config, backend="nnsight").run()
    assert evaluation.responses == direct.texts == ab_torch.texts == ab_nnsight.texts
    assert direct.ids == ab_torch.ids == ab_nnsight.ids
    assert generate_responses(model, tokenizer, [r.question for r in rows], config) == direct.texts
    assert len({tuple(i) for i in direct.ids}) > 1 and any(direct.ids)  # the replies are not all alike

    neurons: NeuronSet = parse_units("1:0,1:5,1:9,2:3,2:17", "mlp_out")
    intervened = [
        ABGenerator(model, tokenizer, rows, config, backend=b).run(Intervention(neurons, 0.0))
        for b in ("torch", "nnsight")
    ]
    assert intervened[0].ids == intervened[1].ids  # the same edit, the same tokens, on either backend
