"""Where the toolkit keeps what it builds: ``$PROBE_HOME``, default ``~/.cache/rolemrc-probe``.

One directory holds the embedded default pair (data, tiny base, SFT and DPO models), so
every command and notebook finds the same models without being told where they are,
and a user can move or wipe the cache by setting one variable.

Example:
    >>> import os; saved = os.environ.get("PROBE_HOME"); os.environ["PROBE_HOME"] = "/tmp/probe-home"
    >>> str(probe_home())
    '/tmp/probe-home'
    >>> _ = os.environ.pop("PROBE_HOME") if saved is None else os.environ.update(PROBE_HOME=saved)
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "PROBE_HOME"


def probe_home() -> Path:
    """The cache root (not created here): ``$PROBE_HOME`` if set and non-empty, else ``~/.cache/rolemrc-probe``."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "rolemrc-probe"
