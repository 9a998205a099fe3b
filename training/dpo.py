"""Direct preference optimisation of an SFT model with TRL's ``DPOTrainer``.

The policy starts from the SFT directory and the frozen reference is the same SFT model
(TRL keeps an internal copy), exactly as the paper's ``dpo_tuning_demo.py``; ``--ref``
names a different reference, which must share the tokenizer. Rows are conversational
``prompt``/``chosen``/``rejected``, so the prompt is rendered with the model's own chat
template and generation prompt, the same rendering that evaluation and probing use.

Example:
    >>> cfg = DPORunConfig(sft="/no/runs/sft", data="/no/data", out="/no/runs/dpo", max_steps=10)
    >>> cfg.recipe, cfg.beta, cfg.learning_rate   # what was not given comes from the paper's recipe
    ('paper', 0.1, 4e-07)
    >>> train_dpo(cfg)   # the cheap checks come first: nothing is loaded
    Traceback (most recent call last):
    core.errors.ProbeError: --data /no/data: no such file or directory
    >>> cfg = DPORunConfig(sft="runs/sft", data="data/", out="runs/dpo", max_steps=10)   # doctest: +SKIP
    >>> train_dpo(cfg)                                                                  # doctest: +SKIP
    PosixPath('runs/dpo')
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core.errors import Interrupted, ProbeError
from core.models import (
    check_model_dir,
    check_same_tokenizer,
    check_vocab_fits,
    load_causal_lm,
    load_model,
    load_tokenizer,
)
from core.provenance import file_sha256, weights_sha256
from training.config import DPORunConfig
from training.data import dpo_records, resolve_data_file, to_dataset
from training.interrupts import kept_message, run_fingerprint, run_training
from training.provenance import read_provenance, write_provenance
from training.runner import (
    check_output,
    dist_state,
    finish_output,
    partial_dir,
    quiet_environment,
    silence_printer,
    start_output,
    trainer_kwargs,
)
from training.sft import check_rows_render

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
    from trl.trainer.dpo_trainer import DPOTrainer

    from training.callbacks import LossRecorder

ProgressFn = Callable[[int, int, float | None], None]


@dataclass
class DPOSession:
    config: DPORunConfig
    trainer: DPOTrainer
    work: Path
    data_file: Path
    parent: dict[str, Any]
    recorder: LossRecorder
    fingerprint: str = ""  # of everything a checkpoint depends on (training.interrupts)
    resume: tuple[Path, int] | None = None  # (checkpoint, step) an interrupted run left


def _load_ref(config: DPORunConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel | None:
    if config.ref is None:
        return None
    ref_model, ref_tokenizer = load_causal_lm(config.ref, "--ref")
    check_same_tokenizer(tokenizer, ref_tokenizer, f"--sft {config.sft} and --ref {config.ref}")
    return ref_model


def prepare_dpo(config: DPORunConfig, progress: ProgressFn | None = None) -> DPOSession:
    """Validate everything and build the trainer; nothing is trained yet."""
    data_file = resolve_data_file(config.data, "dpo")  # cheap checks first: no torch import before they pass
    records = dpo_records(data_file, config.max_rows)
    check_model_dir(config.sft, "--sft")
    if config.ref is not None:
        check_model_dir(config.ref, "--ref")
    check_output(config.out, config.overwrite, {"--data": data_file, "--sft": config.sft, "--ref": config.ref})
    quiet_environment()
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    from training.callbacks import LossRecorder, StepProgress

    tokenizer = load_tokenizer(config.sft, "--sft")  # the template and the rows are checked before any weight loads
    if not tokenizer.chat_template:
        raise ProbeError(
            f"--sft {config.sft}: the tokenizer has no chat template; train it with `probe train sft` first"
        )
    check_rows_render(tokenizer, [r["prompt"] + r["chosen"] + r["rejected"] for r in records], data_file)
    model = load_model(config.sft, "--sft")
    check_vocab_fits(model, tokenizer, f"--sft {config.sft}")
    ref_model = _load_ref(config, tokenizer)
    state = dist_state()
    is_main = state.is_main_process
    fingerprint = run_fingerprint(config.to_dict(), data_file, [config.sft, config.ref], state.num_processes)
    work, resume = start_output(config.out, config.overwrite, is_main, fingerprint)
    try:
        assert config.beta is not None  # the recipe fills it in when the config is made
        args = DPOConfig(
            **trainer_kwargs(config, work),
            beta=config.beta,
            loss_type=[config.loss_type],
            precompute_ref_log_probs=config.precompute_ref,
        )
        recorder = LossRecorder()
        callbacks: list[TrainerCallback] = [recorder] + ([StepProgress(progress)] if progress else [])
        trainer = DPOTrainer(
            model=model,
            ref_model=ref_model,
            args=args,
            train_dataset=to_dataset(records),
            processing_class=tokenizer,
            callbacks=callbacks,
        )
    except BaseException:
        if is_main and resume is None:  # a refused or interrupted setup leaves no partial output directory behind
            shutil.rmtree(work, ignore_errors=True)
        raise
    silence_printer(trainer)
    parent = {
        "sft": str(config.sft),
        "weights_sha256": weights_sha256(config.sft),
        "ref": str(config.ref or config.sft),
        "sft_provenance": _brief(config.sft),
    }
    return DPOSession(config, trainer, work, data_file, parent, recorder, fingerprint, resume)


def _brief(sft_dir: Path) -> dict[str, Any] | None:
    record = read_provenance(sft_dir)
    return record.brief() if record else None


def train_dpo(config: DPORunConfig, progress: ProgressFn | None = None) -> Path:
    """Train, save model + tokenizer + provenance into ``config.out``; returns that path.

    Ctrl-C raises :class:`~core.errors.Interrupted` saying what was kept; the same call then resumes
    from the checkpoint it names (:mod:`training.interrupts`)."""
    try:
        session = prepare_dpo(config, progress)
    except KeyboardInterrupt:
        raise Interrupted(f"stopped while setting up DPO: {kept_message(partial_dir(config.out))}") from None
    trainer = session.trainer
    run_training(trainer, session.work, session.fingerprint, session.resume)
    trainer.save_model(str(session.work))  # every rank calls it: ZeRO-3 gathers the shards; only rank 0 writes
    if trainer.is_world_process_zero():
        write_provenance(
            session.work,
            stage="dpo",
            config=config.to_dict(),
            parent=session.parent,
            recorder=session.recorder,
            data={
                "file": str(session.data_file),
                "sha256": file_sha256(session.data_file),
                "rows": len(cast("Sized", trainer.train_dataset)),
            },
            extra={
                "world_size": trainer.args.world_size,
                "resumed_from_step": session.resume[1] if session.resume else None,
            },
        )
        finish_output(session.work, config.out)
    trainer.accelerator.wait_for_everyone()
    return config.out
