"""Crafted or damaged run files, sets of output files, and outputs that are inputs (issue 22, classes 3, 7 and 8).

A run file is read only after a guard process has read its metadata (HDF5 itself segfaults on
some damaged attributes), so every fault here must end in one ``error:`` line, exit status 2,
with the files as they were; never a traceback, a signal, or a silent read of something else.
Reads of mutated HDF5 files run in a subprocess, so a crash the guard missed fails the test
instead of killing the suite.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from access.units import FORMAT, NeuronSet
from analysis import AnalysisConfig, analyze_run
from analysis.explore import open_explorer
from core.atomic import file_set, replace_together, write_atomic
from core.errors import ProbeError
from core.records import to_json
from core.run_dir import RUN_JSON, RunDir
from probes.journal import (
    Shard,
    check_shard,
    committed_ids,
    h5_settings,
    read_shard,
    write_shard,
)
from probes.samples import SampleColumns
from probes.store import RunReader
from tests.support.cli import exit_of, one_line_error
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
READ_ALL = """
import sys, traceback
from core.errors import ProbeError
from probes.store import RunReader
for line in sys.stdin:
    try:
        with RunReader(line.rstrip("\\n")) as run:
            for cap in run.capabilities():
                run.samples(cap)
                for model in ("sft", "dpo"):
                    for hook in run.hooks(cap, model):
                        run.activations(model, cap, hook)
        print("read")
    except ProbeError as exc:
        print("error: " + str(exc))
    except Exception:
        traceback.print_exc(file=sys.stdout)
    print(%r, flush=True)
"""
DONE = "-- read done --"  # after each run's output: what comes before it is that run's


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("hostile") / "run"
    write_synthetic_run(run_dir, SyntheticSpec(n_samples=8, n_layers=4, width=4, capabilities=("multi_turn",)))
    return run_dir


def _copy(small_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(small_run, tmp_path / "run"))


class _Reader:
    """A child process that reads whole runs, one directory per line on its stdin, and answers each with ``read``, its
    one ``error:`` line or a traceback, then :data:`DONE`. A crash (a signal from HDF5) ends that child and fails the
    run it was reading, not the suite; the next run gets a new child. One child for many runs saves each its start."""

    def __init__(self, stderr: Path) -> None:
        self.stderr = stderr
        self.child: subprocess.Popen[str] | None = None

    def read(self, run_dir: Path) -> list[str]:
        """The child's output lines for ``run_dir``."""
        if self.child is None or self.child.poll() is not None:
            with self.stderr.open("w") as err:
                self.child = subprocess.Popen(
                    [sys.executable, "-c", READ_ALL % DONE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env=_env(),
                    cwd=ROOT,
                )
        assert self.child.stdin is not None and self.child.stdout is not None
        said = self.stderr.stat().st_size
        self.child.stdin.write(f"{run_dir}\n")
        self.child.stdin.flush()
        lines = []
        while (line := self.child.stdout.readline()) != f"{DONE}\n":
            assert line, f"the reader died (status {self.child.wait()}): {self.stderr.read_text()[-2000:]}"
            lines.append(line.rstrip("\n"))
        with self.stderr.open() as err:
            err.seek(said)
            assert "Traceback" not in (printed := err.read()), printed[-2000:]
        return lines

    def close(self) -> None:
        if self.child is not None and self.child.poll() is None:
            assert self.child.stdin is not None
            self.child.stdin.close()
            self.child.wait(timeout=60)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Reader]:
    one = _Reader(tmp_path_factory.mktemp("reader") / "stderr.txt")
    yield one
    one.close()


def _settings_type_offset(raw: bytes) -> int:
    """The first byte of the datatype of the root ``settings`` attribute (a variable-length string: class 9, v1)."""
    name = raw.index(b"settings\x00")
    return raw.index(b"\x19", name)


# ------------------------------------------------------------------ the segfault of issue 22


