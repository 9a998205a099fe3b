"""``probe localize`` end to end on the planted-tiny pair (issue 50), and its refusals.

On the planted pair the answer is known: DPO is SFT with 16 MLP neurons' up_proj rows x3. The weight-change and
local rankings put exactly those units first, so their curves reach f = 1 at k = 16 in both directions; random sets
of 16 units close almost nothing (the placebo band stays <= 0.1); the estimates' curve follows the patched one; f(0)
is exactly 0. The report round-trips through ``localize.json`` and its page carries both figures. Bad input is one
``error:`` line and exit status 2, before anything loads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.records import nonfinite_as_null, to_json
from core.run_dir import LocalizeDir
from localize.config import LocalizeConfig
from localize.page import page, placebo_line
from localize.records import LocalizeReport
from localize.run import localize
from tests.support.cli import one_line_error
from training.default_pair import ensure_default_pair
from training.planted import PlantedPair, read_planted

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RANKED = ("weight", "local_mean_diff", "mean_diff", "relp")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> PlantedPair:
    return read_planted(ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root)


def _record(planted: PlantedPair, sft: Path, dpo: Path, out: Path) -> Path:
    from access.hook_table import NEURONS
    from probes.config import RecordConfig
    from probes.recording import record_run

    config = RecordConfig(
        sft_dir=sft,
        dpo_dir=dpo,
        data_file=planted.data_dir / "test.jsonl",
        capabilities="multi_turn",
        hooks=NEURONS,
        out_dir=out,
        device="cpu",
        dtype="float32",
    )
    record_run(config, progress=False)
    return out


@pytest.fixture(scope="module")
def run(planted: PlantedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(planted, planted.sft_dir, planted.dpo_dir, tmp_path_factory.mktemp("run") / "run")


@pytest.fixture(scope="module")
def report(planted: PlantedPair, run: Path, tmp_path_factory: pytest.TempPathFactory) -> LocalizeReport:
    config = LocalizeConfig(
        run_dir=run,
        rankings=list(RANKED),
        k="0.2%,16,1%,2%,10%,100%",
        placebo=20,
        placebo_k="16,0.2%,2%",
        limit=3,
        data_file=planted.data_dir / "test.jsonl",
        max_new_tokens=4,
        n_bootstrap=300,
        profile_width=2,
        head_layers=1,
        out_dir=tmp_path_factory.mktemp("localize") / "out",
    )
    return localize(config)


@pytest.fixture(scope="module")
def every_set(report: LocalizeReport, tmp_path_factory: pytest.TempPathFactory) -> LocalizeReport:
    """The fixture's run under the full placebo design (every random set in the directions' engine calls) at the
    verdict's points, without the profile."""
    from dataclasses import replace

    config = LocalizeConfig(**{**report.settings, "rankings": list(RANKED)})
    out = tmp_path_factory.mktemp("all") / "out"
    config = replace(config, placebo_design="all", placebo_k="0.2%,2%", profile=False, out_dir=out)
    return localize(config)


def _at(report: LocalizeReport, ranking: str, direction: str, units: int) -> float:
    return next(p.f for p in report.curve(ranking, direction) if p.units == units)


def test_the_planted_count_is_a_point_and_f_of_nothing_is_exactly_zero(report: LocalizeReport) -> None:
    assert len(report.planted) == 16
    for direction in ("necessity", "sufficiency"):
        for ranking in RANKED:
            curve = report.curve(ranking, direction)
            assert curve[0].k == "0" and curve[0].f == 0.0
            assert 16 in [p.units for p in curve]


@pytest.mark.parametrize("ranking", ["weight", "local_mean_diff"])
def test_weight_change_and_the_local_ranking_recover_the_planted_units(report: LocalizeReport, ranking: str) -> None:
    for direction in ("necessity", "sufficiency"):
        assert _at(report, ranking, direction, 16) == pytest.approx(1.0, abs=1e-9)
        assert report.summary(ranking, direction).k80 is not None and report.summary(ranking, direction).k80 <= 16


