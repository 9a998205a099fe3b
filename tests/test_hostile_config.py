"""Hostile ``--config`` files (issue 22, class 1): every value is typed and bounded exactly as its flag is.

A config file's value goes through the field's type hint (:func:`core.config_file.typed`): a
switch takes only ``true``/``false`` (``"false"`` is refused, never read as true), a number only
a finite JSON number, a list field a list, a directory field no regular file. A bad value is
one line, ``error: --config FILE: key: expected ..., got ...``, before any work starts.

The property tests run each command in-process on generated files (wrong types, NaN and
Infinity, huge and negative numbers, nested lists and mappings, JSON and YAML) with the stage
function replaced by a stub: a command either reaches the stub with a config whose every
field passes its hint and bounds, or stops with one ``error:`` line and exit status 2; a value
of the wrong kind for a switch or a number always stops it with a line naming the file and key.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config_file import check_fields, read_config_file
from core.errors import ProbeError
from tests.support.cli import exit_of, one_line_error

EXAMPLES = int(os.environ.get("PROBE_FUZZ_EXAMPLES", "150")) // 3 or 1
FUZZ = settings(
    derandomize=True,
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

# ------------------------------------------ what each command's fields must be (written out, not read from the code)

SWITCHES = {
    "run": ["add_generation_prompt"],
    "analyze": ["reorder"],
    "intervene": ["positive_control", "collateral", "do_sample"],
    "sft": ["overwrite", "gradient_checkpointing", "assistant_only_loss", "bf16"],
    "dpo": ["overwrite", "gradient_checkpointing", "precompute_ref", "bf16"],
}
INTEGERS = {
    "run": ["batch_size", "max_batch_tokens", "seed"],
    "analyze": ["top_k", "top_units", "stability_resamples", "stability_seed"],
    "intervene": ["placebo", "seed", "max_new_tokens", "batch_size", "limit", "n_bootstrap", "judge_retries"],
    "sft": ["max_steps", "batch_size", "grad_accum", "max_length", "seed", "max_rows", "logging_steps"],
    "dpo": ["max_steps", "batch_size", "grad_accum", "max_length", "seed", "max_rows", "logging_steps"],
}
NUMBERS = {
    "run": [],
    "analyze": ["top_percent", "fdr_alpha", "threshold"],
    "intervene": ["factor", "temperature", "top_p", "judge_timeout", "judge_backoff"],
    "sft": ["learning_rate", "warmup_ratio", "epochs", "weight_decay"],
    "dpo": ["learning_rate", "warmup_ratio", "epochs", "weight_decay", "beta"],
}
# a few good values of every field fuzzed, so that whole files of good values occur too
_TRAINING = {
    "overwrite": [True, False],
    "gradient_checkpointing": [False, None],
    "bf16": [False, None],
    "max_steps": [-1, 2],
    "batch_size": [1, 4],
    "grad_accum": [1, None],
    "max_length": [16, 320],
    "seed": [0, 42],
    "max_rows": [None, 8],
    "logging_steps": [1, 5],
    "learning_rate": [0.001, 1],
    "warmup_ratio": [0, 0.5],
    "epochs": [1, 0.5],
    "weight_decay": [0, 0.1],
    "recipe": ["tiny", "paper", None],
    "lr_scheduler": ["cosine", None],
}
GOOD: dict[str, dict[str, list[Any]]] = {
    "run": {
        "add_generation_prompt": [True, False],
        "batch_size": [1, 8],
        "max_batch_tokens": [None, 4096],
        "seed": [0, 7],
        "capabilities": ["priority", ["multi_turn", "nested"], "all"],
        "hooks": ["mlp_out", ["mlp_out", "attn_out"]],
        "layers": ["1-2", [0, 3], None],
        "position": ["last", "mean"],
        "backend": ["torch"],
        "device": ["cpu", None],
        "dtype": ["auto", "float32"],
        "store_dtype": ["float16", "float32"],
        "out_dir": ["out", None],
        "runs_root": ["runs"],
        "sft_dir": [None],
        "dpo_dir": [None],
        "data_file": [None],
    },
    "analyze": {
        "reorder": [True, False],
        "top_k": [1, 64],
        "top_units": [5],
        "stability_resamples": [0, 20],
        "stability_seed": [0, 3],
        "top_percent": [20, 0.5, 100],
        "fdr_alpha": [0.05, 0.5],
        "threshold": [0, 0.25],
        "metric": ["topk_count", "mean_diff"],
        "layers": ["12-31", None],
        "normalize": ["samples"],
        "rule": ["top_k_abs", "fdr"],
        "test": ["t", "wilcoxon"],
    },
    "intervene": {
        "positive_control": [True, False],
        "collateral": [True, False],
        "do_sample": [False],
        "placebo": [0, 3],
        "seed": [0, 5],
        "max_new_tokens": [4],
        "batch_size": [2],
        "limit": [None, 2],
        "n_bootstrap": [100, 1000],
        "judge_retries": [None, 2],
        "factor": [0, 0.5, 2],
        "temperature": [1.0, 0.7],
        "top_p": [1.0, 0.9],
        "judge_timeout": [None, 5],
        "judge_backoff": [None, 0.5],
        "capability": ["priority"],
        "model": ["sft", "dpo"],
        "hook": ["mlp_out"],
        "dtype": ["float32"],
        "doses": [[], [0, 0.5]],
    },
    "sft": {
        **_TRAINING,
        "assistant_only_loss": [True, False],
        "chat_template": ["auto"],
        "tiny_spec": [{}, {"n_layers": 2}],
        "base": ["tiny"],
    },
    "dpo": {
        **_TRAINING,
        "precompute_ref": [True, False],
        "beta": [0.1, None],
        "loss_type": ["sigmoid", "ipo"],
        "ref": [None],
    },
}

SCALARS = (
    st.none()
    | st.booleans()
    | st.sampled_from(["false", "true", "no", "2", "0.1", "x", "", "\n", "12-31", "mlp_out", "all"])
    | st.integers(min_value=-3, max_value=70)
    | st.sampled_from([10**20, -(10**20), 2**63, 2**32, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.5, 7.0, 1.0, 0.0, -0.0, 1e308])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


class Reached(Exception):
    """The stage function was called: the config got through every check."""

    def __init__(self, config: Any) -> None:
        super().__init__("reached")
        self.config = config


def _stub(*args: Any, **kwargs: Any) -> None:
    config = next((a for a in args if hasattr(a, "__dataclass_fields__")), None)
    raise Reached(config if config is not None else kwargs)


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every stage function replaced by :func:`_stub`; relative paths land in ``tmp_path``."""
    import analysis.run
    import interventions.plan
    import probes.recording
    import training.dpo
    import training.sft

    monkeypatch.chdir(tmp_path)
    for module, name in (
        (probes.recording, "record_run"),
        (analysis.run, "analyze_run"),
        (interventions.plan, "plan_ab"),  # the A/B config's first stage: planned, then run
        (training.sft, "train_sft"),
        (training.dpo, "train_dpo"),
    ):
        monkeypatch.setattr(module, name, _stub)


