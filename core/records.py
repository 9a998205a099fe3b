"""Typed records to and from JSON: the one codec of every dataclass the toolkit writes or reads.

A record is a dataclass. :func:`to_json` turns it into JSON values field by field, in
declaration order: nested records, lists and tuples (as lists), dicts (keys as text: the int
key ``12`` is written ``"12"``, an enum key by its value), enums by value, paths as text, numpy
scalars and arrays as numbers and lists; lists, dicts and scalars that are not records pass
through the same way. :func:`from_json` reads such values back by the fields' type hints, through
:func:`core.validation.check` (the one check of values against type hints, which ``--config`` files
share) (``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]`` with int keys parsed from their
text, ``Literal``, enums, paths, nested records; ``Any`` as found) and refuses a missing field
or a value of another type with one :class:`RecordError` naming where it is. Keys that are not
fields are ignored, so a file written by a newer toolkit with more fields still opens; but a
record without fields stands for ``{}`` and reads nothing else, so that as the last arm of a
union (``Drawn | NoPlacebo``) it does not take in a malformed block of another arm. A
``float`` field reads ``null`` as NaN: writers of strict JSON store a non-finite float as
``null`` (:func:`nonfinite_as_null`).

A stored record names its file format and version in the class variables ``FORMAT`` (optional)
and ``VERSION``; :func:`to_json` writes them first. Which versions a reader accepts, and what it
tells the user about a file it cannot read, belong to that record's reader.

One hook keeps a record's JSON shape where it is not simply its fields: ``metadata=`` on a field,
one of (defined in :mod:`core.validation`, which reads them; named here too)

* :data:`OMIT_NONE`: the key is left out while the value is None (and an absent key reads as the default);
* :data:`MERGED`: a ``dict[str, Any]`` field whose items are written into the record itself, after
  the fields; reading gives it every key that is not a field (nor ``format``/``version``);
* :data:`SKIP`: not part of the record: neither written nor read (it keeps its default);
* :func:`flatten`: a nested record whose fields are written into the record itself, in its place,
  and read back from the record's keys; it may rename them and move keys, to keep a file's own
  names and order.

A field declared ``init=False`` (a value computed in ``__post_init__``) is written in its place and
computed again on reading.

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Hit:
    ...     layer: int
    ...     counts: dict[int, int]
    ...     note: str | None = field(default=None, metadata=OMIT_NONE)
    >>> to_json(Hit(3, {12: 1}))
    {'layer': 3, 'counts': {'12': 1}}
    >>> from_json(Hit, {"layer": 3, "counts": {"12": 1}})
    Hit(layer=3, counts={12: 1}, note=None)
    >>> from_json(Hit, {"layer": "3", "counts": {}})
    Traceback (most recent call last):
    ...
    core.records.RecordError: layer: expected an integer, got '3'
    >>> @dataclass
    ... class NoNote:
    ...     '''No note: ``{}`` in the file.'''
    >>> from_json(NoNote, {}), to_json(NoNote())
    (NoNote(), {})
    >>> from_json(NoNote, {"note": 1})
    Traceback (most recent call last):
    ...
    core.records.RecordError: expected an empty object, got {'note': 1}
"""

from __future__ import annotations

import dataclasses
import enum
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from core.errors import ProbeError
from core.inputs import read_json, shown
from core.validation import ENVELOPE as ENVELOPE
from core.validation import JSON as JSON
from core.validation import MERGED as MERGED
from core.validation import OMIT_NONE as OMIT_NONE
from core.validation import SKIP as SKIP
from core.validation import Flatten as Flatten
from core.validation import Hook, Invalid, check, dotted
from core.validation import flatten as flatten

T = TypeVar("T")


class RecordError(ValueError):
    """A value that does not fit its field: ``path`` (field names and list indices), what was expected, what came."""

    def __init__(self, path: tuple[str | int, ...], expected: str, value: Any = None, *, missing: bool = False) -> None:
        self.path, self.expected, self.value, self.missing = path, expected, value, missing
        found = "missing" if missing else f"expected {expected}, got {shown(value)}"
        super().__init__(f"{dotted(path)}: {found}" if path else found)

    @property
    def field(self) -> str:
        """The top-level field the problem is in ('' for the record itself)."""
        return str(self.path[0]) if self.path else ""


# ---------------------------------------------------------------- writing


def to_json(value: Any) -> Any:
    """A record (nested), list, dict or scalar as JSON values; see the module doc."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record_json(value)
    if isinstance(value, Mapping):
        return {_key_json(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist") and callable(value.tolist):  # a numpy scalar or array
        return value.tolist()
    return value


def _record_json(record: Any) -> dict[str, Any]:
    kind = type(record)
    body: dict[str, Any] = {}
    if hasattr(kind, "FORMAT"):
        body["format"] = kind.FORMAT
    if hasattr(kind, "VERSION"):
        body["version"] = kind.VERSION
    return {**body, **_fields_json(record)}


def _fields_json(record: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    moves: dict[str, str] = {}
    for f in dataclasses.fields(record):
        hook, value = f.metadata.get(JSON), getattr(record, f.name)
        if isinstance(hook, Flatten):
            body.update({hook.key(k): v for k, v in _fields_json(value).items()})
            moves.update(hook.after)
        elif hook is Hook.MERGED:
            merged = {str(k): to_json(v) for k, v in value.items()}
        elif hook is not Hook.SKIP and not (hook is Hook.OMIT_NONE and value is None):
            body[f.name] = to_json(value)
    for key, anchor in moves.items():
        body = _moved(body, key, anchor)
    return {**body, **merged}


def _moved(body: dict[str, Any], key: str, anchor: str) -> dict[str, Any]:
    """``body`` with ``key`` right after ``anchor`` (unchanged where either is absent)."""
    if key not in body or anchor not in body:
        return body
    rest = [(k, v) for k, v in body.items() if k != key]
    at = next(i for i, (k, _) in enumerate(rest) if k == anchor) + 1
    return dict([*rest[:at], (key, body[key]), *rest[at:]])


def _key_json(key: Any) -> str:
    return key.value if isinstance(key, enum.Enum) else str(key)


def nonfinite_as_null(value: Any) -> Any:
    """JSON values with every NaN or infinite float replaced by None (for ``json.dumps(..., allow_nan=False)``).

    >>> nonfinite_as_null({"a": [1.0, float("inf")], "b": float("nan")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: nonfinite_as_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nonfinite_as_null(v) for v in value]
    return value


# ---------------------------------------------------------------- reading


def from_json(kind: type[T], body: Any) -> T:
    """``body`` (JSON values) read as the record ``kind`` (:func:`core.validation.check`, by the rules for stored
    records); a :class:`RecordError` names the first wrong value."""
    try:
        return typing.cast(T, check(kind, body, "record"))
    except Invalid as exc:
        raise RecordError(exc.loc, exc.expected, exc.value, missing=exc.missing) from None


def read_record(kind: type[T], path: str | Path, what: str) -> T:
    """The record ``kind`` in the JSON file ``path``; one :class:`ProbeError` naming the file and the wrong key."""
    try:
        return from_json(kind, read_json(path, what))
    except RecordError as exc:
        raise ProbeError(f"{path}: not a valid {what}: {exc}") from None
