"""Typed options: ``--config FILE`` for every command, and the one check of a config dataclass's fields.

Each stage has one config dataclass (``RecordConfig``, ``AnalysisConfig``, ``SFTRunConfig``...)
whose field defaults are *the* defaults and whose type hints are *the* types. A field's hint
says everything a value must be: ``bool`` takes only ``true``/``false`` (never the string
``"false"``), ``int`` only an integer that fits 64 bits, ``float`` only a finite number (no
NaN or Infinity), ``Path`` a non-empty string, ``list[...]``/``tuple[..., ...]`` a list whose
items are checked in turn, ``X | Y`` either. Bounds ride in the hint too:
``Annotated[int, Range(1)]``, ``Annotated[float, Range(0, 1, low_open=True)]``, and
``Annotated[Path, DIRECTORY]`` for a directory that may not exist yet but must not be a file.
:func:`typed` applies a hint to a value (through :func:`core.validation.check`, the one check of values
against type hints, which stored records share); it is the only checker of options, used three ways:

* :func:`read_config` (and :func:`read_config_file`) checks each value of a config file against its field, so a
  bad one is ``--config FILE: key: expected ..., got ...`` before anything else runs;
* :func:`typed_config`, a class decorator, checks every field the same way first thing in the
  config's ``__post_init__``, for values from flags and library calls (``--batch-size: expected ...``);
* :func:`build_config` (:func:`config_from`) merges file and flags and builds the config; an :class:`OptionError`
  that ``__post_init__`` raises about a value the file gave (an unknown ``position``, say)
  is re-said as the file's key.

A config file is JSON or YAML, at most :data:`MAX_CONFIG_BYTES`; YAML aliases (``*name``)
are refused, so a kilobyte "billion laughs" file fails at once, and nesting is bounded
before the YAML parser sees it. A setting's key is its name, its flag's long name or an alias's
(``retries``, ``max-retries``), with dashes or underscores; an unknown key names the file and
the known keys, so a typo never silently falls back to a default.

Example:
    >>> import dataclasses, json, tempfile, pathlib
    >>> from typing import Annotated
    >>> @dataclasses.dataclass
    ... @typed_config
    ... class Demo:
    ...     batch_size: Annotated[int, Range(1)] = 8
    ...     hooks: str = "mlp_out"
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "demo.json"
    >>> _ = path.write_text(json.dumps({"batch-size": 4}))
    >>> build_config(Demo, path, {"hooks": "attn_out", "batch_size": None})
    Demo(batch_size=4, hooks='attn_out')
    >>> _ = path.write_text(json.dumps({"batch-size": "4"}))
    >>> build_config(Demo, path, {})
    Traceback (most recent call last):
    ...
    core.config_file.OptionError: --config .../demo.json: batch_size: expected an integer >= 1, got '4'
    >>> Demo(batch_size=0)
    Traceback (most recent call last):
    ...
    core.config_file.OptionError: --batch-size: expected an integer >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Iterable, Mapping
from functools import reduce
from pathlib import Path
from typing import Annotated, Any, get_type_hints  # noqa: F401  # Annotated: the module doc's example resolves here

from core.config_fields import (
    MISSING,
    FlatField,
    default_of,
    flag_of_field,
    flag_type,
    flat_aliases,
    flat_fields,
    flat_values,
)
from core.errors import DataError, ProbeError
from core.inputs import MAX_DEPTH, check_input_file, read_json, shown
from core.validation import DIRECTORY as DIRECTORY
from core.validation import Directory as Directory
from core.validation import Invalid, check, dotted
from core.validation import Range as Range
from core.validation import describe as describe

MAX_CONFIG_BYTES = 256 * 1024  # hand-written settings are a few hundred bytes; this also bounds the YAML parser's time
_FIELDS: dict[type, dict[str, tuple[Any, str | None]]] = {}  # fields_of, by class


MAX_COUNT = 1_000_000
"""The most of anything a user may ask for by number (rows, tokens, units, steps, a batch size): every count has a
stated bound, so a typo of three zeros is one line, not a run that never ends."""
POSITIVE = Range(1, MAX_COUNT)  # counts: batch sizes, steps, units
NON_NEGATIVE = Range(0)  # amounts: a threshold, a weight decay
NON_NEGATIVE_COUNT = Range(0, MAX_COUNT)  # counts where 0 means none
RANDOM_SETS = Range(0, 1000)  # placebo sets: each costs what the arm it matches does
RESAMPLES = Range(100, MAX_COUNT)  # bootstrap resamples
PERMUTATIONS = Range(1, 100_000)  # permutations of a permutation test
ABOVE_ZERO = Range(0, low_open=True)  # rates and scales: a learning rate, a temperature, DPO's beta
SEED = Range(0, 2**32 - 1)  # what numpy's legacy seeding (transformers.set_seed) takes


class OptionError(ProbeError):
    """One option's value is wrong: ``{where}: expected {expected}, got {value}``, or ``{where}: {message}``.

    ``key`` is the field, with ``[i]`` or ``.name`` for an item inside it (``layers[2]``). It is
    said at ``flag`` (default ``--key-with-dashes``; None: the bare key); :func:`typed_config`
    puts it at the field's real flag and :func:`build_config` at a config file's key.
    """

    def __init__(
        self, key: str, expected: str = "", value: Any = None, *, message: str = "", flag: str | None = ""
    ) -> None:
        self.key, self.field = key, re.split(r"[.\[]", key, maxsplit=1)[0]
        self.message = message or f"expected {expected}, got {_shown(value)}"
        self.flag = "--" + self.field.replace("_", "-") if flag == "" else flag
        self.near = False
        super().__init__(f"{self.key if self.flag is None else self.flag + key[len(self.field) :]}: {self.message}")

    def at(self, flag: str | None) -> OptionError:
        """The same error said at ``flag`` (e.g. ``--config FILE: key``)."""
        return OptionError(self.key, message=self.message, flag=flag)


def typed(value: Any, hint: Any, key: str) -> Any:
    """``value`` as the type ``hint`` says (a list for ``tuple[...]`` becomes a tuple), or :class:`OptionError` at
    ``key`` (:func:`core.validation.check`, by the rules for user input)."""
    try:
        return check(hint, value, "option")
    except Invalid as exc:
        where = dotted(exc.loc, key)
        raise (
            OptionError(where, message=exc.said) if exc.said else OptionError(where, exc.expected, exc.value)
        ) from None


def choice(
    key: str, value: Any, choices: Iterable[str], *, lenient: bool = False, aliases: Mapping[str, str] | None = None
) -> str:
    """``value`` if it is one of ``choices``, else :class:`OptionError` at ``key`` (``--key: expected one of a, b, got
    'c'``). ``lenient``: case, outer spaces and dashes do not matter (``Float-32`` is ``float_32``), and the result
    is the spelling in ``choices``; ``aliases`` maps a short name to its choice (``tl`` -> ``transformer_lens``)."""
    allowed = tuple(choices)
    name = value.strip().lower().replace("-", "_") if lenient and isinstance(value, str) else value
    name = (aliases or {}).get(name, name) if isinstance(name, str) else name
    if name not in allowed:
        raise OptionError(key, f"one of {', '.join(allowed)}", value)
    return name


def typed_config(cls: type) -> type:
    """Class decorator (below ``@dataclass``, so that ``__init__`` calls it): ``__post_init__`` first checks every
    field by its hint (:func:`check_fields`), then runs the class's own checks; an :class:`OptionError` from either is
    said at the field's flag (``metadata["flag"]``). Subclasses inherit it. The settings of a nested config
    (:func:`core.config_fields.nested`) read through as read-only attributes: ``config.do_sample`` is
    ``config.generation.do_sample``."""
    own = getattr(cls, "__post_init__", None)
    own = getattr(own, "__wrapped__", own)  # a subclass decorated again: its base's own checks, once

    def __post_init__(self: Any) -> None:
        try:
            check_fields(self)
            if own is not None:
                own(self)
        except OptionError as exc:
            if exc.field not in fields_of(type(self)):
                raise
            raise exc.at(flag_of(type(self), exc.field)) from None

    # setattr: neither a function nor a class declares these attributes to the type checker
    setattr(__post_init__, "__wrapped__", own)  # noqa: B010
    setattr(cls, "__post_init__", __post_init__)  # noqa: B010
    for name, path in flat_aliases(cls).items():  # a nested config's settings read by their flat names too
        setattr(cls, name, _read_through(path))
    return cls


def _read_through(path: tuple[str, ...]) -> property:
    return property(lambda config: reduce(getattr, path, config), doc=".".join(path))


def check_fields(config: Any) -> None:
    """Every field of the dataclass instance ``config`` against its hint; the first bad one raises
    :class:`OptionError`."""
    for name, (hint, _) in fields_of(type(config)).items():
        typed(getattr(config, name), hint, name)


def check_mapping(cls: type, values: dict[str, Any], key: str) -> dict[str, Any]:
    """``values`` typed by the fields of ``cls``: a nested config such as ``tiny_spec``; errors name ``key.field``."""
    fields = fields_of(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise OptionError(
            key, message=f"unknown field(s) {_names(unknown)}; expected some of {', '.join(sorted(fields))}"
        )
    return {name: typed(value, fields[name][0], f"{key}.{name}") for name, value in values.items()}


def fields_of(cls: type) -> dict[str, tuple[Any, str | None]]:
    """``{name: (hint, flag)}`` for the init fields of ``cls`` that a user sets (not ``_private``): with the
    dataclass defaults, all an option parser needs (type, bounds and flag name of each option)."""
    if cls not in _FIELDS:
        hints = get_type_hints(cls, include_extras=True)
        fields = [f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
        _FIELDS[cls] = {f.name: (hints[f.name], flag_of_field(f)) for f in fields}
    return _FIELDS[cls]


def flag_of(cls: type, name: str) -> str | None:
    """The command-line flag of field ``name``: its ``metadata["flag"]`` (None: it has none), else
    ``--name-with-dashes``."""
    return fields_of(cls)[name][1]


def config_keys(cls: type) -> dict[str, str]:
    """The keys a config file may give a setting of ``cls`` as, each to the setting's name
    (:func:`core.config_fields.flat_fields`): its name, its flag's long name and its aliases' long names, with
    underscores for dashes (``retries``, ``max_retries``); a setting's name wins over another's flag."""
    fields = flat_fields(cls)
    spelled = {
        opt[2:].replace("-", "_"): name
        for name, f in fields.items()
        for opt in (f.flag, *f.aliases)
        if opt is not None and opt.startswith("--")
    }
    return {**spelled, **{name: name for name in fields}}


def read_config(
    path: str | os.PathLike[str], cls: type, others: Collection[str] = (), flag: str = "--config"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's values: the settings of ``cls`` by name, each checked and converted (:func:`typed`), and the keys
    in ``others`` (a command's own options, which take their key before any setting) as the file gives them.

    A setting's key is any of :func:`config_keys`. Under its name a value is what the field's hint says; under its
    flag's name, for a flag that is parsed (``option(..., from_flag=...)``), it is the flag's text
    (``edit: scale,mean``). Anything else is one line naming the file and the key."""
    keys = {key: name for key, name in config_keys(cls).items() if key not in others}
    values = read_config_mapping(path, [*keys, *others], flag)
    fields = flat_fields(cls)
    settings: dict[str, Any] = {}
    seen: dict[str, str] = {}  # setting -> the key that gave it
    for key, value in values.items():
        if key in others:
            continue
        name = keys[key]
        if name in seen:
            raise ProbeError(f"{flag} {path}: {seen[name]} and {key} name the same setting; give one")
        seen[name] = key
        try:
            settings[name] = _from_file(fields[name], key, value)
        except OptionError as exc:
            raise exc.at(f"{flag} {path}: {exc.field}") from None
    return settings, {key: value for key, value in values.items() if key in others}


