"""Per-capability compliance of an SFT/DPO pair: greedy generation + a judge.

This is how the toolkit checks that a pair is worth probing: both models answer the
test split with :func:`access.shared_generation.generate_unedited` (the same rendering the
probes and interventions use), the rule judge scores each answer on the row's
capabilities, and the two models are compared per capability with paired counts.
Uncertainty is reported rather than hidden: each rate carries a Wilson 95% interval,
and the SFT-vs-DPO difference an exact McNemar test on the rows where they disagree.

A row *complies* when every capability it is judged on scores 1 (undecided scores are
counted separately and excluded).

Past one process (:func:`evaluate_pair_shared`): the rows are cut into batches by one plan (the rows in prompt-length
order, ``batch_size`` at a time, no batch mixing rows of another), so a batch's responses are the same whoever
generates it. A process decodes its batches of one model in one call: batches whose caches fit the budget take their
decode steps together (:mod:`access.joint_steps`: one forward a step, attention per batch), which changes no row's
arithmetic but its matrix products' row count: on a CPU in float32, oneDNN's packed products give a row the same bits
at every count from 2 to 200 (SmolLM2's shapes, 2026-11-30; one shape rounds a lone row otherwise), and elsewhere the
kernels may round a row otherwise at another count. The batches still missing, model after model, are dealt in turn:
the *k*-th belongs to rank ``k % N`` (three models of three batches each give two ranks five and four); every finished
batch is kept in a journal (:func:`journal_dir`) until rank 0 has judged the whole set, so a killed run resumes where
it stopped (a process keeps each batch as its last row ends), with any number of processes. The
processes are a :class:`Share`: ``probes.distributed.World`` under torchrun / accelerate launch (the CLI passes it;
this room sits below probes and does not import it), :data:`ONE_PROCESS` otherwise.

When the untouched base model is judged too, the result carries the discrimination gate of
:mod:`data_synthesis.heldout.gate` (each model within 10-90% on every capability), and rows
that name a ``group`` (the held-out split's levels and priority variants) get a per-group
compliance table.

Example:
    >>> mcnemar_from_scores([1, 1, 0, None], [0, 0, 0, 1])   # two rows SFT complies on and DPO does not
    0.5
    >>> batch_plan([30, 10, 20, 10], batch_size=2)   # row indices by prompt length, two at a time
    [[1, 3], [2, 0]]
    >>> deal([[0, 1, 2], [0, 1, 2], [2]], owns=lambda k: k % 2 == 0)   # rank 0 of 2; model 3 has only batch 2 left
    [[0, 2], [1], [2]]
    >>> config = PairEvalConfig(sft_dir="runs/sft", dpo_dir="runs/dpo", test_file="data/test.jsonl")  # doctest: +SKIP
    >>> result = evaluate_pair(config)                                                     # doctest: +SKIP
    >>> result.rates("sft")["multi_turn"]                                                  # doctest: +SKIP
    0.93
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from access.generation import Generator
from access.packed_linear import prepacked
from access.shared_generation import generate_unedited
from core.capabilities import ALL_CAPABILITIES, capabilities_of
from core.decoding import EVAL_GENERATION, GenerationConfig
from core.errors import Interrupted, ProbeError
from core.pace import batched_seconds, parameter_count, sized
from core.progress import stage
from core.records import to_json
from core.rows import read_test_rows, row_location
from core.schema import TestRow
from core.stats import discordant, mcnemar_p, paired_bootstrap_ci, wilson
from data_synthesis.heldout.gate import discrimination_gate
from judging import Judge, Verdict, make_judge
from training.eval_config import PairEvalConfig
from training.eval_rows import EvalRow, GroupRow

T = TypeVar("T")


class Share(Protocol):
    """The processes that share an evaluation: ``probes.distributed.World`` satisfies it (see the module doc)."""

    @property
    def is_main(self) -> bool: ...

    def owns(self, index: int) -> bool: ...

    def agree(self, step: Callable[[], T]) -> T: ...

    def on_main(self, step: Callable[[], T]) -> T: ...

    def barrier(self) -> None: ...


@dataclass(frozen=True)
class _OneProcess:
    """One process does all the work."""

    is_main: bool = True

    def owns(self, index: int) -> bool:
        return index >= 0  # every batch

    def agree(self, step: Callable[[], T]) -> T:
        return step()

    def on_main(self, step: Callable[[], T]) -> T:
        return step()

    def barrier(self) -> None:
        return None


ONE_PROCESS: Share = _OneProcess()


@dataclass
class ModelEvaluation:
    """One model's scores: ``scores[i][cap]`` for row i (0/1/None) and its responses."""

    model_dir: str
    responses: list[str]
    scores: list[dict[str, int | None]]

    def rate(self, capability: str) -> tuple[int, int]:
        """(passed, judged) for one capability."""
        values = [score for s in self.scores if (score := s.get(capability)) is not None]
        return sum(values), len(values)

    def overall(self) -> tuple[int, int]:
        """(rows complying on all their judged capabilities, rows with at least one judged capability)."""
        judged = [[v for v in s.values() if v is not None] for s in self.scores]
        judged = [j for j in judged if j]
        return sum(all(v == 1 for v in j) for j in judged), len(judged)

    def undecided(self) -> int:
        return sum(v is None for s in self.scores for v in s.values())


