"""Recording speed and memory against the re-scoped targets of issue 14 (figures printed, PASS/FAIL, nothing asserted).

1. **Overhead** (target >= 0.97x): the torch backend recording mlp_out at every layer vs a
   plain *body* forward (``model.base_model``, no LM head) of the same batches; and the whole
   ``record_run`` (both models, shards, HDF5) when a saved pair is given;
2. **token-budget batches** on a wide-length set (250-1,000 tokens): prompts/s, the largest
   padded batch and, on a GPU, peak memory, for fixed batch sizes and for ``--max-batch-tokens``
   budgets (the device default included); the largest difference of the values between the
   ways (float32 round-off expected), and the measured activation bytes per padded token
   against the estimate that sets the default budget;
3. **the authors' loop** (``interpret.py``: one prompt per TransformerLens ``run_with_cache``,
   every position kept), a reported ratio, no target, at two prompt lengths (~270 and ~780
   tokens);
4. peak RSS of ``record_run`` in a fresh subprocess for N and 10N prompts (target <= +20%);
5. the cost of HDF5's fletcher32 checksum on activation-shaped data (write, read, size);
6. issue 25 (``--part 6``, needs ``--sft/--dpo/--data``, and ``--base`` for the three-model figure): whole
   ``record_run`` calls on one capability, one each: last-token vs ``response_mean`` recording (target <= 3x),
   two vs three models on the response tokens (target <= 1.6x), and the attribution pass
   (``probes.attribution.attribute_run``, m = reference_logprob, all positions) vs the two-model response
   recording (target <= 2x); ``--keep DIR`` keeps the run dirs (then ``probe analyze DIR/response_mean_3_models``):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_probes.py --part 6 --sft $PAIR/sft --dpo $PAIR/dpo \
        --base $PROBE_HOME/bases/smollm2-135m-instruct --data $PAIR/data/test.jsonl

7. issue 38 (``--part 7``, needs ``--sft/--dpo/--data``): ``record_run`` of one capability (the default hook,
   ``mlp_out``, every layer) with the local basis (``--local dpo_on_sft``, the default) vs without it
   (``--local none``, the recording before issue 38), alternated ``--repeats`` times, best of each; target: the
   local basis costs at most 1.5x. ``--local-prompts N`` records the first N prompts of the capability only (0: all).
   Wall and CPU seconds are both printed (CPU time is less sensitive to other processes on a shared machine):

    .venv/bin/python benchmarks/bench_probes.py --part 7 --sft $PAIR/sft --dpo $PAIR/dpo --data $PAIR/data/test.jsonl

Without ``--sft/--dpo`` it builds a tiny random 32-layer Llama pair (hidden 64, MLP 256) in a
temp dir; the prompts are synthetic RoleMRC-shaped multi-turn rows. ``--data FILE
--capability CAP`` measures part 1 on that file's prompts of one capability, e.g. the default
pair on its own test split (the main job's setting):

    .venv/bin/python benchmarks/bench_probes.py --sft $PROBE_HOME/smollm2_pair/sft \
        --dpo $PROBE_HOME/smollm2_pair/dpo --data $PROBE_HOME/smollm2_pair/data/test.jsonl

``--shape llama-1b|llama-8b`` instead initialises one random model of that size directly on
``--device`` (Llama-3.2-1B / Llama-3.1-8B widths, the real 128,256-row vocabulary unless
``--tokenizer-vocab``; the tiny base's tokenizer). Parts 1-3 run then (the end-to-end run and
part 4 need saved weights). On a GPU, e.g.:

    python3 benchmarks/bench_probes.py --shape llama-8b --device cuda --dtype bfloat16 \
        --batch-size 8,16 --passage-words 480-860 --budgets 8192,16384,default
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT = (
    "the archivist reads old maps of the river city and answers questions about its bridges granite flood "
    "northern valley kingdom capital treasury refuse narration profile passage question"
)
WORDS = TEXT.split()
MT_TASKS = ("role_related_mrc_refused_with_narration-2ndrefused", "role_unrelated_mrc_refused_no_narration-2ndanswer")
LLAMA3_VOCAB = 128_256
SHAPES: dict[str, dict[str, int]] = {  # widths of the public checkpoints; "tiny" is training.tiny_base.TinySpec
    "llama-1b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "llama-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
}


def write_rows(path: Path, n: int, seed: int = 0, words: tuple[int, int] = (150, 200)) -> Path:
    """n multi-turn rows in the published format (capitalised roles), passages of ``words`` (150-200) words."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            passage = " ".join(rng.choices(WORDS, k=rng.randint(*words)))
            question = [
                {"role": "System", "content": f"You are the archivist. Passage: {passage}"},
                {"role": "User", "content": "What does the passage say about the bridge?"},
                {"role": "Assistant", "content": "I cannot answer that."},
                {"role": "User", "content": "Please, try again."},
            ]
            handle.write(json.dumps({"question": question, "reference": "r", "task": MT_TASKS[i % 2]}) + "\n")
    return path


