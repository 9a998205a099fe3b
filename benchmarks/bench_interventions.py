"""Throughput of generation with intervention hooks vs the same generation without hooks.

Target: hooked throughput >= 0.9x unhooked. Both arms generate exactly the same number of
tokens (``min_new_tokens`` = ``max_new_tokens``) on the same left-padded batches; the arms
are interleaved and the best of ``--repeats`` is kept for each, so machine noise hits both.
The hooks scale 64 units spread over layers 12-31 of ``mlp_out`` (the paper's window) and
count changed values, exactly as ``probe intervene`` runs them. The nnsight backend is
timed too, for information.

    python benchmarks/bench_interventions.py                 # tiny random 32-layer Llama
    python benchmarks/bench_interventions.py --model-dir DIR # any local causal LM

Part 2 (``--shared RUN_DIR``): a whole A/B as ``probe intervene`` plans it (baseline, main arm,
control, ``--placebo`` placebo arms on the run's units), generated arm by arm with ``generate``
and then in shared batches (:mod:`access.shared_generation`), side by side in one process on the
same rows. It prints both times, the speed-up (target >= 3x), the ceiling for this configuration
(weight FLOPs: the shared blocks counted once, the rest and the LM head once per arm) and the
share of it reached (aim >= 75%), the peak memory of each path, the estimate printed before
generating against the time taken, and every token that differs between the two paths.

    python benchmarks/bench_interventions.py --shared runs/latest --rows 16
    python benchmarks/bench_interventions.py --shared runs/latest --rows 16 \
        --neurons runs/latest/analysis_mean_diff/neurons_multi_turn_mlp_out.json

Part 3 (``--floor RUN_DIR``): can ``probe intervene RUN_DIR -c multi_turn`` with its defaults (or ``--rows``,
``--placebo``, ``--neurons``, ``--new-tokens``, ``--collateral``) finish within ``--budget`` minutes on this
machine with *any* engine that computes each arm exactly? It counts the weight FLOPs that no sharing between arms
removes (each distinct prompt prefix's last token through the blocks below the fork once, through the blocks from
the fork up once per pass; each generated token likewise, plus the LM head per pass) and divides them by this
machine's best rate for the model's own matrix products at the engine's batch size. Attention and everything else
count as free, so the floor is a lower bound; it prints it for prompt passes alone and with every row decoding to the
token limit, and beside it the same count for the prompt tokens the shared engine runs (stems once, padding included).

    python benchmarks/bench_interventions.py --floor runs/latest

Part 4 (``--outcomes RUN_DIR``): the continuous outcomes (docs/interventions.md). First the identities on the pair
the run recorded, teacher-forced on ``--rows`` multi_turn rows' references: patching no units closes exactly 0 of the
gap, and the paper's factor 1 − 1e-6 on the run's units closes less than 1e-4 (PASS/FAIL each). Then the default
``probe intervene RUN_DIR -c multi_turn`` (outcomes on) is timed against 20 minutes, and ``--outcomes only
--responses <its folder>`` against 10 minutes (PASS/FAIL each); ``--limit N`` times both on N rows instead and prints
the full run's time at the same pace per row as an estimate, with no PASS/FAIL.

    python benchmarks/bench_interventions.py --outcomes runs/latest [--limit 16] [--skip-runs]

Part 5 (``--outcome-passes RUN_DIR``): seconds per teacher-forced outcome pass, before and after the shared engine
(:mod:`access.forced_passes`), on the rows, responses, DPO pairs and arms of the default ``probe intervene RUN_DIR -c
multi_turn`` (the intervened model's arms and placebo sets; the KL rows' responses are the other model's greedy ones,
generated here first). ``before`` is the engine the outcomes had (``Outcomes(engine="per-arm")``: every sequence whole,
every arm from block 0, a patch's source in lockstep), timed on its first call (the target and the unedited pass)
and on ``--before-arms`` arms; ``after`` is ``Outcomes.arms`` on every arm at once. It prints both, the largest
difference between the two engines' outcomes on the arms both ran (the tolerance the tests hold: 1e-5), and the
default run's estimated wall time: ``--generation-minutes`` (the run with ``--outcomes off``; 6.5 by default, part
7's estimate for the default held-out rows, docs/interventions.md) plus the outcome passes at the measured pace,
PASS/FAIL against 20 minutes (10 for ``--outcomes only``). ``--rows N`` runs N rows and scales the outcome passes by
rows.

    python benchmarks/bench_interventions.py --outcome-passes runs/latest [--rows 40] [--before-arms 1]

Part 6 (``--amplify``): the extra cost of the amplification arms (docs/interventions.md, issue 39) on the embedded
default pair (or ``--model-dir`` DPO and ``--source-dir`` SFT). The weight blend of ``expo`` (every parameter, alpha
2) entered and left ``--repeats`` times: the best seconds, PASS/FAIL against 5 s, and the parameters' bytes per
second; then ``--prompts`` greedy generations of ``--new-tokens`` tokens each (every row to the limit) unedited, under
``expo`` alpha 2 and under ``lda`` alpha 1 (the SFT model run to its logits in lockstep), the best of ``--repeats``
each, interleaved: LDA's time over one unedited arm's, PASS/FAIL against 2.5x (the target is about 2x: two models'
forwards per token).

    python benchmarks/bench_interventions.py --amplify [--prompts 16] [--new-tokens 32] [--repeats 3]

Part 7 (``--heldout RUN_DIR``): seconds per generation pass on the held-out split's multi_turn rows, which ``probe
intervene`` generates by default (issue 37: 36 multi-turn rows of 340 prompt tokens on average, up to 400), beside
the run's own test split's multi_turn rows: one unedited greedy pass of the run's DPO model over each
(``--new-tokens``, the A/B's 32 by default; the A/B's batch size), its seconds and seconds per row. Then the default
``probe intervene RUN_DIR -c multi_turn`` on the held-out rows is estimated from the measured pass: its generation
passes weighted as ``probe replicate``'s estimate weighs them (:func:`study.replicate_estimate.ab_passes`: an arm
decoded in shared batches costs 0.6 of a pass; with outcomes on, the other model's baseline too) and its
teacher-forced outcome passes as ``probe intervene``'s own estimate counts them
(:func:`interventions.outcomes.forced_passes`, :func:`interventions.outcomes.outcome_seconds`), PASS/FAIL against 15
minutes (an estimate), with and without the outcomes (``--outcomes off``). Both are ranges: with decide-first the
placebo sets run only as the arms' verdicts need them (:mod:`interventions.sequential`). ``--run`` times that run
itself instead, with ``--outcomes off`` (``--top-k K`` where the run has no analysed neuron set), PASS/FAIL against 15
minutes (the default run with its outcomes is part 4's).

    python benchmarks/bench_interventions.py --heldout runs/latest [--run [--top-k 64]]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from core.flops import Weights, matmul_rate, shared_passes

CORPUS = [
    "The archivist reads old maps of the river city and answers questions about its bridges.",
    "I cannot answer that; it lies beyond what I know.",
    "Please answer in exactly three bullet points.",
] * 60


def build_model(model_dir: Path | None) -> tuple[object, object]:
    """(model, tokenizer) in eval mode: ``model_dir``, or a tiny random 32-layer Llama built in a temp dir."""
    from core.models import load_causal_lm

    if model_dir is not None:
        model, tokenizer = load_causal_lm(model_dir, "--model-dir")
        return model.eval(), tokenizer
    from training.tiny_base import TinySpec, build_tiny_base

    with tempfile.TemporaryDirectory(prefix="bench_interventions_") as tmp:  # loaded into memory, then removed
        return build_model(build_tiny_base(CORPUS, Path(tmp) / "tiny", TinySpec(vocab_size=512)))


class PeakMemory:
    """The peak resident memory of this process above its level at the start, sampled every 20 ms in a thread."""

    def __enter__(self) -> PeakMemory:
        import threading

        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mib(self) -> float:
        return (self.peak - self.start) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def shared_vs_per_arm(args: argparse.Namespace) -> int:
    """Part 2: one A/B's passes arm by arm, then in shared batches."""
    import time

    from access.edits import site_edits
    from access.hook_points import attach
    from access.shared_generation import SharedDecoder
    from core.decoding import GenerationConfig
    from interventions.config import ABConfig
    from interventions.outcome_runs import outcome_runs
    from interventions.passes import generators, plan_passes
    from interventions.plan import plan_ab

    config = ABConfig(
        run_dir=args.shared,
        capability="multi_turn",
        placebo=args.placebo,
        top_k=args.top_k,
        neurons=args.neurons,
        limit=args.rows,
        collateral=False,
        generation=GenerationConfig(max_new_tokens=args.new_tokens, batch_size=args.batch_size),
    )
    plan = plan_ab(config)
    outcome_runs(plan, lambda _line: None)  # as run_ab does: loads the outcomes' target, whose baseline runs too
    passes = plan_passes(plan)
    model = plan.models[config.model]
    generator = generators(plan)[config.model]
    layers = sorted(plan.neurons.by_layer())
    print(
        f"{len(passes)} passes (baseline, {len(plan.arms)} arms, {len(passes) - 1 - len(plan.arms)} placebos) "
        f"x {len(plan.rows)} multi_turn rows x up to {config.generation.max_new_tokens} new tokens; "
        f"{len(plan.neurons)} units of {plan.neurons.hook} in layers {layers[0]}-{layers[-1]} of "
        f"{model.config.num_hidden_layers}; batch {config.generation.batch_size}; "
        f"torch threads {torch.get_num_threads()}"
    )
    decoder = SharedDecoder(generator.generator, attach=attach)
    compiled = [site_edits(model, one.edits) if one.edits else None for one in passes]
    estimate = decoder.estimate_seconds(compiled)
    print(
        f"shared batches estimated at {estimate:.0f} s; arm by arm first, {len(passes)} generate() passes:", flush=True
    )
    with PeakMemory() as memory_per_arm:
        start = time.perf_counter()
        per_arm = []
        for number, one in enumerate(passes, 1):
            per_arm.append(generator.run(one.edits or None))
            spent = time.perf_counter() - start
            print(
                f"  pass {number}/{len(passes)}, about {spent / number * (len(passes) - number):.0f} s left", flush=True
            )
        per_arm_seconds = time.perf_counter() - start
    compiled = [site_edits(model, one.edits) if one.edits else None for one in passes]
    with PeakMemory() as memory_shared:
        start = time.perf_counter()
        shared = decoder.run(compiled)
        shared_seconds = time.perf_counter() - start
    speedup = per_arm_seconds / shared_seconds
    ceiling = _ceiling(Weights.of(plan.model_dir), decoder, decoder.fork_layer(compiled), len(passes), per_arm)
    print(f"arm by arm (generate): {per_arm_seconds:7.1f} s, peak memory +{memory_per_arm.mib:.0f} MiB")
    print(
        f"shared batches:        {shared_seconds:7.1f} s, peak memory +{memory_shared.mib:.0f} MiB "
        f"(estimated before generating: {estimate:.0f} s)"
    )
    print(
        f"speed-up: {speedup:.3f}x; ceiling for this configuration {ceiling:.2f}x (fork at block "
        f"{decoder.fork_layer(compiled)}); reached {speedup / ceiling:.0%}"
    )
    differing = [
        (one.key, row)
        for one, a, b in zip(passes, per_arm, shared, strict=True)
        for row, (x, y) in enumerate(zip(a.ids, b.ids, strict=True))
        if x != y
    ]
    tokens = sum(len(g.ids[row]) for g in per_arm for row in range(len(g.ids)))
    print(
        f"tokens that differ between the paths: {len(differing)} rows of {len(passes) * len(plan.rows)} ({tokens} "
        "tokens generated per path)"
    )
    for key, row in differing[:20]:
        print(f"  differs: {key}, row {row}")
    print(
        f"verdict: {'PASS' if speedup >= 3.0 else 'FAIL'} (target >= 3x); "
        f"ceiling share {'PASS' if speedup / ceiling >= 0.75 else 'FAIL'} (aim >= 75%); "
        f"identical tokens {'PASS' if not differing else 'FAIL'}"
    )
    return 0


