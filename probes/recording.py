"""``record_run``: record both models' activations on each capability's prompts into a run dir.

The order of work is chosen so that every user mistake is caught before anything
expensive happens, and every expensive step survives an interruption:

1. validate the config (:class:`probes.config.RecordConfig`);
2. check the pair's configs and the layer selection (no weights loaded yet);
3. render every prompt with the SFT tokenizer (a row carrying control-token text is
   refused here, named by file and line, before the run dir exists);
4. hash weights, tokenizer, chat template and data; refuse a run dir recorded with
   other settings (``run.json`` / the file's ``settings``); load the pair (tokenizers and
   module layouts compared), skip what is done; only then write ``run.json``;
5. per batch: both models through the backend, one shard written atomically;
6. consolidate the shards into ``activations.h5`` (see :mod:`probes.journal`).

Example:
    >>> result = record_run(RecordConfig(capabilities="multi_turn", sft_dir="m/sft", dpo_dir="m/dpo"))   # doctest: +SKIP
    >>> result.run_dir, result.counts                                                                     # doctest: +SKIP
    (PosixPath('runs/20261122-081500_multi_turn'), {'multi_turn': 400})
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ProbeError
from probes.config import RecordConfig
from probes.hook_points import TL_NAMES, parse_layers
from probes.journal import (ConsolidationPlan, Shard, committed_ids, consolidate, h5_settings, list_shards, read_run_json,
                            run_lock, shard_sample_ids, write_run_json, write_shard)
from core.chat import pad_id_of
from probes.prompts import PromptSet, build_prompts, iter_batches

# Settings that must be equal for two recordings to share one run dir.
COMPAT_KEYS: tuple[str, ...] = (
    "sft_weights_sha256", "dpo_weights_sha256", "tokenizer_sha256", "chat_template_sha256", "data_sha256",
    "hooks", "layers", "position", "backend", "dtype", "store_dtype", "add_generation_prompt",
)
FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass
class RunResult:
    """What a call did: counts per capability in the file, recorded now, and already there before."""

    run_dir: Path
    counts: dict[str, int]
    recorded: dict[str, int]
    resumed: dict[str, int]
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def skipped(self) -> dict[str, int]:
        """Alias of :attr:`resumed`: samples skipped because they were already recorded."""
        return self.resumed


def resolve_sources(config: RecordConfig) -> tuple[Path, Path, Path]:
    """(sft_dir, dpo_dir, data_file); the recorder never builds a pair itself (the CLI's ``--pair`` does)."""
    if config.sft_dir is None or config.dpo_dir is None or config.data_file is None:
        raise ProbeError("recording needs --sft, --dpo and --data (the `probe` command fills them from --pair)")
    return config.sft_dir, config.dpo_dir, config.data_file


def default_run_dir(config: RecordConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    caps = "all" if len(config.capability_names) == 5 else "+".join(config.capability_names)
    base = config.runs_root / f"{stamp}_{caps}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _settings(config: RecordConfig, sources: tuple[Path, Path, Path], layers: list[int], dtype: str, tokenizer: Any) -> dict[str, Any]:
    from core.provenance import chat_template_sha256, file_sha256, tokenizer_sha256, toolkit_version, weights_sha256

    sft_dir, dpo_dir, data_file = sources
    return {
        "sft_dir": str(sft_dir.resolve()), "dpo_dir": str(dpo_dir.resolve()), "data_file": str(data_file.resolve()),
        "sft_weights_sha256": weights_sha256(sft_dir), "dpo_weights_sha256": weights_sha256(dpo_dir),
        "tokenizer_sha256": tokenizer_sha256(tokenizer), "chat_template_sha256": chat_template_sha256(tokenizer),
        "data_sha256": file_sha256(data_file),
        "hooks": list(config.hooks), "layers": layers, "position": config.position, "backend": config.backend,
        "dtype": dtype, "store_dtype": config.store_dtype, "add_generation_prompt": config.add_generation_prompt,
        "seed": config.seed, "toolkit_version": toolkit_version(),
        "position_policy": "last real prompt token" if config.position == "last" else "mean over real prompt tokens after the first",
    }


def check_compatible(run_dir: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """Refuse to mix settings into an existing run dir; returns the existing settings, if any."""
    existing = read_run_json(run_dir)
    existing = existing["settings"] if existing else h5_settings(run_dir)
    if not existing:
        return None
    diffs = [f"{k}: run has {existing.get(k)!r}, this call asks {settings[k]!r}" for k in COMPAT_KEYS if existing.get(k) != settings[k]]
    if diffs:
        raise ProbeError(f"{run_dir} was recorded with other settings, so the new samples would not be comparable "
                         f"({'; '.join(diffs[:4])}); record into another --out")
    return existing


def _done_prefix(run_dir: Path, prompts: PromptSet) -> int:
    """How many prompts (a prefix of the recording order) are already in the file or the journal."""
    done = set(committed_ids(run_dir, prompts.capability).tolist())
    for path in list_shards(run_dir, prompts.capability):
        done.update(shard_sample_ids(path).tolist())
    first = len(done)
    if set(prompts.sample_ids[:first]) != done:
        raise ProbeError(f"{run_dir}: the recorded samples of {prompts.capability} are not a prefix of this run's prompt order "
                         "(was the data file or tokenizer changed?); record into another --out")
    return first


def _to_store(values: Any, store_dtype: str, where: str) -> np.ndarray:
    array = values.numpy()
    if not np.isfinite(array).all():
        raise ProbeError(f"{where}: the model produced NaN or inf activations (try --dtype float32)")
    if store_dtype == "float16" and np.abs(array).max(initial=0.0) > FLOAT16_MAX:
        raise ProbeError(f"{where}: activations exceed the float16 range ({np.abs(array).max():.3g}); use --store-dtype float32")
    return array.astype(store_dtype)


def _record_capability(run_dir: Path, prompts: PromptSet, first: int, backends: dict[str, Any], config: RecordConfig,
                       pad_id: int, bar: Any) -> int:
    recorded = 0
    for batch in iter_batches(prompts, first, config.batch_size, pad_id):
        acts = {}
        for model, backend in backends.items():
            for hook, values in backend.record(batch).items():
                acts[(model, hook)] = _to_store(values, config.store_dtype, f"{model} {prompts.capability} {hook} batch at {batch.start}")
        write_shard(run_dir, Shard(prompts.capability, batch.start, np.asarray(batch.sample_ids), batch.tasks,
                                   np.asarray(batch.lengths), batch.texts, acts))
        recorded += len(batch)
        if bar is not None:
            bar.update(len(batch))
    return recorded


def record_run(config: RecordConfig, progress: bool = True) -> RunResult:
    """Record (or resume recording) the config's capabilities into a run dir; see the module docstring."""
    import torch

    from core.models import load_tokenizer
    from data_synthesis.io import read_test_rows
    from probes.backends import make_backend
    from probes.pair import check_pair_configs, load_pair, resolve_device, resolve_dtype
    from core.provenance import library_versions, toolkit_version

    started = time.perf_counter()
    sources = resolve_sources(config)
    shape = check_pair_configs(sources[0], sources[1])
    layers = parse_layers(config.layer_spec(), shape.n_layers)
    device = resolve_device(config.device)
    dtype = str(resolve_dtype(config.dtype, device)).removeprefix("torch.")
    rows = read_test_rows(sources[2])
    _check_rows(rows, config, sources[2])
    tokenizer = load_tokenizer(sources[0], "--sft")
    if not tokenizer.chat_template:
        raise ProbeError(f"--sft {sources[0]}: the tokenizer has no chat template; prompts cannot be rendered as the model was trained")
    # rendered before the run dir is touched: a refused row (control-token text) leaves no run.json
    # behind that would then refuse the corrected data file as "other settings"
    prompt_sets = [build_prompts(tokenizer, rows, cap, add_generation_prompt=config.add_generation_prompt, source=sources[2])
                   for cap in config.capabilities]  # type: ignore[union-attr]
    settings = _settings(config, sources, layers, dtype, tokenizer)
    run_dir = config.out_dir or default_run_dir(config)
    with run_lock(run_dir):
        existing = check_compatible(run_dir, settings)
        torch.manual_seed(config.seed)
        pair = load_pair(sources[0], sources[1], device=config.device, dtype=config.dtype)  # same tokenizer (load_pair compares them)
        pad_id = pad_id_of(pair.tokenizer)
        firsts = {p.capability: _done_prefix(run_dir, p) for p in prompt_sets}
        backends = {name: make_backend(config.backend, model, hooks=config.hooks, layers=layers, position=config.position,
                                       tokenizer=pair.tokenizer, model_dir=sources[0] if name == "sft" else sources[1])
                    for name, model in pair.models().items()}
        if read_run_json(run_dir) is None:  # only once the pair and the prompts are accepted: a refused call leaves no settings behind
            write_run_json(run_dir, {"settings": existing or settings})
        bar = _progress_bar(sum(len(p) - firsts[p.capability] for p in prompt_sets), progress)
        recorded = {p.capability: _record_capability(run_dir, p, firsts[p.capability], backends, config, pad_id, bar) for p in prompt_sets}
        if bar is not None:
            bar.close()
        provenance = {"versions": library_versions(), "device": pair.device, "batch_size": config.batch_size,
                      "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        plan = ConsolidationPlan(existing or settings, pair.info, layers, {h: TL_NAMES[h] for h in config.hooks}, toolkit_version(), provenance)
        consolidate(run_dir, [p.capability for p in prompt_sets], plan)
        counts = {p.capability: int(len(committed_ids(run_dir, p.capability))) for p in prompt_sets}
    return RunResult(run_dir, counts, recorded, firsts, existing or settings, time.perf_counter() - started)


def _check_rows(rows: list[Any], config: RecordConfig, data_file: Path) -> None:
    """Refuse a data file with no row for any requested capability (nothing would be recorded)."""
    from data_synthesis.io import group_by_capability

    groups = group_by_capability(rows, config.capabilities)  # type: ignore[arg-type]
    if not any(groups.values()):
        raise ProbeError(f"--data {data_file}: no row belongs to {', '.join(config.capability_names)} "
                         f"({len(rows)} rows in the file); check the task names or pick another --capability")


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="prompt", desc="recording sft+dpo", dynamic_ncols=True)
