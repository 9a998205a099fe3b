"""No command's output overwrites a file of a run (issue 53, class 1): every output option × every place of a run.

One typo, ``probe report RUN --out RUN/run.json``, used to replace the run record with an HTML page and
leave the run unusable; the same held for every other file of a run and every command with an output
option. The cases are generated: each output option of each command (found from the CLI: the test
below fails when a command gains one this list lacks) is given each file and folder of one real run
(a tiny ``probe replicate``, with the kinds of file a finished replicate leaves none of put in beside).
Every path a command does not write itself must be one ``error:`` line, exit status 2, naming the
option and the path, with no traceback, before any model is loaded, and with every file of the run as
it was (size, modification time and inode after each case; the bytes of the whole run at the end). Any
model load during a case fails it.
The paths a command does write (its own earlier output: a rerun replaces it) pass the check.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.paths import check_output_dir, check_output_file
from core.run_dir import (
    RESULTS_FOLDERS,
    DictionaryDir,
    InterventionDir,
    LMEvalDir,
    LocalizeDir,
    RunDir,
    Writer,
    results_place,
)
from probe_cli.main import app as PROBE
from tests.support.cli import exit_of, one_line_error

# the localize stage left out: its folder is one of the kinds put in beside (LOCALIZE), and it would add 20 s
REPLICATE = [
    *("--limit", "2", "--placebo", "2", "--max-new-tokens", "4", "--eval-rows", "6", "--explain-top", "2"),
    "--no-localize",
]
AB = "interventions/multi_turn_dpo_replicate"
LMEVAL = "lmeval/20250101-000000"
DICTIONARY = "dictionary"
# one kind's files, an earlier layout's (kept in folders written before 2026-11-30) and the store
_DICTIONARY_DIR = DictionaryDir("")
DICTIONARY_FILES = [
    *(name("crosscoder").name for name in (_DICTIONARY_DIR.summary, _DICTIONARY_DIR.latents, _DICTIONARY_DIR.page)),
    _DICTIONARY_DIR.weights("crosscoder").name,
    *DictionaryDir.LEGACY,
    _DICTIONARY_DIR.store_manifest.as_posix(),
]
LOCALIZE = "localize/multi_turn_mlp_out_20250101-000000"
LOCALIZE_FILES = [p.name for p in (LocalizeDir("").report, LocalizeDir("").page)]
# the kinds of file a finished tiny replicate leaves none of, each with the file of the same kind it is copied from,
# or None for a stub where the run has none to copy (the check reads names and which files a folder holds, never what
# a file says)
LMEVAL_FILES = [p.name for p in (LMEvalDir("").report, LMEvalDir("").markdown, LMEvalDir("").items)]
ADDED = {
    "journal/multi_turn/000000000.npz": None,
    ".consolidate/activations.h5": "activations.h5",
    "attribution_dpo_margin.h5": "analysis/maps_topk_count.h5",
    "analysis/maps_topk_count_sft_minus_base.h5": "analysis/maps_topk_count.h5",
    "analysis/local/summary.json": "analysis/summary.json",
    "analysis/local/maps_topk_count.h5": "analysis/maps_topk_count.h5",
    "analysis/top5/summary.json": "analysis/summary.json",
    "analysis/top5/neurons_multi_turn_mlp_out.json": "analysis/neurons_multi_turn_mlp_out.json",
    f"{AB}/.arms/baseline.npz": None,
    **{f"{folder}/{name}": None for folder in (AB, LMEVAL) for name in LMEVAL_FILES},
    # a probe dictionary folder kept in the run (a name the run's layout does not know: a results folder of its own)
    **{f"{DICTIONARY}/{name}": None for name in DICTIONARY_FILES},
    **{f"{LOCALIZE}/{name}": None for name in LOCALIZE_FILES},
}
# what each output option writes itself, as places of the run above: a rerun replaces them, so they pass
OWN: dict[str, set[str]] = {
    "report --out": {"report.html"},
    "models eval --out": {"eval.json"},
    "judge --verdicts-out": set(),
    "analyze --out": {"analysis", "analysis/local", "analysis/top5", "analysis/plots"},
    "explain --out": {"analysis", "analysis/local", "analysis/top5", "analysis/plots"},
    "intervene --out": {AB, "interventions", f"{AB}/.arms"},
    "lmeval --out": {AB, LMEVAL, "lmeval"},
    "replicate --out": {""},
    "run --out": {"", "journal", "journal/multi_turn", ".consolidate"},
    "synthesize --out": set(),
    "synthesize --cache-dir": set(),
    "judge --cache-dir": set(),
    "train sft --out": set(),
    "train dpo --out": set(),
    "models default --home": set(),
    "models fetch-base --home": set(),
    "dictionary --out": {DICTIONARY, f"{DICTIONARY}/store"},
    "localize --out": {LOCALIZE, "localize"},
}
FILE_OPTIONS = ("report --out", "models eval --out", "judge --verdicts-out")
WRITERS = {
    "report --out": Writer.REPORT,
    "models eval --out": Writer.EVAL,
    "judge --verdicts-out": Writer.JUDGE,
    "analyze --out": Writer.ANALYZE,
    "explain --out": Writer.EXPLAIN,
    "intervene --out": Writer.INTERVENE,
    "lmeval --out": Writer.LMEVAL,
    "replicate --out": Writer.REPLICATE,
    "run --out": Writer.RUN,
    "synthesize --out": Writer.SYNTHESIZE,
    "synthesize --cache-dir": Writer.SYNTHESIZE,
    "judge --cache-dir": Writer.JUDGE,
    "train sft --out": Writer.TRAIN,
    "train dpo --out": Writer.TRAIN,
    "models default --home": Writer.MODELS,
    "models fetch-base --home": Writer.MODELS,
    "dictionary --out": Writer.DICTIONARY,
    "localize --out": Writer.LOCALIZE,
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stats(root: Path) -> dict[str, tuple[int, int, int] | None]:
    """Every path under ``root`` (links not followed), a file with its size, modification time and inode (a folder's
    own time changes when the check tries it for writing with a temporary file)."""
    out: dict[str, tuple[int, int, int] | None] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[path.relative_to(root).as_posix()] = None if path.is_dir() else (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(
    tiny_pair: tuple[Path, Path], tiny_model_dir: Path, chat_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """A real tiny replicate run (record, analyze, explain, intervene, evaluate, report), the kinds it
    leaves none of added (``ADDED``), and the inputs the commands' other options read."""
    root = tmp_path_factory.mktemp("hostile_outputs")
    run = root / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROBE_HOME", str(root / "home"))  # the weights-fingerprint cache
        patch.setenv("OMP_NUM_THREADS", "1")
        code, _, err = _probe_quiet(
            [
                "replicate",
                *("--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--base", str(tiny_model_dir)),
                *("--data", str(chat_data / "test.jsonl"), "--out", str(run), *REPLICATE),
            ]
        )
        assert code == 0, err[-3000:]
        for name, source in ADDED.items():
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            if source is None:
                (run / name).write_bytes(b"stub " + name.encode())
            else:
                shutil.copyfile(run / source, run / name)
        responses = root / "responses.jsonl"
        responses.write_text(json.dumps("North.") + "\n", encoding="utf-8")
        (root / "hashes.json").write_text(json.dumps(_hashes(run)))
        yield {
            "root": root,
            "run": run,
            "sft": tiny_pair[0],
            "dpo": tiny_pair[1],
            "data": chat_data,
            "test": chat_data / "test.jsonl",
            "responses": responses,
            "hashes": root / "hashes.json",
        }


