"""Every stage command's options are made from its config dataclass, so each setting is said once.

A setting's flag, help, default and ``--config`` key come from its field (:mod:`core.config_fields`,
:mod:`probe_cli.options`): each option below is compared with its field, the help states the field's own default
and no other, and a new field is one edit — it gets its flag, its "Default:" and its config key with nothing else
written. Nested configs (the generation and judge settings of ``probe intervene``) are flattened under the names
the command line and config files always used, and an error inside one is said at the outer flag.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from analysis.config import AnalysisConfig
from analysis.explain_config import ExplainConfig
from core.config_fields import flat_fields, flat_values, nested, option
from core.config_file import POSITIVE, build_config, from_settings, typed_config
from core.decoding import GenerationConfig
from core.errors import ProbeError
from data_synthesis.dataset import SynthesizeConfig
from dictionary.config import DictionaryConfig
from interventions.config import ABConfig
from judging.client.config import ClientOptions
from lmeval.config import LMEvalConfig
from probe_cli.main import app
from probe_cli.options import FROM_CONFIG, ConfigFlags, bounds_of, config_options, said_bounds, shown_default
from probes.config import RecordConfig
from study.replicate_config import ReplicateOptions
from tests.support.cli import one_line_error
from training.config import DPORunConfig, SFTRunConfig
from training.eval_config import PairEvalConfig

# command -> (its config class, the settings that are not options of it)
COMMANDS: dict[tuple[str, ...], tuple[type, set[str]]] = {
    ("run",): (RecordConfig, set()),
    ("analyze",): (AnalysisConfig, set()),
    ("intervene",): (ABConfig, {"run_dir"}),  # the RUN_DIR argument
    ("train", "sft"): (SFTRunConfig, set()),
    ("train", "dpo"): (DPORunConfig, set()),
    ("judge",): (ClientOptions, set()),
    ("synthesize",): (SynthesizeConfig, set()),  # the endpoint's help led by "LLM backend: " (nested)
    ("lmeval",): (LMEvalConfig, {"run_dir"}),  # the RUN_DIR argument
    ("models", "eval"): (PairEvalConfig, set()),
    ("replicate",): (ReplicateOptions, set()),
    ("explain",): (ExplainConfig, set()),
    ("dictionary",): (DictionaryConfig, set()),
}
REQUIRED = {
    ("run",): {"capabilities"},
    ("lmeval",): {"tasks"},
}  # needed on the command line although the field has a default


def _options(path: tuple[str, ...]) -> dict[str, Any]:
    """The options of ``probe PATH`` by parameter name (Typer's own click, not necessarily ``click``)."""
    command: Any = get_command(app)
    for word in path:
        command = command.commands[word]
    return {p.name: p for p in command.params if getattr(p, "param_type_name", "") == "option"}


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_each_option_is_its_field(path: tuple[str, ...]) -> None:
    cls, not_options = COMMANDS[path]
    options = _options(path)
    for name, field in flat_fields(cls).items():
        if field.flag is None or name in not_options:
            assert name not in options, name
            continue
        opt = options[name]
        assert field.flag in opt.opts and set(field.aliases) <= set(opt.opts), name
        assert opt.default is None, name  # not given: the file, then the field decide
        shown = None if name in REQUIRED.get(path, set()) else shown_default(field)
        said = f" Default: {shown}." if shown is not None else ""
        bounds = bounds_of(field.hint)
        said += f" {said_bounds(bounds)}" if bounds is not None else ""
        assert field.help and opt.help == field.help + said, (name, opt.help)
        assert opt.help.count("Default:") <= 1, (name, opt.help)  # the field's default, said once


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_no_help_restates_a_default_of_its_own(path: tuple[str, ...]) -> None:
    """A "(default 60)" typed into a help line goes stale when the field changes; only the generated one is left."""
    for name, opt in _options(path).items():
        assert not re.search(r"\(default:? [\d.]+( s)?\)", opt.help or ""), (name, opt.help)


@pytest.mark.parametrize(
    "argv, key, message",
    [
        (["models", "eval"], "sft: a", "give both --sft and --dpo"),
        (["replicate"], "dpo: a", "give both --sft and --dpo"),
        (["replicate"], "edit: 3", "edit: expected a string or a list of strings, got 3"),
        (["explain", "{tmp}/run"], "tokens: 0", "tokens: expected an integer in [1, 1000000], got 0"),
        (["synthesize", "--out", "{tmp}/data"], "max-retries: 2", "--max-retries: only for --backend llm"),
    ],
)
def test_a_config_file_keeps_its_long_option_names(
    argv: list[str], key: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands whose files always named options by long name (``sft`` for ``--sft``, ``edit`` for ``--edit``)
    read them so still, although their options are now made from fields (``sft_dir``, ``edits``)."""
    path = tmp_path / "config.yaml"
    path.write_text(key + "\n")
    one_line_error(capsys, [*(a.format(tmp=tmp_path) for a in argv), "--config", str(path)], message)


def test_the_shown_defaults_are_the_fields_defaults() -> None:
    said = {name: shown_default(f) for name, f in flat_fields(ABConfig).items()}
    assert said["placebo"] == "20" and said["max_new_tokens"] == "32" and said["factor"] == "0.999999"
    assert said["positive_control"] == "on" and said["do_sample"] == "off" and said["edits"] == "scale"
    assert said["judge_retries"] == "4" and said["judge_timeout"] == "60"  # None: the client's default, said
    assert shown_default(flat_fields(RecordConfig)["hooks"]) == "mlp_out"


def test_nested_settings_keep_their_flat_names_in_reports_and_files(tmp_path: Path) -> None:
    config = ABConfig(units="1:0", generation=GenerationConfig(max_new_tokens=5, do_sample=False))
    body = config.to_dict()
    for name in ("max_new_tokens", "batch_size", "do_sample", "temperature", "top_p", "judge_model", "judge_retries"):
        assert name in body, name  # what ab_report.json and the resume fingerprint always held
    assert "generation" not in body and "judge_endpoint" not in body
    assert from_settings(ABConfig, body) == config  # a stored config builds the same config again
    assert (config.max_new_tokens, config.do_sample) == (5, False)  # and reads through, as before
    path = tmp_path / "ab.yaml"
    path.write_text("units: '1:0'\nmax-new-tokens: 7\njudge_model: m\n")
    built = build_config(ABConfig, path, {"max_new_tokens": 9})
    assert built.generation.max_new_tokens == 9 and built.judge_endpoint.model == "m"  # the flag wins


def test_an_error_inside_a_nested_config_names_the_outer_flag_or_key(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match=r"^--judge-retries: expected an integer in \[0, 100\], got -1$"):
        from_settings(ABConfig, {"units": "1:0", "judge_retries": -1})
    with pytest.raises(ProbeError, match=r"^--max-new-tokens: expected an integer in \[1, 1000000\], got 0$"):
        from_settings(ABConfig, {"units": "1:0", "max_new_tokens": 0})
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"units": "1:0", "judge_backoff": 601}))
    with pytest.raises(ProbeError, match=r"--config .*ab.json: judge_backoff: expected a number in \[0, 600\]"):
        build_config(ABConfig, path, {})


# ---------------------------------------------------------------- a new field is one edit


@dataclass
@typed_config
class _Stage:
    rows: Annotated[int, POSITIVE] = option(8, "Rows to read.", aliases=["-n"])
    generation: GenerationConfig = nested(GenerationConfig, skip=["seed"])


@dataclass
@typed_config
class _GrownStage(_Stage):
    patience: Annotated[int, POSITIVE] = option(3, "Steps to wait.")  # the one edit


def _app(cls: type, seen: list[Any]) -> typer.Typer:
    demo = typer.Typer()

    @demo.command()
    @config_options(cls)
    def stage(settings: ConfigFlags = FROM_CONFIG) -> None:
        seen.append(settings.build())

    return demo


def test_a_new_field_gets_its_flag_help_default_and_config_key(tmp_path: Path) -> None:
    seen: list[Any] = []
    runner = CliRunner()
    before = runner.invoke(_app(_Stage, seen), ["--help"], env={"COLUMNS": "200"}).output
    after = runner.invoke(_app(_GrownStage, seen), ["--help"], env={"COLUMNS": "200"}).output
    assert "--patience" not in before and "--patience" in after and "Steps to wait. Default: 3." in after
    assert "--max-new-tokens" in after and "Default: 64." in after  # the nested config's options, flattened
    path = tmp_path / "stage.yaml"
    path.write_text("patience: 5\nrows: 2\n")
    for argv, patience, rows in ([], 3, 8), (["--config", str(path)], 5, 2), (["--config", str(path), "-n", "4"], 5, 4):
        result = runner.invoke(_app(_GrownStage, seen), argv)
        assert result.exit_code == 0, result.output
        assert (seen[-1].patience, seen[-1].rows) == (patience, rows)  # field default < --config FILE < flag
    result = runner.invoke(_app(_GrownStage, seen), ["--patience", "5", "--max-new-tokens", "2", "--sample"])
    assert result.exit_code == 0, result.output
    assert seen[-1].patience == 5 and flat_values(seen[-1])["max_new_tokens"] == 2 and seen[-1].generation.do_sample
