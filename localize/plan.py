"""``plan_localize``: every input of a ``probe localize`` run resolved and checked before a model is loaded.

A :class:`LocalizePlan` says which pair (from the run), which rows (the capability's held-out rows by default, the
rows ``probe intervene`` uses), which hook point and unit grouping (a head at ``attn_z``), which grid of sizes in
units, and where the output goes. A mistake costs seconds, not a pass:

* a run that did not record the hook point (for the rankings that read it), or its local basis (``local_*``);
* a pair whose widths differ (:func:`access.pair.check_pair_configs`);
* no rows of the capability; ``--responses`` kept for other rows, or token ids the tokenizer cannot hold;
* an output folder that cannot be written, or that is one of the inputs.

Example:
    >>> interleaved([(0, "a"), (1, "a"), (2, "b"), (3, "c"), (4, "b")], limit=4)
    [0, 2, 3, 1]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.hook_table import HEADS
from analysis.window import default_window
from core.errors import ProbeError
from core.run_dir import LocalizeDir, RunDir
from localize.grid import Point
from localize.rankings import RANKINGS

if TYPE_CHECKING:
    from core.schema import TestRow
    from localize.config import LocalizeConfig


@dataclass(frozen=True)
class Shape:
    """The hook point's units: ``n_layers`` x ``units_per_layer`` units of ``group`` coordinates each."""

    n_layers: int
    units_per_layer: int
    group: int
    d_model: int
    heads: int
    head_dim: int

    @property
    def total(self) -> int:
        return self.n_layers * self.units_per_layer


@dataclass(frozen=True)
class LocalizePlan:
    """What a run measures, checked (module doc)."""

    config: LocalizeConfig
    run_dir: Path
    sft_dir: Path
    dpo_dir: Path
    data_file: Path
    split: str
    rows: list[TestRow]
    row_ids: list[int]
    shape: Shape
    points: list[Point]  # the grid, by size
    placebo_points: list[Point]
    window: list[int]
    planted: tuple[tuple[int, int], ...]  # the planted units of a planted pair at this hook ((): none)
    out: LocalizeDir

    def units(self, point: Point) -> int:
        return point.units(self.shape.total)


def plan_localize(config: LocalizeConfig) -> LocalizePlan:
    """Resolve and check every input (module doc); nothing is loaded but the run's metadata and configs."""
    from access.pair import check_pair_configs
    from probes.store import RunReader

    if config.run_dir is None:
        raise ProbeError("probe localize needs a run directory (RUN_DIR from `probe run`): its pair and recordings")
    run_dir = Path(config.run_dir)
    with RunReader(run_dir) as run:
        settings = run.settings
        _check_recorded(run, config)
        sft_dir, dpo_dir = Path(settings.model_dir("sft")), Path(settings.model_dir("dpo"))
        recorded_data = settings.data_file
    for role, where in (("sft", sft_dir), ("dpo", dpo_dir)):
        if not (where / "config.json").is_file():
            raise ProbeError(f"{run_dir}: the {role} model the run recorded ({where}) is gone; localize needs it")
    model_shape = check_pair_configs(sft_dir, dpo_dir)
    shape = _shape(sft_dir, config.hook, model_shape.n_layers, model_shape.d_model)
    data_file, split = _data_file(config, recorded_data)
    rows, row_ids = _rows(config, data_file)
    _check_responses(config, rows, row_ids, data_file, {"sft": sft_dir, "dpo": dpo_dir})
    planted = _planted(dpo_dir, config.hook)
    points = list(config.grid)
    if planted and Point(None, len(planted)) not in points:
        points.append(Point(None, len(planted)))
    points.sort(key=lambda p: (p.units(shape.total), p.share is None))
    out = LocalizeDir(config.out_dir or RunDir(run_dir).localize / f"{config.capability}_{config.hook}_{_now()}")
    _check_output(out, run_dir, sft_dir, dpo_dir, data_file)
    return LocalizePlan(
        config,
        run_dir,
        sft_dir,
        dpo_dir,
        data_file,
        split,
        rows,
        row_ids,
        shape,
        points,
        list(config.placebo_points),
        default_window(shape.n_layers),
        planted,
        out,
    )


