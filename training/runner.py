"""What SFT and DPO runs share: trainer arguments, the output directory's life cycle, progress.

Output directories are written atomically: training saves into a sibling
``.<name>.partial`` directory and only a finished run (weights, tokenizer, provenance)
takes the place of ``--out`` (:func:`core.atomic.replace_dir`). An interrupted run therefore
never leaves something that looks like a model, and an existing ``--out`` is replaced only with ``--overwrite``, after
the new one is complete. The partial directory is also where Ctrl-C leaves its
checkpoint, which the next run with the same settings resumes from
(:mod:`training.interrupts`). Under ``accelerate launch`` every process trains, the main
process saves and renames, and the others wait for it.

Example:
    >>> partial_dir(Path("/runs/sft"))   # where a run trains until it is finished
    PosixPath('/runs/.sft.partial')
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()); _ = (out / "config.json").write_text("{}")
    >>> check_output(out, overwrite=False)
    Traceback (most recent call last):
    core.errors.ProbeError: --out ...: already exists and is not empty; pass --overwrite to replace it when ...
    >>> args = trainer_kwargs(cfg, Path("out/.sft.partial"))      # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.atomic import replace_dir
from core.errors import ProbeError
from core.paths import Inputs, check_not_holding_an_input

if TYPE_CHECKING:
    from transformers import Trainer


def quiet_environment() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    # TRL's DPO trainer reads model.is_gradient_checkpointing around every reference forward
    # (trl.models.utils.disable_gradient_checkpointing), a property transformers 5 deprecated for
    # is_activation_checkpointing: not our call to change, so this one warning is filtered, by its message and
    # the module that raises it (it printed once per build in `make demo`).
    warnings.filterwarnings(
        "ignore",
        message=r"`is_gradient_checkpointing` is deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils",
    )
    from datasets import disable_progress_bars

    disable_progress_bars()


def silence_printer(trainer: Trainer) -> None:
    """Drop the callback that prints every log dict to stdout (losses go to provenance and progress bars)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def dist_state() -> Any:
    """Accelerate's process state. On a machine without CUDA it must be created with ``cpu=True``,
    or a 2-process launch (torchrun / ``accelerate launch --multi_gpu``) would run as 2 single processes."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def resolve_bf16(requested: bool | None) -> bool:
    """bf16 only on a GPU that supports it; an explicit request on CPU is an error (6x slower in TRL)."""
    import torch

    capable = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if requested and not capable:
        raise ProbeError(
            "--bf16 needs a CUDA GPU with bf16 support; on CPU training stays in fp32 (bf16 is ~6x slower there)"
        )
    return capable if requested is None else bool(requested)


def trainer_kwargs(cfg: Any, output_dir: Path) -> dict[str, Any]:
    """Keyword arguments shared by ``SFTConfig`` and ``DPOConfig``."""
    import torch

    return {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "learning_rate": cfg.learning_rate,
        "lr_scheduler_type": cfg.lr_scheduler,
        "warmup_steps": cfg.warmup_ratio,  # a float < 1 is a fraction of the total steps in transformers 5
        "num_train_epochs": cfg.epochs,
        "max_steps": cfg.max_steps,
        "weight_decay": cfg.weight_decay,
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "logging_steps": cfg.logging_steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": not torch.cuda.is_available(),
        "bf16": resolve_bf16(cfg.bf16),
        "fp16": False,
        "max_length": cfg.max_length,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        # the new name of gradient_checkpointing (TRL defaults it on)
        "activation_checkpointing": cfg.gradient_checkpointing,
    }


def partial_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def check_output(out: Path, overwrite: bool, inputs: Inputs | None = None) -> None:
    """Refuse to train into an existing non-empty ``--out`` unless asked to replace it, and refuse to replace one that
    holds an input of the run (``inputs``: {flag: path})."""
    if out.exists() and not out.is_dir():
        raise ProbeError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ProbeError(
            f"--out {out}: already exists and is not empty; pass --overwrite to replace it when the new run finishes"
        )
    check_not_holding_an_input(out, "--out", inputs or {})


def start_output(
    out: Path, overwrite: bool, is_main: bool, fingerprint: str = ""
) -> tuple[Path, tuple[Path, int] | None]:
    """Check ``out``; returns the partial directory and the (checkpoint, step) to resume from. An interrupted run
    with the same ``fingerprint`` is kept for a resume (:mod:`training.interrupts`); anything else there is
    replaced (on the main process) by a fresh directory."""
    from training.interrupts import resume_point

    check_output(out, overwrite)
    work = partial_dir(out)
    resume = resume_point(work, fingerprint) if fingerprint else None
    if is_main and resume is None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    return work, resume


def finish_output(work: Path, out: Path) -> Path:
    """Move the finished partial directory into place (replacing an old ``out``)."""
    for leftover in ("checkpoint-*", "runs"):
        for path in work.glob(leftover):
            shutil.rmtree(path, ignore_errors=True)
    (work / "resume.json").unlink(missing_ok=True)
    replace_dir(work, out)
    return out
