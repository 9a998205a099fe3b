"""Check a RoleMRC JSONL file of any kind and summarise it (behind ``probe validate``).

Users bring the published files, their own synthesized ones, or hand-edited ones; this
answers "does it load, what kind is it, and how does it group" before a long run
starts. The kind is detected from the first row's fields (``question`` -> test,
``conversations`` -> SFT, ``prompt`` -> DPO) unless given. Errors are the readers' own
line-precise :class:`~core.errors.DataError`.

Example:
    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp(), "chats.jsonl")
    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Ahoy."}]
    >>> _ = path.write_text(json.dumps({"conversations": chat, "task": "free_chat"}))
    >>> report = validate_file(path); report.kind, report.rows, report.tasks   # the kind is told by the fields
    ('sft', 1, {'free_chat': 1})
    >>> report = validate_file("roleMRC_test.jsonl")                  # doctest: +SKIP
    >>> report.kind, report.rows, report.capabilities["priority"]     # doctest: +SKIP
    ('test', 1400, 42)
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from core.errors import DataError, ProbeError
from core.inputs import iter_jsonl
from core.rows import group_by_capability, read_dpo_rows, read_sft_rows, read_test_rows

KINDS = ("auto", "test", "sft", "dpo")
_FIELDS = (("question", "test"), ("conversations", "sft"), ("prompt", "dpo"))


@dataclass
class FileReport:
    path: str
    kind: str
    rows: int
    tasks: dict[str, int] = field(default_factory=dict)  # rows per task (test rows, or extra "task" fields)
    capabilities: dict[str, int] = field(default_factory=dict)  # test files only
    with_expect: int = 0  # test rows carrying an expect block (rule-judgeable)


def detect_kind(path: str | os.PathLike[str]) -> str:
    for number, obj in iter_jsonl(path):
        if isinstance(obj, dict):
            for key, kind in _FIELDS:
                if key in obj:
                    return kind
        raise DataError(
            str(path),
            number,
            "cannot tell the file kind: expected a 'question' (test), 'conversations' (SFT) or 'prompt' (DPO) field",
        )
    raise DataError(str(path), None, "the file has no rows")


def validate_file(path: str | os.PathLike[str], kind: str = "auto") -> FileReport:
    """Read every row with the matching reader (first bad line -> DataError) and summarise."""
    if kind not in KINDS:
        raise ProbeError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    kind = detect_kind(path) if kind == "auto" else kind
    if kind == "test":
        rows = read_test_rows(path)
        caps = {c.value: len(v) for c, v in group_by_capability(rows).items()}
        tasks = Counter(r.task for r in rows)
        return FileReport(
            str(path), kind, len(rows), dict(sorted(tasks.items())), caps, sum(r.expect is not None for r in rows)
        )
    reader = read_sft_rows if kind == "sft" else read_dpo_rows
    items = reader(path)
    tasks = Counter(str(r.extra["task"]) for r in items if "task" in r.extra)
    return FileReport(str(path), kind, len(items), dict(sorted(tasks.items())))
