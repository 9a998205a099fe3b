"""The docstring examples of the data modules run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["data_synthesis.capabilities", "data_synthesis.offline.passages", "data_synthesis.offline.profiles",
           "data_synthesis.offline.replies", "data_synthesis.offline.tasks", "data_synthesis.offline.chats",
           "data_synthesis.judge.rules"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