def _corpus() -> list[str]:
    return [" ".join(random.Random(i).choices(WORDS, k=30)) for i in range(400)]


def build_pair(root: Path) -> tuple[Path, Path]:
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from training.tiny_base import TinySpec, build_tiny_base

    sft = build_tiny_base(_corpus(), root / "sft", TinySpec())
    dpo = Path(shutil.copytree(sft, root / "dpo", dirs_exist_ok=True))
    model = AutoModelForCausalLM.from_pretrained(dpo)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05 * p.std().clamp_min(1e-3))
    model.save_pretrained(dpo)
    return sft, dpo


def build_random(shape: str, root: Path, device: str, dtype: str, tokenizer_vocab: bool) -> tuple[Any, Any, Path]:
    """One random Llama of a public checkpoint's widths, built on ``device``;
    its dir holds config and tokenizer only."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from training.tiny_base import train_tokenizer

    tokenizer = train_tokenizer(_corpus(), 2048)
    config = LlamaConfig(
        vocab_size=len(tokenizer) if tokenizer_vocab else LLAMA3_VOCAB,
        **SHAPES[shape],
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out = root / shape
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)  # as loaded from disk (TransformerLens reads its name_or_path)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return model.eval().requires_grad_(False), tokenizer, out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _best(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
    return min(times)


def _gpu_peak() -> str:
    import torch

    if not torch.cuda.is_available():
        return ""
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return f", GPU peak {peak:.1f} GiB"


def load_prompts(tokenizer: Any, rows: list[Any], data: Path, capability: str = "multi_turn") -> Any:
    from core.capabilities import Capability
    from probes.prompts import build_prompts

    prompts = build_prompts(tokenizer, rows, Capability(capability), add_generation_prompt=False)
    if not len(prompts):
        raise SystemExit(f"--data {data}: no row of capability {capability}")
    return prompts


def batches_of(prompts: Any, tokenizer: Any, batch_size: int, max_batch_tokens: int | None = None) -> list[Any]:
    from core.chat import pad_id_of
    from probes.batching import plan_batches
    from probes.prompts import make_batch

    spans = plan_batches([len(i) for i in prompts.ids], batch_size, max_batch_tokens)
    return [make_batch(prompts, range(a, b), pad_id_of(tokenizer)) for a, b in spans]


OVERHEAD_TARGET = 0.97


def bench_throughput(
    model: Any, tokenizer: Any, prompts: Any, batch_size: int, repeats: int
) -> tuple[float, float, Any]:
    """(body-forward seconds, recording seconds, the first batch's recorded mlp_out) for one batch size."""
    import torch

    from access.drivers import make_backend

    batches = batches_of(prompts, tokenizer, batch_size)
    n, n_layers = len(prompts), model.config.num_hidden_layers
    tokens = sum(len(i) for i in prompts.ids)
    backend = make_backend("torch", model, hooks=("mlp_out",), layers=list(range(n_layers)), position="last")
    device = model.get_input_embeddings().weight.device

    @torch.inference_mode()
    def plain() -> None:
        for b in batches:
            model.base_model(
                input_ids=b.input_ids.to(device),
                attention_mask=b.attention_mask.to(device),
                position_ids=b.position_ids.to(device),
                use_cache=False,
            )

    def record() -> None:
        for b in batches:
            backend.record(b)

    plain()  # warm-up
    _gpu_peak()
    t_plain, t_rec = 1e9, 1e9
    for _ in range(repeats):  # interleaved, best of each: the machine is shared
        t_plain = min(t_plain, _best(plain, 1))
        t_rec = min(t_rec, _best(record, 1))
    ratio = t_plain / t_rec
    print(
        f"prompts: {n} ({tokens / n:.0f} tokens on average), batch {batch_size}, {n_layers} layers, "
        f"d_model {model.config.hidden_size}, torch threads {torch.get_num_threads()}"
        + ("" if device.type == "cpu" else f", {device} {model.dtype}{_gpu_peak()}")
    )
    print(f"plain body forward (no LM head):            {t_plain:7.2f} s  {n / t_plain:8.1f} prompts/s")
    print(
        f"torch backend, mlp_out x all layers, last:  {t_rec:7.2f} s  {n / t_rec:8.1f} prompts/s  "
        f"ratio {ratio:.3f}x  [target >= {OVERHEAD_TARGET}x: {'PASS' if ratio >= OVERHEAD_TARGET else 'FAIL'}]"
    )
    return t_plain, t_rec, backend.record(batches[0])["mlp_out"]


def bench_budgets(
    model: Any, tokenizer: Any, prompts: Any, batch_sizes: list[int], budgets: list[str], repeats: int
) -> None:
    """Fixed batch sizes vs token budgets on one wide-length prompt set: speed, memory, and equal values."""
    import torch

    from access.drivers import make_backend
    from probes.batching import DEFAULT_BATCH_SIZE, activation_bytes_per_token, default_max_batch_tokens

    device = model.get_input_embeddings().weight.device
    dtype_bytes = torch.tensor([], dtype=model.dtype).element_size()
    longest = max(len(i) for i in prompts.ids)
    estimate = activation_bytes_per_token(model.config, dtype_bytes, longest)
    backend = make_backend(
        "torch", model, hooks=("mlp_out",), layers=list(range(model.config.num_hidden_layers)), position="last"
    )
    ways: list[tuple[str, int, int | None]] = [(f"batch {b}", b, None) for b in batch_sizes]
    for budget in budgets:
        tokens = (
            default_max_batch_tokens(str(device), model.config, dtype_bytes, longest)
            if budget == "default"
            else int(budget)
        )
        ways.append(
            (f"budget {tokens}" + (" (device default)" if budget == "default" else ""), DEFAULT_BATCH_SIZE, tokens)
        )
    lengths = [len(i) for i in prompts.ids]
    print(
        f"prompts: {len(prompts)}, {min(lengths)}-{max(lengths)} tokens ({sum(lengths) / len(lengths):.0f} on "
        f"average); activation estimate {estimate / 1024:.1f} KiB per padded token"
    )
    reference: dict[int, Any] = {}
    for label, batch_size, budget in ways:
        batches = batches_of(prompts, tokenizer, batch_size, budget)
        values: dict[int, Any] = {}

        def record(batches: list[Any] = batches, values: dict[int, Any] = values) -> None:  # bound: this way's
            for b in batches:
                out = backend.record(b)["mlp_out"]
                values.update({sid: out[i] for i, sid in enumerate(b.samples.sample_ids.tolist())})

        try:
            base = _gpu_reset()
            seconds = min(_best(record, 1) for _ in range(repeats))
        except torch.OutOfMemoryError:
            print(f"{label:34s} out of GPU memory")
            torch.cuda.empty_cache()
            continue
        padded = max(len(b) * b.input_ids.shape[1] for b in batches)
        memory = ""
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated() - base
            memory = f", GPU peak +{peak / 2**30:5.2f} GiB = {peak / padded / 1024:5.1f} KiB per padded token"
        if not reference:
            reference = dict(values)
        diff = max(float((values[k].float() - reference[k].float()).abs().max()) for k in reference)
        scale = max(float(reference[k].float().abs().max()) for k in reference)
        print(
            f"{label:34s} {len(batches):4d} batches, largest {padded:6d} padded tokens, "
            f"{len(prompts) / seconds:8.1f} prompts/s{memory}; largest difference vs {ways[0][0]}: "
            f"{diff:.3g} ({diff / scale:.1e} of the largest value)"
        )


def _gpu_reset() -> int:
    import torch

    if not torch.cuda.is_available():
        return 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def bench_e2e(
    sft: Path, dpo: Path, data: Path, prompts: Any, batch_size: int, tmp: Path, t_plain: float, device: str, dtype: str
) -> None:
    from probes.config import RecordConfig
    from probes.recording import record_run

    n = len(prompts)
    start = time.perf_counter()
    record_run(
        RecordConfig(
            sft_dir=sft,
            dpo_dir=dpo,
            data_file=data,
            capabilities=prompts.capability,
            out_dir=tmp / "e2e",
            batch_size=batch_size,
            device=device,
            dtype=dtype,
            local="none",  # the two models alone, as this figure has always measured (part 7: the local basis)
        ),
        progress=False,
    )
    t_e2e = time.perf_counter() - start
    print(
        f"record_run end to end (both models, load, hash, shards, HDF5): {t_e2e:.2f} s, "
        f"{2 * n / t_e2e:.1f} model-prompts/s ({t_e2e / (2 * t_plain):.2f}x the time of two plain forwards)"
    )


def reference_sample(prompts: Any, n: int) -> list[int]:
    """Indices of ``n`` prompts evenly spaced through the length-sorted set (its length quantiles).

    >>> reference_sample(list(range(10)), 4)
    [0, 3, 6, 9]
    """
    n = min(n, len(prompts))
    return [round(i * (len(prompts) - 1) / max(n - 1, 1)) for i in range(n)]


def bench_reference(
    model: Any, tok: Any, model_dir: Path, all_rows: list[Any], prompts: Any, n_prompts: int, ours: float
) -> Any:
    """interpret.py: HookedTransformer(...).run_with_cache(rendered_string) per prompt, every position kept.

    It runs on a length-stratified subset of the same prompts (:func:`reference_sample`), so the
    two rates are per prompt of the same length distribution. The bridge wraps ``model`` itself and
    switches it to eager attention in place, so run this after the throughput measurements.
    Returns the bridge and the hook names, for :func:`check_values`."""
    import torch
    from transformer_lens.model_bridge import TransformerBridge

    device = model.get_input_embeddings().weight.device
    bridge = TransformerBridge.boot_transformers(
        str(model_dir), hf_model=model, tokenizer=tok, device=str(device), dtype=model.dtype
    )
    names = [f"blocks.{i}.hook_mlp_out" for i in range(bridge.cfg.n_layers)]
    rows = [all_rows[prompts.samples.sample_ids[i]] for i in reference_sample(prompts, n_prompts)]
    # the reference renders without lowercasing and passes the string, so TL prepends a second BOS
    texts = [
        tok.apply_chat_template(
            [{"role": t.role.capitalize(), "content": t.content} for t in r.question], tokenize=False
        )
        for r in rows
    ]
    kept: list[torch.Tensor] = []

    def run() -> None:
        kept.clear()
        with torch.no_grad():
            for text in texts:
                _, cache = bridge.run_with_cache(text, names_filter=names)
                kept.append(torch.stack([cache[n][-1][-1] for n in names]).to(torch.float16))

    run()
    seconds = _best(run, 1)
    rate = len(texts) / seconds
    print(
        f"reference (TL run_with_cache, 1 prompt/forward, all positions): {seconds:.2f} s for {len(texts)} prompts, "
        f"{rate:.1f} prompts/s (about {sum(len(tok(t).input_ids) for t in texts) / len(texts):.0f} tokens each)"
    )
    print(f"ours vs reference: {ours / rate:.1f}x  (reported, no target: see docs/probes.md)")
    return bridge, names


def check_values(bridge: Any, names: list[str], prompts: Any, ours: Any, n: int = 4) -> None:
    """Our batched, left-padded last-token mlp_out vs the bridge's on the same ids, one prompt at a time."""
    import torch

    worst_rel, worst_cos = 0.0, 1.0
    with torch.no_grad():
        for i in range(min(n, len(ours))):
            ids = torch.tensor([prompts.ids[i]], device=bridge.cfg.device)
            _, cache = bridge.run_with_cache(ids, names_filter=names)
            ref = torch.stack([cache[name][0, -1] for name in names]).float().cpu()
            worst_rel = max(worst_rel, float((ours[i] - ref).abs().max() / ref.abs().max()))
            worst_cos = min(worst_cos, float(torch.nn.functional.cosine_similarity(ours[i], ref, dim=-1).min()))
    print(
        f"values vs reference on {min(n, len(ours))} prompts (same ids): max |diff| / max |ref| {worst_rel:.2e}, "
        f"min cosine per layer {worst_cos:.5f}"
    )


RSS_SCRIPT = """
import resource, sys
from probes.config import RecordConfig
from probes.recording import record_run
config = RecordConfig(sft_dir=sys.argv[1], dpo_dir=sys.argv[2], data_file=sys.argv[3], out_dir=sys.argv[4],
                      capabilities="multi_turn", hooks="mlp_out,mlp_post", batch_size=int(sys.argv[5]))
record_run(config, progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_rss(sft: Path, dpo: Path, tmp: Path, n_small: int, batch_size: int, repeats: int) -> None:
    """Median over ``repeats`` fresh subprocesses: glibc's heap layout varies run to run by ~5%."""
    import statistics

    peaks = {}
    for n in (n_small, 10 * n_small):
        data = write_rows(tmp / f"rss_{n}.jsonl", n, seed=1)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        runs = []
        for r in range(repeats):
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    RSS_SCRIPT,
                    str(sft),
                    str(dpo),
                    str(data),
                    str(tmp / f"rss_run_{n}_{r}"),
                    str(batch_size),
                ],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(int(out.stdout.strip().splitlines()[-1]) / 1024)
        peaks[n] = statistics.median(runs)
        print(
            f"peak RSS recording {n:5d} prompts (mlp_out + mlp_post, all layers): {peaks[n]:7.1f} MiB "
            f"(median of {repeats}: {', '.join(f'{x:.0f}' for x in runs)})"
        )
    growth = peaks[10 * n_small] / peaks[n_small] - 1
    print(f"peak RSS growth for 10x prompts: {growth:+.1%}  [target <= +20%: {'PASS' if growth <= 0.20 else 'FAIL'}]")


