"""``replicate``: the whole §7 study of one SFT/DPO pair, stage by stage, each resuming where it stopped, then a report.

Stages, each the library call behind one ``probe`` command, with that command's defaults unless
:class:`ReplicateOptions` says otherwise:

==========  =====================================================================================
record      every capability's prompts through both models (``probe run -c all``; resumes batch by batch)
analyze     maps, layer profiles, neuron sets, plots (``probe analyze``; no PNG, the report inlines its own figures)
explain     neuron cards of each capability's top units (``probe explain``)
intervene   the A/B on multi_turn with its controls (``probe intervene RUN -c multi_turn --limit 48 --no-collateral``;
            resumes batch by batch)
localize    where the change lives on multi_turn (``probe localize RUN -c multi_turn``, its defaults but ``--limit``;
            on by default, ``--no-localize`` leaves it out); not run, with the reason, when the recording lacks its
            hook point (a run recorded before the stage existed)
evaluate    compliance of base, SFT and DPO (``probe models eval``, :data:`EVAL_ROWS` rows by default)
report      the run's report (``probe report``)
==========  =====================================================================================

With ``nproc`` N > 1 the record, intervene, localize and evaluate stages run as their ``probe`` command under the
launcher on this machine (:func:`launched`: ``python -m probes.distributed --standalone --nproc-per-node N -m
probe_cli ...``), each rank its share, equal to one process (docs/scaling.md); the other stages run here as one process.

A stage whose outputs are already complete is skipped (:meth:`Stage.complete`), one whose inputs are missing is not
run and says why (:attr:`Stage.blocked`); an interrupted
one starts again where its own resume lets it (recorded batches, finished generation passes) or
from its start (analyze, explain, evaluate: minutes at most). The replicate record
(:attr:`core.run_dir.RunDir.replicate_file`) keeps the options, the command line that reproduces
the run and each stage's estimated and measured time.

Before anything runs, :func:`plan` estimates each stage's time from the model's parameter count,
the rows, the prompt tokens and the new tokens, at the pace measured on the default pair on this
project's 2-core CPU machine (:mod:`study.replicate_estimate`). It is an estimate:
other machines, other loads, early stops and the shared decoding engine move it.

Example:
    >>> import tempfile
    >>> model = Path(tempfile.mkdtemp())
    >>> _ = (model / "config.json").write_text("{}")
    >>> options = ReplicateOptions(sft_dir=model, dpo_dir=model, data_file=Path("t.jsonl"), out_dir=Path("runs/r"))
    >>> options.command()
    'probe replicate --sft /.../tmp... --dpo /.../tmp... --data t.jsonl --out runs/r'
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.clock import kept
from core.config_fields import flat_values
from core.errors import Interrupted, ProbeError
from core.pair_dirs import PairDirs
from core.progress import logged
from core.records import read_record
from core.run_dir import RunDir
from interventions.cells import fmt_range
from study.layout import INTERVENTION_DIR, LOCALIZE_DIR, TARGET
from study.replicate_checks import (
    all_explained,
    analysed,
    analysis_complete,
    evaluation_complete,
    expected_rows,
    explained,
    intervention_complete,
    localize_complete,
    recorded_complete,
)
from study.replicate_config import ReplicateOptions
from study.replicate_estimate import ab_rows, estimate, evaluated, localize_seconds, minutes
from study.stored import ReplicateRecord, StageRecord

if TYPE_CHECKING:
    from interventions.config import ABConfig
    from localize.config import LocalizeConfig
    from probes.config import RecordConfig

Progress = Callable[[str], None]


@dataclass
class Stage:
    """One step: what it does, its estimated seconds, whether its outputs are complete, how to run it."""

    name: str
    what: str
    estimate_s: float
    complete: Callable[[], bool]
    run: Callable[[], str]
    status: str = "planned"  # planned | skipped (complete before this call) | not run (inputs missing) | running | done
    seconds: float | None = None
    parts: dict[str, float] = field(default_factory=dict)  # seconds per kind of work inside it (core.clock)
    blocked: Callable[[], str | None] | None = None  # why its inputs are missing, when they are (checked as it starts)
    at_most_s: float | None = None  # where its work depends on what it finds: its estimate at most (estimate_s: least)

    def bounds(self) -> tuple[float, float]:
        """Its estimated seconds, at least and at most."""
        return self.estimate_s, self.estimate_s if self.at_most_s is None else self.at_most_s

    def estimated(self) -> str:
        """Its estimate in words: ``4.0 min``, or ``4.0 min to 12.5 min`` where it depends on what it finds."""
        return fmt_range(*self.bounds(), minutes)


@dataclass
class ReplicateResult:
    out_dir: Path
    stages: list[Stage]
    report: Path | None = None
    verdicts: list[Any] = field(default_factory=list)
    seconds: float = 0.0


# --- the stages ------------------------------------------------------------------------------------------------------


def ab_config(options: ReplicateOptions) -> ABConfig:
    from core.config_file import from_settings
    from interventions.config import ABConfig

    out_dir = RunDir(options.out_dir).intervention(INTERVENTION_DIR).root
    config: ABConfig = from_settings(
        ABConfig, dict(run_dir=options.out_dir, capability=TARGET, out_dir=out_dir, **options.intervention())
    )
    return config


def localize_config(options: ReplicateOptions) -> LocalizeConfig:
    """The localize stage's run: ``probe localize``'s defaults but the options given, into :data:`LOCALIZE_DIR`."""
    from localize.config import LocalizeConfig

    out_dir = RunDir(options.out_dir).localize / LOCALIZE_DIR
    return LocalizeConfig(run_dir=options.out_dir, out_dir=out_dir, **options.localization())


def record_config(options: ReplicateOptions) -> RecordConfig:
    """The record stage's recording: every capability through SFT and DPO at ``probe run``'s hook point, and at the
    localize stage's too when it runs; ``probe run``'s defaults otherwise."""
    from probes.config import RecordConfig

    hooks = analysed_hooks() + ([localize_config(options).hook] if options.localize else [])
    return RecordConfig(
        models=PairDirs(options.models.sft, options.models.dpo),
        data_file=options.data_file,
        capabilities="all",
        hooks=list(dict.fromkeys(hooks)),
        out_dir=options.out_dir,
        device=options.device,
    )


def analysed_hooks() -> list[str]:
    """The hook points the analyze and explain stages read: ``probe run``'s (the paper's), not the localize stage's
    (``probe localize`` reads the recording itself)."""
    from core.config_fields import flat_fields
    from probes.config import RecordConfig

    return list(flat_fields(RecordConfig)["hooks"].default)


def plan(options: ReplicateOptions, progress: Progress, kept: dict[str, Any] | None = None) -> list[Stage]:
    """The stages with their estimates (module doc); nothing runs.
    ``kept`` receives the report's study when it is made."""
    config, recording = ab_config(options), record_config(options)
    seconds, at_most = estimate(options, config, recording)
    out = options.out_dir
    caps = list(expected_rows(options.data_file))
    target_rows, short = _target_rows(options, config)
    return [
        Stage(
            "record",
            f"record {len(caps)} capabilities through both models ({', '.join(recording.hooks)}, every layer)",
            seconds["record"],
            lambda: recorded_complete(options),
            lambda: _record(recording) if options.nproc == 1 else _record_launched(options),
        ),
        Stage(
            "analyze",
            "maps, layer profiles, neuron sets and plots",
            seconds["analyze"],
            lambda: analysis_complete(out),
            lambda: _analyze(out),
        ),
        Stage(
            "explain",
            f"neuron cards of the top {options.explain_top} units per capability",
            seconds["explain"],
            lambda: all_explained(out),
            lambda: _explain(options, progress),
        ),
        Stage(
            "intervene",
            f"A/B on {TARGET}: edits {','.join(config.edit.edits)}, "
            f"factors {', '.join(repr(f) for f in config.factors)}, "
            f"{config.placebo} placebo sets, {target_rows} {TARGET} rows{short}"
            f"{' and collateral rows' if config.collateral else ''}, {config.generation.max_new_tokens} new tokens",
            seconds["intervene"],
            lambda: intervention_complete(out, options.intervention()),
            lambda: _intervene(config, progress) if options.nproc == 1 else _intervene_launched(options, config),
            at_most_s=at_most.get("intervene"),
        ),
        *([_localize_stage(options, progress)] if options.localize else []),
        Stage(
            "evaluate",
            f"compliance of {'base, ' if options.models.base else ''}SFT and DPO on {_eval_rows(options)}",
            seconds["evaluate"],
            lambda: evaluation_complete(options),
            lambda: _evaluate(options, progress) if options.nproc == 1 else _evaluate_launched(options),
        ),
        Stage(
            "report",
            f"{RunDir(out).report_file}",
            seconds["report"],
            lambda: False,
            lambda: _report(out, kept if kept is not None else {}),
        ),
    ]


