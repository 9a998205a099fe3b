"""Everything a replication report of the paper's §7 says, gathered from one run directory as typed records.

:func:`gather_study` reads what ``RUN_DIR`` holds, and only that (:class:`core.run_dir.RunDir`
names the files): the recording, the analysis (the summary, the maps, the neuron cards of
``probe explain``), the A/B reports under ``interventions/``, an evaluation of the pair (from
``probe models eval --out``), the newest localize report of multi_turn under ``localize/`` (``probe localize``, by
hand or as a stage of ``probe replicate``) and, when ``probe replicate`` made the run, its record. Every part
may be missing or unreadable: it then becomes a :class:`Missing` item naming the command that adds
it, and the claims that needed it get a ``not run`` verdict (:mod:`study.verdicts`);
nothing raises past a part.

The verdicts are decided by the rules of :mod:`study.verdicts`, from records built
out of the files (:mod:`study.evidence`), and rendered by :mod:`study.report_html`.

Example:
    >>> import tempfile
    >>> from analysis.summary import AnalysisSummary
    >>> summary = RunDir(tempfile.mkdtemp()).analysis.summary; summary.parent.mkdir()
    >>> AnalysisSummary("runs/x", "topk_count", {}, {}, "maps.h5", [], {}).save(summary)   # an analysis of nothing
    >>> study = gather_study(summary.parent.parent)
    >>> [v.describe().split(" (")[0] for v in study.verdicts], study.missing[0].what
    (['not run', 'not run', 'not run', 'not run', 'not run'], 'the recording')
    >>> study = gather_study("runs/latest")                              # doctest: +SKIP
    >>> [v.describe() for v in study.verdicts]                           # doctest: +SKIP
    ['supported', 'not supported', 'cannot be tested here (...)', 'not run (probe intervene ...)']
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.explain_record import ExplainRecord
from analysis.summary import AnalysisSummary
from core.builds import in_current_home
from core.capabilities import ALL_CAPABILITIES
from core.errors import ProbeError
from core.records import read_record
from core.run_dir import InterventionDir, RunDir
from interventions.results import ABReport
from study.layout import TARGET
from study.records import PAPER_HOOK, Commands, LoadedReport, Missing, ModelEntry, Study
from study.stored import EvalRecord, ReplicateRecord

if TYPE_CHECKING:
    from analysis.config import AnalysisConfig


def gather_study(run_dir: str | Path, eval_file: str | Path | None = None) -> Study:
    """Read ``run_dir`` into a :class:`Study` with its verdicts;
    one :class:`ProbeError` only when it is no run at all."""
    from core.provenance import library_versions

    run_path, run = Path(run_dir), RunDir(run_dir)
    if not run.activations.is_file() and not run.analysis.summary.is_file():
        raise ProbeError(
            f"{run_path}: not a run directory (no {run.activations.name}, no "
            f"{run.analysis.summary.relative_to(run.root).as_posix()}); make one with "
            f"`probe replicate --out {run_path}` (or `probe run ... --out {run_path}`)"
        )
    versions = library_versions()
    study = Study(
        run_path, time.strftime("%Y-%m-%d %H:%M:%S %Z"), versions.get("rolemrc-probe", "unknown"), _machine(versions)
    )
    study.replicate = _read_replicate(study)
    _read_recording(study)
    _read_analysis(study)
    _read_depth(study)
    _read_explains(study)
    _read_reports(study)
    _read_evaluation(study, Path(eval_file) if eval_file is not None else run.eval_file, eval_file is not None)
    _read_localize(study)
    from study.claims import decide

    decide(study)
    commands = Commands(study)
    study.commands = [study.replicate.command if study.replicate and study.replicate.command else commands.replicate()]
    study.commands.append(commands.report())
    return study


def _machine(versions: dict[str, str]) -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": versions.get("python"),
        "torch": versions.get("torch"),
        "transformers": versions.get("transformers"),
    }


def _read_replicate(study: Study) -> ReplicateRecord | None:
    """The replicate record, when ``probe replicate`` made the run; a malformed one is a missing part."""
    path = RunDir(study.run_dir).replicate_file
    if not path.is_file():
        return None
    try:
        return read_record(ReplicateRecord, study.read("the replicate record", path), "replicate record")
    except ProbeError as exc:
        study.missing.append(Missing("the replicate record (stage times)", str(exc), Commands(study).replicate()))
        return None


# --- the recording ---------------------------------------------------------------------------------------------------


def _read_recording(study: Study) -> None:
    from probes.store import MODELS, RunReader

    try:
        with RunReader(study.run_dir) as run:
            study.read("the recording", run.path)
            settings = run.settings
            infos = {m: run.model_info(m) for m in MODELS}
            caps = run.capabilities()
            study.recording = {
                "capabilities": caps,
                "n": {c: run.n_samples(c) for c in caps},
                "hooks": list(settings.hooks),
                "layers": list(settings.layers),
                "position": settings.position,
                "dtype": settings.dtype,
                "backend": settings.backend,
                "base_dir": getattr(settings, "base_dir", ""),
                "base_weights_sha256": getattr(settings, "base_weights_sha256", ""),
                **_recorded_when(run.path),
            }
    except ProbeError as exc:
        study.missing.append(Missing("the recording", str(exc), "probe run (see `probe run --help`)"))
        return
    study.data_file, study.data_sha256 = settings.data_file, settings.data_sha256
    for role in MODELS:
        directory = str(infos[role].get("model_dir") or settings.model_dir(role))
        if directory:
            study.read(f"the {role} model directory", in_current_home(directory))
        study.models.append(
            _model_entry(
                role, directory, str(infos[role].get("weights_sha256") or getattr(settings, f"{role}_weights_sha256"))
            )
        )
    base = _base_of(study)
    if base:
        study.read("the base model directory", base[0])
        study.models.insert(0, _model_entry("base", base[0], base[1]))
    absent = [c.value for c in ALL_CAPABILITIES if c.value not in caps]
    if absent:
        study.missing.append(
            Missing(
                f"capabilities {', '.join(absent)}",
                "not recorded in this run (claim 1 and the heatmaps cover only the recorded ones)",
                Commands(study).record(",".join(absent)),
            )
        )


def _recorded_when(path: Path) -> dict[str, Any]:
    from probes.store import checked_metadata

    try:  # through the guard process: HDF5 itself crashes on some damaged files
        provenance = json.loads(checked_metadata(path)["root"].get("provenance", "{}"))
    except (ProbeError, OSError, ValueError, TypeError):
        return {}
    if not isinstance(provenance, dict):
        return {}
    return {"recorded_at": provenance.get("recorded_at"), "device": provenance.get("device")}


def _model_entry(role: str, directory: str, recorded: str) -> ModelEntry:
    from core.provenance import weights_sha256
    from training.provenance import read_provenance

    current = ""
    provenance: dict[str, Any] = {}
    path = in_current_home(directory)  # a default pair's, after its home was copied or moved
    if directory and path.is_dir():
        try:
            current = weights_sha256(path)
            record = read_provenance(path)
        except (OSError, ProbeError):
            record = None
        if record is not None and record.stage not in ("sft", "dpo"):
            source = record.extra.get("source") or {}
            provenance = {
                "stage": record.stage,
                "source": f"{record.extra.get('model', record.stage)}, from "
                f"{source.get('package', '?')} {source.get('version', '')}".strip(),
            }
        elif record is not None:
            provenance = {
                "stage": record.stage,
                "created": record.created,
                "data": record.data,
                "final_loss": record.final_loss,
                "recipe": {k: record.config.get(k) for k in _RECIPE_KEYS if k in record.config},
                "parent": record.parent,
            }
    return ModelEntry(role, directory, recorded, current, provenance)


_RECIPE_KEYS = (
    "recipe",
    "learning_rate",
    "lr_scheduler",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "max_length",
    "beta",
    "loss_type",
    "seed",
)


def _base_of(study: Study) -> tuple[str, str] | None:
    """The base (directory, fingerprint): the replicate record's, else the run's own (``probe run --base``), else the
    SFT model's recorded parent; the fingerprint is the one recorded for it (the SFT's provenance names its
    parent's)."""
    sft = study.model("sft")
    parent = (sft.provenance.get("parent") or {}) if sft else {}
    replicated = study.replicate.base_dir if study.replicate else None
    given = str(replicated or study.recording.get("base_dir") or parent.get("base") or "")
    named = in_current_home(given) if given else None
    if named is None or not named.is_dir():
        return None
    recorded = str(study.recording.get("base_weights_sha256") or "")
    if not recorded and parent.get("base") and in_current_home(str(parent["base"])).resolve() == named.resolve():
        recorded = str(parent.get("weights_sha256") or "")
    return str(named), recorded


