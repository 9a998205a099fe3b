"""Turn RoleMRC SFT/DPO files into the conversational datasets TRL expects.

``--data`` may name a directory (holding ``sft.jsonl`` / ``dpo.jsonl``, as
:func:`data_synthesis.offline.synthesize` writes them, or the published
``roleMRC_train-sft_mix.jsonl`` / ``roleMRC_train-rl_mix.jsonl``) or the file itself.
Rows are read with the line-precise readers of :mod:`core.rows`, so a bad line
is reported by file and line before any model is loaded, and an empty file is an
error rather than a zero-step "training" run. Row order is kept exactly (no shuffle
here): the trainer's seeded sampler decides the order, so equal seeds give equal runs.

Example:
    >>> import json, tempfile
    >>> data = Path(tempfile.mkdtemp())
    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Ahoy."}]
    >>> _ = (data / "roleMRC_train-sft_mix.jsonl").write_text(json.dumps({"conversations": chat}))
    >>> path = resolve_data_file(data, "sft"); path.name, sft_records(path) == [{"messages": chat}]
    ('roleMRC_train-sft_mix.jsonl', True)
    >>> path = resolve_data_file("data/", "sft")                  # doctest: +SKIP
    >>> ds, digest = sft_dataset(path)                            # doctest: +SKIP
    >>> ds[0]["messages"][0]["role"]                              # doctest: +SKIP
    'system'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import ProbeError
from core.rows import read_dpo_rows, read_sft_rows
from core.run_dir import DataDir
from core.schema import Turn

CANDIDATES: dict[str, tuple[str, ...]] = {
    "sft": (DataDir.SFT, "roleMRC_train-sft_mix.jsonl", "train-sft.jsonl"),
    "dpo": (DataDir.DPO, "roleMRC_train-rl_mix.jsonl", "roleMRC_train-rl_halfmix.jsonl", "train-rl.jsonl"),
    "test": (DataDir.TEST, "roleMRC_test.jsonl"),
}


def resolve_data_file(data: str | Path, kind: str) -> Path:
    """The ``kind`` file (sft | dpo | test) for ``--data``: the path itself if a file, else a known name inside it."""
    p = Path(data)
    if p.is_file():
        return p
    if not p.exists():
        raise ProbeError(f"--data {p}: no such file or directory")
    for name in CANDIDATES[kind]:
        if (p / name).is_file():
            return p / name
    raise ProbeError(f"--data {p}: no {kind} file found; expected one of {', '.join(CANDIDATES[kind])} in it")


def _messages(turns: list[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.content} for t in turns]


def _limit(rows: list[Any], path: Path, max_rows: int | None) -> list[Any]:
    if not rows:
        raise ProbeError(f"--data {path}: the file has no rows; expected at least one JSONL row to train on")
    return rows[:max_rows] if max_rows else rows


def sft_records(path: Path, max_rows: int | None = None) -> list[dict[str, Any]]:
    """``[{"messages": [...]}]``, one per SFT row, in file order."""
    rows = _limit(read_sft_rows(path), path, max_rows)
    return [{"messages": _messages(r.conversations)} for r in rows]


def dpo_records(path: Path, max_rows: int | None = None) -> list[dict[str, Any]]:
    """``[{"prompt": [...], "chosen": [assistant], "rejected": [assistant]}]`` in file order."""
    rows = _limit(read_dpo_rows(path), path, max_rows)
    return [
        {
            "prompt": _messages(r.prompt),
            "chosen": [{"role": "assistant", "content": r.chosen}],
            "rejected": [{"role": "assistant", "content": r.rejected}],
        }
        for r in rows
    ]


def to_dataset(records: list[dict[str, Any]]) -> Any:
    """A :class:`datasets.Dataset` from records (imported lazily: datasets is slow to import)."""
    from datasets import Dataset

    return Dataset.from_list(records)