def _target_rows(options: ReplicateOptions, config: ABConfig) -> tuple[int, str]:
    """The A/B's target rows, and what to say when the split has fewer than ``--limit``."""
    _, _, chosen = ab_rows(options, config)
    rows = len(chosen[config.target])
    return rows, _short_split(options, rows, "--limit", config.limit)


def _eval_rows(options: ReplicateOptions) -> str:
    """The rows the evaluation judges, and what to say when the split has fewer than ``--eval-rows``."""
    rows = len(evaluated(options)[1])
    return f"{rows} rows{_short_split(options, rows, '--eval-rows', options.eval_rows)}"


def _short_split(options: ReplicateOptions, rows: int, flag: str, cap: int | None) -> str:
    """' (all the SPLIT split has; FLAG CAP)' where the split holds fewer than the cap ``flag`` gave, else ''."""
    return f" (all the {options.eval_split} split has; {flag} {cap})" if cap and rows < cap else ""


def _localize_stage(options: ReplicateOptions, progress: Progress) -> Stage:
    config = localize_config(options)
    return Stage(
        "localize",
        f"where the change lives on {TARGET}: {len(config.ranking_list)} rankings x {len(config.grid)} points of "
        f"{config.hook} and {config.placebo} placebo sets at {config.placebo_k}, {' and '.join(config.direction_list)}"
        f", {config.limit} rows, the layer profile (its own budget)",
        localize_seconds(options, config),
        lambda: localize_complete(options.out_dir, options.localization()),
        lambda: _localize(config, progress) if options.nproc == 1 else _localize_launched(options, config),
        blocked=lambda: localize_blocked(config),
    )