@pytest.fixture(scope="module", autouse=True)
def one_command_tree() -> Iterator[None]:
    """The ``probe`` command tree built once for the module rather than once per call (typer builds it on every
    ``main``: most of a refused call's 80 ms); the calls go through :func:`probe_cli.main.main` as a shell's do."""
    import typer.main

    import probe_cli.main

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(probe_cli.main, "app", typer.main.get_command(probe_cli.main.app))
        yield


def _probe_quiet(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    from probe_cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0), out.getvalue(), err.getvalue()


def _argv(option: str, target: Path, w: dict[str, Path]) -> list[str]:
    """``probe`` arguments that give ``option`` the path ``target`` and every other option a valid value."""
    run, sft, dpo, test, data = (str(w[k]) for k in ("run", "sft", "dpo", "test", "data"))
    llm = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    fresh = str(w["root"] / "fresh" / f"{time.monotonic_ns()}")
    judge = ["judge", "--data", test, "--responses", str(w["responses"])]
    return {
        "report --out": ["report", run, "--out", str(target)],
        "models eval --out": ["models", "eval", "--sft", sft, "--dpo", dpo, "--test", test, "--out", str(target)],
        "judge --verdicts-out": [*judge, "--verdicts-out", str(target)],
        "analyze --out": ["analyze", run, "--no-plots", "--out", str(target)],
        "explain --out": ["explain", run, "-c", "multi_turn", "--out", str(target)],
        "intervene --out": ["intervene", run, "--units", "0:1", "--out", str(target)],
        "lmeval --out": ["lmeval", run, "--units", "0:1", "--out", str(target)],
        "replicate --out": ["replicate", "--sft", sft, "--dpo", dpo, "--data", test, "--out", str(target)],
        "run --out": ["run", "-c", "multi_turn", "--sft", sft, "--dpo", dpo, "--data", test, "--out", str(target)],
        "synthesize --out": ["synthesize", "--roles", "2", "--out", str(target)],
        "synthesize --cache-dir": ["synthesize", "--backend", "llm", *llm, "--out", fresh, "--cache-dir", str(target)],
        "judge --cache-dir": [*judge, "--judge", "llm", *llm, "--cache-dir", str(target)],
        "train sft --out": ["train", "sft", "--base", "tiny", "--data", data, "--out", str(target)],
        "train dpo --out": ["train", "dpo", "--sft", sft, "--data", data, "--out", str(target)],
        "models default --home": ["models", "default", "--home", str(target)],
        "models fetch-base --home": ["models", "fetch-base", "--home", str(target)],
        "dictionary --out": ["dictionary", "--sft", sft, "--dpo", dpo, "--out", str(target)],
        "localize --out": ["localize", run, "-c", "multi_turn", "--hook", "mlp_out", "--out", str(target)],
    }[option]


