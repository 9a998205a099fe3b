"""A cached build is checked by size, modification time and inode, re-hashed only where they moved.

:func:`core.builds.verify_marker` must still find every change that matters (README promise 15: a file changed,
removed or added means rebuild) while a cached ``probe models default`` reads no file it need not. Over a generated
corpus of edits to a real build folder:

* an edit that changes bytes and, as every editor, copy or download does, the size, time or inode, is found;
* an edit that keeps the bytes (``touch``, a copy over the file) is not a rebuild, and the marker learns the new
  times, so the next call is fast again;
* a change of bytes that keeps size, time and inode is what ``rehash=True`` (``--verify``) is for: found with it.

And the cached CLI path: ``probe models default`` on a cached pair imports neither scipy nor torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.builds import MARKER, verify_marker, write_marker
from core.records import to_json
from training.default_pair import TINY_RECIPE

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = {"recipe": 1}
NAMES = ["sft/model.safetensors", "sft/config.json", "dpo/model.safetensors", "data/test.jsonl"]
EDITS = ["append", "truncate", "flip", "delete", "add", "replace", "touch", "copy_over", "flip_keep_stat"]


def build(root: Path) -> None:
    for i, name in enumerate(NAMES):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(bytes(range(256)) * (i + 2))
    write_marker(root, IDENTITY)


def edit(root: Path, kind: str, name: str) -> None:
    path = root / name
    st = path.stat()
    if kind == "append":
        with path.open("ab") as handle:
            handle.write(b"x")
    elif kind == "truncate":
        os.truncate(path, st.st_size - 1)
    elif kind in ("flip", "flip_keep_stat"):  # in place: same inode and size
        data = bytearray(path.read_bytes())
        data[7] ^= 0xFF
        with path.open("r+b") as handle:
            handle.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + (0 if kind == "flip_keep_stat" else 10**9)))
    elif kind == "delete":
        path.unlink()
    elif kind == "add":
        (path.parent / "special_tokens_map.json").write_text("{}")
    elif kind == "replace":  # a new file of other bytes, renamed over (a new inode, the old time restored)
        other = path.with_suffix(".tmp")
        other.write_bytes(path.read_bytes()[::-1])
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
        other.replace(path)
    elif kind == "touch":
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    elif kind == "copy_over":  # the same bytes in a new inode
        other = path.with_suffix(".tmp")
        shutil.copy2(path, other)
        other.replace(path)


@settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(kinds=st.lists(st.sampled_from(EDITS), min_size=1, max_size=3), name=st.sampled_from(NAMES))
def test_any_edit_that_changes_bytes_is_found_and_none_that_keeps_them(
    kinds: list[str], name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("build")
    build(root)
    before = contents(root)
    assert verify_marker(root, IDENTITY) is None
    done = [kind for kind in kinds if (root / name).exists() and edit(root, kind, name) is None]
    changed = contents(root) != before  # append then truncate gives the same bytes back
    found = verify_marker(root, IDENTITY, rehash=True)
    assert (found is not None) == changed, (done, found)
    if changed and "flip_keep_stat" not in done:  # what stat sees is found without --verify too
        assert verify_marker(root, IDENTITY) is not None, done
    if not changed:  # the marker now knows the new times: the next check hashes nothing
        stats = json.loads((root / MARKER).read_text())["stats"]
        st = (root / name).stat()
        assert stats[name] == [st.st_size, st.st_mtime_ns, st.st_ino], done


def contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != MARKER}


def test_only_verify_finds_a_change_that_keeps_size_time_and_inode(tmp_path: Path) -> None:
    build(tmp_path)
    edit(tmp_path, "flip_keep_stat", "sft/model.safetensors")
    assert verify_marker(tmp_path, IDENTITY) is None  # the documented limit of the fast check
    assert verify_marker(tmp_path, IDENTITY, rehash=True) == "sft/model.safetensors changed since the build"


def test_a_marker_without_stats_is_hashed_once_then_recorded(tmp_path: Path) -> None:
    build(tmp_path)
    record = json.loads((tmp_path / MARKER).read_text())
    del record["stats"]  # a build from before the stats were recorded
    (tmp_path / MARKER).write_text(json.dumps(record))
    assert verify_marker(tmp_path, IDENTITY) is None
    assert set(json.loads((tmp_path / MARKER).read_text())["stats"]) == set(NAMES)


def fake_tiny_pair(home: Path) -> Path:
    """A cached tiny pair as ``probe models default --pair tiny`` finds it (its files need not load)."""
    root = home / TINY_RECIPE.dir_name
    for name in ("data/test.jsonl", "sft/model.safetensors", "dpo/model.safetensors"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(os.urandom(1 << 20))
    write_marker(root, {"recipe": to_json(TINY_RECIPE)})
    return root


def test_a_cached_models_default_imports_no_scipy_or_torch(tmp_path: Path) -> None:
    root = fake_tiny_pair(tmp_path)
    env = {**os.environ, "PROBE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    command = [sys.executable, "-X", "importtime", "-m", "probe_cli", "models", "default", "--pair", "tiny", "--quiet"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(root / "sft") in done.stdout, done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = sorted(m for m in imported if m.split(".")[0] in ("scipy", "torch", "transformers", "pandas"))
    assert not heavy, heavy[:10]
    print(f"\ncached `probe models default --pair tiny`: {seconds:.2f} s with -X importtime")
