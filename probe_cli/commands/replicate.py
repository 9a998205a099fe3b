"""``probe replicate``: the paper's §7 study on a pair, from recording to the report, each stage resuming.

Thin wrapper over :mod:`study.replicate`: resolves the pair (``--sft/--dpo`` or the
embedded ``--pair``, built first when absent), prints the stages with an estimated time for each
and for the whole (``--plan`` stops there), runs them, and ends with the verdict table and the
report's path and size (:func:`probe_cli.commands.report.print_study`). Running the same command
again skips the finished stages.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options
from probe_cli.pairs import pair_option
from study.replicate_config import ReplicateOptions, check_nproc

if TYPE_CHECKING:
    from study.replicate import ReplicateResult, Stage


def register(app: typer.Typer) -> None:
    app.command("replicate")(replicate)


@config_options(ReplicateOptions)
def replicate(
    settings: ConfigFlags = FROM_CONFIG,
    pair_name: str = pair_option(),
    all_eval_rows: bool = typer.Option(False, "--all-eval-rows", help="Evaluation: judge the whole test split."),
    plan_only: bool = typer.Option(False, "--plan", help="Print the stages and their estimated times, then stop."),
) -> None:
    """Record every capability, analyse, explain, intervene on multi_turn with controls, localize the change on
    multi_turn, evaluate, and write the report."""
    from dataclasses import replace

    from core.errors import ProbeError
    from core.paths import check_output_dir, check_outputs
    from core.run_dir import Writer
    from probe_cli.console import console
    from study.replicate import option_warnings, plan, run_stages

    err = console(stderr=True)
    given = settings.given
    sft, dpo, base, data = given("sft_dir"), given("dpo_dir"), given("base_dir"), given("data_file")
    if given("out_dir") is not None and (sft is None or data is None):  # before a pair build, which takes minutes
        check_output_dir(given("out_dir"), "--out", writer=Writer.REPLICATE)
    if (sft is None) != (dpo is None):
        raise ProbeError("give both --sft and --dpo, or neither (to use the embedded default pair)")
    check_nproc(given("nproc"), given("device"))  # before a pair build, which takes minutes
    sft, dpo, base, data, name = _pair_inputs(sft, dpo, base, data, pair_name, err)
    out = given("out_dir")
    run_dir = out if out is not None else Path("runs") / f"replicate-{name or _digest(sft, dpo)}"
    options = settings.build(sft_dir=sft, dpo_dir=dpo, data_file=data, out_dir=run_dir, base_dir=base, pair=name)
    check_output_dir(run_dir, "--out", options.inputs(), writer=Writer.REPLICATE)
    check_outputs("--out", run_dir, options.outputs(), options.inputs())
    if all_eval_rows:
        options = replace(options, eval_rows=None)
    kept: dict[str, Any] = {}
    stages = plan(options, lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True), kept)
    _print_plan(stages, run_dir)
    if plan_only:
        for line in option_warnings(options):  # a run says them as it starts (run_stages)
            err.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
        return
    result = run_stages(options, stages, lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True))
    _point_latest(options)
    _say_end(options, stages, result, kept)


def _point_latest(options: ReplicateOptions) -> None:
    """``runs/latest`` at the run (what the notebooks open by default), and ``RUN_DIR/localize/latest`` at the localize
    stage's folder when it wrote one (as ``probe localize`` does)."""
    from core.run_dir import LocalizeDir, RunDir
    from probe_cli.latest import point_latest
    from study.layout import LOCALIZE_DIR

    point_latest(options.out_dir)
    folder = LocalizeDir(RunDir(options.out_dir).localize / LOCALIZE_DIR)
    if options.localize and folder.report.is_file():
        point_latest(folder.root)


def _say_end(options: ReplicateOptions, stages: list[Stage], result: ReplicateResult, kept: dict[str, Any]) -> None:
    """The verdict table and the report (:func:`probe_cli.commands.report.print_study`), then the time taken."""
    from interventions.cells import fmt_range
    from probe_cli.commands.report import print_study
    from probe_cli.console import console
    from study.replicate_estimate import minutes

    if "study" in kept and result.report is not None:
        print_study(kept["study"], result.report)
    done = [s.bounds() for s in stages if s.status == "done"]
    estimated = fmt_range(sum(b[0] for b in done), sum(b[1] for b in done), minutes)
    console().print(
        f"replicate: {minutes(result.seconds)} for the stages run (estimated {estimated}); "
        f"rerun `{options.command()}` to resume or refresh",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _pair_inputs(
    sft: Path | None, dpo: Path | None, base: Path | None, data: Path | None, pair_name: str, err: Any
) -> tuple[Path, Path, Path | None, Path, str | None]:
    """The pair's folders, base and data file, and the pair's name: the embedded ``--pair`` (built first when absent)
    when no ``--sft/--dpo`` is given; its test file when no ``--data`` is."""
    from probe_cli.pairs import default_pair

    if sft is None:
        _announce_build(pair_name, err)
        built = default_pair(pair_name)
        return built.sft_dir, built.dpo_dir, base or built.base_dir, data or built.test_file, pair_name
    if data is None:
        data = default_pair(pair_name).test_file
    assert dpo is not None
    return sft, dpo, base, data, None


def _announce_build(pair: str, err: Any) -> None:
    """Say so before a pair build, which takes minutes and comes before the plan."""
    from core.home import probe_home
    from study.replicate_config import PAIR_BUILD_SECONDS
    from study.replicate_estimate import minutes
    from training.default_pair import recipe_for

    if not (probe_home() / recipe_for(pair).dir_name / "COMPLETE.json").is_file():
        err.print(
            f"the {pair} pair is not built yet: building it first (about {minutes(PAIR_BUILD_SECONDS.get(pair))} on 2 "
            "cores, docs/training.md); the stages follow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _digest(sft: Path, dpo: Path) -> str:
    return hashlib.sha256(f"{sft.resolve()}|{dpo.resolve()}".encode()).hexdigest()[:8]


def _print_plan(stages: list[Stage], run_dir: Path) -> None:
    from rich.table import Table

    from core.pace import machine_pace
    from interventions.cells import fmt_range
    from probe_cli.console import console
    from study.replicate_estimate import minutes

    table = Table(
        title=f"probe replicate into {run_dir}: estimated times (at the default pair's pace on the reference 2-core "
        f"CPU, times {machine_pace():.2f} for this machine's speed, scaled by model size, rows and tokens; an "
        "estimate; a range where placebo sets run as the verdicts need them)"
    )
    for name in ("stage", "what", "estimated", "state"):
        table.add_column(name, justify="right" if name == "estimated" else "left")
    todo: dict[str, tuple[float, float]] = {}
    for stage in stages:
        done = stage.complete()
        todo[stage.name] = (0.0, 0.0) if done else stage.bounds()
        table.add_row(stage.name, stage.what, stage.estimated(), "complete: skipped" if done else "to run")
    least, most = sum(b[0] for b in todo.values()), sum(b[1] for b in todo.values())
    table.add_row("total", "stages still to run", fmt_range(least, most, minutes), "")
    if "localize" in todo and todo["localize"][0]:  # the localize stage brings its own budget: said apart
        table.add_row("", "of which the localize stage", minutes(todo["localize"][0]), "")
    console().print(table)
