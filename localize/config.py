"""``LocalizeConfig``: one validated description of a ``probe localize`` run, for the CLI and the library.

Every check that can fail on user input without loading a model happens here and raises one line naming the option:
an empty or unknown ranking, a k outside (0, 100]% (or a count below 1), an unknown direction, hook or response
source. What needs the run or the models (the hook recorded, the pair's widths, responses of this pair) is checked by
:func:`localize.plan.plan_localize` before anything expensive runs.

The defaults are sized to the 10-minute budget on a 2-core CPU, which they hold where the curves settle the ranking
verdict (the sequential placebo band then draws few sets; docs/localize.md says the arithmetic, and which flags run the
issue's full design: ``--limit 36 --k 0.1%,0.2%,0.5%,1%,2%,5%,10%,20%,50%,100% --placebo-k 0.2%,2%,20%
--profile-width 1 --head-layers 3``).

Example:
    >>> cfg = LocalizeConfig(run_dir="runs/x", rankings="relp,mean_diff", k="0.2%,2%")
    >>> cfg.ranking_list, [p.label for p in cfg.grid], cfg.direction_list
    (['relp', 'mean_diff'], ['0.2%', '2%'], ['necessity', 'sufficiency'])
    >>> LocalizeConfig(run_dir="runs/x", rankings="")
    Traceback (most recent call last):
    core.config_file.OptionError: --rankings: expected one or more of count, mean_diff, ..., got ''
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from access.hook_table import NEURONS
from core.capabilities import Capability, parse_capability
from core.config_fields import option
from core.config_file import NON_NEGATIVE_COUNT, POSITIVE, RANDOM_SETS, RESAMPLES, SEED, OptionError, typed_config
from core.devices import check_device
from core.errors import ProbeError
from localize.grid import Point, parse_grid
from localize.passes import DIRECTIONS
from localize.rankings import RANKINGS, ranking_names
from localize.sequential import PLACEBO_DESIGNS, SEQUENTIAL
from training.eval_config import DEFAULT_SPLIT, SPLITS

DEFAULT_GRID = "0.1%,0.2%,1%,2%,10%,100%"  # six of MIB's ten points, a decade apart (docs/localize.md: the budget)
DEFAULT_PLACEBO_K = "0.2%,2%"  # the points the ranking verdict reads (localize.verdicts.VERDICT_POINTS)
DEFAULT_ROWS = 6  # what 10 minutes on 2 cores hold with both verdicts' controls (docs/localize.md, "Speed")
NAMED_RESPONSES: tuple[str, ...] = ("greedy", "reference")


@dataclass
@typed_config
class LocalizeConfig:
    """Where the change lives: which run, hook, rankings, grid, directions, rows, controls and profile."""

    run_dir: str | Path | None = option(None, "Run directory from `probe run` (its pair, data and recordings).")
    capability: str = option("multi_turn", "Capability whose held-out rows the gap is measured on.", aliases=["-c"])
    hook: str = option(
        NEURONS, "Hook point whose units the curves rank and patch (attn_z: each attention head is one unit)."
    )
    rankings: str | list[str] = option(
        help=f"Rankings to compare, comma-separated ({', '.join(RANKINGS)}).",
        default_factory=lambda: list(RANKINGS),
        metavar="RANKING[,RANKING]",
    )
    k: str = option(
        DEFAULT_GRID,
        "Curve points: shares of the hook's units at every layer (0.2%) or unit counts (16); MIB's grid is "
        "0.1%,0.2%,0.5%,1%,2%,5%,10%,20%,50%,100%.",
    )
    directions: str = option(
        ",".join(DIRECTIONS),
        "necessity (DPO with SFT's values), sufficiency (SFT with DPO's values), or both, comma-separated.",
    )
    limit: Annotated[int, POSITIVE] | None = option(
        DEFAULT_ROWS, "Held-out rows of the capability (interleaved across tasks); none: every row."
    )
    placebo: Annotated[int, RANDOM_SETS] = option(20, "Random unit sets (random rankings) at each placebo point.")
    placebo_k: str = option(DEFAULT_PLACEBO_K, "Points of the placebo band (each must be a --k point).")
    placebo_design: str = option(
        SEQUENTIAL,
        "sequential (draw the random sets a few at a time at the points the ranking verdict reads, and only until the "
        "verdict can no longer change) or all (every set at every placebo point).",
    )
    profile: bool = option(True, "Patch each sub-layer, the window, its complement and every sub-layer of a kind.")
    profile_width: Annotated[int, POSITIVE] = option(
        5, "Layers per profile step: 1 patches each layer's attention and MLP output alone."
    )
    head_layers: Annotated[int, NON_NEGATIVE_COUNT] = option(
        1,
        "Patch each head of one layer of each of this many attention profile steps, those that close the most "
        "(within a step of several layers, its layer the gradient estimates closes the most; 0: none).",
    )
    responses: str = option(
        "greedy",
        "Response tokens teacher-forced: greedy (each direction's target model's own), reference, a JSONL FILE, or "
        "the folder of an earlier probe intervene run (its kept greedy responses).",
    )
    max_new_tokens: Annotated[int, POSITIVE] = option(32, "Greedy response length, as probe intervene's.")
    split: str = option(DEFAULT_SPLIT, "Rows when no --data is given: heldout or test (the run's data file).")
    data_file: str | Path | None = option(None, "Test rows JSONL, whatever --split.", flag="--data")
    n_bootstrap: Annotated[int, RESAMPLES] = option(10_000, "Bootstrap resamples of the rows.", flag="--bootstrap")
    seed: Annotated[int, SEED] = option(0, "Seed of the placebo sets, the tie-breaks and the bootstrap.")
    device: str = option("cpu", "Torch device, e.g. cpu or cuda.")
    max_batch_tokens: Annotated[int, POSITIVE] = option(2048, "Padded tokens per teacher-forced batch.")
    out_dir: str | Path | None = option(
        None, "Output dir (default: RUN_DIR/localize/<capability>_<hook>_<time>).", flag="--out"
    )

    def __post_init__(self) -> None:
        from access.hook_points import validate_hook
        from core.config_file import choice

        self.target: Capability = parse_capability(self.capability)
        self.capability = self.target.value
        try:
            validate_hook(self.hook)
        except ProbeError:
            raise OptionError("hook", "one of the hook points", self.hook) from None
        self.rankings = ranking_names(self.rankings)
        self.grid: list[Point] = parse_grid(self.k)
        self.placebo_points: list[Point] = parse_grid(self.placebo_k, "placebo_k") if self.placebo else []
        missing = [p.label for p in self.placebo_points if p not in self.grid]
        if missing:
            raise OptionError("placebo_k", "points of --k", ",".join(missing))
        self.direction_list: list[str] = [
            choice("directions", d.strip(), DIRECTIONS) for d in self.directions.split(",") if d.strip()
        ]
        if not self.direction_list:
            raise OptionError("directions", f"one or more of {', '.join(DIRECTIONS)}", self.directions)
        choice("split", self.split, SPLITS)
        choice("placebo_design", self.placebo_design, PLACEBO_DESIGNS)
        if self.responses not in NAMED_RESPONSES and not Path(self.responses).exists():
            raise OptionError(
                "responses",
                "greedy, reference, a JSONL file of responses or an earlier probe intervene folder",
                self.responses,
            )
        self.device = check_device(self.device, "--device")

    @property
    def ranking_list(self) -> list[str]:
        return list(self.rankings)
