"""Typed stage records: run settings and model provenance are written from one object and read through one type.

Old files (written before the version field) still open; a newer version is refused with
one line saying what to do; ``run.json`` and the HDF5 file's ``settings`` are the same record.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from core.errors import ProbeError
from core.records import to_json
from probes.settings import VERSION, RunSettings
from training.provenance import ModelProvenance, read_provenance


def test_run_json_and_the_hdf5_settings_are_one_record(tiny_pair, rolemrc_file: Path, tmp_path: Path) -> None:
    from probes.config import RecordConfig
    from probes.recording import record_run
    from probes.store import RunReader

    result = record_run(
        RecordConfig(
            sft_dir=tiny_pair[0],
            dpo_dir=tiny_pair[1],
            data_file=rolemrc_file,
            out_dir=tmp_path / "run",
            capabilities="priority",
        ),
        progress=False,
    )
    in_json = json.loads((result.run_dir / "run.json").read_text())["settings"]
    with h5py.File(result.run_dir / "activations.h5") as handle:
        in_h5 = json.loads(handle.attrs["settings"])
    assert in_json == in_h5 == to_json(result.settings) and in_json["version"] == VERSION
    with RunReader(result.run_dir) as run:
        assert run.settings == result.settings and run.settings.model_dir("dpo") == str(tiny_pair[1].resolve())


def test_version_1_settings_open_and_a_newer_version_is_refused() -> None:
    old = to_json(RunSettings(hooks=["mlp_out"], layers=[1, 2], data_sha256="ab"))
    del old["version"]
    assert RunSettings.read(old) == RunSettings(hooks=["mlp_out"], layers=[1, 2], data_sha256="ab")
    with pytest.raises(ProbeError, match=r"x/run.json: run settings version 99, newer than this toolkit reads"):
        RunSettings.read({**old, "version": 99}, "x/run.json")
    with pytest.raises(ProbeError, match=r"x/run.json: malformed run settings"):
        RunSettings.read({**old, "layers": ["one"]}, "x/run.json")


def test_a_resume_refused_for_other_settings_names_what_differs() -> None:
    recorded = RunSettings(hooks=["mlp_out"], layers=[1, 2], position="last")
    asked = RunSettings(hooks=["mlp_out"], layers=[1, 2, 3], position="mean")
    assert recorded.differences(asked) == [
        "layers: run has [1, 2], this call asks [1, 2, 3]",
        "position: run has 'last', this call asks 'mean'",
    ]


def test_model_provenance_round_trips_keeps_extra_keys_and_reads_old_files(tmp_path: Path) -> None:
    record = ModelProvenance(stage="sft", weights_sha256="w", final_loss=0.5, world_size=2, extra={"note": "x"})
    body = to_json(record)
    assert body["format"] == "rolemrc-probe/model-provenance" and body["note"] == "x"
    assert ModelProvenance.read(body) == record
    (tmp_path / "provenance.json").write_text(
        json.dumps({"stage": "dpo", "weights_sha256": "w", "parent": {"base": "tiny"}})
    )
    old = read_provenance(tmp_path)
    assert old is not None and old.stage == "dpo" and old.parent == {"base": "tiny"}
    (tmp_path / "provenance.json").write_text(json.dumps({**body, "version": 7}))
    with pytest.raises(ProbeError, match=r"provenance.json: provenance version 7, newer than this toolkit reads"):
        read_provenance(tmp_path)
    assert read_provenance(tmp_path / "missing") is None
