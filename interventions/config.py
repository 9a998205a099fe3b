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
from access.factors import PAPER_FACTOR, parse_factors, validate_factor
from core.capabilities import Capability, parse_capability
from core.config_fields import flat_values, nested, option
from core.config_file import NON_NEGATIVE_COUNT, POSITIVE, RANDOM_SETS, RESAMPLES, SEED, choice, typed_config
from core.decoding import GenerationConfig
from core.devices import check_device
from core.errors import ProbeError
from core.judges import JUDGES
from core.llm.config import ClientConfig, ClientOptions
from core.run_dir import ACTIVATIONS_FILE

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
ENGINES: tuple[str, ...] = ("shared", "per-arm")


def _parse_factors(spec: str) -> list[float]:
    """``--dose 0,0.5``: the factors of a dose sweep."""
    return parse_factors(spec)


@dataclass
@typed_config
class ABConfig:
    """What to intervene on, how to generate, how to judge, how to control."""

    run_dir: str | Path | None = option(None, "Run directory from `probe run` (model dirs, data file, ranking).")
    capability: str = option("multi_turn", "Target capability (the others are scored as collateral).", aliases=["-c"])
    model: str = option("dpo", "Which model of the pair to intervene on: sft or dpo.")
    edits: str | list[str] = option(
        help="Arms, comma-separated or repeated: scale (factor, doses, control), mean (the other model's mean), "
        "patch (both ways between the pair), steer (mean-difference vector).",
        default_factory=lambda: ["scale"],
        flag="--edit",
        metavar="KIND[,KIND]",
        repeat=True,
    )
    factor: float = option(PAPER_FACTOR, "Scale factor (0 ablates; the default is the paper's).")
    neurons: str | Path | None = option(None, "Neuron-set JSON file (from `probe analyze`).")
    top_k: Annotated[int, POSITIVE] | None = option(
        None, "Top K units by |delta| of the run's ranking (or of --neurons)."
    )
    units: str | None = option(None, "Explicit units LAYER:UNIT[,...], e.g. 14:3,14:9,20:0.")
    select: str | list[str] = option(
        help="Compare selection rules (count, mean_diff, effect_size, attribution, weight): the same edit "
        "(factor 0 unless --factor) on each rule's top --top-k units (64), each with its own placebos, in one report.",
        default_factory=list,
        metavar="RULE[,RULE]",
    )
    hook: str = option("mlp_out", "Hook point for --top-k from a run and --units.")
    doses: list[float] = option(
        help="Dose sweep: comma-separated factors, e.g. 0,0.5,0.999999.",
        default_factory=list,
        flag="--dose",
        flag_type=str,
        from_flag=_parse_factors,
    )
    positive_control: bool = option(
        True, "Also run factor 0 as a positive control (effect-size guard).", flag="--control"
    )
    placebo: Annotated[int, RANDOM_SETS] = option(20, "Random matched neuron sets for the placebo control (0 = none).")
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
    backend: str = option(DEFAULT_DRIVER, "torch (hooks) or nnsight.")
    engine: str = option(
        "shared",
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
    model_dir: str | Path | None = option(
        None, "Model to intervene on (default: the run's --model, or the embedded default pair's)."
    )
    source_dir: str | Path | None = option(
        None, "The other model of the pair, the source of --edit patch (default: the run's, or the default pair's)."
    )
    data_file: str | Path | None = option(
        None, "Test rows JSONL (default: the run's data file, or the default pair's test split).", flag="--data"
    )
    out_dir: str | Path | None = option(
        None, "Output dir (default: RUN_DIR/interventions/<capability>_<model>_<time>).", flag="--out"
    )

    def __post_init__(self) -> None:
        # the checks need torch, numpy and h5py: imported here, so that `probe --help` imports none of them
        from access.hook_points import validate_hook
        from interventions.recipes import RUN_RECIPES
        from interventions.select_rules import rule_names
        from probes.store import MODELS

        self.target: Capability = parse_capability(self.capability)
        self.capability = self.target.value
        self.factor = validate_factor(self.factor)
        self.doses = [validate_factor(f, "--dose") for f in self.doses]
        for name, allowed in (
            ("model", MODELS),
            ("judge", JUDGES),
            ("dtype", DTYPES),
            ("backend", DRIVERS),
            ("engine", ENGINES),
        ):
            choice(name, getattr(self, name), allowed)
        self.device = check_device(self.device, "--device", allow_auto=True)
        editing_driver(self.backend, self.generation.do_sample)
        self.edits = _edit_names(self.edits)
        needs_run = [name for name in self.edits if name in RUN_RECIPES]
        if needs_run and self.run_dir is None:
            raise ProbeError(
                f"--edit {needs_run[0]} needs a run directory: it reads the models' means from the run's "
                f"{ACTIVATIONS_FILE}"
            )
        validate_hook(self.hook)
        self.select = rule_names(self.select)
        if self.select:
            _check_select(self)
        if self.units is not None and (self.neurons is not None or self.top_k is not None):
            raise ProbeError("--units cannot be combined with --neurons or --top-k; give one neuron source")
        if self.run_dir is None and self.units is None and self.neurons is None:
            raise ProbeError(
                "no neurons to intervene on: give a RUN_DIR (its ranking), --neurons FILE or --units LAYER:UNIT,..."
            )

    def judge_client(self) -> ClientConfig | None:
        """The LLM judge's endpoint (flags, then ``OPENAI_*``), or ``None`` for the rule judge."""
        return self.judge_endpoint.client() if self.judge == "llm" else None

    @property
    def factors(self) -> list[float]:
        """The main factor, the doses, and 0 for the positive control, without repeats."""
        out = [self.factor]
        for f in [*self.doses, *([0.0] if self.positive_control else [])]:
            if f not in out:
                out.append(f)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings by their flat names (:func:`core.config_fields.flat_values`, as ``--config`` files name
        them); credentials in the judge's URL are masked (the report and the resume fingerprint keep this)."""
        from core.llm.scrub import without_url_credentials

        body = {k: (str(v) if isinstance(v, Path) else v) for k, v in flat_values(self).items()}
        if body["judge_base_url"]:
            body["judge_base_url"] = without_url_credentials(body["judge_base_url"])
        return body


def _check_select(config: ABConfig) -> None:
    """What ``--select`` cannot be combined with: a neuron source of its own, no run, a dose sweep."""
    if config.units is not None or config.neurons is not None:
        raise ProbeError(
            "--select cannot be combined with --neurons or --units: each rule picks its own units (--top-k: how many)"
        )
    if config.run_dir is None:
        raise ProbeError("--select needs a run directory: each rule ranks the units of that run")
    if config.doses:
        raise ProbeError(
            "--select runs one edit per rule: leave out --dose (sweep doses on one rule's set with --neurons)"
        )


def _edit_names(edits: list[str] | str) -> list[str]:
    """``["scale", "mean"]``, ``"scale,mean"`` or ``["scale,mean"]``, each a known recipe, without repeats."""
    names = [name for item in ([edits] if isinstance(edits, str) else edits) for name in str(item).split(",")]
    from interventions.recipes import ARM_RECIPES

    out: list[str] = []
    for name in (n.strip() for n in names):
        choice("edits", name, ARM_RECIPES)
        if name not in out:
            out.append(name)
    if not out:
        raise ProbeError(f"--edit: give at least one of {', '.join(ARM_RECIPES)}")
    return out