def _analysis_config(kwargs: dict[str, Any]) -> Any:
    """What ``analyze_run`` was called with, as its config (it takes the fields as keywords)."""
    from dataclasses import fields

    from analysis.config import AnalysisConfig

    return AnalysisConfig(**{f.name: kwargs[f.name] for f in fields(AnalysisConfig)})


def _argv(command: str, tiny_pair: tuple[Path, Path], data: Path, root: Path) -> list[str]:
    return {
        "run": [
            "run",
            "-c",
            "multi_turn",
            "--sft",
            str(tiny_pair[0]),
            "--dpo",
            str(tiny_pair[1]),
            "--data",
            str(data),
            "-q",
        ],
        "analyze": ["analyze", str(root / "run")],
        "intervene": [
            "intervene",
            "--units",
            "1:0",
            "--model-dir",
            str(tiny_pair[1]),
            "--data",
            str(data),
            "--out",
            str(root / "ab"),
        ],
        "sft": ["train", "sft", "--base", "tiny", "--data", str(root), "--out", str(root / "sft")],
        "dpo": ["train", "dpo", "--sft", str(tiny_pair[0]), "--data", str(root), "--out", str(root / "dpo")],
    }[command]


def _wrong_kind(command: str, key: str, value: Any, kind: str = "") -> bool:
    """A value no flag of that kind could ever give (None is left out: optional fields take it)."""
    if value is None:
        return False
    if kind == "switch" or key in SWITCHES.get(command, []):
        return not isinstance(value, bool)
    if kind == "integer" or key in INTEGERS.get(command, []):
        return isinstance(value, bool) or not isinstance(value, int)
    if kind == "number" or key in NUMBERS.get(command, []):
        return isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    return False


