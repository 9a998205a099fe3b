"""Progress of a long stage, readable on a terminal and in a log file alike.

On a terminal: a rich bar (done/total, elapsed, time left). Elsewhere (``make demo > log 2>&1``,
CI, ``nohup``, a pipe) a bar is a stream of carriage returns nobody reads, so a stage prints
plain lines instead, to the same stream (stderr):

* one when it starts: what, how much, and its estimate (given, or "after the first step");
* one as soon as the first unit is done, if no estimate was given: the estimate from that unit;
* one at least every ``every`` seconds (60) while it runs, from a timer, so a slow step still
  shows the stage is alive: done/total, elapsed, time left;
* one when it ends: done/total and the time it took (``ended at`` if short of the total: stopped).

Library functions keep taking a plain callback (``report(stage, done, total)``) or a bar
object; this module is what the CLI and the builders plug in (:func:`stage`, :func:`stages`).

Example:
    >>> import io
    >>> out, now = io.StringIO(), iter([0, 30, 90, 120]).__next__
    >>> with stage("sft", 4, unit="steps", stream=out, clock=now, every=None) as bar:
    ...     bar.update(1); bar.update(1); bar.report(); bar.update(2)
    >>> print(out.getvalue(), end="")
    sft: starting, 4 steps; estimate after the first step
    sft: 1/4 steps after 30s; estimate 2m in all
    sft: 2/4 steps (50%), 1m30s elapsed, about 1m30s left
    sft: done, 4/4 steps in 2m
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO, Any

EVERY_S = 60.0
_stage_line_at = [float("-inf")]  # time.monotonic() of the last line any Stage printed (heartbeat reads it)
"""Seconds between two progress lines at most, when the stream is not a terminal."""


class Stage:
    """One long stage of ``total`` units (``unit``, done ``step`` by step): ``update(n)`` adds ``n`` done units
    (tqdm's spelling), ``report()`` prints the progress line now, ``close()`` ends it. ``terminal`` None: a bar
    if ``stream`` is a terminal, else lines; ``done`` units were done before the stage was seen (not timed)."""

    def __init__(
        self,
        name: str,
        total: int,
        *,
        unit: str = "steps",
        step: str = "step",
        estimate_s: float | None = None,
        stream: IO[str] | None = None,
        every: float | None = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
        done: int = 0,
    ) -> None:
        self.name, self.total, self.unit, self.done = name, max(total, 0), unit, done
        self._first = done  # units done before this stage was seen: not timed, so not in any rate
        self._estimate, self._clock, self._lock, self._step = estimate_s, clock, threading.Lock(), step
        self._stream = stream if stream is not None else sys.stderr
        self._start = clock()
        self._bar: Any = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if is_terminal(self._stream) if terminal is None else terminal:
            self._bar = _rich_bar(name, self.total, self._stream)
            self._bar[0].update(self._bar[1], completed=done)
            return
        said = f"estimate {_clock_text(estimate_s)}" if estimate_s is not None else f"estimate after the first {step}"
        self._say(f"starting, {f'{done}/' if done else ''}{self.total} {unit}; {said}")
        if every is not None:
            self._timer = threading.Thread(target=self._beat, args=(every,), name=f"progress-{name}", daemon=True)
            self._timer.start()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            first = self.done - n == self._first and self._estimate is None
        if self._bar is not None:
            self._bar[0].update(self._bar[1], completed=self.done)
        elif first and self._first < self.done < self.total:
            elapsed = self._clock() - self._start
            self._estimate = elapsed / (self.done - self._first) * (self.total - self._first)
            self._say(
                f"{self.done}/{self.total} {self.unit} after {_clock_text(elapsed)}; "
                f"estimate {_clock_text(self._estimate)} in all"
            )

    def report(self) -> None:
        """Print the progress line now (the timer calls this every ``every`` seconds)."""
        if self._bar is not None:
            return
        elapsed = self._clock() - self._start
        with self._lock:
            done = self.done
        share = f" ({done / self.total:.0%})" if self.total else ""
        self._say(
            f"{done}/{self.total} {self.unit}{share}, {_clock_text(elapsed)} elapsed, {self._left(done, elapsed)}"
        )

    def close(self) -> None:
        self._stop.set()
        if self._bar is not None:
            self._bar[0].stop()
            return
        elapsed = self._clock() - self._start
        if self.done >= self.total:
            self._say(f"done, {self.done}/{self.total} {self.unit} in {_clock_text(elapsed)}")
        else:  # stopped (Ctrl-C, an error) or moved on before its count
            self._say(f"ended at {self.done}/{self.total} {self.unit} after {_clock_text(elapsed)}")

    def _left(self, done: int, elapsed: float) -> str:
        if done > self._first and self.total:
            return f"about {_clock_text(elapsed / (done - self._first) * max(self.total - done, 0))} left"
        if self._estimate is not None and elapsed > self._estimate:
            return f"past its estimate of {_clock_text(self._estimate)}"
        if self._estimate is not None:
            return f"about {_clock_text(self._estimate - elapsed)} left (estimate)"
        return f"time left known after the first {self._step}"

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            self.report()

    def _say(self, text: str) -> None:
        _stage_line_at[0] = time.monotonic()
        print(f"{self.name}: {text}", file=self._stream, flush=True)


@contextmanager
def stage(name: str, total: int, *, enabled: bool = True, **options: Any) -> Iterator[Stage]:
    """A :class:`Stage` closed at the end (options as for :class:`Stage`); ``enabled=False`` prints nothing."""
    bar = Stage(name, total, **options) if enabled else _Silent(name, total)
    try:
        yield bar
    finally:
        bar.close()


def logged(name: str, total: int, **options: Any) -> AbstractContextManager[Stage]:
    """A :func:`stage` that prints only where a bar would not be read (stderr is a file or a pipe), for a stage whose
    own lines already show on a terminal: in a log it adds the start line, the estimate and a line a minute."""
    return stage(name, total, enabled=not is_terminal(sys.stderr), terminal=False, **options)


@contextmanager
def stages(stream: IO[str] | None = None, **options: Any) -> Iterator[Callable[[str, int, int], None]]:
    """Yields ``report(stage, done, total)`` for a run of stages: a new stage name ends the one before and
    starts its own :class:`Stage` (options as for :class:`Stage`; ``estimates`` maps a stage to seconds)."""
    estimates: dict[str, float] = options.pop("estimates", {})
    current: list[Stage] = []

    def report(name: str, done: int, total: int) -> None:
        if current and current[-1].name != name:
            current.pop().close()
        if not current:
            if name in ended:
                return  # a repeat of a stage already complete
            current.append(Stage(name, total, stream=stream, estimate_s=estimates.get(name), done=done, **options))
        bar = current[-1]
        bar.total = max(total, bar.total)
        if done > bar.done:
            bar.update(done - bar.done)
        if bar.done >= bar.total:  # complete: its time ends here, not when the next stage first reports
            ended.add(current.pop().name)
            bar.close()

    ended: set[str] = set()
    try:
        yield report
    finally:
        if current:
            current.pop().close()


@contextmanager
def heartbeat(
    say: Callable[[str], None],
    *,
    enabled: bool = True,
    every: float = EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Callable[[str], None]]:
    """Yields ``say`` for a stage that reports in lines of its own (one per batch, per arm) which may be minutes
    apart: while ``every`` seconds pass without one, it says how long since the last, so that a log shows the run
    alive at least once a minute; a :class:`Stage`'s own lines count as lines, so a stage that reports itself is not
    beaten over. ``enabled=False`` (a helper rank): no beat."""
    last_at, last_line = clock(), ""
    stop = threading.Event()

    def said(line: str) -> None:
        nonlocal last_at, last_line
        last_at, last_line = clock(), line
        say(line)

    def beat() -> None:
        while not stop.wait(every):
            quiet = clock() - max(last_at, _stage_line_at[0])
            if quiet >= every:
                say(f"still working: {_clock_text(quiet)} since the last line{f' ({last_line})' if last_line else ''}")

    if enabled:
        threading.Thread(target=beat, name="progress-heartbeat", daemon=True).start()
    try:
        yield said
    finally:
        stop.set()


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal (a bar is drawn) rather than a file or a pipe (lines are printed)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def quiet_library_bars() -> None:
    """Turn off the bars transformers and the Hugging Face hub draw (``Loading weights``): for ``--quiet``, and for
    a log, where a stage prints its own lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


class _Silent(Stage):
    def __init__(self, name: str, total: int) -> None:
        self.name, self.total, self.unit, self.done, self._first = name, total, "", 0, 0
        self._lock, self._bar = threading.Lock(), None
        self._estimate = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n

    def report(self) -> None:
        return

    def close(self) -> None:
        return


def _rich_bar(name: str, total: int, stream: IO[str]) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(file=stream),
    )
    bar.start()
    return bar, bar.add_task(name, total=max(total, 1))


def _clock_text(seconds: float) -> str:
    """``95`` -> ``'1m35s'``, ``3651`` -> ``'1h0m51s'``: whole seconds, hours past an hour."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes or hours else "",
        f"{secs}s" if secs or not whole else "",
    ]
    return "".join(parts)
