"""Every default the README states is the one the code has: each claim is read from the config dataclass.

A claim is a README snippet and the value the code holds for it. ``test_every_default_the_readme_states_is_checked``
finds each "(default ...)" and "defaults to"/"the default" phrase in the README, so a new claim
without an entry here fails, and a default changed in code without the README fails too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
FLAT = " ".join(README.split())


def _home() -> Any:
    import os
    from unittest import mock

    from core.home import probe_home

    with mock.patch.dict(os.environ, {"PROBE_HOME": ""}):
        return str(probe_home()).replace(str(Path.home()), "~")


def _record(field: str) -> Callable[[], Any]:
    def read() -> Any:
        from probes.config import RecordConfig

        return getattr(RecordConfig(capabilities="multi_turn"), field)

    return read


def _field(module: str, cls: str, field: str) -> Callable[[], Any]:
    def read() -> Any:
        import importlib

        from core.config_fields import flat_fields

        return flat_fields(getattr(importlib.import_module(module), cls))[field].default

    return read


def _ab_default(field: str) -> Any:
    """A default of ABConfig as an instance holds it (for fields with a default factory)."""
    from interventions.config import ABConfig

    return getattr(ABConfig(units="1:0", model_dir="m", data_file="d"), field)


def _recipe(**kwargs: str) -> Callable[[], Any]:
    def read() -> Any:
        from training.config import SFTRunConfig

        return SFTRunConfig(data="d", out="o", **kwargs).recipe

    return read


def _constant(module: str, name: str) -> Callable[[], Any]:
    def read() -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)

    return read


def _notebook_run_dir() -> Any:
    """The recorder's runs folder, and the run the heatmap notebook opens when PROBE_RUN_DIR is unset."""
    import json

    from probes.config import RecordConfig

    notebook = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "heatmap_explorer.ipynb").read_text())
    source = "".join(line for cell in notebook["cells"] for line in cell["source"])
    found = re.search(r'RUN_DIR = os.environ.get\("PROBE_RUN_DIR"\) or next\(\(p for p in \("([^"]+)"', source)
    return str(RecordConfig(capabilities="multi_turn").runs_root), found.group(1) if found else None


# (README snippet, the code's value, the value the snippet states)
CLAIMS: list[tuple[str, Callable[[], Any], Any]] = [
    ("`$PROBE_HOME` (default `~/.cache/rolemrc-probe`)", _home, "~/.cache/rolemrc-probe"),
    ("`paper`: the RoleMRC scripts' values, the default for any model directory", _recipe(base="/models/any"), "paper"),
    ("`tiny`: for the tiny base, the default there", _recipe(base="tiny"), "tiny"),
    (
        "`probe models default [--home DIR] [--pair smollm2|tiny|planted|planted-tiny]` builds a pair if",
        _constant("training.default_pair", "DEFAULT_PAIR"),
        "smollm2",
    ),
    ("default, `smollm2`, is SmolLM2-135M-Instruct", _constant("training.default_pair", "DEFAULT_PAIR"), "smollm2"),
    ("Hook points: `mlp_out` (default, the paper's Llama choice)", _record("hooks"), ("mlp_out",)),
    ("float16 (default) or float32", _record("store_dtype"), "float16"),
    (
        "# topk_count, top 20%, default window",
        lambda: (
            _field("analysis.config", "AnalysisConfig", "metric")(),
            _field("analysis.config", "AnalysisConfig", "top_percent")(),
            _field("analysis.config", "AnalysisConfig", "layers")(),
        ),
        ("topk_count", 20.0, None),
    ),
    ("`--normalize samples` (default)", _field("analysis.config", "AnalysisConfig", "normalize"), "samples"),
    (
        "By default the DPO model (`--model dpo`) is scaled by the paper's factor 0.999999",
        lambda: (
            _field("interventions.config", "ABConfig", "model")(),
            _field("interventions.config", "ABConfig", "factor")(),
        ),
        ("dpo", 1 - 1e-6),
    ),
    ("`--edit`, comma-separated or repeated; `scale` by default", lambda: _ab_default("edits"), ["scale"]),
    (
        "ends after `PROBE_JOIN_TIMEOUT` seconds (default 120)",
        _constant("probes.distributed", "DEFAULT_JOIN_TIMEOUT"),
        120.0,
    ),
    ("the other model's own greedy ones by default", lambda: _ab_default("responses"), "greedy"),
    (
        "(default 2;",
        lambda: _constant("interventions.recipes", "RECIPES")()["expo"].default_alpha,
        2.0,
    ),
    ("(default 1;", lambda: _constant("interventions.recipes", "RECIPES")()["lda"].default_alpha, 1.0),
    (
        "generates the held-out split's rows of the capability by default",
        _field("interventions.config", "ABConfig", "split"),
        "heldout",
    ),
    ("`--device` (default `cpu`)", _field("interventions.config", "ABConfig", "device"), "cpu"),
    ("`--placebo R` (default 20)", _field("interventions.config", "ABConfig", "placebo"), 20),
    (
        "by default (`--placebo-generation decide-first`)",
        _field("interventions.config", "ABConfig", "placebo_generation"),
        "decide-first",
    ),
    (
        "`OPENAI_BASE_URL` (default `https://api.openai.com/v1`)",
        _constant("judging.client.config", "DEFAULT_BASE_URL"),
        "https://api.openai.com/v1",
    ),
    ("`PROBE_RUN_DIR` (default `runs/latest`", _notebook_run_dir, ("runs", "runs/latest")),
    (
        "it defaults to the default pair, or takes `--sft`, `--dpo`",
        _constant("training.default_pair", "DEFAULT_PAIR"),
        "smollm2",
    ),
]


@pytest.mark.parametrize("snippet, actual, stated", CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_the_readme_states_the_code_default(snippet: str, actual: Callable[[], Any], stated: Any) -> None:
    assert " ".join(snippet.split()) in FLAT, f"the README no longer says: {snippet}"
    assert actual() == stated


_CLAIM = re.compile(
    r"\(default[ ,)][^)]*\)?|defaults to|the default (?:for|there)|default,|top 20%, default|[Bb]y default"
)


def test_every_default_the_readme_states_is_checked() -> None:
    checked = [" ".join(c[0].split()) for c in CLAIMS]
    unchecked = []
    for match in _CLAIM.finditer(FLAT):
        if not any(FLAT.find(s) <= match.start() < FLAT.find(s) + len(s) for s in checked if s in FLAT):
            unchecked.append(FLAT[max(0, match.start() - 60) : match.end() + 20])
    assert unchecked == []
