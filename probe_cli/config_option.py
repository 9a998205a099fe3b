"""``--config FILE`` keyed by long option name, for the commands whose files always were (judge, models, replicate,
explain, report, synthesize, validate).

``probe run``, ``analyze``, ``intervene``, ``train`` and ``lmeval`` read their file into their config
dataclass (:func:`core.config_file.read_config_file`), keyed by field name. The commands here name options by long
name (``max-retries`` or ``max_retries``, ``sft`` for ``--sft``), whether their options are typed out or made from
a config dataclass (:func:`probe_cli.options.config_options` with ``config_file=False``, so ``--sft`` of
:class:`training.eval_config.PairEvalConfig` is still the key ``sft``). The file becomes the command's
``default_map``, which the option parser consults for every option not given on the command line: flags win,
and a required option may come from the file. Each value from the file is checked by the
typed path every config file goes through (:func:`core.config_file.typed`: ``true``/``false``
for a switch, a JSON number for a number, the option's ``min``/``max`` as its bounds), then
converted exactly as the same flag would be. The file is read by an eager callback, so it is
in place before any other option is processed.

Example (a shell session):

    $ cat judge.yaml
    judge: llm
    base-url: http://127.0.0.1:8000/v1
    model: judge
    max-retries: 2
    $ probe judge --config judge.yaml --data test.jsonl --responses out.jsonl --judge both
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core.config_file import OptionError, Range, read_config_mapping, typed
from core.errors import ProbeError

HELP = "JSON or YAML file of this command's options by long name, e.g. max-retries: 2 (flags override it)."


def config_option() -> Any:
    """The ``--config`` option; give it an eager callback so the file is read first."""
    return typer.Option(None, "--config", help=HELP, is_eager=True, callback=_load_into_defaults)


def _long_names(ctx: typer.Context, exclude: str) -> dict[str, str]:
    """Each option's long names (``max_retries``, ``retries``, ``plots``, ``no_cache``) → its parameter name."""
    names: dict[str, str] = {}
    for param in ctx.command.params:
        if getattr(param, "param_type_name", None) != "option" or param.name == exclude:
            continue
        for opt in param.opts:  # not secondary_opts: ``plots: false`` says what ``--no-plots`` does
            if opt.startswith("--"):
                names[opt[2:].replace("-", "_")] = str(param.name)
    return names


def _load_into_defaults(ctx: typer.Context, param: Any, path: Path | None) -> Path | None:
    if path is None or ctx.resilient_parsing:
        return path
    names = _long_names(ctx, exclude=str(param.name))
    values = read_config_mapping(path, names)
    params = {p.name: p for p in ctx.command.params}
    defaults = {}
    for key, value in values.items():
        _check(ctx, params[names[key]], key, value, path)
        defaults[names[key]] = value
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


def _check(ctx: typer.Context, param: Any, key: str, value: Any, path: Path) -> None:
    """Type ``value`` by the option's annotation and bounds, then convert it as the flag's own value would be,
    so a bad one names the file (the parser checks it again)."""
    where = f"--config {path}: {key.replace('_', '-')}"
    try:
        typed(value, _hint(param), key)
    except OptionError as exc:
        raise exc.at(where) from None
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is None:
        return
    try:
        runtime().coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        raise ProbeError(f"{where}: {exc.message}, got {value!r}") from None


def _hint(param: Any) -> Any:
    """The option's Python type, with its ``min``/``max`` as a :class:`Range` and ``list[...]`` when it repeats."""
    hint = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if hint not in (bool, int, float, str, Path):
        return Any  # an enum or a custom type: the conversion below is the check
    if hint in (int, float) and (param.min is not None or param.max is not None):
        hint = Annotated[hint, Range(param.min, param.max)]
    hint = list[hint] if param.multiple else hint  # type: ignore[valid-type]  # a hint built at run time, for typer
    return hint | None if param.default is None and not param.required else hint  # null: as if not given