def _write(path: Path, values: dict[str, Any]) -> None:
    if path.suffix == ".json":
        path.write_text(json.dumps(values))  # NaN and Infinity as Python writes them
    else:
        path.write_text(yaml.safe_dump(values))


def _hostile_files(good: dict[str, list[Any]]) -> Any:
    """Config files of 1-4 of ``good``'s keys, each with one of its good values or a hostile one, as JSON or YAML."""
    entry = st.sampled_from(sorted(good)).flatmap(
        lambda key: st.tuples(st.just(key), st.sampled_from(good[key]) | VALUES)
    )
    return st.tuples(st.lists(entry, min_size=1, max_size=4), st.sampled_from([".json", ".yaml"]))


def _written(tmp_path: Path, items: list[tuple[str, Any]], suffix: str) -> tuple[dict[str, Any], Path]:
    values = dict(items)
    config = tmp_path / f"hostile{suffix}"
    _write(config, values)
    return values, config


@pytest.mark.usefixtures("stubbed")
@pytest.mark.parametrize("command", list(SWITCHES))
def test_any_config_file_is_typed_or_refused_in_one_line(
    command: str,
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys,
) -> None:
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(case=_hostile_files(GOOD[command]))
    def check(case: tuple[list[tuple[str, Any]], str]) -> None:
        values, config = _written(tmp_path, *case)
        try:
            code, _, err = exit_of(
                [*_argv(command, tiny_pair, rolemrc_file, tmp_path), "--config", str(config)], capsys
            )
        except Reached as reached:
            capsys.readouterr()
            got = reached.config if not isinstance(reached.config, dict) else _analysis_config(reached.config)
            check_fields(got)  # every field of what the stage got has its type and bounds
            for key in SWITCHES[command]:
                if key in values and values[key] is not None:
                    assert getattr(got, key) is values[key]
            outcomes["reached"] += 1
            return
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        wrong = [k for k, v in values.items() if _wrong_kind(command, k, v)]
        if wrong:
            assert f"--config {config}: " in lines[0], (values, lines[0])
        outcomes["refused"] += 1

    check()
    assert outcomes["reached"] and outcomes["refused"], outcomes


# ---------------------------------------------------------------- the cases, one by one