def floor(args: argparse.Namespace) -> int:
    """Part 3: the weight-FLOP floor of one A/B on this machine, against the time budget."""
    from dataclasses import replace

    from access.edits import site_edits
    from access.shared_generation import SharedDecoder
    from interventions.config import ABConfig
    from interventions.outcome_runs import outcome_runs
    from interventions.passes import generators, plan_passes
    from interventions.plan import plan_ab

    config = ABConfig(  # probe intervene's defaults but for what the flags of part 3 give
        run_dir=args.floor,
        capability="multi_turn",
        placebo=args.placebo,
        neurons=args.neurons,
        collateral=args.collateral,
        limit=args.rows if "--rows" in sys.argv else None,
    )
    if "--new-tokens" in sys.argv:
        config = replace(config, generation=replace(config.generation, max_new_tokens=args.new_tokens))
    plan = plan_ab(config)
    outcome_runs(plan, lambda _line: None)  # as run_ab does: loads the outcomes' target, whose baseline runs too
    passes = plan_passes(plan)
    model = plan.models[config.model]
    generator = generators(plan)[config.model].generator
    decoder = SharedDecoder(generator)
    fork = decoder.fork_layer([site_edits(model, one.edits) if one.edits else None for one in passes])
    total, n = int(model.config.num_hidden_layers), len(passes)
    blocks_per_token = shared_passes(fork, n, total) * total
    distinct = _distinct_prefixes(generator.prompts)
    padded = decoder.padded_prompt_tokens()
    steps = len(generator.prompts) * config.generation.max_new_tokens
    weights = Weights.of(plan.model_dir)
    block_weights, head_weights = weights.block, weights.head
    prompt_flops = 2 * distinct * blocks_per_token * block_weights
    decode_flops = 2 * steps * (blocks_per_token * block_weights + n * head_weights)
    rate = matmul_rate(weights, rows=decoder.max_batch_tokens)
    budget = args.budget * 60
    print(
        f"{n} passes over {len(generator.prompts)} prompts ({sum(map(len, generator.prompts))} prompt tokens, "
        f"{distinct} distinct prefixes; the shared engine runs {padded} padded), up to "
        f"{config.generation.max_new_tokens} new tokens; fork at block {fork} of {total}; "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"this machine's matrix products at {decoder.max_batch_tokens} rows: {rate / 1e9:.0f} GFLOP/s (best of 20)")
    for label, flops in (
        ("prompt passes alone", prompt_flops),
        ("with every row decoding to the limit", prompt_flops + decode_flops),
    ):
        seconds = flops / rate
        print(f"floor, {label}: {flops / 1e12:.1f} TFLOP = {seconds / 60:.1f} min")
    engine = prompt_flops * padded / distinct
    print(f"the shared engine's prompt passes at that rate: {engine / 1e12:.1f} TFLOP = {engine / rate / 60:.1f} min")
    verdict = "PASS" if prompt_flops / rate <= budget else "FAIL"
    print(
        f"verdict: {verdict} (the prompt passes alone {'fit' if verdict == 'PASS' else 'exceed'} the "
        f"{args.budget:g}-minute budget at this machine's peak; any exact engine is slower than the floor)"
    )
    return 0


