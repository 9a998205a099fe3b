"""``probe dictionary``: a crosscoder or diff-SAE of the SFT/DPO difference at one layer, its controls and causal test.

Thin wrapper over :func:`dictionary.run.dictionary_run`: every option is a :class:`dictionary.config.DictionaryConfig`
field. Without ``--sft``/``--dpo`` it takes the embedded pair (``--pair``) and that pair's chat data. Started by
``torchrun --nproc-per-node N -m probe_cli dictionary ...`` it harvests data-parallel and rank 0 reports. Prints
the text mix, the held-out figures, the latent classes beside the null dictionary's, the planted alignment where the
pair is planted, and the causal table; writes ``OUT/summary_<kind>.json``, ``OUT/latents_<kind>.json`` and
``OUT/dictionary_<kind>.html``.
"""

from __future__ import annotations

from typing import Any

import typer

from dictionary.config import DictionaryConfig
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options
from probe_cli.pairs import pair_option


def register(app: typer.Typer) -> None:
    app.command("dictionary")(dictionary)


@config_options(DictionaryConfig)
def dictionary(
    settings: ConfigFlags = FROM_CONFIG,
    pair: str = pair_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Learn a dictionary of the SFT/DPO difference at one layer (resumable), its null, controls and causal test."""
    from dataclasses import replace

    from core.errors import ProbeError
    from core.pair_dirs import PairDirs
    from dictionary.run import dictionary_run
    from probe_cli.console import console

    config = settings.build()
    given = config.models
    if (given.sft_dir is None) != (given.dpo_dir is None):
        raise ProbeError("give both --sft and --dpo, or neither (to use the embedded default pair)")
    if given.sft_dir is None:
        from probe_cli.pairs import default_pair

        built = default_pair(pair, progress=not quiet)
        chat = config.chat_data if config.chat_data is not None else built.data_dir
        config = replace(config, models=PairDirs(sft_dir=built.sft_dir, dpo_dir=built.dpo_dir), chat_data=chat)
    result = dictionary_run(config, progress=not quiet)
    if not result.is_main:
        return  # a helper process of a data-parallel harvest: rank 0 reports
    print_summary(result.summary, console())
    for path in result.files:
        console().print(f"wrote: {path}", soft_wrap=True, highlight=False)


def print_summary(summary: dict[str, Any], out: Any) -> None:
    site, held = summary["site"], summary["held_out"]
    out.print(
        f"{summary['kind']} at {site['hook']} layer {site['layer']} of {site['n_layers']}: "
        f"{summary['dictionary']['latents']} latents, k {summary['dictionary']['k']}",
        highlight=False,
    )
    out.print(f"text: {summary['text']['description']}", highlight=False, soft_wrap=True)
    fve = ", ".join(f"{v:.3f}" for v in held["fve"])
    out.print(
        f"held out ({held['held_out_tokens']:,} tokens): FVE {fve}, L0 {held['l0']:.1f}, dead {held['dead']} of "
        f"{summary['dictionary']['latents']}",
        highlight=False,
    )
    if "classes" in summary:
        real, null = summary["classes"], (summary.get("null") or {}).get("classes")
        line = (
            f"model-specific latents: {real['model_specific']} (DPO-only {real['dpo_only']}, SFT-only "
            f"{real['sft_only']}; shared {real['shared']}) of {real['alive']} live"
        )
        if null:
            line += f"; null dictionary (SFT against SFT): {null['model_specific']} of {null['alive']} live"
        out.print(line, highlight=False, soft_wrap=True)
        verdicts = summary["latent_scaling"]["model_specific"]
        out.print(f"Latent Scaling on the model-specific latents: {verdicts}", highlight=False)
    if summary.get("planted"):
        p = summary["planted"]
        if "planted_median" in p:
            out.print(
                f"planted units: median best |cos| {p['planted_median']:.3f} against random units' "
                f"{p['random_median']:.3f} (95th percentile {p['random_p95']:.3f}); "
                f"{100 * p['share_above_random_p95']:.0f}% of {len(p['units'])} above it ({p['latents']})",
                highlight=False,
                soft_wrap=True,
            )
    if summary.get("causal"):
        out.print(causal_rich_table(summary["causal"]))


def causal_rich_table(causal: dict[str, Any]) -> Any:
    """The causal table through the toolkit's cell formatting (:mod:`interventions.cells`)."""
    from dictionary.report import causal_table_parts
    from interventions.cells import terminal

    columns, rows, title = causal_table_parts(causal)
    return terminal(columns, rows, title)
