"""Trainer callbacks: loss recording for provenance, step reports for progress bars, Ctrl-C at a step boundary.

Kept apart from the rest of :mod:`training` because importing ``transformers`` is slow:
argument and data checks run (and fail) before this module is imported.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class LossRecorder(TrainerCallback):
    """Keeps every ``on_log`` record that has a training loss (and the final summary)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """A resumed run starts with the losses its checkpoint logged, so provenance lists every step."""
        self.records = [
            {"step": entry["step"], **{k: v for k, v in entry.items() if k != "step" and isinstance(v, (int, float))}}
            for entry in state.log_history
            if "loss" in entry
        ]

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs:
            return
        if "loss" in logs:
            keep = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
            self.records.append({"step": state.global_step, **keep})
        elif "train_loss" in logs:
            self.summary = {k: v for k, v in logs.items() if isinstance(v, (int, float))}

    @property
    def final_loss(self) -> float | None:
        return self.records[-1]["loss"] if self.records else None


class StepProgress(TrainerCallback):
    """Calls ``report(step, total, loss)`` after every optimizer step (drives rich progress bars)."""

    def __init__(self, report: Callable[[int, int, float | None], None]) -> None:
        self.report = report
        self.loss: float | None = None

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.report(state.global_step, state.max_steps, self.loss)


class GracefulStop(TrainerCallback):
    """Stops training at the end of the optimizer step during which Ctrl-C came, with a checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self.in_loop = False
        self.stopped_at: int | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.in_loop = True

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.in_loop = False

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> Any:
        if self.requested and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_sigint(self, signum: int, frame: Any) -> None:
        if self.requested or not self.in_loop:
            raise KeyboardInterrupt
        self.requested = True
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"  # the probe command hands SIGTERM here too
        print(
            f"{name}: stopping after this training step and saving a checkpoint ({name} again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