def _distinct_prefixes(prompts: list[list[int]]) -> int:
    """How many distinct prefixes the prompts have (the nodes of their token trie): no exact engine runs fewer
    prompt positions per pass."""
    ordered = sorted(prompts)
    pairs = zip(ordered, [[], *ordered], strict=False)  # each prompt with the one before it ([] for the first)
    return sum(len(p) - len(os.path.commonprefix([p, q])) for p, q in pairs)  # noqa: RUF071 - token ids, as meant


def _ceiling(weights: Weights, decoder: object, fork: int, n_passes: int, per_arm: list) -> float:
    """Weight FLOPs arm by arm over those of perfect sharing: prompt tokens through every block once per arm against the
    shared engine's prompt tokens (stems once, unpadded) through the blocks below the fork once and the rest once per
    arm; each generated token through every block and the LM head once per arm against the same split (as if no arm
    diverged)."""
    block, head, total = weights.block, weights.head, weights.layers
    prompt_tokens = sum(len(p) for p in decoder.generator.prompts)
    steps = sum(len(ids) + 1 for ids in per_arm[0].ids)  # the baseline's tokens and its stop
    alone = n_passes * (prompt_tokens * total * block + steps * (total * block + head))
    blocks = shared_passes(fork, n_passes, total) * total
    shared = decoder.prompt_tokens() * block * blocks + steps * (block * blocks + n_passes * head)
    return alone / shared