# --- the analysis ----------------------------------------------------------------------------------------------------


def _read_analysis(study: Study) -> None:
    from analysis.maps import load_maps

    path = RunDir(study.run_dir).analysis.summary
    if not path.is_file():
        study.missing.append(Missing("the analysis", f"{path} is missing", Commands(study).analyze()))
        return
    try:
        study.summary = AnalysisSummary.load(study.read("the analysis", path))
    except ProbeError as exc:
        study.missing.append(Missing("the analysis", str(exc), Commands(study).analyze()))
        return
    hooks = [h for _, h, _ in study.summary.hooks()]
    study.hook = PAPER_HOOK if PAPER_HOOK in hooks else (hooks[0] if hooks else PAPER_HOOK)
    try:
        maps = study.read("the analysis maps", path.parent / study.summary.maps)
        study.maps = {m.capability: m for m in load_maps(maps) if m.hook == study.hook}
    except (ProbeError, OSError, KeyError) as exc:
        study.missing.append(Missing("the analysis maps (heatmaps)", str(exc), Commands(study).analyze()))


def analysed_capabilities(study: Study) -> list[str]:
    if study.summary is None:
        return []
    return [cap for cap, hook, _ in study.summary.hooks() if hook == study.hook]


def _read_depth(study: Study) -> None:
    from analysis.config import AnalysisConfig
    from analysis.depth_share import depth_share

    if study.summary is None or not study.recording:
        return
    settings = study.summary.settings
    config = AnalysisConfig(**{k: settings[k] for k in ("metric", "top_percent", "normalize", "test") if k in settings})
    for cap in analysed_capabilities(study):
        try:
            result = depth_share(study.run_dir, cap, study.hook, config)
        except ProbeError as exc:
            result = str(exc)
        if isinstance(result, str):
            study.notes.append(f"{cap}/{study.hook}: no depth share: {result}")
        else:
            study.depth[cap] = result
    _read_local_profile(study, config)


