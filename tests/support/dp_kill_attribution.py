"""Entry point for the data-parallel attribution test: ``probe`` in which rank 1 dies right after its first batch.

``os._exit`` runs no cleanup (no ``finally``, no atexit), like ``kill -9``; torchrun then
tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys

import probes.attribution as attribution
from probe_cli.main import main


def _die_after_first_batch() -> None:
    write_batch = attribution._write_batch

    def write_then_die(*args, **kwargs):
        write_batch(*args, **kwargs)
        os._exit(9)

    attribution._write_batch = write_then_die


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        _die_after_first_batch()
    main(sys.argv[1:])
