"""The one check of values against type hints (:mod:`core.validation`): what stored records and options rely on beyond
the messages pinned in test_core_records.py and test_hostile_config.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import pytest

from core.config_file import OptionError, Range, typed
from core.records import RecordError, from_json, to_json


@dataclass
class Node:
    name: str
    kids: list[Node] = field(default_factory=list)


@dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")


def test_a_record_that_holds_itself_round_trips_and_a_deep_error_names_its_path() -> None:
    tree = Node("a", [Node("b", [Node("c")])])
    assert from_json(Node, to_json(tree)) == tree
    with pytest.raises(RecordError, match=r"^kids\[0\]\.kids\[0\]\.name: expected text, got 3$"):
        from_json(Node, {"name": "a", "kids": [{"name": "b", "kids": [{"name": 3}]}]})
    with pytest.raises(RecordError, match=r"^kids\[0\]\.kids\[0\]\.name: missing$") as info:
        from_json(Node, {"name": "a", "kids": [{"name": "b", "kids": [{}]}]})
    assert info.value.path == ("kids", 0, "kids", 0, "name") and info.value.missing


def test_a_records_own_check_is_said_as_it_says_it() -> None:
    with pytest.raises(ValueError, match=r"^n must be >= 0, got -1$") as info:
        from_json(Positive, {"n": -1})
    assert not isinstance(info.value, RecordError)


def test_an_option_past_64_bits_says_its_bounds_or_its_size() -> None:
    with pytest.raises(OptionError, match=r"^--steps: expected an integer >= 1, got 9223372036854775808$"):
        typed(2**63, Annotated[int, Range(1)], "steps")
    with pytest.raises(OptionError, match=r"^--seed: expected an integer of at most 64 bits, got 9223372036854775808$"):
        typed(2**63, int, "seed")
    assert typed((1, 2), tuple[int, ...], "layers") == (1, 2) and typed([1, 2], tuple[int, ...], "layers") == (1, 2)
