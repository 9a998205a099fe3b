"""Responses to record on: teacher forcing a reply after each prompt (``--position response_mean|response_last``).

DPO's loss is over the tokens of the chosen and rejected responses, not over the prompt,
so a recording can append a response to every prompt and read the activations on the
response's tokens. Which response (``--response``):

``reference``
    the test row's ``reference`` answer (the default);
``chosen`` / ``rejected``
    a DPO pair's reply for the same prompt. The pairs come from ``--responses FILE`` (DPO
    rows, ``{prompt, chosen, rejected}``), matched to each test row by its prompt, turn
    for turn; or ``--data`` is itself a DPO file, whose rows (with a ``task``) are then the
    prompts. A recorded prompt with no pair in the file is refused, naming the row.

The sequence is the conversation with the response as an assistant turn, rendered by the
chat template like every prompt (:mod:`core.chat`). Its *response tokens* are those after
the prompt rendered with the generation prompt (the assistant header), up to the end of the
turn; this is how TRL's DPO tokenizes a completion. A template that does not render the
prompt as a prefix of the whole conversation (a tokenizer or template other than the one
the rows were made for) is refused before anything is recorded, and so is a prompt plus response longer than the
model's context (:func:`check_fits`), naming the file and line.

Example:
    >>> import tempfile
    >>> data = Path(tempfile.mkdtemp(), "dpo.jsonl")
    >>> pair = {"prompt": [{"role": "user", "content": "Hi"}], "chosen": "Ahoy.", "rejected": "Hello."}
    >>> _ = data.write_text(json.dumps({**pair, "task": "role_related_mrc_answer_no_narration"}))
    >>> rows = read_rows(data)   # a DPO file as --data: its prompts are the rows
    >>> response_lookup(rows, "chosen", None, data)(0), response_lookup(rows, "rejected", None, data)(0)
    ('Ahoy.', 'Hello.')
    >>> from access.outcomes import Forced
    >>> check_fits(Forced((1, 2, 3, 4), 2), 3, lambda: "r.jsonl:1")
    Traceback (most recent call last):
    core.errors.ProbeError: r.jsonl:1: the prompt (2 tokens) plus the response (2 tokens) is 4 tokens, longer than
    the model's context of 3 tokens (max_position_embeddings); shorten the response or leave the row out
    >>> ids, n = teacher_forced(tokenizer, row.question, row.reference)                  # doctest: +SKIP
    >>> tokenizer.decode(ids[-n:])                                                       # doctest: +SKIP
    'Ah, indeed! The capital is Elmsworth.<|im_end|>\\n'
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.capabilities import TASKS_BY_NAME
from core.errors import DataError, ProbeError
from core.rows import read_dpo_rows, read_test_rows, row_location
from core.schema import DPORow, TestRow, Turn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from access.outcomes import Forced

RESPONSE_POSITIONS: tuple[str, ...] = ("response_mean", "response_last")
RESPONSES: tuple[str, ...] = ("reference", "chosen", "rejected")


def is_response_position(position: str) -> bool:
    return position in RESPONSE_POSITIONS


def _first_object(path: Path) -> dict[str, Any] | None:
    from core.inputs import iter_jsonl

    for _, value in iter_jsonl(path):
        return value if isinstance(value, dict) else None
    return None


def is_dpo_file(path: str | os.PathLike[str]) -> bool:
    """Whether a JSONL file holds DPO rows (its first row has ``prompt``, ``chosen`` and ``rejected``)."""
    first = _first_object(Path(path))
    return first is not None and {"prompt", "chosen", "rejected"} <= set(first)


def read_rows(path: str | os.PathLike[str]) -> list[TestRow]:
    """Test rows, or a DPO file's rows as test rows (``question`` = the prompt;
    chosen and rejected kept in ``extra``)."""
    if not is_dpo_file(path):
        return read_test_rows(path)
    rows = []
    for index, pair in enumerate(read_dpo_rows(path)):
        task = pair.extra.get("task")
        if not isinstance(task, str):
            raise DataError(
                str(path),
                None,
                f"{row_location(index, path)}: a DPO row recorded as a prompt needs a 'task' "
                "(to group it by capability)",
            )
        if task not in TASKS_BY_NAME:
            raise ProbeError(
                f"{row_location(index, path)}: unknown task {task!r}; expected one of the 18 RoleMRC task names"
            )
        rows.append(TestRow(pair.prompt, "", task, {"chosen": pair.chosen, "rejected": pair.rejected}))
    return rows


def prompt_key(turns: Sequence[Turn]) -> str:
    """A prompt's identity for matching a test row to a DPO pair: its turns, roles lowercased."""
    return json.dumps([[t.role, t.content] for t in turns], ensure_ascii=False)


