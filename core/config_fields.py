"""What a config field says about itself (its help and flag), and the flat view of a config that holds other configs.

A stage's config dataclass is the one source of its settings: a field's default is the default, its hint the type
and bounds (:mod:`core.config_file`), and :func:`option` adds the help line and, where it is not
``--name-with-dashes``, the flag. ``--config`` files and the command line (:mod:`probe_cli.options`) are made from
these, so a new setting is one new field.

A config may hold another, declared with :func:`nested` (``ABConfig.generation`` is a
:class:`core.decoding.GenerationConfig`). Files and flags see the inner fields flattened into the outer config's:
``max_new_tokens`` and ``--max-new-tokens``, or with a ``prefix``, ``judge_model`` and ``--judge-model``.
:func:`flat_fields` lists that view, :func:`flat_values` reads an instance through it (what a report stores), and the
flat names read through as attributes of the outer config (``config.do_sample``, see
:func:`core.config_file.typed_config`).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Decoding:
    ...     greedy: bool = option(True, "Take the likeliest token.")
    >>> @dataclass
    ... class Stage:
    ...     rows: int = option(8, "Rows to read.", flag="--limit")
    ...     decoding: object = nested(Decoding, prefix="gen_")
    >>> [(f.name, f.path, f.flag, f.default) for f in flat_fields(Stage).values()]
    [('rows', ('rows',), '--limit', 8), ('gen_greedy', ('decoding', 'greedy'), '--gen-greedy', True)]
    >>> flat_values(Stage())
    {'rows': 8, 'gen_greedy': True}
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterable, Mapping
from functools import reduce
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

MISSING: Any = dataclasses.MISSING
_DERIVED = "--name-with-dashes"


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    flag: str | None = _DERIVED,
    aliases: Iterable[str] = (),
    default_factory: Callable[[], Any] | Any = MISSING,
    **cli: Any,
) -> Any:
    """A dataclass field that describes its option: ``help`` (the default is added from the field), ``flag``
    (None: a ``--config`` key only) and ``aliases`` (``-c``, ``--lr``). ``cli`` holds what only the command line
    needs (:mod:`probe_cli.options`): ``metavar``; ``repeat`` (the flag may be given more than once); ``off_flag`` of
    a switch pair (default ``--no-NAME``), or ``switch=True`` for a lone on-switch; ``flag_type`` and ``from_flag``
    (the flag's text and how it becomes the value); ``shown_default`` (the default said in the help, where the
    field's own default, None, means "the library's")."""
    metadata = {"help": help, "aliases": tuple(aliases), **cli}
    if flag != _DERIVED:
        metadata["flag"] = flag
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Nesting:
    """How a nested config's fields join the outer config's: renamed with ``prefix``, only those in ``only`` (all if
    empty) and not those in ``skip``, their help led by ``help_prefix`` (or replaced by ``helps``' text for that
    setting, where the outer command's default is not the one the nested help says)."""

    cls: type
    prefix: str = ""
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    help_prefix: str = ""
    own_default: bool = False  # built by a default_factory of its own, not ``cls()``: its values are the defaults
    helps: tuple[tuple[str, str], ...] = ()  # (setting, help) pairs that replace the nested config's own help

    def takes(self, name: str) -> bool:
        return (not self.only or name in self.only) and name not in self.skip


def nested(
    cls: type,
    *,
    default_factory: Callable[[], Any] | None = None,
    prefix: str = "",
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    help_prefix: str = "",
    helps: Mapping[str, str] | None = None,
) -> Any:
    """A field holding a ``cls`` config (default: ``default_factory()``, else ``cls()``), flattened into the outer
    config's settings (:class:`Nesting`)."""
    nesting = Nesting(
        cls, prefix, tuple(only), tuple(skip), help_prefix, default_factory is not None, tuple((helps or {}).items())
    )
    return dataclasses.field(default_factory=default_factory or cls, metadata={"nested": nesting})


@dataclasses.dataclass(frozen=True)
class FlatField:
    """One setting as ``--config`` files and flags see it."""

    name: str  # the --config key
    path: tuple[str, ...]  # the attributes that lead from the outer config to the value
    hint: Any
    flag: str | None  # None: a --config key only
    aliases: tuple[str, ...]
    help: str
    default: Any  # what a config built with no values holds; MISSING: it must be given
    cli: Mapping[str, Any]  # the rest of the field's metadata (option)


_FLAT: dict[type, dict[str, FlatField]] = {}  # flat_fields, by class


def flag_of_field(f: dataclasses.Field[Any]) -> str | None:
    """A field's flag: its ``metadata["flag"]`` (None: it has none), else ``--name-with-dashes``."""
    flag: str | None = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
    return flag


def nesting_of(f: dataclasses.Field[Any]) -> Nesting | None:
    return f.metadata.get("nested")


def flat_fields(cls: type) -> dict[str, FlatField]:
    """The settings of config class ``cls`` by name: its own fields that a user sets (init, not ``_private``), with
    each nested config's in its place (module doc)."""
    if cls not in _FLAT:
        _FLAT[cls] = _flatten(cls)
    return _FLAT[cls]


def _flatten(cls: type) -> dict[str, FlatField]:
    hints = get_type_hints(cls, include_extras=True)
    out: dict[str, FlatField] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        nesting = nesting_of(f)
        own = [_own(f, hints[f.name])] if nesting is None else _flattened(f, nesting)
        for flat in own:
            if flat.name in out:
                raise TypeError(f"{cls.__name__}: two settings named {flat.name}; give the nested config a prefix")
            out[flat.name] = flat
    return out


def flat_values(config: Any) -> dict[str, Any]:
    """``config``'s settings by their flat names (:func:`flat_fields`)."""
    return {name: reduce(getattr, flat.path, config) for name, flat in flat_fields(type(config)).items()}


def flat_aliases(cls: type) -> dict[str, tuple[str, ...]]:
    """The flat names a config class declares through :func:`nested` fields, by path; read before the class is a
    dataclass (by :func:`core.config_file.typed_config`), from the raw ``field()`` objects in its body."""
    out: dict[str, tuple[str, ...]] = {}
    for attr, value in vars(cls).items():
        nesting = nesting_of(value) if isinstance(value, dataclasses.Field) else None
        if nesting is not None:
            for inner in flat_fields(nesting.cls).values():
                if nesting.takes(inner.name):
                    out[nesting.prefix + inner.name] = (attr, *inner.path)
    return out


def _own(f: dataclasses.Field[Any], hint: Any) -> FlatField:
    cli = {k: v for k, v in f.metadata.items() if k not in ("help", "flag", "aliases")}
    aliases, help_text = f.metadata.get("aliases", ()), f.metadata.get("help", "")
    return FlatField(f.name, (f.name,), hint, flag_of_field(f), aliases, help_text, default_of(f), cli)


def _flattened(f: dataclasses.Field[Any], nesting: Nesting) -> list[FlatField]:
    # cls()'s values are its fields' defaults: read them without building one (its checks may import torch)
    holder, inners = (default_of(f) if nesting.own_default else MISSING), flat_fields(nesting.cls)
    unknown = set(nesting.only + nesting.skip + tuple(name for name, _ in nesting.helps)) - set(inners)
    if unknown:
        raise TypeError(f"{f.name}: {nesting.cls.__name__} has no settings {sorted(unknown)}")
    out = []
    for inner in inners.values():
        if not nesting.takes(inner.name):
            continue
        name = nesting.prefix + inner.name
        renamed = bool(nesting.prefix) and inner.flag is not None
        out.append(
            dataclasses.replace(
                inner,
                name=name,
                path=(f.name, *inner.path),
                flag="--" + name.replace("_", "-") if renamed else inner.flag,
                aliases=() if renamed else inner.aliases,
                help=led(nesting.help_prefix, dict(nesting.helps).get(inner.name, inner.help)),
                default=inner.default if holder is MISSING else reduce(getattr, inner.path, holder),
            )
        )
    return out


def default_of(f: dataclasses.Field[Any]) -> Any:
    """What an instance built without a value for field ``f`` holds (MISSING: it must be given)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return MISSING if f.default_factory is dataclasses.MISSING else f.default_factory()


def led(prefix: str, text: str) -> str:
    """``text`` after ``prefix`` ("LLM judge: "), its first letter lowered unless its first word has more capitals
    (``NAME``, ``OpenAI``)."""
    first = text.split(" ", 1)[0]
    if not prefix or any(c.isupper() for c in first[1:]):
        return prefix + text
    return prefix + text[:1].lower() + text[1:]


def flag_type(f: FlatField) -> Any:
    """The Python type a setting's flag is parsed into, before ``from_flag`` (the command line's, and a config file's
    under the flag's name)."""
    if "flag_type" in f.cli:
        base = f.cli["flag_type"]
    else:
        members = _members(f.hint)
        base = next((t for t in (bool, Path, str) if t in members), None)
        if base is None and len(members) == 1:
            only = members[0]
            base = get_args(only)[0] if get_origin(only) is list and f.cli.get("repeat") else only
        if base not in (bool, Path, str, int, float):
            raise TypeError(f"{f.name}: no option type for {f.hint!r}; give option(..., flag_type=...)")
    return list[base] if f.cli.get("repeat") else base  # type: ignore[valid-type]  # a type chosen at run time


def _members(hint: Any) -> list[Any]:
    """The types a hint takes, without ``Annotated`` marks and None: ``Annotated[int, Range(1)] | None`` -> [int]."""
    if get_origin(hint) is Annotated:
        return _members(get_args(hint)[0])
    if get_origin(hint) in (Union, types.UnionType):
        return [m for arg in get_args(hint) if arg is not type(None) for m in _members(arg)]
    return [hint]
