"""Scripted before/after constraint evaluation of a neuron intervention, in one library call.

Scale the units a run ranked highest for a capability (or any units you name) in the DPO
model, generate on the same prompts with and without the intervention, and print
compliance before -> after per capability with the 95% CI, the McNemar p, the placebo
percentile, plus a few prompts whose response changed.

    # after `probe run --capability multi_turn` (which also ranks units):
    python examples/before_after.py runs/<run> --factor 0 --limit 40 --placebo 5
    # units ranked by the size of the change rather than by rank counts:
    probe analyze runs/<run> --metric mean_diff --out runs/<run>/analysis_mean_diff
    python examples/before_after.py runs/<run> --top-k 32 --factor 0 \
        --neurons runs/<run>/analysis_mean_diff/neurons_multi_turn_mlp_out.json
    # or on any model and data file, with explicit units:
    python examples/before_after.py --model-dir DIR --data test.jsonl --units 14:3,14:9,20:0 --factor 0

With no RUN_DIR and no --model-dir the newest run under ./runs is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from core.decoding import GenerationConfig
from core.errors import ProbeError
from core.run_dir import ACTIVATIONS_FILE
from interventions import ABConfig, EditSpec, plan_ab, run_ab
from interventions.report import arm_table


def newest_run(root: Path = Path("runs")) -> Path:
    runs = sorted((p.parent for p in root.glob(f"*/{ACTIVATIONS_FILE}")), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise ProbeError(
            f"no run under {root}/: record one first with `probe run --capability multi_turn`, "
            "or pass --model-dir/--data/--units"
        )
    return runs[-1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", type=Path)
    parser.add_argument("--capability", default=ABConfig.capability)
    parser.add_argument("--factor", type=float, default=EditSpec.factor)
    parser.add_argument(
        "--neurons", type=Path, default=None, help="a neuron-set file, e.g. from `probe analyze --metric mean_diff`"
    )
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--units", default=None)
    parser.add_argument("--hook", default=EditSpec.hook, help="hook point of --units / --top-k")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument(
        "--limit", type=int, default=40, help="rows per capability (probe intervene: all; 40 keeps the example quick)"
    )
    parser.add_argument(
        "--placebo",
        type=int,
        default=5,
        help=f"placebo sets (probe intervene: {ABConfig.placebo}; 5 keeps the example quick)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=Path("runs/examples/before_after"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = args.run_dir or (None if args.model_dir else newest_run())
    config = ABConfig(
        run_dir=run_dir,
        capability=args.capability,
        factor=args.factor,
        neurons=args.neurons,
        top_k=args.top_k,
        units=args.units,
        hook=args.hook,
        model_dir=args.model_dir,
        data_file=args.data,
        limit=args.limit,
        placebo=args.placebo,
        generation=GenerationConfig(max_new_tokens=args.max_new_tokens),
        out_dir=args.out,
    )
    report = run_ab(plan_ab(config), progress=lambda line: print(f"  .. {line}", file=sys.stderr))

    arm = report.main
    print(
        f"\nScaling {report.neurons.size} units of {report.neurons.hook} by {arm.factor!r} in the {report.model} "
        f"model ({report.dtype})"
    )
    print("\n".join(arm_table(arm)))  # the A/B report's own table (interventions.cells)
    for flag in arm.guard.flags:
        print(f"NO-OP WARNING: {flag}")

    shown = 0
    with open(report.paths["generations"], encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["changed"].get(arm.name) and shown < 3:
                shown += 1
                print(
                    f"\n[{record['task']}]\n  before: "
                    f"{record['baseline'][:120]!r}\n  after:  {record['intervened'][arm.name][:120]!r}"
                )
    print(f"\nreport: {report.paths['markdown']}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