def localize_blocked(config: LocalizeConfig) -> str | None:
    """Why the localize stage cannot run (its inputs checked as ``probe localize`` checks them: the recording holds
    the hook point and its local basis, the models are there, the rows exist), or None."""
    from localize.plan import plan_localize

    try:
        plan_localize(config)
    except ProbeError as exc:
        return str(exc)
    return None


def option_warnings(options: ReplicateOptions) -> list[str]:
    """What these options leave untestable, one line each, said with the plan and before a run starts (the claims'
    own rules decide: :func:`study.verdicts.claim4_untestable`)."""
    from study.verdicts import claim4_untestable

    config = ab_config(options)
    return [line for line in [claim4_untestable(config.edit.edits, config.placebo), options.nproc_warning()] if line]


def _record(config: RecordConfig) -> str:
    import sys

    from core.progress import is_terminal
    from probes.recording import record_run

    # in a log, the recording's own lines (its estimate, then progress every minute); on a terminal the stage bar
    result = record_run(config, progress=not is_terminal(sys.stderr))
    return f"{sum(result.counts.values())} prompts in the run ({sum(result.recorded.values())} recorded now)"


def launched(nproc: int, args: list[str], stage: str) -> None:
    """``probe ARGS`` under the launcher with ``nproc`` processes on this machine; its ranks print their own lines,
    a failure is one line here (an ``interrupted:`` line after Ctrl-C)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "probes.distributed", "--standalone", f"--nproc-per-node={nproc}"]
    code = subprocess.run([*command, "-m", "probe_cli", *args], check=False).returncode
    if code == Interrupted.exit_code:
        raise Interrupted(f"the {stage} stage's {nproc} processes were stopped")
    if code:
        raise ProbeError(f"the {stage} stage's {nproc} processes failed (exit status {code}; the line above says why)")


def _launched_with_config(nproc: int, args: list[str], settings: dict[str, Any], stage: str) -> None:
    """:func:`launched` with the command's settings in a ``--config`` file of its own (said once, in the config)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="replicate-") as folder:
        config_file = Path(folder) / f"{stage}.json"
        config_file.write_text(json.dumps(settings), encoding="utf-8")
        launched(nproc, [*args, "--config", str(config_file)], stage)