def bench_checksum(tmp: Path, rows: int = 512, layers: int = 20, width: int = 2048, repeats: int = 3) -> None:
    """What HDF5's fletcher32 filter costs on activation-shaped data, with the store's gzip and shuffle."""
    import h5py
    import numpy as np

    values = np.random.default_rng(0).standard_normal((rows, layers, width)).astype(np.float16)
    for checksum in (False, True):
        path = tmp / f"checksum_{checksum}.h5"
        write = read = 1e9
        for _ in range(repeats):
            path.unlink(missing_ok=True)
            start = time.perf_counter()
            with h5py.File(path, "w") as handle:
                handle.create_dataset(
                    "x",
                    data=values,
                    chunks=(64, layers, width),
                    compression="gzip",
                    compression_opts=4,
                    shuffle=True,
                    fletcher32=checksum,
                )
            write = min(write, time.perf_counter() - start)
            start = time.perf_counter()
            with h5py.File(path, "r") as handle:
                handle["x"][:]
            read = min(read, time.perf_counter() - start)
        print(
            f"fletcher32 {'on ' if checksum else 'off'}: write {write:.3f} s, read {read:.3f} s, "
            f"{path.stat().st_size / 2**20:.1f} MiB for {values.nbytes / 2**20:.0f} MiB of float16"
        )


