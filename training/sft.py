"""Supervised fine-tuning with TRL's ``SFTTrainer``, loss on assistant turns only.

The base is ``"tiny"`` (a 32-layer Llama with a byte-level BPE tokenizer trained on the
training data itself, built here, see :mod:`training.tiny_base`) or a local Hugging
Face causal-LM directory. Conversations are fed as ``messages``; the chat template's
``{% generation %}`` markers let TRL mask every system/user token (labels -100), as the
paper's ``train_sft.py`` does by hand. All checks (data, base directory, tokenizer,
output directory) run before the first step, and the output is written atomically
with a ``provenance.json``.

Example:
    >>> cfg = SFTRunConfig(base="tiny", data="/no/data", out="/no/runs/sft", max_steps=20)
    >>> cfg.recipe, cfg.learning_rate, cfg.batch_size   # the tiny base gets the tiny recipe
    ('tiny', 0.001, 16)
    >>> train_sft(cfg)   # the cheap checks come first: nothing is built or loaded
    Traceback (most recent call last):
    core.errors.ProbeError: --data /no/data: no such file or directory
    >>> cfg = SFTRunConfig(base="tiny", data="data/", out="runs/sft", max_steps=20)   # doctest: +SKIP
    >>> train_sft(cfg)                                                               # doctest: +SKIP
    PosixPath('runs/sft')
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sized
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core.chat import check_no_control_text, control_token_texts, to_messages
from core.errors import Interrupted, ProbeError
from core.models import check_model_dir, check_vocab_fits, load_model, load_tokenizer
from core.provenance import file_sha256, weights_sha256
from core.rows import row_location
from core.run_dir import DataDir
from core.templates import TrainingTemplate, choose_chat_template, training_template
from training.config import SFTRunConfig
from training.data import resolve_data_file, sft_records, to_dataset
from training.interrupts import kept_message, run_fingerprint, run_training
from training.provenance import write_provenance
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

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, TrainerCallback
    from trl.trainer.sft_trainer import SFTTrainer

    from training.callbacks import LossRecorder

ProgressFn = Callable[[int, int, float | None], None]


@dataclass
class SFTSession:
    """A ready-to-train SFT run (exposed so tests and notebooks can inspect batches before training)."""

    config: SFTRunConfig
    trainer: SFTTrainer
    work: Path
    data_file: Path
    parent: dict[str, Any]
    recorder: LossRecorder
    own_template: str  # the model's own chat template, restored before saving
    fingerprint: str = ""  # of everything a checkpoint depends on (training.interrupts)
    resume: tuple[Path, int] | None = None  # (checkpoint, step) an interrupted run left


def tiny_corpus(records: list[dict[str, Any]], extra_files: list[Path]) -> list[str]:
    """Documents for the tiny tokenizer (and its optional pretraining): each SFT conversation as plain
    text, one turn per line, plus each DPO pair's prompt with its chosen and rejected replies."""
    texts = ["\n".join(m["content"] for m in r["messages"]) for r in records]
    from core.rows import read_dpo_rows

    for path in extra_files:
        for row in read_dpo_rows(path):
            prompt = "\n".join(turn.content for turn in row.prompt)
            texts += [f"{prompt}\n{row.chosen}", f"{prompt}\n{row.rejected}"]
    return [t for t in texts if t.strip()]


def _build_tiny(
    cfg: SFTRunConfig,
    records: list[dict[str, Any]],
    work: Path,
    is_main: bool,
    base_progress: Callable[[int, int], None] | None,
    resuming: bool,
) -> Path:
    from training.tiny_base import TinySpec, build_tiny_base

    target = work / "_tiny_base"
    with dist_state().main_process_first():
        if is_main and not resuming:  # a resumed run's base was complete before its checkpoint was written
            dpo = [p for p in [DataDir(cfg.data).dpo] if cfg.data.is_dir() and p.is_file()]
            spec = TinySpec(**{"seed": cfg.seed, **cfg.tiny_spec})
            build_tiny_base(tiny_corpus(records, dpo), target, spec, base_progress, [r["messages"] for r in records])
    return target


