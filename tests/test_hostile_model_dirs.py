"""Hostile model directories are data, never code (issue 22, class 2, and two cache items of class 8).

A builder damages a copy of the tiny model the ways an attacker or a careless upload would:
an ``auto_map`` to the directory's own Python (which writes a marker file if it ever runs), a
``pytorch_model.bin`` whose pickle runs a shell command, a chat template that raises, does not
parse or renders nothing, absurd config sizes, and a ``generation_config.json`` of nonsense.
The properties a user relies on:

* no model code runs, even when stdin answers ``y`` to any prompt (no prompt may appear);
* every refusal is one ``error:`` line (exit 2) naming the file, and for a template the data
  row by file and line;
* a chat template runs within a budget: a loop, a recursion or a value without bound (generated)
  ends within seconds in one line naming the template's file, and the templates of the tiny
  Llama, ChatML and Qwen-style models render byte for byte as in transformers' own sandbox;
* a generation config is never a traceback: its token ids are checked, its other keys are
  ignored with one warning, and the responses are those of the clean model;
* a file dropped into the verified default pair is noticed, and a wheel path that is a
  directory is one line.

A hypothesis test draws among all of these (seeded, bounded) and demands one clean outcome
each time: a load and a generation, or one :class:`ProbeError` line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ProbeError
from core.records import to_json
from tests.support.cli import exit_of, one_line_error

ROOT = Path(__file__).resolve().parents[1]
MARKER = "CUSTOM_CODE_RAN"
EXAMPLES = int(os.environ.get("PROBE_FUZZ_EXAMPLES", "150")) // 5  # a deeper hunt: PROBE_FUZZ_EXAMPLES=5000
HOSTILE = settings(
    derandomize=True,
    max_examples=max(EXAMPLES, 1),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# ---------------------------------------------------------------- the builder


def _edit_json(path: Path, **changes: Any) -> None:
    body = json.loads(path.read_text(encoding="utf-8"))
    body.update(changes)
    path.write_text(json.dumps(body), encoding="utf-8")


def _custom_code(d: Path, marker: Path) -> None:
    (d / "evil_model.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
        "class EvilConfig(LlamaConfig):\n    model_type = 'evil'\n"
        "class EvilModel(LlamaForCausalLM):\n    config_class = EvilConfig\n"
        "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n",
        encoding="utf-8",
    )


def auto_map_in_config(d: Path, marker: Path) -> None:
    _custom_code(d, marker)  # an unknown model_type: transformers would ask whether to run the code
    _edit_json(
        d / "config.json",
        model_type="evil",
        auto_map={"AutoConfig": "evil_model.EvilConfig", "AutoModelForCausalLM": "evil_model.EvilModel"},
    )


def auto_map_in_tokenizer(d: Path, marker: Path) -> None:
    _custom_code(d, marker)
    _edit_json(
        d / "tokenizer_config.json",
        tokenizer_class="EvilTokenizer",
        auto_map={"AutoTokenizer": ["evil_model.EvilTokenizer", "evil_model.EvilTokenizer"]},
    )


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


def pickle_in_bin(d: Path, marker: Path) -> None:
    from safetensors.torch import load_file

    state: dict[str, Any] = dict(load_file(str(d / "model.safetensors")))
    state["model.embed_tokens.weight"] = _Payload(marker)
    (d / "model.safetensors").unlink()
    torch.save(state, d / "pytorch_model.bin")


TEMPLATES = {
    "raise": "{{ raise_exception('this template refuses every conversation') }}",
    "syntax": "{% for message in messages %}{{ message['content'] }",
    "empty": "{% if false %}never{% endif %}",
    "loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",  # 10^10 times
}


def with_template(d: Path, template: str) -> None:
    (d / "chat_template.jinja").write_text(template, encoding="utf-8")


def hostile_copy(source: Path, root: Path, name: str) -> Path:
    target = root / name
    shutil.rmtree(target, ignore_errors=True)
    return Path(shutil.copytree(source, target))


@pytest.fixture(scope="module")
def data(chat_data: Path) -> Path:
    return chat_data / "test.jsonl"


def _eval(sft: Path, dpo: Path, data: Path) -> list[str]:
    return ["models", "eval", "--sft", str(sft), "--dpo", str(dpo), "--test", str(data), "--max-rows", "2"]


def _run(sft: Path, dpo: Path, data: Path, out: Path) -> list[str]:
    return [
        "run",
        "--sft",
        str(sft),
        "--dpo",
        str(dpo),
        "--data",
        str(data),
        "--capability",
        "multi_turn",
        "--no-analyze",
        "--out",
        str(out),
    ]


# ---------------------------------------------------------------- no model code, whatever stdin says


@pytest.mark.parametrize("where", ["config", "tokenizer"])
def test_custom_code_never_runs_when_stdin_answers_yes(
    where: str, tiny_model_dir: Path, data: Path, tmp_path: Path
) -> None:
    evil = hostile_copy(tiny_model_dir, tmp_path, "evil")
    marker = tmp_path / MARKER
    (auto_map_in_config if where == "config" else auto_map_in_tokenizer)(evil, marker)
    argv = (
        _run(evil, tiny_model_dir, data, tmp_path / "run") if where == "config" else _eval(tiny_model_dir, evil, data)
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-m", "probe_cli.main", *argv],
        input="y\n" * 8,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert not marker.exists(), "the model directory's own code ran"
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "auto_map" in lines[0] and "never runs a model directory's code" in lines[0], lines[0]
    assert "[y/N]" not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


def test_every_loader_passes_trust_remote_code_false_itself(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even past the auto_map check (switched off here), transformers is told not to run the code: it refuses, and
    never asks (input() would fail the test)."""
    import builtins

    import core.models as models
    from access.pair import read_config

    evil = hostile_copy(tiny_model_dir, tmp_path, "evil")
    marker = tmp_path / MARKER
    auto_map_in_config(evil, marker)
    auto_map_in_tokenizer(evil, marker)
    monkeypatch.setattr(models, "refuse_custom_code", lambda *args: None)
    monkeypatch.setattr(builtins, "input", lambda *args: pytest.fail("a trust_remote_code prompt appeared"))
    for load in (
        lambda: models.load_config(evil, "--sft"),
        lambda: models.load_tokenizer(evil, "--sft"),
        lambda: models.load_model(evil, "--sft"),
    ):
        with pytest.raises(ProbeError) as refused:
            load()
        assert str(evil) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ProbeError, match="custom code"):
        read_config(evil)
    assert not marker.exists()