def test_a_flipped_byte_in_the_settings_attribute_is_one_line_not_a_segfault(small_run: Path, tmp_path: Path) -> None:
    run_dir = _copy(small_run, tmp_path)
    path = run_dir / "activations.h5"
    raw = bytearray(path.read_bytes())
    raw[_settings_type_offset(raw) + 1] = 0xFF  # the string type's bit field: an unknown vlen kind
    path.write_bytes(bytes(raw))
    before = _sha(path)
    crash = subprocess.run(
        [sys.executable, "-c", "import h5py, sys; h5py.File(sys.argv[1], 'r').attrs['settings']", str(path)],
        capture_output=True,
        env=_env(),
        timeout=60,
    )
    assert crash.returncode < 0  # h5py itself dies on this file: the reproduction holds
    done = subprocess.run(
        [sys.executable, "-m", "probe_cli.main", "analyze", str(run_dir), "--no-plots"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert (
        lines[0].startswith("error: ")
        and "HDF5 metadata is damaged" in lines[0]
        and "crashed the HDF5 library" in lines[0]
    )
    assert _sha(path) == before and not (run_dir / "analysis").exists()
    with pytest.raises(ProbeError, match="crashed the HDF5 library"):
        committed_ids(run_dir, "multi_turn")  # what the resume of `probe run` reads first


# ------------------------------------------------------------------ crafted files, each one line


def _edit_settings_text(f: h5py.File) -> None:
    del f.attrs["settings_sha256"]
    f.attrs["settings"] = "{not json"


def _edit_settings_value(f: h5py.File) -> None:
    f.attrs["settings"] = str(f.attrs["settings"]).replace('"hooks": ["mlp_out"]', '"hooks": ["attn_out"]')


def _hooks_as_text(f: h5py.File) -> None:
    body = json.loads(f.attrs["settings"])
    text = json.dumps({**body, "hooks": "mlp_out"})
    f.attrs["settings"] = text
    f.attrs["settings_sha256"] = hashlib.sha256(text.encode()).hexdigest()


def _dataset_for_group(f: h5py.File) -> None:
    del f["samples/multi_turn"]
    f["samples/multi_turn"] = np.zeros(3)


def _claims_ten_million_rows(f: h5py.File) -> None:
    for model in ("sft", "dpo"):
        f[f"activations/{model}/multi_turn/mlp_out"].resize(10_000_000, axis=0)


def _external_storage(f: h5py.File) -> None:
    secret = Path(f.filename).parent / "secret.bin"
    secret.write_bytes(np.arange(8 * 4 * 4, dtype=np.float32).tobytes())
    attrs = dict(f["activations/dpo/multi_turn/mlp_out"].attrs)
    del f["activations/dpo/multi_turn/mlp_out"]
    dataset = f.create_dataset(
        "activations/dpo/multi_turn/mlp_out", shape=(8, 4, 4), dtype=np.float32, external=[(str(secret), 0, 512)]
    )
    dataset.attrs.update(attrs)


def _virtual_dataset(f: h5py.File) -> None:
    layout = h5py.VirtualLayout(shape=(8, 4, 4), dtype=np.float16)
    layout[:] = h5py.VirtualSource(f["activations/sft/multi_turn/mlp_out"])
    attrs = dict(f["activations/dpo/multi_turn/mlp_out"].attrs)
    del f["activations/dpo/multi_turn/mlp_out"]
    f.create_virtual_dataset("activations/dpo/multi_turn/mlp_out", layout).attrs.update(attrs)


CRAFTED: dict[str, tuple[Any, str]] = {
    "settings not JSON": (_edit_settings_text, "the 'settings' attribute is not JSON"),
    "settings edited": (_edit_settings_value, "does not match its checksum"),
    "settings of numbers": (
        lambda f: f.attrs.__setitem__("settings", np.arange(3)),
        "a 'settings' attribute holding list",
    ),
    "settings hooks as text": (
        _hooks_as_text,
        "malformed run settings (hooks is 'mlp_out', expected a list of hook names)",
    ),
    "settings missing": (lambda f: f.attrs.__delitem__("settings"), "no 'settings' attribute"),
    "layers missing": (
        lambda f: f["activations/sft/multi_turn/mlp_out"].attrs.__delitem__("layers"),
        "has no 'layers' attribute",
    ),
    "layers short": (
        lambda f: f["activations/sft/multi_turn/mlp_out"].attrs.__setitem__("layers", [0, 1]),
        "expected 4 distinct layer numbers",
    ),
    "layers as text": (
        lambda f: f["activations/sft/multi_turn/mlp_out"].attrs.__setitem__("layers", "0-3"),
        "expected 4 distinct layer numbers",
    ),
    "layers not the settings'": (
        lambda f: [
            f[f"activations/{m}/multi_turn/mlp_out"].attrs.__setitem__("layers", [4, 5, 6, 7]) for m in ("sft", "dpo")
        ],
        "does not match its own settings",
    ),
    "samples a dataset": (_dataset_for_group, "samples/multi_turn is a dataset; expected a group"),
    "10^7 rows claimed": (_claims_ten_million_rows, "the file is damaged or crafted"),
    "external storage": (_external_storage, "stored in external files"),
    "virtual dataset": (_virtual_dataset, "is a virtual dataset"),
    "absurd depth": (
        lambda f: f["models/sft"].attrs.__setitem__("n_layers", 10**12),
        "attribute n_layers is 1000000000000",
    ),
    "activations of ints": (
        lambda f: f.__setitem__("activations/sft/multi_turn/attn_out", np.zeros((8, 4, 4), dtype=np.int8)),
        "holds int8; expected one of float16, float32",
    ),
    "rows beyond the written chunks": (
        lambda f: f["activations/sft/multi_turn/mlp_out"].resize(1000, axis=0),
        "but only 1 of its 16 chunks were written",
    ),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_run_file_is_one_line_and_left_as_it_was(
    case: str, small_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit, needle = CRAFTED[case]
    run_dir = _copy(small_run, tmp_path)
    path = run_dir / "activations.h5"
    with h5py.File(path, "a") as f:
        edit(f)
    before = _sha(path)
    line = one_line_error(capsys, ["analyze", str(run_dir), "--no-plots"], needle)
    assert str(path) in line
    assert _sha(path) == before and not (run_dir / "analysis").exists()


def test_run_json_that_disagrees_with_the_file_or_lacks_settings_is_one_line(
    small_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _copy(small_run, tmp_path)
    with RunReader(run_dir) as run:
        settings = to_json(run.settings)
    (run_dir / RUN_JSON).write_text(json.dumps({"settings": {**settings, "data_sha256": "another data file"}}))
    one_line_error(
        capsys,
        ["analyze", str(run_dir), "--no-plots"],
        "differ from",
        "run.json in data_sha256",
        "does not match its own settings",
    )
    (run_dir / RUN_JSON).write_text(json.dumps({"created": "by hand"}))
    one_line_error(
        capsys,
        ["analyze", str(run_dir), "--no-plots"],
        "run.json: expected a JSON object with a 'settings' object",
        "found no 'settings' object",
    )
    with pytest.raises(ProbeError, match="found 'settings' holding str"):
        (run_dir / RUN_JSON).write_text(json.dumps({"settings": "x"}))
        RunDir(run_dir).read_settings_file()
    (run_dir / RUN_JSON).write_text(json.dumps({"settings": settings}))
    assert h5_settings(run_dir) == settings


FLIPS = st.lists(
    st.tuples(st.sampled_from(["settings", "anywhere"]), st.integers(-120, 10**9), st.integers(1, 255)),
    min_size=1,
    max_size=3,
)


@pytest.mark.slow
@settings(FUZZ, max_examples=12)
@given(flips=FLIPS, cut=st.one_of(st.none(), st.floats(0.05, 0.999)))
def test_mutated_run_files_are_read_or_refused_in_one_line_never_a_crash(
    small_run: Path,
    reader: _Reader,
    tmp_path_factory: pytest.TempPathFactory,
    flips: list[tuple[str, int, int]],
    cut: float | None,
) -> None:
    run_dir = Path(shutil.copytree(small_run, tmp_path_factory.mktemp("mutated") / "run"))
    path = run_dir / "activations.h5"
    raw = bytearray(path.read_bytes())
    anchor = _settings_type_offset(raw)
    for region, offset, mask in flips:
        at = anchor + offset if region == "settings" and anchor + offset >= 0 else offset % len(raw)
        raw[at % len(raw)] ^= mask
    path.write_bytes(bytes(raw[: int(len(raw) * cut)] if cut is not None else raw))
    lines = reader.read(run_dir)
    assert len(lines) == 1 and (lines[0] == "read" or lines[0].startswith(f"error: {path}")), lines


ATTRIBUTE_VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.lists(st.integers(-5, 40), max_size=6),
    st.binary(max_size=20),
    st.booleans(),
)


@settings(FUZZ, max_examples=12)
@given(
    where=st.sampled_from(["settings", "layers", "hook_tl_name", "n_layers", "schema_version"]), value=ATTRIBUTE_VALUES
)
def test_any_attribute_value_is_read_or_refused_in_one_line(
    small_run: Path, tmp_path_factory: pytest.TempPathFactory, where: str, value: Any
) -> None:
    run_dir = Path(shutil.copytree(small_run, tmp_path_factory.mktemp("attrs") / "run"))
    with h5py.File(run_dir / "activations.h5", "a") as f:
        target = {"settings": f, "schema_version": f, "n_layers": f["models/sft"]}.get(
            where, f["activations/sft/multi_turn/mlp_out"]
        )
        target.attrs[where] = np.void(value) if isinstance(value, bytes) else value
    try:
        with RunReader(run_dir) as run:
            assert run.layers("multi_turn", "mlp_out") == [0, 1, 2, 3]
            assert run.activations("sft", "multi_turn", "mlp_out").shape == (8, 4, 4)
    except ProbeError as exc:
        assert "\n" not in str(exc) and str(run_dir) in str(exc)


BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf")
"""A stray byte, a cut two-byte sequence, an encoded surrogate, a five-byte form, an overlong slash."""


def _text_places(path: Path) -> list[str]:
    """Every text attribute (``<object>@<name>``) and text dataset of a run file."""
    places: list[str] = []
    with h5py.File(path, "r") as f:
        for name, item in [("", f), *_items(f)]:
            places += [f"{name}@{a}" for a in item.attrs if isinstance(item.attrs[a], str)]
            if isinstance(item, h5py.Dataset) and h5py.check_string_dtype(item.dtype):
                places.append(name)
    return places


def _items(f: h5py.File) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    f.visititems(lambda name, item: found.append((name, item)))
    return found


def _spoil_text(f: h5py.File, place: str, bad: bytes, at: float) -> None:
    """Put ``bad`` into the text at ``place``, at the share ``at`` of its length, as raw UTF-8-typed bytes."""
    if "@" in place:
        where, name = place.split("@")
        node = f[where or "/"]
        text = node.attrs[name].encode()
        cut = int(len(text) * at)
        del node.attrs[name]
        node.attrs.create(name, text[:cut] + bad + text[cut:], dtype=h5py.string_dtype("utf-8"))
    else:
        text = f[place][0]
        cut = int(len(text) * at)
        f[place][0] = text[:cut] + bad + text[cut:]


def test_invalid_utf8_in_any_text_of_a_run_file_is_one_line(small_run: Path, reader: _Reader, tmp_path: Path) -> None:
    places = _text_places(small_run / "activations.h5")
    assert "@settings" in places and "samples/multi_turn/prompts" in places
    rng = np.random.default_rng(14)
    for k, place in enumerate(places):
        bad = BAD_UTF8[k % len(BAD_UTF8)]
        run_dir = Path(shutil.copytree(small_run, tmp_path / f"{k}"))
        with h5py.File(run_dir / "activations.h5", "a") as f:
            _spoil_text(f, place, bad, float(rng.random()))
        lines = reader.read(run_dir)
        assert len(lines) == 1 and lines[0].startswith(f"error: {run_dir / 'activations.h5'}"), (place, bad, lines)
        assert "UTF-8" in lines[0] or "Unicode" in lines[0], lines[0]


# ------------------------------------------------------------------ journal shards


def _shard(start: int = 0, rows: int = 2) -> Shard:
    acts = {(m, "mlp_out"): np.full((rows, 4, 4), i, dtype=np.float16) for i, m in enumerate(("sft", "dpo"))}
    samples = SampleColumns(np.arange(start, start + rows), ["t"] * rows, np.full(rows, 5), ["p"] * rows)
    return Shard("multi_turn", start, samples, acts)


def _pickled_shard(path: Path) -> None:
    arrays = {
        "sample_ids": np.arange(2),
        "tasks": np.array(["t", "t"]),
        "prompt_lengths": np.full(2, 5),
        "prompts": np.array([{"x": 1}, None], dtype=object),
        "act__sft__mlp_out": np.zeros((2, 4, 4)),
    }
    with path.open("wb") as handle:
        np.savez(handle, **arrays)


def _claims_huge(path: Path) -> None:
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (10000000, 4096, 4), }"
    body = (
        b"\x93NUMPY\x01\x00"
        + len(header.ljust(118) + b"\n").to_bytes(2, "little")
        + header.ljust(118)
        + b"\n"
        + b"\0" * 64
    )
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("act__dpo__attn_out.npy", body)


def _extra_member(path: Path) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(2))
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("notes.npy", buffer.getvalue())


SHARD_FAULTS: dict[str, tuple[Any, str]] = {
    "pickled objects": (_pickled_shard, "holds Python objects (a pickle)"),
    "damaged zip": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "not a readable shard"),
    "not a zip": (lambda p: p.write_bytes(b"hello"), "not a readable shard"),
    "a member claims 600 GB": (_claims_huge, "claims shape (10000000, 4096, 4)"),
    "an unknown member": (_extra_member, "member 'notes'"),
}


@pytest.mark.parametrize("case", sorted(SHARD_FAULTS))
def test_a_damaged_or_crafted_shard_is_one_line_naming_it(case: str, tmp_path: Path) -> None:
    spoil, needle = SHARD_FAULTS[case]
    path = write_shard(tmp_path, _shard())
    spoil(path)
    for read in (lambda: read_shard(path, "multi_turn"), lambda: check_shard(path)):
        with pytest.raises(ProbeError) as info:
            read()
        message = str(info.value)
        assert "\n" not in message and message.startswith(str(path)) and needle in message, message
        assert "delete this shard and rerun the same command" in message


def test_a_stray_npz_in_the_journal_is_refused_and_other_files_are_left_alone(tmp_path: Path) -> None:
    write_shard(tmp_path, _shard(0))
    write_shard(tmp_path, _shard(2))
    folder = RunDir(tmp_path).shard("multi_turn", 0).parent
    (folder / "README.txt").write_text("my notes")
    assert [p.name for p in RunDir(tmp_path).shards("multi_turn")] == ["000000000.npz", "000000002.npz"]
    shutil.copy(folder / "000000000.npz", folder / "notes.npz")
    with pytest.raises(
        ProbeError, match=r"notes\.npz: not a journal shard name \(expected <batch start>\.npz with nine digits"
    ):
        RunDir(tmp_path).shards("multi_turn")


def test_a_shard_of_other_layers_or_hooks_is_refused_against_the_run(tmp_path: Path) -> None:
    path = write_shard(tmp_path, _shard())
    assert check_shard(path, 4, {"mlp_out"}).tolist() == [0, 1]
    with pytest.raises(ProbeError, match="holds 4 layers; the run records 3"):
        check_shard(path, 3, {"mlp_out"})
    with pytest.raises(ProbeError, match=re.escape("act__<sft|dpo|base|dpo_on_sft|sft_on_dpo>__<hook of this run>")):
        check_shard(path, 4, {"attn_out"})


@settings(FUZZ, max_examples=60)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.floats(0, 1)),
)
def test_mutated_shards_are_read_exactly_or_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, flips: list[tuple[int, int]], cut: float | None
) -> None:
    original = _shard()
    path = write_shard(tmp_path_factory.mktemp("shard"), original)
    raw = bytearray(path.read_bytes())
    for at, mask in flips:
        raw[at % len(raw)] ^= mask
    path.write_bytes(bytes(raw[: int(len(raw) * cut)] if cut is not None else raw))
    try:
        shard = read_shard(path, "multi_turn")
    except ProbeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert shard.samples.sample_ids.tolist() == original.samples.sample_ids.tolist()
    assert shard.samples.prompts == original.samples.prompts
    for key, values in original.activations.items():
        np.testing.assert_array_equal(shard.activations[key], values)


