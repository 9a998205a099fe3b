"""A run directory as the replication report reads it (:class:`Study`), and the commands that add each part of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from access.hook_table import DEFAULT_HOOK
from analysis.depth_share import DepthShareResult
from analysis.explain_record import ExplainRecord
from analysis.metric_maps import MetricMaps
from analysis.summary import AnalysisSummary
from core.run_dir import RunDir
from interventions.results import ABReport, ArmResult
from study.layout import TARGET, q, q_path
from study.stored import EvalRecord, ReplicateRecord
from study.verdicts import Verdict

if TYPE_CHECKING:
    from analysis.local_basis import BasisProfiles
    from localize.records import LocalizeReport

PAPER_HOOK = DEFAULT_HOOK  # the paper's Llama hook point: the claims read it when it was analysed


@dataclass(frozen=True)
class Missing:
    """A part of the study the run directory lacks (or cannot be read), why, and the command that adds it."""

    what: str
    why: str
    command: str


@dataclass(frozen=True)
class ModelEntry:
    """One model of the study: its role, directory, the fingerprint the run recorded and the one it has now."""

    role: str  # base | sft | dpo
    directory: str
    recorded_sha256: str = ""
    current_sha256: str = ""  # "" when the directory is gone
    provenance: dict[str, Any] = field(default_factory=dict)  # stage, recipe, data of its provenance.json


@dataclass(frozen=True)
class LoadedReport:
    path: Path
    report: ABReport


@dataclass(frozen=True)
class LoadedLocalize:
    """The run's localize report the study reads (the newest of :data:`study.layout.TARGET`), and where it is."""

    path: Path
    report: LocalizeReport


@dataclass
class Study:
    """A run directory read for the report; see the module doc."""

    run_dir: Path
    created: str
    toolkit_version: str
    machine: dict[str, Any]
    models: list[ModelEntry] = field(default_factory=list)
    data_file: str = ""
    data_sha256: str = ""
    # hooks, layers, position, capabilities, n per capability, when
    recording: dict[str, Any] = field(default_factory=dict)
    summary: AnalysisSummary | None = None
    hook: str = PAPER_HOOK
    maps: dict[str, MetricMaps] = field(default_factory=dict)  # capability -> maps at ``hook``
    depth: dict[str, DepthShareResult] = field(default_factory=dict)
    local_profile: BasisProfiles | None = None  # TARGET at ``hook`` in both bases, where the run recorded the local one
    explains: dict[str, ExplainRecord] = field(default_factory=dict)
    reports: list[LoadedReport] = field(default_factory=list)
    evaluation: EvalRecord | None = None
    localize: LoadedLocalize | None = None  # where the change lives (claim 1c, claim 4 at every k, the curves)
    replicate: ReplicateRecord | None = None
    inputs: dict[str, Path] = field(default_factory=dict)  # every file (or model directory) read, by what it is
    verdicts: list[Verdict] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    paper_arm: tuple[LoadedReport, ArmResult] | None = None
    causal_arms: list[tuple[LoadedReport, ArmResult]] = field(default_factory=list)

    def read(self, what: str, path: str | Path) -> Path:
        """Note ``path`` as one of the files the study read (an output must not be one of them); returns it."""
        self.inputs.setdefault(what, Path(path))
        return Path(path)

    def model(self, role: str) -> ModelEntry | None:
        return next((m for m in self.models if m.role == role), None)

    def target_reports(self) -> list[LoadedReport]:
        return [r for r in self.reports if r.report.capability == TARGET]


class Commands:
    """The commands that produce each part, for this run's models, data and directory."""

    def __init__(self, study: Study) -> None:
        sft, dpo, base = (study.model(r) for r in ("sft", "dpo", "base"))
        self.run_dir = study.run_dir
        self.run = q(study.run_dir)
        # a recorded run names its models and data; without them, the default pair
        if sft is not None and dpo is not None and sft.directory and dpo.directory:
            self.pair = f"--sft {q_path(sft.directory)} --dpo {q_path(dpo.directory)}"
        else:
            self.pair = "--pair smollm2"
        self.base = f" --base {q_path(base.directory)}" if base and base.directory else ""
        self.data = f" --data {q_path(study.data_file)}" if study.data_file else ""

    def record(self, capabilities: str = "all") -> str:
        return f"probe run -c {capabilities} {self.pair}{self.data} --out {self.run}"

    def analyze(self) -> str:
        return f"probe analyze {self.run}"

    def explain(self, capability: str) -> str:
        return f"probe explain {self.run} -c {capability}"

    def intervene(self, extra: str = "") -> str:
        return f"probe intervene {self.run} -c {TARGET}{extra}"

    def localize(self) -> str:
        return f"probe localize {self.run} -c {TARGET}"

    def evaluate(self) -> str:
        """``probe models eval`` on the held-out split (its default), as ``probe replicate`` evaluates."""
        return f"probe models eval {self.pair}{self.base} --out {q(RunDir(self.run_dir).eval_file)}"

    def replicate(self) -> str:
        return f"probe replicate {self.pair}{self.base}{self.data} --out {self.run}"

    def report(self) -> str:
        return f"probe report {self.run}"
