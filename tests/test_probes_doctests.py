"""The docstring examples of the probes modules run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["probes.config", "probes.prompts", "probes.backends.base", "probes.hook_points"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
