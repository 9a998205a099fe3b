"""Gradient attribution ("attribution patching"): which DPO units matter for a metric *m*, per prompt.

For every recorded unit (hook point × layer × unit) the first-order estimate of how *m* would
change if the DPO model's unit took the SFT model's value::

    attr(unit) = Σ_t (a_SFT[t, unit] − a_DPO[t, unit]) · ∂m/∂a_DPO[t, unit]

summed over the positions ``t`` of :data:`POSITIONS` (``all``: every real token of the
sequence, the positions an intervention acts at; ``response``: the response tokens only).
Both models read the same token ids; a_SFT comes from a plain SFT forward, a_DPO and the
gradient from one DPO forward and one backward with autograd on (the parameters stay frozen:
the graph starts at the input embeddings).

*m* is computed without generation (:data:`M_CHOICES`):

``reference_logprob`` (the default)
    Σ log p_DPO(reference token | everything before it) over the reference answer of each test
    row, teacher-forced after the prompt: the rows the run recorded, so the attribution map
    ranks units on the same prompts as the other metrics; needs no DPO data (a published test
    file has references); one forward and backward per prompt.
``dpo_margin``
    log p_DPO(chosen) − log p_DPO(rejected) on the DPO pairs of the capability's tasks: what DPO
    optimised (its implicit reward margin, less the reference model's constant terms); two
    sequences per pair, from ``--responses``/``--data`` DPO rows or ``dpo_file``.

Batches follow :mod:`probes.batching` (length-sorted, padded-token budget, a quarter of the
recording budget by default: a backward keeps every layer's activations). The result is one
HDF5 file per *m* in the run dir (:meth:`core.run_dir.RunDir.attribution`), a cache: it is used again only
for the same key, and one made by other models (its ``made_by`` differs from the run's) is computed again
after one ``warning:`` naming both fingerprints::

    /{capability}/{hook}/attribution   (N, n_layers, width) float32  per-prompt attr, summed over positions
    /{capability}/{hook}/sft, dpo      (N, n_layers, width) float32  mean activation over the same positions
    /{capability}/m, sample_ids        (N,)                         m per prompt (or pair) of the DPO model
    attrs: m, positions, layers, hooks, key (weights hashes and settings it was computed from),
           made_by (JSON: per model, sft and dpo, its weights and tokenizer fingerprints, core.provenance.MadeBy)

:func:`analysis.attribution_maps.attribution_maps` turns it into maps like the other metrics'.
:func:`patched_deltas` is the ground truth it estimates (actual single-unit patching), used to
validate it.

Example:
    >>> batch = batch_tensors([Item([5, 6, 7, 8], n_response=2, row=0), Item([9, 7, 8], n_response=1, row=1)], pad_id=0)
    >>> batch["input_ids"].tolist(), batch["response_mask"].tolist()   # left-padded; the responses end each row
    ([[5, 6, 7, 8], [0, 9, 7, 8]], [[0, 0, 1, 1], [0, 0, 0, 1]])
    >>> position_mask(batch, "all").tolist()   # positions="all": every real token
    [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]]
    >>> path = attribute_run("runs/demo", m="reference_logprob")                     # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from einops import rearrange, reduce, repeat

from access.hook_points import attach
from core.errors import Interrupted, ProbeError
from core.models import input_embedding
from core.pace import gradient_seconds, parameter_count, sized
from core.progress import stage
from core.run_dir import RunDir
from probes.distributed import PeerLost, World, joined, machine_device, reported_once, world_from_env

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from probes.settings import RunSettings

M_CHOICES: tuple[str, ...] = ("reference_logprob", "dpo_margin")
# each hook's datasets in the file: the attribution (the gradient times the activation change), then each model's
# mean activation ("attribution" is also the metric's name, analysis.rankings.ATTRIBUTION, in the room above this one)
ARRAYS: tuple[str, ...] = ("attribution", "sft", "dpo")
DEFAULT_M = "reference_logprob"
POSITIONS: tuple[str, ...] = ("all", "response")
DEFAULT_ROWS = 256  # dpo_margin: at most this many pairs per capability (file order)


@dataclass(frozen=True)
class Item:
    """One teacher-forced sequence: its ids, response length, output row and the sign of its log-probability in m."""

    ids: list[int]
    n_response: int
    row: int
    sign: float = 1.0


def batch_tensors(items: Sequence[Item], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded ids, attention mask, position ids and response mask of ``items``."""
    from access.batches import position_ids_for
    from core.chat import left_pad

    input_ids, mask = left_pad([i.ids for i in items], pad_id)
    response = torch.zeros_like(mask)
    for row, item in enumerate(items):
        response[row, mask.shape[1] - item.n_response :] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": position_ids_for(mask),
        "response_mask": response,
    }


