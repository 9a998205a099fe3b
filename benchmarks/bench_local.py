"""Issue 38: recall of planted ground truth for every metric in both bases, on the default-size planted pair.

The ``planted`` default pair (:mod:`training.planted`) is SmolLM2-135M-Instruct as "SFT" and the same model with 16
documented MLP units' up_proj rows x 3 as "DPO", nothing else changed. This records ``mlp_post`` of every layer on
the pair's multi_turn test prompts with both local directions (``probe run --local both``; or reuses ``--run DIR``),
then ranks every unit of every layer by each activation metric in the global and the local basis
(:func:`analysis.recall.planted_recall`) and prints the recall table (metric x basis x top K) with the target the
issue set before any figure was read: the local basis recovers the planted units at recall >= 0.95 in its top K
(K = 16). Figures are printed with PASS/FAIL, nothing is asserted (the suite checks the tiny planted pair).

    .venv/bin/python benchmarks/bench_local.py                       # builds/uses $PROBE_HOME's planted pair
    .venv/bin/python benchmarks/bench_local.py --run /tmp/planted    # an existing recording of it
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="planted", help="default pair to build or reuse (planted or planted-tiny)")
    parser.add_argument("--run", type=Path, help="a recording of the pair (mlp_post, --local both) to reuse")
    parser.add_argument("--capability", default="multi_turn")
    parser.add_argument("--ks", default="16,64", help="top K values, comma-separated (16 = the planted count)")
    parser.add_argument("--device", default="cpu")
    return parser.parse_args()


def main() -> int:
    from analysis.recall import LOCAL_RECALL_TARGET, planted_recall, recall_table
    from probes.config import RecordConfig
    from probes.recording import record_run
    from training.default_pair import ensure_default_pair
    from training.planted import read_planted

    args = parse_args()
    planted = read_planted(ensure_default_pair(pair=args.pair, progress=False).root)
    with tempfile.TemporaryDirectory(prefix="bench_local_") as tmp:
        run = args.run
        if run is None:
            run = Path(tmp) / "run"
            start = time.perf_counter()
            config = RecordConfig(
                sft_dir=planted.sft_dir,
                dpo_dir=planted.dpo_dir,
                data_file=planted.data_dir / "test.jsonl",
                capabilities=args.capability,
                hooks=planted.hook,
                local="both",
                device=args.device,
                out_dir=run,
            )
            record_run(config, progress=False)
            print(f"recorded {planted.hook}, both local directions, in {time.perf_counter() - start:.0f} s")
        ks = [int(k) for k in args.ks.split(",")]
        rows = planted_recall(run, planted.units, args.capability, planted.hook, ks=ks)
    print(f"== planted pair {planted.dpo_dir.parent}: {len(planted.units)} units x {planted.factor:g} ({planted.hook})")
    print(recall_table(rows))
    for row in rows:
        if row.basis == "local" and row.k == len(planted.units):
            verdict = "PASS" if row.recall >= LOCAL_RECALL_TARGET else "FAIL"
            print(
                f"local basis, {row.metric}: recall {row.recall:.2f} in the top {row.k} "
                f"[target >= {LOCAL_RECALL_TARGET}: {verdict}]"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
