"""``probe train sft|dpo``: TRL fine-tuning from the command line.

Thin wrappers over :func:`training.sft.train_sft` and :func:`training.dpo.train_dpo`.
Every hyperparameter flag defaults to "unset" so that the recipe, then ``--config``
(JSON/YAML), then the flag decide, in that order. The same command runs under
``accelerate launch --module probe_cli.main train sft ...`` for multi-GPU training.
Ctrl-C stops at the end of the optimizer step and keeps a checkpoint; rerunning the same
command resumes from it (:mod:`training.interrupts`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from core.paths import check_output_dir
from probe_cli.console import console

train_app = typer.Typer(help="Fine-tune with TRL: SFT on sft.jsonl, then DPO on dpo.jsonl.", no_args_is_help=True)

RECIPE_HELP = (
    "Hyperparameter recipe: 'paper' (RoleMRC's scripts; the default for a real model) or 'tiny' "
    "(the default for the embedded tiny base and its children)."
)


def _common(
    recipe: Optional[str],
    learning_rate: Optional[float],
    lr_scheduler: Optional[str],
    warmup_ratio: Optional[float],
    epochs: Optional[float],
    max_steps: Optional[int],
    batch_size: Optional[int],
    grad_accum: Optional[int],
    max_length: Optional[int],
    weight_decay: Optional[float],
    seed: Optional[int],
    bf16: Optional[bool],
    gradient_checkpointing: Optional[bool],
    max_rows: Optional[int],
    overwrite: bool,
) -> dict[str, Any]:
    return dict(
        recipe=recipe,
        learning_rate=learning_rate,
        lr_scheduler=lr_scheduler,
        warmup_ratio=warmup_ratio,
        epochs=epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        grad_accum=grad_accum,
        max_length=max_length,
        weight_decay=weight_decay,
        seed=seed,
        bf16=bf16,
        gradient_checkpointing=gradient_checkpointing,
        max_rows=max_rows,
        overwrite=overwrite or None,
    )


def _run(train: Any, cfg: Any, title: str) -> None:
    from training.progress import rich_reporter
    from training.provenance import read_provenance

    with rich_reporter(console(stderr=True)) as report:
        out = train(cfg, lambda step, total, loss: report(title, step, total))
    record = read_provenance(out)
    assert record is not None  # the trainer writes it last
    stdout = console()
    resumed = record.resumed_from_step
    stdout.print(f"[bold green]{title} done[/] -> {out}" + (f" (resumed from step {resumed})" if resumed else ""))
    stdout.print(
        f"  steps {len(record.losses)}, final loss {record.final_loss}, "
        f"runtime {record.train_summary.get('train_runtime', float('nan')):.1f} s; provenance: {out / 'provenance.json'}"
    )


Recipe = typer.Option(None, "--recipe", help=RECIPE_HELP)
Config = typer.Option(None, "--config", help="JSON or YAML file of option values (flags override it).")
Lr = typer.Option(None, "--learning-rate", "--lr", help="Peak learning rate.")
Sched = typer.Option(None, "--lr-scheduler", help="linear, cosine, constant, constant_with_warmup, cosine_with_min_lr.")
Warm = typer.Option(None, "--warmup-ratio", help="Fraction of steps spent warming up.")
Epochs = typer.Option(None, "--epochs", help="Training epochs (ignored when --max-steps is given).")
Steps = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps.")
Batch = typer.Option(None, "--batch-size", help="Per-device batch size.")
Accum = typer.Option(None, "--grad-accum", help="Gradient accumulation steps.")
MaxLen = typer.Option(None, "--max-length", help="Truncate sequences to this many tokens.")
Decay = typer.Option(None, "--weight-decay")
Seed = typer.Option(None, "--seed", help="Seed for initialisation and data order (same seed, same model on CPU).")
Bf16 = typer.Option(
    None, "--bf16/--no-bf16", help="Default: on with a bf16 GPU, off on CPU (an explicit --bf16 on CPU is an error)."
)
Gc = typer.Option(None, "--gradient-checkpointing/--no-gradient-checkpointing", help="Trade speed for memory.")
Rows = typer.Option(None, "--max-rows", help="Train on the first N rows only.")
Over = typer.Option(False, "--overwrite", help="Replace an existing --out once the new run has finished.")


@train_app.command("sft")
def sft(
    base: Optional[str] = typer.Option(None, "--base", help="'tiny' or a local Hugging Face causal-LM directory."),
    data: Optional[Path] = typer.Option(None, "--data", help="Directory with sft.jsonl (or the file itself)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output model directory."),
    config: Optional[Path] = Config,
    recipe: Optional[str] = Recipe,
    learning_rate: Optional[float] = Lr,
    lr_scheduler: Optional[str] = Sched,
    warmup_ratio: Optional[float] = Warm,
    epochs: Optional[float] = Epochs,
    max_steps: Optional[int] = Steps,
    batch_size: Optional[int] = Batch,
    grad_accum: Optional[int] = Accum,
    max_length: Optional[int] = MaxLen,
    weight_decay: Optional[float] = Decay,
    seed: Optional[int] = Seed,
    bf16: Optional[bool] = Bf16,
    gradient_checkpointing: Optional[bool] = Gc,
    max_rows: Optional[int] = Rows,
    overwrite: bool = Over,
    chat_template: Optional[str] = typer.Option(None, "--chat-template", help="auto, llama3, chatml, or a Jinja file."),
    tiny_layers: Optional[int] = typer.Option(None, "--tiny-layers", help="Layers of the tiny base (default 32)."),
    tiny_width: Optional[int] = typer.Option(None, "--tiny-width", help="Hidden size of the tiny base."),
    tiny_mlp: Optional[int] = typer.Option(None, "--tiny-mlp", help="MLP width of the tiny base."),
) -> None:
    """Supervised fine-tuning (loss on assistant turns only) of BASE on DATA/sft.jsonl."""
    from training.config import SFTRunConfig
    from training.sft import train_sft

    values = _common(
        recipe,
        learning_rate,
        lr_scheduler,
        warmup_ratio,
        epochs,
        max_steps,
        batch_size,
        grad_accum,
        max_length,
        weight_decay,
        seed,
        bf16,
        gradient_checkpointing,
        max_rows,
        overwrite,
    )
    tiny = {
        k: v
        for k, v in (("n_layers", tiny_layers), ("hidden_size", tiny_width), ("intermediate_size", tiny_mlp))
        if v is not None
    }
    cfg = SFTRunConfig.from_sources(
        config, base=base, data=data, out=out, tiny_spec=tiny or None, chat_template=chat_template, **values
    )
    check_output_dir(cfg.out, "--out")
    _run(train_sft, cfg, "sft")


@train_app.command("dpo")
def dpo(
    sft: Optional[Path] = typer.Option(None, "--sft", help="The SFT model directory (policy start and reference)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Directory with dpo.jsonl (or the file itself)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output model directory."),
    config: Optional[Path] = Config,
    recipe: Optional[str] = Recipe,
    learning_rate: Optional[float] = Lr,
    lr_scheduler: Optional[str] = Sched,
    warmup_ratio: Optional[float] = Warm,
    epochs: Optional[float] = Epochs,
    max_steps: Optional[int] = Steps,
    batch_size: Optional[int] = Batch,
    grad_accum: Optional[int] = Accum,
    max_length: Optional[int] = MaxLen,
    weight_decay: Optional[float] = Decay,
    seed: Optional[int] = Seed,
    bf16: Optional[bool] = Bf16,
    gradient_checkpointing: Optional[bool] = Gc,
    max_rows: Optional[int] = Rows,
    overwrite: bool = Over,
    ref: Optional[Path] = typer.Option(None, "--ref", help="Reference model (default: the SFT model)."),
    beta: Optional[float] = typer.Option(None, "--beta", help="DPO beta (paper: 0.1)."),
    loss_type: Optional[str] = typer.Option(None, "--loss-type", help="sigmoid (paper), hinge, ipo or robust."),
    precompute_ref: Optional[bool] = typer.Option(
        None, "--precompute-ref/--no-precompute-ref", help="Compute reference log-probs once before training."
    ),
) -> None:
    """Direct preference optimisation of the SFT model on DATA/dpo.jsonl."""
    from training.config import DPORunConfig
    from training.dpo import train_dpo

    values = _common(
        recipe,
        learning_rate,
        lr_scheduler,
        warmup_ratio,
        epochs,
        max_steps,
        batch_size,
        grad_accum,
        max_length,
        weight_decay,
        seed,
        bf16,
        gradient_checkpointing,
        max_rows,
        overwrite,
    )
    cfg = DPORunConfig.from_sources(
        config,
        sft=sft,
        data=data,
        out=out,
        ref=ref,
        beta=beta,
        loss_type=loss_type,
        precompute_ref=precompute_ref,
        **values,
    )
    check_output_dir(cfg.out, "--out")
    _run(train_dpo, cfg, "dpo")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
