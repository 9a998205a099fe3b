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

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from core.capabilities import Capability, parse_capability
from core.config_file import NON_NEGATIVE, POSITIVE, SEED, OptionError, Range, typed_config
from core.decoding import TEMPERATURE, TOP_P
from core.devices import check_device
from core.errors import ProbeError
from core.judges import JUDGES
from core.llm.config import ClientConfig
from interventions.recipes import ARM_RECIPES, RUN_RECIPES
from interventions.scaling import PAPER_FACTOR, validate_factor
from probes.backends.base import DRIVERS, editing_driver
from probes.hook_points import validate_hook
from probes.store import MODELS

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
ENGINES: tuple[str, ...] = ("shared", "per-arm")


@dataclass
@typed_config
class ABConfig:
    """What to intervene on, how to generate, how to judge, how to control."""

    run_dir: str | Path | None = None
    capability: str = "multi_turn"
    model: str = "dpo"
    edits: str | list[str] = field(
        default_factory=lambda: ["scale"], metadata={"flag": "--edit"}
    )  # arm recipes: scale, mean, patch, steer
    factor: float = PAPER_FACTOR
    neurons: str | Path | None = None  # a neuron-set file
    top_k: Annotated[int, POSITIVE] | None = None  # top K of the file, or of the run's ranking
    units: str | None = None  # "14:3,14:9,20:0"
    hook: str = "mlp_out"  # for --top-k from a run and --units
    doses: list[float] = field(default_factory=list, metadata={"flag": "--dose"})
    positive_control: bool = field(
        default=True, metadata={"flag": "--control"}
    )  # also run factor 0 (effect-size guard)
    placebo: Annotated[int, NON_NEGATIVE] = 20
    seed: Annotated[int, SEED] = 0
    judge: str = "rules"
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_timeout: Annotated[float, Range(0.001, 3600)] | None = (
        None  # LLM judge: seconds per request, retries, first backoff (None: the client's defaults)
    )
    judge_retries: Annotated[int, Range(0, 100)] | None = None
    judge_backoff: Annotated[float, Range(0, 600)] | None = None
    max_new_tokens: Annotated[int, POSITIVE] = (
        32  # with 160 rows and 20 placebos, what a 2-core laptop can afford (docs/interventions.md)
    )
    batch_size: Annotated[int, POSITIVE] = 16
    do_sample: bool = field(default=False, metadata={"flag": "--sample"})
    temperature: Annotated[float, TEMPERATURE] = 1.0
    top_p: Annotated[float, TOP_P] = field(default=1.0, metadata={"flag": None})
    dtype: str = "float32"
    device: str = "cpu"
    backend: str = "torch"
    engine: str = "shared"  # shared: every arm of a model decodes in shared batches; per-arm: one generate() per arm
    max_batch_tokens: Annotated[int, POSITIVE] | None = (
        None  # shared engine: padded tokens per prompt-pass forward (default: the device's)
    )
    limit: Annotated[int, POSITIVE] | None = None  # rows per capability
    collateral: bool = True  # score the other capabilities too
    collateral_rows: Annotated[int, NON_NEGATIVE] | None = (
        16  # rows per other capability (None: as many as --limit allows)
    )
    n_bootstrap: Annotated[int, Range(100)] = field(default=10_000, metadata={"flag": "--bootstrap"})
    model_dir: str | Path | None = None  # overrides the run's model dir (no run: default pair)
    source_dir: str | Path | None = None  # the other model of the pair, the patch source (default: the run's)
    data_file: str | Path | None = field(
        default=None, metadata={"flag": "--data"}
    )  # overrides the run's data file (no run: default pair's test split)
    out_dir: str | Path | None = None

    def __post_init__(self) -> None:
        self.target: Capability = parse_capability(self.capability)
        self.capability = self.target.value
        self.factor = validate_factor(self.factor)
        self.doses = [validate_factor(f, "--dose") for f in self.doses]
        _choice(self.model, MODELS, "--model")
        _choice(self.judge, JUDGES, "--judge")
        _choice(self.dtype, DTYPES, "--dtype")
        _choice(self.backend, tuple(DRIVERS), "--backend")
        _choice(self.engine, ENGINES, "--engine")
        self.device = check_device(self.device, "--device", allow_auto=True)
        editing_driver(self.backend, self.do_sample)
        self.edits = _edit_names(self.edits)
        needs_run = [name for name in self.edits if name in RUN_RECIPES]
        if needs_run and self.run_dir is None:
            raise ProbeError(
                f"--edit {needs_run[0]} needs a run directory: it reads the models' means from the run's activations.h5"
            )
        validate_hook(self.hook)
        if self.units is not None and (self.neurons is not None or self.top_k is not None):
            raise ProbeError("--units cannot be combined with --neurons or --top-k; give one neuron source")
        if self.run_dir is None and self.units is None and self.neurons is None:
            raise ProbeError(
                "no neurons to intervene on: give a RUN_DIR (its ranking), --neurons FILE or --units LAYER:UNIT,..."
            )

    def judge_client(self) -> ClientConfig | None:
        """The LLM judge's endpoint (flags, then ``OPENAI_*``), or ``None`` for the rule judge."""
        if self.judge != "llm":
            return None
        given = {"timeout": self.judge_timeout, "max_retries": self.judge_retries, "backoff_base": self.judge_backoff}
        return ClientConfig.from_env(base_url=self.judge_base_url, model=self.judge_model, **given)

    @property
    def factors(self) -> list[float]:
        """The main factor, the doses, and 0 for the positive control, without repeats."""
        out = [self.factor]
        for f in [*self.doses, *([0.0] if self.positive_control else [])]:
            if f not in out:
                out.append(f)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; credentials in the judge's URL are masked (the report and the resume fingerprint keep this)."""
        from core.llm.scrub import without_url_credentials

        body = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        if body["judge_base_url"]:
            body["judge_base_url"] = without_url_credentials(body["judge_base_url"])
        return body


def _edit_names(edits: list[str] | str) -> list[str]:
    """``["scale", "mean"]`` or ``"scale,mean"``, each a known recipe, without repeats."""
    names = edits.split(",") if isinstance(edits, str) else list(edits)
    out: list[str] = []
    for name in (str(n).strip() for n in names):
        _choice(name, tuple(ARM_RECIPES), "edits")
        if name not in out:
            out.append(name)
    if not out:
        raise ProbeError(f"--edit: give at least one of {', '.join(ARM_RECIPES)}")
    return out


def _choice(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise OptionError(name.lstrip("-").replace("-", "_"), f"one of {', '.join(allowed)}", value)
