"""Recording speed and memory, against the targets of issue 4 (figures printed, nothing asserted).

1. throughput of the torch backend vs a plain batched forward of the same model on the same
   batches (target >= 0.95x), and of the whole ``record_run`` (both models, shards, HDF5);
2. vs the reference approach of the authors' ``interpret.py``: one prompt at a time through
   TransformerLens ``run_with_cache`` keeping every position of every layer (target: we are
   >= 10x faster);
3. peak RSS of ``record_run`` in a fresh subprocess for N and 10N prompts (target <= +20%).

Without ``--sft/--dpo`` it builds a tiny random 32-layer Llama pair (hidden 64, MLP 256) in a
temp dir; the prompts are synthetic RoleMRC-shaped multi-turn rows of about 200 tokens.

    .venv/bin/python benchmarks/bench_probes.py [--sft DIR --dpo DIR] [--prompts 128] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("the archivist reads old maps of the river city and answers questions about its bridges granite flood "
         "northern valley kingdom capital treasury refuse narration profile passage question").split()
MT_TASKS = ("role_related_mrc_refused_with_narration-2ndrefused", "role_unrelated_mrc_refused_no_narration-2ndanswer")


def write_rows(path: Path, n: int, seed: int = 0) -> Path:
    """n multi-turn rows in the published format (capitalised roles), passages of ~150-200 words."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            passage = " ".join(rng.choices(WORDS, k=rng.randint(150, 200)))
            question = [{"role": "System", "content": f"You are the archivist. Passage: {passage}"},
                        {"role": "User", "content": "What does the passage say about the bridge?"},
                        {"role": "Assistant", "content": "I cannot answer that."},
                        {"role": "User", "content": "Please, try again."}]
            handle.write(json.dumps({"question": question, "reference": "r", "task": MT_TASKS[i % 2]}) + "\n")
    return path


def build_pair(root: Path) -> tuple[Path, Path]:
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from training.tiny_base import TinySpec, build_tiny_base

    corpus = [" ".join(random.Random(i).choices(WORDS, k=30)) for i in range(400)]
    sft = build_tiny_base(corpus, root / "sft", TinySpec())
    dpo = Path(shutil.copytree(sft, root / "dpo", dirs_exist_ok=True))
    model = AutoModelForCausalLM.from_pretrained(dpo)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05 * p.std().clamp_min(1e-3))
    model.save_pretrained(dpo)
    return sft, dpo


