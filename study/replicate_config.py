"""``ReplicateOptions``: what ``probe replicate`` replicates and how, for the CLI and the library."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from core.config_fields import flat_fields, nested, option
from core.config_file import POSITIVE, RANDOM_SETS, choice, typed_config
from core.config_init import flat_init
from core.errors import ProbeError
from core.pair_dirs import PairDirs
from core.run_dir import LocalizeDir, RunDir
from interventions.edit_spec import DEFAULT_EDITS, EditSpec
from localize.config import DEFAULT_ROWS as LOCALIZE_ROWS
from localize.config import LocalizeConfig
from study.layout import LOCALIZE_DIR, TARGET, q
from training.eval_config import DEFAULT_SPLIT, HELDOUT

# rows `models eval` judges at most by default here (spread over tasks): half the default pair's test split, all of
# the held-out split's 162
EVAL_ROWS = 280
EXPLAIN_TOP = 10  # neuron cards per capability
# The A/B: probe intervene's defaults (scale at the paper's factor, the factor-0 control, 20 placebo sets, its token
# limit), except that it generates at most TARGET_ROWS multi_turn rows (the held-out split's 36: all of them) and no
# collateral capability, to fit the 45-minute budget on the default pair (2 cores): no claim reads the collateral
# rows. --limit and --collateral give them back.
TARGET_ROWS = 48
COLLATERAL = False
NPROC_REFUSED_ABOVE = 4  # processes per core or device: above it --nproc is refused; above 1, a warning
LOCALIZE_PLACEBO: int = flat_fields(LocalizeConfig)["placebo"].default  # probe localize's own
PAIR_BUILD_SECONDS = {
    "smollm2": 600.0,
    "tiny": 240.0,
}  # building an embedded pair from its base (README, docs/training.md)


@flat_init
@dataclass
@typed_config
class ReplicateOptions:
    """What to replicate and how; ``None`` = the stage command's own default. The fields make the options of
    ``probe replicate`` (:mod:`probe_cli.options`), which fills in the paths from the embedded pair."""

    data_file: Path = option(help="Test rows JSONL (default: the embedded pair's test split).", flag="--data")
    out_dir: Path = option(
        help="Run directory; an existing one resumes (default: runs/replicate-<pair>).", flag="--out"
    )
    models: PairDirs = nested(
        PairDirs,
        helps={
            "sft_dir": "SFT model directory, given with --dpo (default: the --pair's, built first when absent).",
            "dpo_dir": "DPO model directory, given with --sft (default: the --pair's, built first when absent).",
        },
    )
    pair: str | None = option(None, "The default pair these came from (for the command line).", flag=None)
    edit: EditSpec = nested(EditSpec, only=["edits"], help_prefix="Intervention: ")
    limit: Annotated[int, POSITIVE] | None = option(
        TARGET_ROWS, "Intervention: rows of multi_turn (and of each collateral capability)."
    )
    placebo: Annotated[int, RANDOM_SETS] | None = option(
        None, "Intervention: placebo sets per arm.", shown_default="probe intervene's"
    )
    placebo_generation: str | None = option(
        None,
        "Intervention: decide-first (placebo sets run only where an arm's generations changed or an outcome moved, "
        "until its verdict is fixed) or all.",
        shown_default="probe intervene's",
    )
    max_new_tokens: Annotated[int, POSITIVE] | None = option(
        None, "New tokens per generation (intervention and evaluation).", shown_default="each command's"
    )
    collateral: bool | None = option(
        COLLATERAL, "Intervention: score the other capabilities too (no claim reads them)."
    )
    eval_rows: Annotated[int, POSITIVE] | None = option(  # None: the whole split (--all-eval-rows)
        EVAL_ROWS, "Evaluation: rows of the test split judged, spread over tasks."
    )
    eval_split: str = option(
        DEFAULT_SPLIT,
        "Evaluation and intervention rows: heldout (never trained on: constraints carried over turns, priority "
        "triples, role boundaries) or test (the --data file, the training distribution's test split).",
    )
    explain_top: Annotated[int, POSITIVE] = option(EXPLAIN_TOP, "Neuron cards per capability.")
    localize: bool = option(
        True,
        "Run probe localize on multi_turn (faithfulness curves, the layer profile, claim 1c, claim 4 at every k); "
        "the record stage then records mlp_post too.",
    )
    localize_limit: Annotated[int, POSITIVE] = option(
        LOCALIZE_ROWS, "Localize: held-out rows of multi_turn the curves are measured on (probe localize --limit)."
    )
    localize_placebo: Annotated[int, RANDOM_SETS] = option(
        LOCALIZE_PLACEBO,
        "Localize: random unit sets at each placebo point (probe localize --placebo; its largest cost: the ranking "
        "verdict needs 20, claim 4 at every k 19).",
    )
    device: str | None = option(None, "cpu, cuda, cuda:N (recording and generation).", shown_default="each command's")
    nproc: Annotated[int, POSITIVE] = option(
        1,
        "Processes on this machine: with N > 1 the record, intervene, localize and evaluate stages run data-parallel "
        "under the launcher (torchrun), one process per GPU (docs/scaling.md).",
    )

    def __post_init__(self) -> None:
        from interventions.config import PLACEBO_GENERATIONS
        from training.eval_config import SPLITS

        choice("eval_split", self.eval_split, SPLITS)
        if self.placebo_generation is not None:
            choice("placebo_generation", self.placebo_generation, PLACEBO_GENERATIONS)
        check_nproc(self.nproc, self.device)

    def nproc_warning(self) -> str | None:
        """A line when ``nproc`` is above the cores or devices this machine has (they share them: no faster)."""
        if self.nproc == 1:
            return None
        units, what = machine_units(self.device)
        if not units or self.nproc <= units:
            return None
        return (
            f"--nproc {self.nproc} on {units} {what}: the processes share them, each with its own copy of the models, "
            f"so the stages run no faster than with --nproc {units} and need {self.nproc}x the memory"
        )

    def eval_file(self) -> Path:
        """The rows the evaluation stage judges and the A/B generates: the held-out split, or ``data_file`` with
        ``eval_split="test"``."""
        from data_synthesis.heldout.files import heldout_test_file

        return heldout_test_file() if self.eval_split == HELDOUT else self.data_file

    def intervention(self) -> dict[str, Any]:
        """The ABConfig fields given (the rest keep ``probe intervene``'s defaults)."""
        given = {
            "edits": self.edit.edits,
            "limit": self.limit,
            "placebo": self.placebo,
            "placebo_generation": self.placebo_generation,
            "max_new_tokens": self.max_new_tokens,
            "collateral": self.collateral,
            "device": self.device,
            "split": self.eval_split,  # the A/B generates the rows the evaluation judges
        }
        return {k: v for k, v in given.items() if v is not None}

    def localization(self) -> dict[str, Any]:
        """The LocalizeConfig fields given (the rest keep ``probe localize``'s defaults): its rows, its responses' split
        and length as the A/B's, the device."""
        given = {
            "capability": TARGET,
            "limit": self.localize_limit,
            "placebo": self.localize_placebo,
            "max_new_tokens": self.max_new_tokens,
            "split": self.eval_split,
            "device": self.device,
        }
        return {k: v for k, v in given.items() if v is not None}

    def inputs(self) -> dict[str, Path | None]:
        """What the stages read, by option (a model directory for every file in it)."""
        return {
            "--sft": self.models.sft,
            "--dpo": self.models.dpo,
            "--base": self.models.base,
            "--data": self.data_file,
        }

    def outputs(self) -> list[Path]:
        """The files the stages write at fixed names in the run directory."""
        run = RunDir(self.out_dir)
        return [
            run.activations,
            run.settings_file,
            run.analysis.summary,
            run.eval_file,
            run.replicate_file,
            run.report_file,
            *([LocalizeDir(run.localize / LOCALIZE_DIR).report] if self.localize else []),
        ]

    def command(self) -> str:
        """The command line that runs this replication again."""
        parts = ["probe replicate"] + (
            [f"--pair {self.pair}"] if self.pair else [f"--sft {q(self.models.sft)} --dpo {q(self.models.dpo)}"]
        )
        if not self.pair:
            parts += [f"--base {q(base)}"] if (base := self.models.base) else []
            parts += [f"--data {q(self.data_file)}"]
        flags = {
            "--edit": ",".join(self.edit.edits) if self.edit.edits != list(DEFAULT_EDITS) else None,
            "--limit": self.limit if self.limit != TARGET_ROWS else None,
            "--placebo": self.placebo,
            "--placebo-generation": self.placebo_generation,
            "--max-new-tokens": self.max_new_tokens,
            "--device": self.device,
            "--nproc": self.nproc if self.nproc != 1 else None,
            "--eval-rows": self.eval_rows if self.eval_rows != EVAL_ROWS else None,
            "--eval-split": self.eval_split if self.eval_split != DEFAULT_SPLIT else None,
            "--explain-top": self.explain_top if self.explain_top != EXPLAIN_TOP else None,
            "--localize-limit": self.localize_limit if self.localize and self.localize_limit != LOCALIZE_ROWS else None,
            "--localize-placebo": (
                self.localize_placebo if self.localize and self.localize_placebo != LOCALIZE_PLACEBO else None
            ),
        }
        parts += [f"{flag} {value}" for flag, value in flags.items() if value is not None]
        parts += (
            [] if self.collateral in (None, COLLATERAL) else ["--collateral" if self.collateral else "--no-collateral"]
        )
        parts += ["--all-eval-rows"] if self.eval_rows is None else []
        parts += [] if self.localize else ["--no-localize"]
        return " ".join([*parts, f"--out {q(self.out_dir)}"])


def check_nproc(nproc: int | None, device: str | None) -> None:
    """One :class:`ProbeError` line for ``--nproc`` far above the cores or devices present
    (:data:`NPROC_REFUSED_ABOVE` per one); above them only, :meth:`ReplicateOptions.nproc_warning` says so."""
    if nproc is None or nproc <= 1:
        return
    units, what = machine_units(device)
    if units and nproc > NPROC_REFUSED_ABOVE * units:  # none: the device check says so
        raise ProbeError(
            f"--nproc {nproc}: this machine has {units} {what}; at most {NPROC_REFUSED_ABOVE * units} processes "
            f"({NPROC_REFUSED_ABOVE} per {what[:-1]}) are accepted, one per {what[:-1]} is the fastest "
            "(docs/scaling.md)"
        )


def machine_units(device: str | None) -> tuple[int, str]:
    """What the processes of a launch run on side by side, and its name: the GPUs for a CUDA device (the default
    when the machine has one), else the CPU cores this process may use."""
    if device is None or device.startswith("cuda"):
        from core.devices import cuda_count

        gpus = cuda_count()
        if gpus or device is not None:
            return gpus, "GPUs"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores, "CPU cores"
