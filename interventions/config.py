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
from typing import Any

from core.capabilities import Capability, parse_capability
from core.devices import check_device
from core.errors import ProbeError
from core.judges import JUDGES
from core.llm.config import ClientConfig
from interventions.recipes import ARM_RECIPES, MODELS, RUN_RECIPES
from interventions.scaling import PAPER_FACTOR, validate_factor
from probes.backends.base import DRIVERS, editing_driver
from probes.hook_points import validate_hook

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")


@dataclass
class ABConfig:
    """What to intervene on, how to generate, how to judge, how to control."""

    run_dir: str | Path | None = None
    capability: str = "multi_turn"
    model: str = "dpo"
    edits: list[str] = field(default_factory=lambda: ["scale"])  # arm recipes: scale, mean, patch, steer
    factor: float = PAPER_FACTOR
    neurons: str | Path | None = None  # a neuron-set file
    top_k: int | None = None  # top K of the file, or of the run's ranking
    units: str | None = None  # "14:3,14:9,20:0"
    hook: str = "mlp_out"  # for --top-k from a run and --units
    doses: list[float] = field(default_factory=list)
    positive_control: bool = True  # also run factor 0 (effect-size guard)
    placebo: int = 20
    seed: int = 0
    judge: str = "rules"
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_timeout: float | None = None  # LLM judge: seconds per request, retries, first backoff (None: the client's defaults)
    judge_retries: int | None = None
    judge_backoff: float | None = None
    max_new_tokens: int = 64
    batch_size: int = 16
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    dtype: str = "float32"
    device: str = "cpu"
    backend: str = "torch"
    limit: int | None = None  # rows per capability
    collateral: bool = True  # score the other capabilities too
    n_bootstrap: int = 10_000
    model_dir: str | Path | None = None  # overrides the run's model dir (no run: default pair)
    source_dir: str | Path | None = None  # the other model of the pair, the patch source (default: the run's)
    data_file: str | Path | None = None  # overrides the run's data file (no run: default pair's test split)
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
        self.device = check_device(self.device, "--device", allow_auto=True)
        editing_driver(self.backend, self.do_sample)
        self.edits = _edit_names(self.edits)
        needs_run = [name for name in self.edits if name in RUN_RECIPES]
        if needs_run and self.run_dir is None:
            raise ProbeError(f"--edit {needs_run[0]} needs a run directory: it reads the models' means from the run's activations.h5")
        validate_hook(self.hook)
        if self.units is not None and (self.neurons is not None or self.top_k is not None):
            raise ProbeError("--units cannot be combined with --neurons or --top-k; give one neuron source")
        if self.top_k is not None and self.top_k < 1:
            raise ProbeError(f"--top-k must be at least 1, got {self.top_k}")
        if self.run_dir is None and self.units is None and self.neurons is None:
            raise ProbeError("no neurons to intervene on: give a RUN_DIR (its ranking), --neurons FILE or --units LAYER:UNIT,...")
        for name, value, low in (("--placebo", self.placebo, 0), ("--max-new-tokens", self.max_new_tokens, 1),
                                 ("--batch-size", self.batch_size, 1), ("--limit", self.limit, 1), ("--bootstrap", self.n_bootstrap, 100)):
            if value is not None and value < low:
                raise ProbeError(f"{name} must be at least {low}, got {value}")

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
        _choice(name, tuple(ARM_RECIPES), "--edit")
        if name not in out:
            out.append(name)
    if not out:
        raise ProbeError(f"--edit: give at least one of {', '.join(ARM_RECIPES)}")
    return out


def _choice(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise ProbeError(f"{name} {value!r}: expected one of {', '.join(allowed)}")