# ---------------------------------------------------------------- weights: tensors only


def test_a_pickle_that_runs_code_is_refused_in_one_line(
    tiny_pair: tuple[Path, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = hostile_copy(tiny_pair[0], tmp_path, "pickled")
    marker = tmp_path / MARKER
    pickle_in_bin(bad, marker)
    one_line_error(
        capsys,
        _run(bad, tiny_pair[1], data, tmp_path / "run"),
        f"--sft {bad}/pytorch_model.bin",
        "refused",
        "posix.system",
        "safetensors",
    )
    one_line_error(capsys, _eval(tiny_pair[1], bad, data), "--dpo", "pytorch_model.bin", "refused")
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_plain_bin_weights_still_load_to_the_same_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from core.models import load_model

    plain = hostile_copy(tiny_model_dir, tmp_path, "bin")
    torch.save(load_file(str(plain / "model.safetensors")), plain / "pytorch_model.bin")
    (plain / "model.safetensors").unlink()
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        want = load_model(tiny_model_dir, "--sft", eval_mode=True)(ids).logits
        got = load_model(plain, "--sft", eval_mode=True)(ids).logits
    assert torch.equal(want, got)


# ---------------------------------------------------------------- chat templates


@pytest.mark.parametrize("command", ["run", "models eval"])
@pytest.mark.parametrize("kind", list(TEMPLATES))
def test_a_failing_chat_template_names_its_file_and_the_row(
    kind: str,
    command: str,
    tiny_pair: tuple[Path, Path],
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sft = hostile_copy(tiny_pair[0], tmp_path, "sft")
    dpo = hostile_copy(tiny_pair[1], tmp_path, "dpo")
    for d in (sft, dpo):
        with_template(d, TEMPLATES[kind])
    argv = _run(sft, dpo, data, tmp_path / "run") if command == "run" else _eval(sft, dpo, data)
    what = {
        "raise": "refuses every conversation",
        "syntax": "TemplateSyntaxError",
        "empty": "empty prompt",
        "loop": "TemplateBudgetError",
    }[kind]
    line = one_line_error(capsys, argv, f"{sft}/chat_template.jinja", f"{data}:", "(data row", what)
    if kind == "syntax":
        assert "chat_template.jinja:1:" in line
    assert not (tmp_path / "run").exists()


def test_a_template_given_with_chat_template_is_named_by_its_path(tiny_model_dir: Path, tmp_path: Path) -> None:
    from core.chat import encode_conversations
    from core.models import load_tokenizer
    from core.templates import choose_chat_template

    template = tmp_path / "mine.jinja"
    template.write_text(TEMPLATES["raise"], encoding="utf-8")
    tokenizer = load_tokenizer(tiny_model_dir, "--base")
    choose_chat_template(tokenizer, str(template))
    with pytest.raises(ProbeError, match=f"^{template}: the chat template fails on row 0"):
        encode_conversations(
            tokenizer, [[{"role": "user", "content": "hi"}]], add_generation_prompt=True, where=lambda i: f"row {i}"
        )
    (tmp_path / "latin1.jinja").write_bytes(b"{{ '\xe9' }}")
    with pytest.raises(ProbeError, match="not UTF-8"):
        choose_chat_template(tokenizer, str(tmp_path / "latin1.jinja"))


# a hostile template: a blow-up (loops, recursion, a huge value) inside one of a few settings
BLOWUPS = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
    "three loops": "{% for a in range(3000) %}{% for b in range(3000) %}{% for c in range(3000) %}"
    "{% endfor %}{% endfor %}{% endfor %}",
    "loops over a built string": "{% set s = 'ab' * 500000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "loop.length": "{% for i in range(100000) %}{% for j in range(100000) %}{{ loop.length }}{% endfor %}{% endfor %}",
    "cycler": "{% set c = cycler(1, 2) %}{% for i in range(100000) %}{% for j in range(100000) %}{{ c.next() }}"
    "{% endfor %}{% endfor %}",
    "endless recursion": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "exponential recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
    "{{ f(60) }}",
    "recursive loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "string times 10^10": "{{ 'a' * 10**10 }}",
    "list times 10^10": "{{ [1, 2] * 10**10 }}",
    "huge power": "{{ 7 ** (10**10) }}",
    "doubling with ~": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "doubling with +": "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "center": "{{ 'a' | center(10**10) }}",
    "ljust": "{{ 'a'.ljust(10**10) }}",
    "format width": "{{ '{:>9999999999}'.format(1) }}",
    "percent width": "{{ '%9999999999d' % 1 }}",
    "replace": "{{ ('a' * 1000000).replace('a', 'bb' * 1000) }}",
    "join": "{{ ('a' * 1000000).join(range(100000) | map('string')) }}",
    "indent": "{{ ('\n' * 1000000) | indent(1000) }}",
    "set block": "{% set s = 'a' * 5000000 %}{% set x %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endset %}"
    "{{ x | length }}",
    "output": "{% set s = 'a' * 5000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}",
    "lipsum": "{{ lipsum(10**8) }}",
    "slice": "{{ [1] | slice(10**9) | list }}",
    "tojson indent": "{{ [[[[1]]]] | tojson(indent=10**9) }}",
}
SETTINGS = [
    "{}",
    "{{% for message in messages %}}{{{{ message['content'] }}}}{{% endfor %}}{}",
    "{{% if add_generation_prompt %}}{}{{% endif %}}",
    "{{% macro outer() %}}{}{{% endmacro %}}{{{{ outer() }}}}",
]


# each blow-up once, in turn inside each setting
HOSTILE_TEMPLATES = {
    name: SETTINGS[number % len(SETTINGS)].format(BLOWUPS[name]) for number, name in enumerate(sorted(BLOWUPS))
}


@pytest.mark.parametrize("name", list(HOSTILE_TEMPLATES))
def test_a_hostile_chat_template_ends_in_one_line_within_seconds(
    name: str, chat_tokenizer: Any, tmp_path: Path
) -> None:
    import time

    from core.chat import encode_conversations, set_template

    template = HOSTILE_TEMPLATES[name]
    path = tmp_path / "chat_template.jinja"
    path.write_text(template, encoding="utf-8")
    set_template(chat_tokenizer, template, str(path))
    start = time.monotonic()
    with pytest.raises(ProbeError) as info:
        encode_conversations(
            chat_tokenizer,
            [[{"role": "user", "content": "hi"}]],
            add_generation_prompt=True,
            where=lambda i: f"data.jsonl:{i + 1}",
        )
    took = time.monotonic() - start
    message = str(info.value)
    assert message.startswith(f"{path}") and "data.jsonl:1" in message and "\n" not in message, (name, message)
    assert took < 10, f"{name}: {took:.1f} s"  # the budget is 2 s of wall time


@pytest.fixture(scope="module")
def chat_tokenizer(tiny_model_dir: Path) -> Any:
    from core.models import load_tokenizer

    return load_tokenizer(tiny_model_dir, "--model")


MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=40)}
)


