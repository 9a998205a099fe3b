"""The causal test: how much of the KL gap patching a latent set closes, through the toolkit's own outcomes.

The edited model (``--patch-into``, SFT by default: Minder et al.'s base + chat latents) gets the other model's
share of a latent set at the dictionary's site (:class:`access.latent_edits.LatentPatch`), and
:class:`access.outcomes.Outcomes` teacher-forces the pair's held-out rows of ``--capability`` (their reference
answers) through it: the gap closed is ``1 − mean KL(other ‖ edited) / mean KL(other ‖ unedited)``, with its paired
bootstrap CI over rows, its place among matched random latent sets and its verdict, by the statistics every A/B arm
uses (:func:`interventions.outcomes.outcome_results`: :func:`interventions.stats.continuous_delta`,
:func:`interventions.stats.placebo_compare`, :func:`interventions.evidence.outcome_verdict`). Unlike Minder et al.,
whose patched base activation continues in the chat model, the edited model computes the rest of the forward, as in
every arm of the toolkit; so the **ceiling** arm (the other model's whole activation at the site, an
:class:`access.edits.Patch` of every coordinate) says how much of the gap passes through the site at all, and each
set's share of the ceiling is reported beside it.

The sets (:func:`latent_sets_of`), fixed before any pair was measured:

* crosscoder: the model-specific latents of the other model (DPO-only when patching into SFT), their top and bottom
  halves by relative norm and by Latent Scaling's rank sum (``nu_error`` rank + ``nu_reconstruction`` rank, low
  first: Minder et al.'s ``rank_sum``), each class (DPO-only, SFT-only, shared, other), and every live latent;
* diff-SAE: the top and bottom halves of the live latents by activation mass (firing rate × mean activation), and
  every live latent.

Placebos: for each set size, ``--placebos`` random sets of that size from the live latents (they may share latents
with the set they stand beside), shared by every set of that size.

Example:
    >>> import numpy as np
    >>> sets = latent_sets_of("diff-sae", {"firing": np.array([0.5, 0.0, 0.1, 0.2]),
    ...                                    "mean_activation": np.array([1.0, 0.0, 1.0, 2.0])}, "sft")
    >>> sets
    {'top half by activation mass': (0,), 'bottom half by activation mass': (2,), 'all live latents': (0, 2, 3)}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import rankdata

from core.errors import ProbeError

if TYPE_CHECKING:
    from dictionary.coders import Coder
    from dictionary.records import Prepared

CEILING = "ceiling: the whole activation"
BOOTSTRAP = 2000  # resamples of each gap's CI


def _halves(name: str, members: np.ndarray, key: np.ndarray) -> dict[str, Sequence[int]]:
    """Top (lowest ``key``) and bottom halves of ``members`` by ``key``; none for fewer than two members."""
    if len(members) < 2:
        return {}
    ordered = members[np.argsort(key[members], kind="stable")]
    half = len(ordered) // 2
    return {f"top half by {name}": ordered[:half].tolist(), f"bottom half by {name}": ordered[-half:].tolist()}


def latent_sets_of(kind: str, latents: dict[str, Any], patch_into: str) -> dict[str, tuple[int, ...]]:
    """The named latent sets of the causal test (module doc)."""
    from access.latent_edits import latent_sets

    alive = np.flatnonzero(latents["firing"] > 0)
    if kind != "crosscoder":
        mass = latents["firing"] * latents["mean_activation"]
        sets = _halves("activation mass", alive, -mass)
        return latent_sets({**sets, "all live latents": alive.tolist()})
    labels, x = latents["label"], latents["relative_norm"]
    mine = "dpo_only" if patch_into == "sft" else "sft_only"
    specific = alive[labels[alive] == mine]
    rank_sum = rankdata(np.nan_to_num(latents["nu_error"], nan=np.inf)) + rankdata(
        np.nan_to_num(latents["nu_reconstruction"], nan=np.inf)
    )
    toward = x if patch_into == "sft" else 1.0 - x  # low: the other model's own
    sets = {
        **{f"{mine}: {k}": v for k, v in _halves("relative norm", specific, toward).items()},
        **{f"{mine}: {k}": v for k, v in _halves("Latent Scaling rank sum", specific, rank_sum).items()},
        **{
            f"class {name}": alive[labels[alive] == name].tolist()
            for name in ("dpo_only", "sft_only", "shared", "other")
        },
        "all live latents": alive.tolist(),
    }
    return latent_sets(sets)


def heldout_rows(capability: str, limit: int | None) -> tuple[list[Any], Any]:
    """(rows, file) of the capability in the toolkit's held-out split (written on first use)."""
    from core.capabilities import parse_capability
    from core.rows import group_by_capability, read_test_rows
    from data_synthesis.heldout.files import heldout_test_file

    path = heldout_test_file()
    rows = [row for _, row in group_by_capability(read_test_rows(path), [parse_capability(capability)]).popitem()[1]]
    if not rows:
        raise ProbeError(f"--capability {capability}: the held-out split {path} has no row of it")
    return rows[:limit] if limit else rows, path


