"""The continuous outcomes of every A/B arm: what :mod:`access.outcomes` teacher-forces, for which rows and responses.

For an arm on one model of the pair the *target* is the other model. Its rows are the target capability's rows,
each prompt followed by fixed response tokens (``--responses``, :mod:`probes.outcome_rows`; by default the target's
own greedy responses from its baseline pass), teacher-forced through the edited model once per arm and once per
placebo set (the arm's own placebo edits). Here: those teacher-forced inputs (:func:`outcome_inputs`), and the time
they take (:func:`outcome_seconds`); :mod:`interventions.outcome_runs` measures them for every arm, places each among
its placebo sets' and judges it.

An A/B run keeps each model's greedy token ids in ``responses_<model>.jsonl`` (:class:`core.run_dir.InterventionDir`),
so that ``--outcomes only --responses <that run's folder>`` reuses them without generating.

Example:
    >>> InterventionDir("runs/x").responses("sft").name   # the SFT model's greedy ids, as --responses reads them back
    'responses_sft.jsonl'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from access.outcomes import Forced, Outcomes
from core.errors import ProbeError
from core.pace import OUTCOME_TOKEN_SECONDS, REFERENCE_PARAMETERS
from core.run_dir import DataDir, InterventionDir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from core.schema import TestRow
    from interventions.config import ABConfig


def outcome_seconds(
    passes: int, rows: int, mean_prompt: float, new_tokens: int, pairs: int, parameters: float
) -> float:
    """Estimated seconds of ``passes`` outcome passes over ``rows`` rows (prompts of ``mean_prompt`` tokens, responses
    up to ``new_tokens``) and ``pairs`` DPO pairs, for a model of ``parameters`` parameters (scaled linearly).

    >>> round(outcome_seconds(24, 160, 150.0, 32, 16, REFERENCE_PARAMETERS) / OUTCOME_TOKEN_SECONDS)
    903936
    """
    tokens = (rows + pairs) * mean_prompt + 2 * (rows + pairs) * new_tokens
    return passes * tokens * OUTCOME_TOKEN_SECONDS * parameters / REFERENCE_PARAMETERS


@dataclass
class OutcomeInputs:
    """What the outcomes of one model's arms teacher-force: the KL rows, the reference rows, the DPO pairs."""

    rows: list[Forced]
    reference: list[Forced]
    pairs: list[tuple[Forced, Forced]]
    responses: str  # for reports: greedy, reference, chosen, rejected, or a path


def default_dpo_file(config: ABConfig, data_file: Path) -> Path | None:
    """``--dpo-file``, else ``dpo.jsonl`` beside the test rows (None where there is none)."""
    if config.dpo_file is not None:
        path = Path(config.dpo_file)
        if not path.is_file():
            raise ProbeError(f"--dpo-file {path}: file not found")
        return path
    beside = DataDir(data_file.parent).dpo
    return beside if beside.is_file() else None


def earlier_responses(responses: str, target: str, row_ids: Sequence[int]) -> Path | None:
    """For ``--responses DIR`` (an earlier ``probe intervene`` folder, or its generations file): the file of
    ``target``'s greedy token ids it kept, checked to hold the same rows; None for any other ``--responses``."""
    path = Path(responses)
    folder = path.parent if path.name == InterventionDir(".").generations.name else path
    if not folder.is_dir():
        return None
    files = InterventionDir(folder)
    kept = files.responses(target)
    if not kept.is_file():
        raise ProbeError(
            f"--responses {responses}: {kept} not found (that run kept no greedy responses of the {target} model; "
            "runs before the continuous outcomes, or with --outcomes off, keep none)"
        )
    with kept.open(encoding="utf-8") as handle:
        earlier = [json.loads(line).get("row") for line in handle if line.strip()]
    if earlier != list(row_ids):
        raise ProbeError(
            f"--responses {responses}: that run's {target} responses are for other rows ({len(earlier)}) than this "
            f"run's ({len(row_ids)}): give the same capability, --limit and data"
        )
    return kept


def outcome_inputs(
    config: ABConfig,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    row_ids: Sequence[int],
    data_file: Path,
    target: str,
    greedy: Sequence[Sequence[int]] | None,
) -> OutcomeInputs:
    """The teacher-forced sequences of the arms whose target is ``target`` (``greedy``: its baseline token ids,
    :func:`greedy_ids`)."""
    from probes.outcome_rows import capability_pairs, outcome_rows

    dpo_file = default_dpo_file(config, data_file)
    kept = earlier_responses(config.responses, target, row_ids)
    source = str(kept) if kept is not None else config.responses
    answers = None if greedy is None else [list(ids) for ids in greedy]
    forced_rows = outcome_rows(tokenizer, rows, source, data_file=data_file, greedy=answers, dpo_file=dpo_file)
    reference = (
        forced_rows
        if config.responses == "reference"
        else outcome_rows(tokenizer, rows, "reference", data_file=data_file)
    )
    pairs = (
        capability_pairs(tokenizer, dpo_file, config.capability, limit=config.outcome_pairs, seed=config.seed)
        if dpo_file is not None and config.outcome_pairs
        else []
    )
    what = f"greedy ({target} model's, kept by {kept.parent})" if kept is not None else config.responses
    if config.responses == "greedy":
        what = f"greedy ({target} model's baseline)"
    return OutcomeInputs(forced_rows, reference, pairs, what)


def greedy_ids(ids: Sequence[Sequence[int]], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """A model's greedy responses as the outcomes teacher-force them: its token ids, and for a response that stopped
    at once (no token before the stop token) the tokenizer's EOS, the token that ended it.

    >>> class T: eos_token_id = 2
    >>> greedy_ids([[5, 6], []], T())
    [[5, 6], [2]]
    """
    eos = tokenizer.eos_token_id
    return [list(i) if i else [int(eos)] for i in ids]


def write_greedy(
    folder: Path,
    row_ids: Sequence[int],
    baselines: dict[str, Sequence[Sequence[int]]],
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """Keep each model's greedy token ids of the target rows (``row_ids``, their lines in the data file) in
    ``folder`` (``responses_<model>.jsonl``, one ``{"row", "token_ids"}`` per row, as ``--responses FILE`` reads
    them) for a later ``--outcomes only``."""
    from core.atomic import write_atomic

    for model, ids in baselines.items():
        lines = [
            json.dumps({"row": int(row), "token_ids": answer})
            for row, answer in zip(row_ids, greedy_ids(ids, tokenizer), strict=True)
        ]
        write_atomic(InterventionDir(folder).responses(model), "".join(line + "\n" for line in lines))


def outcomes_for(model: PreTrainedModel, target: PreTrainedModel, inputs: OutcomeInputs) -> Outcomes:
    """The :class:`access.outcomes.Outcomes` of edits to ``model`` against ``target``."""
    return Outcomes(
        model, target, inputs.rows, reference=inputs.reference, pairs=inputs.pairs, responses=inputs.responses
    )
