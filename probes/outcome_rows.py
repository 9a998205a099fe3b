"""Which response tokens the continuous outcomes (:mod:`access.outcomes`) teacher-force, and the DPO pairs they score.

``--responses`` chooses the response after each test row's prompt:

``greedy`` (the default of an A/B run)
    the target model's own greedy responses from the baseline pass, given as texts or as token
    ids (ids are appended as they are: exactly the tokens the model wrote);
``reference``
    the test row's reference answer;
``chosen`` / ``rejected``
    the reply of the DPO pair with the same prompt (from ``dpo_file``, matched turn for turn,
    as ``probe run --response`` does: :func:`probes.responses.response_lookup`);
``FILE``
    a JSONL file with one object per test row, in row order, each with ``"response"`` (a text)
    or ``"token_ids"`` (a list of token ids), e.g. the responses an earlier run wrote.

A text response is rendered by the chat template as the assistant's turn, up to the end of the turn.

Example:
    >>> response_source("reference"), response_source("runs/x/responses.jsonl")
    ('reference', 'file')
    >>> rows = outcome_rows(tokenizer, test_rows, "greedy", greedy=texts)      # doctest: +SKIP
    >>> pairs = capability_pairs(tokenizer, "data/dpo.jsonl", "multi_turn", limit=32)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from access.outcomes import Forced, forced
from core.errors import ProbeError
from core.rows import row_location

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from core.schema import TestRow

NAMED = ("greedy", "reference", "chosen", "rejected")


def response_source(responses: str) -> str:
    """``greedy``, ``reference``, ``chosen``, ``rejected``, or ``file`` for anything else (a path)."""
    return responses if responses in NAMED else "file"


def outcome_rows(
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    responses: str,
    *,
    data_file: Path | None = None,
    greedy: Sequence[str | Sequence[int]] | None = None,
    dpo_file: Path | None = None,
) -> list[Forced]:
    """One teacher-forced sequence per test row, with the response ``responses`` names (see the module doc)."""
    source = response_source(responses)
    if source == "greedy":
        if greedy is None or len(greedy) != len(rows):
            raise ProbeError(
                f"--responses greedy needs the target's greedy response of each of the {len(rows)} rows "
                f"(got {'none' if greedy is None else len(greedy)}); run generation first or use --responses reference"
            )
        answers: list[str | Sequence[int]] = list(greedy)
    elif source == "file":
        answers = list(read_responses_file(Path(responses), len(rows)))
    else:
        from probes.responses import response_lookup

        lookup = response_lookup(rows, source, dpo_file, data_file or Path("the test rows"))
        answers = [lookup(i) for i in range(len(rows))]
    out = []
    for i, (row, answer) in enumerate(zip(rows, answers, strict=True)):
        if not isinstance(answer, str) and not answer:
            raise ProbeError(f"{row_location(i, data_file)}: the {source} response has no tokens to teacher-force")
        out.append(forced(tokenizer, row.question, answer, partial(row_location, i, data_file)))
    return out


def read_responses_file(path: Path, n_rows: int) -> list[str | list[int]]:
    """The responses of a ``--responses FILE``: one JSON object per line, ``response`` text or ``token_ids``."""
    from core.inputs import iter_jsonl

    if not path.is_file():
        raise ProbeError(
            f"--responses {path}: expected greedy, reference, chosen, rejected or an existing JSONL file of responses"
        )
    out: list[str | list[int]] = []
    for line, value in iter_jsonl(path):
        text = value.get("response") if isinstance(value, dict) else None
        ids = value.get("token_ids") if isinstance(value, dict) else None
        if isinstance(text, str) and text.strip():
            out.append(text)
        elif isinstance(ids, list) and ids and all(isinstance(t, int) and t >= 0 for t in ids):
            out.append(ids)
        else:
            raise ProbeError(f"{path}:{line}: expected an object with a non-empty 'response' text or 'token_ids' list")
    if len(out) != n_rows:
        raise ProbeError(f"--responses {path}: {len(out)} responses for {n_rows} test rows; expected one per row")
    return out


def capability_pairs(
    tokenizer: PreTrainedTokenizerBase, dpo_file: Path, capability: str, *, limit: int | None = 32, seed: int = 0
) -> list[tuple[Forced, Forced]]:
    """(chosen, rejected) sequences of the DPO pairs whose task belongs to ``capability``; ``limit`` of them drawn
    by ``seed`` (all when ``None``), in file order."""
    from core.capabilities import parse_capability, tasks_of
    from core.rows import read_dpo_rows

    tasks = set(tasks_of(parse_capability(capability)))
    pairs = [(i, p) for i, p in enumerate(read_dpo_rows(dpo_file)) if p.extra.get("task") in tasks]
    if not pairs:
        raise ProbeError(f"{dpo_file}: no DPO pair of capability {capability} (no row has one of its tasks)")
    if limit is not None and limit < len(pairs):
        pairs = sorted(random.Random(seed).sample(pairs, limit), key=lambda item: item[0])
    out = []
    for i, pair in pairs:
        where = partial(row_location, i, dpo_file)
        out.append(
            (forced(tokenizer, pair.prompt, pair.chosen, where), forced(tokenizer, pair.prompt, pair.rejected, where))
        )
    return out


def write_responses_file(path: Path, responses: Sequence[str | Sequence[int]]) -> None:
    """Write responses (texts or token ids) as a ``--responses FILE`` reads them."""
    lines = [
        json.dumps({"response": r} if isinstance(r, str) else {"token_ids": [int(t) for t in r]}, ensure_ascii=False)
        for r in responses
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