def _pairs_by_prompt(path: Path) -> dict[str, DPORow]:
    return {prompt_key(row.prompt): row for row in read_dpo_rows(path)}


def response_lookup(
    rows: Sequence[TestRow], response: str, responses_file: Path | None, data_file: Path
) -> Callable[[int], str]:
    """``lookup(i)``: the response text for row ``i`` of ``rows``; refusals are one line naming the row and file."""
    if response not in RESPONSES:
        raise ProbeError(f"--response {response!r}: expected one of {', '.join(RESPONSES)}")
    from_data = bool(rows) and response in rows[0].extra and responses_file is None
    if response == "reference":
        if rows and "chosen" in rows[0].extra:
            raise ProbeError(
                f"--data {data_file} is a DPO file, whose rows have no reference; use --response chosen or rejected"
            )
        return lambda i: _non_empty(rows[i].reference, i, data_file, "reference")
    if from_data:
        return lambda i: _non_empty(str(rows[i].extra[response]), i, data_file, response)
    if responses_file is None:
        raise ProbeError(
            f"--response {response} needs the DPO pairs: --responses DPO_FILE (matched to the test rows by prompt), "
            "or --data a DPO file"
        )
    pairs = _pairs_by_prompt(responses_file)

    def lookup(i: int) -> str:
        pair = pairs.get(prompt_key(rows[i].question))
        if pair is None:
            raise ProbeError(
                f"--responses {responses_file}: no DPO pair has the prompt of {row_location(i, data_file)}; "
                "the file must hold a pair for every recorded prompt (was it made for other test rows?)"
            )
        return _non_empty(getattr(pair, response), i, responses_file, response)

    return lookup


def _non_empty(text: str, index: int, source: Path, what: str) -> str:
    if not text.strip():
        raise ProbeError(
            f"{row_location(index, source)}: the {what} response is empty; there are no response tokens to record"
        )
    return text


def check_fits(sequence: Forced, context: int | None, where: Callable[[], str]) -> None:
    """Refuse a prompt plus response longer than the model's ``context`` (a forward would ask for memory by the
    square of its length, and positions the model was never trained on)."""
    if context is None or len(sequence.ids) <= context:
        return
    raise ProbeError(
        f"{where()}: the prompt ({len(sequence.ids) - sequence.n_response} tokens) plus the response "
        f"({sequence.n_response} tokens) is {len(sequence.ids)} tokens, longer than the model's context of {context} "
        "tokens (max_position_embeddings); shorten the response or leave the row out"
    )


def teacher_forced(
    tokenizer: PreTrainedTokenizerBase,
    question: Sequence[Turn],
    response: str,
    where: Callable[[], str] = lambda: "a row",
    context: int | None = None,
) -> tuple[list[int], int]:
    """(token ids of the prompt followed by ``response`` as the assistant's turn, number of response tokens):
    :func:`access.outcomes.forced`, the one rendering of a teacher-forced sequence, within ``context`` tokens."""
    from access.outcomes import forced

    sequence = forced(tokenizer, question, response, where)
    check_fits(sequence, context, where)
    return list(sequence.ids), sequence.n_response
