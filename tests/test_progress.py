"""Progress a user can read in a log: ``make demo > log 2>&1`` shows each long stage start with its estimate and a
line at least every ``every`` seconds, even while one step takes longer than that (core.progress)."""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from core.progress import Stage, heartbeat, stage, stages
from training.progress import rich_reporter


def test_a_stage_in_a_log_says_its_start_estimate_progress_and_end_without_a_bar() -> None:
    out = io.StringIO()
    with stage("sft", 10, unit="steps", estimate_s=600, stream=out, every=0.05) as bar:
        time.sleep(0.2)  # one slow step: the timer still says the stage is alive
        bar.update(5)
        time.sleep(0.12)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sft: starting, 10 steps; estimate 10m", lines
    assert any(line.startswith("sft: 0/10 steps (0%), ") and "left (estimate)" in line for line in lines), lines
    assert any(line.startswith("sft: 5/10 steps (50%), ") and "left" in line for line in lines), lines
    assert lines[-1].startswith("sft: ended at 5/10 steps after "), lines
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_without_an_estimate_the_first_step_gives_one() -> None:
    out = io.StringIO()
    with stage("recording sft+dpo", 12, unit="prompts", step="batch", stream=out, every=None) as bar:
        bar.update(4)
        bar.update(8)
    lines = out.getvalue().splitlines()
    assert lines[0] == "recording sft+dpo: starting, 12 prompts; estimate after the first batch"
    assert lines[1].startswith("recording sft+dpo: 4/12 prompts after ") and lines[1].endswith(" in all"), lines
    assert lines[-1].startswith("recording sft+dpo: done, 12/12 prompts in "), lines


def test_on_a_terminal_it_is_a_bar_and_disabled_it_is_silent() -> None:
    out = io.StringIO()
    bar = Stage("dpo", 3, stream=out, terminal=True)
    bar.update(3)
    bar.close()
    assert "dpo" in out.getvalue() and "starting" not in out.getvalue()
    quiet = io.StringIO()
    with stage("dpo", 3, enabled=False, stream=quiet) as silent:
        silent.update(3)
    assert quiet.getvalue() == ""


def test_stages_of_a_build_each_start_and_end_in_the_log() -> None:
    out = io.StringIO()
    with stages(out, every=None, estimates={"dpo": 90}) as report:
        report("synthesize", 0, 1)
        report("synthesize", 1, 1)
        report("sft", 2, 4)
        report("dpo", 0, 2)
    text = out.getvalue()
    for line in (
        "synthesize: starting, 1 steps; estimate after the first step",
        "synthesize: done, 1/1 steps in",
        "sft: starting, 2/4 steps",
        "sft: ended at 2/4 steps after",
        "dpo: starting, 2 steps; estimate 1m30s",
        "dpo: ended at 0/2 steps after",
    ):
        assert line in text, text


def test_the_pair_builds_reporter_writes_lines_to_a_console_that_is_not_a_terminal() -> None:
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=False)
    with rich_reporter(console) as report:
        report("base", 1, 10)
    assert console.file.getvalue().startswith("base: starting, 1/10 steps")  # type: ignore[attr-defined]


def test_units_done_before_a_stage_is_seen_are_not_timed() -> None:
    """A build reports step 1 when it is done: the stage starts then, and its estimate comes from the steps after."""
    out, now = io.StringIO(), iter([0.0, 10.0, 20.0]).__next__
    with stages(out, every=None, clock=now) as report:
        report("base", 1, 11)
        report("base", 2, 11)
    lines = out.getvalue().splitlines()
    assert lines[0] == "base: starting, 1/11 steps; estimate after the first step", lines
    assert lines[1] == "base: 2/11 steps after 10s; estimate 1m40s in all", lines


