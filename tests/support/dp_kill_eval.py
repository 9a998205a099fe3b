"""Entry point for the data-parallel ``probe models eval`` test: rank 1 dies as it starts its second model's batches
(one generation call per model: its batches decode together).

Its first model's batches are then kept in the journal. ``os._exit`` runs no cleanup, like ``kill -9``; torchrun then
tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys

import training.evaluate as evaluate
from probe_cli.main import main


def _die_on_second_model() -> None:
    generate = evaluate.generate_unedited
    calls = []

    def generate_or_die(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os._exit(9)
        return generate(*args, **kwargs)

    evaluate.generate_unedited = generate_or_die


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        _die_on_second_model()
    main(sys.argv[1:])