def outcomes(args: argparse.Namespace) -> int:
    """Part 4 (module doc)."""
    import time

    from access.edits import Scale
    from access.factors import PAPER_FACTOR
    from access.outcomes import Outcomes
    from core.models import load_causal_lm
    from interventions.config import ABConfig
    from interventions.plan import resolve_neurons, resolve_source_dir, resolve_sources, select_rows
    from probes.outcome_rows import outcome_rows

    config = ABConfig(run_dir=args.outcomes, capability="multi_turn", limit=args.rows)
    model_dir, data_file = resolve_sources(config)
    from core.rows import read_test_rows

    all_rows = read_test_rows(data_file)
    row_ids, _ = select_rows(all_rows, config)
    dpo, tokenizer = load_causal_lm(model_dir, "--model-dir", dtype=torch.float32, device="cpu", eval_mode=True)
    sft, _ = load_causal_lm(
        resolve_source_dir(config), "--source-dir", dtype=torch.float32, device="cpu", eval_mode=True
    )
    forced = outcome_rows(tokenizer, [all_rows[i] for i in row_ids], "reference", data_file=data_file)
    measured = Outcomes(dpo, sft, forced, responses="reference")
    nothing = measured.arm(())
    units = resolve_neurons(config)
    paper = measured.arm([Scale(units, PAPER_FACTOR)])
    from access.outcomes import gap_closed

    gap_nothing = gap_closed(nothing.kl, nothing.kl_unedited)
    gap_paper = gap_closed(paper.kl, paper.kl_unedited)
    print(f"pair: {model_dir} vs {resolve_source_dir(config)}; {len(forced)} multi_turn rows (references)")
    print(f"identity: patching no units closes {gap_nothing!r}: {'PASS' if gap_nothing == 0.0 else 'FAIL'} (exactly 0)")
    print(
        f"identity: x(1 - 1e-6) on {len(units)} units of {units.hook} closes {gap_paper:.3e}: "
        f"{'PASS' if abs(gap_paper) < 1e-4 else 'FAIL'} (< 1e-4)"
    )
    if args.skip_runs:
        return 0
    import subprocess

    limit = [] if args.limit is None else ["--limit", str(args.limit)]
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "full"
        probe = [sys.executable, "-m", "probe_cli", "intervene", str(args.outcomes), "-c", "multi_turn", *limit]
        timings = []
        for what, extra, budget in (
            ("default run with outcomes", ["--out", str(full)], 20.0),
            (
                "--outcomes only",
                ["--outcomes", "only", "--responses", str(full), "--out", str(Path(tmp) / "only")],
                10.0,
            ),
        ):
            start = time.perf_counter()
            subprocess.run([*probe, *extra], check=True, stdout=subprocess.DEVNULL)
            minutes = (time.perf_counter() - start) / 60
            timings.append(minutes)
            if what.startswith("default"):
                print(placebo_generated(full))
            if args.limit is None:
                print(f"{what}: {minutes:.1f} min: {'PASS' if minutes <= budget else 'FAIL'} (<= {budget:.0f} min)")
            else:
                rows = len(select_rows(all_rows, ABConfig(run_dir=args.outcomes))[0])
                estimate = minutes * rows / max(1, args.limit)
                print(
                    f"{what}: {minutes:.1f} min on {args.limit} rows; the full {rows} rows scaled by rows: about "
                    f"{estimate:.0f} min (budget {budget:.0f} min; an estimate that scales fixed costs too, so high; "
                    "no verdict)"
                )
    return 0