def position_mask(batch: dict[str, torch.Tensor], positions: str) -> torch.Tensor:
    """[B, T] float: the positions attribution sums over."""
    return (batch["response_mask"] if positions == "response" else batch["attention_mask"]).float()


@contextmanager
def _captured(
    model: PreTrainedModel,
    sites: Sequence[tuple[str, int]],
    replace: Callable[[str, int, torch.Tensor], torch.Tensor | None] | None = None,
) -> Iterator[dict[tuple[str, int], torch.Tensor]]:
    """Hooks that keep each site's tensor (in the graph, when autograd is on), optionally replacing it first."""
    seen: dict[tuple[str, int], torch.Tensor] = {}
    handles = []
    for hook, layer in sites:

        def fn(x: torch.Tensor, key: tuple[str, int] = (hook, layer)) -> torch.Tensor | None:
            new = replace(key[0], key[1], x) if replace is not None else None
            seen[key] = x if new is None else new
            return new

        handles.append(attach(model, hook, layer, fn))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def response_logprobs(model: PreTrainedModel, batch: dict[str, torch.Tensor], hidden: torch.Tensor) -> torch.Tensor:
    """[B] Σ log p(response token) from the final hidden states [B, T, D]; the LM head runs only where it is read."""
    response = batch["response_mask"].to(hidden.device)
    predicts = response[:, 1:].bool()  # position t predicts token t+1
    rows = repeat(torch.arange(hidden.shape[0], device=hidden.device), "b -> b t", t=predicts.shape[1])[predicts]
    logits = model.get_output_embeddings()(hidden[:, :-1][predicts]).float()
    targets = batch["input_ids"].to(hidden.device)[:, 1:][predicts]
    logprobs = torch.log_softmax(logits, dim=-1)  # [n, V] over the n predicting positions
    picked = rearrange(logprobs.gather(1, rearrange(targets, "n -> n 1")), "n 1 -> n")
    return torch.zeros(hidden.shape[0], device=hidden.device, dtype=picked.dtype).index_add(0, rows, picked)


def _forward(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    device = input_embedding(model).device
    out = model.base_model(
        input_ids=batch["input_ids"].to(device),
        attention_mask=batch["attention_mask"].to(device),
        position_ids=batch["position_ids"].to(device),
        use_cache=False,
    )
    hidden: torch.Tensor = out.last_hidden_state
    return hidden


@contextmanager
def _grad_from_embeddings(model: PreTrainedModel) -> Iterator[None]:
    """Autograd on from the input embeddings, with the parameters left frozen (no parameter gradient is kept)."""
    handle = model.get_input_embeddings().register_forward_hook(lambda _m, _i, out: out.detach().requires_grad_(True))
    try:
        with torch.enable_grad():
            yield
    finally:
        handle.remove()


def sft_sites(
    sft: PreTrainedModel, batch: dict[str, torch.Tensor], sites: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], torch.Tensor]:
    """The SFT model's full tensors at ``sites`` (no autograd)."""
    with torch.inference_mode(), _captured(sft, sites) as seen:
        _forward(sft, batch)
    return {key: value.clone() for key, value in seen.items()}


