"""The one check of values against type hints: user input (``--config`` files, flags, settings) and stored records.

A type hint is compiled once, on first use, into a schema of pydantic-core (pydantic's validation
engine, what a :class:`pydantic.TypeAdapter` runs) and cached; this module is the only place that
walks type hints. pydantic-core runs the schema: the containers, records, defaults, missing keys and
where each error is. The schema is handed to :class:`pydantic_core.SchemaValidator` directly: a
``TypeAdapter`` would only wrap it, and its import would add about 0.2 s to every command's start. Two
rule sets share it, because the two inputs differ:

* ``"option"`` (:mod:`core.config_file`): what a user typed. ``bool`` takes only ``true``/``false``, ``int``
  an integer of at most 64 bits, ``float`` a finite number, ``Path`` a non-empty string, a list (or tuple) of at
  most :data:`MAX_OPTION_ITEMS` items for ``list[...]``/``tuple[..., ...]``; ``Annotated`` marks (:class:`Range`,
  :data:`DIRECTORY`) bound the value; a union is its first fitting member, and a failure says the most telling
  member's problem. An
  enum or nested config must already be one (it checked itself when it was made).
* ``"record"`` (:mod:`core.records`): what the toolkit wrote. JSON values become the dataclass, with
  ``int`` keys from their text, enums by value, ``null`` for a NaN float, unknown keys ignored, and the
  record hooks (:data:`OMIT_NONE`, :data:`MERGED`, :data:`SKIP`, :func:`flatten`) that keep a record's
  JSON shape; a union is its first fitting arm, and a failure says the last arm's problem.

Either way a bad value is one :class:`Invalid`: where it is (field names and list indices), what was
expected, what came.

Example:
    >>> from typing import Annotated
    >>> check(Annotated[int, Range(1)], 3, "option")
    3
    >>> check(list[Annotated[int, Range(1)]], (1, 0), "option")
    Traceback (most recent call last):
    ...
    core.validation.Invalid: [1]: expected an integer >= 1, got 0
    >>> check(dict[int, float], {"12": None}, "record")
    {12: nan}
    >>> describe(str | list[int])
    'a string or a list of integers'
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic_core import CoreSchema, PydanticCustomError, SchemaValidator, ValidationError, core_schema

from core.inputs import shown

Mode = Literal["option", "record"]
MAX_OPTION_ITEMS = 256
"""The most items a list-valued option may hold (``--dose``, ``--edit``, ``--hook``, ``--tasks``, ...), from a flag or
a config file: each item is work (a dose is an arm of generations), so a pasted list is one line, not a run that never
ends."""
Loc = tuple[str | int, ...]
_INT64 = 2**63

# ---------------------------------------------------------------- marks of a hint (user input) and hooks (records)


@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of a number field, given in its hint: ``Annotated[float, Range(0, 1, low_open=True)]`` is (0, 1]."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, x: float) -> bool:
        above = self.low is None or (x > self.low if self.low_open else x >= self.low)
        return above and (self.high is None or (x < self.high if self.high_open else x <= self.high))

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {opening}{_number(self.low)}, {_number(self.high)}{closing}"


@dataclasses.dataclass(frozen=True)
class Directory:
    """A path field naming a directory to fill or create: it may be missing, but not a file."""


DIRECTORY = Directory()


class Hook(enum.Enum):
    """How a record field is stored where it is not simply a key of its own (:mod:`core.records`)."""

    OMIT_NONE = "omit_none"  # the key is left out while the value is None
    MERGED = "merged"  # a dict[str, Any] whose items are keys of the record itself
    SKIP = "skip"  # not stored


JSON = "json"  # the metadata key of a record field's hook
OMIT_NONE: Mapping[str, Hook] = types.MappingProxyType({JSON: Hook.OMIT_NONE})
MERGED: Mapping[str, Hook] = types.MappingProxyType({JSON: Hook.MERGED})
SKIP: Mapping[str, Hook] = types.MappingProxyType({JSON: Hook.SKIP})
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
    >>> Row = make_dataclass("Row", [("task", str), ("score", Rate, field(metadata=flatten({"n": "items"})))])
    >>> check(Row, {"task": "mmlu", "items": 12, "rate": 0.5}, "record")
    Row(task='mmlu', score=Rate(n=12, rate=0.5))
    >>> check(Row, {"task": "mmlu", "rate": 0.5}, "record")
    Traceback (most recent call last):
    ...
    core.validation.Invalid: items: missing
    """
    hook = Flatten(types.MappingProxyType(dict(rename or {})), types.MappingProxyType(dict(after or {})))
    return types.MappingProxyType({JSON: hook})


