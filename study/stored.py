"""The two records the study reads beside the recording: the replicate record and the evaluation, typed.

``replicate.json`` (written by ``probe replicate``, :class:`ReplicateRecord`) and ``eval.json``
(``probe models eval --out``, :class:`EvalRecord`; only the parts the report reads: the table, the
models' directories, the test file, the rows per task and the new-token limit) are read through the
project's one record codec (:mod:`core.records`): a value of another type, a missing key, a list where
an object belongs or a number past float's range is one :class:`~core.errors.ProbeError` naming the
file and the key (:func:`core.records.read_record`), never an ``AttributeError`` halfway through a page.

Example:
    >>> from core.records import from_json
    >>> from_json(StageRecord, {"name": "record", "status": "done", "seconds": 12.5})
    StageRecord(name='record', status='done', what='', estimate_s=None, seconds=12.5, at_most_s=None, parts={})
    >>> from_json(ReplicateRecord, {"stages": [1]})
    Traceback (most recent call last):
    ...
    core.records.RecordError: stages[0]: expected an object, got 1
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.eval_rows import EvalRow


@dataclass(frozen=True)
class StageRecord:
    """One stage of ``probe replicate``: its name, status (planned, skipped, running, done) and times; ``parts``: the
    seconds of each kind of work inside it (:mod:`core.clock`: generation, teacher-forced passes)."""

    name: str
    status: str
    what: str = ""
    estimate_s: float | None = None
    seconds: float | None = None
    at_most_s: float | None = None  # where the stage's work depends on what it finds: its estimate at most
    parts: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicateRecord:
    """``replicate.json``: the options, the command line that reproduces the run and each stage's times."""

    FORMAT: ClassVar[str] = "rolemrc-probe/replicate"
    VERSION: ClassVar[int] = 1

    command: str = ""
    started: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    sft_dir: str = ""
    dpo_dir: str = ""
    base_dir: str | None = None
    data_file: str = ""
    stages: list[StageRecord] = field(default_factory=list)
    threads: int | None = None  # torch threads the stages ran with in this process

    def seconds(self) -> dict[str, float]:
        """Each stage's measured seconds (stages never measured left out)."""
        return {s.name: s.seconds for s in self.stages if s.seconds is not None and math.isfinite(s.seconds)}


@dataclass(frozen=True)
class ModelRef:
    """Which model directory an evaluation judged, and its responses."""

    model_dir: str = ""
    responses: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EvalGeneration:
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class EvalRecord:
    """``eval.json`` as the report reads it (``training.evaluate.PairEvaluation`` writes more)."""

    table: list[EvalRow]
    test_file: str = ""
    task_counts: dict[str, int] = field(default_factory=dict)
    judge: str = "rules"
    generation: EvalGeneration = field(default_factory=EvalGeneration)
    sft: ModelRef = field(default_factory=ModelRef)
    dpo: ModelRef = field(default_factory=ModelRef)
    base: ModelRef | None = None

    def row(self, capability: str) -> EvalRow | None:
        return next((r for r in self.table if r.capability == capability), None)

    def rows(self) -> int:
        return sum(self.task_counts.values())

    def model_dirs(self) -> set[str]:
        """The SFT and DPO directories it judged (those it names)."""
        return {m.model_dir for m in (self.sft, self.dpo) if m.model_dir}
