"""``probe lmeval`` and the ``probe-edited`` lm-eval model, offline, on tiny models and local tasks.

* With no edit, or an exact no-op edit (scale ×1), ``probe-edited`` gives lm-eval's ``hf`` model's
  per-item results bit for bit on a multiple-choice, a generation and a rolling-likelihood task.
* Ablating the planted answer unit (tests/support/lmeval_tasks.py) flips every item, and the
  paired test says so: Δ −100 points, CI excluding 0, McNemar p < 0.001, placebo units at 0.
* A bad task name, a task that needs the hub, a missing extra, an edit that does not fit the
  model: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import exit_of, one_line_error
from tests.support.lmeval_tasks import plant_answer_unit, write_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASKS = ["probe_mc", "probe_gen", "probe_ppl"]


@pytest.fixture(scope="module")
def lm_eval() -> Iterator[Any]:
    """lm-eval, whose every ``simple_evaluate`` adds the machine's environment to its results (torch's collect_env:
    ``pip list`` and device probes in subprocesses, a second or more each time); it cannot change within this module,
    so here it is collected once and each evaluation gets a copy of the same values."""
    module = pytest.importorskip("lm_eval")
    import lm_eval.evaluator

    collect = lm_eval.evaluator.add_env_info
    collected: dict[str, Any] = {}

    def once(storage: dict[str, Any]) -> None:
        if not collected:
            collect(collected)
        storage.update(collected)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lm_eval.evaluator, "add_env_info", once)
        yield module


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lmeval-tasks")
    write_tasks(root)
    return root


@pytest.fixture(scope="module")
def planted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    return plant_answer_unit(tiny_model_dir, tmp_path_factory.mktemp("planted") / "model")


def _evaluate(lm_eval: Any, model: Any, task_dir: Path, tasks: list[str], model_args: Any = None) -> dict[str, Any]:
    from lm_eval.tasks import TaskManager

    from lmeval.model import register

    register()
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    return lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=tasks,
        task_manager=manager,
        log_samples=True,
        bootstrap_iters=0,
        batch_size=4,
    )


def _per_item(sample: dict[str, Any]) -> tuple[Any, ...]:
    return (
        sample["doc_id"],
        sample["filter"],
        sample["resps"],
        sample["filtered_resps"],
        {m: sample[m] for m in sample["metrics"]},
    )


def test_unedited_bridge_gives_hf_results_item_for_item(lm_eval: Any, tiny_model_dir: Path, task_dir: Path) -> None:
    from access.edits import Scale
    from interventions.selection import parse_units
    from lmeval.model import register

    hf = _evaluate(
        lm_eval, "hf", task_dir, TASKS, {"pretrained": str(tiny_model_dir), "dtype": "float32", "device": "cpu"}
    )
    plain = _evaluate(lm_eval, "probe-edited", task_dir, TASKS, {"pretrained": str(tiny_model_dir)})
    identity = register()(pretrained=tiny_model_dir, batch_size=4, edits=[Scale(parse_units("1:0,2:5-9,3:31"), 1.0)])
    scaled_by_one = _evaluate(lm_eval, identity, task_dir, TASKS)
    for run in (plain, scaled_by_one):
        for task in TASKS:
            assert [_per_item(s) for s in run["samples"][task]] == [_per_item(s) for s in hf["samples"][task]], task
            assert run["results"][task] == hf["results"][task]
    stats = identity.edit_stats()
    # the hooks ran, and ×1 is exact
    assert stats["calls"] > 0 and stats["values_seen"] > 0 and stats["values_changed"] == 0


def test_model_args_string_applies_the_edit(lm_eval: Any, planted: tuple[Path, int], task_dir: Path) -> None:
    model_dir, layer = planted
    base = _evaluate(lm_eval, "probe-edited", task_dir, ["probe_mc", "probe_gen"], f"pretrained={model_dir}")
    ablated = _evaluate(
        lm_eval,
        "probe-edited",
        task_dir,
        ["probe_mc", "probe_gen"],
        f"pretrained={model_dir},units={layer}:5;{layer}:30,factor=0",
    )
    assert base["results"]["probe_mc"]["acc,none"] == 1.0 and base["results"]["probe_gen"]["exact_match,none"] == 1.0
    assert (
        ablated["results"]["probe_mc"]["acc,none"] == 0.0 and ablated["results"]["probe_gen"]["exact_match,none"] == 0.0
    )


@pytest.mark.usefixtures("lm_eval")
def test_ablating_the_planted_unit_is_detected(
    planted: tuple[Path, int], task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lmeval.report import LMEvalReport

    model_dir, layer = planted
    out = tmp_path / "out"
    code, stdout, err = exit_of(
        [
            "lmeval",
            "--model-dir",
            str(model_dir),
            "--units",
            f"{layer}:5",
            "--factor",
            "0",
            "--tasks",
            "probe_gen,probe_ppl,probe_mcs",
            "--include-path",
            str(task_dir),
            "--placebo",
            "2",
            "--bootstrap",
            "1000",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    report = LMEvalReport.load(out / "lmeval_report.json")
    arm = report.arms[0]
    rows = {row.key: row for row in arm.rows}
    for key in (("probe_mc", "acc", "none"), ("probe_gen", "exact_match", "none")):
        row, e = rows[key], rows[key].effect
        assert (e.n, e.before, e.after, e.delta, row.items_changed) == (12, 1.0, 0.0, -1.0, 12)
        assert e.binary and e.ci_high < 0 and e.p_value < 0.001 and e.lost == 12
        assert row.placebo.percentile == 0.0 and row.placebo.deltas == [
            0.0,
            0.0,
        ]  # random units of the same layer do nothing
    ppl = rows[("probe_ppl", "bits_per_byte", "none")].effect
    # the third request type is edited too; no McNemar p (null in the file) for a metric that is not 0/1
    assert ppl.method == "aggregation" and not ppl.binary and math.isnan(ppl.p_value) and ppl.ci_low > 0
    mc2, group = rows[("probe_mc2", "acc", "none")].effect, rows[("probe_mcs", "acc", "none")]
    assert (mc2.before, mc2.after) == (4 / 7, 3 / 7)
    assert group.group and group.effect.n == 19 and group.effect.method == "group"
    assert group.effect.before == pytest.approx(report.baseline.lm_eval_results["probe_mcs"]["acc,none"])
    # the group score as lm-eval computes it
    assert group.effect.after == pytest.approx(arm.lm_eval_results["probe_mcs"]["acc,none"])
    assert arm.hook_stats["values_changed"] > 0 and not arm.flags
    markdown = (out / "lmeval_report.md").read_text()
    assert "| probe_mc | acc | none | 12 | 100.0% | 0.0% | -100.0 |" in markdown
    items = [json.loads(line) for line in (out / "lmeval_items.jsonl").read_text().splitlines()]
    assert {(i["task"], i["unedited"]["acc"], i["scale 0.0"]["acc"]) for i in items if i["task"] == "probe_mc"} == {
        ("probe_mc", 1.0, 0.0)
    }
    assert "probe_gen" in stdout and "-100.0" in stdout


@pytest.mark.usefixtures("lm_eval")
def test_every_edit_kind_runs_through_lm_eval(
    planted: tuple[Path, int],
    tiny_model_dir: Path,
    task_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lmeval.report import LMEvalReport
    from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

    model_dir, layer = planted
    # the means of `mean` and `steer`; the planted unit's recorded values are a few units, not 320
    run = tmp_path / "run"
    write_synthetic_run(run, SyntheticSpec(n_samples=8, n_layers=4, width=32, capabilities=("multi_turn",)))
    out = tmp_path / "out"
    code, _, err = exit_of(
        [
            "lmeval",
            str(run),
            "--model-dir",
            str(model_dir),
            "--source-dir",
            str(tiny_model_dir),
            "--units",
            f"{layer}:5",
            "--edit",
            "scale,mean,patch,steer",
            "--factor",
            "0",
            "--dose",
            "1",
            "--tasks",
            "probe_mc,probe_gen",
            "--include-path",
            str(task_dir),
            "--bootstrap",
            "200",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    report = LMEvalReport.load(out / "lmeval_report.json")
    assert [arm.name for arm in report.arms] == ["scale 0.0", "scale 1.0", "mean", "patch dpo<-sft", "steer"]
    after = {arm.name: {row.task: row.effect.after for row in arm.rows} for arm in report.arms}
    for name in ("scale 0.0", "mean", "patch dpo<-sft"):  # the unit loses its planted value: every answer flips
        assert after[name] == {"probe_mc": 0.0, "probe_gen": 0.0}, name
    # a small vector does not outweigh the plant
    assert after["scale 1.0"] == after["steer"] == {"probe_mc": 1.0, "probe_gen": 1.0}
    noop = report.arm("scale 1.0").flags
    assert any("rounds to exactly 1" in f for f in noop) and any("identical to the unedited pass" in f for f in noop)
    assert not report.arm("steer").flags and report.arm("steer").hook_stats["values_changed"] > 0


@pytest.mark.usefixtures("lm_eval")
def test_ab_report_gets_the_table(
    planted: tuple[Path, int], task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir, layer = planted
    ab = tmp_path / "ab"
    ab.mkdir()
    config = {
        "units": f"{layer}:5",
        "factor": 0.0,
        "model_dir": str(model_dir),
        "edits": ["scale"],
        "hook": "mlp_out",
        "run_dir": None,
    }
    (ab / "ab_report.json").write_text(json.dumps({"config": config}))
    (ab / "ab_report.md").write_text("# A/B report\n\nthe A/B table\n")
    argv = [
        "lmeval",
        "--ab-report",
        str(ab),
        "--tasks",
        "probe_mc",
        "--include-path",
        str(task_dir),
        "--bootstrap",
        "200",
    ]
    for _ in range(2):  # a second measurement replaces the section
        code, _, err = exit_of(argv, capsys)
        assert code == 0, err
    text = (ab / "ab_report.md").read_text()
    assert text.startswith("# A/B report") and text.count("<!-- probe lmeval -->") == 1
    assert "| probe_mc | acc | none | 12 | 100.0% | 0.0% | -100.0 |" in text and (ab / "lmeval_report.json").is_file()


def test_a_bad_task_name_is_one_line(
    lm_eval: Any,
    tiny_model_dir: Path,
    task_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import lm_eval.tasks

    made: list[bool] = []

    # lm-eval's own index takes 10-20 s; here it is left out, and what was asked for recorded
    class Manager(lm_eval.tasks.TaskManager):
        def __init__(self, include_path: Any = None, include_defaults: bool = True, **kwargs: Any) -> None:
            made.append(include_defaults)
            super().__init__(include_path=include_path, include_defaults=False, **kwargs)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Manager)
    one_line_error(
        capsys,
        [
            "lmeval",
            "--model-dir",
            str(tiny_model_dir),
            "--units",
            "1:0",
            "--tasks",
            "probe_mcq",
            "--include-path",
            str(task_dir),
        ],
        "unknown lm-eval task 'probe_mcq'",
        "did you mean probe_mc",
    )
    assert made == [
        False,
        True,
    ]  # the local tasks alone first, then lm-eval's whole index before calling the name unknown


@pytest.mark.usefixtures("lm_eval")
def test_a_task_that_needs_the_hub_is_one_line(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "output_type: multiple_choice\ndoc_to_text: question\ndoc_to_choice: choices\ndoc_to_target: 0\n"
    (tmp_path / "hub.yaml").write_text(
        "task: hub_task\ndataset_path: allenai/ai2_arc\ndataset_name: ARC-Easy\ntest_split: test\n" + body
    )
    one_line_error(
        capsys,
        [
            "lmeval",
            "--model-dir",
            str(tiny_model_dir),
            "--units",
            "1:0",
            "--tasks",
            "hub_task",
            "--include-path",
            str(tmp_path),
        ],
        "task 'hub_task' needs its dataset from the Hugging Face Hub",
        "HF_DATASETS_OFFLINE=0",
    )


@pytest.mark.usefixtures("lm_eval")
@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--units", "9:0"], ["layer 9 (unit 0) is outside the model, which has layers 0-3"]),
        (["--units", "1:64"], ["unit 64 of layer 1 is outside mlp_out, which has units 0-31"]),
        (["--units", "1:0", "--edit", "mean"], ["--edit mean needs a run directory"]),
        (["--units", "1:0", "--factor", "nan"], ["--factor"]),
    ],
)
def test_an_edit_that_does_not_fit_is_one_line(
    tiny_model_dir: Path,
    task_dir: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    needles: list[str],
) -> None:
    one_line_error(
        capsys,
        ["lmeval", "--model-dir", str(tiny_model_dir), "--tasks", "probe_mc", "--include-path", str(task_dir), *argv],
        *needles,
    )


def test_without_the_extra_it_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` now raises ImportError, as without the extra
    one_line_error(
        capsys,
        ["lmeval", "--model-dir", str(tiny_model_dir), "--units", "1:0", "--tasks", "mmlu"],
        "lm-evaluation-harness is not installed",
        'pip install -e ".[eval]"',
    )


def test_the_cli_and_library_import_without_lm_eval() -> None:
    code = "import sys; import probe_cli.main, lmeval.run, lmeval.model, lmeval.report; print('lm_eval' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]
    )
    assert result.stdout.strip() == "False"
