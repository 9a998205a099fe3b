"""Entry point for the data-parallel test: ``probe`` in which rank 1 dies right after its first shard.

``os._exit`` runs no cleanup (no ``finally``, no atexit), like ``kill -9``; torchrun then
tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys

import probes.recording as recording
from probe_cli.main import main


def _die_after_first_shard() -> None:
    write_shard = recording.write_shard

    def write_then_die(*args, **kwargs):
        write_shard(*args, **kwargs)
        os._exit(9)

    recording.write_shard = write_then_die


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        _die_after_first_shard()
    main(sys.argv[1:])