def test_a_recording_in_a_log_says_its_estimate_when_it_starts(
    tiny_pair: tuple[Path, Path],
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import probes.recording
    from core.pace import REFERENCE_PARAMETERS
    from probes.config import RecordConfig

    def starting(out: str) -> str:
        config = RecordConfig(sft_dir=sft, dpo_dir=dpo, data_file=rolemrc_file, out_dir=tmp_path / out, layers="0")
        probes.recording.record_run(replace(config, device="cpu"), progress=True)
        return next(line for line in capsys.readouterr().err.splitlines() if ": starting, " in line)

    sft, dpo = tiny_pair
    # a tiny model's pace is its layers' fixed cost, not its size: the first batch gives the estimate
    assert starting("tiny").endswith("prompts; estimate after the first batch")
    monkeypatch.setattr(probes.recording, "parameter_count", lambda _: REFERENCE_PARAMETERS)  # a real model's size
    assert re.search(r"^recording sft\+dpo: starting, \d+ prompts; estimate \d", starting("sized"))


def test_a_stage_past_its_estimate_says_so_rather_than_no_time_left() -> None:
    out, now = io.StringIO(), [0.0]
    bar = Stage("record", 1, estimate_s=60, stream=out, every=None, clock=lambda: now[0])
    now[0] = 30.0
    bar.report()
    now[0] = 90.0
    bar.report()
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[1] == "record: 0/1 steps (0%), 30s elapsed, about 30s left (estimate)", lines
    assert lines[2] == "record: 0/1 steps (0%), 1m30s elapsed, past its estimate of 1m", lines


def test_a_stage_reporting_in_its_own_lines_is_shown_alive_when_they_are_minutes_apart() -> None:
    said: list[str] = []
    with heartbeat(said.append, every=0.05) as say:
        say("arm 1/3: scale 0.0 (dpo model, 64 units)")
        time.sleep(0.3)
        assert said[1].startswith("still working: "), said
        assert said[1].endswith(" since the last line (arm 1/3: scale 0.0 (dpo model, 64 units))"), said
        say("arm 2/3: patch")
    count = len(said)
    time.sleep(0.2)
    assert len(said) == count  # no beat after the stage
    silent: list[str] = []
    with heartbeat(silent.append, enabled=False, every=0.05):
        time.sleep(0.2)
    assert silent == []  # a helper rank of a data-parallel run says nothing


def test_a_stage_that_reports_itself_is_not_beaten_over() -> None:
    """A stage's own lines (a log's per-interval progress) count as lines: no "still working" beside them."""
    said: list[str] = []
    out = io.StringIO()
    with heartbeat(said.append, every=0.1) as say:
        say("passes DPO <- SFT")
        with stage("passes DPO <- SFT", 2, unit="batches", stream=out, every=0.03):
            time.sleep(0.5)
    assert out.getvalue().count("0/2 batches") >= 3, out.getvalue()
    assert not [line for line in said if line.startswith("still working")], said


def _seconds(clock: str) -> int:
    """``'1h2m3s'`` -> 3723 (core.progress's clock text read back)."""
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([hms])", clock))


def test_an_attribution_pass_in_a_log_says_its_estimate_when_it_starts(
    tiny_pair: tuple[Path, Path],
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import AutoTokenizer

    import probes.attribution
    from core.budget import CPU_MAX_BATCH_TOKENS
    from core.pace import GRADIENT_PASS_RATIO, PROMPT_SECONDS, REFERENCE_PARAMETERS
    from core.run_dir import RunDir
    from probes.attribution import _reference_plans, batch_plan
    from probes.config import RecordConfig
    from probes.recording import record_run
    from probes.store import RunReader

    run = tmp_path / "run"
    config = RecordConfig(
        sft_dir=tiny_pair[0], dpo_dir=tiny_pair[1], data_file=rolemrc_file, out_dir=run, layers="0", hooks="mlp_out"
    )
    record_run(replace(config, capabilities="priority", device="cpu"), progress=False)

    def starting() -> str:
        RunDir(run).attribution("reference_logprob").unlink(missing_ok=True)  # computed again, not reused
        probes.attribution.attribute_run(run, device="cpu")
        return next(line for line in capsys.readouterr().err.splitlines() if line.startswith("attribution: starting"))

    # a tiny model's pace is its layers' fixed cost, not its size: the first batch gives the estimate
    assert re.fullmatch(r"attribution: starting, \d+ batches; estimate after the first batch", starting())
    big = 1e12  # a model this size: the estimate is hours, so whole seconds say it to the per mille
    monkeypatch.setattr(probes.attribution, "parameter_count", lambda _: big)
    said = re.fullmatch(r"attribution: starting, \d+ batches; estimate (\S+)", starting())
    assert said, said
    # both models' forwards and the DPO model's backward over every padded token of every batch (the CPU budget)
    with RunReader(run) as reader:
        settings, capabilities = reader.settings, reader.capabilities()
    plans = _reference_plans(settings, capabilities, AutoTokenizer.from_pretrained(tiny_pair[1]))
    batches = batch_plan(plans, CPU_MAX_BATCH_TOKENS // 4)
    padded = sum(len(b.members) * max(len(plans[b.plan].items[i].ids) for i in b.members) for b in batches)
    expected = padded * PROMPT_SECONDS * GRADIENT_PASS_RATIO * big / REFERENCE_PARAMETERS
    assert _seconds(said[1]) == pytest.approx(expected, abs=1)


def test_lm_eval_in_a_log_says_its_estimate_when_it_starts(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lm_eval")
    from transformers import AutoTokenizer

    import lmeval.estimate
    from core.pace import DECODE_SECONDS, PROMPT_SECONDS, REFERENCE_PARAMETERS
    from tests.support.cli import exit_of
    from tests.support.lmeval_tasks import QUESTIONS, write_tasks

    write_tasks(tmp_path / "tasks")
    argv = ["lmeval", "--model-dir", str(tiny_model_dir), "--units", "0:1", "--factor", "0", "--placebo", "0"]
    argv += ["--tasks", "probe_mc,probe_gen", "--include-path", str(tmp_path / "tasks")]

    def starting() -> str:
        code, _, err = exit_of(argv, capsys)
        assert code == 0, err
        assert "Running loglikelihood requests" not in err and "\r" not in err  # lm-eval's own bars: on a terminal only
        return next(line for line in err.splitlines() if line.startswith("lm-eval: starting"))

    assert starting() == "lm-eval: starting, 2 passes; estimate after the first pass"
    big = 1e12
    monkeypatch.setattr(lmeval.estimate, "parameter_count", lambda _: big)
    said = re.fullmatch(r"lm-eval: starting, 2 passes; estimate (\S+)", starting())
    assert said, said
    # each of the 2 passes: the 12 questions read once for both one-token choices (one forward) and once to generate
    # up to 2 tokens; the generation task counts though lm-eval hands the model the multiple-choice requests first
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    read = sum(len(tokenizer(f"{q}\nAnswer:", add_special_tokens=False)["input_ids"]) for q in QUESTIONS)
    per_pass = (2 * read + 12) * PROMPT_SECONDS + 12 * 2 * DECODE_SECONDS
    assert _seconds(said[1]) == pytest.approx(2 * per_pass * big / REFERENCE_PARAMETERS, abs=1)
