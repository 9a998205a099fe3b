"""What ``probe dictionary`` writes and prints: ``OUT/summary_<kind>.json``, ``OUT/latents_<kind>.json``,
``OUT/dictionary_<kind>.html`` (:class:`core.run_dir.DictionaryDir`: a second kind keeps the first's).

The summary holds the text mix and token count, the site, the dictionary's size, its held-out FVE per model, L0
and dead latents; for the crosscoder the relative-norm histogram, the latent classes beside the null dictionary's,
and Latent Scaling's verdicts on the model-specific latents; the planted pair's alignment where the pair is planted;
the causal table (:mod:`dictionary.causal`). The latents' file has one row per latent (relative norm, class, firing
rate, β ratios and verdict). The HTML page shows the same, then the latent cards (:mod:`dictionary.cards`).

Example:
    >>> histogram_rows([0, 3, 1], [0.0, 0.5, 0.9, 1.0])[1]
    '<tr><td>0.50-0.90</td><td>3</td><td><div class=bar style="width:300px"></div></td></tr>'
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.atomic import write_atomic
from core.run_dir import DictionaryDir
from dictionary.measures import HeldOut, classes, evaluate, latent_scaling, relative_norm, summary_of

if TYPE_CHECKING:
    from dictionary.coders import Coder
    from dictionary.records import DictionaryResult, Prepared

SCALING_TOKENS = 200_000  # training tokens Latent Scaling's sums run over
HISTOGRAM_BINS = 20
NORM_GUARD = 2.0  # x the largest held-out activation norm: beyond it a token is one the dictionary never saw


def evaluate_and_report(prepared: Prepared, coders: dict[str, Coder], progress: bool) -> DictionaryResult:
    from dictionary.records import DictionaryResult, to_jsonable

    config, store = prepared.config, prepared.store
    shards = list(range(len(prepared.plan)))
    coder = coders[config.kind]
    held = evaluate(coder, store, shards, config.kind, top_latents=config.cards)
    summary: dict[str, Any] = {
        "kind": config.kind,
        "site": {"hook": config.hook, "layer": prepared.layer, "n_layers": prepared.shape.n_layers},
        "models": {"sft": str(config.models.sft), "dpo": str(config.models.dpo)},
        "text": {
            "mix": prepared.mix.by_source(),
            "description": prepared.mix.describe(),
            "tokens": prepared.mix.tokens(),
            "held_out_tokens": prepared.mix.tokens(True),
        },
        "dictionary": {
            "latents": coder.latents,
            "k": coder.k,
            "epochs": config.epochs,
            "batch_size": config.batch_size,
        },
        "held_out": summary_of(held),
    }
    latents: dict[str, Any] = {"firing": held.firing, "mean_activation": held.mean_activation}
    limit = NORM_GUARD * held.max_norm  # the latent patch leaves tokens beyond it alone (access.latent_edits)
    order, directions = (
        _crosscoder(prepared, coders, held, summary, latents)
        if config.kind == "crosscoder"
        else _sae(coder, held, summary)
    )
    summary["planted"] = _planted(prepared, directions)
    if config.causal:
        from dictionary.causal import causal_table

        summary["causal"] = causal_table(prepared, coder, {**latents, "norm_limit": limit}, progress)
    facts = _facts(coder, held, latents, order[: config.cards])
    writes = coder.weights().decoder[-1].numpy()  # what each latent writes in DPO (the diff-SAE: the difference)
    files = _write(prepared, summary, latents, facts, writes)
    return DictionaryResult(prepared.out, to_jsonable(summary), files)


def _crosscoder(
    prepared: Prepared, coders: dict[str, Coder], held: HeldOut, summary: dict[str, Any], latents: dict[str, Any]
) -> tuple[list[int], tuple[np.ndarray, str]]:
    from dictionary.controls import class_counts

    coder = coders["crosscoder"]
    norms = coder.weights().decoder.norm(dim=-1).numpy()
    x = relative_norm(norms[0], norms[1])
    alive = held.firing > 0
    counts, bins = class_counts(x, alive), np.histogram(x[alive], bins=HISTOGRAM_BINS, range=(0.0, 1.0))
    scaling = latent_scaling(
        coder, prepared.store, list(range(len(prepared.plan))), np.where(x < 0.5, "dpo", "sft"), SCALING_TOKENS
    )
    verdicts = scaling.verdicts()
    labels = classes(x)
    latents.update(
        relative_norm=x,
        norms=norms.T,
        label=labels,
        alive=alive,
        nu_error=scaling.nu_error,
        nu_reconstruction=scaling.nu_reconstruction,
        scaling=verdicts,
    )
    specific = alive & np.isin(labels, ["dpo_only", "sft_only"])
    summary["classes"] = counts
    summary["relative_norm_histogram"] = {"edges": bins[1].tolist(), "counts": bins[0].tolist()}
    summary["latent_scaling"] = {
        "tokens": scaling.tokens,
        "rule": "artefact when nu_error >= 0.5 or nu_reconstruction >= 0.5; unreliable outside [-0.1, 2]",
        "model_specific": {v: int((verdicts[specific] == v).sum()) for v in ("specific", "artefact", "unreliable")},
    }
    if "null" in coders:
        null_held = evaluate(coders["null"], prepared.store, list(range(len(prepared.plan))), "null")
        null_norms = coders["null"].weights().decoder.norm(dim=-1).numpy()
        summary["null"] = {
            "classes": class_counts(relative_norm(null_norms[0], null_norms[1]), null_held.firing > 0),
            "held_out": summary_of(null_held),
        }
    order = [int(i) for i in np.argsort(x, kind="stable") if alive[i]]
    dpo_only = np.flatnonzero(alive & (labels == "dpo_only"))
    chosen = dpo_only if len(dpo_only) else np.asarray(order[:16], dtype=int)
    change = (coder.weights().decoder[1] - coder.weights().decoder[0]).numpy()[chosen]
    what = "DPO-only latents (d_dpo − d_sft)" if len(dpo_only) else "the 16 most DPO-leaning live latents (no DPO-only)"
    return order, (change, what)


def _sae(coder: Coder, held: HeldOut, summary: dict[str, Any]) -> tuple[list[int], tuple[np.ndarray, str]]:
    mass = held.firing * held.mean_activation
    order = [int(i) for i in np.argsort(-mass, kind="stable") if held.firing[i] > 0]
    summary["note"] = "a diff-SAE has one decoder: no relative norms, classes, Latent Scaling or null dictionary"
    return order, (coder.weights().decoder[0].numpy()[order], "live diff-SAE latents")


def _planted(prepared: Prepared, directions: tuple[np.ndarray, str]) -> Any:
    from dictionary.controls import planted_alignment

    config = prepared.config
    return planted_alignment(
        config.models.dpo, config.models.sft, config.hook, prepared.layer, directions[0], directions[1], config.seed
    )


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based rank of each value, lowest first (ties in index order)."""
    out = np.empty(len(values), dtype=int)
    out[np.argsort(values, kind="stable")] = np.arange(1, len(values) + 1)
    return out


