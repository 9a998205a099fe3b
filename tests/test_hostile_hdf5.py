"""Every HDF5 file the toolkit writes, on a real full disk, and every one it reads, damaged (issue #42, 6, 8 and 14).

A full disk is a small tmpfs in a private mount namespace (:mod:`tests.support.full_disk`), so
writes fail with ``ENOSPC`` as they do on a real disk (where namespaces are not allowed, a file-size
limit stands in for it, see there). Each writer (the recording's consolidation, the analysis maps,
the attribution pass, ``probe explain``'s weight change) runs as a CLI process of its own there
(forked from one interpreter that imported the toolkit once, :mod:`tests.support.forked`) and must
end in exit status 2 with one ``error:`` line, no ``Exception ignored`` noise from h5py, no signal,
and every file it found as it was. Each file it reads (maps, weight change, attribution) is
replaced by a generated corpus of damaged ones: not HDF5, truncated, a dataset or attribute missing
or of the wrong kind, text that is not UTF-8; each is one line naming the file, or, for the
attribution pass (a cache), a ``warning:`` and the file computed again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from core.errors import ProbeError
from probes.config import RecordConfig
from probes.recording import record_run
from tests.support.full_disk import FullDiskRun, runs_on_full_disk

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def explained(tiny_pair, rolemrc_file: Path, home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded (priority), analysed and explained run of the tiny pair."""
    from probe_cli.main import main

    out = tmp_path_factory.mktemp("hdf5") / "run"
    record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[1],
            data_file=rolemrc_file,
            out_dir=out,
            capabilities="priority",
            hooks="mlp_out,mlp_post",
            batch_size=4,
        ),
        progress=False,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROBE_HOME", str(home))
        for argv in (["analyze", str(out), "--no-plots"], ["explain", str(out), "-c", "priority", "--top", "3"]):
            with pytest.raises(SystemExit) as stop:
                main([*argv])
            assert stop.value.code in (0, None)
    return out


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PROBE_HOME": str(home)}


WRITERS: dict[str, tuple[list[str], str]] = {
    "recording": (
        ["run", "-c", "priority,multi_turn", "--hook", "mlp_out,mlp_post", "--batch-size", "4", "--no-analyze"],
        "writing failed ({reason})",
    ),
    "analysis maps": (["analyze", "{run}", "--no-plots"], "writing the analysis failed ({reason})"),
    "attribution pass": (
        ["analyze", "{run}", "--metric", "attribution", "--no-plots"],
        "writing the attribution failed ({reason})",
    ),
    "explain weight change": (
        ["explain", "{run}", "-c", "priority", "--top", "3", "--no-plots"],
        "writing the explanation failed ({reason})",
    ),
}


# no space at all (the file cannot be created), and space for part of the file (HDF5 fails mid-write: the crash);
# the recording's 160 KiB hold its first batches, so it fails with batches kept
CASES = [(writer, 0) for writer in sorted(WRITERS)] + [
    ("analysis maps", 16 * 1024),
    ("attribution pass", 16 * 1024),
    ("explain weight change", 16 * 1024),
    ("recording", 160 * 1024),
]


