"""Typed records to and from JSON: the one codec of every dataclass the toolkit writes or reads.

A record is a dataclass. :func:`to_json` turns it into JSON values field by field, in
declaration order: nested records, lists and tuples (as lists), dicts (keys as text: the int
key ``12`` is written ``"12"``, an enum key by its value), enums by value, paths as text, numpy
scalars and arrays as numbers and lists; lists, dicts and scalars that are not records pass
through the same way. :func:`from_json` reads such values back by the fields' type hints
(``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]`` with int keys parsed from their
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
one of

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
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from core.errors import ProbeError
from core.inputs import read_json, shown

T = TypeVar("T")
JSON = "json"  # the metadata key of the one hook
_OMIT_NONE, _MERGED, _SKIP = "omit_none", "merged", "skip"
OMIT_NONE: Mapping[str, str] = types.MappingProxyType({JSON: _OMIT_NONE})
MERGED: Mapping[str, str] = types.MappingProxyType({JSON: _MERGED})
SKIP: Mapping[str, str] = types.MappingProxyType({JSON: _SKIP})
ENVELOPE = ("format", "version")


@dataclasses.dataclass(frozen=True)
class Flatten:
    """The :func:`flatten` hook: under which key each nested field is written, and which keys move."""

    rename: Mapping[str, str]  # nested field -> its key in the record (else its own name)
    after: Mapping[str, str]  # key -> the key it is written right after

    def key(self, name: str) -> str:
        return self.rename.get(name, name)


def flatten(rename: Mapping[str, str] | None = None, *, after: Mapping[str, str] | None = None) -> Mapping[str, Any]:
    """``metadata=`` of a nested record written into its parent: its fields become the parent's keys, in its place.

    ``rename`` gives a field another key; ``after`` writes a key (the nested record's or the parent's)
    right after another one, where a file's order is not the declaration order. Reading takes the
    nested fields back from those keys.

    >>> from dataclasses import field, make_dataclass
    >>> Rate = make_dataclass("Rate", [("n", int), ("rate", float)])
    >>> hook = flatten({"n": "items"}, after={"note": "items"})
    >>> Row = make_dataclass("Row", [("task", str), ("note", str), ("score", Rate, field(metadata=hook))])
    >>> to_json(Row("mmlu", "ok", Rate(12, 0.5)))
    {'task': 'mmlu', 'items': 12, 'note': 'ok', 'rate': 0.5}
    >>> from_json(Row, {"task": "mmlu", "items": 12, "note": "ok", "rate": 0.5})
    Row(task='mmlu', note='ok', score=Rate(n=12, rate=0.5))
    >>> from_json(Row, {"task": "mmlu", "note": "ok", "rate": 0.5})
    Traceback (most recent call last):
    ...
    core.records.RecordError: items: missing
    """
    hook = Flatten(types.MappingProxyType(dict(rename or {})), types.MappingProxyType(dict(after or {})))
    return types.MappingProxyType({JSON: hook})


_WORDS: dict[Any, str] = {
    int: "an integer",
    float: "a number",
    str: "text",
    Path: "text",
    bool: "true or false",
    list: "a list",
    tuple: "a list",
}


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


def dotted(path: tuple[str | int, ...]) -> str:
    """``("capabilities", "nested", "top_layers", 0)`` -> ``capabilities.nested.top_layers[0]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


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
        elif hook == _MERGED:
            merged = {str(k): to_json(v) for k, v in value.items()}
        elif hook != _SKIP and not (hook == _OMIT_NONE and value is None):
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
    """``body`` (JSON values) read as the record ``kind``; a :class:`RecordError` names the first wrong value."""
    return typing.cast(T, _read(kind, body, ()))


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _read(kind: Any, value: Any, path: tuple[str | int, ...]) -> Any:
    if dataclasses.is_dataclass(kind):
        return _read_record(kind, value, path)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return _read_union(args, value, path)
    if origin is typing.Literal:
        if value in args:
            return value
        raise RecordError(path, "one of " + ", ".join(repr(a) for a in args), value)
    if origin is list or origin is tuple:
        return _read_sequence(origin, args, value, path)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return _read_mapping(origin, args, value, path)
    return _read_scalar(kind, value, path)


def _read_record(kind: Any, body: Any, path: tuple[str | int, ...]) -> Any:
    if not isinstance(body, dict):
        raise RecordError(path, "an object", body)
    if body and not dataclasses.fields(kind):
        raise RecordError(path, "an empty object", body)
    return _read_fields(kind, body, path, _own_name)