CASES = [
    ("run", {"add_generation_prompt": "false"}, "add_generation_prompt: expected true or false, got 'false'"),
    ("run", {"layers": 5}, "layers: expected a string or a list of integers, got 5"),
    ("run", {"layers": [3, "five"]}, "layers[1]: expected an integer >= 0, got 'five'"),
    ("run", "batch_size: eight\n", "batch_size: expected an integer in [1, 1000000], got 'eight'"),
    ("run", '{"batch_size": NaN}', "batch_size: expected an integer in [1, 1000000], got nan"),
    ("run", '{"max_batch_tokens": Infinity}', "max_batch_tokens: expected an integer in [1, 1048576], got inf"),
    (
        "run",
        {"max_batch_tokens": 10**20},
        "max_batch_tokens: expected an integer in [1, 1048576], got 100000000000000000000",
    ),
    ("run", {"seed": "abc"}, "seed: expected an integer in [0, 4294967295], got 'abc'"),
    ("run", {"hooks": "mlp_in"}, "hooks: unknown hook point 'mlp_in'"),
    ("run", {"position": "middle"}, "position: expected one of last, mean, response_mean, response_last, got 'middle'"),
    ("analyze", {"reorder": "false"}, "reorder: expected true or false, got 'false'"),
    ("analyze", {"fdr_alpha": "x"}, "fdr_alpha: expected a number in (0, 1), got 'x'"),
    ("analyze", '{"fdr_alpha": NaN}', "fdr_alpha: expected a number in (0, 1), got nan"),
    ("analyze", {"threshold": "0.1"}, "threshold: expected a number >= 0, got '0.1'"),
    (
        "analyze",
        {"metric": "median"},
        "metric: expected one of topk_count, mean_diff, effect_size, attribution, got 'median'",
    ),
    ("intervene", {"placebo": "x"}, "placebo: expected an integer in [0, 1000], got 'x'"),
    ("intervene", {"doses": 0.5}, "doses: expected a list of numbers, got 0.5"),
    ("intervene", {"limit": "2"}, "limit: expected an integer in [1, 1000000], got '2'"),
    ("intervene", {"positive_control": "false"}, "positive_control: expected true or false, got 'false'"),
    ("intervene", {"collateral": "false"}, "collateral: expected true or false, got 'false'"),
    ("intervene", {"do_sample": "false"}, "do_sample: expected true or false, got 'false'"),
    ("sft", {"overwrite": "false"}, "overwrite: expected true or false, got 'false'"),
    ("sft", {"gradient_checkpointing": "false"}, "gradient_checkpointing: expected true or false, got 'false'"),
    ("sft", {"assistant_only_loss": "false"}, "assistant_only_loss: expected true or false, got 'false'"),
    ("sft", {"warmup_ratio": "x"}, "warmup_ratio: expected a number in [0, 1), got 'x'"),
    ("sft", {"seed": "abc"}, "seed: expected an integer in [0, 4294967295], got 'abc'"),
    ("sft", {"tiny_spec": 5}, "tiny_spec: expected a mapping of names to values, got 5"),
    ("sft", {"tiny_spec": {"n_layers": "2"}}, "tiny_spec.n_layers: expected an integer, got '2'"),
    ("sft", {"learning_rate": -1}, "learning_rate: expected a number > 0, got -1"),
    ("dpo", {"beta": float("inf")}, "beta: expected a number > 0, got inf"),
]


@pytest.mark.usefixtures("stubbed")
@pytest.mark.parametrize("command, content, message", CASES)
def test_each_listed_case_is_one_line_naming_the_file_and_key(
    command: str,
    content: Any,
    message: str,
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys,
) -> None:
    config = tmp_path / ("c.json" if not isinstance(content, str) or content.startswith("{") else "c.yaml")
    config.write_text(content if isinstance(content, str) else json.dumps(content))
    one_line_error(
        capsys,
        [*_argv(command, tiny_pair, rolemrc_file, tmp_path), "--config", str(config)],
        f"--config {config}: {message}",
    )


