"""Hostile input, round five (issue 53): every reused file says who made it and is checked on read.

Generated cases, per class:

* class 2 and 4, ``--responses``: every kind of crafted responses file (empty, not JSON, JSON of the wrong shape, ids
  out of the vocabulary, negative ids, wrong row ids, another pair's tokenizer fingerprint, another model's
  fingerprint, a malformed fingerprint, too few lines) handed in as a FILE and as an earlier A/B folder's kept
  ``responses_sft.jsonl`` is one ``error:`` line naming the file (and its line), exit status 2, before any forward;
  with outcomes on (the arms generate first) the same refusal comes from the plan, before any model loads;
  a file written before fingerprints is read with one ``warning:``;
* class 2, every reused store: kept arms (``OUT/.arms``) and an attribution cache made by another model, tokenizer
  or rows are made again after one ``warning:`` naming both fingerprints; a recording's local group made by other
  models is one ``error:`` line naming both; a completed recording whose group is shorter than its capability is
  damage, one line when the capability is read;
* class 3: a teacher-forced response longer than the model's context is refused naming the file and line;
* class 4: ``probe report`` on a run that holds an ``--outcomes only`` A/B writes the page (no traceback), uses its
  continuous outcomes and names its missing compliance under "What this run lacks".

Everything runs on the planted-tiny pair (seconds to build) with four rows and four new tokens.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest

from access.generation import Generations
from core.decoding import GenerationConfig
from core.models import load_tokenizer
from core.provenance import MadeBy, short_sha, tokenizer_sha256, weights_sha256
from interventions.ab import run_ab
from interventions.arms import ArmStore, made_by, sealed
from interventions.config import ABConfig
from interventions.plan import plan_ab
from probes.attribution import _cached, _made_by
from probes.config import RecordConfig
from probes.recording import record_run
from probes.settings import RunSettings
from probes.store import RunReader
from tests.chat_models import cli, one_error_line
from training.default_pair import ensure_default_pair
from training.planted import PlantedPair, read_planted

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROWS = 4


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> PlantedPair:
    return read_planted(ensure_default_pair(tmp_path_factory.mktemp("home"), pair="planted-tiny", progress=False).root)


def _ab_args(planted: PlantedPair, out: Path, *extra: str) -> list[str]:
    units = ",".join(f"{layer}:{unit}" for layer, unit in planted.units)
    return [
        "intervene",
        "--model-dir", str(planted.dpo_dir), "--source-dir", str(planted.sft_dir),
        "--data", str(planted.data_dir / "test.jsonl"), "--units", units, "--hook", planted.hook,
        "--edit", "patch", "-c", "multi_turn", "--limit", str(ROWS), "--placebo", "0", "--max-new-tokens", "4",
        "--bootstrap", "100", "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def kept(planted: PlantedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An A/B run's folder: its report and each model's kept greedy responses."""
    out = tmp_path_factory.mktemp("ab") / "kept"
    code, _, err = cli(*_ab_args(planted, out))
    assert code == 0, err
    return out


def _lines(kept: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (kept / "responses_sft.jsonl").read_text().splitlines()]


Craft = Callable[[list[dict[str, Any]], dict[str, Any]], str]  # (kept lines, facts about another pair) -> the file


def _text(text: str) -> Craft:
    return lambda *_: text


def _all_but_last(lines: list[dict[str, Any]], *_: Any) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines[:-1])


def _first(**fields: Any) -> Callable[[list[dict[str, Any]], Any], str]:
    """The kept lines, the first with ``fields`` replaced."""
    return lambda lines, _: "".join(
        json.dumps({**line, **(fields if k == 0 else {})}) + "\n" for k, line in enumerate(lines)
    )


def _shifted_rows(lines: list[dict[str, Any]], _: Any) -> str:
    return "".join(json.dumps({**line, "row": line["row"] + 1}) + "\n" for line in lines)


def _fingerprint(name: str) -> Craft:
    """Every line stamped with another model's (``weights_sha256``) or another pair's tokenizer's fingerprint."""
    return lambda lines, other: "".join(json.dumps({**line, name: other[name]}) + "\n" for line in lines)


