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
    or ``"token_ids"`` (a list of token ids), e.g. the responses an earlier run wrote. A line may also say
    which data row it answers (``"row"``, the row's index in the data file) and who wrote it
    (``"weights_sha256"`` and ``"tokenizer_sha256"``, :class:`core.provenance.MadeBy`), as the responses an A/B
    run keeps do.

A text response is rendered by the chat template as the assistant's turn, up to the end of the turn.

Before any forward, :class:`ResponseChecks` holds every sequence to what the models can take: a file's lines
are objects of the right shape, their ``row`` s are the test rows', their token ids lie in the vocabulary,
their fingerprints are those of the model whose responses they are meant to be (one made by another model or
tokenizer is refused, naming both; a file of token ids that carries none, written before fingerprints, is
read with one ``warning:``), and every prompt plus response fits the model's context. Each refusal is one
line naming the file and line.

Example:
    >>> response_source("reference"), response_source("runs/x/responses.jsonl")
    ('reference', 'file')
    >>> rows = outcome_rows(tokenizer, test_rows, "greedy", greedy=texts)      # doctest: +SKIP
    >>> pairs = capability_pairs(tokenizer, "data/dpo.jsonl", "multi_turn", limit=32)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.outcomes import Forced, forced
from core.errors import ProbeError
from core.provenance import MadeBy
from core.rows import row_location
from probes.responses import check_fits

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from core.schema import TestRow

NAMED = ("greedy", "reference", "chosen", "rejected")
_SHAPE = "expected an object with a non-empty 'response' text or 'token_ids' list"


@dataclass(frozen=True)
class ResponseChecks:
    """What the teacher-forced sequences are held to before any forward (module doc); a check whose field is None
    is not made."""

    row_ids: Sequence[int] | None = None  # each test row's index in the data file; a file's "row"s must be these
    made_by: MadeBy | None = None  # the model whose responses a file's token ids are meant to be
    whose: str = "the target model"  # how messages name that model
    vocab_size: int | None = None  # token ids must lie in [0, vocab_size)
    context: int | None = None  # prompt plus response at most this many tokens (the model's max_position_embeddings)


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
    checks: ResponseChecks = ResponseChecks(),
) -> list[Forced]:
    """One teacher-forced sequence per test row, with the response ``responses`` names (see the module doc), each
    held to ``checks``."""
    source = response_source(responses)
    row_ids = list(checks.row_ids) if checks.row_ids is not None else list(range(len(rows)))
    wheres = [partial(row_location, row_ids[i], data_file) for i in range(len(rows))]
    if source == "greedy":
        if greedy is None or len(greedy) != len(rows):
            raise ProbeError(
                f"--responses greedy needs the target's greedy response of each of the {len(rows)} rows "
                f"(got {'none' if greedy is None else len(greedy)}); run generation first or use --responses reference"
            )
        answers: list[str | Sequence[int]] = list(greedy)
    elif source == "file":
        path = Path(responses)
        kept = read_responses(path, len(rows), checks)
        answers = [answer for _, answer in kept]
        wheres = [partial(_file_line, path, line, where) for (line, _), where in zip(kept, wheres, strict=True)]
    else:
        from probes.responses import response_lookup

        lookup = response_lookup(rows, source, dpo_file, data_file or Path("the test rows"))
        answers = [lookup(i) for i in range(len(rows))]
    out = []
    for row, answer, where in zip(rows, answers, wheres, strict=True):
        if not isinstance(answer, str) and not answer:
            raise ProbeError(f"{where()}: the {source} response has no tokens to teacher-force")
        sequence = forced(tokenizer, row.question, answer, where)
        check_fits(sequence, checks.context, where)
        out.append(sequence)
    return out


def _file_line(path: Path, line: int, row: Callable[[], str]) -> str:
    return f"{path}:{line} (the response to {row()})"


def read_responses_file(path: Path, n_rows: int, checks: ResponseChecks = ResponseChecks()) -> list[str | list[int]]:
    """The responses of a ``--responses FILE``: one JSON object per line, ``response`` text or ``token_ids``."""
    return [answer for _, answer in read_responses(path, n_rows, checks)]


