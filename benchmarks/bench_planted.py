"""Benchmark: recall@K of the planted units, per ranking metric, on the SmolLM2 planted pair (issue 36).

The planted pair (``probe models default --pair planted``, :mod:`training.planted`) is
SmolLM2-135M-Instruct and a copy whose 16 documented MLP units have their up_proj rows x 3,
nothing else changed. This script records it as a user would (``probe run -c multi_turn --hook
mlp_post``), ranks its units with ``probe analyze`` for every activation metric (topk_count,
mean_diff, effect_size, attribution) over all layers, and with the per-unit weight change (what
``probe explain`` reads, :mod:`analysis.weight_change`), and prints recall@K of the planted units
for each, with the rank of every planted unit.

Then it checks the causal outcomes on the same pair (:mod:`access.outcomes`, teacher forcing the
reference answers of the first ``--outcome-rows`` multi-turn rows): patching exactly the planted
units of DPO with SFT's values closes the gap to 1.000 +- 1e-4, matched placebo sets (same layers,
same count) close <= 0.1, and, as evidence, the gap closed by each ranking's own top 16 units.

Written before any result was read: the recall table has no pass mark (it is what the rankings
find); PASS/FAIL lines are the identities only (the weight ranking's recall@16 is 1.00, since only
the planted rows differ; the planted patch closes 1.000 +- 1e-4; every placebo closes <= 0.1).

Usage: ``python benchmarks/bench_planted.py [--run DIR] [--metrics M,M...] [--outcome-rows 8] [--placebos 3]``
(``--metrics``: default every metric of ``probe analyze``; ``--run``: reuse a recorded run of the planted pair;
recording takes about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.rankings import metrics
from analysis.recall import planted_ranks, ranked_by_value, recall_at_k
from training.default_pair import ensure_default_pair
from training.planted import PlantedPair, read_planted

PROBE = [sys.executable, "-m", "probe_cli"]
KS = (16, 64, 256)


def _probe(*argv: str) -> float:
    command = [*PROBE, *argv]
    print("$ probe " + shlex.join(argv), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
        raise SystemExit(f"probe {argv[0]} failed with status {done.returncode}")
    return time.perf_counter() - start


def _record(run: Path | None) -> Path:
    if run is not None and (run / "activations.h5").is_file():
        print(f"reusing the recorded run {run}")
        return run
    out = run or Path(tempfile.mkdtemp(prefix="bench_planted_")) / "run"
    seconds = _probe(
        "run",
        "--pair",
        "planted",
        "-c",
        "multi_turn",
        "--hook",
        "mlp_post",
        "--local",
        "none",
        "--no-analyze",
        "--out",
        str(out),
        "--quiet",
    )
    print(f"recorded in {seconds:.0f} s")
    return out


def _activation_ranking(run: Path, metric: str) -> list[tuple[int, int]]:
    out = run / f"analysis_planted_{metric}"
    seconds = _probe(
        "analyze",
        str(run),
        "--metric",
        metric,
        "--layers",
        "all",
        "--top-k",
        str(max(KS)),
        "--no-plots",
        "--stability-resamples",
        "0",
        "--out",
        str(out),
    )
    print(f"  {metric}: {seconds:.0f} s")
    neurons = json.loads((out / "neurons_multi_turn_mlp_post.json").read_text())["neurons"]
    return [(int(n["layer"]), int(n["unit"])) for n in neurons]


def _weight_ranking(planted: PlantedPair) -> list[tuple[int, int]]:
    from analysis.checkpoint import Checkpoint
    from analysis.weight_change import weight_change

    with Checkpoint(planted.sft_dir, "--sft") as sft, Checkpoint(planted.dpo_dir, "--dpo") as dpo:
        relative = weight_change(sft, dpo, ["mlp_post"], "sft_dpo")["mlp_post"].relative
    values = {(layer, unit): float(relative[layer, unit]) for layer, unit in zip(*relative.nonzero(), strict=True)}
    return ranked_by_value(values)


def _recall_table(rankings: dict[str, list[tuple[int, int]]], units: tuple[tuple[int, int], ...]) -> str:
    head = (
        "| metric | " + " | ".join(f"recall@{k}" for k in KS) + " | ranks of the 16 planted units (0: not in top 256) |"
    )
    lines = [head, "|---|" + "---|" * len(KS) + "---|"]
    for metric, ranking in rankings.items():
        recalls = " | ".join(f"{recall_at_k(ranking[: max(KS)], units, k):.2f}" for k in KS)
        ranks = sorted(planted_ranks(ranking[: max(KS)], units), key=lambda r: (r == 0, r))
        lines.append(f"| {metric} | {recalls} | {', '.join(map(str, ranks))} |")
    return "\n".join(lines)


def _outcomes(planted: PlantedPair, rankings: dict[str, list[tuple[int, int]]], rows: int, placebos: int) -> bool:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from access.edits import Patch
    from access.outcomes import Outcomes, gap_closed
    from access.units import Neuron, NeuronSet
    from core.capabilities import parse_capability, tasks_of
    from core.rows import read_test_rows
    from probes.outcome_rows import outcome_rows

    sft = AutoModelForCausalLM.from_pretrained(planted.sft_dir, dtype=torch.float32).eval()
    dpo = AutoModelForCausalLM.from_pretrained(planted.dpo_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(planted.sft_dir)
    tasks = set(tasks_of(parse_capability("multi_turn")))
    test_file = planted.data_dir / "test.jsonl"
    test = [row for row in read_test_rows(test_file) if row.task in tasks][:rows]
    outcomes = Outcomes(
        dpo, sft, outcome_rows(tokenizer, test, "reference", data_file=test_file), responses="reference"
    )

    def patch(units: list[tuple[int, int]]) -> Patch:
        return Patch(
            NeuronSet([Neuron(layer, unit) for layer, unit in units], hook="mlp_post"), source=sft, source_name="sft"
        )

    start = time.perf_counter()
    real = patch(list(planted.units))
    arm = outcomes.arm([real])
    closed = gap_closed(arm.kl, arm.kl_unedited)
    print(f"\noutcomes on {len(test)} multi-turn rows (reference responses), DPO patched from SFT, target SFT:")
    print(f"  unedited KL(SFT || DPO): mean {arm.kl_unedited.mean():.4g} nats per response token")
    print(f"  planted units: gap closed {closed:.6f} (rows {arm.gap_closed.min():.6f} to {arm.gap_closed.max():.6f})")
    placebo = []
    for edit in real.placebos(dpo, placebos, 0):
        control = outcomes.arm([edit])
        placebo.append(gap_closed(control.kl, control.kl_unedited))
    print(f"  {placebos} matched placebo sets: gap closed {', '.join(f'{g:.4f}' for g in placebo)}")
    for metric, ranking in rankings.items():
        top = outcomes.arm([patch(ranking[:16])])
        print(f"  top 16 units of {metric}: gap closed {gap_closed(top.kl, top.kl_unedited):.4f}")
    print(f"  ({time.perf_counter() - start:.0f} s for {2 + placebos + len(rankings)} arms)")
    ok_real = abs(closed - 1.0) <= 1e-4 and bool(np.all(np.abs(arm.gap_closed - 1.0) <= 1e-4))
    ok_placebo = max(placebo) <= 0.1
    print(f"{'PASS' if ok_real else 'FAIL'}: patching the planted units closes 1.000 +- 1e-4")
    print(f"{'PASS' if ok_placebo else 'FAIL'}: every matched placebo set closes <= 0.1")
    return ok_real and ok_placebo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None, help="a recorded run of the planted pair to reuse")
    parser.add_argument("--metrics", default=",".join(metrics()))
    parser.add_argument("--outcome-rows", type=int, default=8)
    parser.add_argument("--placebos", type=int, default=3)
    args = parser.parse_args()
    pair = ensure_default_pair(pair="planted", progress=False)
    planted = read_planted(pair.root)
    print(f"planted pair {pair.root}: {len(planted.units)} units x {planted.factor} at {planted.hook}: {planted.units}")
    run = _record(args.run)
    rankings = {metric: _activation_ranking(run, metric) for metric in args.metrics.split(",") if metric}
    rankings["weight (relative change)"] = _weight_ranking(planted)
    print("\n" + _recall_table(rankings, planted.units))
    ok_weight = recall_at_k(rankings["weight (relative change)"], planted.units, 16) == 1.0
    print(f"{'PASS' if ok_weight else 'FAIL'}: the weight ranking's recall@16 is 1.00 (only the planted rows differ)")
    ok = _outcomes(planted, rankings, args.outcome_rows, args.placebos)
    return 0 if ok and ok_weight else 1


if __name__ == "__main__":
    raise SystemExit(main())
