"""``ABConfig``: one validated description of an A/B intervention run, for CLI and library.

Every check that can fail on user input happens here, before a model is loaded, and
raises :class:`ProbeError` naming the argument: a factor that is not a finite number,
two neuron sources at once, a placebo count below zero, an unknown judge, dtype or edit, a
backend that cannot apply edits.

Example:
    >>> cfg = ABConfig(run_dir=None, model_dir="m", data_file="t.jsonl", units="2:0,2:5", placebo=0)
    >>> cfg.factors, cfg.edits
    ([0.999999, 0.0], ['scale'])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from access.driver_table import DEFAULT_DRIVER, DRIVERS, editing_driver
from access.stack import ENGINES, SHARED
from core.capabilities import Capability, parse_capability
from core.config_fields import flat_values, nested, option
from core.config_file import NON_NEGATIVE_COUNT, POSITIVE, RANDOM_SETS, RESAMPLES, SEED, choice, typed_config
from core.config_init import flat_init
from core.decoding import GenerationConfig
from core.devices import check_device
from core.errors import ProbeError
from core.run_dir import ACTIVATIONS_FILE
from interventions.edit_spec import EditSpec
from interventions.rule_table import RULE_METRICS
from judging import JUDGES
from judging.client.config import ClientConfig, ClientOptions
from training.eval_config import DEFAULT_SPLIT, SPLITS

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
OUTCOME_MODES: tuple[str, ...] = ("on", "off", "only")
# which placebo sets generate for the compliance percentile (interventions.sequential): decide-first, or every one
DECIDE_FIRST = "decide-first"
PLACEBO_GENERATIONS: tuple[str, ...] = (DECIDE_FIRST, "all")
# DPO pairs of the capability whose margin change every arm and placebo set measures (docs/interventions.md: a pair is
# ~350 tokens, so 16 pairs cost a fifth of the 160 KL rows' tokens)
DEFAULT_OUTCOME_PAIRS = 16


@flat_init
@dataclass
@typed_config
class ABConfig:
    """What to intervene on, how to generate, how to judge, how to control."""

    run_dir: str | Path | None = option(None, "Run directory from `probe run` (model dirs, data file, ranking).")
    capability: str = option("multi_turn", "Target capability (the others are scored as collateral).", aliases=["-c"])
    model: str = option("dpo", "Which model of the pair to intervene on: sft or dpo.")
    edit: EditSpec = nested(EditSpec)
    select: str | list[str] = option(
        help=f"Compare selection rules ({', '.join(RULE_METRICS)}): the same edit "
        "(factor 0 unless --factor) on each rule's top --top-k units (64), each with its own placebos, in one report.",
        default_factory=list,
        metavar="RULE[,RULE]",
    )
    positive_control: bool = option(
        True, "Also run factor 0 as a positive control (effect-size guard).", flag="--control"
    )
    placebo: Annotated[int, RANDOM_SETS] = option(20, "Random matched neuron sets for the placebo control (0 = none).")
    placebo_generation: str = option(
        DECIDE_FIRST,
        "decide-first (generate an arm's placebo sets only where its own generations changed, teacher-force them for "
        "the continuous outcomes only where an outcome moves, each only until the verdict can no longer change) or "
        "all (every set of every arm, generated and teacher-forced).",
    )
    seed: Annotated[int, SEED] = option(0, "Seed for placebo draws, bootstrap and sampling.")
    judge: str = option("rules", "rules (offline, synthetic data) or llm (OpenAI-compatible endpoint).")
    judge_endpoint: ClientOptions = nested(
        ClientOptions,
        prefix="judge_",
        only=["base_url", "model", "timeout", "retries", "backoff"],
        help_prefix="LLM judge: ",
    )
    generation: GenerationConfig = nested(
        GenerationConfig,
        # 32 tokens: with 160 rows and 20 placebos, what a 2-core laptop can afford (docs/interventions.md)
        default_factory=lambda: GenerationConfig(max_new_tokens=32),
        skip=["seed"],  # one seed for the run: ABConfig.seed seeds sampling too
    )
    dtype: str = option("float32", "Model dtype: float32, bfloat16 or float16.")
    device: str = option("cpu", "Torch device, e.g. cpu or cuda.")
    backend: str = option(DEFAULT_DRIVER, "torch (hooks) or nnsight (greedy only; every edit but lda).")
    engine: str = option(
        SHARED,
        "shared (every arm of a model decodes in shared batches, sharing the blocks below the edits) "
        "or per-arm (one generate() per arm).",
    )
    max_batch_tokens: Annotated[int, POSITIVE] | None = option(
        None, "Shared engine: padded tokens per prompt-pass forward (default: the device's, 2048 on CPU)."
    )
    limit: Annotated[int, POSITIVE] | None = option(None, "At most N rows per capability (interleaved across tasks).")
    collateral: bool = option(
        False, "Score the other capabilities too (--collateral-rows of each, for every arm and placebo set)."
    )
    collateral_rows: Annotated[int, NON_NEGATIVE_COUNT] | None = option(
        16, "Rows of each other capability scored as collateral (interleaved across tasks; none: as --limit allows)."
    )
    n_bootstrap: Annotated[int, RESAMPLES] = option(10_000, "Paired bootstrap resamples of each Δ.", flag="--bootstrap")
    outcomes: str = option(
        "on",
        "Continuous outcomes by teacher forcing (KL to the other model, gap closed, reference log-prob, DPO margin): "
        "on, off, or only (no generation: --responses reference, or an earlier run's folder).",
    )
    responses: str = option(
        "greedy",
        "Response tokens the outcomes teacher-force: greedy (the other model's own baseline responses), reference, "
        "chosen, rejected, a JSONL FILE, or the folder of an earlier probe intervene run (its greedy responses).",
    )
    outcome_pairs: Annotated[int, NON_NEGATIVE_COUNT] = option(
        DEFAULT_OUTCOME_PAIRS, "DPO pairs of the capability whose margin change each arm measures (0: none)."
    )
    dpo_file: str | Path | None = option(
        None, "DPO pairs JSONL for the margin and for --responses chosen/rejected (default: dpo.jsonl beside --data)."
    )
    model_dir: str | Path | None = option(
        None, "Model to intervene on (default: the run's --model, or the embedded default pair's)."
    )
    source_dir: str | Path | None = option(
        None, "The other model of the pair, the source of --edit patch (default: the run's, or the default pair's)."
    )
    split: str = option(
        DEFAULT_SPLIT,
        "Which rows when no --data is given: heldout (never trained on: constraints carried over turns, priority "
        "triples, role boundaries, judged by their constraint checkers) or test (the run's data file, the training "
        "distribution's test split).",
    )
    data_file: str | Path | None = option(
        None,
        "Test rows JSONL, whatever --split (default: the held-out split; with --split test the run's data file, or "
        "the default pair's test split).",
        flag="--data",
    )
    out_dir: str | Path | None = option(
        None, "Output dir (default: RUN_DIR/interventions/<capability>_<model>_<time>).", flag="--out"
    )

    def __post_init__(self) -> None:
        # the checks need numpy and h5py: imported here, so that `probe --help` imports neither
        from access.edits import EDIT_KINDS
        from interventions.recipes import RECIPES
        from interventions.select_rules import rule_names
        from probes.store import MODELS

        self.target: Capability = parse_capability(self.capability)
        self.capability = self.target.value
        for name, allowed in (
            ("model", MODELS),
            ("judge", JUDGES),
            ("dtype", DTYPES),
            ("backend", DRIVERS),
            ("engine", ENGINES),
            ("outcomes", OUTCOME_MODES),
            ("placebo_generation", PLACEBO_GENERATIONS),
            ("split", SPLITS),
        ):
            choice(name, getattr(self, name), allowed)
        self.device = check_device(self.device, "--device", allow_auto=True)
        logit_edits = [name for name in self.edit.edits if name in EDIT_KINDS and EDIT_KINDS[name].edits_logits]
        editing_driver(self.backend, self.generation.do_sample, logit_edits)
        needs_run = [name for name in self.edit.edits if RECIPES[name].needs_run]
        if needs_run and self.run_dir is None:
            raise ProbeError(
                f"--edit {needs_run[0]} needs a run directory: it reads the models' means from the run's "
                f"{ACTIVATIONS_FILE}"
            )
        if self.responses not in ("greedy", "reference", "chosen", "rejected") and not Path(self.responses).exists():
            raise ProbeError(
                f"--responses {self.responses}: expected greedy, reference, chosen, rejected, a JSONL file of "
                "responses or the folder of an earlier probe intervene run"
            )
        if self.outcomes == "only" and self.responses == "greedy":
            raise ProbeError(
                "--outcomes only generates nothing, so it has no greedy responses of its own: give --responses "
                "reference (or chosen, rejected, a FILE), or the folder of an earlier probe intervene run"
            )
        self.select = rule_names(self.select)
        if self.select:
            _check_select(self)
        if self.run_dir is None and not self.edit.has_units:
            raise ProbeError(
                "no neurons to intervene on: give a RUN_DIR (its ranking), --neurons FILE or --units LAYER:UNIT,..."
            )

    def judge_client(self) -> ClientConfig | None:
        """The LLM judge's endpoint (flags, then ``OPENAI_*``), or ``None`` for the rule judge."""
        return self.judge_endpoint.client() if self.judge == "llm" else None

    @property
    def factors(self) -> list[float]:
        """The main factor, the doses, and 0 for the positive control, without repeats."""
        out = [self.edit.factor]
        for f in [*self.edit.doses, *([0.0] if self.positive_control else [])]:
            if f not in out:
                out.append(f)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings by their flat names (:func:`core.config_fields.flat_values`, as ``--config`` files name
        them); credentials in the judge's URL are masked (the report and the resume fingerprint keep this)."""
        from judging.client.scrub import without_url_credentials

        body = {k: (str(v) if isinstance(v, Path) else v) for k, v in flat_values(self).items()}
        if body["judge_base_url"]:
            body["judge_base_url"] = without_url_credentials(body["judge_base_url"])
        return body


def _check_select(config: ABConfig) -> None:
    """What ``--select`` cannot be combined with: a neuron source of its own, no run, a dose sweep."""
    if config.edit.units is not None or config.edit.neurons is not None:
        raise ProbeError(
            "--select cannot be combined with --neurons or --units: each rule picks its own units (--top-k: how many)"
        )
    if config.run_dir is None:
        raise ProbeError("--select needs a run directory: each rule ranks the units of that run")
    if config.edit.doses:
        raise ProbeError(
            "--select runs one edit per rule: leave out --dose (sweep doses on one rule's set with --neurons)"
        )