def read_config_file(path: str | os.PathLike[str], cls: type, flag: str = "--config") -> dict[str, Any]:
    """The file's values by setting (:func:`read_config`), for a file of ``cls``'s settings only."""
    return read_config(path, cls, (), flag)[0]


def _from_file(f: FlatField, key: str, value: Any) -> Any:
    if key == f.name or "from_flag" not in f.cli or value is None:
        return typed(value, f.hint, key)
    return f.cli["from_flag"](typed(value, flag_type(f), key))


def build_config(
    cls: type,
    path: str | os.PathLike[str] | None,
    flags: dict[str, Any],
    *,
    merge: Iterable[str] = (),
    required: Iterable[str] = (),
    flag: str = "--config",
) -> Any:
    """``cls`` from the file at ``path`` (if any) overridden by ``flags`` (None: not given), both by setting name
    (:func:`core.config_fields.flat_fields`): the one precedence, field default < file < flag
    (:func:`config_from`)."""
    from_file = read_config_file(path, cls, flag) if path is not None else {}
    where = flag if path is None else f"{flag} {path}"
    return config_from(cls, from_file, flags, where=where, merge=merge, required=required)


def config_from(
    cls: type,
    from_file: dict[str, Any],
    flags: dict[str, Any],
    *,
    where: str = "--config",
    merge: Iterable[str] = (),
    required: Iterable[str] = (),
) -> Any:
    """``cls`` from a file's settings (:func:`read_config`) overridden by ``flags`` (None: not given); ``where``
    names the file (``--config FILE``).

    A field named in ``merge`` (a mapping) takes the file's keys updated by the flag's. A field
    without a default, or named in ``required``, must come from one of the two. An
    :class:`OptionError` about a value that only the file gave is said at ``where`` and the key.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    for key in merge:
        if key in given and key in from_file:
            given[key] = {**from_file[key], **given[key]}
    options = {**from_file, **given}
    fields = flat_fields(cls)
    for name in [*(n for n, f in fields.items() if f.default is MISSING), *required]:
        if name not in options:
            raise ProbeError(f"missing option {fields[name].flag or name} (give it on the command line or in {where})")
    try:
        return from_settings(cls, options)
    except OptionError as exc:
        if exc.field in from_file and exc.field not in given:
            raise exc.at(f"{where}: {exc.field}") from None
        raise


def from_settings(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` from ``values`` by setting name: each nested config is its default with the values that name its
    fields, and an :class:`OptionError` inside it is said at the outer setting (``--judge-retries``)."""
    fields = flat_fields(cls)
    own = {key: value for key, value in values.items() if len(fields[key].path) == 1}
    inner: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if len(fields[key].path) > 1:
            inner.setdefault(fields[key].path[0], {})[key] = value
    for holder, given in inner.items():
        own[holder] = nested_config(cls, holder, given)
    return cls(**own)


