"""``--config FILE`` for the commands whose options are all their settings (synthesize, validate, judge, models).

``probe run``, ``analyze``, ``intervene`` and ``train`` read their file into their config
dataclass (:func:`core.config_file.read_config_file`). The other commands have no such
object: their options *are* the settings, so their file names options by long name
(``max-retries`` or ``max_retries``). The file becomes the command's ``default_map``, which
the option parser consults for every option not given on the command line: flags win,
each value from the file is converted and range-checked exactly as the same flag would
be, and a required option may come from the file. The file is read by an eager callback,
so it is in place before any other option is processed.

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
from typing import Any

import typer

from core.config_file import read_config_mapping
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
    """Convert ``value`` as the flag's own value would be, so a bad one names the file (the parser checks it again)."""
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is None:
        return
    try:
        runtime().coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        raise ProbeError(f"--config {path}: {key.replace('_', '-')}: {exc.message}, got {value!r}") from None