def _read_local_profile(study: Study, config: AnalysisConfig) -> None:
    """Claim 1's second look: the target's layer profile in the local basis beside the global one (evidence only;
    the verdict reads the global basis, as the paper's maps do). A run recorded without the local basis has none."""
    from dataclasses import replace

    from analysis.local_basis import basis_profiles
    from probes.store import RunReader

    with RunReader(study.run_dir) as run:
        if TARGET not in run.capabilities() or not run.local_directions(TARGET, study.hook):
            return
    try:
        study.local_profile = basis_profiles(study.run_dir, TARGET, study.hook, replace(config, stability_resamples=0))
    except ProbeError as exc:
        study.notes.append(f"{TARGET}/{study.hook}: no local-basis profile: {exc}")


def _read_explains(study: Study) -> None:
    for cap in analysed_capabilities(study):
        path = RunDir(study.run_dir).analysis.explain_record(cap, study.hook)
        if not path.is_file():
            study.missing.append(
                Missing(f"neuron cards of {cap}", f"{path.name} is missing", Commands(study).explain(cap))
            )
            continue
        try:
            study.explains[cap] = ExplainRecord.load(study.read(f"the neuron cards of {cap}", path))
        except ProbeError as exc:
            study.missing.append(Missing(f"neuron cards of {cap}", str(exc), Commands(study).explain(cap)))


