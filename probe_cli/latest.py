"""A ``latest`` symbolic link next to each new run or report, for notebooks and shell users.

``runs/latest`` points at the newest run directory and ``RUN_DIR/interventions/latest`` at
the newest A/B report, so ``notebooks/*.ipynb`` open something without being told where.
An existing file or directory called ``latest`` is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path


def point_latest(target: Path) -> Path | None:
    """Make ``target.parent / "latest"`` a relative link to ``target``; returns the link (None if not made)."""
    link = target.parent / "latest"
    if link.exists() and not link.is_symlink():
        return None
    staging = target.parent / f".latest.{os.getpid()}"
    try:
        staging.unlink(missing_ok=True)
        staging.symlink_to(target.name, target_is_directory=True)
        os.replace(staging, link)
    except OSError:
        staging.unlink(missing_ok=True)
        return None
    return link
