"""Throughput of generation with intervention hooks vs the same generation without hooks.

Target: hooked throughput >= 0.9x unhooked. Both arms generate exactly the same number of
tokens (``min_new_tokens`` = ``max_new_tokens``) on the same left-padded batches; the arms
are interleaved and the best of ``--repeats`` is kept for each, so machine noise hits both.
The hooks scale 64 units spread over layers 12-31 of ``mlp_out`` (the paper's window) and
count changed values, exactly as ``probe intervene`` runs them. The nnsight backend is
timed too, for information.

    python benchmarks/bench_interventions.py                 # tiny random 32-layer Llama
    python benchmarks/bench_interventions.py --model-dir DIR # any local causal LM
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

CORPUS = ["The archivist reads old maps of the river city and answers questions about its bridges.",
          "I cannot answer that; it lies beyond what I know.", "Please answer in exactly three bullet points."] * 60


def build_model(model_dir: Path | None) -> tuple[object, object]:
    """(model, tokenizer) in eval mode: ``model_dir``, or a tiny random 32-layer Llama built in a temp dir."""
    from core.models import load_causal_lm

    if model_dir is not None:
        model, tokenizer = load_causal_lm(model_dir, "--model-dir")
        return model.eval(), tokenizer
    from training.tiny_base import TinySpec, build_tiny_base

    with tempfile.TemporaryDirectory(prefix="bench_interventions_") as tmp:  # loaded into memory, then removed
        return build_model(build_tiny_base(CORPUS, Path(tmp) / "tiny", TinySpec(vocab_size=512)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--units", type=int, default=64)
    args = parser.parse_args()

    from analysis.neuron_sets import Neuron, NeuronSet
    from core.generation import GenerationConfig
    from core.schema import TestRow, Turn
    from interventions.generation import ABGenerator, Intervention
    from interventions.scaling import PAPER_FACTOR
    from probes.hook_points import n_layers, width

    torch.manual_seed(0)
    model, tokenizer = build_model(args.model_dir)
    total, units = n_layers(model), width(model, "mlp_out")
    layers = list(range(min(12, total - 1), total))
    neurons = NeuronSet([Neuron(layers[i % len(layers)], (7 * i) % units) for i in range(args.units)], "mlp_out")
    rows = [TestRow([Turn("system", "You are the archivist of the river city."), Turn("user", f"Question {i}: " + CORPUS[i % 3] * (1 + i % 3))],
                    "ref", "role_related_mrc_answer_no_narration") for i in range(args.prompts)]
    config = GenerationConfig(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    intervention = Intervention(neurons, PAPER_FACTOR)
    print(f"model: {n_layers(model)} layers, d_model {units}; {args.prompts} prompts x {args.new_tokens} new tokens, batch {args.batch_size}; "
          f"{len(neurons)} units over layers {layers[0]}-{layers[-1]}; torch threads {torch.get_num_threads()}")

    results: dict[str, list[float]] = {"no hooks": [], "torch hooks": [], "nnsight": []}
    generators = {"torch": ABGenerator(model, tokenizer, rows, config, "torch"), "nnsight": ABGenerator(model, tokenizer, rows, config, "nnsight")}
    original = model.generation_config.min_new_tokens
    model.generation_config.min_new_tokens = args.new_tokens  # identical token counts in every arm
    try:
        generators["torch"].run()  # warm-up
        for _ in range(args.repeats):
            for name, gen, arm in (("no hooks", generators["torch"], None), ("torch hooks", generators["torch"], intervention),
                                   ("nnsight", generators["nnsight"], intervention)):
                out = gen.run(arm)
                results[name].append(args.prompts * args.new_tokens / out.seconds)  # every row generates exactly new_tokens
    finally:
        model.generation_config.min_new_tokens = original
    best = {name: max(values) for name, values in results.items()}
    for name, value in best.items():
        print(f"{name:>12}: {value:8.1f} tokens/s (best of {args.repeats}; all: {', '.join(f'{v:.0f}' for v in results[name])})")
    ratio = best["torch hooks"] / best["no hooks"]
    print(f"hooked / unhooked throughput: {ratio:.3f}x  (nnsight: {best['nnsight'] / best['no hooks']:.3f}x)")
    print(f"verdict: {'PASS' if ratio >= 0.9 else 'FAIL'} (target >= 0.9x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