@settings(derandomize=True, max_examples=60, deadline=None, database=None)
@given(messages=st.lists(MESSAGE, max_size=6), generation_prompt=st.booleans())
def test_the_test_models_templates_render_as_in_the_plain_sandbox(
    messages: list[dict[str, str]], generation_prompt: bool
) -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils import chat_template_utils

    from core.sandbox import BudgetedSandbox, install_in_transformers
    from core.templates import CHATML_TEMPLATE, LLAMA3_TEMPLATE
    from tests.chat_models import QWEN2_TEMPLATE, SMOLLM2_TEMPLATE

    install_in_transformers()
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_generation_prompt": generation_prompt}
    for template in (LLAMA3_TEMPLATE, CHATML_TEMPLATE, SMOLLM2_TEMPLATE, QWEN2_TEMPLATE):
        renders = []
        for environment in (ImmutableSandboxedEnvironment, BudgetedSandbox):
            chat_template_utils.ImmutableSandboxedEnvironment = environment  # type: ignore[misc]
            try:
                compiled = chat_template_utils._cached_compile_jinja_template(template)
            finally:
                chat_template_utils.ImmutableSandboxedEnvironment = BudgetedSandbox  # type: ignore[misc]
            assert isinstance(compiled.environment, environment)
            renders.append(compiled.render(messages=messages, **special))
        assert renders[0] == renders[1]


