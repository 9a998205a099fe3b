"""record_run end to end on the tiny pair: HDF5 round trip, provenance, resume, refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from core.errors import ProbeError
from core.provenance import file_sha256, weights_sha256
from core.run_dir import JOURNAL_DIR, RUN_JSON
from probes.config import RecordConfig
from probes.recording import record_run
from probes.store import RunReader
from tests.support.runs import run_arrays

HOOKS = ("mlp_out", "mlp_post")


def _config(tiny_pair, data: Path, out: Path, **kw) -> RecordConfig:
    base = {
        "sft_dir": tiny_pair[0],
        "dpo_dir": tiny_pair[1],
        "data_file": data,
        "capabilities": "multi_turn,priority",
        "hooks": HOOKS,
        "out_dir": out,
        "batch_size": 3,
        "layers": "1-3",
    }
    base.update(kw)
    return RecordConfig(**base)


@pytest.fixture(scope="module")
def full_run(tiny_pair, rolemrc_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "full"
    record_run(_config(tiny_pair, rolemrc_file, out), progress=False)
    return out


@pytest.mark.slow
def test_round_trip_matches_a_direct_forward_and_keeps_provenance(
    tiny_pair, rolemrc_file: Path, tmp_path: Path
) -> None:
    from access.drivers import make_backend
    from access.pair import load_pair
    from core.capabilities import Capability
    from core.chat import pad_id_of
    from core.rows import read_test_rows
    from probes.prompts import build_prompts, make_batch

    result = record_run(
        _config(tiny_pair, rolemrc_file, tmp_path / "r", store_dtype="float32", capabilities="multi_turn"),
        progress=False,
    )
    pair = load_pair(*tiny_pair, device="cpu", dtype="float32")
    prompts = build_prompts(
        pair.tokenizer, read_test_rows(rolemrc_file), Capability.MULTI_TURN, add_generation_prompt=False
    )
    direct = make_backend("torch", pair.dpo, hooks=HOOKS, layers=[1, 2, 3], position="last").record(
        make_batch(prompts, range(len(prompts)), pad_id_of(pair.tokenizer))
    )
    with RunReader(result.run_dir) as run:
        assert run.dataset("dpo", "multi_turn", "mlp_post").dtype == np.float32
        np.testing.assert_allclose(
            run.activations("dpo", "multi_turn", "mlp_post"), direct["mlp_post"].numpy(), atol=1e-5
        )
        assert run.layers("multi_turn", "mlp_out") == [1, 2, 3]
        samples = run.samples("multi_turn")
        assert (
            sorted(samples.sample_ids.tolist()) == sorted(prompts.samples.sample_ids.tolist())
            and len(samples.sample_ids) == 8
        )
        assert all("2nd" in t for t in samples.tasks)
        assert all(
            p.count("<|begin_of_text|>") == 1 and "<|start_header_id|>user" in p and "User" not in p.split(">")[1]
            for p in samples.prompts
        )
        assert not samples.prompts[0].endswith("assistant<|end_header_id|>\n\n")  # no generation prompt by default
        assert samples.prompt_lengths.tolist() == [len(i) for i in prompts.ids]
        info = run.model_info("sft")
        assert info["weights_sha256"] == weights_sha256(tiny_pair[0]) != run.model_info("dpo")["weights_sha256"]
        assert info["model_dir"] == str(tiny_pair[0].resolve()) and info["n_layers"] == 4 and info["d_mlp"] == 64
        assert len(info["tokenizer_sha256"]) == len(info["chat_template_sha256"]) == 64
        s = run.settings
        assert s.data_sha256 == file_sha256(rolemrc_file) and s.data_file == str(rolemrc_file.resolve())
        assert (s.backend, s.position, s.dtype, s.store_dtype, s.hooks, s.seed) == (
            "torch",
            "last",
            "float32",
            "float32",
            list(HOOKS),
            0,
        )
        assert s.toolkit_version and json.loads(run._file.attrs["provenance"])["versions"]["torch"]
    assert not (result.run_dir / JOURNAL_DIR / "multi_turn").exists() or not any(
        (result.run_dir / JOURNAL_DIR / "multi_turn").iterdir()
    )


def test_default_store_is_float16_and_rerun_skips_everything(tiny_pair, rolemrc_file: Path, full_run: Path) -> None:
    before = run_arrays(full_run)
    with RunReader(full_run) as run:
        assert run.dataset("sft", "priority", "mlp_out").dtype == np.float16
        assert run.capabilities() == ["multi_turn", "priority"]
    again = record_run(_config(tiny_pair, rolemrc_file, full_run), progress=False)
    assert again.recorded == {"multi_turn": 0, "priority": 0} and again.resumed == {"multi_turn": 8, "priority": 4}
    after = run_arrays(full_run)
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)


def test_a_new_capability_can_be_added_to_a_run(tiny_pair, rolemrc_file: Path, full_run: Path, tmp_path: Path) -> None:
    import shutil

    out = Path(shutil.copytree(full_run, tmp_path / "grow"))
    before = run_arrays(out)
    result = record_run(_config(tiny_pair, rolemrc_file, out, capabilities="priority,nested"), progress=False)
    assert result.recorded == {"priority": 0, "nested": 8} and result.counts == {"priority": 4, "nested": 8}
    after = run_arrays(out)
    assert all(np.array_equal(before[k], after[k]) for k in before) and after["nested/dpo/mlp_post"].shape == (8, 3, 64)


@pytest.mark.parametrize(
    "change", [{"position": "mean"}, {"hooks": "mlp_out"}, {"layers": "0-3"}, {"store_dtype": "float32"}]
)
def test_mixing_incompatible_settings_is_refused(tiny_pair, rolemrc_file: Path, full_run: Path, change: dict) -> None:
    before = run_arrays(full_run)
    key = next(iter(change))
    with pytest.raises(ProbeError, match=f"recorded with other settings.*{key if key != 'hooks' else 'hooks'}"):
        record_run(_config(tiny_pair, rolemrc_file, full_run, **change), progress=False)
    after = run_arrays(full_run)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_other_data_or_swapped_models_are_refused(
    tiny_pair, rolemrc_file: Path, full_run: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(rolemrc_file.read_text().replace("archivist", "librarian"))
    with pytest.raises(ProbeError, match="data_sha256"):
        record_run(_config(tiny_pair, other, full_run), progress=False)
    with pytest.raises(ProbeError, match="sft_weights_sha256"):
        record_run(_config((tiny_pair[1], tiny_pair[0]), rolemrc_file, full_run), progress=False)


def _simulate_crash(monkeypatch: pytest.MonkeyPatch, target: str, after_calls: int = 0) -> None:
    """Make the n-th call of os.replace / Path.unlink die like a killed process (BaseException, no cleanup)."""
    import probes.journal as journal

    class Killed(BaseException):
        pass

    calls = {"n": 0}
    if target == "replace_h5":
        real = os.replace

        def replace(src, dst):
            if str(dst).endswith("activations.h5"):
                raise Killed
            return real(src, dst)

        monkeypatch.setattr(journal.os, "replace", replace)
    else:
        real_unlink = Path.unlink

        def unlink(self, missing_ok=False):
            if self.suffix == ".npz":
                calls["n"] += 1
                if calls["n"] > after_calls:
                    raise Killed
            return real_unlink(self, missing_ok=missing_ok)

        monkeypatch.setattr(Path, "unlink", unlink)
    return Killed  # type: ignore[return-value]


@pytest.mark.parametrize("crash", ["replace_h5", "unlink_shards"])
def test_crash_during_consolidation_resumes_to_identicalrun_arrays(
    tiny_pair,
    rolemrc_file: Path,
    full_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    crash: str,
) -> None:
    out = tmp_path / "crashy"
    with monkeypatch.context() as m:
        killed = _simulate_crash(m, crash, after_calls=2)
        with pytest.raises(killed):
            record_run(_config(tiny_pair, rolemrc_file, out), progress=False)
    assert (out / RUN_JSON).is_file()
    result = record_run(_config(tiny_pair, rolemrc_file, out), progress=False)
    assert result.recorded == {"multi_turn": 0, "priority": 0}  # everything was already in shards or the file
    reference, resumed = run_arrays(full_run), run_arrays(out)
    assert reference.keys() == resumed.keys() and all(np.array_equal(reference[k], resumed[k]) for k in reference)
    with h5py.File(out / "activations.h5") as handle:
        assert handle["samples/multi_turn/sample_ids"].shape == (8,)
