"""The page of neuron cards (``explain_<capability>_<hook>.html``) and the agreement figure.

Plain HTML with a few lines of CSS, no script: it opens offline and prints. Every text that
came from a model or a data file (tokens, prompts) is escaped. :func:`card_html` renders one
card alone, for the heatmap notebook.

Example:
    >>> from IPython.display import HTML                          # doctest: +SKIP
    >>> HTML(card_html(card, "mlp_post"))                         # doctest: +SKIP
"""

from __future__ import annotations

import html
import math
from typing import Any

from analysis.explain_record import ExplainRecord, NeuronCard
from analysis.readout import ReadOut, shown
from analysis.weight_change import LABELS

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
.card{border:1px solid #888;border-radius:6px;padding:.6em 1em;margin:1em 0}.up{color:#a11}.down{color:#116}
code{background:#f4f4f4;padding:0 2px}.note{color:#555;font-size:.92em}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def num(value: float, digits: int = 4) -> str:
    """A number for a table: ``n/a`` when not finite.

    >>> num(0.000123456), num(float("nan"))
    ('0.0001235', 'n/a')
    """
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def tokens_html(readout: ReadOut, k: int | None = None) -> str:
    """Two lines: promoted tokens (with their logit effect) and suppressed ones."""
    up = ", ".join(f"<code>{_e(shown(t.token))}</code> {num(t.logit, 3)}" for t in readout.promoted[:k])
    down = ", ".join(f"<code>{_e(shown(t.token))}</code> {num(t.logit, 3)}" for t in readout.suppressed[:k])
    return f"<div class=up>↑ {up}</div><div class=down>↓ {down}</div>"


def card_html(card: NeuronCard, hook: str, metric: str = "") -> str:
    """One unit's card as an HTML fragment."""
    ranks = "".join(f"<tr><th>{_e(name)}</th><td>{rank}</td></tr>" for name, rank in card.ranks.items())
    change = "".join(
        f"<tr><th>{_e(LABELS.get(t, t))}</th><td>{' · '.join(f'{_e(k)} {num(v, 3)}' for k, v in parts.items())}</td>"
        "</tr>"
        for t, parts in card.weight_change.items()
    )
    prompts = "".join(
        f"<tr><th>{_e(model)}</th><td>{''.join(_hit(h) for h in hits)}</td></tr>"
        for model, hits in card.top_prompts.items()
    )
    return (
        f"<div class=card><h3>layer {card.layer} · unit {card.unit} <small>({_e(hook)})</small></h3>"
        f"<p>Δ {_e(metric)} {num(card.delta)} [95% CI {num(card.ci_low)}, {num(card.ci_high)}], p {num(card.p, 3)}, "
        f"q {num(card.q, 3)}; SFT {num(card.sft)}, DPO {num(card.dpo)}</p>"
        f"<table><tr><th colspan=2>rank in the window</th></tr>{ranks}</table>"
        f"<table><tr><th colspan=2>weight change ‖Δw‖/‖w‖ (total, then parts)</th></tr>{change}</table>"
        f"<p><b>writes</b> (through the final norm and the unembedding)</p>{tokens_html(card.readout)}"
        "<table><tr><th colspan=2>most active on (row, sample, task: SFT → DPO value, prompt end)</th>"
        f"</tr>{prompts}</table></div>"
    )


def _hit(hit: Any) -> str:
    return (
        f"<div>#{hit.row} (sample {hit.sample_id}, {_e(hit.task)}): {num(hit.sft, 3)} → {num(hit.dpo, 3)} "
        f"<span class=note>{_e(hit.distinct_tail)}</span> <span class=note>[end: {_e(hit.prompt_tail[-60:])}]</span>"
        "</div>"
    )


def page_html(record: ExplainRecord) -> str:
    """The whole page: provenance, agreement, mean-difference read-out, then every card."""
    title = f"Neuron cards · {record.capability} · {record.hook}"
    models = "".join(
        f"<tr><th>{_e(role)}</th><td>{_e(m['dir'])}</td><td><code>{_e(m['weights_sha256'][:16])}…</code></td></tr>"
        for role, m in record.models.items()
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in record.notes)
    parts = [
        f"<!doctype html><html><head><meta charset=utf-8><title>{_e(title)}</title><style>{_STYLE}</style></head>"
        "<body>",
        f"<h1>{_e(title)}</h1>"
        f"<p>run <code>{_e(record.run_dir)}</code>; metric {_e(record.metric)} in the "
        f"{_e(str(record.analysis_settings.get('basis', 'global')))} basis, N={record.n_samples}, "
        f"position {_e(record.position)}; window: {_e(record.window.describe())}</p>",
        f"<table><tr><th>model</th><th>directory</th><th>weights_sha256</th></tr>{models}</table>",
        f"<p class=note>Read-outs use the {_e(record.lens.get('model'))} model's final norm and unembedding "
        f"(<code>{_e(record.lens.get('unembedding'))}</code>"
        f"{', tied embeddings' if record.lens.get('tied_embeddings') else ''}); "
        f"they ignore {_e(record.lens.get('ignores'))}. Token scores are logit effects per unit of the direction, "
        "before 1/rms.</p>",
        f"<ul class=note>{notes}</ul>" if notes else "",
        _agreement_html(record),
        _mean_difference_html(record),
        "<h2>Cards</h2>",
        *(card_html(card, record.hook, record.metric) for card in record.cards),
        "</body></html>",
    ]
    return "\n".join(parts)


def _agreement_html(record: ExplainRecord) -> str:
    out = ["<h2>Weight change against activation discrepancy</h2>"]
    for agreement in record.agreement:
        rows = "".join(
            f"<tr><td>{a.layer}</td><td>{num(a.spearman, 3) if a.spearman is not None else 'n/a'}</td>"
            f"<td>{num(a.p_permutation, 3)}</td><td>{num(a.q, 3)}</td></tr>"
            for a in agreement.layers
        )
        top = agreement.top
        out.append(
            f"<h3>{_e(LABELS.get(agreement.transition, agreement.transition))}</h3>"
            f"<p>top {top.k} by |Δ| and by weight change share {top.overlap} units (chance {num(top.expected, 3)}, "
            f"hypergeometric p {num(top.p_hypergeometric, 3)})</p>"
            f"<table><tr><th>layer</th><th>Spearman ρ</th><th>permutation p</th><th>BH q</th></tr>{rows}</table>"
        )
    return "".join(out)


def _mean_difference_html(record: ExplainRecord) -> str:
    rows = "".join(
        f"<tr><td>{r.layer}</td><td>{num(r.norm, 3)}</td><td>{tokens_html(r.readout, 8)}</td></tr>"
        for r in record.mean_difference
    )
    return (
        f"<h2>DPO − SFT mean difference of {_e(record.capability)}, read through the lens</h2>"
        f"<table><tr><th>layer</th><th>‖mean Δ‖</th><th>pushes up / down</th></tr>{rows}</table>"
    )


def agreement_figure(record: ExplainRecord) -> Any:
    """Per window layer, Spearman's ρ between weight change and |Δ| (one bar series per transition)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for agreement in record.agreement:
        fig.add_trace(
            go.Bar(
                x=[a.layer for a in agreement.layers],
                y=[a.spearman for a in agreement.layers],
                name=LABELS.get(agreement.transition, agreement.transition),
                customdata=[a.p_permutation for a in agreement.layers],
                hovertemplate="layer %{x}: ρ %{y:.3f}, permutation p %{customdata:.3g}<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"Spearman ρ(weight change, |Δ {record.metric}|) per layer · {record.capability} · {record.hook}"
        f"<br><sup>window: {record.window.describe()}</sup>",
        xaxis_title="layer",
        yaxis_title="Spearman ρ",
        yaxis_range=[-1, 1],
        barmode="group",
        height=450,
        width=1000,
    )
    return fig