def _facts(coder: Coder, held: HeldOut, latents: dict[str, Any], chosen: list[int]) -> list[Any]:
    """What each chosen latent's card says. A crosscoder latent's values are its decoder norms in SFT and DPO; a
    diff-SAE latent writes into the difference only, so its SFT value is 0 and its DPO value its decoder norm."""
    from dictionary.cards import LatentFacts

    norms = coder.weights().decoder.norm(dim=-1).numpy()
    crosscoder = "relative_norm" in latents
    firing = _ranks(-held.firing)
    if crosscoder:
        order, name = _ranks(latents["relative_norm"]), "relative norm (DPO-leaning first)"
    else:
        order, name = _ranks(-held.firing * held.mean_activation), "activation mass"
    return [
        LatentFacts(
            latent=j,
            relative_norm=float(latents["relative_norm"][j]) if crosscoder else float("nan"),
            norms=(float(norms[0, j]), float(norms[1, j])) if crosscoder else (0.0, float(norms[0, j])),
            ranks={name: int(order[j]), "held-out firing rate": int(firing[j])},
            top=held.top.get(j, []),
        )
        for j in chosen
    ]


def _write(
    prepared: Prepared, summary: dict[str, Any], latents: dict[str, Any], facts: list[Any], writes: np.ndarray
) -> list[Path]:
    from dictionary.cards import cards
    from dictionary.records import to_jsonable

    kind, coder_dirs = prepared.config.kind, prepared.config.models
    written = []
    rows = [{key: to_jsonable(value[j]) for key, value in latents.items()} for j in range(len(latents["firing"]))]
    files = DictionaryDir(prepared.out)
    for path, body in ((files.summary(kind), summary), (files.latents(kind), rows)):
        write_atomic(path, json.dumps(to_jsonable(body), indent=1, sort_keys=True, allow_nan=False))
        written.append(path)
    drawn = []
    if facts:
        directions = np.stack([writes[f.latent] for f in facts])
        drawn = cards(
            facts, directions, coder_dirs.dpo, prepared.config.hook, prepared.layer, prepared.mix, prepared.tokenizer
        )
    write_atomic(files.page(kind), page(summary, drawn, prepared.config.hook))
    return [*written, files.page(kind)]