# ---------------------------------------------------------------- checking


class Invalid(ValueError):
    """A value that does not fit its hint: ``loc`` (field names and list indices inside the value), and either what
    was expected or a whole ``message``; ``missing``: a required key is absent."""

    def __init__(self, loc: Loc, expected: str = "", value: Any = None, *, message: str = "", missing: bool = False):
        self.loc, self.expected, self.value, self.missing, self.said = loc, expected, value, missing, message
        self.message = "missing" if missing else message or f"expected {expected}, got {shown(_plain(value))}"
        super().__init__(f"{dotted(loc)}: {self.message}" if loc else self.message)


def dotted(loc: Loc, start: str = "") -> str:
    """``("capabilities", "top_layers", 0)`` -> ``capabilities.top_layers[0]`` (after ``start``, if given)."""
    text = start
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def check(hint: Any, value: Any, mode: Mode) -> Any:
    """``value`` as ``hint`` says, by the rules of ``mode`` (module doc), or :class:`Invalid` for its first wrong
    part."""
    try:
        return _node(hint, mode, None).validator.validate_python(value)
    except ValidationError as exc:
        raise _invalid(exc.errors(include_url=False)[0]) from None
    except _Escaped as exc:  # an error of the record's own constructor, not of its JSON
        raise exc.error from None


def describe(hint: Any) -> str:
    """What a value of ``hint`` is, in words: ``an integer >= 1``, ``a string or a list of strings``."""
    return _node(hint, "option", None).words


@dataclasses.dataclass(frozen=True)
class _Node:
    schema: CoreSchema
    words: str  # what a value is, in words ("an integer >= 1")

    @functools.cached_property
    def validator(self) -> SchemaValidator:
        """The schema, ready to run (built on first use: a union's members are run alone)."""
        return SchemaValidator(self.schema)


class _Escaped(Exception):  # carries an error past pydantic, which would turn a ValueError into its own
    def __init__(self, error: Exception) -> None:
        self.error = error


def _fail(words: str, **context: Any) -> Exception:
    return PydanticCustomError("expected", "expected {expected}", {"expected": words, **context})


def _invalid(error: Any) -> Invalid:
    """One pydantic error (a dict) as :class:`Invalid`."""
    ctx, loc, value, missing = _parts(error)
    loc = tuple(p for p in loc if p != "[key]")  # pydantic's mark of a mapping's key
    return (
        Invalid(loc, missing=True) if missing else Invalid(loc, ctx["expected"], value, message=ctx.get("message", ""))
    )


def _lifted(error: Any) -> Exception:
    """A member's error (a dict from a nested check) raised again from where the union is."""
    ctx, sub, value, missing = _parts(error)
    return PydanticCustomError("member", "{expected}", {**ctx, "sub": sub, "value": value, "missing": missing})


def _parts(error: Any) -> tuple[dict[str, Any], Loc, Any, bool]:
    """A pydantic error's context (with what was expected), where it is, the value and whether it is a missing key;
    an error raised again by :func:`_lifted` says where it was and its value in its context."""
    ctx = {"expected": error["msg"], **(error.get("ctx") or {})}
    value = ctx["value"] if "value" in ctx else error["input"]
    return ctx, (*error["loc"], *ctx.get("sub", ())), value, error["type"] == "missing" or ctx.get("missing", False)


def _first_error(node: _Node, value: Any) -> tuple[Any, Any]:
    """``(result, None)`` if ``value`` fits ``node``, else ``(None, its first error)``."""
    try:
        return node.validator.validate_python(value), None
    except ValidationError as exc:
        return None, exc.errors(include_url=False)[0]


# ---------------------------------------------------------------- compiling a hint