def prepare_sft(
    config: SFTRunConfig, progress: ProgressFn | None = None, base_progress: Callable[[int, int], None] | None = None
) -> SFTSession:
    """Validate everything, build the tiny base if asked (``base_progress(step, total)`` follows its
    pretraining), build the trainer; nothing is SFT-trained yet."""
    data_file = resolve_data_file(config.data, "sft")  # cheap checks first: no torch import before they pass
    records = sft_records(data_file, config.max_rows)
    base_dir = None if config.base == "tiny" else Path(config.base)
    if base_dir is not None:
        check_model_dir(base_dir, "--base")
    check_output(config.out, config.overwrite, {"--data": data_file, "--base": base_dir})
    quiet_environment()
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    from training.callbacks import LossRecorder, StepProgress

    state = dist_state()
    is_main = state.is_main_process
    # template, data rendering and the training copy are checked before any weight loads or dir is made
    if config.base != "tiny":
        tokenizer = load_tokenizer(Path(config.base), "--base")
        template, own_template, train_template = _chat_templates(config, tokenizer, records, data_file)
    fingerprint = run_fingerprint(config.to_dict(), data_file, [base_dir], state.num_processes)
    work, resume = start_output(config.out, config.overwrite, is_main, fingerprint)
    try:
        if config.base == "tiny":
            base = _build_tiny(config, records, work, is_main, base_progress, resume is not None)
            tokenizer = load_tokenizer(base, "--base")
            template, own_template, train_template = _chat_templates(config, tokenizer, records, data_file)
        else:
            base = Path(config.base)
        model = load_model(base, "--base")
        check_vocab_fits(model, tokenizer, f"--base {base}")
        if train_template is not None:
            tokenizer.chat_template = train_template.template  # the training copy; the model is saved with its own
        args = SFTConfig(**trainer_kwargs(config, work), assistant_only_loss=config.assistant_only_loss, packing=False)
        recorder = LossRecorder()
        callbacks: list[TrainerCallback] = [recorder] + ([StepProgress(progress)] if progress else [])
        try:
            trainer = SFTTrainer(
                model=model,
                args=args,
                train_dataset=to_dataset(records),
                processing_class=tokenizer,
                callbacks=callbacks,
            )
        except ValueError as exc:
            raise ProbeError(
                f"--base {config.base}: cannot set up SFT ({str(exc).splitlines()[0]}); "
                "try --chat-template llama3 or chatml"
            ) from None
        silence_printer(trainer)
        parent = _parent_info(config, base, template, train_template)
    except BaseException:
        if is_main and resume is None:  # a refused or interrupted setup leaves no partial output directory behind
            shutil.rmtree(work, ignore_errors=True)
        raise
    return SFTSession(config, trainer, work, data_file, parent, recorder, own_template, fingerprint, resume)


def _chat_templates(
    config: SFTRunConfig, tokenizer: PreTrainedTokenizerBase, records: list[dict[str, Any]], data_file: Path
) -> tuple[str, str, TrainingTemplate | None]:
    """(template choice, the model's own template, the proven training copy) for ``tokenizer``; every problem
    is one :class:`ProbeError` naming ``--base`` or the data row."""
    try:
        template = choose_chat_template(tokenizer, config.chat_template)
    except ProbeError as exc:
        raise ProbeError(f"--base {config.base}: {exc}") from None
    conversations = [to_messages(r["messages"]) for r in records]
    check_rows_render(tokenizer, conversations, data_file)
    if not config.assistant_only_loss:
        return template, tokenizer.chat_template, None
    try:
        return template, tokenizer.chat_template, training_template(tokenizer, conversations)
    except ProbeError as exc:
        raise ProbeError(f"--base {config.base}: {exc}") from None


def check_rows_render(
    tokenizer: PreTrainedTokenizerBase, conversations: list[list[dict[str, str]]], data_file: Path
) -> None:
    """Refuse a training row whose text contains a control token (as recording and evaluation do, see
    :mod:`core.chat`), naming its file and line: the trainer would read it as a real turn boundary."""
    controls = control_token_texts(tokenizer)
    for index, messages in enumerate(conversations):
        check_no_control_text(messages, controls, partial(row_location, index, data_file))


def _parent_info(
    config: SFTRunConfig, base: Path, template: str, train_template: TrainingTemplate | None
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "base": config.base,
        "chat_template": template,
        "weights_sha256": weights_sha256(base),
        "training_template": train_template.source if train_template else None,
    }
    spec_file = base / "tiny_spec.json"
    if spec_file.is_file():
        info["tiny_spec"] = json.loads(spec_file.read_text())
    return info


def train_sft(
    config: SFTRunConfig, progress: ProgressFn | None = None, base_progress: Callable[[int, int], None] | None = None
) -> Path:
    """Train, save model + tokenizer + provenance into ``config.out``; returns that path.

    Ctrl-C raises :class:`~core.errors.Interrupted` saying what was kept; the same call then resumes
    from the checkpoint it names (:mod:`training.interrupts`)."""
    try:
        session = prepare_sft(config, progress, base_progress)
    except KeyboardInterrupt:
        raise Interrupted(f"stopped while setting up SFT: {kept_message(partial_dir(config.out))}") from None
    trainer = session.trainer
    run_training(trainer, session.work, session.fingerprint, session.resume)
    tokenizer = cast("PreTrainedTokenizerBase", trainer.processing_class)  # prepare_sft passes the tokenizer
    tokenizer.chat_template = session.own_template
    trainer.save_model(str(session.work))  # every rank calls it: ZeRO-3 gathers the shards; only rank 0 writes
    if trainer.is_world_process_zero():
        shutil.rmtree(session.work / "_tiny_base", ignore_errors=True)
        write_provenance(
            session.work,
            stage="sft",
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