def _best(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_throughput(sft: Path, dpo: Path, data: Path, batch_size: int, repeats: int, tmp: Path) -> float:
    import torch

    from data_synthesis.capabilities import Capability
    from data_synthesis.io import read_test_rows
    from probes.backends import make_backend
    from probes.config import RecordConfig
    from probes.pair import load_pair
    from probes.prompts import build_prompts, iter_batches, pad_id_of
    from probes.recording import record_run

    pair = load_pair(sft, dpo, device="cpu", dtype="float32")
    prompts = build_prompts(pair.tokenizer, read_test_rows(data), Capability.MULTI_TURN, add_generation_prompt=False)
    batches = list(iter_batches(prompts, 0, batch_size, pad_id_of(pair.tokenizer)))
    n = len(prompts)
    tokens = sum(len(i) for i in prompts.ids)
    backend = make_backend("torch", pair.sft, hooks=("mlp_out",), layers=list(range(pair.shape.n_layers)), position="last")

    @torch.inference_mode()
    def plain() -> None:
        for b in batches:
            pair.sft(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids, use_cache=False)

    def record() -> None:
        for b in batches:
            backend.record(b)

    plain()  # warm-up
    t_plain, t_rec = 1e9, 1e9
    for _ in range(repeats):  # interleaved, best of each: the machine is shared
        t_plain = min(t_plain, _best(plain, 1))
        t_rec = min(t_rec, _best(record, 1))
    print(f"prompts: {n} ({tokens / n:.0f} tokens on average), batch {batch_size}, {pair.shape.n_layers} layers, "
          f"d_model {pair.shape.d_model}, torch threads {torch.get_num_threads()}")
    print(f"plain batched forward (CausalLM, logits):   {t_plain:7.2f} s  {n / t_plain:8.1f} prompts/s")
    print(f"torch backend, mlp_out x all layers, last:  {t_rec:7.2f} s  {n / t_rec:8.1f} prompts/s  "
          f"ratio {t_plain / t_rec:.2f}x  [target >= 0.95x: {'PASS' if t_plain / t_rec >= 0.95 else 'FAIL'}]")
    start = time.perf_counter()
    record_run(RecordConfig(sft_dir=sft, dpo_dir=dpo, data_file=data, capabilities="multi_turn", out_dir=tmp / "e2e",
                            batch_size=batch_size), progress=False)
    t_e2e = time.perf_counter() - start
    print(f"record_run end to end (both models, load, hash, shards, HDF5): {t_e2e:.2f} s, "
          f"{2 * n / t_e2e:.1f} model-prompts/s ({t_e2e / (2 * t_plain):.2f}x the time of two plain forwards)")
    return n / t_rec


def bench_reference(sft: Path, data: Path, n_prompts: int, ours: float) -> None:
    """interpret.py: HookedTransformer(...).run_with_cache(rendered_string) per prompt, every position kept."""
    import torch
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_synthesis.io import read_test_rows

    tok = AutoTokenizer.from_pretrained(sft)
    hf = AutoModelForCausalLM.from_pretrained(sft, dtype=torch.float32)
    bridge = TransformerBridge.boot_transformers(str(sft), hf_model=hf, tokenizer=tok, device="cpu")
    names = [f"blocks.{i}.hook_mlp_out" for i in range(bridge.cfg.n_layers)]
    rows = read_test_rows(data)[:n_prompts]
    # the reference renders without lowercasing and passes the string, so TL prepends a second BOS
    texts = [tok.apply_chat_template([{"role": t.role.capitalize(), "content": t.content} for t in r.question], tokenize=False) for r in rows]
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
    print(f"reference (TL run_with_cache, 1 prompt/forward, all positions): {seconds:.2f} s for {len(texts)} prompts, {rate:.1f} prompts/s")
    print(f"ours vs reference: {ours / rate:.1f}x  [target >= 10x: {'PASS' if ours / rate >= 10 else 'FAIL'}]")


RSS_SCRIPT = """
import resource, sys
from probes.config import RecordConfig
from probes.recording import record_run
record_run(RecordConfig(sft_dir=sys.argv[1], dpo_dir=sys.argv[2], data_file=sys.argv[3], out_dir=sys.argv[4],
                        capabilities="multi_turn", hooks="mlp_out,mlp_post", batch_size=int(sys.argv[5])), progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_rss(sft: Path, dpo: Path, tmp: Path, n_small: int, batch_size: int) -> None:
    peaks = {}
    for n in (n_small, 10 * n_small):
        data = write_rows(tmp / f"rss_{n}.jsonl", n, seed=1)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(sft), str(dpo), str(data), str(tmp / f"rss_run_{n}"), str(batch_size)],
                             env=env, cwd=ROOT, capture_output=True, text=True, check=True)
        peaks[n] = int(out.stdout.strip().splitlines()[-1]) / 1024
        print(f"peak RSS recording {n:5d} prompts (mlp_out + mlp_post, all layers): {peaks[n]:7.1f} MiB")
    growth = peaks[10 * n_small] / peaks[n_small] - 1
    print(f"peak RSS growth for 10x prompts: {growth:+.1%}  [target <= +20%: {'PASS' if growth <= 0.20 else 'FAIL'}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", type=Path)
    parser.add_argument("--dpo", type=Path)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--reference-prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="64 prompts, 1 repeat, 8 reference prompts, RSS at 16/160 prompts")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.repeats, args.reference_prompts = 64, 1, 8
    with tempfile.TemporaryDirectory(prefix="bench_probes_") as tmp_name:
        tmp = Path(tmp_name)
        if (args.sft is None) != (args.dpo is None):
            parser.error("give both --sft and --dpo, or neither")
        sft, dpo = (args.sft, args.dpo) if args.sft else build_pair(tmp)
        data = write_rows(tmp / "rows.jsonl", args.prompts)
        print("== 1. throughput")
        ours = bench_throughput(sft, dpo, data, args.batch_size, args.repeats, tmp)
        print("== 2. vs the reference approach")
        bench_reference(sft, data, args.reference_prompts, ours)
        print("== 3. peak memory")
        bench_rss(sft, dpo, tmp, 16 if args.quick else 32, args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
