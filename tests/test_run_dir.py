"""The run directory's names, its recording lock, and the one way a finished directory replaces an old one.

The names are the ones every earlier toolkit version wrote: a run recorded, analysed and
intervened on before must open unchanged, so they are pinned here, path by path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import core.atomic
from core.atomic import replace_dir
from core.errors import ProbeError
from core.run_dir import RunDir
from training.runner import finish_output, partial_dir


def test_every_name_is_the_one_older_runs_have() -> None:
    run = RunDir("RUN")
    analysis, ab = run.analysis, run.intervention("multi_turn_dpo_x")
    names = [
        run.activations,
        run.settings_file,
        run.shard("multi_turn", 64),
        run.consolidating,
        run.attribution("dpo_margin"),
        analysis.summary,
        analysis.maps("mean_diff"),
        analysis.base_maps("mean_diff"),
        analysis.neuron_set("multi_turn", "mlp_out"),
        analysis.top(32).neuron_set("multi_turn", "mlp_out"),
        analysis.maps_plot("multi_turn", "mlp_out", "mean_diff"),
        analysis.weight_change,
        analysis.explain_record("multi_turn", "mlp_post"),
        analysis.explain_page("multi_turn", "mlp_post"),
        ab.report,
        ab.markdown,
        ab.generations,
        ab.arms,
        run.lmeval,
        run.eval_file,
        run.replicate_file,
        run.report_file,
    ]
    assert [p.relative_to("RUN").as_posix() for p in names] == [
        "activations.h5",
        "run.json",
        "journal/multi_turn/000000064.npz",
        ".consolidate",
        "attribution_dpo_margin.h5",
        "analysis/summary.json",
        "analysis/maps_mean_diff.h5",
        "analysis/maps_mean_diff_sft_minus_base.h5",
        "analysis/neurons_multi_turn_mlp_out.json",
        "analysis/top32/neurons_multi_turn_mlp_out.json",
        "analysis/plots/multi_turn_mlp_out_mean_diff_maps.html",
        "analysis/weight_change.h5",
        "analysis/explain_multi_turn_mlp_post.json",
        "analysis/explain_multi_turn_mlp_post.html",
        "interventions/multi_turn_dpo_x/ab_report.json",
        "interventions/multi_turn_dpo_x/ab_report.md",
        "interventions/multi_turn_dpo_x/generations.jsonl",
        "interventions/multi_turn_dpo_x/.arms",
        "lmeval",
        "eval.json",
        "replicate.json",
        "report.html",
    ]


def test_a_second_recorder_into_one_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    with run.lock(), pytest.raises(ProbeError) as refused, run.lock():
        pass
    assert str(refused.value) == (
        f"{run.root}: another `probe run` is recording into this directory; wait for it or use another --out"
    )
    with run.lock():  # released when the holder's block ended
        pass


def _folder(path: Path, name: str) -> Path:
    path.mkdir(parents=True)
    (path / name).write_text(name)
    (path / "sub").mkdir()
    (path / "sub" / "deep.txt").write_text(name)
    return path


@pytest.mark.parametrize("exchange", [True, False], ids=["exchanged", "two-renames"])
def test_a_finished_directory_replaces_the_old_one_and_nothing_else_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    if not exchange:  # a system without renameat2 (macOS, old glibc)
        monkeypatch.setattr(core.atomic, "_renameat2", lambda: None)
    target = _folder(tmp_path / "target", "old.txt")
    replace_dir(_folder(tmp_path / ".target.build-1", "new.txt"), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    assert sorted(p.name for p in target.iterdir()) == ["new.txt", "sub"]
    assert (target / "sub" / "deep.txt").read_text() == "new.txt"
    replace_dir(_folder(tmp_path / "other", "first.txt"), tmp_path / "fresh" / "target")  # no old one, no parent
    assert (tmp_path / "fresh" / "target" / "first.txt").is_file() and not (tmp_path / "other").exists()


def test_a_finished_training_run_replaces_an_old_out(tmp_path: Path) -> None:
    out = _folder(tmp_path / "sft", "old-weights.safetensors")
    work = _folder(partial_dir(out), "model.safetensors")
    (work / "resume.json").write_text("{}")
    (work / "checkpoint-4").mkdir()
    assert finish_output(work, out) == out
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors", "sub"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft"]