def _record_launched(options: ReplicateOptions) -> str:
    """``probe run`` under the launcher, with the one-process stage's recording (:func:`record_config`)."""
    from core.records import to_json

    settings = {k: v for k, v in to_json(flat_values(record_config(options))).items() if v is not None}
    _launched_with_config(options.nproc, ["run", "--no-analyze", "--quiet"], settings, "record")
    return f"recorded by {options.nproc} processes"


def _intervene_launched(options: ReplicateOptions, config: ABConfig) -> str:
    """``probe intervene`` under the launcher, its settings (the A/B's options) in a ``--config`` file of its own."""
    settings = {**options.intervention(), "capability": config.capability, "out_dir": str(config.out_dir)}
    _launched_with_config(options.nproc, ["intervene", str(options.out_dir)], settings, "intervene")
    return f"A/B by {options.nproc} processes -> {config.out_dir}"


def _localize_launched(options: ReplicateOptions, config: LocalizeConfig) -> str:
    """``probe localize`` under the launcher (the rows split over the processes), its settings in a ``--config``."""
    settings = {**options.localization(), "out_dir": str(config.out_dir)}
    _launched_with_config(options.nproc, ["localize", str(options.out_dir)], settings, "localize")
    return f"localized by {options.nproc} processes -> {config.out_dir}"


def _evaluate_launched(options: ReplicateOptions) -> str:
    from core.decoding import EVAL_GENERATION

    out = RunDir(options.out_dir).eval_file
    models = options.models
    args = ["models", "eval", "--sft", str(models.sft), "--dpo", str(models.dpo), "--test", str(options.eval_file())]
    args += ["--base", str(models.base)] if models.base else []
    args += ["--max-rows", str(options.eval_rows)] if options.eval_rows else []
    args += ["--max-new-tokens", str(options.max_new_tokens or EVAL_GENERATION.max_new_tokens), "--out", str(out)]
    launched(options.nproc, args, "evaluate")
    return f"judged by {options.nproc} processes -> {out}"


def _analyze(out: Path) -> str:
    from analysis import analyze_run

    result = analyze_run(out, png=False, hooks=analysed_hooks())
    return f"{len(result.maps)} maps; {len(result.warnings)} warnings"


def _explain(options: ReplicateOptions, progress: Progress) -> str:
    from analysis.explain import explain_run
    from analysis.explain_config import ExplainConfig

    done = []
    for cap in analysed(options.out_dir):
        if explained(options.out_dir, cap):
            continue
        progress(f"explain {cap}")
        config = ExplainConfig(
            capability=cap, top=options.explain_top, models=PairDirs(base_dir=options.models.base), png=False
        )
        result = explain_run(options.out_dir, config)
        done.append(cap)
        for note in dict.fromkeys(result.notes):
            progress(f"note: {note}")
    return f"cards for {', '.join(done) or 'nothing new'}"


def _intervene(config: ABConfig, progress: Progress) -> str:
    from interventions.ab import run_ab
    from interventions.plan import plan_ab

    report = run_ab(plan_ab(config), progress=progress)
    return f"{len(report.arms)} arms -> {config.out_dir}"


def _localize(config: LocalizeConfig, progress: Progress) -> str:
    from localize.run import localize

    report = localize(config, progress)
    verdicts = f"rankings: {report.ranking_verdict.verdict}; claim 1c: {report.claim_1c.verdict}" if report else ""
    return f"{verdicts} -> {config.out_dir}"