def test_random_sets_of_the_same_size_close_almost_nothing(report: LocalizeReport) -> None:
    band = [p for p in report.placebo if p.units == 16]
    assert {p.direction for p in band} == {"necessity", "sufficiency"}
    for point in band:  # 16 of 2,048 units are planted: about one random set in eight holds one of them
        assert len(point.values) == 20 and point.p50 <= 0.1 and point.p95 <= 0.1, point.values


def test_the_estimated_curve_follows_the_patched_one(report: LocalizeReport) -> None:
    for direction in ("necessity", "sufficiency"):
        assert report.summary("mean_diff", direction).estimated_r["relp"] > 0.9


def test_the_sequential_band_gives_the_full_designs_verdict_and_says_what_it_drew(
    report: LocalizeReport, every_set: LocalizeReport
) -> None:
    """Issue 50: drawing the verdict points' random sets only while the verdict can change (the default) gives the
    verdict of every set; the curves are the same arms; the point no verdict reads (16) draws every set, the same sets
    as the full design's; the record and the page say how many were drawn at each point."""
    assert report.settings["placebo_design"] == "sequential"
    assert report.ranking_verdict.verdict == every_set.ranking_verdict.verdict
    assert report.ranking_verdict.reason.startswith(every_set.ranking_verdict.reason)
    assert [(p.ranking, p.direction, p.k, p.f) for p in report.points] == [
        (p.ranking, p.direction, p.k, p.f) for p in every_set.points
    ]
    full = {(p.direction, p.k): p for p in every_set.placebo}
    for point in report.placebo:
        assert len(point.values) + point.undrawn == 20
        if point.k == "16":
            assert point.undrawn == 0
            continue
        assert full[(point.direction, point.k)].undrawn == 0
        assert point.values == full[(point.direction, point.k)].values[: len(point.values)]
    if any(p.undrawn for p in report.placebo):
        assert "then the verdict could no longer change" in report.ranking_verdict.reason
        assert "of 20 sets drawn" in placebo_line(report) and "of 20 sets drawn" in page(report)


def test_kept_source_values_spare_the_later_calls_their_source_pass(planted: PlantedPair) -> None:
    """The waves' engine calls read the patch source's values kept from the first call instead of running it again,
    and measure exactly what a fresh engine does."""
    from access.outcomes import Forced
    from access.pair import load_pair
    from localize.passes import DIRECTIONS, DirectionPasses, UnitSet

    pair = load_pair(planted.sft_dir, planted.dpo_dir, device="cpu", dtype="float32")
    rows = [Forced((1, *range(5, 5 + n), 7, 9), 2) for n in (6, 9, 12)]
    ran: list[int] = []
    pair.sft.get_input_embeddings().register_forward_hook(lambda *_: ran.append(1))
    width, layers = pair.sft.config.intermediate_size, pair.sft.config.num_hidden_layers
    placebo = {"p": (UnitSet.from_flat("mlp_post", np.arange(0, layers * width, 97), width),)}
    measured = []
    for keep in (True, False):
        passes = DirectionPasses(DIRECTIONS["necessity"], pair.dpo, pair.sft, rows, "test", 2048)
        if keep:
            passes.outcomes.keep_source_values({("mlp_post", layer) for layer in range(layers)})
        passes.run({"zero": (), "every unit": (UnitSet.from_flat("mlp_post", np.arange(layers * width), width),)})
        before = len(ran)
        measured.append(passes.run(placebo)["p"])
        assert (len(ran) == before) == keep
    assert np.array_equal(measured[0].kl, measured[1].kl)


def test_the_profile_and_both_verdicts_are_reported(report: LocalizeReport) -> None:
    kinds = {row.kind for row in report.profile}
    assert kinds == {"sublayer", "window", "head"}
    every_mlp = [r for r in report.profile if r.name == "every MLP" and r.direction == "necessity"]
    assert every_mlp and every_mlp[0].f == pytest.approx(1.0, abs=1e-9)  # the planted change is in the MLPs alone
    assert report.claim_1c.verdict in ("supported", "not supported", "inconclusive", "n/a")
    assert report.ranking_verdict.reason