@pytest.mark.usefixtures("stubbed")
def test_runs_root_that_is_a_file_is_one_line(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "runs").write_text("not a directory")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"runs_root": str(tmp_path / "runs")}))
    one_line_error(
        capsys,
        [*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--config", str(config)],
        f"--config {config}: runs_root: expected a directory (or a path to create one), got '{tmp_path / 'runs'}', "
        "which is not a directory",
    )


@pytest.mark.usefixtures("stubbed")
def test_flags_get_the_same_bounds(tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys) -> None:
    one_line_error(
        capsys,
        [*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--max-batch-tokens", str(10**20)],
        "error: --max-batch-tokens: expected an integer in [1, 1048576], got 100000000000000000000",
    )
    one_line_error(
        capsys,
        [*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--seed", "-1"],
        "--seed: expected an integer in [0, 4294967295], got -1",
    )
    one_line_error(
        capsys,
        [*_argv("sft", tiny_pair, rolemrc_file, tmp_path), "--warmup-ratio", "nan"],
        "--warmup-ratio: expected a number in [0, 1), got nan",
    )


@pytest.mark.usefixtures("stubbed")
def test_a_flag_overrides_a_bad_range_only_the_file_gave_but_the_file_is_still_typed(
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys,
) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"position": "middle"}))
    with pytest.raises(Reached) as info:
        exit_of(
            [*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--position", "mean", "--config", str(config)], capsys
        )
    assert info.value.config.position == "mean"
    config.write_text(json.dumps({"batch_size": "8"}))  # overridden, but still not a number
    one_line_error(
        capsys,
        [*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--batch-size", "8", "--config", str(config)],
        f"--config {config}: batch_size: expected an integer in [1, 1000000], got '8'",
    )


@pytest.mark.usefixtures("stubbed")
def test_booleans_and_lists_from_the_file_arrive_as_written(
    tiny_pair, rolemrc_file: Path, tmp_path: Path, capsys
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "add_generation_prompt: false\nlayers: [3, 1]\nhooks: [mlp_out, attn_out]\nmax_batch_tokens: 4096\n"
    )
    with pytest.raises(Reached) as info:
        exit_of([*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--config", str(config)], capsys)
    cfg = info.value.config
    assert (
        cfg.add_generation_prompt is False
        and cfg.layers == (1, 3)
        and cfg.hooks == ("mlp_out", "attn_out")
        and cfg.max_batch_tokens == 4096
    )
    config.write_text("layers: 12-31\n")  # the flag's spec string is accepted too
    with pytest.raises(Reached) as info:
        exit_of([*_argv("run", tiny_pair, rolemrc_file, tmp_path), "--config", str(config)], capsys)
    assert info.value.config.layers == "12-31"


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.usefixtures("rolemrc_file")
@pytest.mark.parametrize("overwrite", ["false", False])
def test_overwrite_false_leaves_a_trained_model_byte_identical(
    overwrite: Any,
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys,
) -> None:
    """The issue's data loss: ``{"overwrite": "false"}`` was truthy and replaced the model;
    now neither spelling touches it."""
    import shutil

    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "sft"))
    before = _tree_digest(model)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sft.jsonl").write_text(
        json.dumps({"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
        + "\n"
    )
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"overwrite": overwrite, "max_steps": 1}))
    needle = (
        f"--config {config}: overwrite: expected true or false, got 'false'"
        if overwrite == "false"
        else "already exists"
    )
    one_line_error(
        capsys,
        [
            "train",
            "sft",
            "--base",
            "tiny",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(model),
            "--config",
            str(config),
        ],
        needle,
    )
    assert _tree_digest(model) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "data", "sft"]  # no partial output beside it


# ---------------------------------------------------------------- the file itself


LAUGHS = "".join(
    [
        'lol: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"l{i}: &{b} [" + ",".join([f"*{a}"] * 9) + "]\n"
            for i, (a, b) in enumerate(zip("abcdefgh", "bcdefghi", strict=True))
        ),
        "hooks: [" + ",".join(["*i"] * 9) + "]\n",
    ]
)


