"""The commands that read run files, against hostile paths and files: outputs onto inputs, link schemes, malformed
records.

* Every file a command reads, given as its ``--out`` directly, through a symbolic link or through a hard link, is
  refused in one ``error:`` line and left byte for byte. The report's read set is observed, not restated: the files
  Python opens while a report is written (an audit hook), the HDF5 files of the run and the model directories it
  fingerprints.
* Every ``href``/``src`` of a written report is a relative path with no scheme and no host, whatever the run
  directory is called (``javascript:…``, ``data:…``, ``//host``, ``\\\\host``, any unicode).
* Generated mutations of a valid ``eval.json`` and ``replicate.json`` (wrong types, missing keys, lists for objects,
  text for numbers, huge numbers, NaN) give a report that names the file under "what this run lacks", never a
  traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from analysis import AnalysisConfig, analyze_run
from core.records import to_json
from study.gather import gather_study
from study.page import Page, relative_href
from study.report_html import render
from tests.support.cli import exit_of, one_line_error
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run
from tests.test_report_html import ab_report, evaluation

SPEC = SyntheticSpec(n_samples=12, n_layers=6, width=6, capabilities=("multi_turn",))
LINKS = ("direct", "symlink", "hardlink")


def _replicate_record(run: Path) -> dict[str, Any]:
    stages = [
        {"name": name, "what": name, "status": "done", "estimate_s": 60.0, "seconds": 42.0}
        for name in ("record", "analyze", "explain", "intervene", "evaluate")
    ]
    return {
        "format": "rolemrc-probe/replicate",
        "version": 1,
        "command": f"probe replicate --pair tiny --out {run}",
        "started": "2026-01-01T00:00:00+0000",
        "options": {"limit": 48},
        "sft_dir": "sft",
        "dpo_dir": "dpo",
        "base_dir": None,
        "data_file": "test.jsonl",
        "stages": [*stages, {"name": "report", "what": "report.html", "status": "running", "estimate_s": 5.0}],
    }


def _model_dir(path: Path, seed: int) -> Path:
    """A model directory as far as the report reads one: its config and a tensor file it fingerprints."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": np.random.default_rng(seed).standard_normal((3, 3)).astype(np.float32)}, path / "model.safetensors")
    return path


@pytest.fixture(scope="module", autouse=True)
def probe_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The weights-fingerprint cache goes to a temporary $PROBE_HOME."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROBE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded, analysed run whose models exist, with an A/B report, an evaluation and a replicate record."""
    root = tmp_path_factory.mktemp("reads")
    run = root / "run"
    write_synthetic_run(run, SPEC)
    with h5py.File(run / "activations.h5", "a") as f:
        for role, seed in (("sft", 1), ("dpo", 2)):
            f[f"models/{role}"].attrs["model_dir"] = str(_model_dir(root / role, seed))
    analyze_run(run, AnalysisConfig(stability_resamples=0), png=False)
    (run / "interventions" / "ab").mkdir(parents=True)
    (run / "interventions" / "ab" / "ab_report.json").write_text(json.dumps(to_json(ab_report())))
    (run / "eval.json").write_text(json.dumps(evaluation()))
    (run / "replicate.json").write_text(json.dumps(_replicate_record(run)))
    return run


def _opened_by(action: Callable[[], object], under: Path) -> set[Path]:
    """The regular files below ``under`` that Python opens while ``action`` runs (sys.addaudithook; never removed, so
    it records only while ``recording`` holds a list)."""
    seen: list[Path] = []
    _RECORDING.append(seen)
    try:
        action()
    finally:
        _RECORDING.remove(seen)
    root = under.resolve()
    return {p.resolve() for p in seen if p.resolve().is_relative_to(root) and p.resolve().is_file()}