def _evaluate(options: ReplicateOptions, progress: Progress) -> str:
    from dataclasses import replace

    from core.decoding import EVAL_GENERATION
    from training.eval_config import PairEvalConfig
    from training.evaluate import evaluate_pair

    generation = replace(EVAL_GENERATION, max_new_tokens=options.max_new_tokens or EVAL_GENERATION.max_new_tokens)
    config = PairEvalConfig(
        options.eval_file(),
        models=options.models,
        max_rows=options.eval_rows,
        generation=generation,
    )
    result = evaluate_pair(config, progress=lambda name: progress(f"generating and judging: {name}"))
    result.save(RunDir(options.out_dir).eval_file)
    return f"{sum(result.task_counts.values())} rows -> {RunDir(options.out_dir).eval_file}"


def _report(out: Path, kept: dict[str, Any]) -> str:
    from study.report_html import write_report

    path, kept["study"] = write_report(out)
    return f"{path} ({path.stat().st_size / 1e6:.1f} MB)"


def _save(options: ReplicateOptions, stages: list[Stage], started: str) -> None:
    import torch

    from core.atomic import write_atomic
    from core.records import to_json

    record = ReplicateRecord(
        command=options.command(),
        started=started,
        options={k: (str(v) if isinstance(v, Path) else v) for k, v in flat_values(options).items()},
        sft_dir=str(options.models.sft.resolve()),
        dpo_dir=str(options.models.dpo.resolve()),
        base_dir=str(base.resolve()) if (base := options.models.base) else None,
        data_file=str(options.data_file.resolve()),
        stages=[StageRecord(s.name, s.status, s.what, s.estimate_s, s.seconds, s.at_most_s, s.parts) for s in stages],
        threads=torch.get_num_threads(),
    )
    write_atomic(RunDir(options.out_dir).replicate_file, json.dumps(to_json(record), indent=1) + "\n")


def _previous(out: Path) -> dict[str, StageRecord]:
    """Each stage as an earlier replicate record of this run has it (its times kept for the stages skipped now; none
    from a record that is missing or malformed)."""
    path = RunDir(out).replicate_file
    try:
        stages = read_record(ReplicateRecord, path, "replicate record").stages if path.is_file() else []
    except ProbeError:
        return {}
    return {s.name: s for s in stages}


def run_stages(options: ReplicateOptions, stages: list[Stage], progress: Progress) -> ReplicateResult:
    """Run the stages in order, skipping complete ones; the replicate record after each. Ctrl-C says where to resume."""
    started, began = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    for line in option_warnings(options):
        progress(f"warning: {line}")
    options.out_dir.mkdir(parents=True, exist_ok=True)
    before = _previous(options.out_dir)
    for number, stage in enumerate(stages, 1):
        if stage.complete():
            stage.status = "skipped"
            if (earlier := before.get(stage.name)) is not None:  # the time it took when it ran
                stage.seconds, stage.parts = earlier.seconds, dict(earlier.parts)
            progress(f"[{number}/{len(stages)}] {stage.name}: already complete, skipped")
            continue
        if stage.blocked is not None and (reason := stage.blocked()):
            stage.status = "not run"
            progress(f"[{number}/{len(stages)}] {stage.name}: not run: {reason}")
            continue
        progress(f"[{number}/{len(stages)}] {stage.name}: {stage.what} (estimated {stage.estimated()})")
        stage.status = "running"
        _save(options, stages, started)
        start = time.perf_counter()
        try:
            with (
                logged(f"replicate: {stage.name}", 1, unit="stage", estimate_s=stage.bounds()[1]) as bar,
                kept() as parts,
            ):
                line = stage.run()
                bar.update(1)  # its end line then says done, not "ended at 0/1"
        except (KeyboardInterrupt, Interrupted) as exc:
            raise Interrupted(
                f"replicate stopped in stage {stage.name}{f' ({exc})' if str(exc) else ''}; finished stages are kept: "
                f"rerun `{options.command()}` to resume"
            ) from None
        stage.status, stage.seconds, stage.parts = "done", time.perf_counter() - start, dict(parts)
        progress(
            f"[{number}/{len(stages)}] {stage.name}: {line} ({minutes(stage.seconds)}, estimated {stage.estimated()})"
        )
        _save(options, stages, started)
    _save(options, stages, started)
    return ReplicateResult(
        options.out_dir, stages, RunDir(options.out_dir).report_file, seconds=time.perf_counter() - began
    )