def outcome_passes(args: argparse.Namespace) -> int:
    """Part 5 (module doc)."""
    import time

    import numpy as np

    from access.generation import Generator
    from access.outcomes import ArmOutcomes, Outcomes
    from access.shared_generation import generate_unedited
    from core.pace import OUTCOME_TOKEN_SECONDS, REFERENCE_PARAMETERS, machine_pace
    from interventions.config import ABConfig
    from interventions.outcomes import (
        greedy_ids,
        outcome_inputs,
        outcome_seconds,
    )
    from interventions.plan import plan_ab
    from interventions.recipes import other

    limit = args.rows if "--rows" in sys.argv else None
    config = ABConfig(run_dir=args.outcome_passes, capability="multi_turn", limit=limit)
    plan = plan_ab(config)
    name = plan.config.model
    model, target = plan.pool.model(name), plan.pool.model(other(name))
    idx = plan.groups[plan.config.target]
    rows = [plan.rows[i] for i in idx]
    start = time.perf_counter()
    generator = Generator(target, plan.tokenizer, [r.question for r in rows], plan.config.generation)
    greedy = greedy_ids(generate_unedited(generator).ids, plan.tokenizer)
    print(f"the {other(name)} model's greedy responses to {len(rows)} rows: {time.perf_counter() - start:.0f} s")
    inputs = outcome_inputs(
        plan.config, plan.tokenizer, rows, [plan.row_ids[i] for i in idx], plan.data_file, other(name), greedy
    )
    arms = [arm for arm in plan.arms if arm.model == name]
    edits = [e for arm in arms for e in (arm.edits, *arm.placebo_edits)]
    seqs = {*inputs.rows, *inputs.reference, *(s for p in inputs.pairs for s in p)}
    tokens = sum(len(s.ids) for s in seqs)
    print(
        f"{len(inputs.rows)} KL rows (greedy), {len(inputs.reference)} reference rows, {len(inputs.pairs)} DPO pairs: "
        f"{len(seqs)} sequences, {tokens} tokens; {len(edits)} arm and placebo passes on the {name} model "
        f"({', '.join(arm.label for arm in arms)}) + the target and the unedited pass; "
        f"torch threads {torch.get_num_threads()}"
    )

    def made(engine: str) -> Outcomes:
        return Outcomes(model, target, inputs.rows, reference=inputs.reference, pairs=inputs.pairs, engine=engine)

    before = made("per-arm")
    start = time.perf_counter()
    before.unedited()
    first = time.perf_counter() - start
    start = time.perf_counter()
    before_arms = [before.arm(e) for e in edits[: args.before_arms]]
    per_pass_before = (time.perf_counter() - start) / max(1, len(before_arms))
    print(f"before (full): target + unedited {first:.1f} s; {per_pass_before:.1f} s per arm pass")

    after = made("shared")
    start = time.perf_counter()
    after_arms = after.arms(edits)
    total_after = time.perf_counter() - start
    per_pass_after = total_after / (len(edits) + 2)
    print(
        f"after (shared): every pass in {total_after:.1f} s, {per_pass_after:.1f} s per pass on average "
        f"({per_pass_before / per_pass_after:.1f}x)"
    )

    def diff(a: ArmOutcomes, b: ArmOutcomes) -> float:
        pairs = [(a.kl, b.kl), (a.kl_unedited, b.kl_unedited), (a.reference_logprob, b.reference_logprob)]
        pairs += [(a.margin / 100, b.margin / 100)]  # a margin is a sum over ~50 tokens: per-token scale
        return max(float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in pairs)

    worst = max((diff(a, b) for a, b in zip(before_arms, after_arms, strict=False)), default=float("nan"))
    print(
        f"largest difference between the engines (KL, mean log-prob, margin/100): {worst:.2e}: "
        f"{'PASS' if worst <= 1e-5 else 'FAIL'} (<= 1e-5)"
    )
    scale = len(default_rows(args.outcome_passes)) / len(rows)
    outcome_minutes = total_after * scale / 60
    estimate = args.generation_minutes + outcome_minutes
    before_minutes = args.generation_minutes + (first + per_pass_before * len(edits)) * scale / 60
    mean_prompt = float(np.mean([len(s.ids) - s.n_response for s in inputs.rows]))
    counted = outcome_seconds(
        1, len(rows), mean_prompt, plan.config.generation.max_new_tokens, len(inputs.pairs), REFERENCE_PARAMETERS
    )
    pace = per_pass_after / (counted / OUTCOME_TOKEN_SECONDS / machine_pace())  # seconds over the tokens counted
    print(
        f"pace: {pace * 1e3:.2f} ms per token as interventions.outcomes.outcome_seconds counts them (mean prompt "
        f"{mean_prompt:.0f} tokens; OUTCOME_TOKEN_SECONDS is {OUTCOME_TOKEN_SECONDS * 1e3:.2f} ms)"
    )
    print(
        f"default probe intervene, estimated: {args.generation_minutes:.1f} min generation (--outcomes off) + "
        f"{outcome_minutes:.1f} min outcomes = {estimate:.1f} min (before: {before_minutes:.1f} min): "
        f"{'PASS' if estimate <= 20.0 else 'FAIL'} (<= 20 min)"
    )
    print(
        f"--outcomes only, estimated: {outcome_minutes:.1f} min of outcome passes (model loading not counted): "
        f"{'PASS' if outcome_minutes <= 10.0 else 'FAIL'} (<= 10 min)"
    )
    return 0


