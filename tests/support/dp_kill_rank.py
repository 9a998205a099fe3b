"""Entry point for the data-parallel test: ``probe`` in which rank 1 dies right after its first shard.

``os._exit`` runs no cleanup (no ``finally``, no atexit), like ``kill -9``; torchrun then
tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys

import probes.recording as recording

if os.environ.get("RANK") == "1":
    _write_shard = recording.write_shard

    def _write_then_die(*args, **kwargs):  # type: ignore[no-untyped-def]
        path = _write_shard(*args, **kwargs)
        os._exit(9)
        return path

    recording.write_shard = _write_then_die

from probe_cli.main import main  # noqa: E402

main(sys.argv[1:])
