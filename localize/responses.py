"""The teacher-forced rows of each direction: the capability's rows, each followed by the target model's response.

The target of a direction is the model whose values are patched in (SFT for DPO <- SFT, DPO for SFT <- DPO), and,
as in ``probe intervene``'s continuous outcomes, the responses are by default its own greedy ones (``--responses
greedy``, generated here, ``--max-new-tokens`` tokens), else the rows' references, a JSONL file, or the greedy
responses an earlier ``probe intervene`` run kept (its folder). Kept or given responses are held to what
``probe intervene``'s outcomes hold them to (:func:`interventions.outcomes.response_checks`: the rows, the
vocabulary, the fingerprints of the model and tokenizer that wrote them, the context).

Example:
    >>> from localize.config import NAMED_RESPONSES
    >>> NAMED_RESPONSES
    ('greedy', 'reference')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.outcomes import Forced
    from core.schema import TestRow


def forced_rows(
    responses: str,
    target: str,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    row_ids: Sequence[int],
    data_file: Path,
    model_dirs: Mapping[str, Path],
    max_new_tokens: int,
    say: Callable[[str], None],
) -> tuple[list[Forced], str]:
    """The rows with ``target``'s responses (``model`` is the target, for greedy), and how the report names them."""
    from interventions.outcomes import checked_responses, greedy_ids
    from probes.outcome_rows import outcome_rows

    if responses == "greedy":
        ids = greedy_ids(_generate(model, tokenizer, rows, max_new_tokens, say), tokenizer)
        return outcome_rows(tokenizer, rows, "greedy", data_file=data_file, greedy=ids), f"greedy ({target} model's)"
    given = checked_responses(tokenizer, rows, row_ids, responses, target, data_file, model_dirs)
    named = f"greedy ({target} model's, kept by {given.kept.parent})" if given.kept is not None else responses
    return given.rows, named


def _generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    max_new_tokens: int,
    say: Callable[[str], None],
) -> list[list[int]]:
    from access.generation import Generator
    from core.decoding import GenerationConfig

    generator = Generator(model, tokenizer, [row.question for row in rows], GenerationConfig(max_new_tokens))
    done = generator.run()
    say(f"greedy responses: {len(done.ids)} rows, {done.n_tokens} tokens")
    return done.ids