@dataclass
class PairEvaluation:
    test_file: str
    task_counts: dict[str, int]
    judge: str
    generation: dict[str, Any]
    sft: ModelEvaluation
    dpo: ModelEvaluation
    table: list[EvalRow] = field(default_factory=list)
    base: ModelEvaluation | None = None  # the untouched model the SFT started from, when given
    warnings: list[str] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)  # {"holds": bool | None, "line": str, "failures": [...]}
    groups: list[GroupRow] = field(default_factory=list)  # per-group compliance, where rows name a group

    def rates(self, which: str) -> dict[str, float | None]:
        return {row.capability: row.rate(which) for row in self.table}

    def save(self, path: str | Path) -> Path:
        """Write the result to ``path``; when that fails (a full disk), keep it in a temporary folder or the home
        folder and say where in one :class:`ProbeError`, so the generations are not lost."""
        from core.atomic import write_atomic

        p = Path(path)
        body = json.dumps(to_json(self), indent=1)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(p, body)
        except OSError as exc:
            kept = _keep_elsewhere(body, p.name)
            where = (
                f"the full result was kept in {kept}: move it where you want it"
                if kept
                else "no other place could be written either; the table above is the result"
            )
            raise ProbeError(
                f"--out {p}: cannot write ({exc.strerror or exc}); any old file there is as it was; {where}"
            ) from None
        return p


def _keep_elsewhere(body: str, name: str) -> Path | None:
    """``body`` written to a new file in the temporary folder or the home folder, whichever takes it;
    None if neither."""
    import tempfile

    for folder in (Path(tempfile.gettempdir()), Path.home()):
        try:
            fd, kept = tempfile.mkstemp(prefix=f"probe-eval-{Path(name).stem}-", suffix=".json", dir=folder)
        except OSError:
            continue
        try:
            with open(fd, "w", encoding="utf-8") as handle:
                handle.write(body)
            return Path(kept)
        except OSError:
            Path(kept).unlink(missing_ok=True)
    return None