def bench_issue25(args: argparse.Namespace, tmp: Path) -> None:
    """Part 6 (see the module doc): one timed call each, figures and PASS/FAIL printed, nothing asserted."""
    from probes.attribution import attribute_run
    from probes.config import RecordConfig
    from probes.recording import record_run

    def record(name: str, **extra: Any) -> tuple[float, Path]:
        out = tmp / name.replace(", ", "_").replace(" ", "_")
        started = time.perf_counter()
        result = record_run(
            RecordConfig(
                sft_dir=args.sft,
                dpo_dir=args.dpo,
                data_file=args.data,
                capabilities=args.capability,
                out_dir=out,
                device=args.device,
                dtype=args.dtype,
                **extra,
            ),
            progress=False,
        )
        seconds = time.perf_counter() - started
        print(
            f"  {name:<28} {seconds:7.1f} s  ({sum(result.counts.values())} prompts, "
            f"{'+'.join(['sft', 'dpo'] + (['base'] if extra.get('base_dir') else []))})"
        )
        return seconds, out

    def verdict(ratio: float, target: float) -> str:
        return f"{ratio:.2f}x (target <= {target}x): {'PASS' if ratio <= target else 'FAIL'}"

    print(
        f"== 6. issue 25: response tokens, a third model, attribution ({args.capability}, {args.device}, "
        f"{torch_threads()} torch threads)"
    )
    t_last, _ = record("last-token, 2 models", position="last")
    t_resp, resp_dir = record("response_mean, 2 models", position="response_mean")
    print(f"  response_mean / last-token recording: {verdict(t_resp / t_last, 3.0)}")
    if args.base is not None:
        t_three, resp_dir = record("response_mean, 3 models", position="response_mean", base_dir=args.base)
        print(f"  three-model / two-model recording: {verdict(t_three / t_resp, 1.6)}")
    started = time.perf_counter()
    attribute_run(resp_dir, m="reference_logprob", device=args.device)
    t_attr = time.perf_counter() - started
    print(f"  attribution pass (reference_logprob, all positions): {t_attr:.1f} s")
    print(f"  attribution / one response recording pass: {verdict(t_attr / t_resp, 2.0)}")