def histogram_rows(counts: list[int], edges: list[float]) -> list[str]:
    return [
        f"<tr><td>{edges[i]:.2f}-{edges[i + 1]:.2f}</td><td>{n}</td>"
        f'<td><div class=bar style="width:{min(600, n * 100)}px"></div></td></tr>'
        for i, n in enumerate(counts)
    ]


_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.bar{background:#4a7;height:10px}"
    ".card{border:1px solid #aaa;margin:1em 0;padding:.5em}.note{color:#555}.up{color:#060}.down{color:#900}"
)


def causal_table_parts(causal: dict[str, Any]) -> tuple[list[Any], list[Any], str]:
    """(columns, rows, title) of the causal table in the toolkit's cells (:mod:`interventions.cells`), for the
    terminal and the page alike."""
    from interventions.cells import CI, DELTA, PLACEBO, VERDICT, Placement, Row, extra
    from interventions.stats import PairedDelta

    rows = []
    for arm in causal["arms"]:
        low, high = (v if v is not None else float("nan") for v in arm["ci"])
        gap = arm["gap_closed"] if arm["gap_closed"] is not None else float("nan")
        p = arm["placebo"]
        placement = Placement(p["percentile"], p["p"], p["sets"]) if p else None
        share = arm["share_of_ceiling"]
        cells = {
            "set": arm["set"],
            "latents": str(arm["latents"]),
            "share": "—" if share is None else f"{100 * share:.0f}%",
        }
        effect = PairedDelta(causal["rows_teacher_forced"], 0.0, gap, gap, low, high, float("nan"))
        rows.append(Row(effect, binary=False, placebo=placement, verdict=arm["verdict"], extra=cells))
    columns = [
        extra("set"),
        extra("latents", numeric=True),
        DELTA.named("gap closed"),
        CI,
        extra("share", "of ceiling", True),
        PLACEBO,
        VERDICT,
    ]
    title = (
        f"KL gap closed, patching {causal['patch_into']} with {causal['target']}'s latents "
        f"({causal['rows_teacher_forced']} held-out {causal['capability']} rows, reference answers)"
    )
    return columns, rows, title


def _classes_html(summary: dict[str, Any]) -> str:
    real, null = summary["classes"], (summary.get("null") or {}).get("classes", {})
    head = "<tr><th>class</th><th>crosscoder</th><th>null (SFT against SFT)</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{real.get(name)}</td><td>{null.get(name, '—')}</td></tr>"
        for name in ("dpo_only", "sft_only", "shared", "other", "model_specific", "alive")
    )
    return f"<table>{head}{body}</table>"


def page(summary: dict[str, Any], drawn: list[Any], hook: str) -> str:
    """The HTML page: the summary's figures, the histogram, the classes beside the null's, the causal table, then
    the cards."""
    from analysis.explain_html import card_html
    from dictionary.records import to_jsonable
    from interventions.cells import html_table

    def block(value: Any) -> str:
        return f"<pre>{html.escape(json.dumps(to_jsonable(value), indent=1))}</pre>"

    site = summary["site"]
    body = [
        f"<!doctype html><html><head><meta charset=utf-8><title>dictionary</title><style>{_STYLE}</style></head><body>",
        f"<h1>A {html.escape(summary['kind'])} of the SFT/DPO difference at {html.escape(hook)} layer "
        f"{site['layer']}</h1>",
        f"<p>{html.escape(summary['text']['description'])}</p>",
        "<h2>Held-out figures</h2>",
        block(summary.get("held_out")),
    ]
    if "relative_norm_histogram" in summary:
        hist = summary["relative_norm_histogram"]
        body += [
            "<h2>Relative decoder norm of the live latents (0: DPO-only, 1: SFT-only)</h2><table>",
            *histogram_rows(hist["counts"], hist["edges"]),
            "</table><h2>Latent classes (diffing-toolkit's thresholds)</h2>",
            _classes_html(summary),
            "<h2>Latent Scaling</h2>",
            block(summary.get("latent_scaling")),
        ]
    if summary.get("planted"):
        body += ["<h2>Planted units</h2>", block(summary["planted"])]
    if summary.get("causal"):
        columns, rows, title = causal_table_parts(summary["causal"])
        body += [f"<h2>{html.escape(title)}</h2>", html_table(columns, rows)]
    body += ["<h2>Latent cards</h2>", *(card_html(card, hook, "relative norm") for card in drawn), "</body></html>"]
    return "\n".join(body)