def _read_fields(kind: Any, body: dict[str, Any], path: tuple[str | int, ...], key: Callable[[str], str]) -> Any:
    """``kind`` from ``body``, each field from the key ``key`` gives its name (:func:`flatten` renames)."""
    hints = _hints(kind)
    values: dict[str, Any] = {}
    merged: str | None = None
    for f in dataclasses.fields(kind):
        hook, name = f.metadata.get(JSON), key(f.name)
        if not f.init or hook == _SKIP:
            continue
        if isinstance(hook, Flatten):
            values[f.name] = _read_fields(hints[f.name], body, path, _renamed(key, hook))
        elif hook == _MERGED:
            merged = f.name
        elif name in body:
            values[f.name] = _read(hints[f.name], body[name], (*path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError((*path, name), "a value", missing=True)
    if merged is not None:
        known = _keys(kind, key) | set(ENVELOPE)
        values[merged] = {k: v for k, v in body.items() if k not in known}
    return kind(**values)


def _own_name(name: str) -> str:
    return name


def _renamed(key: Callable[[str], str], hook: Flatten) -> Callable[[str], str]:
    return lambda name: key(hook.key(name))


def _keys(kind: Any, key: Callable[[str], str]) -> set[str]:
    """The keys ``kind``'s fields are written under."""
    keys: set[str] = set()
    for f in dataclasses.fields(kind):
        hook = f.metadata.get(JSON)
        keys |= _keys(_hints(kind)[f.name], _renamed(key, hook)) if isinstance(hook, Flatten) else {key(f.name)}
    return keys


def _read_union(args: tuple[Any, ...], value: Any, path: tuple[str | int, ...]) -> Any:
    if value is None and type(None) in args:
        return None
    arms = [a for a in args if a is not type(None)]
    for arm in arms[:-1]:
        try:
            return _read(arm, value, path)
        except RecordError:
            continue
    return _read(arms[-1], value, path)


def _read_sequence(origin: type, args: tuple[Any, ...], value: Any, path: tuple[str | int, ...]) -> Any:
    if not isinstance(value, list):
        raise RecordError(path, _WORDS[origin], value)
    if origin is list:
        return [_read(args[0] if args else Any, v, (*path, i)) for i, v in enumerate(value)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_read(args[0], v, (*path, i)) for i, v in enumerate(value))
    if args and len(args) != len(value):
        raise RecordError(path, f"a list of {len(args)} values", value)
    return tuple(_read(args[i] if args else Any, v, (*path, i)) for i, v in enumerate(value))


def _read_mapping(origin: type, args: tuple[Any, ...], value: Any, path: tuple[str | int, ...]) -> Any:
    if not isinstance(value, dict):
        raise RecordError(path, "an object", value)
    key_kind, value_kind = args if args else (Any, Any)
    out = {_read_key(key_kind, k, (*path, k)): _read(value_kind, v, (*path, str(k))) for k, v in value.items()}
    return out if origin in (dict, Mapping) else origin(out)


def _read_key(kind: Any, key: str, path: tuple[str | int, ...]) -> Any:
    if kind is int:
        try:
            return int(key)
        except ValueError:
            raise RecordError(path, "an integer key", key) from None
    return _read_scalar(kind, key, path)


def _read_scalar(kind: Any, value: Any, path: tuple[str | int, ...]) -> Any:
    if kind is Any or kind is object:
        return value
    if kind is float:
        if value is None:
            return math.nan
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer past float's range
                raise RecordError(path, "a number within float's range", value) from None
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind in (str, bool):
        if isinstance(value, kind):
            return value
    elif kind is Path:
        if isinstance(value, str):
            return Path(value)
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            raise RecordError(path, "one of " + ", ".join(repr(m.value) for m in kind), value) from None
    else:
        return value  # a type the codec does not check (numpy arrays, callables): as found
    raise RecordError(path, _WORDS[kind], value)


def read_record(kind: type[T], path: str | Path, what: str) -> T:
    """The record ``kind`` in the JSON file ``path``; one :class:`ProbeError` naming the file and the wrong key."""
    try:
        return from_json(kind, read_json(path, what))
    except RecordError as exc:
        raise ProbeError(f"{path}: not a valid {what}: {exc}") from None