def _place(path: Path) -> tuple[str, str | None, bool, bool, bool]:
    """What the layout says ``path`` is: the kind of its folder, its place there, whether it is below that place,
    whether it is a results folder found by its own files, and whether it is a folder."""
    found = results_place(path)
    assert found is not None, f"{path}: a path of the run the layout does not know"
    place = found.place.name if found.place is not None else None
    return found.kind.name, place, found.inside, found.folder == found.found, path.is_dir()


# the places, listed once from the layout as the fixture will hold it (checked against the real run below)
FILES = sorted(
    {
        "run.json", "activations.h5", ".lock", "eval.json", "replicate.json", "report.html",
        "attribution_dpo_margin.h5", "journal/multi_turn/000000000.npz", ".consolidate/activations.h5",
        "analysis/summary.json", "analysis/maps_topk_count.h5", "analysis/neurons_multi_turn_mlp_out.json",
        "analysis/plots/multi_turn_mlp_out_topk_count_maps.html", "analysis/weight_change.h5",
        "analysis/explain_multi_turn_mlp_out.json", "analysis/explain_multi_turn_mlp_out.html",
        "analysis/local/summary.json", "analysis/top5/neurons_multi_turn_mlp_out.json",
        f"{AB}/ab_report.json", f"{AB}/ab_report.md", f"{AB}/generations.jsonl", f"{AB}/responses_dpo.jsonl",
        f"{AB}/.arms/baseline.npz", *(f"{folder}/{name}" for folder in (AB, LMEVAL) for name in LMEVAL_FILES),
        *(f"{DICTIONARY}/{name}" for name in DICTIONARY_FILES),
        *(f"{LOCALIZE}/{name}" for name in LOCALIZE_FILES),
    }
)  # fmt: skip
FOLDERS = ["", "analysis", "analysis/plots", "analysis/local", "analysis/top5", "interventions", AB, f"{AB}/.arms",
           "journal", "journal/multi_turn", ".consolidate", "lmeval", LMEVAL, DICTIONARY,
           f"{DICTIONARY}/store", "localize", LOCALIZE]  # fmt: skip
# a folder option given a file: one of each kind of folder, and one inside a folder's tree (the same check as the rest)
FILES_FOR_FOLDERS = ["run.json", "analysis/summary.json", "analysis/plots/multi_turn_mlp_out_topk_count_maps.html",
                     f"{AB}/generations.jsonl", f"{LMEVAL}/lmeval_items.jsonl",
                     f"{DICTIONARY}/latents_crosscoder.json", f"{LOCALIZE}/localize.json"]  # fmt: skip
CASES = [
    (option, target)
    for option in OWN
    for target in (FILES if option in FILE_OPTIONS else [*FOLDERS, *FILES_FOR_FOLDERS])
    if target not in OWN[option]
]


def test_the_options_are_every_output_option_of_the_cli() -> None:
    """Every option of every command that names a path the command writes is in ``OWN`` (a new one must be
    added, with its check): found from the CLI by name."""
    import typer.main

    found = set()
    stack = [([], typer.main.get_command(PROBE))]
    while stack:
        prefix, command = stack.pop()
        for name, sub in getattr(command, "commands", {}).items():
            stack.append(([*prefix, name], sub))
        for param in getattr(command, "params", []) if not hasattr(command, "commands") else []:
            for opt in getattr(param, "opts", []):
                if opt in ("--out", "--verdicts-out", "--cache-dir", "--home"):
                    found.add(f"{' '.join(prefix)} {opt}")
    assert found == set(OWN)