def _check_recorded(run: object, config: LocalizeConfig) -> None:
    """The run holds the hook point (and its local basis) of the capability wherever a chosen ranking reads it."""
    from probes.store import RunReader

    assert isinstance(run, RunReader)
    needs = {RANKINGS[r].needs for r in config.ranking_list}
    if not needs & {"run", "local"}:
        return
    recorded = [h for h in run.hooks(config.capability, "sft") if h in run.hooks(config.capability, "dpo")]
    readers = [r for r in config.ranking_list if RANKINGS[r].needs in ("run", "local")]
    if config.hook not in recorded:
        raise ProbeError(
            f"{run.run_dir}: the run did not record {config.hook} for {config.capability} (recorded: "
            f"{', '.join(recorded) or 'nothing'}), which the rankings {', '.join(readers)} read; record it with "
            f"`probe run -c {config.capability} --hook {config.hook} --out NEW_DIR`, or leave those rankings out "
            "(--rankings attribution,relp,weight need no recording)"
        )
    local = [r for r in config.ranking_list if RANKINGS[r].needs == "local"]
    if local and not run.local_directions(config.capability, config.hook):
        raise ProbeError(
            f"{run.run_dir}: the rankings {', '.join(local)} need the local recording of "
            f"{config.capability}/{config.hook}, which this run does not have (recorded with --local none, or "
            f"before it); record again with `probe run -c {config.capability} --hook {config.hook} --out NEW_DIR`"
        )


def _shape(model_dir: Path, hook: str, n_layers: int, d_model: int) -> Shape:
    """The hook point's units from the model's config (no weights loaded): heads at ``attn_z``."""
    from types import SimpleNamespace

    from access.hook_points import head_shape, width
    from access.pair import read_config

    holder: Any = SimpleNamespace(config=read_config(model_dir))  # what width() reads of a model: its config
    heads, head_dim = head_shape(holder)
    width_of_hook = width(holder, hook)
    group = head_dim if hook == HEADS else 1
    return Shape(n_layers, width_of_hook // group, group, d_model, heads, head_dim)


def _data_file(config: LocalizeConfig, recorded: str | None) -> tuple[Path, str]:
    """(rows file, split): ``--data``, else the held-out split, or with ``--split test`` the run's data file."""
    from training.eval_config import HELDOUT

    if config.data_file is not None:
        return Path(config.data_file), "given"
    if config.split == HELDOUT:
        from data_synthesis.heldout.files import heldout_test_file

        return heldout_test_file(), HELDOUT
    if not recorded:
        raise ProbeError(f"{config.run_dir}: the run does not record its data file; pass --data or --split heldout")
    return Path(recorded), "test"


def interleaved(members: Sequence[tuple[int, str]], limit: int | None) -> list[int]:
    """Row indices taken task by task in turn (as ``probe intervene --limit`` takes them), at most ``limit``."""
    by_task: dict[str, list[int]] = {}
    for index, task in members:
        by_task.setdefault(task, []).append(index)
    order = [i for group in zip_longest(*by_task.values()) for i in group if i is not None]
    return order[:limit] if limit is not None else order


def _rows(config: LocalizeConfig, data_file: Path) -> tuple[list[TestRow], list[int]]:
    from core.rows import group_by_capability, read_test_rows

    if not data_file.is_file():
        raise ProbeError(f"--data {data_file}: file not found")
    rows = read_test_rows(data_file)
    members = group_by_capability(rows, [config.target])[config.target]
    chosen = interleaved([(i, row.task) for i, row in members], config.limit)
    if not chosen:
        raise ProbeError(f"{data_file}: no rows of capability {config.capability}")
    return [rows[i] for i in chosen], chosen


def _check_responses(
    config: LocalizeConfig, rows: list[TestRow], row_ids: list[int], data_file: Path, model_dirs: dict[str, Path]
) -> None:
    """``--responses FILE`` or an earlier run's folder, read and checked now as the passes will read it
    (:func:`interventions.outcomes.response_checks`: every line's shape, the rows, token ids in the vocabulary, the
    fingerprints of the model and tokenizer that wrote them, the context), before any model loads."""
    from core.models import load_tokenizer
    from interventions.outcomes import checked_responses
    from localize.config import NAMED_RESPONSES
    from localize.passes import DIRECTIONS

    if config.responses in NAMED_RESPONSES:
        return
    tokenizer = load_tokenizer(model_dirs["sft"], "the SFT model")
    for target in sorted({DIRECTIONS[d].source for d in config.direction_list}):
        checked_responses(tokenizer, rows, row_ids, config.responses, target, data_file, model_dirs)


def _planted(dpo_dir: Path, hook: str) -> tuple[tuple[int, int], ...]:
    """The planted units of a planted pair whose planted hook point is ``hook`` (() otherwise)."""
    from training.planted import PLANTED_FILE, read_planted

    if not (dpo_dir / PLANTED_FILE).is_file():
        return ()
    pair = read_planted(dpo_dir)
    return tuple(pair.units) if pair.hook == hook else ()


def _check_output(out: LocalizeDir, run_dir: Path, sft_dir: Path, dpo_dir: Path, data_file: Path) -> None:
    from core.paths import check_output_dir, check_outputs
    from core.run_dir import Writer

    inputs = {
        "RUN_DIR": RunDir(run_dir).activations,
        "the SFT model": sft_dir,
        "the DPO model": dpo_dir,
        "the rows": data_file,
    }
    check_output_dir(out.root, "--out", inputs, writer=Writer.LOCALIZE)
    check_outputs("--out", out.root, [out.report, out.page], inputs)


def _now() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