def nested_config(cls: type, holder: str, given: dict[str, Any]) -> Any:
    """The config ``cls`` nests at field ``holder``: its default with the flat settings ``given``; an
    :class:`OptionError` inside it is said at the outer setting's name and flag."""
    outer = flat_fields(cls)
    default = default_of(next(f for f in dataclasses.fields(cls) if f.name == holder))
    inner = flat_fields(type(default))
    by_path = {f.path: name for name, f in inner.items()}
    values = {**flat_values(default), **{by_path[outer[key].path[1:]]: value for key, value in given.items()}}
    try:
        return from_settings(type(default), values)
    except OptionError as exc:
        path = (holder, *inner[exc.field].path) if exc.field in inner else None
        key = next((k for k, f in outer.items() if f.path == path), None)
        if key is None:  # a field the outer config does not expose: said as the nested config says it
            raise
        raise OptionError(key + exc.key[len(exc.field) :], message=exc.message, flag=outer[key].flag) from None


def read_config_mapping(path: str | os.PathLike[str], allowed: Iterable[str], flag: str = "--config") -> dict[str, Any]:
    """The file's mapping, keys with dashes turned to underscores; one line naming the file for a key not in
    ``allowed``."""
    p = Path(path)
    try:
        size = check_input_file(p, "config file (JSON or YAML)").stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise DataError(
                str(p), None, f"is {size:,} bytes; expected a config file of at most {MAX_CONFIG_BYTES:,} bytes"
            )
        data = _read_yaml(p) if p.suffix.lower() in (".yaml", ".yml") else read_json(p, "config file (JSON or YAML)")
    except DataError as exc:
        raise ProbeError(f"{flag} {exc}") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{flag} {p}: expected a mapping of option names to values, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for raw in data:
        key = str(raw).replace("-", "_")
        if key in out:
            raise ProbeError(f"{flag} {p}: {_shown(key)} is given twice (with dashes and with underscores)")
        out[key] = data[raw]
    known = set(allowed)
    unknown = sorted(set(out) - known)
    if unknown:
        raise ProbeError(
            f"{flag} {p}: unknown option(s) {_names(unknown)}; expected some of {', '.join(sorted(known))}"
        )
    return out


