"""``probe replicate --plan`` says what will really run (issue 39's leftovers), on the tiny pair, nothing run.

* the intervene stage's rows are the rows the A/B will generate: ``min(--limit, the split's multi_turn rows)``, in
  its text and in its estimate (the held-out split has fewer multi_turn rows than the default ``--limit``);
* with ``--placebo`` below what claim 4's rule needs, or no patch arm in ``--edit``, one line says claim 4 cannot be
  tested with these options and what to pass instead: with the plan, and as a real run starts;
* ``--sft``/``--dpo``'s help says what replicate does without them (the ``--pair``'s models, built first);
* the intervene stage's estimate is a range where decide-first runs placebo sets only as the verdicts need them;
* the record stage's estimate is the recording's own: padded batches and the local basis counted (it once counted two
  passes over unpadded tokens, 3.7 minutes for a recording that said 4.9 of itself).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from pathlib import Path

import pytest

from core.capabilities import Capability
from core.pair_dirs import PairDirs
from core.rows import group_by_capability, read_test_rows
from data_synthesis.heldout.files import heldout_test_file
from interventions.evidence import MIN_PLACEBO_SETS
from probe_cli.main import main
from study import replicate
from study.layout import TARGET
from study.replicate_config import TARGET_ROWS, ReplicateOptions


@pytest.fixture
def options(tiny_pair: tuple[Path, Path], chat_data: Path, tmp_path: Path) -> ReplicateOptions:
    return ReplicateOptions(
        data_file=chat_data / "test.jsonl", out_dir=tmp_path / "run", models=PairDirs(tiny_pair[0], tiny_pair[1])
    )


def _intervene(options: ReplicateOptions) -> replicate.Stage:
    return next(s for s in replicate.plan(options, lambda _line: None) if s.name == "intervene")


def test_the_intervene_stage_counts_the_rows_that_will_run(options: ReplicateOptions) -> None:
    available = len(group_by_capability(read_test_rows(heldout_test_file()), [Capability(TARGET)])[Capability(TARGET)])
    assert 0 < available < TARGET_ROWS == options.limit  # the held-out split has fewer than the default --limit
    default = _intervene(options)
    assert f"{available} {TARGET} rows (all the heldout split has; --limit {TARGET_ROWS})" in default.what
    assert f"{TARGET_ROWS} {TARGET}" not in default.what
    exact = _intervene(replace(options, limit=available))
    assert f"{available} {TARGET} rows," in exact.what and "all the heldout split has" not in exact.what
    assert default.estimate_s == exact.estimate_s  # the estimate counts the same rows
    fewer = _intervene(replace(options, limit=2))
    assert f"2 {TARGET} rows," in fewer.what and fewer.estimate_s < exact.estimate_s


def test_the_evaluate_stage_counts_the_rows_it_will_judge(options: ReplicateOptions) -> None:
    """The held-out split has fewer rows than the default --eval-rows: the plan says how many it judges, not the cap."""
    available = len(read_test_rows(heldout_test_file()))
    assert options.eval_rows is not None and 2 < available < options.eval_rows

    def evaluate(given: ReplicateOptions) -> str:
        return next(s for s in replicate.plan(given, lambda _line: None) if s.name == "evaluate").what

    said = f"{available} rows (all the heldout split has; --eval-rows {options.eval_rows})"
    assert evaluate(options).endswith(said)
    assert evaluate(replace(options, eval_rows=2)).endswith("SFT and DPO on 2 rows")
    assert evaluate(replace(options, eval_rows=None)).endswith(f"SFT and DPO on {available} rows")


def test_the_intervene_estimate_is_a_range_where_placebo_sets_run_as_the_verdicts_need(
    options: ReplicateOptions,
) -> None:
    """Decide-first cannot know before its arms run how many placebo sets they will generate or teacher-force: the
    stage's estimate runs from none (the run without placebo sets) to every one (the full design's figure); with
    fewer sets than a verdict rests on, or with ``--placebo-generation all``, every set runs and it is one figure."""
    first, every = _intervene(options), _intervene(replace(options, placebo_generation="all"))
    assert first.estimate_s == pytest.approx(_intervene(replace(options, placebo=0)).estimate_s)
    assert first.at_most_s is not None and first.estimate_s < first.at_most_s == pytest.approx(every.estimate_s)
    assert " to " in first.estimated() and every.bounds()[0] == every.bounds()[1]
    few = _intervene(replace(options, placebo=MIN_PLACEBO_SETS - 1))
    assert few.bounds()[0] == few.bounds()[1]


def test_the_record_stage_estimates_what_the_recording_will_run(options: ReplicateOptions) -> None:
    from core.chat import encode_conversations
    from core.models import load_tokenizer
    from core.pace import REFERENCE_PARAMETERS, parameter_count, prompt_seconds
    from probes.recording import LOCAL_COST, cpu_estimate
    from study.replicate_estimate import LAUNCH_SECONDS

    record = next(s for s in replicate.plan(options, lambda _line: None) if s.name == "record")
    config = replicate.record_config(options)
    assert config.local == "dpo_on_sft"  # what probe replicate records: one local direction
    parameters = parameter_count(options.models.dpo)
    assert record.estimate_s == pytest.approx(LAUNCH_SECONDS * parameters / REFERENCE_PARAMETERS + cpu_estimate(config))
    alone = cpu_estimate(replace(config, local="none"))
    assert cpu_estimate(config) == pytest.approx(alone * (1 + LOCAL_COST))
    assert cpu_estimate(replace(config, local="both")) == pytest.approx(alone * (1 + 2 * LOCAL_COST))
    rows = read_test_rows(options.data_file)
    tokenizer = load_tokenizer(options.models.sft, "--sft")
    unpadded = sum(map(len, encode_conversations(tokenizer, [r.question for r in rows], add_generation_prompt=True)))
    assert alone >= prompt_seconds(unpadded, models=2, parameters=parameters)  # padding only adds


def test_claim_4_warning_names_what_is_missing_and_what_to_pass(options: ReplicateOptions) -> None:
    default = replicate.option_warnings(options)  # the default --edit scale has no patch arm
    assert len(default) == 1 and default[0].startswith("claim 4 ")
    assert "cannot be tested with these options" in default[0] and "pass --edit scale,patch" in default[0]
    few = replicate.option_warnings(replace(options, placebo=MIN_PLACEBO_SETS - 1))
    assert f"--placebo {MIN_PLACEBO_SETS - 1}" in few[0] and f"--placebo {MIN_PLACEBO_SETS} or more" in few[0]
    patched = replace(options, edit=replace(options.edit, edits=["scale", "patch"]))
    assert replicate.option_warnings(patched) == []  # probe intervene's default placebo sets suffice
    short = replicate.option_warnings(replace(patched, placebo=MIN_PLACEBO_SETS - 1))
    assert len(short) == 1 and "--edit" not in short[0].split("; pass ")[1]
    assert "and this run has --placebo" in short[0]
    assert replicate.option_warnings(replace(patched, placebo=MIN_PLACEBO_SETS)) == []


def _probe(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0), out.getvalue(), err.getvalue()


def test_the_plan_and_a_run_say_the_warning(
    options: ReplicateOptions, tiny_pair: tuple[Path, Path], chat_data: Path, tmp_path: Path
) -> None:
    pair = ["--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--data", str(chat_data / "test.jsonl")]
    code, _, err = _probe(["replicate", *pair, "--out", str(tmp_path / "p"), "--placebo", "2", "--plan"])
    warned = [line for line in err.splitlines() if line.startswith("warning: claim 4 ")]
    assert code == 0 and len(warned) == 1 and "--placebo 2" in warned[0], err
    assert not (tmp_path / "p").exists()
    code, _, err = _probe(
        ["replicate", *pair, "--out", str(tmp_path / "q"), "--edit", "scale,patch", "--placebo", "20", "--plan"]
    )
    assert code == 0 and "warning:" not in err, err
    said: list[str] = []
    with pytest.raises(RuntimeError, match="stop"):  # a real run says it before its first stage
        replicate.run_stages(replace(options, placebo=2), [_Stop()], said.append)  # type: ignore[list-item]
    assert said and said[0].startswith("warning: claim 4 ") and "--placebo 2" in said[0]


class _Stop:
    name = "record"

    def complete(self) -> bool:
        raise RuntimeError("stop")


def test_sft_and_dpo_help_says_what_replicate_does() -> None:
    code, printed, _ = _probe(["replicate", "--help"])
    text = " ".join(printed.split())
    assert code == 0 and "the run's" not in text
    assert "SFT model directory, given with --dpo (default: the --pair's, built first when absent)" in text
    assert "DPO model directory, given with --sft (default: the --pair's, built first when absent)" in text


def test_the_localize_stage_is_on_by_default_and_records_its_hook_point(options: ReplicateOptions) -> None:
    from localize.config import DEFAULT_ROWS, LocalizeConfig
    from study.replicate_config import LOCALIZE_PLACEBO

    stages = {s.name: s for s in replicate.plan(options, lambda _line: None)}
    assert list(stages) == ["record", "analyze", "explain", "intervene", "localize", "evaluate", "report"]
    config = replicate.localize_config(options)
    assert config.limit == DEFAULT_ROWS == options.localize_limit and config.hook == LocalizeConfig().hook
    assert config.placebo == LOCALIZE_PLACEBO == LocalizeConfig().placebo == 20
    assert config.hook in replicate.record_config(options).hooks and replicate.analysed_hooks() == ["mlp_out"]
    assert stages["localize"].estimate_s > 0 and f"{DEFAULT_ROWS} rows" in stages["localize"].what
    fewer = next(s for s in replicate.plan(replace(options, localize_limit=2), lambda _: None) if s.name == "localize")
    assert fewer.estimate_s < stages["localize"].estimate_s  # its own estimate counts its rows
    off = replace(options, localize=False)
    assert "localize" not in [s.name for s in replicate.plan(off, lambda _line: None)]
    assert replicate.record_config(off).hooks == ("mlp_out",)
    assert off.command().endswith("--no-localize --out " + str(off.out_dir))
    assert "--localize" not in options.command()
    assert "--localize-limit 2" in replace(options, localize_limit=2).command()
    assert "--localize-placebo 0" in replace(options, localize_placebo=0).command()
    cheaper = next(
        s for s in replicate.plan(replace(options, localize_placebo=0), lambda _: None) if s.name == "localize"
    )
    assert cheaper.estimate_s < stages["localize"].estimate_s


def test_a_stage_whose_inputs_are_missing_is_not_run_and_says_why(options: ReplicateOptions) -> None:
    said: list[str] = []
    ran: list[str] = []
    stage = replicate.Stage(
        "localize", "where the change lives", 1.0, lambda: False, lambda: ran.append("x") or "", blocked=lambda: "gone"
    )
    replicate.run_stages(options, [stage], said.append)
    assert not ran and stage.status == "not run" and "[1/1] localize: not run: gone" in said
    # the localize stage's own check is probe localize's: a run without its hook point says which command records it
    reason = replicate.localize_blocked(replicate.localize_config(options))
    assert reason is not None and str(options.out_dir) in reason
