"""A command's options made from a config dataclass: one option per setting, its help and default said by the field.

:func:`config_options` decorates a command. In place of its parameter whose default is :data:`FROM_CONFIG`, Typer
sees one option per setting of the config (its flat view, :func:`core.config_fields.flat_fields`, so a nested
config's fields are options too) and ``--config FILE``; the command receives what was given in that parameter, as
one :class:`ConfigFlags`, whose :meth:`~ConfigFlags.build` applies the one precedence order, field default <
``--config FILE`` < flag (:func:`core.config_file.build_config`).

Every generated option defaults to None, "not given", so an option left out never hides the file's value; its help
ends with the field's default ("Default: 20"), read from the field. A setting's option type comes from its hint: a
switch pair for ``bool``, a path for a hint that takes a ``Path``, else a string for one that takes a ``str``, else the
number type; the field's ``option(..., repeat=True)`` makes it a repeatable option and ``flag_type``/``from_flag``
give a flag that is parsed (``--dose 0,0.5``). The values are checked by the config itself, so a bad flag and a bad
file value get the same one-line error.

Example:
    @config_options(AnalysisConfig)
    def analyze(run_dir: Path = typer.Argument(...), settings: ConfigFlags = FROM_CONFIG) -> None:
        config = settings.build()
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar, Union, cast, get_args, get_origin

import typer

from core.config_fields import MISSING, FlatField, flat_fields
from core.config_file import Range, build_config

Command = TypeVar("Command", bound=Callable[..., Any])
_PLACE = inspect.Parameter.POSITIONAL_OR_KEYWORD


class _FromConfig:
    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG: Any = _FromConfig()  # the default that marks the parameter the config's options replace


@dataclass(frozen=True)
class ConfigFlags:
    """What the command line gave for config class ``cls``: ``values`` by setting (None: not given), the
    ``--config`` file, and the settings that must be given (``required``)."""

    cls: type
    values: dict[str, Any]
    config_file: Path | None = None
    required: tuple[str, ...] = ()

    def build(self, *, merge: Iterable[str] = (), **values: Any) -> Any:
        """The config: its field defaults, then the file, then the flags and ``values`` (None: not given)."""
        flags = {**self.values, **values}
        return build_config(self.cls, self.config_file, flags, merge=merge, required=self.required)


def config_options(
    cls: type,
    *,
    exclude: Iterable[str] = (),
    required: Iterable[str] = (),
    flag_bounds: bool = False,
    config_file: bool = True,
) -> Callable[[Command], Command]:
    """Decorator: the command takes one option per setting of ``cls`` with a flag (but those in ``exclude``) and,
    with ``config_file``, ``--config FILE``, where its :data:`FROM_CONFIG` parameter is; that parameter receives
    them as :class:`ConfigFlags`.

    ``required``: settings the command needs even though the field has a default (no default is shown for them).
    ``flag_bounds``: the option parser checks a number against its field's ``Range`` (for the commands whose
    ``--config`` fills the parser's defaults, :mod:`probe_cli.config_option`, which reads the bounds from there).
    A nested config's help lines are led by its ``help_prefix`` (:func:`core.config_fields.nested`).
    """
    skipped, needed = set(exclude), tuple(required)
    fields = [f for f in flat_fields(cls).values() if f.flag is not None and f.name not in skipped]

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        target = next(p.name for p in params if p.default is FROM_CONFIG)
        clash = set(signature.parameters) & {f.name for f in fields}
        if clash:
            raise TypeError(f"{command.__name__}: parameters {sorted(clash)} are settings of {cls.__name__} too")
        made = [_parameter(f, flag_bounds, f.name in needed) for f in fields]
        if config_file:
            made.append(_config_parameter(cls))

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {f.name: _value(f, kwargs.pop(f.name)) for f in fields}
            path = kwargs.pop("config_file") if config_file else None
            return command(**kwargs, **{target: ConfigFlags(cls, values, path, needed)})

        at = [p.name for p in params].index(target)
        setattr(run, "__signature__", signature.replace(parameters=[*params[:at], *made, *params[at + 1 :]]))
        return cast(Command, run)

    return decorate


def help_text(f: FlatField, required: bool = False) -> str:
    """The option's help: the field's, then its default ("Default: 20."), said from the field."""
    shown = None if required else shown_default(f)
    return f"{f.help} Default: {shown}." if shown is not None else f.help


def shown_default(f: FlatField) -> str | None:
    """The default as the help says it: None where there is none to say (no default, None, empty, a lone switch)."""
    value = f.cli.get("shown_default", f.default)
    if value is MISSING or value is None or value == "" or (isinstance(value, (list, tuple)) and not value):
        return None
    if isinstance(value, bool):
        return None if f.cli.get("switch") else ("on" if value else "off")
    if isinstance(value, (list, tuple)):
        return ", ".join(_said(v) for v in value)
    return _said(value)


def option_type(f: FlatField) -> Any:
    """The Python type Typer parses the flag into (before ``from_flag``)."""
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


def _parameter(f: FlatField, flag_bounds: bool, required: bool) -> inspect.Parameter:
    kind = option_type(f)
    flags = [str(f.flag)]
    if kind is bool and not f.cli.get("switch"):
        flags = [f"{f.flag}/{f.cli.get('off_flag', '--no-' + str(f.flag)[2:])}"]
    bounds = _bounds(f.hint) if flag_bounds else {}
    info = typer.Option(None, *flags, *f.aliases, help=help_text(f, required), metavar=f.cli.get("metavar"), **bounds)
    return inspect.Parameter(f.name, _PLACE, default=info, annotation=Optional[kind])


def _config_parameter(cls: type) -> inspect.Parameter:
    info = typer.Option(None, "--config", help=f"JSON or YAML file of {cls.__name__} fields (flags override it).")
    return inspect.Parameter("config_file", _PLACE, default=info, annotation=Optional[Path])


def _value(f: FlatField, value: Any) -> Any:
    """The flag's value as the config takes it; None when not given (an empty repeat, a lone switch left off)."""
    if value is None or value == [] or (value is False and f.cli.get("switch")):
        return None
    return f.cli["from_flag"](value) if "from_flag" in f.cli else value


def _members(hint: Any) -> list[Any]:
    """The types a hint takes, without ``Annotated`` marks and None: ``Annotated[int, Range(1)] | None`` -> [int]."""
    if get_origin(hint) is Annotated:
        return _members(get_args(hint)[0])
    if get_origin(hint) in (Union, types.UnionType):
        return [m for arg in get_args(hint) if arg is not type(None) for m in _members(arg)]
    return [hint]


def _bounds(hint: Any) -> dict[str, Any]:
    """Typer's ``min``/``max`` from the hint's :class:`Range` (closed bounds only, as the option parser checks them)."""
    marks = [m for arg in [hint, *get_args(hint)] if get_origin(arg) is Annotated for m in get_args(arg)[1:]]
    found = [m for m in marks if isinstance(m, Range)]
    if not found:
        return {}
    bounds = found[0]
    if bounds.low_open or bounds.high_open:
        raise TypeError(f"an open bound ({bounds}) cannot be checked by the option parser")
    return {key: value for key, value in (("min", bounds.low), ("max", bounds.high)) if value is not None}


def _said(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)
