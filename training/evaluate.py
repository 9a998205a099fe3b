"""Per-capability compliance of an SFT/DPO pair: greedy generation + a judge.

This is how the toolkit checks that a pair is worth probing: both models answer the
test split with :func:`access.shared_generation.generate_unedited` (the same rendering the
probes and interventions use), the rule judge scores each answer on the row's
capabilities, and the two models are compared per capability with paired counts.
Uncertainty is reported rather than hidden: each rate carries a Wilson 95% interval,
and the SFT-vs-DPO difference an exact McNemar test on the rows where they disagree.

A row *complies* when every capability it is judged on scores 1 (undecided scores are
counted separately and excluded).

When the untouched base model is judged too, the result carries the discrimination gate of
:mod:`data_synthesis.heldout.gate` (each model within 10-90% on every capability), and rows
that name a ``group`` (the held-out split's levels and priority variants) get a per-group
compliance table.

Example:
    >>> mcnemar_from_scores([1, 1, 0, None], [0, 0, 0, 1])   # two rows SFT complies on and DPO does not
    0.5
    >>> config = PairEvalConfig(sft_dir="runs/sft", dpo_dir="runs/dpo", test_file="data/test.jsonl")  # doctest: +SKIP
    >>> result = evaluate_pair(config)                                                     # doctest: +SKIP
    >>> result.rates("sft")["multi_turn"]                                                  # doctest: +SKIP
    0.93
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from access.generation import Generator
from access.shared_generation import generate_unedited
from core.capabilities import ALL_CAPABILITIES, capabilities_of
from core.decoding import EVAL_GENERATION, GenerationConfig
from core.errors import ProbeError
from core.judges import Judge, Verdict, make_judge
from core.records import to_json
from core.rows import read_test_rows, row_location
from core.schema import TestRow
from core.stats import discordant, mcnemar_p, paired_bootstrap_ci, wilson
from data_synthesis.heldout.gate import discrimination_gate
from training.eval_config import PairEvalConfig


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
    table: list[dict[str, Any]] = field(default_factory=list)
    base: ModelEvaluation | None = None  # the untouched model the SFT started from, when given
    warnings: list[str] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)  # {"holds": bool | None, "line": str, "failures": [...]}
    groups: list[dict[str, Any]] = field(default_factory=list)  # per-group compliance, where rows name a group

    def rates(self, which: str) -> dict[str, float]:
        return {row["capability"]: row[f"{which}_rate"] for row in self.table}

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
) -> dict[str, Any]:
    sr = s[0] / s[1] if s[1] else float("nan")
    dr = d[0] / d[1] if d[1] else float("nan")
    return {
        "capability": name,
        "n": s[1],
        "sft_pass": s[0],
        "sft_rate": sr,
        "sft_ci": wilson(*s),
        "dpo_pass": d[0],
        "dpo_rate": dr,
        "dpo_ci": wilson(*d),
        "delta": dr - sr,
        "delta_ci": paired_bootstrap_ci(*judged_pairs(a, b)),
        "mcnemar_p": mcnemar_from_scores(a, b),
    }


def comparison_table(sft: ModelEvaluation, dpo: ModelEvaluation) -> list[dict[str, Any]]:
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


def add_base_columns(table: list[dict[str, Any]], base: ModelEvaluation, sft: ModelEvaluation) -> None:
    """Add the untouched model's rate, its Wilson interval, SFT - base with its paired bootstrap interval and the exact
    McNemar p of that pair."""
    for row in table:
        key = row["capability"]
        if key == "overall":
            passed, n = base.overall()
            a, b = [_complies(s) for s in base.scores], [_complies(s) for s in sft.scores]
        else:
            passed, n = base.rate(key)
            a, b = [s.get(key) for s in base.scores], [s.get(key) for s in sft.scores]
        rate = passed / n if n else float("nan")
        row.update(
            base_pass=passed,
            base_rate=rate,
            base_ci=wilson(passed, n),
            sft_minus_base=row["sft_rate"] - rate,
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
) -> None:
    """Render every prompt with the model's tokenizer before any weights load: a refused row, or a chat template that
    fails or renders nothing, fails in a second."""
    from core.chat import encode_conversations
    from core.models import load_tokenizer

    encode_conversations(
        load_tokenizer(model_dir, flag), [row.question for row in rows], add_generation_prompt=True, where=where
    )


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
    split."""
    all_rows = read_test_rows(config.test_file)
    rows = select_rows(all_rows, config.max_rows)
    if not rows:
        raise ProbeError(f"--test {config.test_file}: the file has no rows")
    where = _row_namer(config.test_file, all_rows, rows)
    dirs = config.models
    for flag, path in (("--sft", dirs.sft), ("--dpo", dirs.dpo), ("--base", dirs.base)):
        if path is not None:  # a broken directory or template fails now, not after the other models' generations
            _check_rendering(path, rows, where, flag)
    judge = judge or make_judge("rules")
    results = {}
    models = [("base", dirs.base)] if dirs.base is not None else []
    for name, path in [*models, ("sft", dirs.sft), ("dpo", dirs.dpo)]:
        if progress:
            progress(name)
        results[name] = evaluate_model(path, rows, judge, config.generation, where, flag=f"--{name}")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.task] = counts.get(row.task, 0) + 1
    table = comparison_table(results["sft"], results["dpo"])
    if "base" in results:
        add_base_columns(table, results["base"], results["sft"])
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


def group_table(rows: Sequence[TestRow], results: dict[str, ModelEvaluation]) -> list[dict[str, Any]]:
    """Row compliance per ``group`` named in the rows (held-out levels and priority variants), for each model, with
    Wilson intervals; empty when no row names a group."""
    groups = sorted({str(g) for row in rows if (g := row.extra.get("group"))})
    table = []
    for group in groups:
        picked = [i for i, row in enumerate(rows) if row.extra.get("group") == group]
        entry: dict[str, Any] = {"group": group, "n": len(picked)}
        for name, result in results.items():
            judged = [c for i in picked if (c := _complies(result.scores[i])) is not None]
            entry[f"{name}_rate"] = sum(judged) / len(judged) if judged else float("nan")
            entry[f"{name}_ci"] = wilson(sum(judged), len(judged))
        table.append(entry)
    return table