def _too_long(lines: list[dict[str, Any]], other: dict[str, Any]) -> str:
    return _first(token_ids=[5] * (other["context"] + 1))(lines, other)


# case -> (the file's text from the kept lines and facts about another pair, what its error line says)
CRAFTED: dict[str, tuple[Craft, str]] = {
    "empty": (_text(""), f"0 responses for {ROWS} test rows"),
    "blank lines only": (_text("\n \n"), f"0 responses for {ROWS} test rows"),
    "not JSON": (_text('{"row": 0, "token_ids": [5\n'), ":1:"),
    "a JSON list per line": (_text("[5, 6]\n" * ROWS), ":1: expected an object"),
    "a JSON string per line": (_text('"Ahoy."\n' * ROWS), ":1: expected an object"),
    "token_ids not a list": (_first(token_ids="5 6"), ":1: expected an object with a non-empty"),
    "token_ids empty": (_first(token_ids=[]), ":1: expected an object with a non-empty"),
    "token ids not integers": (_first(token_ids=[5, 1.5]), ":1: token_ids[1] is 1.5; expected an integer id"),
    "token ids true/false": (_first(token_ids=[True]), ":1: token_ids[0] is true; expected an integer id"),
    "ids out of the vocabulary": (_first(token_ids=[5, 10**9]), ":1: token_ids[1] is 1000000000, outside"),
    "negative ids": (_first(token_ids=[-1]), ":1: token_ids[0] is -1, outside"),
    "wrong row ids": (_shifted_rows, ":1: 'row' is"),
    "another pair's tokenizer": (_fingerprint("tokenizer_sha256"), ":1: written by another model or tokenizer"),
    "another model's weights": (_fingerprint("weights_sha256"), ":1: written by another model or tokenizer"),
    "a malformed fingerprint": (_first(weights_sha256="abc"), ":1: 'weights_sha256' is 'abc'; expected a sha256"),
    "too few lines": (_all_but_last, f"{ROWS - 1} responses for {ROWS} test rows"),
    "too long for the context": (_too_long, "longer than the model's context of"),
}


def _refusal(err: str) -> str:
    """The one ``error:`` line of a refused ``--outcomes only`` run: its last line, after any progress lines and
    before any teacher-forced pass (none announced), no traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and sum(x.startswith("error:") for x in lines) == 1, err
    assert "teacher-forced together" not in err and "Traceback" not in err, err
    return lines[-1]


NAMES_BOTH = {"another pair's tokenizer": "tokenizer_sha256", "another model's weights": "weights_sha256"}


@pytest.fixture(scope="module")
def other(planted: PlantedPair, chat_bases: dict[str, Path]) -> dict[str, Any]:
    """Another pair's tokenizer fingerprint, the other model's weights fingerprint, and the pair's context."""
    config = json.loads((planted.sft_dir / "config.json").read_text())
    return {
        "tokenizer_sha256": tokenizer_sha256(load_tokenizer(chat_bases["chatml"])),
        "weights_sha256": weights_sha256(planted.dpo_dir),  # responses_sft.jsonl is the SFT model's
        "context": int(config["max_position_embeddings"]),
    }


