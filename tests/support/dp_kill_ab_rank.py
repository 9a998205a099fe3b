"""Entry point for the data-parallel A/B test: ``probe`` in which rank 1 dies right after keeping its first batch.

``os._exit`` runs no cleanup (no ``finally``, no atexit), like ``kill -9``; torchrun then
tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from interventions.arms import ArmStore
from probe_cli.main import main


def _die_after_first_batch() -> None:
    put_body = ArmStore.put_body

    def put_then_die(self: ArmStore, name: str, body: dict[str, Any]) -> None:
        put_body(self, name, body)
        if name.startswith("shared "):
            os._exit(9)

    ArmStore.put_body = put_then_die  # type: ignore[method-assign]


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        _die_after_first_batch()
    main(sys.argv[1:])