LOCAL_COST_TARGET = 1.5


def bench_local_cost(args: argparse.Namespace, tmp: Path) -> None:
    """Part 7 (see the module doc): recording with and without the local basis, PASS/FAIL printed."""
    from core.rows import group_by_capability, read_test_rows
    from probes.config import RecordConfig
    from probes.recording import record_run

    data = args.data
    if args.local_prompts:
        rows = read_test_rows(data)
        lines = data.read_text(encoding="utf-8").splitlines()
        picked = sorted(
            i for i, _ in group_by_capability(rows, [args.capability])[args.capability][: args.local_prompts]
        )
        data = tmp / "local_prompts.jsonl"
        data.write_text("".join(lines[i] + "\n" for i in picked), encoding="utf-8")
    best: dict[str, tuple[float, float]] = {}
    for repeat in range(args.repeats):
        for local in ("none", "dpo_on_sft"):
            config = RecordConfig(
                sft_dir=args.sft,
                dpo_dir=args.dpo,
                data_file=data,
                capabilities=args.capability,
                out_dir=tmp / f"local_{local}_{repeat}",
                device=args.device,
                dtype=args.dtype,
                local=local,
            )
            wall, cpu = time.perf_counter(), time.process_time()
            result = record_run(config, progress=False)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"  --local {local:<10} {wall:7.1f} s wall, {cpu:7.1f} s CPU ({sum(result.counts.values())} prompts)")
            old = best.get(local, (float("inf"), float("inf")))
            best[local] = (min(old[0], wall), min(old[1], cpu))
    for k, what in enumerate(("wall", "CPU")):
        ratio = best["dpo_on_sft"][k] / best["none"][k]
        verdict = "PASS" if ratio <= LOCAL_COST_TARGET else "FAIL"
        print(
            f"  local basis / today's recording ({what} time, best of {args.repeats}): {ratio:.2f}x "
            f"[target <= {LOCAL_COST_TARGET}x: {verdict}]"
        )


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _ints(text: str, sep: str = ",") -> list[int]:
    return [int(part) for part in text.split(sep)]


