"""A command's options made from its config dataclass (one per setting, help and default said by the field), and
every command's ``--config FILE``.

:func:`config_options` decorates a command. In place of its parameter whose default is :data:`FROM_CONFIG`, Typer
sees one option per setting of the config (its flat view, :func:`core.config_fields.flat_fields`, so a nested
config's fields are options too) and ``--config FILE``; the command receives what was given in that parameter, as
one :class:`ConfigFlags`, whose :meth:`~ConfigFlags.build` applies the one precedence order, field default <
``--config FILE`` < flag (:func:`core.config_file.config_from`).

``--config FILE`` is every command's one config file (a command without a config dataclass takes
``@config_options()``). Its keys are the settings, by field name or by their flag's or an alias's long name
(``retries``, ``max-retries``; :func:`core.config_file.config_keys`), and the command's own options by long name
(``json``, ``out``). It is read first, by an eager callback: each setting is checked by its hint
(:func:`core.config_file.read_config`); each of the command's own options is checked by its type and bounds and
becomes the option's default (Click's ``default_map``), so a flag wins and a required option may come from the file.
A bad value or an unknown key is one line naming the file and the key.

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
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, cast, get_args, get_origin

import typer

from core.config_fields import MISSING, FlatField, flag_type, flat_fields
from core.config_file import OptionError, Range, config_from, read_config, typed
from core.errors import ProbeError

Command = TypeVar("Command", bound=Callable[..., Any])
_PLACE = inspect.Parameter.POSITIONAL_OR_KEYWORD
CONFIG_FLAG = "--config"
_CONFIG_PARAMETER = "config_file"


class _FromConfig:
    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG: Any = _FromConfig()  # the default that marks the parameter the config's options replace


@dataclass(frozen=True)
class ConfigFlags:
    """What the command line gave for config class ``cls``: ``values`` by setting (None: not given), the
    ``--config`` file and the settings it gave (``from_file``, read and checked), and the settings that must be
    given (``required``)."""

    cls: type
    values: dict[str, Any]
    config_file: Path | None = None
    required: tuple[str, ...] = ()
    from_file: dict[str, Any] = field(default_factory=dict)

    def given(self, name: str) -> Any:
        """Setting ``name`` as the flag gave it, else as the file did; None: neither."""
        flag = self.values.get(name)
        return flag if flag is not None else self.from_file.get(name)

    def build(self, *, merge: Iterable[str] = (), **values: Any) -> Any:
        """The config: its field defaults, then the file, then the flags and ``values`` (None: not given)."""
        flags = {**self.values, **values}
        where = CONFIG_FLAG if self.config_file is None else f"{CONFIG_FLAG} {self.config_file}"
        return config_from(self.cls, self.from_file, flags, where=where, merge=merge, required=self.required)


def config_options(
    cls: type | None = None, *, exclude: Iterable[str] = (), required: Iterable[str] = ()
) -> Callable[[Command], Command]:
    """Decorator: the command takes ``--config FILE`` and, where its :data:`FROM_CONFIG` parameter is, one option per
    setting of ``cls`` with a flag (but those in ``exclude``); that parameter receives them as :class:`ConfigFlags`.
    Without ``cls``, the command has only its own options, and ``--config`` gives them.

    ``required``: settings the command needs even though the field has a default (no default is shown for them).
    A nested config's help lines are led by its ``help_prefix`` (:func:`core.config_fields.nested`).
    """
    skipped, needed = set(exclude), tuple(required)
    fields = [] if cls is None else [f for f in flat_fields(cls).values() if f.flag and f.name not in skipped]

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        target = next((p.name for p in params if p.default is FROM_CONFIG), None)
        clash = set(signature.parameters) & {f.name for f in fields}
        if clash:
            raise TypeError(f"{command.__name__}: parameters {sorted(clash)} are settings of its config too")
        if (target is None) != (cls is None):
            raise TypeError(f"{command.__name__}: a {FROM_CONFIG} parameter takes a config class, and only it")
        made = [_parameter(f, f.name in needed) for f in fields]
        made.append(_config_parameter(cls, {f.name for f in fields}))

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {f.name: _value(f, kwargs.pop(f.name)) for f in fields}
            read: _FileSettings | None = kwargs.pop(_CONFIG_PARAMETER)
            if cls is None or target is None:
                return command(**kwargs)
            path, from_file = (read.path, read.settings) if read is not None else (None, {})
            return command(**kwargs, **{target: ConfigFlags(cls, values, path, needed, from_file)})

        at = [p.name for p in params].index(target) if target is not None else len(params)
        new = signature.replace(parameters=[*params[:at], *made, *params[at + 1 :]])
        setattr(run, "__signature__", new)  # noqa: B010 - a function's type does not declare __signature__
        return cast(Command, run)

    return decorate


def help_text(f: FlatField, required: bool = False) -> str:
    """The option's help: the field's, then its default ("Default: 20.") and its bounds ("Range: [1, 1000]."), said
    from the field."""
    shown = None if required else shown_default(f)
    text = f"{f.help} Default: {shown}." if shown is not None else f.help
    bounds = bounds_of(f.hint)
    return f"{text} {said_bounds(bounds)}" if bounds is not None else text


def bounds_of(hint: Any) -> Range | None:
    """The :class:`Range` a number hint carries (``Annotated[int, Range(1, 9)] | None`` -> ``Range(1, 9)``)."""
    if get_origin(hint) is Annotated:
        marks = [m for m in get_args(hint)[1:] if isinstance(m, Range)]
        return marks[0] if marks else bounds_of(get_args(hint)[0])
    if get_origin(hint) in (Union, types.UnionType):
        return next((b for b in map(bounds_of, get_args(hint)) if b is not None), None)
    return None


def said_bounds(bounds: Range) -> str:
    """How a help line states an option's bounds: ``Range: [1, 1000].``, ``Range: > 0.``"""
    return f"Range: {str(bounds).removeprefix('in ')}."