def test_every_file_and_folder_of_the_run_is_a_place_and_every_place_has_a_case(world: dict[str, Path]) -> None:
    run = world["run"]
    assert all((run / f).is_file() for f in FILES) and all((run / f).is_dir() for f in FOLDERS)
    every = {_place(path) for path in [run, *run.rglob("*")]}  # a path the layout does not know fails here
    assert every == {_place(run / f) for f in [*FILES, *FOLDERS]}
    assert {kind for kind, *_ in every} == {kind.name for kind in RESULTS_FOLDERS.values()}


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal comes before any model is read: a load fails the case."""
    from transformers import PreTrainedModel

    def load(*_: object, **__: object) -> None:
        raise AssertionError("a model was loaded before the output path was checked")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(load))


@pytest.mark.parametrize("option,target", CASES, ids=[f"{o}={t or 'RUN'}" for o, t in CASES])
@pytest.mark.usefixtures("no_model_loads")
def test_an_output_at_another_commands_place_is_one_line_and_changes_nothing(
    world: dict[str, Path], option: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = world["run"]
    path = run / target if target else run
    before, sha = _stats(run), _sha(path) if path.is_file() else None
    flag = option.split()[-1]
    line = one_line_error(capsys, _argv(option, path, world), flag, str(path))
    assert "Traceback" not in line
    assert _stats(run) == before and (sha is None or _sha(path) == sha)


@pytest.mark.parametrize("option", list(OWN))
def test_a_commands_own_earlier_output_passes_the_check(world: dict[str, Path], option: str) -> None:
    """A rerun replaces its own output: the check lets each command write its own places of the run."""
    check: Callable[..., Path] = check_output_file if option in FILE_OPTIONS else check_output_dir
    for target in OWN[option]:
        path = world["run"] / target if target else world["run"]
        assert check(path, option.split()[-1], writer=WRITERS[option]) == path


def test_out_equal_to_responses_does_not_replace_that_folders_ab_report(
    world: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--outcomes only --responses AB --out AB`` would replace the A/B report it reads its responses beside."""
    ab = world["run"] / AB
    before = _stats(world["run"])
    for responses in (ab, InterventionDir(ab).responses("dpo")):
        argv = ["intervene", str(world["run"]), "--units", "0:1", "--outcomes", "only", "--responses", str(responses)]
        one_line_error(capsys, [*argv, "--out", str(ab)], f"--out {ab}: ", "--responses")
    assert _stats(world["run"]) == before


def test_a_folder_replaced_whole_must_hold_no_results_folder(
    world: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``probe train --overwrite`` replaces its ``--out`` whole: a folder that holds a run, however deep, is refused."""
    parent = world["root"]
    before = _stats(world["run"])
    argv = ["train", "sft", "--base", "tiny", "--data", str(world["data"]), "--out", str(parent), "--overwrite"]
    one_line_error(capsys, argv, f"--out {parent}: holds the results folder {parent}/")
    assert _stats(world["run"]) == before


def test_a_name_the_layout_does_not_know_is_the_users_and_passes(world: dict[str, Path]) -> None:
    """A file of the user's own in a run folder is not a file of the run: a command may write it when named."""
    for where in ("notes.html", "analysis/mine/report.html", f"{LMEVAL}/../other/report.html"):
        assert results_place(world["run"] / where) is None
        check_output_file(world["run"] / where, "--out", writer=Writer.REPORT)


def test_a_rerun_of_report_replaces_its_own_report(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same command again, on a copy of the run: exit 0, the report made again, nothing else touched."""
    run = Path(shutil.copytree(world["run"], tmp_path / "run", symlinks=True))
    report = RunDir(run).report_file
    before = {k: v for k, v in _stats(run).items() if k != report.name}
    old = report.stat().st_mtime_ns
    code, _, err = exit_of(["report", str(run), "--out", str(report)], capsys)
    assert code == 0, err
    assert report.stat().st_mtime_ns != old and {k: v for k, v in _stats(run).items() if k != report.name} == before


def test_the_run_is_byte_identical_after_every_case(world: dict[str, Path]) -> None:
    assert _hashes(world["run"]) == json.loads(world["hashes"].read_text())
    assert LMEvalDir(world["run"] / LMEVAL).report.read_bytes().startswith(b"stub ")
