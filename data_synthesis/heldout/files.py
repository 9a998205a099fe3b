"""Writing the held-out split, and the one place every command gets it from: :func:`heldout_test_file`.

Example:
    >>> import tempfile
    >>> path = write_heldout(tempfile.mkdtemp(), HeldoutConfig(seed=0, per_capability=6))
    >>> path.name, sum(1 for _ in path.open())
    ('heldout.jsonl', 27)
    >>> heldout_test_file(tempfile.mkdtemp()).name   # under $PROBE_HOME/heldout/seed-0/ by default
    'heldout.jsonl'
"""

from __future__ import annotations

import json
from pathlib import Path

from core.atomic import write_atomic
from core.errors import ProbeError
from core.home import probe_home
from core.records import to_json
from core.run_dir import DataDir
from data_synthesis.heldout.build import HeldoutConfig, build_heldout


def heldout_bytes(config: HeldoutConfig) -> bytes:
    """The split as JSONL bytes (the same for the same config)."""
    return "".join(json.dumps(to_json(row), ensure_ascii=False) + "\n" for row in build_heldout(config)).encode()


def write_heldout(out_dir: str | Path, config: HeldoutConfig) -> Path:
    """Write ``out_dir/heldout.jsonl`` atomically (a file with the same bytes is left untouched); its path."""
    path = Path(out_dir) / DataDir.HELDOUT
    body = heldout_bytes(config)
    try:
        if not (path.is_file() and path.read_bytes() == body):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, body)
    except OSError as exc:
        raise ProbeError(f"{path}: cannot write the held-out split ({exc.strerror or exc})") from None
    return path


def heldout_test_file(home: str | Path | None = None, config: HeldoutConfig | None = None) -> Path:
    """The held-out test file every command reads by default: ``<home>/heldout/seed-<seed>/heldout.jsonl`` (home:
    ``$PROBE_HOME``), written on first use in well under a second and rewritten if its bytes are not the split's."""
    config = config or HeldoutConfig()
    folder = Path(home) if home is not None else probe_home()
    suffix = "" if config.per_capability == HeldoutConfig.per_capability else f"-rows{config.per_capability}"
    return write_heldout(folder / "heldout" / f"seed-{config.seed}{suffix}", config)