# ---------------------------------------------------------------- config sizes against the weights

ABSURD = {
    "num_hidden_layers 2e9": ({"num_hidden_layers": 2e9}, "num_hidden_layers must be a positive whole number"),
    "num_hidden_layers 2 000 000 000": ({"num_hidden_layers": 2_000_000_000}, "but the weights hold 4 layers"),
    "one layer more": ({"num_hidden_layers": 5}, "but the weights hold 4 layers"),
    "hidden_size 10^9": ({"hidden_size": 10**9}, "hidden_size 1000000000 is larger than any dimension"),
    "hidden_size off by one": (
        {"hidden_size": 33},
        "hidden size 33, but the embedding model.embed_tokens.weight is 32 wide",
    ),
    "intermediate_size 10^12": ({"intermediate_size": 10**12}, "intermediate_size 1000000000000 is larger"),
    "context 10^12": ({"max_position_embeddings": 10**12}, "max_position_embeddings 1000000000000 is beyond"),
    "vocabulary 10^12": ({"vocab_size": 10**12}, "vocab_size 1000000000000 is larger"),
    "vocabulary off by one": (
        {"vocab_size": 383},
        "vocab_size 383, but the embedding model.embed_tokens.weight has 384 rows",
    ),
    "no heads": ({"num_attention_heads": 0}, "num_attention_heads must be a positive whole number, got 0"),
    "heads as text": ({"num_attention_heads": "4"}, 'num_attention_heads must be a positive whole number, got "4"'),
    "kv heads not dividing": (
        {"num_key_value_heads": 3},
        "num_key_value_heads 3 does not divide num_attention_heads 4",
    ),
    "pad as a list": ({"pad_token_id": [1, 2]}, "pad_token_id [1, 2] is not a token id"),
}


@pytest.mark.parametrize("case", list(ABSURD))
def test_absurd_config_sizes_are_refused_before_any_allocation(
    case: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    from core.models import load_model

    bad = hostile_copy(tiny_model_dir, tmp_path, "cfg")
    changes, needle = ABSURD[case]
    _edit_json(bad / "config.json", **changes)
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM,
        "from_pretrained",
        lambda *a, **k: pytest.fail("the model was built from an unchecked config"),
    )
    with pytest.raises(ProbeError) as refused:
        load_model(bad, "--sft")
    assert str(refused.value).startswith(f"--sft {bad}/config.json: ") and needle in str(refused.value), refused.value