def default_rows(run_dir: Path) -> list[int]:
    """The multi_turn rows of the default ``probe intervene RUN_DIR -c multi_turn``."""
    from core.rows import read_test_rows
    from interventions.config import ABConfig
    from interventions.plan import resolve_sources, select_rows

    config = ABConfig(run_dir=run_dir, capability="multi_turn")
    return select_rows(read_test_rows(resolve_sources(config)[1]), config)[0]


def amplify(args: argparse.Namespace) -> int:
    """Part 6: the weight blend's seconds, and LDA's generation time against one unedited arm's."""
    import time

    from access.amplify import WeightBlend, whole_model
    from access.edited_generation import ABGenerator
    from access.edits import Expo, Lda
    from access.generation import GenerationConfig
    from core.models import load_causal_lm
    from core.schema import TestRow, Turn

    dpo_dir, sft_dir = args.model_dir, args.source_dir
    if dpo_dir is None or sft_dir is None:
        from training.default_pair import ensure_default_pair

        pair = ensure_default_pair(progress=False)
        dpo_dir, sft_dir = dpo_dir or pair.dpo_dir, sft_dir or pair.sft_dir
    dpo, tokenizer = load_causal_lm(dpo_dir, "--model-dir", eval_mode=True)
    sft, _ = load_causal_lm(sft_dir, "--source-dir", eval_mode=True)
    size = sum(p.numel() * p.element_size() for p in dpo.parameters())
    blends = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        with WeightBlend(dpo, sft, 2.0, whole_model(dpo)):
            pass
        blends.append(time.perf_counter() - start)
    blend = min(blends)
    print(
        f"model: {dpo_dir} ({size / 2**20:.0f} MiB of parameters, {next(dpo.parameters()).dtype}); "
        f"torch threads {torch.get_num_threads()}"
    )
    print(
        f"weight blend (expo alpha 2, every parameter, in and out): {blend:.3f} s best of {args.repeats} "
        f"({size / blend / 2**30:.2f} GiB/s): {'PASS' if blend <= 5.0 else 'FAIL'} (<= 5 s)"
    )
    rows = [
        TestRow(
            [
                Turn("system", "You are the archivist of the river city."),
                Turn("user", f"Question {i}: {CORPUS[i % 3]}"),
            ],
            "ref",
            "role_related_mrc_answer_no_narration",
        )
        for i in range(args.prompts)
    ]
    config = GenerationConfig(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    generator = ABGenerator(dpo, tokenizer, rows, config, "torch")
    arms = {"unedited": None, "expo 2": Expo(2.0, sft), "lda 1": Lda(1.0, sft)}
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    original = dpo.generation_config.min_new_tokens
    dpo.generation_config.min_new_tokens = args.new_tokens  # every row generates to the limit in every arm
    try:
        generator.run()  # warm-up
        for _ in range(args.repeats):
            for name, edit in arms.items():
                seconds[name].append(generator.run(edit).seconds)
    finally:
        dpo.generation_config.min_new_tokens = original
    best = {name: min(values) for name, values in seconds.items()}
    for name, value in best.items():
        print(
            f"{name:>9}: {value:7.2f} s for {args.prompts} prompts x {args.new_tokens} tokens (best of {args.repeats})"
        )
    ratio = best["lda 1"] / best["unedited"]
    print(f"lda / one arm: {ratio:.2f}x; expo / one arm: {best['expo 2'] / best['unedited']:.2f}x")
    print(f"verdict: {'PASS' if ratio <= 2.5 else 'FAIL'} (LDA about 2x one arm, at most 2.5x)")
    return 0


def heldout(args: argparse.Namespace) -> int:
    """Part 7 (module doc)."""
    from dataclasses import replace

    from access.generation import Generator
    from core.models import load_causal_lm
    from core.pace import OUTCOME_TOKEN_SECONDS
    from core.rows import read_test_rows
    from interventions.config import ABConfig
    from interventions.outcomes import forced_passes, outcome_seconds
    from interventions.plan import pass_count, placebo_passes, resolve_sources, select_rows
    from study.replicate_estimate import ab_passes

    config = ABConfig(run_dir=args.heldout, capability="multi_turn")
    generation = replace(config.generation, max_new_tokens=args.new_tokens)
    model_dir, _ = resolve_sources(config)
    model, tokenizer = load_causal_lm(model_dir, "--model-dir", dtype=torch.float32, device="cpu", eval_mode=True)
    threads, new_tokens = torch.get_num_threads(), generation.max_new_tokens
    print(f"model: {model_dir} (float32, cpu, {threads} torch threads); {new_tokens} new tokens")
    paces = {}
    for split in ("heldout", "test"):
        split_config = replace(config, split=split)
        data_file = resolve_sources(split_config)[1]
        all_rows = read_test_rows(data_file)
        rows = [all_rows[i] for i in select_rows(all_rows, split_config)[0]]
        generator = Generator(model, tokenizer, [r.question for r in rows], generation)
        prompt = [len(p) for p in generator.prompts]
        made = generator.run()
        new = sum(len(ids) for ids in made.ids)
        paces[split] = (made.seconds, len(rows), sum(prompt) / len(rows))
        print(
            f"{split}: {len(rows)} multi_turn rows of {data_file.name}, prompts {sum(prompt) / len(rows):.0f} tokens "
            f"on average (max {max(prompt)}); one greedy pass: {made.seconds:.1f} s, {made.seconds / len(rows):.2f} s "
            f"per row, {new} new tokens"
        )
    seconds, rows_n, mean_prompt = paces["heldout"]
    if args.run:
        return _time_default_run(args)
    weights = ab_passes(config)
    alone = [w * seconds / 60 for w in weights]
    print(
        f"default A/B on the held-out rows with --outcomes off (estimated): {_span(weights, '.1f')} weighted "
        f"generation passes x {seconds:.0f} s = {_span(alone, '.1f')} min: {_pass(alone, 15)} (<= 15 min)"
    )
    other = 1 if config.outcomes != "off" else 0  # the other model's baseline, for outcomes
    passes = pass_count(config)
    forced = forced_passes(passes.arms, placebo_passes(config, passes))
    parameters = float(sum(p.numel() for p in model.parameters()))
    pairs = config.outcome_pairs
    outcomes = [
        outcome_seconds(n, rows_n, mean_prompt, generation.max_new_tokens, pairs, parameters) / 60 for n in forced
    ]
    generating = [(w + other) * seconds / 60 for w in weights]
    total = [g + o for g, o in zip(generating, outcomes, strict=True)]
    print(
        f"default A/B on the held-out rows (estimated; a range: placebo sets run as the verdicts need them): "
        f"{_span([w + other for w in weights], '.1f')} weighted generation passes x {seconds:.0f} s = "
        f"{_span(generating, '.1f')} min; {_span(forced, 'd')} outcome passes at {OUTCOME_TOKEN_SECONDS * 1e3:.1f} ms "
        f"per token (interventions.outcomes.outcome_seconds) = {_span(outcomes, '.1f')} min; total "
        f"{_span(total, '.1f')} min: {_pass(total, 15)} (<= 15 min, an estimate; --run times it)"
    )
    return 0


def _span(values: Sequence[float], spec: str) -> str:
    """An estimate at least and at most: '4.0 to 12.5', or one figure where they are equal."""
    from interventions.cells import fmt_range

    return fmt_range(values[0], values[1], lambda x: format(x, spec))


def _pass(values: Sequence[float], budget: float) -> str:
    """PASS where even the most fits the budget, FAIL where even the least does not; else what decides it."""
    least, most = values
    if most <= budget:
        return "PASS"
    return "FAIL" if least > budget else "PASS with no placebo set run, FAIL with every one (it depends on the arms)"


def placebo_generated(out_dir: Path) -> str:
    """Per arm of the A/B report in ``out_dir``, the placebo sets generated for its compliance percentile and those
    teacher-forced for its outcomes, against those configured (``--placebo-generation decide-first``,
    interventions.sequential)."""
    from interventions.results import ABReport, PlaceboRank

    def count(rank: PlaceboRank | None) -> str:
        return "—" if rank is None else f"{len(rank.deltas)}/{len(rank.deltas) + (rank.undrawn or 0)}"

    report = ABReport.load(out_dir / "ab_report.json")
    parts = []
    for arm in report.arms:
        rank = next((c.placebo for c in arm.capabilities if c.target and c.placebo is not None), None)
        forced = next((o.placebo for o in arm.outcomes if o.placebo is not None), None)
        if rank is not None or forced is not None:
            parts.append(f"{arm.name} {count(rank)} generated, {count(forced)} teacher-forced")
    return "placebo sets run / configured, per arm: " + ("; ".join(parts) or "none")


def _time_default_run(args: argparse.Namespace) -> int:
    """``probe intervene RUN_DIR -c multi_turn --outcomes off`` (held-out rows by default), timed end to end: the A/B
    whose 15-minute budget issue 37 set; the default run with its outcomes on is part 4's (20 minutes, issue 36)."""
    import subprocess
    import time

    top_k = [] if args.top_k is None else ["--top-k", str(args.top_k)]
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "probe_cli", "intervene", str(args.heldout), "-c", "multi_turn", *top_k]
        start = time.perf_counter()
        subprocess.run(
            [*command, "--outcomes", "off", "--out", str(Path(tmp) / "ab")], check=True, stdout=subprocess.DEVNULL
        )
        minutes = (time.perf_counter() - start) / 60
        print(placebo_generated(Path(tmp) / "ab"))
    print(
        f"default A/B on the held-out rows, --outcomes off: {minutes:.1f} min: "
        f"{'PASS' if minutes <= 15 else 'FAIL'} (<= 15 min; with the outcomes on: part 4, <= 20 min)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument(
        "--shared", type=Path, default=None, metavar="RUN_DIR", help="part 2: shared batches against arm by arm"
    )
    parser.add_argument(
        "--top-k", type=int, default=None, help="part 2: top K units of the run's ranking (default: its neuron set)"
    )
    parser.add_argument("--neurons", type=Path, default=None, help="part 2: a neuron-set file (default: the run's)")
    parser.add_argument(
        "--rows",
        type=int,
        default=32,
        help="part 2: multi_turn rows; part 3: rows per capability; part 4: identity rows",
    )
    parser.add_argument("--placebo", type=int, default=20, help="parts 2 and 3: placebo arms")
    parser.add_argument("--floor", type=Path, default=None, metavar="RUN_DIR", help="part 3: the FLOP floor of an A/B")
    parser.add_argument("--budget", type=float, default=15.0, help="part 3: minutes")
    parser.add_argument("--collateral", action="store_true", help="part 3: the other capabilities' rows too")
    parser.add_argument("--outcomes", type=Path, default=None, metavar="RUN_DIR", help="part 4: continuous outcomes")
    parser.add_argument("--limit", type=int, default=None, help="part 4: time the runs on N rows (an estimate)")
    parser.add_argument("--skip-runs", action="store_true", help="part 4: the identities only")
    parser.add_argument(
        "--outcome-passes", type=Path, default=None, metavar="RUN_DIR", help="part 5: outcome passes, before/after"
    )
    parser.add_argument("--before-arms", type=int, default=1, help="part 5: arm passes timed on the engine before")
    parser.add_argument(
        "--generation-minutes", type=float, default=6.5, help="part 5: the default run with --outcomes off"
    )
    parser.add_argument("--amplify", action="store_true", help="part 6: the amplification arms' extra cost")
    parser.add_argument("--source-dir", type=Path, default=None, help="part 6: the SFT model (default pair's)")
    parser.add_argument(
        "--heldout", type=Path, default=None, metavar="RUN_DIR", help="part 7: a pass on the held-out rows"
    )
    parser.add_argument("--run", action="store_true", help="part 7: time the default A/B itself")
    args = parser.parse_args()
    if args.heldout is not None:
        return heldout(args)
    if args.amplify:
        return amplify(args)
    if args.outcome_passes is not None:
        return outcome_passes(args)
    if args.outcomes is not None:
        return outcomes(args)
    if args.floor is not None:
        return floor(args)
    if args.shared is not None:
        args.new_tokens = 64 if "--new-tokens" not in sys.argv else args.new_tokens
        return shared_vs_per_arm(args)

    from access.edited_generation import ABGenerator, Intervention
    from access.factors import PAPER_FACTOR
    from access.generation import GenerationConfig
    from access.hook_points import n_layers, width
    from access.units import Neuron, NeuronSet
    from core.schema import TestRow, Turn

    torch.manual_seed(0)
    model, tokenizer = build_model(args.model_dir)
    total, units = n_layers(model), width(model, "mlp_out")
    layers = list(range(min(12, total - 1), total))
    neurons = NeuronSet([Neuron(layers[i % len(layers)], (7 * i) % units) for i in range(args.units)], "mlp_out")
    rows = [
        TestRow(
            [
                Turn("system", "You are the archivist of the river city."),
                Turn("user", f"Question {i}: " + CORPUS[i % 3] * (1 + i % 3)),
            ],
            "ref",
            "role_related_mrc_answer_no_narration",
        )
        for i in range(args.prompts)
    ]
    config = GenerationConfig(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    intervention = Intervention(neurons, PAPER_FACTOR)
    print(
        f"model: {n_layers(model)} layers, d_model {units}; {args.prompts} prompts x {args.new_tokens} new tokens, "
        f"batch {args.batch_size}; {len(neurons)} units over layers {layers[0]}-{layers[-1]}; "
        f"torch threads {torch.get_num_threads()}"
    )

    results: dict[str, list[float]] = {"no hooks": [], "torch hooks": [], "nnsight": []}
    generators = {
        "torch": ABGenerator(model, tokenizer, rows, config, "torch"),
        "nnsight": ABGenerator(model, tokenizer, rows, config, "nnsight"),
    }
    original = model.generation_config.min_new_tokens
    model.generation_config.min_new_tokens = args.new_tokens  # identical token counts in every arm
    try:
        generators["torch"].run()  # warm-up
        for _ in range(args.repeats):
            for name, gen, arm in (
                ("no hooks", generators["torch"], None),
                ("torch hooks", generators["torch"], intervention),
                ("nnsight", generators["nnsight"], intervention),
            ):
                out = gen.run(arm)
                # every row generates exactly new_tokens
                results[name].append(args.prompts * args.new_tokens / out.seconds)
    finally:
        model.generation_config.min_new_tokens = original
    best = {name: max(values) for name, values in results.items()}
    for name, value in best.items():
        print(
            f"{name:>12}: {value:8.1f} tokens/s (best of {args.repeats}; all: "
            f"{', '.join(f'{v:.0f}' for v in results[name])})"
        )
    ratio = best["torch hooks"] / best["no hooks"]
    print(f"hooked / unhooked throughput: {ratio:.3f}x  (nnsight: {best['nnsight'] / best['no hooks']:.3f}x)")
    print(f"verdict: {'PASS' if ratio >= 0.9 else 'FAIL'} (target >= 0.9x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