@functools.cache
def _node(hint: Any, mode: Mode, words: str | None) -> _Node:
    """``hint`` compiled by the rules of ``mode``; ``words`` (an ``Annotated`` hint's) stand for its own."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _annotated(args, mode)
    if origin in (Union, types.UnionType):
        return _union(args, mode, words)
    if origin in (list, tuple, Sequence):
        return _sequence(origin, args, mode, words)
    if origin is dict or (mode == "record" and isinstance(origin, type) and issubclass(origin, Mapping)):
        return _mapping(origin, args, mode, words)
    if dataclasses.is_dataclass(hint) and mode == "record":
        return _record(typing.cast(type, hint))
    return _leaf(hint, origin, args, mode, words)


def _function(check: Callable[[Any], Any], words: str) -> _Node:
    return _Node(core_schema.no_info_plain_validator_function(check), words)


def _before(check: Callable[[Any], Any], then: CoreSchema, words: str) -> _Node:
    return _Node(core_schema.no_info_before_validator_function(check, then), words)


def _annotated(args: tuple[Any, ...], mode: Mode) -> _Node:
    ranges = [str(m) for m in args[1:] if isinstance(m, Range)]
    base_words = "a number" if args[0] is float and ranges else _node(args[0], mode, None).words
    words = " ".join([base_words, *ranges])
    base = _node(args[0], mode, words)
    marks = [m for m in args[1:] if isinstance(m, (Range, Directory))]

    def bounded(value: Any) -> Any:
        for mark in marks if value is not None else ():
            if isinstance(mark, Range) and value not in mark:
                raise _fail(words, near=True)  # the right type, out of bounds: a union says this
            if isinstance(mark, Directory) and os.path.lexists(value) and not os.path.isdir(value):
                message = (
                    f"expected a directory (or a path to create one), got {_shown(value)}, which is not a directory"
                )
                raise _fail(words, near=True, message=message)
        return value

    return _Node(core_schema.no_info_after_validator_function(bounded, base.schema), words)


def _union(args: tuple[Any, ...], mode: Mode, words: str | None) -> _Node:
    members = [_node(a, mode, None) for a in args if a is not type(None)]
    optional = type(None) in args
    own = list(dict.fromkeys(m.words for m in members))
    words = words or " or ".join([", ".join(own[:-1]), own[-1]] if len(own) > 2 else own)

    def first_fitting(value: Any) -> Any:
        if value is None and optional:
            return None
        telling = None
        for member in members:
            out, error = _first_error(member, value)
            if error is None:
                return out
            deeper = error["loc"] or (error.get("ctx") or {}).get("sub") or (error.get("ctx") or {}).get("near")
            telling = telling or (error if deeper else None)
            if mode == "record":
                telling = error  # a stored union says its last arm's problem
        raise _lifted(telling) if telling is not None else _fail(words)

    return _function(first_fitting, words)


def _sequence(origin: Any, args: tuple[Any, ...], mode: Mode, words: str | None) -> _Node:
    variadic = origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)
    items = [_node(a, mode, None) for a in (args[:1] if variadic else args)] or [_node(Any, mode, None)]
    if mode == "option":
        words = words or f"a list of {_PLURAL.get(_base(args[0]), 'values')}"
        kinds: tuple[type, ...] = (list, tuple) if variadic else ()
    else:
        words, kinds = "a list", (list,)

    def a_list(value: Any) -> Any:
        fits = isinstance(value, kinds)
        if not fits:
            raise _fail(words)
        if mode == "option" and len(value) > MAX_OPTION_ITEMS:
            raise _fail(words, message=f"expected at most {MAX_OPTION_ITEMS} items, got {len(value):,}", near=True)
        if not variadic and args and len(value) != len(args):
            raise _fail(f"a list of {len(args)} values")
        return value

    if origin is tuple:
        fixed = core_schema.tuple_schema([n.schema for n in items], variadic_item_index=0 if variadic else None)
        return _before(a_list, fixed, words)
    return _before(a_list, core_schema.list_schema(items[0].schema), words)


def _mapping(origin: Any, args: tuple[Any, ...], mode: Mode, words: str | None) -> _Node:
    key_hint, value_hint = args if len(args) == 2 else (*args[:1], Any) if args else (Any, Any)  # Counter[str]: one
    values = _node(value_hint, mode, None).schema
    if mode == "option":
        words = words or "a mapping of names to values"

        def names(value: Any) -> Any:
            if not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
                raise _fail(words)
            return value

        return _before(names, core_schema.dict_schema(core_schema.any_schema(), values), words)

    keys = _function(_int_key, "an integer key") if key_hint is int else _node(key_hint, mode, None)

    def an_object(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _fail("an object")
        return value

    checked: CoreSchema = core_schema.dict_schema(keys.schema, values)
    if origin not in (dict, Mapping):
        checked = core_schema.no_info_after_validator_function(origin, checked)
    return _before(an_object, checked, "an object")


def _int_key(key: Any) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        raise _fail("an integer key") from None


# ---------------------------------------------------------------- a stored record


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a record's fields are in its JSON object: ``keys`` (field -> key), ``nested`` (field -> the layout of a
    flattened record), ``merged`` (the :data:`MERGED` field), ``known`` (every key its fields take)."""

    kind: type
    keys: Mapping[str, str]
    nested: Mapping[str, _Layout]
    merged: str | None
    known: frozenset[str]

    def build(self, body: dict[str, Any]) -> Any:
        values: dict[str, Any] = {name: body[key] for name, key in self.keys.items() if key in body}
        values |= {name: layout.build(body) for name, layout in self.nested.items()}
        if self.merged is not None:
            values[self.merged] = {k: v for k, v in body.items() if k not in self.known}
        try:
            return self.kind(**values)
        except ValueError as exc:  # the record's own check (its __post_init__), said as it says it
            raise _Escaped(exc) from exc


