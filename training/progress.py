"""Rich progress bars for long library operations (one bar per stage).

Library functions take a plain ``report(stage, done, total)`` callable so they stay
usable without a terminal; this module supplies the rich implementation the CLI and
:func:`training.default_pair.ensure_default_pair` use.

Example:
    >>> import io
    >>> console = Console(file=io.StringIO(), width=70, force_terminal=False)   # the bars are drawn once, at the end
    >>> with rich_reporter(console) as report:
    ...     report("sft", 200, 200); report("dpo", 3, 100)
    >>> print(console.file.getvalue())
    sft ... 200/200 ...
    dpo ... 3/100 ...
    >>> with rich_reporter() as report:          # doctest: +SKIP
    ...     report("sft", 10, 200)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextmanager
def rich_reporter(console: Console | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """Yields ``report(stage, done, total)``; a new stage name opens a new bar."""
    tasks: dict[str, TaskID] = {}
    columns = (
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console or Console(stderr=True), transient=False) as bars:

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=max(total, 1))
            bars.update(tasks[stage], completed=done, total=max(total, 1))

        yield report