@pytest.fixture(scope="module")
def full_disk_runs(
    explained: Path, tiny_pair, rolemrc_file: Path, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], FullDiskRun]:
    """Every case of :data:`CASES`, each on a full disk of its own: one interpreter imports the toolkit once and
    forks a process per case (tests/support/forked.py), so each case still ends as its own ``probe`` process."""
    argvs = []
    for writer, _ in CASES:
        argv = WRITERS[writer][0]
        if argv[0] == "run":
            argv = [*argv, "--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--data", str(rolemrc_file)]
            argv += ["--out", "{run}", "--quiet"]
        argvs.append(argv)
    work = tmp_path_factory.mktemp("full-disk")
    cases = [(argv, free) for argv, (_, free) in zip(argvs, CASES, strict=True)]
    return dict(zip(CASES, runs_on_full_disk(explained, cases, work, env=_env(home)), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize(("writer", "free"), CASES)
def test_every_hdf5_writer_on_a_full_disk_is_one_line_and_loses_nothing(
    writer: str, free: int, explained: Path, full_disk_runs: dict[tuple[str, int], FullDiskRun]
) -> None:
    needle = WRITERS[writer][1]
    before = _files(explained)
    done = full_disk_runs[writer, free]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and needle.format(reason=done.reason) in errors[0], done.stderr[-3000:]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    after = _files(done.run_dir)
    assert {k: v for k, v in after.items() if not k.startswith("journal/")} == before


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


# ------------------------------------------------------------------ damaged files, read back


def _objects(path: Path) -> list[tuple[str, str]]:
    """(kind, name) of every dataset and every attribute in the file: ``attr`` names are ``<object>@<attribute>``."""
    found: list[tuple[str, str]] = [("attr", f"/@{a}") for a in h5py.File(path, "r").attrs]
    with h5py.File(path, "r") as f:

        def visit(name: str, item: object) -> None:
            if isinstance(item, h5py.Dataset):
                found.append(("dataset", name))
            found.extend(("attr", f"{name}@{a}") for a in item.attrs)  # type: ignore[attr-defined]

        f.visititems(visit)
    return found


def _invalid_utf8(node: h5py.HLObject, attr: str) -> None:
    del node.attrs[attr]
    node.attrs.create(attr, b'{"x": "\xff\xfe"}', dtype=h5py.string_dtype("utf-8"))


ATTR_DAMAGE = {
    "removed": lambda node, attr: node.attrs.__delitem__(attr),
    "a number": lambda node, attr: node.attrs.__setitem__(attr, 7),
    "not JSON": lambda node, attr: node.attrs.__setitem__(attr, "{not json"),
    "invalid UTF-8": _invalid_utf8,
}
DATASET_DAMAGE = {
    "removed": lambda f, name: f.__delitem__(name),
    "text": lambda f, name: (f.__delitem__(name), f.create_dataset(name, data=np.array([b"x", b"y"]))),
    "other shape": lambda f, name: (f.__delitem__(name), f.create_dataset(name, data=np.zeros((3, 2, 1)))),
}
FILE_DAMAGE = {
    "empty": lambda _raw: b"",
    "text": lambda _raw: b"hello, not HDF5\n",
    "random bytes": lambda raw: np.random.default_rng(0).bytes(len(raw)),
    **{f"truncated to {share:.0%}": (lambda raw, s=share: raw[: int(len(raw) * s)]) for share in (0.1, 0.5, 0.9, 0.99)},
}


def damaged_copies(good: Path, folder: Path) -> dict[str, Path]:
    """The corpus: every file-level damage, and every damage of every dataset and attribute of ``good``."""
    out: dict[str, Path] = {}
    raw = good.read_bytes()
    for case, spoil in FILE_DAMAGE.items():
        out[case] = folder / f"{len(out)}" / good.name
        out[case].parent.mkdir(parents=True)
        out[case].write_bytes(spoil(raw))
    for kind, name in _objects(good):
        for case, spoil in (ATTR_DAMAGE if kind == "attr" else DATASET_DAMAGE).items():
            key = f"{name}: {case}"
            out[key] = folder / f"{len(out)}" / good.name
            out[key].parent.mkdir(parents=True)
            shutil.copy(good, out[key])
            with h5py.File(out[key], "a") as f:
                if kind == "attr":
                    where, attr = name.split("@")
                    spoil(f[where or "/"], attr)
                else:
                    spoil(f, name)
    return out


def _read_or_one_line(read: Callable[[Path], object], path: Path) -> str:
    try:
        read(path)
    except ProbeError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        return message
    return "read"


@pytest.mark.parametrize("kind", ["maps", "weight change"])
def test_every_damaged_maps_or_weight_change_file_is_read_or_one_line_naming_it(
    kind: str, explained: Path, tmp_path: Path
) -> None:
    from analysis.maps import load_maps
    from analysis.weight_change import load_weight_change

    good, read = {
        "maps": (explained / "analysis" / "maps_topk_count.h5", load_maps),
        "weight change": (explained / "analysis" / "weight_change.h5", load_weight_change),
    }[kind]
    outcomes = {case: _read_or_one_line(read, path) for case, path in damaged_copies(good, tmp_path).items()}
    assert len(outcomes) > 40
    read_anyway = {case for case, outcome in outcomes.items() if outcome == "read"}
    assert all(_harmless(case) for case in read_anyway), sorted(read_anyway)


def _harmless(case: str) -> bool:
    """Damage a reader may accept: an optional member removed, a number that is still a number, other metric text."""
    optional = ("layer_rms", "@window", "/components/")
    return (case.endswith(": removed") and any(name in case for name in optional)) or case.endswith(
        ("@n_samples: a number", "@metric: not JSON")
    )


def test_intervene_select_weight_over_a_file_that_is_not_hdf5_is_one_line(
    explained: Path, tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.cli import one_line_error

    run = _copy(explained, tmp_path)
    (run / "analysis" / "weight_change.h5").write_text("not HDF5 at all\n")
    monkeypatch.setenv("PROBE_HOME", str(home))
    one_line_error(
        capsys,
        ["intervene", str(run), "-c", "priority", "--select", "weight", "--placebo", "0", "--limit", "2"],
        f"{run / 'analysis' / 'weight_change.h5'}: not a readable HDF5 file",
        "rerun `probe explain`",
    )


@pytest.mark.usefixtures("home")
@pytest.mark.slow
@pytest.mark.parametrize("case", ["text", "truncated to 50%", "/@key: invalid UTF-8", "/@key: a number"])
def test_a_damaged_attribution_cache_is_computed_again_with_a_warning(
    case: str, explained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from probes.attribution import attribute_run

    run = _copy(explained, tmp_path)
    good = attribute_run(run)
    expected = {name: np.asarray(h5py.File(good, "r")[name]) for kind, name in _objects(good) if kind == "dataset"}
    damaged = damaged_copies(good, tmp_path / "corpus")[case]
    shutil.copy(damaged, good)
    capsys.readouterr()
    assert attribute_run(run) == good
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {good}: "), warnings
    assert warnings[0].endswith("computing it again")
    with h5py.File(good, "r") as f:
        for name, values in expected.items():
            np.testing.assert_array_equal(np.asarray(f[name]), values, err_msg=name)