def _layout(kind: type, key: Callable[[str], str], fields: dict[str, Any]) -> _Layout:
    """``kind``'s layout; adds each field's ``(schema, required)`` to ``fields`` by its key."""
    hints = typing.get_type_hints(kind)
    keys: dict[str, str] = {}
    nested: dict[str, _Layout] = {}
    merged, known = None, set(ENVELOPE)
    for f in dataclasses.fields(kind):
        hook = f.metadata.get(JSON)
        if isinstance(hook, Flatten):
            inner = _layout(hints[f.name], _renamed(key, hook), fields)
            if f.init:
                nested[f.name] = inner
            known |= inner.known
            continue
        known.add(key(f.name))
        if not f.init or hook is Hook.SKIP:
            continue
        if hook is Hook.MERGED:
            merged = f.name
            continue
        keys[f.name] = key(f.name)
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields[key(f.name)] = (_node(hints[f.name], "record", None).schema, no_default)
    return _Layout(kind, keys, nested, merged, frozenset(known))


def _renamed(key: Callable[[str], str], hook: Flatten) -> Callable[[str], str]:
    return lambda name: key(hook.key(name))


_COMPILING: set[type] = set()  # records being compiled: one that holds itself is checked where it is met


def _record(kind: type) -> _Node:
    if kind in _COMPILING:
        return _function(lambda value: _checked_later(kind, value), "an object")
    _COMPILING.add(kind)
    try:
        fields: dict[str, Any] = {}
        layout = _layout(kind, str, fields)
    finally:
        _COMPILING.discard(kind)
    empty = not dataclasses.fields(kind)

    def an_object(body: Any) -> Any:
        if not isinstance(body, dict):
            raise _fail("an object")
        if body and empty:  # a record without fields stands for {} (a union's last arm takes in nothing else)
            raise _fail("an empty object")
        return body

    by_key = {k: core_schema.typed_dict_field(s, required=r) for k, (s, r) in fields.items()}
    body = core_schema.typed_dict_schema(by_key, extra_behavior="ignore" if layout.merged is None else "allow")

    def build(checked: dict[str, Any]) -> Any:
        return layout.build(checked)

    return _before(an_object, core_schema.no_info_after_validator_function(build, body), "an object")


def _checked_later(kind: type, value: Any) -> Any:
    out, error = _first_error(_node(kind, "record", None), value)  # compiled by now
    if error is not None:
        raise _lifted(error)
    return out


# ---------------------------------------------------------------- one value


def _leaf(hint: Any, origin: Any, args: tuple[Any, ...], mode: Mode, words: str | None) -> _Node:
    if origin is Literal:
        spelled = [repr(a) if mode == "record" else str(getattr(a, "value", a)) for a in args]
        said = words or "one of " + ", ".join(spelled)
        exact = mode == "option"  # a user's 1 is not True
        return _function(lambda v: _literal(v, args, exact, said), said)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum(hint, mode, words)
    if mode == "option" and isinstance(hint, type) and dataclasses.is_dataclass(hint):
        said = words or f"a {hint.__name__}"
        return _function(lambda v: _instance(v, hint, said), said)  # a nested config checked itself when made
    rules = _OPTION if mode == "option" else _RECORD
    if hint in rules:
        rule, own = rules[hint]
        said = words or own
        if not callable(rule):  # pydantic's own check, in our words
            return _Node(_in_words(rule, said), said)
        return _function(lambda v: _scalar(rule, v, said, words is not None), said)
    if mode == "option":
        raise TypeError(f"core.validation: no rule for the type hint {hint!r}")
    return _Node(core_schema.any_schema(), "a value")  # a type the codec does not check (numpy arrays, callables)