# ------------------------------------------------------------------ the analysis directory is one set


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_interrupted_reanalysis_leaves_the_previous_analysis_whole(
    small_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _copy(small_run, tmp_path)
    analyze_run(run_dir, AnalysisConfig(top_k=3, stability_resamples=0), plots=False)
    before = _files(run_dir / "analysis")
    import analysis.summary

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    # maps and neuron sets are written by now
    monkeypatch.setattr(analysis.summary.AnalysisSummary, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        analyze_run(run_dir, AnalysisConfig(top_k=5, stability_resamples=0), plots=False)
    assert _files(run_dir / "analysis") == before
    assert [p.name for p in (run_dir / "analysis").iterdir() if p.name.startswith(".")] == []


def test_a_reanalysis_that_selects_nothing_removes_the_old_neuron_set(small_run: Path, tmp_path: Path) -> None:
    run_dir = _copy(small_run, tmp_path)
    first = analyze_run(run_dir, AnalysisConfig(top_k=3, stability_resamples=0), plots=False)
    assert first.neuron_sets[("multi_turn", "mlp_out")].is_file()
    again = analyze_run(run_dir, AnalysisConfig(rule="fdr", threshold=1e9, stability_resamples=0), plots=False)
    assert not again.neuron_sets and not (run_dir / "analysis" / "neurons_multi_turn_mlp_out.json").exists()
    assert again.summary is not None and again.summary.capabilities["multi_turn"]["mlp_out"].neuron_set is None


LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from probe_cli.main import main
main(sys.argv[2:])
"""


@pytest.mark.slow
def test_a_full_disk_in_analyze_is_one_line_and_keeps_the_old_analysis(small_run: Path, tmp_path: Path) -> None:
    run_dir = _copy(small_run, tmp_path)
    analyze_run(run_dir, AnalysisConfig(top_k=3, stability_resamples=0), plots=False)
    before = _files(run_dir / "analysis")
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, str(1_000_000), "analyze", str(run_dir), "--top-k", "5", "--no-png"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )  # plotly.min.js is larger than 1 MB
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        "writing the analysis failed (File too large)" in lines[0] and "the previous analysis is as it was" in lines[0]
    )
    assert _files(run_dir / "analysis") == before


def test_the_plots_carry_their_own_plotly_js(small_run: Path, tmp_path: Path) -> None:
    result = analyze_run(_copy(small_run, tmp_path), AnalysisConfig(stability_resamples=0), plots=True, png=False)
    bundle = result.out_dir / "plots" / "plotly.min.js"
    from plotly.offline import get_plotlyjs

    assert bundle.read_text() == get_plotlyjs() and all(p.is_file() and p.parent == bundle.parent for p in result.plots)


# ------------------------------------------------------------------ an input is never an output


def test_judge_verdicts_out_onto_its_responses_is_refused_and_the_file_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, responses = tmp_path / "test.jsonl", tmp_path / "responses.jsonl"
    data.write_text('{"question": [], "reference": "x", "task": "x"}\n')
    responses.write_text('"an answer"\n')
    (tmp_path / "link.jsonl").symlink_to(responses)
    for out in (responses, tmp_path / "link.jsonl", tmp_path / "." / "responses.jsonl", data):
        one_line_error(
            capsys,
            ["judge", "--data", str(data), "--responses", str(responses), "--verdicts-out", str(out)],
            "is the same file as",
            "writing it would overwrite the input",
        )
    assert responses.read_text() == '"an answer"\n'


def test_models_eval_out_onto_its_test_file_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = tmp_path / "test.jsonl"
    test.write_text("keep me\n")
    one_line_error(
        capsys,
        [
            "models",
            "eval",
            "--sft",
            str(tmp_path / "no-sft"),
            "--dpo",
            str(tmp_path / "no-dpo"),
            "--test",
            str(test),
            "--out",
            str(test),
        ],
        "--out",
        "is the same file as --test",
    )
    assert test.read_text() == "keep me\n"


def test_models_eval_keeps_its_result_when_out_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.atomic
    from training.evaluate import ModelEvaluation, PairEvaluation

    def disk_full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    result = PairEvaluation(
        "test.jsonl", {"t": 1}, "rules", {}, ModelEvaluation("sft", ["a"], [{}]), ModelEvaluation("dpo", ["b"], [{}])
    )
    monkeypatch.setattr(core.atomic, "write_atomic", disk_full)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(
        ProbeError, match=r"--out .*result\.json: cannot write \(No space left on device\).*kept in"
    ) as info:
        result.save(tmp_path / "out" / "result.json")
    kept = Path(str(info.value).split("kept in ")[1].split(":")[0])
    assert kept.parent == tmp_path and json.loads(kept.read_text()) == json.loads(json.dumps(to_json(result)))


# ------------------------------------------------------------------ modes, versions, notebook parameters


def test_written_files_keep_the_umask_and_a_replaced_file_its_mode(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.txt", "x")
        replace_together({tmp_path / "together.txt": "x"})
        with file_set(tmp_path / "set") as staged:
            (staged.folder / "member.txt").write_text("x")
        assert {
            oct(os.stat(p).st_mode & 0o777)
            for p in (tmp_path / "new.txt", tmp_path / "together.txt", tmp_path / "set" / "member.txt")
        } == {"0o644"}
        for path in (tmp_path / "new.txt", tmp_path / "set" / "member.txt"):
            os.chmod(path, 0o640)
        write_atomic(tmp_path / "new.txt", "y")
        with file_set(tmp_path / "set") as staged:
            (staged.folder / "member.txt").write_text("y")
        assert (
            oct(os.stat(tmp_path / "new.txt").st_mode & 0o777)
            == oct(os.stat(tmp_path / "set" / "member.txt").st_mode & 0o777)
            == "0o640"
        )
        os.umask(0o077)
        write_atomic(tmp_path / "private.txt", "x")
        assert os.stat(tmp_path / "private.txt").st_mode & 0o777 == 0o600
    finally:
        os.umask(previous)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (2, "neuron-set version 2, newer than this toolkit reads (1); update the toolkit"),
        ("1", "neuron-set version '1', expected an integer 1-1"),
        (0, "neuron-set version 0, expected an integer 1-1"),
    ],
)
def test_a_neuron_set_version_this_toolkit_does_not_read_is_one_line(version: object, message: str) -> None:
    body = {"format": FORMAT, "version": version, "hook": "mlp_out", "neurons": [{"layer": 1, "unit": 2}]}
    with pytest.raises(ProbeError, match="^" + re.escape(f"set.json: {message}")):
        NeuronSet.read(body, "set.json")
    assert len(NeuronSet.read({**body, "version": 1}, "set.json")) == 1


def test_the_explorer_parameters_are_checked_in_one_line(
    small_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_CAPABILITY", "multi_trun")
    with pytest.raises(
        ProbeError, match=r"^PROBE_CAPABILITY='multi_trun': no capability of that name in .* \(recorded: multi_turn\)$"
    ):
        open_explorer(small_run, "multi_trun")
    monkeypatch.delenv("PROBE_CAPABILITY")
    with pytest.raises(ProbeError, match=r"^HOOK 'mlp': no hook of that name in .* \(recorded: mlp_out\)$"):
        open_explorer(small_run, None, "mlp")
    monkeypatch.setenv("PROBE_RUN_DIR", str(tmp_path / "missing"))
    with pytest.raises(
        ProbeError,
        match=r"^PROBE_RUN_DIR='.*missing': not a directory; expected a run directory written by `probe run`$",
    ):
        open_explorer(tmp_path / "missing")
    run, capability, hook = open_explorer(small_run, " multi_turn ", None)
    with run:
        assert (capability, hook) == ("multi_turn", "mlp_out")


@pytest.mark.slow
def test_a_resume_over_a_pickled_or_stray_shard_is_one_line(
    tiny_pair,
    rolemrc_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from probes.config import RecordConfig
    from probes.recording import record_run

    out = tmp_path / "run"
    record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[1],
            data_file=rolemrc_file,
            out_dir=out,
            capabilities="multi_turn",
            hooks="mlp_out",
            batch_size=4,
        ),
        progress=False,
    )
    argv = [
        "run",
        "-c",
        "multi_turn",
        "--sft",
        str(tiny_pair[0]),
        "--dpo",
        str(tiny_pair[1]),
        "--data",
        str(rolemrc_file),
        "--out",
        str(out),
        "--hook",
        "mlp_out",
        "--batch-size",
        "4",
        "--no-analyze",
        "--quiet",
    ]
    before = _sha(out / "activations.h5")
    stray = RunDir(out).shard("multi_turn", 0).with_name("notes.npz")
    stray.parent.mkdir(parents=True, exist_ok=True)
    _pickled_shard(stray)
    pickled = RunDir(out).shard("multi_turn", 999)
    for needle in (
        "notes.npz: not a journal shard name",
        f"{pickled}: member 'prompts.npy' holds Python objects (a pickle)",
    ):
        capsys.readouterr()
        code, _, err = exit_of(argv, capsys)
        # transformers' weight-loading bars may precede it
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and needle in errors[0] and "Traceback" not in err, err
        if stray.exists():
            stray.rename(pickled)
    assert _sha(out / "activations.h5") == before
