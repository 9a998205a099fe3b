"""``--config FILE`` for every command: a JSON or YAML mapping of a config dataclass's fields.

Each stage has one validated config dataclass (``RecordConfig``, ``AnalysisConfig``,
``TrainConfig``...) whose field defaults are *the* defaults. A config file names some of
those fields; options given on the command line override it; what neither gives keeps the
dataclass default. So a scripted evaluation can keep its settings in one reviewed file
and vary one flag per call. Keys may use dashes or underscores (``batch-size`` or
``batch_size``); an unknown key is an error naming the file and the known keys, so a typo
never silently falls back to a default.

Example:
    >>> import dataclasses, json, tempfile, pathlib
    >>> @dataclasses.dataclass
    ... class Demo:
    ...     batch_size: int = 8
    ...     hooks: str = "mlp_out"
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.json"
    >>> _ = path.write_text(json.dumps({"batch-size": 4}))
    >>> merged_options(read_config_file(path, Demo), {"hooks": "attn_out", "batch_size": None})
    {'batch_size': 4, 'hooks': 'attn_out'}
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core.errors import DataError, ProbeError
from core.inputs import check_input_file, read_json


def read_config_file(path: str | os.PathLike[str], cls: type, flag: str = "--config") -> dict[str, Any]:
    """The file's mapping with keys as field names of ``cls``; one line naming the file for anything else."""
    return read_config_mapping(path, [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")], flag)


def read_config_mapping(path: str | os.PathLike[str], allowed: Iterable[str], flag: str = "--config") -> dict[str, Any]:
    """The file's mapping, keys with dashes turned to underscores; one line naming the file for a key not in ``allowed``."""
    p = Path(path)
    try:
        data = _read_yaml(p) if p.suffix.lower() in (".yaml", ".yml") else read_json(p, "config file (JSON or YAML)")
    except DataError as exc:
        raise ProbeError(f"{flag} {exc}") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{flag} {p}: expected a mapping of option names to values, got {type(data).__name__}")
    data = {str(key).replace("-", "_"): value for key, value in data.items()}
    known = set(allowed)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProbeError(f"{flag} {p}: unknown option(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    return data


def merged_options(from_file: dict[str, Any], from_flags: dict[str, Any]) -> dict[str, Any]:
    """File values, overridden by every flag that was given (not None); what neither gives is left to the dataclass."""
    return {**from_file, **{key: value for key, value in from_flags.items() if value is not None}}


def _read_yaml(path: Path) -> Any:
    import yaml

    check_input_file(path, "config file (JSON or YAML)")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(str(path), None, f"not UTF-8 text (byte {exc.object[exc.start]:#04x}); re-save the file as UTF-8") from None
    except OSError as exc:
        raise DataError(str(path), None, f"cannot read the config file ({exc.strerror or exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DataError(str(path), None, f"cannot parse ({str(exc).splitlines()[0]}); expected a JSON or YAML mapping") from None