def read_responses(
    path: Path, n_rows: int, checks: ResponseChecks = ResponseChecks()
) -> list[tuple[int, str | list[int]]]:
    """(line number, response) of every response of a ``--responses FILE``, each held to ``checks`` (module doc)."""
    from core.inputs import iter_jsonl
    from core.models import warn

    if not path.is_file():
        raise ProbeError(
            f"--responses {path}: expected greedy, reference, chosen, rejected or an existing JSONL file of responses"
        )
    out: list[tuple[int, str | list[int]]] = []
    unsigned = 0
    for line, value in iter_jsonl(path, "JSONL file of responses"):
        if not isinstance(value, dict):
            raise ProbeError(f"{path}:{line}: {_SHAPE}, got {type(value).__name__}")
        answer = _answer(value, path, line, checks.vocab_size)
        if checks.row_ids is not None and len(out) < len(checks.row_ids):
            _check_row(value.get("row"), checks.row_ids[len(out)], len(out), f"{path}:{line}")
        signed = _check_made_by(value, checks, f"{path}:{line}")
        unsigned += not signed and isinstance(answer, list)
        out.append((line, answer))
    if len(out) != n_rows:
        raise ProbeError(f"--responses {path}: {len(out)} responses for {n_rows} test rows; expected one per row")
    if unsigned and checks.made_by is not None:
        warn(
            f"{path}: its token ids do not say which model and tokenizer wrote them (a file written before "
            "fingerprints), so they were checked against the vocabulary only; make it again with `probe intervene` "
            "to have them checked"
        )
    return out


def _answer(value: dict[str, Any], path: Path, line: int, vocab_size: int | None) -> str | list[int]:
    """A line's response: its text, or its token ids, each a non-negative integer below ``vocab_size``."""
    text, ids = value.get("response"), value.get("token_ids")
    if isinstance(text, str) and text.strip():
        return text
    if not isinstance(ids, list) or not ids:
        raise ProbeError(f"{path}:{line}: {_SHAPE}")
    for position, token in enumerate(ids):
        if isinstance(token, bool) or not isinstance(token, int):
            raise ProbeError(
                f"{path}:{line}: token_ids[{position}] is {json.dumps(token)[:20]}; expected an integer id"
            )
        if token < 0 or (vocab_size is not None and token >= vocab_size):
            bound = f"the vocabulary's {vocab_size} ids (0 to {vocab_size - 1})" if vocab_size else "the vocabulary"
            raise ProbeError(
                f"{path}:{line}: token_ids[{position}] is {token}, outside {bound}; were they written with "
                "another tokenizer?"
            )
    return ids


def _check_row(row: Any, expected: int, index: int, where: str) -> None:
    """A line that says which data row it answers must answer the ``index``-th test row, ``expected``."""
    if row is None:
        return
    if isinstance(row, bool) or not isinstance(row, int) or row != expected:
        raise ProbeError(
            f"{where}: 'row' is {json.dumps(row)[:20]}, but response {index + 1} must answer data row {expected}; the "
            "file answers other rows than this run's (give the capability, --limit and data of the run that wrote it)"
        )


def _check_made_by(value: dict[str, Any], checks: ResponseChecks, where: str) -> bool:
    """Refuse a line written by another model or tokenizer than ``checks.made_by``; whether the line says who
    wrote it."""
    found = MadeBy.read(value)
    if isinstance(found, str):
        raise ProbeError(f"{where}: {found}")
    if found is None:
        return False
    differ = found.differences(checks.made_by, checks.whose) if checks.made_by is not None else None
    if differ:
        raise ProbeError(
            f"{where}: written by another model or tokenizer: {differ}; these are not {checks.whose}'s responses "
            "(give the folder of an A/B run on this pair, or --responses reference)"
        )
    return True


def capability_pairs(
    tokenizer: PreTrainedTokenizerBase,
    dpo_file: Path,
    capability: str,
    *,
    limit: int | None = 32,
    seed: int = 0,
    context: int | None = None,
) -> list[tuple[Forced, Forced]]:
    """(chosen, rejected) sequences of the DPO pairs whose task belongs to ``capability``; ``limit`` of them drawn
    by ``seed`` (all when ``None``), in file order; each within ``context`` tokens (:func:`check_fits`)."""
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
        chosen, rejected = (forced(tokenizer, pair.prompt, reply, where) for reply in (pair.chosen, pair.rejected))
        for sequence in (chosen, rejected):
            check_fits(sequence, context, where)
        out.append((chosen, rejected))
    return out


def write_responses_file(path: Path, responses: Sequence[str | Sequence[int]]) -> None:
    """Write responses (texts or token ids) as a ``--responses FILE`` reads them."""
    lines = [
        json.dumps({"response": r} if isinstance(r, str) else {"token_ids": [int(t) for t in r]}, ensure_ascii=False)
        for r in responses
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
