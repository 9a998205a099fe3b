"""Seconds a stage spends in each kind of work (greedy generation, teacher-forced passes, the coherence guard), for the
run's own record.

The engines mark their work with :func:`timed` (:data:`GENERATION`, :data:`FORCED`, :data:`COHERENCE`); whoever runs
a stage opens :func:`kept` around it and gets each kind's seconds, which ``probe replicate`` writes into its record
beside the stage's own time (:mod:`study.floors` sets each beside its weight-FLOP floor). Only the outermost marked
call counts, so that work marked inside other marked work is not counted twice; outside :func:`kept` a mark costs one
check.
Seconds spent in other processes (``--nproc``) are not seen.

Example:
    >>> @timed(GENERATION)
    ... def generate() -> str:
    ...     return "Ahoy."
    >>> with kept() as seconds:
    ...     _ = generate()
    >>> list(seconds), seconds[GENERATION] >= 0.0
    (['generation'], True)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

GENERATION = "generation"  # greedy decoding, the prompt pass included
FORCED = "teacher-forced"  # fixed sequences through a model (the continuous outcomes)
COHERENCE = "coherence"  # the coherence guard's rows through its judge (interventions.coherence)

P = ParamSpec("P")
R = TypeVar("R")

_listening: list[dict[str, float]] = []  # the open kept() blocks, innermost last
_inside: list[str] = []  # the marked calls running now, outermost first


@contextmanager
def kept() -> Iterator[dict[str, float]]:
    """Seconds per kind of the marked work that runs inside the block."""
    seconds: dict[str, float] = {}
    _listening.append(seconds)
    try:
        yield seconds
    finally:
        _listening.remove(seconds)


def timed(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a function's calls as ``kind`` of work (module doc)."""

    def mark(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            if not _listening or _inside:
                return function(*args, **kwargs)
            _inside.append(kind)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                _inside.pop()
                for seconds in _listening:
                    seconds[kind] = seconds.get(kind, 0.0) + spent

        return run

    return mark
