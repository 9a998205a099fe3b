"""`probe replicate --pair tiny` end to end: the plan with estimates, every stage, the report, a resume, the notebook;
the localize stage's curves, claim 1c and claim 4 at every k in the report, and a localize run by hand picked up.

The embedded tiny pair takes minutes to train, so the pair is the session's tiny random pair (the same
stand-in `tests/test_probes_cli.py` uses) on the synthesized test split; everything after the pair runs
for real, made fast by the command's own options (2 rows per capability, 2 placebo sets, 4 new tokens, 2 localize
rows and 2 random sets per placebo point).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from probe_cli.main import main

OPTIONS = [
    *("--limit", "2", "--placebo", "2", "--max-new-tokens", "4", "--eval-rows", "18", "--explain-top", "3"),
    *("--localize-limit", "2", "--localize-placebo", "2"),
]
STAGES = ["record", "analyze", "explain", "intervene", "localize", "evaluate", "report"]
LOCALIZED = Path("localize") / "multi_turn_replicate" / "localize.json"
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "report.ipynb"


def _probe(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def tiny_default(tiny_pair, tiny_model_dir: Path, chat_data: Path, tmp_path_factory: pytest.TempPathFactory):
    import training.default_pair as default_pair

    root = tmp_path_factory.mktemp("replicate")
    fake = default_pair.DefaultPair(
        root, chat_data, chat_data / "test.jsonl", tiny_pair[0], tiny_pair[1], base_dir=tiny_model_dir
    )
    with pytest.MonkeyPatch.context() as patch:
        # the real one trains the tiny pair: minutes
        patch.setattr(default_pair, "ensure_default_pair", lambda *a, **k: fake)
        patch.setenv("PROBE_HOME", str(root / "home"))  # the weights-fingerprint cache
        patch.setenv("OMP_NUM_THREADS", "1")
        yield root


@pytest.fixture(scope="module")
def replicated(tiny_default: Path) -> tuple[Path, int, str, str]:
    out = tiny_default / "run"
    return (out, *_probe(["replicate", "--pair", "tiny", "--out", str(out), *OPTIONS]))


def test_replicate_runs_every_stage_and_ends_with_the_report(replicated: tuple[Path, int, str, str]) -> None:
    out, code, printed, progress = replicated
    assert code == 0, progress
    for stage in STAGES:
        assert f"│ {stage}" in printed and f"] {stage}: " in progress, stage
    assert "estimated" in printed and "│ total" in printed  # the plan comes first, with a time per stage and in all
    assert "of which the localize stage" in printed  # the localize stage's own budget, said apart
    # --placebo 2 leaves claim 4 untestable: said once, before the first stage (tests/test_replicate_plan.py)
    assert progress.count("warning: claim 4 ") == 1 and progress.index("warning: claim 4") < progress.index("] record")
    record = json.loads((out / "replicate.json").read_text())
    assert [s["name"] for s in record["stages"]] == STAGES and all(s["status"] == "done" for s in record["stages"][:-1])
    assert record["command"].startswith("probe replicate --pair tiny --limit 2 --placebo 2")
    assert "--localize-limit 2 --localize-placebo 2" in record["command"]
    report = out / "report.html"
    size = report.stat().st_size
    print(f"report size: {size / 1e6:.2f} MB")
    assert size <= 10_000_000 and f"report: {report}" in printed.replace("\n", "")
    page = report.read_text(encoding="utf-8")
    for claim in ("1", "1c", "2", "3", "4"):
        assert f'data-claim="{claim}"' in page
    for part in ("explain_multi_turn_mlp_out.json", "neurons_multi_turn_mlp_out.json"):
        assert (out / "analysis" / part).is_file()
    assert (out / "interventions" / "multi_turn_dpo_replicate" / "ab_report.json").is_file() and (
        out / "eval.json"
    ).is_file()
    assert "not run" not in page.split('<section id="pair">')[0]  # every stage ran, so every claim has its evidence
    # claim 2 is judged on the held-out split, never trained on; the recording read the pair's test split
    assert Path(json.loads((out / "eval.json").read_text())["test_file"]).name == "heldout.jsonl"
    # and the A/B generates the same split's rows (claims 3 and 4 read it)
    ab = json.loads((out / "interventions" / "multi_turn_dpo_replicate" / "ab_report.json").read_text())
    assert Path(ab["data_file"]).name == "heldout.jsonl" and ab["config"]["split"] == "heldout"


@pytest.mark.usefixtures("tiny_default")
def test_the_stage_bench_sets_every_stage_beside_its_floor(
    replicated: tuple[Path, int, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/bench_stages.py on the run: a row per stage that runs a model, the intervene stage's generation and
    teacher-forced passes and the coherence guard apart (the run recorded their seconds), each with its time, floor,
    ratio and verdict; every floor below the time measured; the issue's three budgets. The coherence guard ran no row
    (the outcomes' target pass scored them all), so its row has a floor of 0 and no time."""
    import importlib.util

    from core.flops import Weights, matmul_rate
    from interventions.outcome_runs import inputs_for
    from interventions.plan import plan_ab
    from interventions.results import ABReport
    from study.floors import read_run, stage_floors
    from study.replicate import ab_config

    out = replicated[0]
    intervene = next(s for s in json.loads((out / "replicate.json").read_text())["stages"] if s["name"] == "intervene")
    parts = intervene["parts"]
    assert parts["generation"] > 0 and parts["teacher-forced"] > 0 and "coherence" not in parts, parts
    assert sum(parts.values()) < intervene["seconds"]
    spec = importlib.util.spec_from_file_location(
        "bench_stages", NOTEBOOK.parents[1] / "benchmarks" / "bench_stages.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main([str(out), "--rate-seconds", "0.2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = re.compile(r"^(?P<stage> *[a-z-]+) +(?P<time>[\d.]+ (?:s|min)) +[\d.]+ (?:s|min) +[\d.]+x  (?:PASS|FAIL)$")
    stages = [m["stage"].strip() for line in lines if (m := row.match(line))]
    assert stages == ["record", "intervene", "generation", "teacher-forced", "localize", "evaluate"], lines
    assert re.search(r"^  coherence +— +0\.00 s +— +—$", "\n".join(lines), re.MULTILINE), lines
    budgets = [line for line in lines if line.startswith("budget: ")]
    assert len(budgets) == 3 and "no verdict" in budgets[1], budgets  # --limit 2 is not the default A/B
    assert all(line.endswith(("PASS", "FAIL")) for line in (budgets[0], budgets[2])), budgets
    record, options = read_run(out)
    weights = Weights.of(options.models.dpo)
    rate = matmul_rate(weights, threads=record.threads, seconds=0.2)
    for floor in stage_floors(out):
        if floor.stage.strip() == "coherence":
            assert floor.seconds is None and floor.work.flops(weights) == 0, floor
            continue
        assert floor.seconds is not None and 0 < floor.work.flops(weights) / rate <= floor.seconds, floor
    # the teacher-forced floor counts the sequences the run scored: its DPO pairs among them (the plan resolves the
    # held-out split's pairs; the config alone names none)
    report = ABReport.load(ab_config(options).out_dir / "ab_report.json")
    plan = plan_ab(replace(ab_config(options), out_dir=None))
    assert report.outcome_pairs > 0
    assert len(inputs_for(plan, "dpo", None, str(ab_config(options).out_dir)).pairs) == report.outcome_pairs


@pytest.mark.usefixtures("tiny_default")
def test_a_second_call_skips_every_finished_stage(replicated: tuple[Path, int, str, str]) -> None:
    out = replicated[0]
    before = (out / "activations.h5").stat().st_mtime_ns
    code, _, progress = _probe(["replicate", "--pair", "tiny", "--out", str(out), *OPTIONS])
    assert code == 0, progress
    for stage in STAGES[:-1]:
        assert f"] {stage}: already complete, skipped" in progress
    assert (out / "activations.h5").stat().st_mtime_ns == before


def test_plan_only_runs_nothing(tiny_default: Path) -> None:
    out = tiny_default / "planned"
    code, printed, _ = _probe(["replicate", "--pair", "tiny", "--out", str(out), "--plan", *OPTIONS])
    assert code == 0 and "│ record" in printed and "to run" in printed
    assert not (out / "activations.h5").exists() and not (out / "replicate.json").exists()


def test_the_notebook_regenerates_and_shows_the_report(
    replicated: tuple[Path, int, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", []) and "PROBE_RUN_DIR" in code[0].source
    out = replicated[0]
    (out / "report.html").unlink()
    monkeypatch.setenv("PROBE_RUN_DIR", str(out))
    NotebookClient(
        nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "claim 1: " in text and "claim 4: " in text and (out / "report.html").is_file()
    shown = [o for o in outputs if "text/html" in o.get("data", {})]
    assert len(shown) == 1 and shown[0]["data"]["text/html"].startswith("<iframe srcdoc=")


def test_the_localize_stage_puts_its_curves_claim_1c_and_claim_4_per_k_in_the_report(
    replicated: tuple[Path, int, str, str],
) -> None:
    from localize.records import LocalizeReport

    out, code, _, progress = replicated
    assert code == 0, progress
    report = LocalizeReport.load(out / LOCALIZED)
    assert report.capability == "multi_turn" and report.hook == "mlp_post" and len(report.row_ids) == 2
    assert (out / "localize" / "latest").resolve() == (out / LOCALIZED).parent.resolve()
    page = (out / "report.html").read_text(encoding="utf-8")
    claim_1c = page.split('<section id="claim-1c">', 1)[1].split("</section>", 1)[0]
    status = {"supported": "supported", "not supported": "not supported"}.get(report.claim_1c.verdict, "cannot be")
    assert f'data-claim="1c" data-status="{status}' in claim_1c and "window" in claim_1c
    section = page.split('<section id="localize">', 1)[1].split("</section>", 1)[0]
    assert str(out / LOCALIZED) in section and "CPR log k" in section and "k50" in section
    assert 'data-figure="localize-curves"' in section and 'data-figure="localize-profile"' in section
    assert report.ranking_verdict.reason.split(";")[0] in section.replace("&#x27;", "'")
    per_k = page.split("<h3 id=claim-4-per-k>", 1)[1].split("</table>", 1)[0]
    assert per_k.count("<tr>") == 1 + len([p for p in report.curve("count", "necessity") if p.units > 0])
    assert "no placebo at this k" in per_k  # 2 random sets at 0.2% and 2% only: too few anywhere to place f


def test_a_localize_run_by_hand_is_what_probe_report_reads(
    replicated: tuple[Path, int, str, str], tmp_path: Path
) -> None:
    out = replicated[0]
    hand = ["--rankings", "count,weight", "--k", "1%,10%", "--placebo", "0", "--no-profile", "--limit", "2"]
    code, _, err = _probe(["localize", str(out), "-c", "multi_turn", "--max-new-tokens", "2", *hand])
    assert code == 0, err
    newest = (out / "localize" / "latest").resolve()
    assert newest.name.startswith("multi_turn_mlp_post_")
    code, printed, err = _probe(["report", str(out), "--out", str(tmp_path / "r.html")])
    assert code == 0, err
    section = (tmp_path / "r.html").read_text(encoding="utf-8").split('<section id="localize">', 1)[1]
    assert str(newest / "localize.json") in section.split("</section>", 1)[0]
    assert "1c" in printed  # the verdict table names claim 1c beside claims 1-4