def test_the_report_round_trips_and_its_page_has_both_figures(report: LocalizeReport) -> None:
    files = LocalizeDir(report.out_dir)
    again = LocalizeReport.load(files.report)
    assert json.dumps(nonfinite_as_null(to_json(again))) == json.dumps(nonfinite_as_null(to_json(report)))
    page = files.page.read_text(encoding="utf-8")
    assert page.count('class="plotly-graph-div"') == 2 and "Faithfulness curves" in page


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--rankings", ""], "--rankings"),
        (["--rankings", "count,votes"], "votes"),
        (["--k", "0%"], "--k"),
        (["--k", "0.2%,150%"], "150%"),
        (["--placebo-k", "3%"], "--placebo-k"),
        (["--placebo-design", "some"], "--placebo-design: expected one of sequential, all"),
        (["--hook", "attn_out"], "did not record attn_out"),
    ],
)
def test_bad_input_is_one_line(run: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str) -> None:
    one_line_error(capsys, ["localize", str(run), "-c", "multi_turn", *flags], needle)


def test_a_pair_whose_widths_differ_is_refused(
    planted: PlantedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sft, dpo = tmp_path / "sft", tmp_path / "dpo"
    shutil.copytree(planted.sft_dir, sft)
    shutil.copytree(planted.dpo_dir, dpo)
    run = _record(planted, sft, dpo, tmp_path / "run")
    config = json.loads((dpo / "config.json").read_text())
    (dpo / "config.json").write_text(json.dumps({**config, "intermediate_size": config["intermediate_size"] * 2}))
    one_line_error(capsys, ["localize", str(run), "-c", "multi_turn"], "intermediate_size")


def test_responses_from_another_tokenizer_are_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "responses.jsonl"
    kept.write_text("".join(json.dumps({"token_ids": [5, 10**6]}) + "\n" for _ in range(2)))
    one_line_error(
        capsys,
        ["localize", str(run), "-c", "multi_turn", "--responses", str(kept), "--limit", "2"],
        ":1: token_ids[1] is 1000000, outside the vocabulary's",
    )


def test_responses_that_do_not_say_who_wrote_them_properly_are_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kept responses are held to probe intervene's checks, fingerprints included, before any model loads."""
    kept = tmp_path / "responses.jsonl"
    kept.write_text("".join(json.dumps({"token_ids": [5, 6], "weights_sha256": "abc"}) + "\n" for _ in range(2)))
    one_line_error(
        capsys,
        ["localize", str(run), "-c", "multi_turn", "--responses", str(kept), "--limit", "2"],
        ":1: 'weights_sha256' is 'abc'; expected a sha256",
    )


def test_the_notebook_draws_both_figures_from_the_report(report: LocalizeReport, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import nbformat
    from nbclient import NotebookClient

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "localize.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    monkeypatch.setenv("LOCALIZE_REPORT", str(LocalizeDir(report.out_dir).report))
    NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(notebook.parent)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]) == 2


@pytest.mark.slow
def test_torchrun_splits_the_rows_and_writes_the_one_process_figures(
    planted: PlantedPair, run: Path, report: LocalizeReport, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    args = [
        "localize",
        str(run),
        "-c",
        "multi_turn",
        "--rankings",
        ",".join(RANKED),
        "--k",
        "0.2%,16,1%,2%,10%,100%",
        "--placebo",
        "20",
        "--placebo-k",
        "16,0.2%,2%",
        "--limit",
        "3",
        "--data",
        str(planted.data_dir / "test.jsonl"),
        "--max-new-tokens",
        "4",
        "--bootstrap",
        "300",
        "--profile-width",
        "2",
        "--head-layers",
        "1",
        "--out",
        str(tmp_path / "split"),
    ]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "probe_cli"]
    done = subprocess.run([*command, *args], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    split = LocalizeReport.load(LocalizeDir(tmp_path / "split").report)
    assert [(p.ranking, p.direction, p.k) for p in split.points] == [
        (p.ranking, p.direction, p.k) for p in report.points
    ]
    for mine, theirs in zip(split.points, report.points, strict=True):
        assert mine.f == pytest.approx(theirs.f, abs=1e-6)
    assert split.claim_1c.verdict == report.claim_1c.verdict
    assert [(p.k, len(p.values)) for p in split.placebo] == [(p.k, len(p.values)) for p in report.placebo]
    assert split.ranking_verdict.verdict == report.ranking_verdict.verdict
