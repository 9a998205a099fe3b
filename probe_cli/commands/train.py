"""``probe train sft|dpo``: TRL fine-tuning from the command line.

Thin wrappers over :func:`training.sft.train_sft` and :func:`training.dpo.train_dpo`.
Every hyperparameter flag defaults to "unset" so that the recipe, then ``--config``
(JSON/YAML), then the flag decide, in that order. The same command runs under
``accelerate launch --module probe_cli.main train sft ...`` for multi-GPU training.
Ctrl-C stops at the end of the optimizer step and keeps a checkpoint; rerunning the same
command resumes from it (:mod:`training.interrupts`).
"""

from __future__ import annotations

from typing import Any

import typer

from core.config_file import Range
from core.paths import check_output_dir
from core.run_dir import Writer
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, count_option
from training.config import DPORunConfig, SFTRunConfig

train_app = typer.Typer(help="Fine-tune with TRL: SFT on sft.jsonl, then DPO on dpo.jsonl.", no_args_is_help=True)


def _run(train: Any, cfg: Any, title: str) -> None:
    from training.progress import rich_reporter
    from training.provenance import read_provenance

    with rich_reporter(console(stderr=True)) as report:
        out = train(cfg, lambda step, total, _loss: report(title, step, total))
    record = read_provenance(out)
    assert record is not None  # the trainer writes it last
    stdout = console()
    resumed = record.resumed_from_step
    stdout.print(f"[bold green]{title} done[/] -> {out}" + (f" (resumed from step {resumed})" if resumed else ""))
    runtime = record.train_summary.get("train_runtime", float("nan"))
    stdout.print(
        f"  steps {len(record.losses)}, final loss {record.final_loss}, "
        f"runtime {runtime:.1f} s; provenance: {out / 'provenance.json'}"
    )


@train_app.command("sft")
@config_options(SFTRunConfig)
def sft(
    settings: ConfigFlags = FROM_CONFIG,
    tiny_layers: int | None = count_option(None, "--tiny-layers", "Layers of the tiny base.", Range(1, 256)),
    tiny_width: int | None = count_option(None, "--tiny-width", "Hidden size of the tiny base.", Range(1, 65_536)),
    tiny_mlp: int | None = count_option(None, "--tiny-mlp", "MLP width of the tiny base.", Range(1, 262_144)),
) -> None:
    """Supervised fine-tuning (loss on assistant turns only) of BASE on DATA/sft.jsonl."""
    from training.sft import train_sft

    tiny = {
        k: v
        for k, v in (("n_layers", tiny_layers), ("hidden_size", tiny_width), ("intermediate_size", tiny_mlp))
        if v is not None
    }
    cfg = settings.build(merge=["tiny_spec"], tiny_spec=tiny or None)
    check_output_dir(cfg.out, "--out", writer=Writer.TRAIN, replaced=cfg.overwrite)
    _run(train_sft, cfg, "sft")


@train_app.command("dpo")
@config_options(DPORunConfig)
def dpo(settings: ConfigFlags = FROM_CONFIG) -> None:
    """Direct preference optimisation of the SFT model on DATA/dpo.jsonl."""
    from training.dpo import train_dpo

    cfg = settings.build()
    check_output_dir(cfg.out, "--out", writer=Writer.TRAIN, replaced=cfg.overwrite)
    _run(train_dpo, cfg, "dpo")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