def attribute_batch(
    sft: PreTrainedModel,
    dpo: PreTrainedModel,
    items: Sequence[Item],
    pad_id: int,
    sites: Sequence[tuple[str, int]],
    positions: str,
) -> tuple[torch.Tensor, dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """(m per sequence [B] (signed), {site: (attr [B, W], mean SFT activation [B, W], mean DPO activation [B, W])})."""
    batch = batch_tensors(items, pad_id)
    reference = sft_sites(sft, batch, sites)
    with _grad_from_embeddings(dpo), _captured(dpo, sites) as seen:
        m = response_logprobs(dpo, batch, _forward(dpo, batch))
        signs = torch.tensor([i.sign for i in items], dtype=m.dtype, device=m.device)
        grads = torch.autograd.grad((m * signs).sum(), [seen[s] for s in sites])
    weights = position_mask(batch, positions)
    out = {}
    for site, grad in zip(sites, grads, strict=True):
        a_dpo, a_sft = seen[site].detach().float(), reference[site].float()
        w = rearrange(weights.to(a_dpo.device), "b t -> b t 1")
        count = reduce(w, "b t 1 -> b 1", "sum").clamp(min=1.0)
        out[site] = (
            reduce((a_sft - a_dpo) * grad.float() * w, "b t w -> b w", "sum").cpu(),
            (reduce(a_sft * w, "b t w -> b w", "sum") / count).cpu(),
            (reduce(a_dpo * w, "b t w -> b w", "sum") / count).cpu(),
        )
    return (m * signs).detach().cpu(), out


def patched_deltas(
    sft: PreTrainedModel,
    dpo: PreTrainedModel,
    items: Sequence[Item],
    pad_id: int,
    hook: str,
    layer: int,
    units: Sequence[int],
    positions: str = "all",
) -> np.ndarray:
    """Ground truth for :func:`attribute_batch`: (len(units),) Δm when DPO's unit takes SFT's value at the positions,
    one unit at a time."""
    batch = batch_tensors(items, pad_id)
    reference = sft_sites(sft, batch, [(hook, layer)])[(hook, layer)]
    signs = torch.tensor([i.sign for i in items])
    weights = position_mask(batch, positions).bool()

    def m_with(unit: int | None) -> float:
        def patch(_h: str, _l: int, x: torch.Tensor) -> torch.Tensor | None:
            if unit is None:
                return None
            x = x.clone()
            where = weights.to(x.device)
            x[..., unit] = torch.where(where, reference[..., unit].to(x.dtype), x[..., unit])
            return x

        with torch.inference_mode(), _captured(dpo, [(hook, layer)], patch):
            return float((response_logprobs(dpo, batch, _forward(dpo, batch)).cpu() * signs).sum())

    base = m_with(None)
    return np.array([m_with(u) - base for u in units])


# --- a whole run ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    capability: str
    items: list[Item]
    sample_ids: list[int]


def _made_by(settings: RunSettings) -> dict[str, dict[str, str]]:
    """Who computes the attribution of a run: its models, as :class:`core.provenance.MadeBy` fields."""
    from core.provenance import MadeBy

    return {
        model: MadeBy(sha, settings.tokenizer_sha256).fields()
        for model, sha in (("sft", settings.sft_weights_sha256), ("dpo", settings.dpo_weights_sha256))
    }


def _key(settings: RunSettings, m: str, positions: str, dpo_file: Path | None, rows: int) -> str:
    body = {
        "m": m,
        "positions": positions,
        "sft": settings.sft_weights_sha256,
        "dpo": settings.dpo_weights_sha256,
        "tokenizer": settings.tokenizer_sha256,
        "data": settings.data_sha256,
        "hooks": settings.hooks,
        "layers": settings.layers,
        "rows": rows,
        "dpo_file": str(dpo_file or ""),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _reference_plans(
    settings: RunSettings, capabilities: list[str], tokenizer: PreTrainedTokenizerBase, context: int | None = None
) -> list[_Plan]:
    from core.capabilities import parse_capabilities
    from core.rows import group_by_capability, row_location
    from probes.responses import read_rows, response_lookup, teacher_forced

    data = Path(settings.data_file)
    rows = read_rows(data)
    if rows and "chosen" in rows[0].extra:
        raise ProbeError(
            f"m = reference_logprob needs test rows with references; {data} is a DPO file: "
            "use --attribution-m dpo_margin"
        )
    lookup = response_lookup(rows, "reference", None, data)
    plans = []
    for cap, members in group_by_capability(rows, parse_capabilities(",".join(capabilities))).items():
        items: list[Item] = []
        ids: list[int] = []
        for index, row in members:
            where = partial(row_location, index, data)
            tokens, n = teacher_forced(tokenizer, row.question, lookup(index), where, context)
            items.append(Item(tokens, n, len(ids)))
            ids.append(index)
        plans.append(_Plan(cap.value, items, ids))
    return plans


def _margin_plans(
    dpo_file: Path,
    capabilities: list[str],
    tokenizer: PreTrainedTokenizerBase,
    max_rows: int,
    context: int | None = None,
) -> list[_Plan]:
    from core.capabilities import parse_capabilities
    from core.rows import group_by_capability, row_location
    from probes.responses import is_dpo_file, read_rows, teacher_forced

    if not is_dpo_file(dpo_file):
        raise ProbeError(f"m = dpo_margin: {dpo_file} is not a DPO file (rows of prompt, chosen, rejected)")
    rows = read_rows(dpo_file)
    plans = []
    for cap, members in group_by_capability(rows, parse_capabilities(",".join(capabilities))).items():
        if not members:
            raise ProbeError(f"m = dpo_margin: {dpo_file} has no DPO pair of a {cap.value} task")
        items: list[Item] = []
        ids: list[int] = []
        for index, row in members[:max_rows]:
            where = lambda index=index: row_location(index, dpo_file)  # noqa: E731
            for which, sign in (("chosen", 1.0), ("rejected", -1.0)):
                tokens, n = teacher_forced(tokenizer, row.question, str(row.extra[which]), where, context)
                items.append(Item(tokens, n, len(ids), sign))
            ids.append(index)
        plans.append(_Plan(cap.value, items, ids))
    return plans


def dpo_file_of(settings: RunSettings, given: Path | None) -> Path | None:
    """The DPO pairs for dpo_margin: ``given``, else the run's --responses file,
    else its --data if that is a DPO file."""
    from probes.responses import is_dpo_file

    if given is not None:
        return Path(given)
    if settings.responses_file:
        return Path(settings.responses_file)
    return Path(settings.data_file) if settings.data_file and is_dpo_file(settings.data_file) else None


def attribute_run(
    run_dir: str | Path,
    m: str = DEFAULT_M,
    positions: str = "all",
    dpo_file: Path | None = None,
    max_rows: int = DEFAULT_ROWS,
    max_batch_tokens: int | None = None,
    device: str | None = None,
    world: World | None = None,
) -> Path:
    """Compute (or reuse, or resume) the attribution file of ``m`` for every capability and hook of the run; see the
    module doc. ``world``: the processes that share the work (default: as torchrun / accelerate launch describe them
    in the environment); with several, each computes its share of the batches into the journal and rank 0 writes the
    file (:mod:`probes.distributed`)."""
    world = world or world_from_env()
    with reported_once(world):
        device = machine_device(device, world)
        with joined(world):
            job = world.agree(lambda: _job(Path(run_dir), m, positions, dpo_file, max_rows))
            if job.cached:
                return job.path
            try:
                return _attribute(job, world, max_batch_tokens, device)
            except KeyboardInterrupt:
                raise Interrupted(f"attribution stopped; {_kept(job)}; rerun the same command to resume") from None
            except PeerLost as lost:
                raise PeerLost(
                    f"{lost}; {_kept(job)}; rerun the same command to resume", lost.reporter, lost.dead
                ) from None


@dataclass(frozen=True)
class _Job:
    path: Path
    key: str
    m: str
    positions: str
    source: Path | None
    max_rows: int
    settings: RunSettings
    capabilities: list[str]
    hooks: dict[str, list[str]]
    cached: bool

    @property
    def journal(self) -> Path:
        """Where finished batches wait for the file: one ``.npz`` per batch, for this key only."""
        return self.path.with_name(f"{self.path.stem}.journal") / self.key[:16]


def _kept(job: _Job) -> str:
    count = len(list(job.journal.glob("*.npz"))) if job.journal.is_dir() else 0
    return f"{count} finished batches are kept in {job.journal}"


def _job(run_dir: Path, m: str, positions: str, dpo_file: Path | None, max_rows: int) -> _Job:
    """What to compute, checked: the run's settings, the key of the result and whether it is already there."""
    from core.provenance import weights_sha256
    from probes.store import RunReader

    if m not in M_CHOICES:
        raise ProbeError(f"--attribution-m {m!r}: expected one of {', '.join(M_CHOICES)}")
    if positions not in POSITIONS:
        raise ProbeError(f"--attribution-positions {positions!r}: expected one of {', '.join(POSITIONS)}")
    with RunReader(run_dir) as run:
        settings, capabilities = run.settings, run.capabilities()
        hooks = {cap: [h for h in run.hooks(cap, "sft") if h in run.hooks(cap, "dpo")] for cap in capabilities}
    source = dpo_file_of(settings, dpo_file) if m == "dpo_margin" else None
    if m == "dpo_margin" and source is None:
        raise ProbeError(
            "m = dpo_margin needs DPO pairs: --dpo-data FILE (or a run recorded with --responses or a DPO --data)"
        )
    key = _key(settings, m, positions, source, max_rows)
    path = RunDir(run_dir).attribution(m)
    cached = _cached(path, key, _made_by(settings))
    job = _Job(path, key, m, positions, source, max_rows, settings, capabilities, hooks, cached)
    if job.cached:
        return job
    if not settings.sft_dir or not settings.dpo_dir:
        raise ProbeError(
            f"{run_dir}: the run does not say where its models are (sft_dir/dpo_dir); attribution needs them"
        )
    for role, want in (("sft", settings.sft_weights_sha256), ("dpo", settings.dpo_weights_sha256)):
        where = Path(settings.model_dir(role))
        if not (where / "config.json").is_file() or (want and weights_sha256(where) != want):
            raise ProbeError(
                f"{run_dir}: the {role} model the run recorded ({where}) is gone or changed since; "
                "attribution needs the same weights"
            )
    return job


@dataclass(frozen=True)
class _Batch:
    """Batch ``number`` of the one plan every process follows: items ``members`` of plan ``plan``."""

    number: int
    plan: int
    members: list[int]

    @property
    def name(self) -> str:
        return f"{self.number:06d}.npz"


def batch_plan(plans: Sequence[_Plan], budget: int) -> list[_Batch]:
    """Every plan's items, length-sorted and batched by :func:`probes.batching.plan_batches`, numbered in one list."""
    from probes.batching import plan_batches

    batches: list[_Batch] = []
    for index, plan in enumerate(plans):
        order = sorted(range(len(plan.items)), key=lambda i: len(plan.items[i].ids))
        for start, stop in plan_batches([len(plan.items[i].ids) for i in order], 64, budget):
            batches.append(_Batch(len(batches), index, order[start:stop]))
    return batches


def _attribute(job: _Job, world: World, max_batch_tokens: int | None, device: str | None) -> Path:
    """Each rank computes its share of the pending batches into the journal; rank 0 writes the file."""
    from access.pair import load_pair
    from core.chat import pad_id_of
    from probes.batching import CPU_MAX_BATCH_TOKENS

    started = time.perf_counter()
    settings = job.settings
    pair = world.agree(
        lambda: load_pair(settings.sft_dir, settings.dpo_dir, device=device, dtype=settings.dtype or "auto")
    )
    for model in (pair.sft, pair.dpo):
        model.requires_grad_(False)
    plans = world.agree(
        lambda: (
            _reference_plans(settings, job.capabilities, pair.tokenizer, pair.shape.max_positions)
            if job.source is None
            else _margin_plans(job.source, job.capabilities, pair.tokenizer, job.max_rows, pair.shape.max_positions)
        )
    )
    budget = max_batch_tokens or max(256, (CPU_MAX_BATCH_TOKENS if pair.device == "cpu" else 8192) // 4)
    batches = batch_plan(plans, budget)
    done = world.on_main(lambda: _finished(job.journal))
    pending = [b for b in batches if b.name not in done]
    pad_id = pad_id_of(pair.tokenizer)
    mine = [batch for k, batch in enumerate(pending) if world.owns(k)]
    name = "attribution" if not world.distributed else f"attribution, rank 0 of {world.size}"
    # a bar on a terminal; in a log a start line with the estimate (on CPU; elsewhere after the first batch) and a line
    # a minute
    estimate = estimate_seconds(plans, mine, settings.dpo_dir, pair.device)
    with stage(
        name, len(mine), unit="batches", step="batch", estimate_s=estimate, enabled=world.is_main and bool(mine)
    ) as bar:
        for batch in mine:
            plan = plans[batch.plan]
            sites = [(h, layer) for h in job.hooks[plan.capability] for layer in settings.layers]
            chosen = [plan.items[i] for i in batch.members]
            result = attribute_batch(pair.sft, pair.dpo, chosen, pad_id, sites, job.positions)
            try:
                _write_batch(job.journal / batch.name, result)
            except OSError as exc:
                raise ProbeError(
                    f"{job.path}: writing the attribution failed ({exc.strerror or exc}) at a finished batch; the "
                    f"file there was kept, and the batches before it in {job.journal}: free space (or fix "
                    "permissions) and rerun"
                ) from None
            bar.update(1)
    world.barrier()
    return world.on_main(lambda: _write_file(job, plans, batches, started))


def estimate_seconds(
    plans: Sequence[_Plan], batches: Sequence[_Batch], model_dir: str | Path, device: str
) -> float | None:
    """The batches' seconds at the measured CPU pace (:func:`core.pace.gradient_seconds`), padded tokens counted; None
    off CPU, and for a model so small that per-layer overhead, not its size, sets the pace (:func:`core.pace.sized`)."""
    parameters = parameter_count(model_dir)
    if not sized(device, parameters):
        return None
    return gradient_seconds(sum(_padded(plans[b.plan], b) for b in batches), parameters=parameters)


def _padded(plan: _Plan, batch: _Batch) -> int:
    return len(batch.members) * max(len(plan.items[i].ids) for i in batch.members)


def _finished(journal: Path) -> set[str]:
    return {p.name for p in journal.glob("*.npz")} if journal.is_dir() else set()


def _write_batch(
    path: Path, result: tuple[torch.Tensor, dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]
) -> None:
    """One batch's m and per-site (attribution, SFT mean, DPO mean), written whole or not at all."""
    from core.atomic import write_atomic

    m, out = result
    arrays: dict[str, Any] = {"m": m.numpy()}
    for (hook, layer), values in out.items():
        for name, value in zip(ARRAYS, values, strict=True):
            arrays[f"{hook}|{layer}|{name}"] = value.numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda handle: np.savez(handle, **arrays))


def _read_batch(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {name: f[name] for name in f.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ProbeError(
            f"{path}: a damaged attribution batch ({exc}); delete it and rerun: it is computed again"
        ) from None


def _write_file(job: _Job, plans: list[_Plan], batches: list[_Batch], started: float) -> Path:
    """Rank 0: the batches, summed in plan order as one process sums them, into the file; then the journal goes."""
    from core.hdf5 import write_hdf5

    layers = list(job.settings.layers)

    def fill(f: Any) -> None:
        for index, plan in enumerate(plans):
            mine = [b for b in batches if b.plan == index]
            _fill_plan(
                f, plan, [(b, _read_batch(job.journal / b.name)) for b in mine], layers, job.hooks[plan.capability]
            )
        f.attrs.update(
            {
                "m": job.m,
                "positions": job.positions,
                "layers": json.dumps(layers),
                "key": job.key,
                "made_by": json.dumps(_made_by(job.settings), sort_keys=True),
                "dpo_file": str(job.source or ""),
                "seconds": time.perf_counter() - started,
            }
        )

    try:
        write_hdf5(job.path, fill)
    except OSError as exc:
        raise ProbeError(
            f"{job.path}: writing the attribution failed ({exc.strerror or exc}); the file there was kept, and the "
            f"finished batches in {job.journal}: free space (or fix permissions) and rerun"
        ) from None
    shutil.rmtree(job.journal.parent, ignore_errors=True)
    return job.path


def _cached(path: Path, key: str, made_by: dict[str, dict[str, str]]) -> bool:
    """Whether ``path`` holds the attribution of ``key``; a damaged file, or one computed by other models than
    ``made_by``'s, is a warning, and is computed again."""
    from core.hdf5 import read_hdf5, text_attr
    from core.models import warn

    if not path.is_file():
        return False
    try:
        with read_hdf5(path, "attribution file", "computing it again") as f:
            kept_key = text_attr(f, "key")
            kept = text_attr(f, "made_by") if "made_by" in f.attrs else None
    except ProbeError as exc:
        warn(str(exc))
        return False
    fault = _made_by_fault(kept, made_by)
    if fault is not None:
        warn(f"{path}: computed by other models ({fault}); computing it again")
        return False
    return kept_key == key


def _made_by_fault(kept: str | None, made_by: dict[str, dict[str, str]]) -> str | None:
    """How a file's ``made_by`` attribute differs from the run's (None: it does not, or a file from before it)."""
    from core.provenance import models_made_by, pair_differences

    if kept is None:
        return None
    try:
        body = json.loads(kept)
    except ValueError:
        body = None
    return "; ".join(pair_differences(body, models_made_by(made_by), "the run's")) or None


def _fill_plan(
    f: Any, plan: _Plan, done: list[tuple[_Batch, dict[str, np.ndarray]]], layers: list[int], hooks: list[str]
) -> None:
    """One capability's group of the file from its batches (in plan order: the sums are one process's, bit for bit)."""
    n_rows = len(plan.sample_ids)
    sums = {hook: dict.fromkeys(ARRAYS, np.zeros(0)) for hook in hooks}
    m_rows = np.zeros(n_rows)
    counts = np.zeros(n_rows)
    for batch, arrays in done:
        rows = np.array([plan.items[i].row for i in batch.members])
        np.add.at(m_rows, rows, arrays["m"].astype(np.float64))
        np.add.at(counts, rows, 1.0)
        for hook in hooks:
            for slot, layer in enumerate(layers):
                for name in ARRAYS:
                    value = arrays[f"{hook}|{layer}|{name}"]
                    if not sums[hook][name].size:
                        sums[hook][name] = np.zeros((n_rows, len(layers), value.shape[1]))
                    np.add.at(sums[hook][name][:, slot], rows, value.astype(np.float64))
    group = f.create_group(plan.capability)
    group.create_dataset("m", data=m_rows)
    group.create_dataset("sample_ids", data=np.asarray(plan.sample_ids, dtype=np.int64))
    for hook in hooks:
        for name, values in sums[hook].items():
            if name != ARRAYS[0]:  # a pair's two sequences: the mean activation of the two
                values = values / rearrange(counts, "n -> n 1 1")
            group.create_dataset(
                f"{hook}/{name}", data=values.astype(np.float32), compression="gzip", compression_opts=4
            )