@pytest.mark.parametrize("how", ["FILE", "folder"])
@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_every_crafted_responses_file_is_one_error_line_before_any_forward(
    case: str, how: str, planted: PlantedPair, kept: Path, other: dict[str, Any], tmp_path: Path
) -> None:
    craft, needle = CRAFTED[case]
    folder = Path(shutil.copytree(kept, tmp_path / "earlier"))
    path = folder / "responses_sft.jsonl"
    path.write_text(craft(_lines(kept), other))
    code, _, err = cli(
        *_ab_args(
            planted, tmp_path / "only", "--outcomes", "only", "--responses", str(path if how == "FILE" else folder)
        )
    )
    line = _refusal(err)
    assert code == 2 and str(path) in line and needle in line, line
    if case in NAMES_BOTH:  # the file's fingerprint and this run's
        key = NAMES_BOTH[case]
        assert short_sha(other[key]) in line and short_sha(_lines(kept)[0][key]) in line, line
    assert not (tmp_path / "only" / "ab_report.json").exists()


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal comes before any model is read: a load fails the case."""
    from transformers import PreTrainedModel

    def load(*_: object, **__: object) -> None:
        raise AssertionError("a model was loaded before --responses was checked")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(load))


@pytest.mark.parametrize("how", ["FILE", "folder"])
@pytest.mark.parametrize("case", sorted(CRAFTED))
@pytest.mark.usefixtures("no_model_loads")
def test_with_outcomes_on_a_bad_responses_file_is_refused_before_any_model_loads(
    case: str, how: str, planted: PlantedPair, kept: Path, other: dict[str, Any], tmp_path: Path
) -> None:
    """The arms' generation comes before the outcomes (minutes on the real pair): the plan reads the file first."""
    craft, needle = CRAFTED[case]
    folder = Path(shutil.copytree(kept, tmp_path / "earlier"))
    path = folder / "responses_sft.jsonl"
    path.write_text(craft(_lines(kept), other))
    code, _, err = cli(*_ab_args(planted, tmp_path / "ab", "--responses", str(path if how == "FILE" else folder)))
    line = one_error_line(err)
    assert code == 2 and str(path) in line and needle in line, line
    assert not (tmp_path / "ab" / "ab_report.json").exists()


def test_kept_responses_say_who_wrote_them_and_which_rows(planted: PlantedPair, kept: Path) -> None:
    lines = _lines(kept)
    assert [line["row"] for line in lines] == sorted({line["row"] for line in lines}) and len(lines) == ROWS
    tokenizer = load_tokenizer(planted.sft_dir)
    assert {MadeBy.read(line) for line in lines} == {
        MadeBy(weights_sha256(planted.sft_dir), tokenizer_sha256(tokenizer))
    }


def test_a_responses_file_written_before_fingerprints_is_read_with_one_warning(
    planted: PlantedPair, kept: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(kept, tmp_path / "earlier"))
    for model in ("sft", "dpo"):
        path = folder / f"responses_{model}.jsonl"
        bare = [
            {k: v for k, v in line.items() if k in ("row", "token_ids")}
            for line in map(json.loads, path.read_text().splitlines())
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in bare))
    code, _, err = cli(*_ab_args(planted, tmp_path / "only", "--outcomes", "only", "--responses", str(folder)))
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and "Traceback" not in err, err
    assert len([w for w in warnings if "do not say which model and tokenizer wrote them" in w]) == 2, err


# --- the other reused stores -----------------------------------------------------------------------------------------