def causal_table(prepared: Prepared, coder: Coder, latents: dict[str, Any], progress: bool) -> dict[str, Any]:
    """Every set's arm and the placebo sets through one :meth:`access.outcomes.Outcomes.arms` call; the table."""
    from access.edits import Patch
    from access.latent_edits import LatentPatch, codec_from
    from access.outcomes import Outcomes
    from access.pair import load_pair
    from access.units import Neuron, NeuronSet
    from probes.outcome_rows import outcome_rows

    config = prepared.config
    rows, path = heldout_rows(config.capability, config.causal_rows)
    pair = load_pair(config.models.sft, config.models.dpo, device=config.device)
    model, source = (pair.sft, pair.dpo) if config.patch_into == "sft" else (pair.dpo, pair.sft)
    forced = outcome_rows(pair.tokenizer, rows, "reference", data_file=path)
    outcomes = Outcomes(model, source, forced, reference=forced, responses="reference")
    codec = codec_from(config.kind, coder.weights(), norm_limit=float(latents["norm_limit"]))
    pool = tuple(int(j) for j in np.flatnonzero(latents["firing"] > 0))
    sets = latent_sets_of(config.kind, latents, config.patch_into)
    site = (config.hook, prepared.layer)
    arms = {name: LatentPatch(*site, s, codec, config.patch_into, source, name, pool) for name, s in sets.items()}
    sizes = sorted({len(s) for name, s in sets.items() if name != "all live latents" or len(s) < len(pool)})
    placebos = {
        n: [
            LatentPatch(*site, p, codec, config.patch_into, source, "random", pool)
            for p in LatentPatch(*site, tuple(pool[:n]), codec, config.patch_into, source, "x", pool).random_sets(
                config.placebos, config.seed
            )
        ]
        for n in sizes
    }
    ceiling = Patch(
        NeuronSet([Neuron(prepared.layer, c) for c in range(codec.width)], hook=config.hook),
        source=source,
        source_name="dpo" if config.patch_into == "sft" else "sft",
    )
    edits = [ceiling, *arms.values(), *(p for group in placebos.values() for p in group)]
    results = _run_arms(outcomes, edits, progress)
    return _table(sets, results, sizes, config, prepared, len(rows))


def _run_arms(outcomes: Any, edits: list[Any], progress: bool) -> list[Any]:
    """Every arm in one call (shared batches), with progress per batch of rows (all arms of a batch at once)."""
    from core.progress import Stage

    bar = (
        Stage(f"causal test: {len(edits)} arms", outcomes.n_batches, unit="batches", step="batch") if progress else None
    )

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar.total = max(bar.total, total)
            bar.update(done - bar.done)

    try:
        return list(outcomes.arms([[edit] for edit in edits], report))
    finally:
        if bar is not None:
            bar.close()


def _table(
    sets: dict[str, tuple[int, ...]], results: list[Any], sizes: list[int], config: Any, prepared: Any, n_rows: int
) -> dict[str, Any]:
    ceiling, arms = results[0], results[1 : 1 + len(sets)]
    rest = results[1 + len(sets) :]
    by_size = {n: rest[i * config.placebos : (i + 1) * config.placebos] for i, n in enumerate(sizes)}
    ceiling_gap = _outcomes(ceiling, [], config.seed)
    rows = [_row(CEILING, prepared.shape.d_model, ceiling_gap, None)]
    for (name, members), arm in zip(sets.items(), arms, strict=True):
        gap = _outcomes(arm, by_size.get(len(members), []), config.seed)
        rows.append(_row(name, len(members), gap, ceiling_gap["gap_closed"].delta))
    return {
        "patch_into": config.patch_into,
        "target": "dpo" if config.patch_into == "sft" else "sft",
        "capability": config.capability,
        "rows_teacher_forced": n_rows,
        "responses": "reference",
        "placebo_sets_per_size": config.placebos,
        "arms": rows,
    }


def _outcomes(arm: Any, placebos: list[Any], seed: int) -> dict[str, Any]:
    from interventions.outcome_runs import outcome_results

    return {o.outcome: o for o in outcome_results(arm, placebos, n_bootstrap=BOOTSTRAP, seed=seed)}


def _row(name: str, size: int, outcomes: dict[str, Any], ceiling: float | None) -> dict[str, Any]:
    gap, kl = outcomes["gap_closed"], outcomes["kl"]
    share = gap.delta / ceiling if ceiling is not None and ceiling != 0.0 and np.isfinite(gap.delta) else None
    placebo = (
        None
        if gap.placebo is None
        else {"percentile": gap.placebo.percentile, "p": gap.placebo.p_empirical, "sets": len(gap.placebo.deltas)}
    )
    return {
        "set": name,
        "latents": size,
        "gap_closed": gap.delta,
        "ci": [gap.ci_low, gap.ci_high],
        "kl_unedited": kl.before,
        "kl_edited": kl.after,
        "share_of_ceiling": share,
        "placebo": placebo,
        "verdict": gap.verdict,
    }
