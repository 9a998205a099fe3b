"""The default pair cache: built once, verified on every call, never used half-finished.

A miniature recipe (3 roles, a 2-layer base, a couple of steps) exercises the real
build path: synthesis, DPO shaping, SFT, DPO, marker, atomic rename.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import default_pair as dp
from training.default_pair import DefaultPairRecipe, ensure_default_pair, verify

TINY = {"n_layers": 2, "hidden_size": 32, "intermediate_size": 64, "vocab_size": 400}
MINI = DefaultPairRecipe(
    base="tiny",
    n_roles=3,
    sft={"recipe": "tiny", "tiny_spec": TINY, "max_steps": 2, "max_rows": 16, "batch_size": 4},
    dpo={"recipe": "tiny", "max_steps": 1, "max_rows": 8, "batch_size": 4},
    dropped_violations=dp.DROPPED_VIOLATIONS,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    ensure_default_pair(home, progress=False, recipe=MINI)
    return home


@pytest.mark.slow
def test_build_produces_a_verified_pair(built: Path) -> None:
    pair = ensure_default_pair(built, progress=False, recipe=MINI)
    assert pair.root == built / "tiny_pair" and verify(pair.root, MINI) is None and pair.base_dir is None
    for path in (pair.test_file, pair.sft_dir / "model.safetensors", pair.dpo_dir / "provenance.json"):
        assert path.is_file()
    marker = json.loads((pair.root / "COMPLETE.json").read_text())
    assert marker["recipe"]["n_roles"] == 3 and "sft/model.safetensors" in marker["files"]
    assert not list(built.glob(".tiny_pair.build-*"))


@pytest.mark.slow
def test_dpo_data_is_shaped(built: Path) -> None:
    from core.rows import read_dpo_rows

    data = built / "tiny_pair" / "data"
    full, shaped = read_dpo_rows(data / "dpo_full.jsonl"), read_dpo_rows(data / "dpo.jsonl")
    kept = {r.extra["violation"] for r in shaped}
    assert kept and not kept & set(dp.DROPPED_VIOLATIONS)
    assert len(shaped) == sum(r.extra["violation"] not in dp.DROPPED_VIOLATIONS for r in full) < len(full)


@pytest.mark.slow
def test_second_call_does_not_rebuild(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("rebuilt a complete pair")

    monkeypatch.setattr(dp, "build_default_pair", boom)
    assert ensure_default_pair(built, progress=False, recipe=MINI).sft_dir.is_dir()


@pytest.mark.slow
def test_tampering_and_recipe_changes_are_detected(built: Path, tmp_path: Path) -> None:
    import shutil

    copy = Path(shutil.copytree(built / "tiny_pair", tmp_path / "copy"))
    assert verify(copy, MINI) is None
    assert "another recipe" in str(verify(copy, DefaultPairRecipe(base="tiny", n_roles=4)))
    with (copy / "dpo" / "model.safetensors").open("ab") as handle:
        handle.write(b"x")
    assert "dpo/model.safetensors changed" in str(verify(copy, MINI))
    (copy / "COMPLETE.json").unlink()
    assert "did not finish" in str(verify(copy, MINI))


@pytest.mark.slow
def test_interrupted_build_leaves_nothing_usable_and_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import training.dpo

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(training.dpo, "train_dpo", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_default_pair(tmp_path, progress=False, recipe=MINI)
    assert not (tmp_path / "tiny_pair").exists() and not list(tmp_path.glob(".tiny_pair.build-*"))
    monkeypatch.undo()
    (tmp_path / "tiny_pair" / "sft").mkdir(parents=True)  # a half-copied pair without its marker
    pair = ensure_default_pair(tmp_path, progress=False, recipe=MINI)
    assert verify(pair.root, MINI) is None and pair.dpo_dir.is_dir()