def judged_pairs(a: Sequence[int | None], b: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """The paired 0/1 outcomes where both sides were judged (a ``None`` on either side drops the pair)."""
    pairs = np.array(
        [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None], dtype=np.int64
    ).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def mcnemar_from_scores(a: Sequence[int | None], b: Sequence[int | None]) -> float:
    """Exact two-sided McNemar p-value for paired 0/1 outcomes (pairs with a None skipped)."""
    return float(mcnemar_p(*discordant(*judged_pairs(a, b))))


def _row(
    name: str, s: tuple[int, int], d: tuple[int, int], a: Sequence[int | None], b: Sequence[int | None]
) -> EvalRow:
    sr = s[0] / s[1] if s[1] else float("nan")
    dr = d[0] / d[1] if d[1] else float("nan")
    return EvalRow(
        capability=name,
        n=s[1],
        sft_pass=s[0],
        sft_rate=sr,
        sft_ci=wilson(*s),
        dpo_pass=d[0],
        dpo_rate=dr,
        dpo_ci=wilson(*d),
        delta=dr - sr,
        delta_ci=paired_bootstrap_ci(*judged_pairs(a, b)),
        mcnemar_p=mcnemar_from_scores(a, b),
    )


def comparison_table(sft: ModelEvaluation, dpo: ModelEvaluation) -> list[EvalRow]:
    """One row per capability present in the scores, plus ``overall``: rates with Wilson intervals, DPO − SFT with
    its paired bootstrap interval (:func:`core.stats.paired_bootstrap_ci`) and the exact McNemar p."""
    table = []
    for cap in ALL_CAPABILITIES:
        key = cap.value
        if not any(key in s for s in sft.scores):
            continue
        table.append(
            _row(key, sft.rate(key), dpo.rate(key), [s.get(key) for s in sft.scores], [s.get(key) for s in dpo.scores])
        )
    table.append(
        _row(
            "overall",
            sft.overall(),
            dpo.overall(),
            [_complies(s) for s in sft.scores],
            [_complies(s) for s in dpo.scores],
        )
    )
    return table


def add_base_columns(table: list[EvalRow], base: ModelEvaluation, sft: ModelEvaluation) -> list[EvalRow]:
    """The rows with the untouched model's rate, its Wilson interval, SFT - base with its paired bootstrap interval
    and the exact McNemar p of that pair."""
    return [_with_base(row, base, sft) for row in table]


def _with_base(row: EvalRow, base: ModelEvaluation, sft: ModelEvaluation) -> EvalRow:
    key = row.capability
    if key == "overall":
        passed, n = base.overall()
        a, b = [_complies(s) for s in base.scores], [_complies(s) for s in sft.scores]
    else:
        passed, n = base.rate(key)
        a, b = [s.get(key) for s in base.scores], [s.get(key) for s in sft.scores]
    rate = passed / n if n else float("nan")
    return replace(
        row,
        base_pass=passed,
        base_rate=rate,
        base_ci=wilson(passed, n),
        sft_minus_base=row.sft_rate - rate,
        sft_minus_base_ci=paired_bootstrap_ci(*judged_pairs(a, b)),
        base_mcnemar_p=mcnemar_from_scores(a, b),
    )


def _complies(scores: dict[str, int | None]) -> int | None:
    judged = [v for v in scores.values() if v is not None]
    return int(all(v == 1 for v in judged)) if judged else None


def select_rows(rows: Sequence[TestRow], max_rows: int | None) -> list[TestRow]:
    """At most ``max_rows`` rows, taken round-robin over tasks in file order so every task is represented."""
    if max_rows is None or max_rows >= len(rows):
        return list(rows)
    by_task: dict[str, list[TestRow]] = {}
    for row in rows:
        by_task.setdefault(row.task, []).append(row)
    picked: list[TestRow] = []
    depth = 0
    while len(picked) < max_rows:
        for task_rows in by_task.values():
            if depth < len(task_rows) and len(picked) < max_rows:
                picked.append(task_rows[depth])
        depth += 1
    return picked


def _verdict_scores(verdict: Verdict, row: TestRow) -> dict[str, int | None]:
    return {cap.value: verdict.scores.get(cap) for cap in capabilities_of(row.task)}


def evaluate_model(
    model_dir: str | Path,
    rows: Sequence[TestRow],
    judge: Judge,
    generation: GenerationConfig = EVAL_GENERATION,
    where: Callable[[int], str] | None = None,
    flag: str = "--model",
) -> ModelEvaluation:
    """Greedy responses of one model directory to ``rows``, judged; ``where(i)`` names row ``i`` in rendering errors
    and ``flag`` names the directory in load errors."""
    from core.models import load_causal_lm

    model, tokenizer = load_causal_lm(Path(model_dir), flag, eval_mode=True)
    responses = generate_unedited(Generator(model, tokenizer, [row.question for row in rows], generation, where)).texts
    verdicts = judge.judge(rows, responses)
    return ModelEvaluation(
        str(model_dir), responses, [_verdict_scores(v, r) for v, r in zip(verdicts, rows, strict=True)]
    )


def _row_namer(test_file: str | Path, all_rows: Sequence[TestRow], rows: Sequence[TestRow]) -> Callable[[int], str]:
    """Names picked row ``i`` by its file and line (the picked rows are a subset of the file, in another order)."""
    index = {id(row): k for k, row in enumerate(all_rows)}

    return lambda i: row_location(index[id(rows[i])], test_file)


def _check_rendering(
    model_dir: str | Path, rows: Sequence[TestRow], where: Callable[[int], str], flag: str = "--sft"
) -> list[int]:
    """Render every prompt with the model's tokenizer before any weights load: a refused row, or a chat template that
    fails or renders nothing, fails in a second. Returns the prompts' lengths in tokens."""
    from core.chat import encode_conversations
    from core.models import load_tokenizer

    encoded = encode_conversations(
        load_tokenizer(model_dir, flag), [row.question for row in rows], add_generation_prompt=True, where=where
    )
    return [len(ids) for ids in encoded]


def pair_warnings(sft_dir: str | Path, dpo_dir: str | Path, base_dir: str | Path | None = None) -> list[str]:
    """A warning for each pair of the models that is one directory given twice:
    their comparison is 0 by construction."""
    from core.models import same_directory

    given = (("--base", base_dir), ("--sft", sft_dir), ("--dpo", dpo_dir))
    named = [(flag, path) for flag, path in given if path is not None]
    return [
        f"{a} and {b} are the same model ({pa}): every {b.lstrip('-').upper()}-{a.lstrip('-').upper()} difference "
        f"will be 0 by construction; pass the other model as {b}"
        for i, (a, pa) in enumerate(named)
        for b, pb in named[i + 1 :]
        if same_directory(pa, pb)
    ]


def evaluate_pair(
    config: PairEvalConfig, *, judge: Judge | None = None, progress: Callable[[str], None] | None = None
) -> PairEvaluation:
    """Judge both models (and the untouched base of ``config.models``, if given) on the (optionally subsampled) test
    split, in this process."""
    result = evaluate_pair_shared(config, ONE_PROCESS, judge=judge, progress=progress)
    if result is None:  # pragma: no cover - one process is always rank 0
        raise RuntimeError("one process returned no result")
    return result


def batch_plan(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """The rows' batches, the same for any number of processes: row indices in prompt-length order (ties in row
    order), ``batch_size`` at a time."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def journal_dir(key: str) -> Path:
    """Where the finished batches of the evaluation ``key`` wait until rank 0 has judged them all."""
    from core.home import probe_home

    return probe_home() / "journal" / "eval" / key[:16]


@dataclass(frozen=True)
class _Prepared:
    rows: list[TestRow]
    where: Callable[[int], str]
    batches: list[list[int]]
    models: list[tuple[str, str | Path]]
    lengths: list[int]  # each row's rendered prompt, in SFT tokens


def _prepare(config: PairEvalConfig) -> _Prepared:
    """The picked rows, checked: every prompt renders with every model's tokenizer."""
    all_rows = read_test_rows(config.test_file)
    rows = select_rows(all_rows, config.max_rows)
    if not rows:
        raise ProbeError(f"--test {config.test_file}: the file has no rows")
    where = _row_namer(config.test_file, all_rows, rows)
    dirs = config.models
    lengths: list[int] = []
    for flag, path in (("--sft", dirs.sft), ("--dpo", dirs.dpo), ("--base", dirs.base)):
        if path is not None:  # a broken directory or template fails now, not after the other models' generations
            found = _check_rendering(path, rows, where, flag)
            lengths = lengths or found  # the plan follows the SFT tokenizer's lengths, whoever generates
    models = [("base", dirs.base)] if dirs.base is not None else []
    batches = batch_plan(lengths, config.generation.batch_size)
    return _Prepared(rows, where, batches, [*models, ("sft", dirs.sft), ("dpo", dirs.dpo)], lengths)


def _journal_key(config: PairEvalConfig, prepared: _Prepared, device: str) -> str:
    """What the kept responses depend on: the rows, the plan, the generation, each model's weights, the device kind."""
    from core.provenance import file_sha256, weights_sha256

    body = {
        "test": file_sha256(config.test_file),
        "rows": [row.question for row in prepared.rows],
        "batches": prepared.batches,
        "generation": asdict(config.generation),
        "models": {name: weights_sha256(path) for name, path in prepared.models},
        "device": device.split(":")[0],
    }
    return hashlib.sha256(json.dumps(to_json(body), sort_keys=True).encode()).hexdigest()


def evaluate_pair_shared(
    config: PairEvalConfig,
    share: Share,
    *,
    device: str = "cpu",
    judge: Judge | None = None,
    progress: Callable[[str], None] | None = None,
) -> PairEvaluation | None:
    """:func:`evaluate_pair` with the batches of each model dealt over ``share``'s processes and kept in the journal;
    rank 0 judges and returns the result, the other ranks None. Ctrl-C keeps the finished batches."""
    prepared = share.agree(lambda: _prepare(config))
    journal = share.on_main(lambda: journal_dir(_journal_key(config, prepared, device)))
    try:
        pending = share.on_main(
            lambda: [_missing(journal / name, len(prepared.batches)) for name, _ in prepared.models]
        )
        for (name, path), mine in zip(prepared.models, deal(pending, share.owns), strict=True):
            if progress and share.is_main:
                progress(name)
            _generate_share(name, path, mine, prepared, config.generation, journal / name, share, device)
        share.barrier()
    except KeyboardInterrupt:
        raise Interrupted(f"evaluation stopped; {kept_batches(journal)}; rerun the same command to resume") from None
    result = share.on_main(lambda: _judged(config, prepared, journal, judge))
    return result if share.is_main else None


def kept_batches(journal: Path) -> str:
    """'N finished batches are kept in JOURNAL' (what a stopped evaluation leaves for the next)."""
    count = len(list(journal.glob("*/*.json"))) if journal.is_dir() else 0
    return f"{count} finished batches are kept in {journal}"


def deal(pending: Sequence[Sequence[int]], owns: Callable[[int], bool]) -> list[list[int]]:
    """Per model, the batches this rank generates: the ones still missing, model after model, dealt in turn
    (``owns(k)``: whether the *k*-th dealt is this rank's)."""
    mine, dealt = [], 0
    for batches in pending:
        mine.append([batch for k, batch in enumerate(batches, start=dealt) if owns(k)])
        dealt += len(batches)
    return mine


def _batch_file(kept: Path, k: int) -> Path:
    """Where batch ``k`` of one model is kept in its journal folder ``kept``."""
    return kept / f"{k:06d}.json"


def _missing(kept: Path, n_batches: int) -> list[int]:
    """The batches of one model not yet in its journal folder ``kept``."""
    return [k for k in range(n_batches) if not _batch_file(kept, k).exists()]


def _generate_share(
    name: str,
    path: str | Path,
    mine: list[int],
    prepared: _Prepared,
    generation: GenerationConfig,
    kept: Path,
    share: Share,
    device: str,
) -> None:
    """Batches ``mine`` of one model, decoded in one call (their decode steps together), each kept in its journal
    folder ``kept`` as its last row ends (every rank loads the model together, those with no batch of it loading
    nothing)."""
    from core.atomic import write_atomic
    from core.models import load_causal_lm

    loaded = share.agree(
        lambda: load_causal_lm(Path(path), f"--{name}", device=device, eval_mode=True) if mine else None
    )
    if loaded is None:
        return
    model, tokenizer = loaded
    kept.mkdir(parents=True, exist_ok=True)
    estimate = generation_estimate(
        path, [[prepared.lengths[i] for i in prepared.batches[k]] for k in mine], generation, device
    )
    with (
        stage(
            f"generating ({name})", len(mine), unit="batches", step="batch", estimate_s=estimate, enabled=share.is_main
        ) as bar,
        prepacked(model),  # once for every batch (each batch's decoding would pack and drop them again)
    ):
        rows = [i for k in mine for i in prepared.batches[k]]
        generator = Generator(
            model, tokenizer, [prepared.rows[i].question for i in rows], generation, _in_batch(prepared.where, rows)
        )
        starts = list(itertools.accumulate((len(prepared.batches[k]) for k in mine), initial=0))
        parts = [range(start, end) for start, end in itertools.pairwise(starts)]

        def keep(index: int, responses: list[str]) -> None:  # as each batch's last row ends
            batch = mine[index]
            write_atomic(
                _batch_file(kept, batch), json.dumps({"rows": prepared.batches[batch], "responses": responses})
            )
            bar.update(1)

        generate_unedited(generator, parts, keep)


def generation_estimate(
    model_dir: str | Path, batches: Sequence[Sequence[int]], generation: GenerationConfig, device: str
) -> float | None:
    """Seconds one model should take to generate for ``batches`` of prompts (each its prompts' lengths in tokens),
    every batch decoding to the token limit, at the measured CPU pace (:func:`core.pace.batched_seconds`); None off
    CPU and for a model so small that per-layer overhead sets its pace (:func:`core.pace.sized`): its bar says its
    estimate after a batch."""
    parameters = parameter_count(model_dir)
    if not sized(device, parameters):
        return None
    return batched_seconds(batches, generation.max_new_tokens, parameters=parameters)


def _in_batch(where: Callable[[int], str], batch: list[int]) -> Callable[[int], str]:
    """Names prompt ``j`` of a batch by its row's file and line."""
    return lambda j: where(batch[j])


def _responses(journal: Path, name: str, prepared: _Prepared) -> list[str]:
    """One model's responses in row order, from the journal."""
    responses = [""] * len(prepared.rows)
    for k, batch in enumerate(prepared.batches):
        path = _batch_file(journal / name, k)
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ProbeError(f"{path}: a finished batch is missing or damaged ({exc}); rerun to generate it") from None
        if kept.get("rows") != batch:
            raise ProbeError(f"{path}: holds other rows than batch {k} of this evaluation; delete it and rerun")
        for i, text in zip(batch, kept["responses"], strict=True):
            responses[i] = text
    return responses


def _judged(config: PairEvalConfig, prepared: _Prepared, journal: Path, judge: Judge | None) -> PairEvaluation:
    """Rank 0: every model's responses judged and compared; then the journal goes."""
    rows, dirs = prepared.rows, config.models
    judge = judge or make_judge("rules")
    results = {}
    for name, path in prepared.models:
        responses = _responses(journal, name, prepared)
        verdicts = judge.judge(rows, responses)
        scores = [_verdict_scores(v, r) for v, r in zip(verdicts, rows, strict=True)]
        results[name] = ModelEvaluation(str(path), responses, scores)
    shutil.rmtree(journal, ignore_errors=True)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.task] = counts.get(row.task, 0) + 1
    table = comparison_table(results["sft"], results["dpo"])
    if "base" in results:
        table = add_base_columns(table, results["base"], results["sft"])
    gate = discrimination_gate({m: {c.value: r.rate(c.value) for c in ALL_CAPABILITIES} for m, r in results.items()})
    return PairEvaluation(
        str(config.test_file),
        counts,
        getattr(judge, "name", type(judge).__name__),
        asdict(config.generation),
        results["sft"],
        results["dpo"],
        table,
        results.get("base"),
        pair_warnings(dirs.sft, dirs.dpo, dirs.base),
        {"holds": gate.holds, "line": gate.line(), "failures": gate.failures},
        group_table(rows, results),
    )


def group_table(rows: Sequence[TestRow], results: dict[str, ModelEvaluation]) -> list[GroupRow]:
    """Row compliance per ``group`` named in the rows (held-out levels and priority variants), for each model, with
    Wilson intervals; empty when no row names a group."""
    groups = sorted({str(g) for row in rows if (g := row.extra.get("group"))})
    table = []
    for group in groups:
        picked = [i for i, row in enumerate(rows) if row.extra.get("group") == group]
        columns: dict[str, Any] = {}
        for name, result in results.items():
            judged = [c for i in picked if (c := _complies(result.scores[i])) is not None]
            columns[f"{name}_rate"] = sum(judged) / len(judged) if judged else float("nan")
            columns[f"{name}_ci"] = wilson(sum(judged), len(judged))
        table.append(GroupRow(group=group, n=len(picked), **columns))
    return table
