"""A small synthesized test split and a responses file for it: what the judging tests feed `probe judge`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_synthesis.offline import synthesize


def write_judge_files(
    root: Path, *, n_roles: int, seed: int, respond: Callable[[int, dict[str, Any]], Any] | None = None
) -> tuple[Path, Path]:
    """(test.jsonl, responses.jsonl) under ``root``; ``respond(i, row)`` is line i of the responses (default:
    the reference)."""
    synthesize(root / "data", n_roles=n_roles, seed=seed)
    test_file = root / "data" / "test.jsonl"
    rows = [json.loads(line) for line in test_file.read_text(encoding="utf-8").splitlines()]
    respond = respond or (lambda _i, row: row["reference"])
    responses = root / "responses.jsonl"
    responses.write_text("".join(json.dumps(respond(i, row)) + "\n" for i, row in enumerate(rows)), encoding="utf-8")
    return test_file, responses
