"""``probe run``: record the pair's activations on a capability's prompts, then rank layers.

Thin wrapper over :func:`probes.recording.record_run` (every option maps to a
:class:`probes.config.RecordConfig` field, which does the validation) followed by
:func:`analysis.analyze_run` on the run directory, whose top discrepancy layers are printed.
With no option but ``--capability`` it records the embedded default pair. Started by
``torchrun --nproc-per-node N -m probe_cli run ...`` it records data-parallel, and only
rank 0 prints and analyses (:mod:`probes.distributed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from core.pair_dirs import PairDirs
from core.paths import check_output_dir
from core.run_dir import Writer
from probe_cli.console import console
from probe_cli.latest import point_latest
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options
from probe_cli.pairs import pair_option, pair_sources
from probes.config import RecordConfig


def register(app: typer.Typer) -> None:
    app.command("run")(run)


@config_options(RecordConfig, required=["capabilities"])
def run(
    settings: ConfigFlags = FROM_CONFIG,
    pair: str = pair_option(),
    analyze: bool = typer.Option(True, "--analyze/--no-analyze", help="Rank discrepancy layers after recording."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Record SFT and DPO activations on a capability's prompts into RUN_DIR/activations.h5 (resumable)."""
    from dataclasses import replace

    base = settings.values["base_dir"]
    auto_base = base is not None and str(base).strip().lower() == "auto"
    config = settings.build(base_dir=None if auto_base else base)
    if config.out_dir is not None:  # after validation, before a pair build, which takes minutes
        check_output_dir(config.out_dir, "--out", writer=Writer.RUN)
    given = config.models
    sources = pair_sources(pair, given.sft_dir, given.dpo_dir, config.data_file, progress=not quiet)
    base = _default_base(pair, given.sft_dir is None, quiet) if auto_base else given.base_dir
    models = PairDirs(sft_dir=sources[0], dpo_dir=sources[1], base_dir=base)
    config = replace(config, models=models, data_file=sources[2])
    from probes.recording import record_run

    result = record_run(config, progress=not quiet)
    if not result.is_main:
        return  # a helper process of a data-parallel run: rank 0 reports and analyses
    point_latest(Path(result.run_dir))
    _print_result(result)
    if analyze:
        from analysis import analyze_run

        _print_top_layers(analyze_run(result.run_dir))


def _default_base(pair: str, from_pair: bool, quiet: bool) -> Path:
    """``--base auto``: the default pair's base model, when the pair recorded is the default pair and it has one."""
    from core.errors import ProbeError
    from probe_cli.pairs import default_pair

    if not from_pair:
        raise ProbeError(
            "--base auto names the default pair's base; with --sft/--dpo give the base model's directory: --base DIR"
        )
    base_dir = default_pair(pair, progress=not quiet).base_dir
    if base_dir is None:
        raise ProbeError(
            f"--base auto: the {pair} pair was built from nothing and has no base model; "
            "give --base DIR or use --pair smollm2"
        )
    return Path(base_dir)


def _print_result(result: Any) -> None:
    from rich.table import Table

    settings = result.settings
    models = "sft, dpo and base" if settings.base_dir else "sft and dpo"
    table = Table(
        title=f"Recorded {models}: {', '.join(settings.hooks)} at the {settings.position} position"
        f"{f' of the {settings.response} response' if settings.response else ''}, "
        f"layers {_span(settings.layers)}, backend {settings.backend}, {settings.dtype} -> {settings.store_dtype}"
    )
    for column in ("capability", "samples in run", "recorded now", "already there"):
        table.add_column(column, justify="left" if column == "capability" else "right")
    for cap, count in result.counts.items():
        table.add_row(cap, str(count), str(result.recorded.get(cap, 0)), str(result.resumed.get(cap, 0)))
    out = console()
    out.print(table)
    out.print(f"run dir: [bold]{result.run_dir}[/bold]  ({result.seconds:.1f} s)")
    for warning in result.warnings:
        console(stderr=True).print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)


def _span(layers: list[int]) -> str:
    if layers and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(str(i) for i in layers)


def _print_top_layers(analysis: Any, shown: int = 5) -> None:
    """The layer window and why (one line per distinct window), then one line per capability and hook: the layers
    whose SFT/DPO discrepancy ranks highest and how stable that top set is under a bootstrap of the prompts; then
    warnings."""
    from probe_cli.commands.analyze import print_warnings, window_line

    out = console()
    bodies = list(analysis.summary.hooks())
    windows = {(cap, hook): window_line(body) for cap, hook, body in bodies}
    shared = len(set(windows.values())) == 1
    for (cap, hook), line in windows.items() if not shared else list(windows.items())[:1]:
        if line:
            out.print(line if shared else f"{cap} / {hook} {line}", markup=False, highlight=False, soft_wrap=True)
    for cap, hook, body in bodies:
        if body.top_layers:
            layers = ", ".join(str(layer) for layer in body.top_layer_numbers()[:shown])
            verdict = f" — {body.stability.verdict()}" if body.stability else ""
            out.print(
                f"{cap} / {hook}: top discrepancy layers {layers}{verdict}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        if body.base:
            out.print(f"{cap} / {hook}: {body.base.describe()}", markup=False, highlight=False, soft_wrap=True)
    print_warnings(analysis, out)
    out.print(f"analysis: {analysis.out_dir}")
