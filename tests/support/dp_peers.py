"""Entry point for the hostile data-parallel tests: the ranks of a run join, then misbehave as ``argv[1]`` says.

- ``die``: rank 1 dies (``os._exit``, like ``kill -9``) once joined; the others work on, in Python.
- ``wait``: every rank prints ``JOINED <rank>`` and works on until stopped (for Ctrl-C).

Errors end as the ``probe`` command ends them: one ``error:`` / ``interrupted:`` line, exit 2 / 130.
"""

from __future__ import annotations

import os
import sys
import time

from core.errors import Interrupted, ProbeError
from probes.distributed import joined, reported_once, world_from_env


def _work_until_stopped(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)


def run(behaviour: str) -> None:
    world = world_from_env()
    with reported_once(world), joined(world):
        try:
            if behaviour == "die":
                world.barrier()  # every rank's connections are up: a death during gloo's own setup is another case
                if world.rank == 1:
                    os._exit(9)
            print(f"JOINED {world.rank}", flush=True)
            _work_until_stopped(60)
            world.gather(world.rank)
        except KeyboardInterrupt:
            raise Interrupted("stopped; rerun the same command to resume") from None


if __name__ == "__main__":
    try:
        run(sys.argv[1])
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
