"""``record_run``: record both models' (or three models') activations on each capability's prompts into a run dir.

The order of work is chosen so that every user mistake is caught before anything
expensive happens, and every expensive step survives an interruption:

1. validate the config (:class:`probes.config.RecordConfig`);
2. check the pair's configs and the layer selection (no weights loaded yet);
3. render every prompt with the SFT tokenizer (a row carrying control-token text is
   refused here, named by file and line, before the run dir exists);
4. hash weights, tokenizer, chat template and data; refuse a run dir recorded with
   other settings (the settings file / the HDF5 file's ``settings``; a start that recorded
   nothing binds nothing); load the pair (tokenizers and module layouts compared), skip what
   is done; only then write the settings file;
5. plan the batches (:mod:`probes.batching`: up to ``--batch-size`` prompts and
   ``--max-batch-tokens`` padded tokens each), then per batch: both models through the
   backend, one shard written atomically;
6. consolidate the shards into the run's HDF5 file (see :mod:`probes.journal`).

With ``--position response_mean|response_last`` each prompt is followed by a teacher-forced
response (:mod:`probes.responses`), rendered in step 3; with ``--base`` a third model, ``base``,
is checked in step 2, loaded beside the pair in step 4 and recorded in the same batches and
shards in step 5. Unless ``--local none``, the forward that records SFT (or DPO) also runs the other
model's block *l* on its input to block *l*, for every recorded layer (:mod:`access.local_blocks`), stored
beside the models as ``dpo_on_sft`` (or ``sft_on_dpo``): the local basis of ``probe analyze --basis local``.

Under torchrun / accelerate launch every process runs steps 1-5 on its own share of the
batches and rank 0 alone holds the lock, writes the settings file and consolidates
(:mod:`probes.distributed`); the file is the one a single process would write.

Example:
    >>> from probes.samples import SampleColumns
    >>> samples = SampleColumns([4, 9, 2], ["t"] * 3, [2, 2, 3], ["a", "b", "c"])   # data rows 4, 9 and 2
    >>> prompts = PromptSet("multi_turn", samples, [[1, 2], [3, 4], [5, 6, 7]])
    >>> [w.positions for w in plan_work([prompts], {"multi_turn": {9}}, batch_size=2, max_batch_tokens=64)]
    [[0], [2]]
    >>> record_run(RecordConfig(capabilities="multi_turn"))
    Traceback (most recent call last):
    core.errors.ProbeError: recording needs --sft, --dpo and --data (the `probe` command fills them from --pair)
    >>> result = record_run(RecordConfig(capabilities="multi_turn", sft_dir="m/sft", dpo_dir="m/dpo"))  # doctest: +SKIP
    >>> result.run_dir, result.counts  # doctest: +SKIP
    (PosixPath('runs/20261122-081500_multi_turn'), {'multi_turn': 400})
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from access.directions import DIRECTIONS, directions_of
from access.hook_points import parse_layers
from access.hook_table import HOOK_TABLE
from core.chat import pad_id_of
from core.errors import Interrupted, ProbeError
from core.flops import TokenPasses
from core.models import warn
from core.pace import parameter_count, prompt_seconds, sized
from core.progress import Stage, is_terminal, quiet_library_bars
from core.provenance import MadeBy
from core.records import to_json
from core.run_dir import RunDir
from probes.batching import pending_batches, plan_batches
from probes.config import RecordConfig
from probes.distributed import PeerLost, World, joined, machine_device, reported_once, world_from_env
from probes.journal import (
    ConsolidationPlan,
    Shard,
    committed_ids,
    consolidate,
    h5_settings,
    seal_fault,
    settings_digest,
    shard_sample_ids,
    write_failure,
    write_shard,
)
from probes.prompts import PromptSet, build_prompts, make_batch
from probes.responses import is_response_position, read_rows, response_lookup
from probes.settings import RunSettings
from probes.store import CAPABILITY_ROWS, INPUTS_WEIGHTS

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.pair import ModelPair

FLOAT16_MAX = float(np.finfo(np.float16).max)

# a local direction runs the other model's block on each recorded layer's input: README, about 1.4x the recording
LOCAL_COST = 0.4


@dataclass
class RunResult:
    """What a call did: counts per capability in the file, recorded now, and already there before."""

    run_dir: Path
    counts: dict[str, int]
    recorded: dict[str, int]
    resumed: dict[str, int]
    settings: RunSettings = field(default_factory=RunSettings)
    seconds: float = 0.0
    rank: int = 0
    world_size: int = 1
    warnings: list[str] = field(default_factory=list)

    @property
    def is_main(self) -> bool:
        """False in the helper processes of a data-parallel run: only rank 0 reports."""
        return self.rank == 0

    @property
    def skipped(self) -> dict[str, int]:
        """Alias of :attr:`resumed`: samples skipped because they were already recorded."""
        return self.resumed


def resolve_sources(config: RecordConfig) -> tuple[Path, Path, Path]:
    """(sft_dir, dpo_dir, data_file); the recorder never builds a pair itself (the CLI's ``--pair`` does)."""
    if config.models.sft_dir is None or config.models.dpo_dir is None or config.data_file is None:
        raise ProbeError("recording needs --sft, --dpo and --data (the `probe` command fills them from --pair)")
    return config.models.sft, config.models.dpo, config.data_file


def default_run_dir(config: RecordConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    caps = "all" if len(config.capability_names) == 5 else "+".join(config.capability_names)
    base = config.runs_root / f"{stamp}_{caps}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _position_policy(config: RecordConfig) -> str:
    if is_response_position(config.position):
        which = "the teacher-forced " + (
            "reference answer" if config.response == "reference" else f"{config.response} DPO reply"
        )
        return f"{'last token' if config.position == 'response_last' else 'mean over the tokens'} of {which}"
    return "last real prompt token" if config.position == "last" else "mean over real prompt tokens after the first"


def _settings(
    config: RecordConfig,
    sources: tuple[Path, Path, Path],
    layers: list[int],
    dtype: str,
    tokenizer: PreTrainedTokenizerBase,
) -> RunSettings:
    from core.provenance import chat_template_sha256, file_sha256, tokenizer_sha256, toolkit_version, weights_sha256

    sft_dir, dpo_dir, data_file = sources
    responses = config.responses_file if is_response_position(config.position) else None
    return RunSettings(
        sft_dir=str(sft_dir.resolve()),
        dpo_dir=str(dpo_dir.resolve()),
        data_file=str(data_file.resolve()),
        sft_weights_sha256=weights_sha256(sft_dir),
        dpo_weights_sha256=weights_sha256(dpo_dir),
        tokenizer_sha256=tokenizer_sha256(tokenizer),
        chat_template_sha256=chat_template_sha256(tokenizer),
        data_sha256=file_sha256(data_file),
        hooks=list(config.hooks),
        layers=layers,
        position=config.position,
        backend=config.backend,
        dtype=dtype,
        store_dtype=config.store_dtype,
        add_generation_prompt=config.add_generation_prompt,
        seed=config.seed,
        toolkit_version=toolkit_version(),
        position_policy=_position_policy(config),
        response=config.response if is_response_position(config.position) else "",
        responses_file=str(responses.resolve()) if responses else "",
        responses_sha256=file_sha256(responses) if responses else "",
        base_dir=str(base.resolve()) if (base := config.models.base) else "",
        base_weights_sha256=weights_sha256(base) if base else "",
        local="" if config.local == "none" else config.local,
    )


def check_compatible(run_dir: Path, settings: RunSettings) -> RunSettings | None:
    """Refuse to mix settings into an existing run dir; returns the existing settings, if any.

    Settings left by a start that recorded nothing (it failed on its first batch, say) bind
    nothing: the corrected call reuses the directory.
    """
    run = RunDir(run_dir)
    if not run.has_recordings():
        return None
    existing = run.read_settings_file()
    raw, where = (existing["settings"], run.settings_file) if existing else (h5_settings(run_dir), run.activations)
    if not raw:
        return None
    recorded = RunSettings.read(raw, str(where))
    diffs = recorded.differences(settings)
    if diffs:
        hint = " (or pass --local none to resume a run recorded without it)" if recorded.local != settings.local else ""
        raise ProbeError(
            f"{run_dir} was recorded with other settings, so the new samples would not be comparable "
            f"({'; '.join(diffs[:4])}); record into another --out{hint}"
        )
    return recorded


def done_ids(run_dir: Path, prompts: PromptSet) -> set[int]:
    """Sample ids of a capability already in the file or the journal; refuses ids this run's prompts do not have."""
    done = set(committed_ids(run_dir, prompts.capability).tolist())
    settings = settings_digest(run_dir)
    for path in RunDir(run_dir).shards(prompts.capability):
        ids = shard_sample_ids(path)
        fault = seal_fault(path, settings)
        if fault is None:
            done.update(ids.tolist())
        else:
            path.unlink()
            warn(f"{path}: {fault}; removed, its batch is recorded again")
    unknown = done - set(prompts.samples.sample_ids.tolist())
    if unknown:
        raise ProbeError(
            f"{run_dir}: {len(unknown)} recorded samples of {prompts.capability} are not among this run's prompts "
            "(was the data file or tokenizer changed?); record into another --out"
        )
    return done


def _to_store(values: Any, store_dtype: str, where: str) -> np.ndarray:
    array = values.numpy()
    if not np.isfinite(array).all():
        raise ProbeError(f"{where}: the model produced NaN or inf activations (try --dtype float32)")
    if store_dtype == "float16" and np.abs(array).max(initial=0.0) > FLOAT16_MAX:
        raise ProbeError(
            f"{where}: activations exceed the float16 range ({np.abs(array).max():.3g}); use --store-dtype float32"
        )
    return np.asarray(array, dtype=store_dtype)


@dataclass(frozen=True)
class Work:
    """One batch still to record: a capability's prompts and the positions that go together."""

    prompts: PromptSet
    positions: list[int]


def plan_work(
    prompt_sets: list[PromptSet], done: dict[str, set[int]], batch_size: int, max_batch_tokens: int
) -> list[Work]:
    """Every pending batch of every capability, in plan order (the same list in every process)."""
    work: list[Work] = []
    for prompts in prompt_sets:
        spans = plan_batches([len(i) for i in prompts.ids], batch_size, max_batch_tokens)
        work += [
            Work(prompts, positions)
            for positions in pending_batches(spans, prompts.samples.sample_ids.tolist(), done[prompts.capability])
        ]
    return work


def _record_batches(
    run_dir: Path,
    work: list[Work],
    backends: dict[str, Any],
    store_dtype: str,
    pad_id: int,
    bar: Any,
    local: dict[str, tuple[str, Any]] | None = None,
) -> dict[str, int]:
    """Every batch of ``work``: each model through its backend and, where ``local`` has a recorder for that model
    (``{source model: (direction, LocalRecorder)}``), the other model's blocks on its block inputs in the same
    forward; one shard per batch."""
    recorded: dict[str, int] = {}
    settings = settings_digest(run_dir)  # run.json is written before the first batch and not changed after
    for item in work:
        batch = make_batch(item.prompts, item.positions, pad_id)
        acts = {}
        for model, backend in backends.items():
            for group, values in _record_model(batch, model, backend, (local or {}).get(model)).items():
                for hook, value in values.items():
                    acts[(group, hook)] = _to_store(
                        value, store_dtype, f"{group} {batch.capability} {hook} batch at {batch.start}"
                    )
        try:
            write_shard(run_dir, Shard(batch.capability, batch.start, batch.samples, acts), settings)
        except OSError as exc:
            raise write_failure(run_dir, exc) from None
        recorded[batch.capability] = recorded.get(batch.capability, 0) + len(batch)
        if bar is not None:
            bar.update(len(batch))
    return recorded


def _record_model(batch: Any, model: str, backend: Any, local: tuple[str, Any] | None) -> dict[str, Any]:
    """``{model: {hook: values}}``, plus ``{direction: {hook: values}}`` when a local recorder rides on this model."""
    if local is None:
        return {model: backend.record(batch)}
    direction, recorder = local
    local_values = recorder.record(batch, lambda: backend.record(batch))
    return {model: recorder.last, direction: local_values}


def record_run(config: RecordConfig, progress: bool = True) -> RunResult:
    """Record (or resume recording) the config's capabilities into a run dir; see the module docstring.

    Started by torchrun / accelerate launch with several processes, each records its share
    of the batches and rank 0 consolidates (:mod:`probes.distributed`).
    """
    world = world_from_env()
    with reported_once(world):
        device = machine_device(config.device, world)  # before the group starts and before anything loads
        try:
            with joined(world):
                return _record(config, world, device, progress)
        except KeyboardInterrupt:  # before the run dir was chosen (later ones say what was kept)
            raise Interrupted("recording stopped before it began; rerun the same command") from None


@dataclass
class _Inputs:
    sources: tuple[Path, Path, Path]
    layers: list[int]
    dtype: str
    tokenizer: PreTrainedTokenizerBase
    prompt_sets: list[PromptSet]


def _prepare(config: RecordConfig) -> _Inputs:
    """Everything checked before a model is loaded: configs, layers, rows, rendering."""
    from access.pair import check_base_config, check_pair_configs, resolve_device, resolve_dtype
    from core.models import load_tokenizer
    from core.paths import check_output_dir
    from core.run_dir import Writer

    sources = resolve_sources(config)
    if config.out_dir is not None:
        check_output_dir(config.out_dir, "--out", writer=Writer.RUN)
    shape = check_pair_configs(sources[0], sources[1])
    if config.models.base is not None:
        check_base_config(sources[0], config.models.base)
    layers = parse_layers(config.layer_spec(), shape.n_layers)
    dtype = str(resolve_dtype(config.dtype, resolve_device(config.device))).removeprefix("torch.")
    rows = read_rows(sources[2])
    _check_rows(rows, config, sources[2])
    response = (
        response_lookup(rows, config.response, config.responses_file, sources[2])
        if is_response_position(config.position)
        else None
    )
    tokenizer = load_tokenizer(sources[0], "--sft")
    if not tokenizer.chat_template:
        raise ProbeError(
            f"--sft {sources[0]}: the tokenizer has no chat template; "
            "prompts cannot be rendered as the model was trained"
        )
    # rendered before the run dir is touched: a refused row (control-token text) leaves nothing behind
    prompt_sets = [
        build_prompts(
            tokenizer,
            rows,
            cap,
            add_generation_prompt=config.add_generation_prompt,
            source=sources[2],
            max_tokens=shape.max_positions,
            response=response,
        )
        for cap in config.parsed_capabilities
    ]
    return _Inputs(sources, layers, dtype, tokenizer, prompt_sets)


def _batch_budget(config: RecordConfig, pair: ModelPair, prompt_sets: list[PromptSet], world: World) -> int:
    """``--max-batch-tokens``, or the device's default; the smallest over ranks, so that all plan the same batches."""
    from probes.batching import default_max_batch_tokens

    if config.max_batch_tokens is not None:
        return config.max_batch_tokens
    import torch

    dtype_bytes = torch.tensor([], dtype=pair.dtype).element_size()
    longest = max(len(ids) for prompts in prompt_sets for ids in prompts.ids)
    return int(min(world.gather(default_max_batch_tokens(pair.device, pair.sft.config, dtype_bytes, longest))))


def _start_on_main(run_dir: Path, settings: RunSettings, prompt_sets: list[PromptSet]) -> dict[str, set[int]]:
    """Rank 0, under the lock, once the pair is loaded: what is already recorded; the settings file keeps them."""
    run = RunDir(run_dir)
    run.remove_stale_temp()
    done = {p.capability: done_ids(run_dir, p) for p in prompt_sets}
    try:
        run.write_settings_file(to_json(settings))
    except OSError as exc:
        raise write_failure(run_dir, exc) from None
    return done


def _record(config: RecordConfig, world: World, device: str | None, progress: bool) -> RunResult:
    started = time.perf_counter()
    try:
        inputs = world.agree(lambda: _prepare(config))
        run_dir = world.on_main(lambda: config.out_dir or default_run_dir(config))
    except PeerLost as exc:
        raise _stopped(None, exc) from None
    try:
        return _record_into(run_dir, inputs, config, world, device, progress, started)
    except PeerLost as exc:
        raise _stopped(run_dir, exc) from None
    except KeyboardInterrupt:
        raise _interrupted(run_dir) from None


def _record_into(
    run_dir: Path,
    inputs: _Inputs,
    config: RecordConfig,
    world: World,
    device: str | None,
    progress: bool,
    started: float,
) -> RunResult:
    import torch

    from access.local_blocks import local_recorders

    with ExitStack() as stack:

        def lock_and_settings() -> RunSettings:
            stack.enter_context(RunDir(run_dir).lock())
            settings = _settings(config, inputs.sources, inputs.layers, inputs.dtype, inputs.tokenizer)
            # before the minutes a load takes; the lock keeps it true
            return check_compatible(run_dir, settings) or settings

        settings = world.on_main(lock_and_settings)
        if not (progress and world.is_main and is_terminal(sys.stderr)):  # --quiet, a helper rank, or a log
            quiet_library_bars()  # transformers' "Loading weights" bars
        torch.manual_seed(config.seed)
        pair, models, model_dirs = _load_models(config, inputs, world, device)
        pad_id = pad_id_of(pair.tokenizer)
        budget = _batch_budget(config, pair, inputs.prompt_sets, world)
        done = world.on_main(lambda: _start_on_main(run_dir, settings, inputs.prompt_sets))
        backends = world.agree(lambda: _backends(config, inputs, pair, models, model_dirs))
        local = world.agree(
            lambda: local_recorders(config.local, pair.models(), config.hooks, inputs.layers, config.position)
        )
        work = plan_work(inputs.prompt_sets, done, config.batch_size, budget)
        mine = [item for k, item in enumerate(work) if world.owns(k)]
        seconds = _estimate(mine, model_passes(len(models), config.local), inputs.sources[0], str(pair.device))
        total = sum(len(w.positions) for w in mine)
        bar = _progress_bar(total, progress and world.is_main, world, "+".join(models), seconds)
        try:
            recorded = world.agree(
                lambda: _record_batches(run_dir, mine, backends, config.store_dtype, pad_id, bar, local)
            )
        finally:
            if bar is not None:
                bar.close()
        recorded = _sum_counts(world.gather(recorded))
        call = _call_record(config, inputs, pair, budget, world, recorded)
        world.on_main(lambda: _finish_on_main(run_dir, inputs, pair, settings, call, work))
        counts = world.on_main(
            lambda: {p.capability: len(committed_ids(run_dir, p.capability)) for p in inputs.prompt_sets}
        )
    return _result(run_dir, inputs, settings, counts, recorded, done, started, world)


def _result(
    run_dir: Path,
    inputs: _Inputs,
    settings: RunSettings,
    counts: dict[str, int],
    recorded: dict[str, int],
    done: dict[str, set[int]],
    started: float,
    world: World,
) -> RunResult:
    """What this process recorded, what an earlier run had, and what the store holds now, per capability."""
    resumed = {p.capability: len(done[p.capability]) for p in inputs.prompt_sets}
    recorded = {p.capability: recorded.get(p.capability, 0) for p in inputs.prompt_sets}
    return RunResult(
        run_dir,
        counts,
        recorded,
        resumed,
        settings,
        time.perf_counter() - started,
        world.rank,
        world.size,
        _warnings(settings),
    )


def _load_models(
    config: RecordConfig, inputs: _Inputs, world: World, device: str | None
) -> tuple[ModelPair, dict[str, PreTrainedModel], dict[str, str | Path]]:
    """The pair (and the base, when ``config.models.base`` names one), by role, with the folder each came from."""
    from access.pair import load_base, load_pair

    pair = world.agree(lambda: load_pair(inputs.sources[0], inputs.sources[1], device=device, dtype=config.dtype))
    models = pair.models()
    model_dirs: dict[str, str | Path] = {"sft": inputs.sources[0], "dpo": inputs.sources[1]}
    base_dir = config.models.base
    if base_dir is not None:  # a third model on the same tokens, batches and journal
        base, pair.info["base"] = world.agree(lambda: load_base(base_dir, pair))
        models["base"], model_dirs["base"] = base, base_dir
    return pair, models, model_dirs


def _backends(
    config: RecordConfig,
    inputs: _Inputs,
    pair: ModelPair,
    models: dict[str, PreTrainedModel],
    model_dirs: dict[str, str | Path],
) -> dict[str, Any]:
    """One recording backend per model (``--backend``), each reading ``--hooks`` on the recorded layers."""
    from access.drivers import make_backend

    return {
        name: make_backend(
            config.backend,
            model,
            hooks=config.hooks,
            layers=inputs.layers,
            position=config.position,
            tokenizer=pair.tokenizer,
            model_dir=model_dirs[name],
        )
        for name, model in models.items()
    }


def _call_record(
    config: RecordConfig, inputs: _Inputs, pair: ModelPair, budget: int, world: World, recorded: dict[str, int]
) -> dict[str, Any]:
    """How this recording was made (device, batches, processes, counts), for the store's provenance."""
    return {
        "device": pair.device,
        "dtype": inputs.dtype,
        "batch_size": config.batch_size,
        "max_batch_tokens": budget,
        "processes": world.size,
        "recorded": recorded,
        # every row of each capability in the data file: what a completed recording holds (probes.store)
        CAPABILITY_ROWS: {p.capability: len(p.samples.sample_ids) for p in inputs.prompt_sets},
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _warnings(settings: RunSettings) -> list[str]:
    if settings.sft_weights_sha256 == settings.dpo_weights_sha256:
        return [
            f"--sft {settings.sft_dir} and --dpo {settings.dpo_dir} hold identical weights: every SFT/DPO "
            "discrepancy is zero, and the layer ranking means nothing"
        ]
    return []


def _finish_on_main(
    run_dir: Path, inputs: _Inputs, pair: ModelPair, settings: RunSettings, call: dict[str, Any], work: list[Work]
) -> None:
    """Rank 0, after every rank's share: check the journal holds every planned batch, then consolidate."""
    from core.provenance import library_versions, toolkit_version

    run = RunDir(run_dir)
    missing = [w for w in work if not run.shard(w.prompts.capability, w.positions[0]).is_file()]
    if missing:
        raise ProbeError(
            f"{len(missing)} batches recorded by other processes are not in {run.journal}: with several nodes, "
            "--out must be a directory every node sees (a shared filesystem); rerun the same command to resume"
        )
    provenance = {"versions": library_versions(), **call}
    plan = ConsolidationPlan(
        to_json(settings),
        {**pair.info, **local_made_by(settings.local, pair.info)},
        inputs.layers,
        {h: HOOK_TABLE[h].tl_name for h in settings.hooks},
        toolkit_version(),
        provenance,
    )
    consolidate(run_dir, [p.capability for p in inputs.prompt_sets], plan)


def local_made_by(local: str, info: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Who made each local group of ``--local`` (stored as ``/models/<direction>``, checked by
    :class:`probes.store.RunReader`): the fingerprints of the model whose blocks ran (:class:`core.provenance.MadeBy`)
    and the weights of the model whose block inputs they ran on (``inputs_weights_sha256``)."""
    out = {}
    for direction in directions_of(local):
        source, blocks = DIRECTIONS[direction]
        made_by = MadeBy(info[blocks]["weights_sha256"], info[blocks]["tokenizer_sha256"])
        out[direction] = {**made_by.fields(), INPUTS_WEIGHTS: info[source]["weights_sha256"]}
    return out


def _sum_counts(per_rank: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in per_rank:
        for cap, n in counts.items():
            total[cap] = total.get(cap, 0) + n
    return total


def _interrupted(run_dir: Path) -> Interrupted:
    run = RunDir(run_dir)
    consolidated = (
        f"the consolidated {run.activations.name} is whole"
        if run.activations.is_file()
        else "nothing was consolidated yet"
    )
    return Interrupted(
        f"recording stopped; {run.shard_count()} recorded batches are kept in {run.journal} and {consolidated}; "
        f"rerun the same command (with --out {run_dir}) to resume"
    )


def _stopped(run_dir: Path | None, lost: PeerLost) -> PeerLost:
    """A lost peer, with what is kept and how to resume (the same rank reports it)."""
    if run_dir is None:
        return PeerLost(f"{lost}; nothing was recorded; rerun the same command", lost.reporter, lost.dead)
    run = RunDir(run_dir)
    return PeerLost(
        f"{lost}; {run.shard_count()} recorded batches are kept in {run.journal}; rerun the same command "
        f"(with --out {run_dir}) to resume",
        lost.reporter,
        lost.dead,
    )


def _check_rows(rows: list[Any], config: RecordConfig, data_file: Path) -> None:
    """Refuse a data file with no row for any requested capability (nothing would be recorded)."""
    from core.rows import group_by_capability

    groups = group_by_capability(rows, config.parsed_capabilities)
    if not any(groups.values()):
        raise ProbeError(
            f"--data {data_file}: no row belongs to {', '.join(config.capability_names)} "
            f"({len(rows)} rows in the file); check the task names or pick another --capability"
        )


def model_passes(models: int, local: str) -> float:
    """Forward passes per batch in units of one model's: each model's, and each local direction's other block on
    its recorded layers' inputs (:data:`LOCAL_COST` of a pass)."""
    return models * (1 + LOCAL_COST * len(directions_of(local)))


@dataclass(frozen=True)
class PlannedRecording:
    """What ``record_run(config)`` runs from nothing recorded, before any model is loaded: its prompt tokens as they
    are and padded to their batches, the models it records, its local directions, the layers it records."""

    tokens: int
    padded: int
    models: int
    directions: int
    layers: list[int]
    model_dir: Path

    def weight_passes(self, n_layers: int) -> TokenPasses:
        """Its token passes for the weight-FLOP floor (:mod:`core.flops`): every prompt token (unpadded) through each
        model up to the last recorded layer, where the forward stops, and each local direction's block on every
        recorded layer's input; no LM head."""
        blocks = self.models * (max(self.layers) + 1) + self.directions * len(self.layers)
        return TokenPasses(blocks=self.tokens * blocks / n_layers)


def planned_recording(config: RecordConfig) -> PlannedRecording:
    """The batches ``record_run(config)`` would plan on a CPU from nothing recorded (:func:`plan_work`), counted."""
    from core.budget import CPU_MAX_BATCH_TOKENS

    inputs = _prepare(config)
    nothing_done: dict[str, set[int]] = {p.capability: set() for p in inputs.prompt_sets}
    budget = config.max_batch_tokens or CPU_MAX_BATCH_TOKENS
    work = plan_work(inputs.prompt_sets, nothing_done, config.batch_size, budget)
    return PlannedRecording(
        tokens=sum(len(w.prompts.ids[p]) for w in work for p in w.positions),
        padded=_padded_tokens(work),
        models=3 if config.models.base is not None else 2,
        directions=len(directions_of(config.local)),
        layers=list(inputs.layers),
        model_dir=inputs.sources[0],
    )


def cpu_estimate(config: RecordConfig) -> float:
    """The seconds ``record_run(config)`` should take on a CPU, before any model is loaded: every batch it would plan
    there from nothing recorded (padded tokens counted), through each model and the ``--local`` blocks, at the
    measured pace (:mod:`core.pace`). What ``probe replicate --plan`` shows; the run prints its own once loaded."""
    planned = planned_recording(config)
    passes = model_passes(planned.models, config.local)
    return prompt_seconds(planned.padded, models=passes, parameters=parameter_count(planned.model_dir))


def _padded_tokens(work: list[Work]) -> int:
    return sum(len(w.positions) * max(len(w.prompts.ids[p]) for p in w.positions) for w in work if w.positions)


def _estimate(work: list[Work], passes: float, model_dir: Path, device: str) -> float | None:
    """The recording's seconds at the measured CPU pace (:mod:`core.pace`), padded tokens counted; None off CPU, and
    for a model so small that per-layer overhead, not its size, sets the pace (:func:`core.pace.sized`)."""
    parameters = parameter_count(model_dir)
    if not sized(device, parameters):
        return None
    return prompt_seconds(_padded_tokens(work), models=passes, parameters=parameters)


def _progress_bar(
    total: int, enabled: bool, world: World, names: str = "sft+dpo", estimate_s: float | None = None
) -> Stage | None:
    """A bar on a terminal; in a log, a line at the start with the estimate (on CPU; elsewhere once the first batch
    gives it), and every minute (:mod:`core.progress`)."""
    if not enabled or total == 0:
        return None
    desc = f"recording {names}" if not world.distributed else f"recording {names}, rank 0 of {world.size}"
    return Stage(desc, total, unit="prompts", step="batch", estimate_s=estimate_s)
