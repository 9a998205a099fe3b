"""Ctrl-C during SFT/DPO: stop at a step boundary, keep a checkpoint, resume from it on the next run.

A training run is the slowest step of the pipeline, so an interrupt should cost at most
the step in progress. Killing the process inside ``optimizer.step()`` would leave
half-updated weights, so the first Ctrl-C only sets a flag; :class:`training.callbacks.GracefulStop` sees it
when the optimizer step ends and asks the trainer to save a full checkpoint (weights,
optimizer, scheduler, RNG states, trainer state) and stop. Before the training loop has
begun (loading, tokenizing, DPO's reference pass) there is nothing to save, and Ctrl-C
stops at once. A second Ctrl-C always stops at once.

The checkpoint lives in the run's partial directory (``.<out>.partial``, see
:mod:`training.runner`) next to ``resume.json``, which names it and carries the
fingerprint of the run: every setting, the data file's bytes, the parent weights and the
number of processes. ``resume.json`` is written only after the checkpoint is complete,
so a checkpoint cut short by a second Ctrl-C is never resumed from. Rerunning the same
command finds a matching ``resume.json`` and continues through TRL's
``resume_from_checkpoint``, which restores the optimizer, the scheduler, the RNG states
and the position in the data: on CPU the resumed model is bit-identical to an
uninterrupted one. A rerun with other settings starts over.

The deferred stop is for single-process runs: under ``accelerate launch`` the launcher
itself answers SIGINT by terminating the workers, and Ctrl-C keeps nothing.

Example:
    >>> import tempfile
    >>> work = Path(tempfile.mkdtemp()); data = work / "sft.jsonl"; _ = data.write_text("{}\\n")
    >>> run_fingerprint({"seed": 0, "overwrite": True}, data, [], 1) == run_fingerprint({"seed": 0}, data, [], 1)
    True
    >>> resume_point(work, "0f3a"), kept_message(work)   # nothing was interrupted here
    (None, 'nothing kept; rerun the same command to start over')
    >>> run_training(trainer, work, fingerprint, resume=None)      # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.atomic import write_atomic
from core.errors import Interrupted

if TYPE_CHECKING:
    from transformers import Trainer

RESUME_FILE = "resume.json"


def run_fingerprint(config: dict[str, Any], data_file: Path, parents: list[Path | None], processes: int) -> str:
    """A hash of everything a checkpoint depends on: settings (not ``overwrite``), data bytes, parent weights,
    process count."""
    from core.models import weight_files
    from core.provenance import file_sha256

    weights = [
        [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in weight_files(parent)]
        for parent in parents
        if parent is not None
    ]
    body = {
        "config": {k: v for k, v in config.items() if k != "overwrite"},
        "data": file_sha256(data_file),
        "parents": weights,
        "processes": processes,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def resume_point(work: Path, fingerprint: str) -> tuple[Path, int] | None:
    """(checkpoint directory, step) left in ``work`` by an interrupted run with the same fingerprint."""
    try:
        marker = json.loads((work / RESUME_FILE).read_text(encoding="utf-8"))
        checkpoint = work / str(marker["checkpoint"])
        step = int(marker["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if marker.get("fingerprint") != fingerprint or not (checkpoint / "trainer_state.json").is_file():
        return None
    return checkpoint, step


def _mark_resumable(work: Path, fingerprint: str, step: int) -> Path:
    checkpoint = work / f"checkpoint-{step}"
    for stale in work.glob("checkpoint-*"):
        if stale != checkpoint:
            shutil.rmtree(stale, ignore_errors=True)
    write_atomic(
        work / RESUME_FILE, json.dumps({"fingerprint": fingerprint, "checkpoint": checkpoint.name, "step": step})
    )
    return checkpoint


def kept_message(work: Path) -> str:
    """What an interrupted run left for a resume, as the end of an :class:`Interrupted` message."""
    try:
        marker = json.loads((work / RESUME_FILE).read_text(encoding="utf-8"))
        return (
            f"the checkpoint at step {int(marker['step'])} is kept in {work / str(marker['checkpoint'])}; "
            "rerun the same command to resume from it"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "nothing kept; rerun the same command to start over"


def _restore_token_count(trainer: Trainer, checkpoint: Path) -> None:
    """TRL's SFT trainer logs a running ``num_tokens`` that its checkpoints do not restore; continue it from
    the last logged value so a resumed run logs what an uninterrupted one would."""
    if not isinstance(getattr(trainer, "_total_train_tokens", None), (int, float)):
        return
    try:
        history = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
        tokens = int(next(e["num_tokens"] for e in reversed(history) if "num_tokens" in e))
        setattr(trainer, "_total_train_tokens", tokens)  # noqa: B010 - TRL's SFTTrainer's own counter, undeclared
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return


@contextmanager
def _deferred_sigint(stop: Any, enabled: bool) -> Iterator[None]:
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, stop.on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_training(trainer: Trainer, work: Path, fingerprint: str, resume: tuple[Path, int] | None) -> None:
    """``trainer.train()``, resumed from ``resume`` if given;
    Ctrl-C raises :class:`Interrupted` saying what was kept."""
    from training.callbacks import GracefulStop

    stop = GracefulStop()
    trainer.add_callback(stop)
    if resume is not None:
        _restore_token_count(trainer, resume[0])
    single = trainer.args.world_size == 1
    try:
        with _deferred_sigint(stop, single):
            trainer.train(resume_from_checkpoint=str(resume[0]) if resume else None)
            checkpoint = _keep(trainer, work, fingerprint, stop.stopped_at)
    except KeyboardInterrupt:
        when = (
            "training stopped at once" if stop.in_loop or stop.requested else "stopped before the first training step"
        )
        if trainer.is_world_process_zero() and resume_point(work, fingerprint) is None:
            shutil.rmtree(work, ignore_errors=True)
        raise Interrupted(f"{when}: {kept_message(work)}") from None
    if checkpoint is not None:
        raise Interrupted(
            f"training stopped at step {stop.stopped_at} of {trainer.state.max_steps}; the checkpoint is kept in "
            f"{checkpoint}; rerun the same command to resume from step {stop.stopped_at}"
        )


def _keep(trainer: Trainer, work: Path, fingerprint: str, step: int | None) -> Path | None:
    """Mark the checkpoint of a stopped run as the one to resume from (main process); None if training finished."""
    if step is None:
        return None
    if trainer.is_world_process_zero():
        return _mark_resumable(work, fingerprint, step)
    return work / f"checkpoint-{step}"
