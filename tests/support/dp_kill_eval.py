"""Entry point for the data-parallel ``probe models eval`` test: rank 1 dies as soon as its first batch is kept.

A rank decodes its batches of one model in one call, their decode steps together, and keeps each batch in the journal
as its last row ends; dying there leaves that batch kept and the call's other batches not. ``os._exit`` runs no
cleanup, like ``kill -9``; torchrun then tears the other ranks down, as it does when a real rank is killed.
"""

from __future__ import annotations

import os
import sys

import training.evaluate as evaluate
from probe_cli.main import main


def _die_once_a_batch_is_kept() -> None:
    generate = evaluate.generate_unedited

    def generate_or_die(generator, parts, part_done):
        def kept_then_die(index, texts):
            part_done(index, texts)
            os._exit(9)

        return generate(generator, parts, kept_then_die)

    evaluate.generate_unedited = generate_or_die


if __name__ == "__main__":
    if os.environ.get("RANK") == "1":
        _die_once_a_batch_is_kept()
    main(sys.argv[1:])
