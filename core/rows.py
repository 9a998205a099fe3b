"""Read and write RoleMRC JSONL files with line-precise validation.

Readers never drop a row silently: the first malformed line raises
:class:`~core.errors.DataError` naming the file, the 1-based line and
what was expected. Bytes, encoding and JSON syntax are checked by the toolkit's one input
reader, :func:`core.inputs.iter_jsonl` (importable from here too); this module checks the
RoleMRC schema. Writers are atomic (a temporary file renamed into place), so an
interrupted write never leaves a half file where a good one was.

Example:
    >>> row = parse_test_row({"task": "role_unrelated_mrc_refused_no_narration", "reference": "I cannot say.",
    ...                       "question": [{"role": "user", "content": "Who won the 1930 World Cup?"}]})
    >>> {c.value: len(v) for c, v in group_by_capability([row]).items() if v}
    {'knowledge_boundary': 1, 'role_style': 1}
    >>> import tempfile, pathlib
    >>> bad = pathlib.Path(tempfile.mkdtemp(), "test.jsonl")
    >>> _ = bad.write_text('{"task": "role_unrelated_mrc_refused_no_narration"}\\n')
    >>> read_test_rows(bad)
    Traceback (most recent call last):
    core.errors.DataError: .../test.jsonl:1: missing field 'question' (in a test row)
    >>> rows = read_test_rows("roleMRC_test.jsonl")          # doctest: +SKIP
    >>> groups = group_by_capability(rows)                   # doctest: +SKIP
    >>> {c.value: len(v) for c, v in groups.items()}         # doctest: +SKIP
    {'knowledge_boundary': 600, 'role_style': 400, 'nested': 158, 'multi_turn': 400, 'priority': 42}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from core.atomic import replace_together, write_atomic
from core.capabilities import ALL_CAPABILITIES, TASKS_BY_NAME, Capability, capabilities_of
from core.errors import DataError, ProbeError
from core.inputs import iter_jsonl, shown
from core.records import to_json
from core.schema import ROLES, DPORow, Role, SFTRow, TestRow, Turn, validate_conversation, validate_expect

RowT = TypeVar("RowT")


class _LineError(Exception):
    """Raised inside a row parser; the reader adds file and line."""


def row_location(index: int, source: str | os.PathLike[str] | None = None) -> str:
    """How errors name row ``index`` (0-based) of a data file: ``FILE:LINE (data row N)`` when the file is known.

    Reads the file only when called, which is on the error path.
    """
    if source is None:
        return f"data row {index}"
    line = next((number for k, (number, _) in enumerate(iter_jsonl(source)) if k == index), None)
    return f"{source}:{line} (data row {index})" if line is not None else f"{source} (data row {index})"


def _read(path: str | os.PathLike[str], parse: Callable[[dict[str, Any]], RowT], kind: str) -> list[RowT]:
    rows: list[RowT] = []
    for number, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise DataError(str(path), number, f"expected a JSON object ({kind} row), got {type(obj).__name__}")
        try:
            rows.append(parse(obj))
        except _LineError as exc:
            raise DataError(str(path), number, f"{exc} (in a {kind} row)") from None
    return rows


def _turns(value: Any, field: str, must_end_with: Role | None) -> list[Turn]:
    if not isinstance(value, list):
        raise _LineError(f"field {field!r}: expected a list of {{role, content}} turns")
    turns: list[Turn] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "role" not in item or "content" not in item:
            raise _LineError(f"field {field!r}, turn {i}: expected an object with 'role' and 'content'")
        role, content = item["role"], item["content"]
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise _LineError(
                f"field {field!r}, turn {i}: unknown role {shown(role)}; expected system, user or assistant"
            )
        if not isinstance(content, str):
            raise _LineError(f"field {field!r}, turn {i}: content must be a string")
        turns.append(Turn(cast(Role, role.lower()), content))
    problem = validate_conversation(turns, must_end_with=must_end_with)
    if problem:
        raise _LineError(f"field {field!r}: {problem}")
    return turns


def _string(obj: dict[str, Any], field: str) -> str:
    if field not in obj:
        raise _LineError(f"missing field {field!r}")
    value = obj[field]
    if not isinstance(value, str):
        raise _LineError(f"field {field!r}: expected a string")
    return value


def _extra(obj: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def parse_test_row(obj: dict[str, Any]) -> TestRow:
    if "question" not in obj:
        raise _LineError("missing field 'question'")
    task = _string(obj, "task")
    if task not in TASKS_BY_NAME:
        raise _LineError(f"unknown task {shown(task)}; expected one of the 18 RoleMRC task names")
    question, reference = _turns(obj["question"], "question", "user"), _string(obj, "reference")
    extra = _extra(obj, ("question", "reference", "task"))
    problem = validate_expect(extra["expect"]) if extra.get("expect") is not None else None
    if problem:
        raise _LineError(f"field 'expect': {problem}")
    return TestRow(question, reference, task, extra)


def parse_sft_row(obj: dict[str, Any]) -> SFTRow:
    if "conversations" not in obj:
        raise _LineError("missing field 'conversations'")
    turns = _turns(obj["conversations"], "conversations", "assistant")
    return SFTRow(turns, _extra(obj, ("conversations",)))


def parse_dpo_row(obj: dict[str, Any]) -> DPORow:
    if "prompt" not in obj:
        raise _LineError("missing field 'prompt'")
    prompt = _turns(obj["prompt"], "prompt", "user")
    return DPORow(
        prompt, _string(obj, "chosen"), _string(obj, "rejected"), _extra(obj, ("prompt", "chosen", "rejected"))
    )


def read_test_rows(path: str | os.PathLike[str]) -> list[TestRow]:
    return _read(path, parse_test_row, "test")


def read_sft_rows(path: str | os.PathLike[str]) -> list[SFTRow]:
    return _read(path, parse_sft_row, "SFT")


def read_dpo_rows(path: str | os.PathLike[str]) -> list[DPORow]:
    return _read(path, parse_dpo_row, "DPO")


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> int:
    """Atomically write rows (records or plain dicts, as :func:`core.records.to_json` writes them); returns the count.

    An ``OSError`` (a full disk, a read-only place) becomes one :class:`ProbeError`: the
    file that was there before is kept.
    """
    target = Path(path)
    writer = _JsonlWriter(rows)
    try:
        write_atomic(target, writer)
    except OSError as exc:
        raise ProbeError(
            f"{target}: could not write ({exc.strerror or exc}); any previous file there was kept unchanged"
        ) from None
    return writer.count


def write_dataset(out_dir: str | os.PathLike[str], files: dict[str, Iterable[Any]]) -> dict[str, int]:
    """Write several JSONL files of one dataset so that they are replaced together or not at all.

    Every file is written in full beside its target first; only then are they renamed into
    place (:func:`core.atomic.replace_together`). A failure while writing (a full disk, a row
    that cannot be serialized) leaves the old files exactly as they were and no temporary
    file behind; an ``OSError`` becomes one :class:`ProbeError` saying so. Returns rows
    written per file name.
    """
    out = Path(out_dir)
    writers = {name: _JsonlWriter(rows) for name, rows in files.items()}
    try:
        replace_together({out / name: writer for name, writer in writers.items()})
    except OSError as exc:
        failed = next((name for name, writer in writers.items() if not writer.done), "the dataset")
        raise ProbeError(
            f"{out}: could not write {failed} ({exc.strerror or exc}); the existing files were kept unchanged"
        ) from None
    return {name: writer.count for name, writer in writers.items()}


class _JsonlWriter:
    """Writes rows as JSON lines to a binary handle, counting them (a :data:`core.atomic.Content` producer)."""

    def __init__(self, rows: Iterable[Any]) -> None:
        self.rows, self.count, self.done = rows, 0, False

    def __call__(self, handle: IO[bytes]) -> None:
        for row in self.rows:
            handle.write((json.dumps(to_json(row), ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8"))
            self.count += 1
        self.done = True


def group_by_capability(
    rows: Iterable[TestRow], capabilities: Iterable[Capability] = ALL_CAPABILITIES
) -> dict[Capability, list[tuple[int, TestRow]]]:
    """Group (row_index, row) pairs by capability; a row counts in every capability its task maps to."""
    wanted = tuple(capabilities)
    groups: dict[Capability, list[tuple[int, TestRow]]] = {c: [] for c in wanted}
    for index, row in enumerate(rows):
        for cap in capabilities_of(row.task):
            if cap in groups:
                groups[cap].append((index, row))
    return groups
