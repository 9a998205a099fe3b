"""``dictionary_run``: the whole ``probe dictionary`` stage from a plain :class:`~dictionary.config.DictionaryConfig`.

1. Check what can be checked before anything loads: the pair's configs (widths that differ, a layer outside the
   model), ``--text`` (a folder without text), the output folder.
2. Build the text mix (:mod:`dictionary.text`) with the SFT tokenizer, bind the store to the pair's weights and
   tokenizer fingerprints, the site and the text (:mod:`dictionary.store`: another pair's store is refused), plan
   the shards.
3. Harvest the shards the store lacks (estimate first, progress with the time left; resumable). Started by torchrun
   with several processes, each harvests the shards whose index it owns (:class:`probes.distributed.World`, as
   recording shares its batches) and rank 0 alone goes on once every shard is there.
4. Train the dictionary, and for the crosscoder the null dictionary (SFT against SFT), unless the output folder
   already holds them for this store and these settings.
5. Measure on the held-out tokens, classify latents, Latent Scaling; the planted pair's alignment where the pair
   is planted; the causal test on the pair's held-out rows; cards; ``summary_<kind>.json``, ``dictionary_<kind>.html``.

Example:
    >>> default_layer(30), default_layer(4)
    (20, 2)
    >>> dictionary_run(DictionaryConfig())
    Traceback (most recent call last):
    core.errors.ProbeError: --sft: give the SFT model directory (or --pair)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.window import default_window
from core.errors import Interrupted, ProbeError
from core.run_dir import DictionaryDir, Writer
from dictionary.config import DictionaryConfig
from dictionary.records import DictionaryResult, Prepared
from dictionary.store import Store
from dictionary.text import TextMix, build_mix, text_files
from probes.distributed import World, joined, machine_device, reported_once, world_from_env

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from dictionary.coders import Coder

STORE_FORMAT = 1
# Training pace on this project's 2-core CPU (float32 FLOP per second of a dictionary step, ~6 x inputs x d x F
# multiply-adds per token); benchmarks/bench_dictionary.py measures it. Used only for the estimate printed first.
TRAIN_FLOPS = 40e9


def default_layer(n_layers: int) -> int:
    """The middle of the depth-scaled window (:func:`analysis.window.default_window`), rounded down."""
    window = default_window(n_layers)
    return window[(len(window) - 1) // 2]


def prepare(config: DictionaryConfig, world: World | None = None) -> Prepared:
    """Steps 1-2 (module doc): every check that needs no model, then the text and the bound store (bound by rank 0
    of a data-parallel run, then read by every rank)."""
    from access.pair import check_pair_configs
    from core.models import load_tokenizer
    from core.paths import check_output_dir
    from dictionary.harvest import plan_shards

    sft_dir, dpo_dir = config.models.sft, config.models.dpo
    shape = check_pair_configs(sft_dir, dpo_dir)
    layer = default_layer(shape.n_layers) if config.layer is None else config.layer
    if layer >= shape.n_layers:
        raise ProbeError(f"--layer {layer}: the model has {shape.n_layers} layers (0-{shape.n_layers - 1})")
    if config.text is not None:
        text_files(Path(config.text))
    out = (
        Path(config.out_dir)
        if config.out_dir is not None
        else Path("runs") / f"dictionary-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    check_output_dir(out, "--out", writer=Writer.DICTIONARY)
    tokenizer = load_tokenizer(sft_dir, "--sft")
    mix = build_mix(
        tokenizer,
        tokens=config.tokens,
        context=config.context,
        chat_data=Path(config.chat_data) if config.chat_data is not None else None,
        text=Path(config.text) if config.text is not None else None,
        seed=config.seed,
    )
    binding = _binding(config, layer, tokenizer, mix)
    store = Store(DictionaryDir(out).store)
    plan = plan_shards([len(s.ids) for s in mix.sequences], config.max_batch_tokens, config.shard_tokens)
    world = world or World()
    world.on_main(lambda: store.bind(binding, {"shards": len(plan), "tokens": mix.tokens(), "mix": mix.by_source()}))
    return Prepared(config, shape, layer, out, tokenizer, mix, store, plan, binding)


def _binding(config: DictionaryConfig, layer: int, tokenizer: PreTrainedTokenizerBase, mix: TextMix) -> dict[str, Any]:
    from core.provenance import tokenizer_sha256, weights_sha256

    return {
        "format": STORE_FORMAT,
        "sft_weights_sha256": weights_sha256(config.models.sft),
        "dpo_weights_sha256": weights_sha256(config.models.dpo),
        "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "layer": layer,
        "hook": config.hook,
        "context": config.context,
        "max_batch_tokens": config.max_batch_tokens,
        "shard_tokens": config.shard_tokens,
        "dtype": "float32",
        "text_sha256": mix.digest(),
    }


def dictionary_run(config: DictionaryConfig, progress: bool = True) -> DictionaryResult:
    """The stage (module doc); a Ctrl-C says what is kept and how to resume."""
    import sys

    from core.progress import is_terminal, quiet_library_bars

    if not (progress and is_terminal(sys.stderr)):  # --quiet, or a log: transformers' "Loading weights" bars off
        quiet_library_bars()
    world = world_from_env()
    with reported_once(world):
        device = machine_device(config.device, world)  # before the group starts and before anything loads
        with joined(world):
            return _run(config, world, device, progress)


def _run(config: DictionaryConfig, world: World, device: str | None, progress: bool) -> DictionaryResult:
    """Every rank: prepare and harvest its shards; rank 0 alone then trains, measures and reports."""
    prepared = world.agree(lambda: prepare(config, world))
    try:
        world.agree(lambda: _harvest(prepared, progress and world.is_main, world, device))
        if not world.is_main:
            return DictionaryResult(prepared.out, {}, [], is_main=False)
        _check_complete(prepared)
        coders = _train_all(prepared, progress)
        from dictionary.report import evaluate_and_report

        return evaluate_and_report(prepared, coders, progress)
    except KeyboardInterrupt:
        kept = prepared.store.count()
        raise Interrupted(
            f"stopped; {kept} of {len(prepared.plan)} store shards are kept in {prepared.store.root}; rerun the "
            f"same command (with --out {prepared.out}) to resume"
        ) from None


def harvest_seconds(tokens: int, prepared: Prepared) -> float | None:
    """The harvest's CPU estimate: both models up to the layer, at the recording's measured pace (core.pace)."""
    from core.pace import parameter_count, prompt_seconds, sized

    parameters = parameter_count(prepared.config.models.sft)
    if not sized("cpu", parameters):
        return None
    depth = (prepared.layer + 1) / prepared.shape.n_layers
    return prompt_seconds(tokens, models=2 * depth, parameters=parameters)


def _check_complete(prepared: Prepared) -> None:
    """Rank 0 after the harvest: every shard is in the store (other nodes wrote theirs where rank 0 sees them)."""
    missing = [i for i in range(len(prepared.plan)) if not prepared.store.shard(i).is_file()]
    if missing:
        raise ProbeError(
            f"{len(missing)} store shards harvested by other processes are not in {prepared.store.shards}: with "
            "several nodes, --out must be a folder every node sees; rerun the same command to resume"
        )


def _harvest(prepared: Prepared, progress: bool, world: World | None = None, device: str | None = None) -> None:
    """This process's pending shards (all of them in one process), with an estimate and progress (the ranks meet
    after it, in :meth:`~probes.distributed.World.agree`)."""
    from access.pair import load_pair
    from core.chat import pad_id_of
    from core.progress import Stage
    from dictionary.harvest import Site, harvest, pending_shards

    world = world or World()
    pending = pending_shards(prepared.store, len(prepared.plan), world.owns)
    if not pending:
        return
    tokens = sum(prepared.mix.sequences[i].kept for index in pending for b in prepared.plan[index] for i in b)
    where = device if world.distributed else prepared.config.device
    pair = load_pair(prepared.config.models.sft, prepared.config.models.dpo, device=where)
    device_cpu = str(pair.device).startswith("cpu")
    estimate = harvest_seconds(tokens, prepared) if device_cpu else None
    bar = (
        Stage(
            f"harvest {prepared.config.hook} layer {prepared.layer}",
            tokens,
            unit="tokens",
            step="batch",
            estimate_s=estimate,
        )
        if progress
        else None
    )
    try:
        harvest(
            prepared.store,
            (pair.sft, pair.dpo),
            Site(prepared.config.hook, prepared.layer),
            prepared.mix,
            prepared.plan,
            pad_id_of(pair.tokenizer),
            pending,
            bar,
        )
    finally:
        if bar is not None:
            bar.close()


def _settings_key(prepared: Prepared, kind: str) -> dict[str, Any]:
    config = prepared.config
    return {
        "store": prepared.store.digest(),
        "kind": kind,
        "latents": config.latents(_width(prepared)),
        "k": config.active(),
        "batch_size": config.batch_size,
        "epochs": config.epochs,
        "seed": config.seed,
    }


def _width(prepared: Prepared) -> int:
    return int(prepared.store.read(0).sft.shape[1])


def _train_all(prepared: Prepared, progress: bool) -> dict[str, Coder]:
    kinds = [prepared.config.kind] + (["null"] if prepared.config.null and prepared.config.kind == "crosscoder" else [])
    return {kind: _trained(prepared, kind, progress) for kind in kinds}


def _trained(prepared: Prepared, kind: str, progress: bool) -> Coder:
    """The dictionary of ``kind``, from ``OUT/<kind>.pt`` when it was trained on this store with these settings."""
    import torch

    from core.atomic import atomic_file
    from core.progress import Stage
    from dictionary.coders import Coder
    from dictionary.train import TrainSettings, train

    config, width = prepared.config, _width(prepared)
    key = _settings_key(prepared, kind)
    path = DictionaryDir(prepared.out).weights(kind)
    inputs = 1 if kind == "diff-sae" else 2
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        if saved.get("key") == json.dumps(key, sort_keys=True):
            coder = Coder(inputs, width, key["latents"], key["k"])
            coder.load_state_dict(saved["state"])
            return coder
    settings = TrainSettings(kind, key["latents"], key["k"], config.batch_size, config.epochs, config.seed)
    n_train = prepared.mix.tokens(held_out=False)
    steps_tokens = config.epochs * (n_train // config.batch_size) * config.batch_size
    estimate = steps_tokens * 6 * inputs * width * key["latents"] / TRAIN_FLOPS
    name = {"crosscoder": "crosscoder", "diff-sae": "diff-SAE", "null": "null crosscoder (SFT against SFT)"}[kind]
    bar = Stage(f"train {name}", steps_tokens, unit="tokens", step="step", estimate_s=estimate) if progress else None
    try:
        coder = train(prepared.store, list(range(len(prepared.plan))), settings, n_train, bar.update if bar else None)
    finally:
        if bar is not None:
            bar.close()
    with atomic_file(path) as handle:
        torch.save({"key": json.dumps(key, sort_keys=True), "state": coder.state_dict()}, handle)
    return coder