def test_billion_laughs_fails_at_once_in_little_memory(tmp_path: Path) -> None:
    from probes.config import RecordConfig

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(LAUGHS)
    assert bomb.stat().st_size < 1024
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(
        ProbeError, match=r"bomb.yaml:2: YAML aliases \(\*name\) are not allowed in a config file"
    ) as info:
        read_config_file(bomb, RecordConfig)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 1.0 and peak < 5 * 2**20, (seconds, peak)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ("a: &x 1\nbatch_size: *x\n", "YAML aliases"),
        ("base: &b {x: 1}\nrun:\n  <<: *b\n", "YAML aliases"),
        ("layers: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels deep"),
        ("seed: " + "9" * 5000 + "\n", "expected values of ordinary size"),
        ("batch-size: 2\nbatch_size: 3\n", "'batch_size' is given twice"),
        ("? [a, b]\n: 1\n", "cannot parse"),
        ("seed: !!python/object/apply:os.system ['true']\n", "cannot parse"),
        ('"a\\nb": 1\n', "unknown option(s) 'a\\nb'"),  # a newline in a key stays on the line
    ],
)
def test_a_hostile_yaml_file_is_one_line(content: str, message: str, tmp_path: Path) -> None:
    from probes.config import RecordConfig

    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ProbeError) as info:
        read_config_file(path, RecordConfig)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_deep_yaml_nesting_cannot_crash_the_parser(tmp_path: Path) -> None:
    """libyaml's loader recurses in C: 50,000 ``[`` would segfault it. Whichever refuses them first (the toolkit's
    64-level pre-pass or the YAML library's own limit), the command ends in one ``error:`` line naming the file."""
    path = tmp_path / "deep.yaml"
    path.write_text("layers: " + "[" * 50_000 + "]" * 50_000 + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "probe_cli", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert len(lines) == 1 and lines[0].startswith("error: --config ") and str(path) in lines[0], lines
    assert "Traceback" not in done.stderr + done.stdout, lines


def test_an_oversized_config_file_is_one_line(tmp_path: Path) -> None:
    from core.config_file import MAX_CONFIG_BYTES
    from probes.config import RecordConfig

    path = tmp_path / "big.json"
    path.write_text(json.dumps({"layers": list(range(MAX_CONFIG_BYTES // 4))}))
    with pytest.raises(ProbeError, match=r"big.json: is [\d,]+ bytes; expected a config file of at most 262,144 bytes"):
        read_config_file(path, RecordConfig)


# ---------------------------------------------------------------- commands whose options are their settings


def _options(argv: list[str]) -> dict[str, Any]:
    """``{long name: typer option}`` of the command ``argv`` names, but ``--config``."""
    from typer.main import get_command

    from probe_cli.main import app

    command: Any = get_command(app)
    for word in argv:
        command = command.commands[word] if hasattr(command, "commands") and word in command.commands else command
    return {
        opt[2:].replace("-", "_"): p
        for p in command.params
        if getattr(p, "param_type_name", "") == "option"
        for opt in p.opts[:1]
        if opt.startswith("--") and opt != "--config"
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["judge", "--data", "missing.jsonl", "--responses", "missing.jsonl"],
        ["synthesize", "--out", "a_file"],
        ["validate", "missing.jsonl"],
    ],
)
def test_any_option_file_is_typed_or_refused_in_one_line(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    """The same property for the commands whose file names their options: every run ends in one ``error:`` line here
    (the flags name missing files), and a value no flag of its type could give is refused naming the file and key."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("x")
    options = _options(argv)
    kinds = {name: p.type_descriptor.annotation for name, p in options.items()}
    good = {
        name: {bool: [True, False], int: [p.min or 1, (p.min or 1) + 1], float: [p.min or 0.5, p.max or 1.5]}.get(
            kinds[name], ["x"]
        )
        for name, p in options.items()
    }
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(case=_hostile_files(good))
    def check(case: tuple[list[tuple[str, Any]], str]) -> None:
        values, config = _written(tmp_path, *case)
        code, _, err = exit_of([*argv, "--config", str(config)], capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        kind = {bool: "switch", int: "integer", float: "number"}
        wrong = [k for k, v in values.items() if kinds[k] in kind and _wrong_kind("option", k, v, kind[kinds[k]])]
        if wrong:
            assert f"--config {config}: " in lines[0], (values, lines[0])
        outcomes["refused by the file" if f"--config {config}: " in lines[0] else "file accepted"] += 1

    check()
    assert len(outcomes) == 2, outcomes


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"limit": "2"}', "limit: expected an integer in [1, 1000000], got '2'"),
        ('{"json": "false"}', "json: expected true or false, got 'false'"),
        ('{"temperature": NaN}', "temperature: expected a number in [0, 2], got nan"),
    ],
)
def test_option_files_are_typed_the_same_way(content: str, message: str, tmp_path: Path, capsys) -> None:
    config = tmp_path / "judge.json"
    config.write_text(content)
    one_line_error(capsys, ["judge", "--config", str(config)], f"--config {config}: {message}")
