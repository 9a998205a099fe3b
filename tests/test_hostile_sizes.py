"""Sizes, round five: every size a user can type is bounded before the work starts, in one ``error:`` line.

Generated cases, each cheap (the refusal comes before any model loads):

* a held-out row's constraint list, or one constraint's value, far past its bound (a ``forbid_words`` of 300,000
  words kept the offline judge busy for more than 300 s): one line naming the file and line and the bound
  (:mod:`core.constraints`);
* a list-valued option past :data:`core.validation.MAX_OPTION_ITEMS`, from a flag or a ``--config`` file (2,000 doses
  were once estimated at "about 0 s");
* ``probe replicate --nproc`` far above the cores or devices present is refused, even with ``--plan``; above them it is
  a warning, and the estimate counts every process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.constraints import MAX_CONSTRAINTS, MAX_VALUE_CHARS, MAX_VALUE_WORDS
from core.validation import MAX_OPTION_ITEMS
from tests.support.cli import one_line_error
from tests.support.judge_files import write_judge_files


@pytest.fixture(scope="module")
def judge_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_judge_files(tmp_path_factory.mktemp("sizes-judge"), n_roles=2, seed=3)


WORDS = ["very", "really", "also", "just", "quite"]
CONSTRAINT_LISTS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "forbid_words of 300,000 words": (
        [{"type": "forbid_words", "value": "|".join(WORDS[i % 5] for i in range(300_000))}],
        f"at most {MAX_VALUE_CHARS:,}",
    ),
    "forbid_words of short words, over the word bound": (
        [{"type": "forbid_words", "value": "|".join("ab" for _ in range(MAX_VALUE_WORDS + 1))}],
        f"words; at most {MAX_VALUE_WORDS}",
    ),
    "include_word of a 300,000-word phrase": (
        [{"type": "include_word", "value": " ".join(["river"] * 300_000)}],
        f"at most {MAX_VALUE_CHARS:,}",
    ),
    "start_with of one 10 MB word": ([{"type": "start_with", "value": "a" * 10_000_000}], "characters"),
    "300,000 constraints": ([{"type": "lowercase"}] * 300_000, f"at most {MAX_CONSTRAINTS}"),
    "one constraint over the list bound": ([{"type": "no_commas"}] * (MAX_CONSTRAINTS + 1), "constraints"),
}


@pytest.mark.parametrize("case", list(CONSTRAINT_LISTS))
def test_a_constraint_list_past_its_bound_is_one_line_naming_the_row(
    case: str, judge_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, responses = judge_files
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    constraints, needle = CONSTRAINT_LISTS[case]
    rows[1]["expect"]["constraints"] = constraints
    hostile = tmp_path / "test.jsonl"
    hostile.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    argv = ["judge", "--data", str(hostile), "--responses", str(responses), "--verdicts-out", str(tmp_path / "v")]
    one_line_error(capsys, argv, f"{hostile}:2:", "'constraints'", needle)
    assert not (tmp_path / "v").exists()


def test_the_synthesized_held_out_rows_are_well_within_the_bounds() -> None:
    """The bounds refuse only what no synthesizer writes: the held-out split's rows, read by the same reader."""
    from core.rows import read_test_rows
    from data_synthesis.heldout.files import heldout_test_file

    rows = read_test_rows(heldout_test_file())
    lists = [(r.expect or {}).get("constraints") or [] for r in rows]
    assert max(len(c) for c in lists) <= MAX_CONSTRAINTS // 8
    assert max((len(str(c.get("value") or "")) for cs in lists for c in cs), default=0) <= MAX_VALUE_CHARS // 10


def _doses(n: int) -> str:
    return ",".join(str(round(0.5 + i / (4 * n), 6)) for i in range(n))


LIST_OPTIONS: dict[str, Any] = {
    "--dose of 2,000 doses": ["--dose", _doses(2000)],
    "--dose one over the bound": ["--dose", _doses(MAX_OPTION_ITEMS + 1)],
    "--edit repeated 300 times": [arg for _ in range(300) for arg in ("--edit", "scale")],
    "doses in a config file": {"doses": [0.5] * 2000},
    "edits in a config file": {"edit": ["scale"] * 1000},
}


@pytest.mark.parametrize("case", list(LIST_OPTIONS))
def test_a_list_option_past_its_bound_is_one_line_before_anything_loads(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = LIST_OPTIONS[case]
    if isinstance(given, dict):
        config = tmp_path / "settings.json"
        config.write_text(json.dumps(given), encoding="utf-8")
        given = ["--config", str(config)]
    argv = ["intervene", str(tmp_path / "no-run-here"), "-c", "multi_turn", *given]
    one_line_error(capsys, argv, f"expected at most {MAX_OPTION_ITEMS} items, got")


@pytest.mark.parametrize("nproc", [9, 100_000, 10**6])
def test_nproc_far_above_the_machine_is_refused_even_for_a_plan(
    nproc: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine of 2 cores (said so, whatever this one has), before the pair is looked at (past 10**6, the bound of
    every count says so first)."""
    import study.replicate_config as replicate_config

    monkeypatch.setattr(replicate_config, "machine_units", lambda _device: (2, "CPU cores"))
    missing = tmp_path / "missing"
    argv = ["replicate", "--sft", str(missing), "--dpo", str(missing), "--plan", "--nproc", str(nproc)]
    one_line_error(capsys, argv, f"--nproc {nproc}: this machine has 2 CPU cores; at most 8 processes")


@pytest.mark.parametrize(
    "nproc, units, warned",
    [
        (1, (2, "CPU cores"), False),
        (2, (2, "CPU cores"), False),
        (3, (2, "CPU cores"), True),
        (8, (2, "CPU cores"), True),
        (4, (4, "GPUs"), False),
        (16, (4, "GPUs"), True),
    ],
)
def test_nproc_above_the_machine_is_a_warning(
    nproc: int, units: tuple[int, str], warned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import study.replicate_config as replicate_config

    monkeypatch.setattr(replicate_config, "machine_units", lambda _device: units)
    options = replicate_config.ReplicateOptions(data_file=Path("t.jsonl"), out_dir=Path("run"), nproc=nproc)
    warning = options.nproc_warning()
    assert (warning is not None) == warned, warning
    if warned:
        assert warning is not None and f"--nproc {nproc} on {units[0]} {units[1]}" in warning


def test_the_estimate_counts_every_process() -> None:
    """A stage's processes each load the models; the work is split over GPUs only (docs/scaling.md: about 1x on a
    CPU)."""
    from study.replicate_estimate import launched

    cpu, gpus = (2, "CPU cores"), (4, "GPUs")
    assert launched(10, 600, 1, cpu) == 610
    assert launched(10, 600, 8, cpu) == 640 > launched(10, 600, 2, cpu) == 610
    assert launched(10, 600, 4, gpus) == 160 and launched(10, 600, 16, gpus) == 190
