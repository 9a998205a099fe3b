"""The one record codec: what it writes is the file's shape, what it reads back is the same record or one error.

Every stored record (summary, settings, provenance, neuron sets, explain records, data rows) goes
through :mod:`core.records`; these tests pin the rules they rely on: field order, the one hook
(left out when None, merged extra keys, not stored), computed fields, text keys for int-keyed
maps, the envelope of a versioned record, strict types with the path of a wrong value, and
unknown keys ignored so a newer file still opens.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from core.records import MERGED, OMIT_NONE, SKIP, RecordError, from_json, nonfinite_as_null, to_json


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Row:
    layer: int
    share: float
    note: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Ratio:
    hits: int
    rate: float | None = field(init=False)
    total: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", self.hits / self.total if self.total else None)


@dataclass
class Stored:
    FORMAT: ClassVar[str] = "test/stored"
    VERSION: ClassVar[int] = 3

    rows: list[Row]
    counts: dict[int, int]
    by_colour: dict[Colour, Ratio]
    pair: tuple[str, str]
    path: Path
    kind: Literal["a", "b"] = "a"
    cache: list[str] = field(default_factory=list, metadata=SKIP)
    extra: dict[str, Any] = field(default_factory=dict, metadata=MERGED)


def _stored() -> Stored:
    return Stored(
        rows=[Row(3, 0.5), Row(1, 0.25, "quiet")],
        counts={12: 4, 3: 1},
        by_colour={Colour.RED: Ratio(1, 4)},
        pair=("x", "y"),
        path=Path("runs/a"),
        cache=["not stored"],
        extra={"note": "kept"},
    )


def test_a_record_is_written_in_the_files_shape() -> None:
    assert to_json(_stored()) == {
        "format": "test/stored",
        "version": 3,
        "rows": [{"layer": 3, "share": 0.5}, {"layer": 1, "share": 0.25, "note": "quiet"}],
        "counts": {"12": 4, "3": 1},
        "by_colour": {"red": {"hits": 1, "rate": 0.25, "total": 4}},
        "pair": ["x", "y"],
        "path": "runs/a",
        "kind": "a",
        "note": "kept",
    }
    assert list(to_json(Ratio(1, 4))) == ["hits", "rate", "total"]  # a computed field stays in its place


def test_a_record_round_trips_through_json_text() -> None:
    record = _stored()
    again = from_json(Stored, json.loads(json.dumps(to_json(record))))
    assert again == Stored(**{**vars(record), "cache": []})  # what is not stored comes back as its default
    assert again.counts == {12: 4, 3: 1} and again.by_colour[Colour.RED].rate == 0.25 and again.pair == ("x", "y")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"rows": [{"layer": "3", "share": 0.5}]}, "rows[0].layer: expected an integer, got '3'"),
        ({"rows": [{"layer": True, "share": 0.5}]}, "rows[0].layer: expected an integer, got True"),
        ({"rows": [{"share": 0.5}]}, "rows[0].layer: missing"),
        ({"counts": {"twelve": 4}}, "counts.twelve: expected an integer key, got 'twelve'"),
        ({"by_colour": {"green": {"hits": 1, "total": 2}}}, "by_colour.green: expected one of 'red', 'blue'"),
        ({"pair": ["x"]}, "pair: expected a list of 2 values, got ['x']"),
        ({"kind": "c"}, "kind: expected one of 'a', 'b', got 'c'"),
        ({"path": 7}, "path: expected text, got 7"),
    ],
)
def test_a_wrong_value_is_one_error_naming_where_it_is(change: dict[str, Any], message: str) -> None:
    body = {**to_json(_stored()), **change}
    with pytest.raises(RecordError) as info:
        from_json(Stored, body)
    assert str(info.value).startswith(message), str(info.value)


def test_unknown_keys_are_ignored_and_absent_optional_keys_take_their_defaults() -> None:
    row = from_json(Row, {"layer": 2, "share": 1, "added_by_a_newer_toolkit": [1, 2]})
    assert row == Row(2, 1.0) and isinstance(row.share, float)


def test_a_float_stored_as_null_reads_as_nan_and_writers_can_store_nonfinite_floats_as_null() -> None:
    body = nonfinite_as_null(to_json(Row(1, math.inf)))
    assert body == {"layer": 1, "share": None} and json.dumps(body, allow_nan=False)
    assert math.isnan(from_json(Row, body).share)