def _in_words(schema: CoreSchema, words: str) -> CoreSchema:
    """``schema``'s errors said as ``expected {words}``."""
    context = {"expected": words}
    return core_schema.custom_error_schema(
        schema, "expected", custom_error_message="expected {expected}", custom_error_context=context
    )


def _literal(value: Any, args: tuple[Any, ...], exact: bool, words: str) -> Any:
    if any(value == a and (not exact or type(value) is type(a)) for a in args):
        return value
    raise _fail(words)


def _enum(kind: type[enum.Enum], mode: Mode, words: str | None) -> _Node:
    if mode == "record":
        said = "one of " + ", ".join(repr(m.value) for m in kind)

        def by_value(value: Any) -> Any:
            try:
                return kind(value)
            except ValueError:
                raise _fail(said) from None

        return _function(by_value, said)
    said = words or (_SINGULAR[str] if issubclass(kind, str) else "one of " + ", ".join(str(m.value) for m in kind))
    return _function(lambda v: _instance(v, kind, said), said)


def _instance(value: Any, kind: type, words: str) -> Any:
    if isinstance(value, kind):
        return value
    raise _fail(words)


def _scalar(convert: Callable[[Any], Any], value: Any, words: str, given: bool) -> Any:
    """``convert(value)``; its :class:`_Refused` as one error, in its own words unless ``words`` were ``given`` (an
    ``Annotated`` hint's, which say its bounds)."""
    try:
        return convert(value)
    except _Refused as exc:
        raise _fail(words if given or exc.words is None else exc.words) from None


class _Refused(Exception):
    def __init__(self, words: str | None = None) -> None:
        self.words = words


def _option_int(value: Any) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise _Refused
    if not -_INT64 <= int(value) < _INT64:
        raise _Refused("an integer of at most 64 bits")
    return int(value)


def _option_float(value: Any) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and _finite(value):
        return float(value)
    raise _Refused


def _option_path(value: Any) -> Path:
    if isinstance(value, os.PathLike) or (isinstance(value, str) and value.strip() != "" and "\x00" not in value):
        return Path(value)
    raise _Refused


def _record_float(value: Any) -> float:
    if value is None:  # strict JSON writers store a non-finite float as null
        return math.nan
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _Refused
    try:
        return float(value)
    except OverflowError:  # an integer past float's range
        raise _Refused("a number within float's range") from None


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


_STRICT = {bool: core_schema.bool_schema(strict=True), str: core_schema.str_schema(strict=True)}
_OPTION: dict[Any, tuple[CoreSchema | Callable[[Any], Any], str]] = {
    bool: (_STRICT[bool], "true or false"),
    int: (_option_int, "an integer"),
    float: (_option_float, "a finite number"),
    str: (_STRICT[str], "a string"),
    Path: (_option_path, "a path"),
    Any: (core_schema.any_schema(), "a value"),
}
_RECORD: dict[Any, tuple[CoreSchema | Callable[[Any], Any], str]] = {
    bool: (_STRICT[bool], "true or false"),
    int: (core_schema.int_schema(strict=True), "an integer"),
    float: (_record_float, "a number"),
    str: (_STRICT[str], "text"),
    Path: (core_schema.no_info_after_validator_function(Path, _STRICT[str]), "text"),
    Any: (core_schema.any_schema(), "a value"),
    object: (core_schema.any_schema(), "a value"),
}
_SINGULAR = {hint: words for hint, (_, words) in _OPTION.items()}
_PLURAL = {bool: "booleans", int: "integers", float: "numbers", str: "strings", Path: "paths"}


def _base(hint: Any) -> Any:
    hint = get_args(hint)[0] if get_origin(hint) is Annotated else hint
    return str if isinstance(hint, type) and issubclass(hint, str) else hint


def _number(x: float | None) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def _shown(value: Any) -> str:
    return shown(_plain(value), limit=200)