def count_option(default: int | None, flag: str, help: str, bounds: Range) -> Any:
    """A command's own integer option bounded by ``bounds``, said in its help; a value outside is one ``error:`` line
    naming the flag (or the ``--config`` file and key), as a config's setting is."""
    hint = Annotated[int, bounds]

    def check(param: typer.CallbackParam, value: int | None) -> int | None:  # typer passes what it declares
        if value is not None:
            try:
                typed(value, hint, str(param.name))
            except OptionError as exc:
                raise exc.at(flag) from None
        return value

    check.bounds = bounds  # type: ignore[attr-defined]  # read by _hint, for a --config file's value
    return typer.Option(default, flag, help=f"{help} {said_bounds(bounds)}", callback=check)


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


def _parameter(f: FlatField, required: bool) -> inspect.Parameter:
    kind = flag_type(f)
    flags = [str(f.flag)]
    if kind is bool and not f.cli.get("switch"):
        flags = [f"{f.flag}/{f.cli.get('off_flag', '--no-' + str(f.flag)[2:])}"]
    info = typer.Option(None, *flags, *f.aliases, help=help_text(f, required), metavar=f.cli.get("metavar"))
    return inspect.Parameter(f.name, _PLACE, default=info, annotation=kind | None)


@dataclass(frozen=True)
class _FileSettings:
    path: Path
    settings: dict[str, Any]


@dataclass
class _NoSettings:
    """The config of a command without one."""


def _config_parameter(cls: type | None, settings: set[str]) -> inspect.Parameter:
    """``--config FILE``, read first (an eager option): the settings of ``cls`` go to the command as
    :class:`ConfigFlags`; the command's own options (not ``settings``) take the file's values as their defaults, so a
    flag wins and a required one may come from the file."""
    own = "" if cls is None else f" or {cls.__name__} field name"
    said = f"JSON or YAML file of this command's options by long name{own} (flags override it)."

    def read(ctx: typer.Context, path: Path | None) -> _FileSettings | None:  # typer passes what it declares
        if path is None or ctx.resilient_parsing:
            return None
        options = _own_options(ctx, {_CONFIG_PARAMETER, *settings})
        from_file, given = read_config(path, cls or _NoSettings, options, CONFIG_FLAG)
        params = {p.name: p for p in ctx.command.params}
        defaults = {}
        for key, value in given.items():
            _check(ctx, params[options[key]], key, value, path)
            defaults[options[key]] = value
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        return _FileSettings(path, from_file)

    info = typer.Option(None, CONFIG_FLAG, help=said, is_eager=True, callback=read)
    return inspect.Parameter(_CONFIG_PARAMETER, _PLACE, default=info, annotation=Path | None)


def _own_options(ctx: typer.Context, exclude: set[str]) -> dict[str, str]:
    """The command's own options by each long name (``verdicts_out``, ``plots``), to their parameter name."""
    names: dict[str, str] = {}
    for param in ctx.command.params:
        if getattr(param, "param_type_name", None) != "option" or param.name in exclude:
            continue
        for opt in param.opts:  # not secondary_opts: ``plots: false`` says what ``--no-plots`` does
            if opt.startswith("--"):
                names[opt[2:].replace("-", "_")] = str(param.name)
    return names


def _check(ctx: typer.Context, param: Any, key: str, value: Any, path: Path) -> None:
    """Type ``value`` by the option's annotation and bounds, then convert it as the flag's own value would be,
    so a bad one names the file (the parser converts it again)."""
    where = f"{CONFIG_FLAG} {path}: {key}"
    try:
        typed(value, _hint(param), key)
    except OptionError as exc:
        raise exc.at(where) from None
    try:
        param.get_runtime_param().coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        raise ProbeError(f"{where}: {exc.message}, got {value!r}") from None


def _hint(param: Any) -> Any:
    """The option's Python type, with its ``min``/``max`` as a :class:`Range` and ``list[...]`` when it repeats."""
    hint = param.type_descriptor.annotation
    if hint not in (bool, int, float, str, Path):
        return Any  # an enum or a custom type: the conversion is the check
    bounds = getattr(param.callback, "bounds", None)  # a count_option
    if hint in (int, float) and (bounds is not None or param.min is not None or param.max is not None):
        hint = Annotated[hint, bounds or Range(param.min, param.max)]
    hint = list[hint] if param.multiple else hint  # type: ignore[valid-type]  # a hint built at run time, for typer
    return hint | None if param.default is None and not param.required else hint  # null: as if not given


def _value(f: FlatField, value: Any) -> Any:
    """The flag's value as the config takes it, checked by the field's hint at once (so a bad one stops the command
    before its work, as the config would); None when not given (an empty repeat, a lone switch left off)."""
    if value is None or value == [] or (value is False and f.cli.get("switch")):
        return None
    value = f.cli["from_flag"](value) if "from_flag" in f.cli else value
    try:
        typed(value, f.hint, f.name)
    except OptionError as exc:
        raise exc.at(f.flag) from None
    return value


def _said(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)