def _read_yaml(path: Path) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            str(path), None, f"not UTF-8 text (byte {exc.object[exc.start]:#04x}); re-save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise DataError(str(path), None, f"cannot read the config file ({exc.strerror or exc})") from None
    try:
        depth = 0
        # a flat pass first: the loaders recurse (libyaml's crashes) and share aliases
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise DataError(
                    str(path),
                    event.start_mark.line + 1,
                    "YAML aliases (*name) are not allowed in a config file; write the value out",
                )
            depth += isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)) - isinstance(
                event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)
            )
            if depth > MAX_DEPTH:
                raise DataError(
                    str(path),
                    event.start_mark.line + 1,
                    f"nested more than {MAX_DEPTH} levels deep; expected a mapping of options",
                )
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise DataError(
            str(path), None, f"cannot parse ({' '.join(str(exc).split())[:200]}); expected a JSON or YAML mapping"
        ) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise DataError(
            str(path), None, f"cannot read a value ({str(exc)[:120]}); expected values of ordinary size"
        ) from None


def _names(keys: list[str], shown_at_most: int = 8) -> str:
    """Keys for a one-line message: odd ones quoted (a newline stays on the line), at most a few."""
    names = ", ".join(k if k.isidentifier() else _shown(k) for k in keys[:shown_at_most])
    return names + (f" and {len(keys) - shown_at_most} more" if len(keys) > shown_at_most else "")


def _shown(value: Any) -> str:
    """The value as the user wrote it, cut to fit a line (long enough for a path)."""
    return shown(str(value) if isinstance(value, Path) else value, limit=200)