# --- interventions and evaluation ------------------------------------------------------------------------------------


def _read_reports(study: Study) -> None:
    root = RunDir(study.run_dir).interventions
    seen: set[Path] = set()
    paths = sorted(RunDir(study.run_dir).intervention_reports(), key=lambda p: (p.stat().st_mtime, p.parent.name))
    for path in paths:
        real = path.resolve()
        if real in seen:
            continue  # the `latest` link
        seen.add(real)
        try:
            loaded = LoadedReport(path, ABReport.load(study.read(f"the A/B report in {path.parent.name}", path)))
        except (ProbeError, OSError) as exc:
            study.notes.append(f"{path}: ignored, not readable: {exc}")
            continue
        study.reports.append(loaded)
        _outcomes_only(study, loaded)
    if not study.target_reports():
        study.missing.append(
            Missing(
                "interventions on multi_turn",
                f"no {InterventionDir(root).report.name} for {TARGET} under {root}",
                Commands(study).intervene(),
            )
        )


def _outcomes_only(study: Study, loaded: LoadedReport) -> None:
    """An A/B of ``--outcomes only`` is read for its continuous outcomes (claim 4); the compliance it lacks is named."""
    from study.evidence import measured_compliance

    report = loaded.report
    if not report.arms or any(measured_compliance(report, arm) for arm in report.arms):
        return
    study.missing.append(
        Missing(
            f"compliance of the arms in {loaded.path.parent.name}",
            f"{loaded.path} is an --outcomes only run: its arms generated nothing, so it holds their continuous "
            "outcomes (read for claim 4) and no compliance (claim 3 needs it)",
            Commands(study).intervene(),
        )
    )


def _read_evaluation(study: Study, path: Path, given: bool) -> None:
    """The evaluation of the pair (``--eval`` or the run's); missing or malformed, it is a missing part."""
    lacks = "an evaluation of the pair (compliance)"
    if not path.is_file() and not given:
        study.missing.append(Missing(lacks, f"{path} is missing", Commands(study).evaluate()))
        return
    try:
        study.evaluation = read_record(
            EvalRecord, study.read("--eval" if given else "the evaluation", path), "evaluation"
        )
    except ProbeError as exc:
        study.missing.append(Missing(lacks, str(exc), Commands(study).evaluate()))
        return
    evaluated = study.evaluation.model_dirs()
    recorded = {m.directory for m in study.models if m.role in ("sft", "dpo") and m.directory}
    if (
        recorded
        and evaluated
        and {str(Path(p).resolve()) for p in evaluated} != {str(Path(p).resolve()) for p in recorded}
    ):
        study.notes.append(
            f"{path} evaluated {', '.join(sorted(evaluated))}, not the recorded models {', '.join(sorted(recorded))}"
        )


def _read_localize(study: Study) -> None:
    """The newest localize report of :data:`TARGET` in the run (by its file's time, whoever wrote it: ``probe
    localize`` by hand or ``probe replicate``'s stage); unreadable ones are noted and passed over."""
    from localize.records import LocalizeReport
    from study.records import LoadedLocalize

    folder = RunDir(study.run_dir).localize
    found: dict[Path, Path] = {}
    for path in sorted(folder.glob("*/localize.json"), key=lambda p: p.parent.is_symlink()):
        found.setdefault(path.resolve(), path)  # a folder once, by its own name rather than the `latest` link's
    for path in sorted(found.values(), key=lambda p: (p.stat().st_mtime, p.parent.name), reverse=True):
        try:
            report = LocalizeReport.load(path)
        except (ProbeError, OSError) as exc:
            study.notes.append(f"{path}: ignored, not readable: {exc}")
            continue
        if report.capability == TARGET:
            study.localize = LoadedLocalize(study.read(f"the localize report in {path.parent.name}", path), report)
            return
    study.missing.append(
        Missing(
            f"where the change lives on {TARGET} (claim 1c, claim 4 at every k)",
            f"no localize report of {TARGET} under {folder}",
            Commands(study).localize(),
        )
    )