def test_absurd_depth_is_one_line_from_the_cli(
    tiny_pair: tuple[Path, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = hostile_copy(tiny_pair[1], tmp_path, "deep")
    _edit_json(bad / "config.json", num_hidden_layers=2_000_000_000)
    one_line_error(
        capsys,
        _run(tiny_pair[0], bad, data, tmp_path / "run"),
        "--dpo",
        "config.json",
        "num_hidden_layers 2000000000, but the weights hold 4 layers",
    )
    one_line_error(capsys, _eval(tiny_pair[0], bad, data), "--dpo", "num_hidden_layers 2000000000")


# ---------------------------------------------------------------- generation_config.json

NONSENSE = {
    "max_new_tokens": -5,
    "temperature": "hot",
    "eos_token_id": "x",
    "pad_token_id": [1, 2],
    "num_beams": 0,
    "repetition_penalty": 0,
    "bad_words_ids": "x",
    "top_k": -1,
    "max_length": 1e999,
    "bos_token_id": 10**12,
}


def test_generation_config_nonsense_is_ignored_with_one_warning(
    tiny_pair: tuple[Path, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every nonsense value at once: the evaluation runs, warns once per kind of problem,
    and scores as the clean pair."""
    clean_out, odd_out = tmp_path / "clean.json", tmp_path / "odd.json"
    short = ["--max-new-tokens", "8"]
    code, _, err = exit_of(_eval(*tiny_pair, data) + short + ["--out", str(clean_out)], capsys)
    assert code == 0, err
    odd = hostile_copy(tiny_pair[0], tmp_path, "odd")
    (odd / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 4, **NONSENSE}).replace("Infinity", "1e999")
    )
    code, _, err = exit_of(_eval(odd, tiny_pair[1], data) + short + ["--out", str(odd_out)], capsys)
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ") and "generation_config.json" in ln]
    assert any("eos_token_id" in w and "ignored" in w for w in warnings), err
    assert any("ignored bad_words_ids, num_beams, repetition_penalty" in w for w in warnings), err
    assert "Traceback" not in err
    clean, hostile = json.loads(clean_out.read_text()), json.loads(odd_out.read_text())
    assert hostile["sft"]["responses"] == clean["sft"]["responses"]


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '{"eos_token_id": -7}'])
def test_an_unreadable_generation_config_is_a_warning(
    body: str, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.models import load_model

    odd = hostile_copy(tiny_model_dir, tmp_path, "odd")
    (odd / "generation_config.json").write_text(body, encoding="utf-8")
    model = load_model(odd, "--model-dir")
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and "generation_config.json" in err and "ignored" in err, err
    assert model.generation_config.eos_token_id in (None, 4)


# ---------------------------------------------------------------- cached builds and the wheel


def test_a_file_dropped_into_the_default_pair_is_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pair is verified against its marker: an added special_tokens_map.json (new eos/pad) means rebuild."""
    from core.builds import write_marker
    from training import default_pair

    recipe = default_pair.TINY_RECIPE
    root = tmp_path / recipe.dir_name
    for sub in ("sft", "dpo", "data"):
        (root / sub).mkdir(parents=True)
        (root / sub / "config.json").write_text("{}")
    write_marker(root, {"recipe": to_json(recipe)})
    assert default_pair.verify(root, recipe) is None
    (root / "sft" / "special_tokens_map.json").write_text('{"eos_token": "<x>", "pad_token": "<x>"}')
    assert default_pair.verify(root, recipe) == "sft/special_tokens_map.json was added after the build"
    rebuilt: list[Path] = []
    monkeypatch.setattr(default_pair, "_build_into_place", lambda _home, target, *a: rebuilt.append(target))
    default_pair.ensure_default_pair(tmp_path, pair="tiny", progress=False)
    assert rebuilt == [root]


def test_a_wheel_path_that_is_a_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from training import smollm2

    home = tmp_path / "home"
    (smollm2.wheel_path(home) / "inside").mkdir(parents=True)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("no download may start"))
    one_line_error(
        capsys,
        ["models", "fetch-base", "--home", str(home)],
        str(smollm2.wheel_path(home)),
        "a directory",
        "probe models fetch-base",
    )
    with pytest.raises(ProbeError, match="a directory"):
        smollm2.ensure_base(home, progress=False)
    assert (smollm2.wheel_path(home) / "inside").is_dir()


# ---------------------------------------------------------------- generated hostile directories

SIZE_KEYS = [
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "max_position_embeddings",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "eos_token_id",
]
GENERATION_KEYS = [
    "eos_token_id",
    "pad_token_id",
    "bos_token_id",
    "max_new_tokens",
    "num_beams",
    "temperature",
    "repetition_penalty",
    "top_k",
    "min_new_tokens",
    "bad_words_ids",
    "suppress_tokens",
]
VALUES = (
    st.integers(-3, 10)
    | st.integers(-(2**63), 2**70)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.text(max_size=6)
    | st.lists(st.integers(-2, 400), max_size=3)
)
JINJA = st.sampled_from(
    [
        *TEMPLATES.values(),
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "{{ messages[0]['content'] + 5 }}",
        "{{ undefined_thing.x }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{{ 1 / 0 }}",
        "{{ messages | tojson }}",
        "{%",
    ]
) | st.text(max_size=30)


@st.composite
def hostile_change(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(
        st.sampled_from(["auto_map config", "auto_map tokenizer", "pickle", "template", "config", "generation"])
    )
    if kind == "template":
        return kind, draw(JINJA)
    if kind == "config":
        return kind, {draw(st.sampled_from(SIZE_KEYS)): draw(VALUES)}
    if kind == "generation":
        return kind, draw(st.dictionaries(st.sampled_from(GENERATION_KEYS), VALUES, min_size=1, max_size=3))
    return kind, None


def _apply(kind: str, change: Any, d: Path, marker: Path) -> None:
    if kind == "auto_map config":
        auto_map_in_config(d, marker)
    elif kind == "auto_map tokenizer":
        auto_map_in_tokenizer(d, marker)
    elif kind == "pickle":
        pickle_in_bin(d, marker)
    elif kind == "template":
        with_template(d, change)
    elif kind == "config":
        _edit_json(d / "config.json", **change)
    else:
        _edit_json(d / "generation_config.json", **change)


@pytest.fixture(scope="module")
def outcomes() -> Counter[str]:
    return Counter()


@pytest.mark.usefixtures("one_torch_thread")
@HOSTILE
@given(change=hostile_change())
def test_any_hostile_directory_loads_and_generates_or_is_one_line(
    change: tuple[str, Any], tiny_model_dir: Path, outcomes: Counter[str]
) -> None:
    from access.generation import generate_responses
    from core.decoding import GenerationConfig
    from core.models import load_causal_lm

    kind, value = change
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        d, marker = hostile_copy(tiny_model_dir, root, "m"), root / MARKER
        _apply(kind, value, d, marker)
        try:
            model, tokenizer = load_causal_lm(d, "--sft", eval_mode=True)
            generate_responses(
                model,
                tokenizer,
                [[{"role": "user", "content": "Which bridge is oldest?"}]],
                GenerationConfig(max_new_tokens=2, batch_size=1),
                lambda i: f"data.jsonl:{i + 1}",
            )
            outcomes[f"{kind}: loaded"] += 1
            assert kind in ("template", "config", "generation"), f"{kind} was loaded"
        except ProbeError as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 600, message
            assert str(d) in message or "data.jsonl:1" in message, message
            outcomes[f"{kind}: refused"] += 1
        assert not marker.exists(), f"{kind}: the directory's own code ran"


def test_the_generated_directories_met_both_outcomes(outcomes: Counter[str]) -> None:
    """Runs after the property above (file order): a generator that drifted into one outcome would prove nothing."""
    print(dict(outcomes))
    if not outcomes:
        pytest.skip("run with the generated test")
    assert any(k.endswith("loaded") for k in outcomes) and any(k.endswith("refused") for k in outcomes), outcomes


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_json_nested_deeply_or_hiding_an_auto_map_is_one_line(file: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    from core.models import check_model_dir

    deep = hostile_copy(tiny_model_dir, tmp_path, "deep")
    body = json.loads((deep / file).read_text(encoding="utf-8"))
    (deep / file).write_text(json.dumps({**body, "x": 1})[:-1] + ', "nest": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ProbeError, match=f"^--sft {deep}/{file}: JSON nested too deeply"):
        check_model_dir(deep, "--sft")
    hidden = {**body, "extra": [{"inner": {"auto_map": {"AutoModel": "x.Y"}}}]}
    (deep / file).write_text(json.dumps(hidden), encoding="utf-8")
    with pytest.raises(ProbeError, match=f"^--sft {deep}/{file}: its auto_map names the model's own Python code"):
        check_model_dir(deep, "--sft")
