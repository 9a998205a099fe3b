"""The docstring examples of the interventions modules that need no model run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["interventions.report", "interventions.placebo", "interventions.selection", "interventions.config", "interventions.scaling"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
