"""SFT -> DPO with the real TRL trainers on a 2-layer tiny base, a few steps each.

One SFT run and one DPO run are shared by the module (they take seconds); the checks are
what a user relies on: the loss goes down, prompt tokens are masked, outputs reload
offline with their tokenizer and chat template, provenance is complete, same seed gives
the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from data_synthesis.offline import synthesize
from training.config import DPORunConfig, SFTRunConfig
from training.dpo import train_dpo
from training.sft import prepare_sft, train_sft

TINY = {"n_layers": 2, "hidden_size": 32, "intermediate_size": 64, "vocab_size": 512}


def sft_config(data: Path, out: Path, **kw: object) -> SFTRunConfig:
    values: dict[str, object] = {
        "base": "tiny",
        "data": data,
        "out": out,
        "tiny_spec": TINY,
        "max_steps": 8,
        "batch_size": 8,
        "learning_rate": 1e-2,
        "max_rows": 64,
        "max_length": 256,
    }
    values.update(kw)
    return SFTRunConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    synthesize(out, n_roles=3, seed=0)
    return out


@pytest.fixture(scope="module")
def sft_dir(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_sft(sft_config(data_dir, tmp_path_factory.mktemp("runs") / "sft"))


@pytest.fixture(scope="module")
def dpo_dir(sft_dir: Path, data_dir: Path) -> Path:
    cfg = DPORunConfig(
        sft=sft_dir,
        data=data_dir,
        out=sft_dir.parent / "dpo",
        max_steps=3,
        batch_size=4,
        learning_rate=1e-3,
        max_rows=24,
        max_length=256,
    )
    return train_dpo(cfg)


def _provenance(path: Path) -> dict:
    return json.loads((path / "provenance.json").read_text())


@pytest.mark.slow
def test_sft_loss_decreases(sft_dir: Path) -> None:
    losses = [r["loss"] for r in _provenance(sft_dir)["losses"]]
    assert len(losses) == 8
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1


@pytest.mark.slow
def test_prompt_tokens_are_masked(data_dir: Path, tmp_path: Path) -> None:
    session = prepare_sft(sft_config(data_dir, tmp_path / "masked", max_length=1024))
    tokenizer = session.trainer.processing_class
    batch = session.trainer.data_collator([session.trainer.train_dataset[i] for i in range(4)])
    from training.data import sft_records

    records = sft_records(session.data_file, 4)
    for ids, labels, record in zip(batch["input_ids"], batch["labels"], records, strict=True):
        trained = tokenizer.decode(ids[labels != -100])
        masked = tokenizer.decode(ids[(labels == -100) & (ids != tokenizer.pad_token_id)])
        assistant = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        others = [m["content"] for m in record["messages"] if m["role"] != "assistant"]
        assert trained == "".join(a + "<|eot_id|>" for a in assistant)  # exactly the replies and their end token
        assert all(text.strip()[:40] in masked for text in others)
        assert "<|begin_of_text|>" in masked and "<|begin_of_text|>" not in trained


@pytest.mark.usefixtures("data_dir")
@pytest.mark.slow
def test_outputs_reload_offline_with_provenance(sft_dir: Path, dpo_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for path, stage in ((sft_dir, "sft"), (dpo_dir, "dpo")):
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        assert model.config.num_hidden_layers == 2
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        assert ids.count(tokenizer.bos_token_id) == 1
        record = _provenance(path)
        assert record["stage"] == stage and record["final_loss"] == record["losses"][-1]["loss"]
        assert record["data"]["sha256"] and record["versions"]["trl"] and record["seeds"]["seed"] == 0
        assert record["config"]["learning_rate"] > 0
        assert not list(path.parent.glob(f".{path.name}.partial"))
    dpo_record = _provenance(dpo_dir)
    from core.provenance import weights_sha256

    assert dpo_record["parent"]["weights_sha256"] == weights_sha256(sft_dir)
    assert dpo_record["data"]["file"].endswith("dpo.jsonl")


@pytest.mark.slow
def test_dpo_changes_the_policy(sft_dir: Path, dpo_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(sft_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(dpo_dir).state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)
    losses = [r["loss"] for r in _provenance(dpo_dir)["losses"]]
    assert len(losses) == 3 and abs(losses[0] - 0.6931) < 0.01  # policy == reference at step 1: -log(sigmoid(0))


@pytest.mark.slow
def test_same_seed_same_model(data_dir: Path, tmp_path: Path) -> None:
    from core.provenance import weights_sha256

    runs = [train_sft(sft_config(data_dir, tmp_path / f"r{i}", max_steps=3, max_rows=24)) for i in range(2)]
    assert weights_sha256(runs[0]) == weights_sha256(runs[1])
    other = train_sft(sft_config(data_dir, tmp_path / "r2", max_steps=3, max_rows=24, seed=1))
    assert weights_sha256(other) != weights_sha256(runs[0])


@pytest.mark.slow
def test_existing_output_is_kept_unless_overwrite(sft_dir: Path, data_dir: Path) -> None:
    from core.errors import ProbeError
    from core.provenance import weights_sha256

    before = weights_sha256(sft_dir)
    with pytest.raises(ProbeError, match="--overwrite"):
        train_sft(sft_config(data_dir, sft_dir))
    assert weights_sha256(sft_dir) == before


def test_weights_fingerprint_hashes_tensors_of_any_dtype_not_file_bytes(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from core.provenance import weights_sha256

    tensors = {"b": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "a": torch.ones(4, dtype=torch.float16)}
    for name, order, meta in (("x", ["a", "b"], {"format": "pt"}), ("y", ["b", "a"], {"saved_by": "another tool"})):
        (tmp_path / name).mkdir()
        save_file({k: tensors[k] for k in order}, tmp_path / name / "model.safetensors", metadata=meta)
    assert (tmp_path / "x" / "model.safetensors").read_bytes() != (tmp_path / "y" / "model.safetensors").read_bytes()
    assert weights_sha256(tmp_path / "x") == weights_sha256(tmp_path / "y")  # bfloat16 included
    (tmp_path / "z").mkdir()
    save_file({**tensors, "a": torch.full((4,), 2.0, dtype=torch.float16)}, tmp_path / "z" / "model.safetensors")
    assert weights_sha256(tmp_path / "z") != weights_sha256(tmp_path / "x")


@pytest.mark.slow
def test_one_weights_fingerprint_links_provenance_to_the_run_that_recorded_it(
    sft_dir: Path, dpo_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    from access.units import NeuronSet
    from probes.config import RecordConfig
    from probes.recording import record_run

    result = record_run(
        RecordConfig(
            sft_dir=sft_dir,
            dpo_dir=dpo_dir,
            data_file=data_dir / "test.jsonl",
            capabilities="priority",
            out_dir=tmp_path / "run",
        ),
        progress=False,
    )
    settings = result.settings
    assert settings.sft_weights_sha256 == _provenance(sft_dir)["weights_sha256"]
    assert settings.dpo_weights_sha256 == _provenance(dpo_dir)["weights_sha256"]
    assert _provenance(dpo_dir)["parent"]["weights_sha256"] == settings.sft_weights_sha256
    from analysis import AnalysisConfig, analyze_run

    analysis = analyze_run(
        result.run_dir, AnalysisConfig(metric="mean_diff"), plots=False
    )  # two prompts: top-k counts rarely differ
    neurons = NeuronSet.load(analysis.neuron_sets[("priority", "mlp_out")])
    assert neurons.model_hashes["dpo"] == _provenance(dpo_dir)["weights_sha256"]


@pytest.mark.parametrize("inside", ["data", "base"])
def test_overwrite_refuses_an_out_that_holds_the_runs_input(
    data_dir: Path, sft_dir: Path, tmp_path: Path, inside: str
) -> None:
    """``--overwrite`` replaces the whole ``--out`` when training ends: an input inside it would be deleted."""
    import shutil

    from core.errors import ProbeError
    from core.provenance import weights_sha256

    out = tmp_path / "out"
    if inside == "data":
        data, base = shutil.copytree(data_dir, out / "data"), None
    else:
        data, base = data_dir, shutil.copytree(sft_dir, out / "base")
    before = {path: path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}
    config = sft_config(data, out, overwrite=True, base=str(base) if base else "tiny")
    flag = "--data" if inside == "data" else "--base"
    with pytest.raises(ProbeError, match=rf"--out .*: holds {flag} .*, which replacing the folder would delete"):
        train_sft(config)
    assert {path: path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()} == before
    assert base is None or weights_sha256(base) == weights_sha256(sft_dir)


def test_dpo_overwrite_refuses_an_out_that_holds_its_sft_model(data_dir: Path, sft_dir: Path, tmp_path: Path) -> None:
    import shutil

    from core.errors import ProbeError
    from core.provenance import weights_sha256

    out = tmp_path / "out"
    policy = shutil.copytree(sft_dir, out / "sft")
    config = DPORunConfig(sft=policy, data=data_dir, out=out, max_steps=1, batch_size=2, overwrite=True)
    with pytest.raises(ProbeError, match=r"--out .*: holds --sft .*, which replacing the folder would delete"):
        train_dpo(config)
    assert weights_sha256(policy) == weights_sha256(sft_dir)