_RECORDING: list[list[Path]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _RECORDING and isinstance(args[0], (str, bytes, os.PathLike)):
        _RECORDING[-1].append(Path(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def report_reads(full_run: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every file the report reads: what Python opens, the run's HDF5 files (h5py opens them in C) and the model
    directories' files (fingerprinted in Rust)."""
    from study.report_html import write_report

    elsewhere = tmp_path_factory.mktemp("elsewhere") / "r.html"
    opened = _opened_by(lambda: write_report(full_run, elsewhere), full_run.parent)
    models = {p.resolve() for role in ("sft", "dpo") for p in (full_run.parent / role).iterdir()}
    reads = sorted(opened | {p.resolve() for p in full_run.rglob("*.h5")} | models)
    assert {"activations.h5", "summary.json", "eval.json", "replicate.json", "ab_report.json"} <= {
        p.name for p in reads
    }
    return reads


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reached(target: Path, how: str, where: Path) -> Path:
    """``target`` itself, or a new symbolic or hard link to it in ``where``."""
    if how == "direct":
        return target
    link = where / f"{how}-{len(list(where.iterdir()))}-{target.name}"
    if how == "symlink":
        link.symlink_to(target)
    else:
        os.link(target, link)
    return link


@pytest.mark.parametrize("how", LINKS)
def test_report_out_onto_any_file_it_reads_is_refused_and_the_file_kept(
    how: str, full_run: Path, report_reads: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for target in report_reads:
        before = _digest(target)
        out = _reached(target, how, tmp_path)
        line = one_line_error(capsys, ["report", str(full_run), "--out", str(out)], f"--out {out}: ")
        # a file of the run is refused as such first (tests/test_hostile_outputs.py); a model file as an input
        assert "is the same file as" in line or "not an output of probe report" in line, line
        assert _digest(target) == before, target
    code, _, err = exit_of(["report", str(full_run), "--out", str(tmp_path / "fine.html")], capsys)
    assert code == 0 and (tmp_path / "fine.html").is_file(), err


def _command_reads(name: str, run: Path) -> tuple[list[str], list[Path]]:
    """(argv before --out, the files it reads) of each other command that reads run files or models."""
    models = [p for role in ("sft", "dpo") for p in sorted((run.parent / role).iterdir())]
    pair = ["--sft", str(run.parent / "sft"), "--dpo", str(run.parent / "dpo")]
    neurons = run / "analysis" / "neurons_multi_turn_mlp_out.json"
    data = run.parent / "test.jsonl"
    if not data.exists():
        data.write_text("{}\n")
    return {
        "analyze": (["analyze", str(run), "--no-plots"], [run / "activations.h5"]),
        "explain": (
            ["explain", str(run), "-c", "multi_turn", *pair],
            [run / "activations.h5", run / "analysis" / "summary.json", *models],
        ),
        "replicate": (["replicate", *pair, "--data", str(data)], [data, *models]),
        "intervene": (
            [
                "intervene",
                str(run),
                "--neurons",
                str(neurons),
                "--data",
                str(data),
                "--model-dir",
                str(run.parent / "dpo"),
            ],
            [neurons, run / "activations.h5", data, *models[2:]],
        ),
        "lmeval": (
            ["lmeval", "--tasks", "arc_easy", "--model-dir", str(run.parent / "dpo"), "--neurons", str(neurons)],
            [neurons, *models[2:]],
        ),
    }[name]


@pytest.mark.parametrize("how", LINKS)
@pytest.mark.parametrize("command", ["analyze", "explain", "replicate", "lmeval", "intervene"])
def test_out_onto_any_file_a_command_reads_is_refused_and_the_file_kept(
    command: str, how: str, full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, reads = _command_reads(command, full_run)
    for target in reads:
        before = _digest(target)
        out = _reached(target, how, tmp_path)
        one_line_error(capsys, [*argv, "--out", str(out)], "is the same file as")
        assert _digest(target) == before, target


@pytest.mark.parametrize("command", ["replicate", "lmeval", "intervene"])
def test_a_file_a_command_writes_into_its_out_that_is_an_input_is_refused(
    command: str, full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out D`` where D/eval.json (D/lmeval_report.json, D/ab_report.json) is a link to the --data (--neurons)
    file."""
    argv, reads = _command_reads(command, full_run)
    name = {"replicate": "eval.json", "lmeval": "lmeval_report.json", "intervene": "ab_report.json"}[command]
    (tmp_path / name).symlink_to(reads[0])
    before = _digest(reads[0])
    one_line_error(capsys, [*argv, "--out", str(tmp_path)], f"its file {name} is the same file as")
    assert _digest(reads[0]) == before


# --- links -----------------------------------------------------------------------------------------------------------

HOSTILE_STARTS = ("javascript:", "JaVaScRiPt:", " javascript:", "\tjava\nscript:", "data:", "vbscript:", "\\\\", "\\/")
characters = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
folder_names = st.builds(  # one folder: no "/" (so "//host" is only a path, below)
    lambda start, rest: (start + rest)[:60],
    st.sampled_from(("", *HOSTILE_STARTS)),
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), max_size=30),
).filter(lambda name: name not in ("", ".", "..") and "/" not in name)
relative_paths = st.builds(
    lambda start, rest: start + rest, st.sampled_from(("", "//", "/", *HOSTILE_STARTS)), st.text(characters)
)


class _Links(HTMLParser):
    """Every URL-valued attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, _tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("href", "src", "action", "formaction", "srcdoc", "xlink:href")]


def _links(page: str) -> list[str]:
    parser = _Links()
    parser.feed(page)
    return parser.urls


def _relative_without_scheme(url: str) -> bool:
    """A link that stays on the page (``#id``) or goes to a relative path: no scheme, no host, nothing a browser
    strips or turns into one."""
    parts = urlsplit(url)
    return (
        not parts.scheme
        and not parts.netloc
        and not url.startswith(("/", "\\"))
        and url == url.strip()
        and not any(c in url for c in "\t\n\r\\:")
    )


@settings(max_examples=300, deadline=None)
@given(relative=relative_paths)
def test_any_relative_path_becomes_an_href_without_scheme_or_host(relative: str) -> None:
    href = relative_href(relative)
    assert _relative_without_scheme(href), href
    assert unquote(href).lstrip("./") == relative.lstrip("./")


@settings(max_examples=200, deadline=None)
@given(name=folder_names)
def test_a_link_to_a_file_is_relative_and_scheme_less_whatever_the_folder_is_called(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.getbasetemp() / "links"
    plot = root / name / "analysis" / "plots" / "x.html"
    assert plot.parents[3] == root  # the name is one folder below root, never a path of its own
    plot.parent.mkdir(parents=True, exist_ok=True)
    plot.touch()
    [url] = _links(Page(root).link(plot))
    assert _relative_without_scheme(url), url
    assert (root / unquote(url)).resolve() == plot.resolve()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=folder_names)
def test_every_link_of_a_report_written_beside_a_hostile_run_name_is_relative(name: str, full_run: Path) -> None:
    """The issue's case: a run directory named ``javascript:…``, reported into its parent."""
    from study.report_html import write_report

    hostile = full_run.parent / name
    assert hostile.parent == full_run.parent
    os.rename(full_run, hostile)
    try:
        path, _ = write_report(hostile, full_run.parent / "shared.html")
    finally:
        os.rename(hostile, full_run)
    urls = _links(path.read_text(encoding="utf-8"))
    files = [u for u in urls if not u.startswith("#")]
    assert files and all(_relative_without_scheme(u) for u in urls), urls
    assert all(unquote(u).startswith(name) for u in files)


# --- malformed records -----------------------------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, "abc", "", [], [1], {}, {"a": 1}, 10**30, -(10**30), 10**400, 1e308, -1, "NaN"]),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value (keys and list indices from the top)."""
    yield at
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        yield from _paths(child, (*at, key))


@st.composite
def mutated(draw: st.DrawFn, body: dict[str, Any]) -> Any:
    """``body`` with one to three places replaced by a hostile value or, for an object's key, removed."""
    value: Any = json.loads(json.dumps(body))
    for _ in range(draw(st.integers(1, 3))):
        places = list(_paths(value))
        place = draw(st.sampled_from(places))
        if not place:
            value = draw(HOSTILE_VALUES)
            continue
        holder = value
        for key in place[:-1]:
            holder = holder[key]
        if isinstance(holder, dict) and draw(st.booleans()):
            del holder[place[-1]]
        else:
            holder[place[-1]] = draw(HOSTILE_VALUES)
    return value


@pytest.fixture(scope="module")
def mutable_run(full_run: Path) -> Path:
    return Path(shutil.copytree(full_run, full_run.parent / "mutable"))


def _report_survives(run: Path, bodies: dict[Path, Any]) -> None:
    """The study of ``run`` with each file of ``bodies`` holding its body gathers and renders; each file it refused is
    named as missing, and each it read is read."""
    for file, body in bodies.items():
        file.write_text(json.dumps(body, allow_nan=True))
    study = gather_study(run)
    render(study)
    for file, body in bodies.items():
        refused = [m for m in study.missing if str(file) in m.why]
        read = study.evaluation if file.name == "eval.json" else study.replicate
        assert (read is None) == bool(refused), (file.name, study.missing, read)
        event(f"{file.name} {'refused' if refused else 'read'}")
        if not isinstance(body, dict):
            assert refused, file.name


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_evaluation_or_replicate_record_is_read_or_named_never_a_traceback(
    data: st.DataObject, mutable_run: Path
) -> None:
    """Each example mutates both records, each checked on its own: 24 mutations of each (40 examples of one record
    each made about 20), one gathering and page per example."""
    _report_survives(
        mutable_run,
        {
            mutable_run / "eval.json": data.draw(mutated(evaluation())),
            mutable_run / "replicate.json": data.draw(mutated(_replicate_record(mutable_run))),
        },
    )


@pytest.mark.parametrize(
    ("file", "change", "needle"),
    [
        ("replicate.json", {"stages": [1]}, "stages[0]: expected an object, got 1"),
        ("eval.json", {"sft": "x"}, "sft: expected an object, got 'x'"),
        ("eval.json", {"table": [{**evaluation()["table"][1], "sft_rate": "abc"}]}, "table[0].sft_rate"),
        ("eval.json", {"task_counts": [116]}, "task_counts: expected an object"),
        ("eval.json", {"table": [{**evaluation()["table"][1], "delta": 10**400}]}, "float's range"),
    ],
)
def test_the_issues_malformed_records_are_named_under_what_the_run_lacks(
    file: str, change: dict[str, Any], needle: str, mutable_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    valid = evaluation() if file == "eval.json" else _replicate_record(mutable_run)
    (mutable_run / file).write_text(json.dumps({**valid, **change}))
    code, out, err = exit_of(["report", str(mutable_run), "--out", str(mutable_run.parent / "m.html")], capsys)
    (mutable_run / file).write_text(json.dumps(valid))
    assert code == 0 and not err.strip(), err
    named = [line for line in out.splitlines() if line.startswith("missing: ") and f"{mutable_run / file}: " in line]
    assert len(named) == 1 and "not a valid" in named[0] and needle in named[0], out


# --- the smaller items -----------------------------------------------------------------------------------------------


def test_the_stage_table_shows_the_report_stage_as_this_page_not_running(full_run: Path, tmp_path: Path) -> None:
    from study.report_html import write_report

    path, _ = write_report(full_run, tmp_path / "r.html")
    table = path.read_text(encoding="utf-8").split('<section id="reproduce">', 1)[1].split("</section>", 1)[0]
    assert "<td>report</td><td>this page</td>" in table and "running" not in table


@pytest.fixture(scope="module")
def two_capability_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """multi_turn and nested recorded; only multi_turn analysed."""
    run = tmp_path_factory.mktemp("two") / "run"
    write_synthetic_run(run, SyntheticSpec(n_samples=12, n_layers=6, width=6, capabilities=("multi_turn", "nested")))
    analyze_run(run, AnalysisConfig(stability_resamples=0), capabilities=["multi_turn"], plots=False)
    return run


def test_explain_of_a_capability_the_run_lacks_says_to_record_it_first(
    full_run: Path, two_capability_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_line_error(capsys, ["explain", str(full_run), "-c", "nested"], "not recorded in this run")
    assert f"probe run -c nested --out {full_run}" in line and "then run `probe analyze" in line
    line = one_line_error(capsys, ["explain", str(two_capability_run), "-c", "nested"], "not analysed in this run")
    assert f"`probe analyze {two_capability_run} -c nested`" in line and "probe run" not in line


def test_after_the_model_home_moved_the_report_names_the_models_where_they_are_now(
    full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run recorded from a default pair built in one $PROBE_HOME, reported after that home was moved."""
    old, new = tmp_path / "old-home", tmp_path / "new-home"
    build = old / "pair-tiny"
    run = Path(shutil.copytree(full_run, tmp_path / "run"))
    (run / "eval.json").unlink()
    for role in ("sft", "dpo"):
        shutil.copytree(full_run.parent / role, build / role)
    (build / "COMPLETE.json").write_text("{}")
    with h5py.File(run / "activations.h5", "a") as f:
        for role in ("sft", "dpo"):
            f[f"models/{role}"].attrs["model_dir"] = str(build / role)
    shutil.move(old, new)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROBE_HOME", str(new))
        code, out, err = exit_of(["report", str(run), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    command = next(line for line in out.splitlines() if line.startswith("missing: an evaluation"))
    assert f"--sft {new / 'pair-tiny' / 'sft'} --dpo {new / 'pair-tiny' / 'dpo'}" in command, command
    assert str(old) not in out.replace("\n", "")