def parse_args() -> argparse.Namespace:
    from core.capabilities import Capability

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", type=Path)
    parser.add_argument("--dpo", type=Path)
    parser.add_argument(
        "--shape", choices=("tiny", *SHAPES), default="tiny", help="random model built when --sft/--dpo are not given"
    )
    parser.add_argument(
        "--tokenizer-vocab", action="store_true", help="--shape llama-*: embedding rows = tokenizer size, not 128,256"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    parser.add_argument(
        "--data", type=Path, help="a test file (e.g. the default pair's data/test.jsonl) instead of synthetic rows"
    )
    parser.add_argument(
        "--capability",
        default="multi_turn",
        choices=[c.value for c in Capability],
        help="whose prompts of --data to record (default multi_turn)",
    )
    parser.add_argument("--prompts", type=int, default=128, help="synthetic rows to write when --data is not given")
    parser.add_argument(
        "--passage-words", type=lambda t: tuple(_ints(t, "-")), default=(150, 200), help="LO-HI words per passage"
    )
    parser.add_argument(
        "--batch-size", type=_ints, default=[16], help="one or more, comma-separated (the first for record_run and RSS)"
    )
    parser.add_argument("--reference-prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-e2e", action="store_true", help="no end-to-end record_run")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-budgets", action="store_true")
    parser.add_argument(
        "--budgets",
        type=lambda t: t.split(","),
        default=["2048", "default"],
        help="token budgets for part 2, comma-separated; 'default' is the device's",
    )
    parser.add_argument(
        "--wide-words",
        type=lambda t: tuple(_ints(t, "-")),
        default=(150, 900),
        help="LO-HI passage words of part 2's wide-length set (about 250-1,000 tokens)",
    )
    parser.add_argument(
        "--reference-words",
        type=lambda t: [tuple(_ints(r, "-")) for r in t.split(",")],
        default=[(150, 200), (480, 860)],
        help="passage words of part 3's two prompt lengths",
    )
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument(
        "--part", type=int, choices=(6, 7), help="run only this part (6: issue 25's budgets; 7: issue 38's local cost)"
    )
    parser.add_argument("--local-prompts", type=int, default=0, help="part 7: record the first N prompts only (0: all)")
    parser.add_argument("--base", type=Path, help="part 6: the base model, for the three-model figure")
    parser.add_argument("--keep", type=Path, help="part 6: record into this folder and keep the run dirs")
    parser.add_argument(
        "--quick", action="store_true", help="64 prompts, 1 repeat, 4 reference prompts, RSS at 16/160 prompts"
    )
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.repeats, args.reference_prompts = 64, 1, 4
    if (args.sft is None) != (args.dpo is None):
        parser.error("give both --sft and --dpo, or neither")
    if args.sft and args.shape != "tiny":
        parser.error("--shape builds a random model; it cannot be combined with --sft/--dpo")
    return args


def main() -> int:
    args = parse_args()
    if args.part == 7:
        if not (args.sft and args.data):
            print("--part 7 needs --sft, --dpo and --data", file=sys.stderr)
            return 2
        print(
            f"== 7. issue 38: recording with the local basis ({args.capability}, {args.device}, "
            f"{torch_threads()} torch threads)"
        )
        with tempfile.TemporaryDirectory(prefix="bench_probes_") as tmp_name:
            bench_local_cost(args, Path(tmp_name))
        return 0
    if args.part == 6:
        if not (args.sft and args.data):
            print("--part 6 needs --sft, --dpo and --data", file=sys.stderr)
            return 2
        if args.keep is not None:  # the run dirs stay, e.g. for `probe analyze` of the three-model run afterwards
            bench_issue25(args, args.keep)
            return 0
        with tempfile.TemporaryDirectory(prefix="bench_probes_") as tmp_name:
            bench_issue25(args, Path(tmp_name))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_probes_") as tmp_name:
        tmp = Path(tmp_name)
        sft = dpo = None
        if args.shape == "tiny":
            from access.pair import load_pair

            sft, dpo = (args.sft, args.dpo) if args.sft else build_pair(tmp)
            pair = load_pair(sft, dpo, device=args.device, dtype=args.dtype)
            model, tokenizer, model_dir = pair.sft, pair.tokenizer, sft
        else:
            model, tokenizer, model_dir = build_random(args.shape, tmp, args.device, args.dtype, args.tokenizer_vocab)
        from core.rows import read_test_rows

        data = args.data or write_rows(tmp / "rows.jsonl", args.prompts, words=args.passage_words)
        prompts = load_prompts(tokenizer, read_test_rows(data), data, args.capability)
        print("== 1. overhead: recording vs a plain body forward")
        for batch_size in args.batch_size:
            t_plain, _, _ = bench_throughput(model, tokenizer, prompts, batch_size, args.repeats)
            if batch_size == args.batch_size[0]:
                t_plain0 = t_plain
        if sft and dpo and not args.skip_e2e:
            bench_e2e(sft, dpo, data, prompts, args.batch_size[0], tmp, t_plain0, args.device, args.dtype)
        if not args.skip_budgets:
            print("== 2. token-budget batches vs fixed batch sizes (wide-length prompts)")
            wide = write_rows(tmp / "wide.jsonl", args.prompts, seed=2, words=args.wide_words)
            bench_budgets(
                model,
                tokenizer,
                load_prompts(tokenizer, read_test_rows(wide), wide),
                args.batch_size,
                args.budgets,
                args.repeats,
            )
        if not args.skip_reference:
            print("== 3. the authors' loop (reported ratio, no target), at two prompt lengths")
            sets = []
            # ours first: the bridge switches the model to eager attention
            for k, words in enumerate(args.reference_words):
                path = write_rows(tmp / f"reference_{k}.jsonl", args.reference_prompts * 4, seed=3 + k, words=words)
                rows = read_test_rows(path)
                length_set = load_prompts(tokenizer, rows, path)
                _, t_rec, first = bench_throughput(model, tokenizer, length_set, args.batch_size[0], args.repeats)
                sets.append((rows, length_set, len(length_set) / t_rec, first))
            for k, (rows, length_set, rate, first) in enumerate(sets):
                bridge, names = bench_reference(
                    model, tokenizer, model_dir, rows, length_set, args.reference_prompts, rate
                )
                if k == 0:
                    check_values(bridge, names, length_set, first)
        if sft and dpo and not args.skip_rss:
            print("== 4. peak memory")
            bench_rss(sft, dpo, tmp, 16 if args.quick else 32, args.batch_size[0], args.repeats)
        print("== 5. what the HDF5 checksum costs")
        bench_checksum(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