def test_kept_arms_made_by_another_model_are_made_again_naming_both(
    planted: PlantedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokenizer = load_tokenizer(planted.sft_dir)
    ours = made_by({"dpo": planted.dpo_dir, "sft": planted.sft_dir}, tokenizer, [0, 3, 7])
    cases = {
        "another model": made_by({"dpo": planted.sft_dir, "sft": planted.sft_dir}, tokenizer, [0, 3, 7]),
        "other rows": made_by({"dpo": planted.dpo_dir, "sft": planted.sft_dir}, tokenizer, [0, 3, 8]),
        "an older toolkit (no record of its makers)": None,
    }
    arm = Generations([[5, 6]], ["Ahoy."], seconds=0.5)
    for case, theirs in cases.items():
        out = tmp_path / case
        ArmStore(out, "settings", theirs).put("baseline", arm)
        assert ArmStore(out, "settings", theirs).get("baseline") is not None  # the same makers read it back
        capsys.readouterr()
        assert ArmStore(out, "settings", ours).get("baseline") is None
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and str(out / ".arms") in warnings[0], warnings
        assert "generated again" in warnings[0]
        said = {
            "another model": [short_sha(weights_sha256(planted.dpo_dir)), short_sha(weights_sha256(planted.sft_dir))],
            "other rows": ["other rows (3 kept, 3 here)"],
        }.get(case, ["kept without saying who made them"])
        assert all(text in warnings[0] for text in said), warnings
    # one batch file sealed under this run's settings but saying another model made it
    store = ArmStore(tmp_path / "file", "settings", ours)
    store.put("baseline", arm)
    path = next((tmp_path / "file" / ".arms").glob("baseline*.json"))
    kept = json.loads(path.read_text())
    path.write_text(json.dumps(sealed(kept["body"], store.key, "baseline", cases["another model"])))
    capsys.readouterr()
    assert ArmStore(tmp_path / "file", "settings", ours).get("baseline") is None
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and str(path) in err and "made by another model" in err, err


def test_an_attribution_cache_of_other_models_is_computed_again_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = RunSettings(sft_weights_sha256="a" * 64, dpo_weights_sha256="b" * 64, tokenizer_sha256="c" * 64)
    cases = {
        "another tokenizer": RunSettings(
            sft_weights_sha256="a" * 64, dpo_weights_sha256="b" * 64, tokenizer_sha256="d" * 64
        ),
        "another dpo model": RunSettings(
            sft_weights_sha256="a" * 64, dpo_weights_sha256="e" * 64, tokenizer_sha256="c" * 64
        ),
    }
    path = tmp_path / "attribution_reference_logprob.h5"
    for case, theirs in cases.items():
        with h5py.File(path, "w") as f:
            f.attrs["key"] = "k"
            f.attrs["made_by"] = json.dumps(_made_by(theirs))
        capsys.readouterr()
        assert not _cached(path, "k", _made_by(ours)), case
        err = capsys.readouterr().err
        assert err.count("warning:") == 1 and str(path) in err and "computing it again" in err, err
        differ = "d" * 12 if case == "another tokenizer" else "e" * 12
        assert differ in err and ("c" * 12 if case == "another tokenizer" else "b" * 12) in err, err
    with h5py.File(path, "w") as f:  # the same makers, the same key: used
        f.attrs["key"] = "k"
        f.attrs["made_by"] = json.dumps(_made_by(ours))
    assert _cached(path, "k", _made_by(ours))


@pytest.fixture(scope="module")
def recorded(planted: PlantedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed recording of the planted pair's multi_turn rows with the dpo_on_sft local group."""
    out = tmp_path_factory.mktemp("runs") / "planted"
    config = RecordConfig(
        sft_dir=planted.sft_dir,
        dpo_dir=planted.dpo_dir,
        data_file=planted.data_dir / "test.jsonl",
        capabilities="multi_turn",
        hooks="mlp_post",
        layers="6-7",
        local="dpo_on_sft",
        out_dir=out,
    )
    record_run(config, progress=False)
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def test_a_local_group_of_other_models_is_one_line_naming_both(
    planted: PlantedPair, recorded: Path, tmp_path: Path
) -> None:
    with RunReader(recorded) as run:  # the writer says who made it: DPO's blocks on SFT's inputs
        info = run.model_info("dpo_on_sft")
        assert info["weights_sha256"] == run.model_info("dpo")["weights_sha256"]
        assert info["inputs_weights_sha256"] == run.model_info("sft")["weights_sha256"]
    sft, dpo = weights_sha256(planted.sft_dir), weights_sha256(planted.dpo_dir)
    for attribute, value, recorded_value in (
        ("weights_sha256", sft, dpo),
        ("inputs_weights_sha256", dpo, sft),
        ("tokenizer_sha256", "f" * 64, info["tokenizer_sha256"]),
    ):
        run_dir = _copy(recorded, tmp_path / attribute)
        with h5py.File(run_dir / "activations.h5", "a") as f:
            f["models/dpo_on_sft"].attrs[attribute] = value
        code, _, err = cli("analyze", run_dir, "--no-plots", "--basis", "local")
        line = one_error_line(err)
        assert code == 2 and "the local group dpo_on_sft was made by other models" in line, line
        assert short_sha(value) in line and short_sha(recorded_value) in line, line
    older = _copy(recorded, tmp_path / "older")  # written before local groups said who made them: read as before
    with h5py.File(older / "activations.h5", "a") as f:
        del f["models/dpo_on_sft"]
    with RunReader(older) as run:
        assert run.local_directions("multi_turn", "mlp_post") == ["dpo_on_sft"]


SHORTENED = {
    "one model's dataset": ["activations/dpo/multi_turn/mlp_post"],
    "a local group's dataset": ["activations/dpo_on_sft/multi_turn/mlp_post"],
    "every group and the sample records": [
        "activations/sft/multi_turn/mlp_post",
        "activations/dpo/multi_turn/mlp_post",
        "activations/dpo_on_sft/multi_turn/mlp_post",
        *(f"samples/multi_turn/{name}" for name in ("sample_ids", "tasks", "prompt_lengths", "prompts")),
    ],
}


@pytest.mark.parametrize("case", sorted(SHORTENED))
def test_a_group_shorter_than_its_capability_is_damage_in_one_line(case: str, recorded: Path, tmp_path: Path) -> None:
    run_dir = _copy(recorded, tmp_path)
    with RunReader(run_dir) as run:
        rows = run.n_samples("multi_turn")
    with h5py.File(run_dir / "activations.h5", "a") as f:
        for name in SHORTENED[case]:
            f[name].resize(rows - 1, axis=0)
    code, _, err = cli("analyze", run_dir, "--no-plots")
    line = one_error_line(err)
    assert code == 2 and "the recording of multi_turn is damaged" in line, line
    assert f"holds {rows - 1} rows, but multi_turn has {rows}" in line, line
    if case.startswith("every"):
        assert "its rows in the data file (capability_rows)" in line, line


def test_report_on_a_run_with_an_outcomes_only_ab_uses_its_outcomes_and_names_what_it_lacks(
    planted: PlantedPair, recorded: Path, kept: Path, tmp_path: Path
) -> None:
    run_dir = _copy(recorded, tmp_path)
    only = run_dir / "interventions" / "multi_turn_dpo_only"
    config = ABConfig(
        model_dir=planted.dpo_dir,
        source_dir=planted.sft_dir,
        data_file=planted.data_dir / "test.jsonl",
        units=",".join(f"{layer}:{unit}" for layer, unit in planted.units),
        hook=planted.hook,
        edits="patch",
        capability="multi_turn",
        placebo=0,
        limit=ROWS,
        generation=GenerationConfig(max_new_tokens=4),
        n_bootstrap=100,
        outcomes="only",
        responses=str(kept),
        out_dir=only,
    )
    run_ab(plan_ab(config))
    code, _, err = cli("report", run_dir)
    assert code == 0 and "Traceback" not in err, err
    page = (run_dir / "report.html").read_text()
    assert "compliance of the arms in multi_turn_dpo_only" in page and "--outcomes only run" in page
    assert "gap closed" in page  # its continuous outcomes are shown


@pytest.mark.parametrize("source", ["reference rows", "DPO pairs", "attribution's teacher forcing"])
def test_a_teacher_forced_sequence_longer_than_the_context_is_refused_naming_its_file_and_line(
    source: str, planted: PlantedPair
) -> None:
    """Class 3 beyond ``--responses``: every teacher-forced sequence is held to the model's context before a forward."""
    from core.errors import ProbeError
    from core.rows import read_test_rows
    from probes.outcome_rows import ResponseChecks, capability_pairs, outcome_rows
    from probes.responses import teacher_forced

    tokenizer = load_tokenizer(planted.sft_dir)
    test, dpo = planted.data_dir / "test.jsonl", planted.data_dir / "dpo.jsonl"
    rows = read_test_rows(test)[:2]
    calls = {
        "reference rows": lambda: outcome_rows(
            tokenizer, rows, "reference", data_file=test, checks=ResponseChecks(context=8)
        ),
        "DPO pairs": lambda: capability_pairs(tokenizer, dpo, "multi_turn", limit=2, context=8),
        "attribution's teacher forcing": lambda: teacher_forced(
            tokenizer, rows[0].question, rows[0].reference, lambda: f"{test}:1", context=8
        ),
    }
    with pytest.raises(ProbeError) as refused:
        calls[source]()
    message = str(refused.value)
    named = dpo if source == "DPO pairs" else test
    assert f"{named}:" in message and "longer than the model's context of 8 tokens" in message, message
