"""Issue 50: the default ``probe localize RUN -c multi_turn`` on the default pair, timed against 10 minutes on 2 cores.

Records the default pair's multi_turn prompts with ``mlp_post`` (``probe run -c multi_turn --hook mlp_post``; or
reuses ``--run DIR``), then runs the default localize (:func:`localize.run.localize`, every default of
:class:`localize.config.LocalizeConfig`) and prints its estimate, its time per phase, the wall time against the
budget with PASS/FAIL, the machine's load average before and after (the machine is shared: say it beside any figure),
and the summary table. The estimate is a range (the sequential placebo band draws none to all of its sets at the
verdict's points); the benchmark also prints the estimate at the sets the run drew, the measured time over it
(PASS within 1.5x), the CPU time and torch's threads, and the CPU pace this run implies (the estimate's
``localize.estimate.TOKEN_CPU_SECONDS``, a token of a whole teacher-forced pass at one thread). ``--full`` runs the
issue's full design instead (36 rows, MIB's ten points, the per-layer profile, heads of three layers; docs/localize.md
has its arithmetic); ``--placebo-design all`` every random set. ``--pair planted`` times the planted pair and prints
its recovery (f at k = 16). Nothing is asserted.

    .venv/bin/python benchmarks/bench_localize.py                       # records a run of the default pair first
    .venv/bin/python benchmarks/bench_localize.py --run runs/mt         # a recording with mlp_post (and --local)
    .venv/bin/python benchmarks/bench_localize.py --run runs/mt --full  # the full design (about an hour)
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

from study.floors import LOCALIZE_BUDGET_S as BUDGET_S  # noqa: E402 - after the path it needs

FULL = {
    "limit": 36,
    "k": "0.1%,0.2%,0.5%,1%,2%,5%,10%,20%,50%,100%",
    "placebo_k": "0.2%,2%,20%",
    "profile_width": 1,
    "head_layers": 3,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="smollm2", help="default pair to build or reuse (smollm2 or planted)")
    parser.add_argument("--run", type=Path, help="a recording of the pair with mlp_post to reuse")
    parser.add_argument("--capability", default="multi_turn")
    parser.add_argument("--full", action="store_true", help="the issue's full design instead of the default")
    parser.add_argument("--out", type=Path, help="where localize writes (default: a temporary folder)")
    parser.add_argument("--placebo-design", default="sequential", help="sequential (the default) or all")
    return parser.parse_args()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} CPUs"


def record(pair: str, capability: str, out: Path) -> Path:
    from access.hook_table import NEURONS
    from probes.config import RecordConfig
    from probes.recording import record_run
    from training.default_pair import ensure_default_pair

    built = ensure_default_pair(pair=pair, progress=False)
    start = time.perf_counter()
    config = RecordConfig(
        sft_dir=built.sft_dir,
        dpo_dir=built.dpo_dir,
        data_file=built.test_file,
        capabilities=capability,
        hooks=NEURONS,
        out_dir=out,
        device="cpu",
        dtype="float32",
    )
    record_run(config, progress=False)
    print(f"recorded {capability} mlp_post in {time.perf_counter() - start:.0f} s ({load()})", flush=True)
    return out


def main() -> int:
    from localize.config import LocalizeConfig
    from localize.page import summary_rows
    from localize.run import localize

    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_localize_") as tmp:
        run = args.run or record(args.pair, args.capability, Path(tmp) / "run")
        settings = {
            **(FULL if args.full else {}),
            "out_dir": args.out or Path(tmp) / "out",
            "placebo_design": args.placebo_design,
        }
        print(f"before: {load()}", flush=True)
        start, cpu = time.perf_counter(), time.process_time()
        report = localize(LocalizeConfig(run_dir=run, capability=args.capability, **settings), say=print)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"after: {load()}")
        phases = ", ".join(f"{k} {v:.0f} s" for k, v in report.seconds.items())
        print(f"estimate printed first: {_estimate_range(report)}; phases: {phases}")
        verdict = "PASS" if wall <= BUDGET_S else "FAIL"
        design = "the full design" if args.full else "the default"
        print(f"{design} probe localize: {wall:.0f} s ({wall / 60:.1f} min) against {BUDGET_S:.0f} s: {verdict}")
        _against_estimate(report, wall, cpu)
        for row in summary_rows(report):
            print(" | ".join(row))
        if report.planted:
            for s in report.summaries:
                point = next((p for p in report.curve(s.ranking, s.direction) if p.units == len(report.planted)), None)
                print(f"planted: {s.ranking} {s.direction}: f at k = {len(report.planted)}: {point and point.f:.4f}")
        print(f"rankings: {report.ranking_verdict.reason}")
        print(f"claim 1c: {report.claim_1c.verdict}: {report.claim_1c.reason}")
    return 0


def _estimate_range(report: object) -> str:
    from localize.records import LocalizeReport

    assert isinstance(report, LocalizeReport)
    least = report.estimate_least_s if report.estimate_least_s is not None else report.estimate_s
    return f"{least:.0f} to {report.estimate_s:.0f} s"


def _against_estimate(report: object, wall: float, cpu: float) -> None:
    """The estimate at the placebo sets the run drew against the wall time (PASS within 1.5x either way), the CPU
    time, and the CPU seconds of one whole pass at one thread it implies (the estimate's model, solved for its
    pace)."""
    import torch

    from localize.estimate import TOKEN_CPU_SECONDS, thread_speedup, threads_used
    from localize.records import LocalizeReport

    assert isinstance(report, LocalizeReport)
    least = report.estimate_least_s if report.estimate_least_s is not None else report.estimate_s
    sequential = [p for p in report.placebo if p.undrawn or report.settings.get("placebo_design") == "sequential"]
    share = sum(len(p.values) for p in sequential) / max(1, sum(len(p.values) + p.undrawn for p in sequential))
    at_drawn = least + (report.estimate_s - least) * share
    ratio = wall / at_drawn if at_drawn else float("nan")
    verdict = "PASS" if 1 / 1.5 <= ratio <= 1.5 else "FAIL"
    drawn = sum(len(p.values) for p in report.placebo)
    configured = drawn + sum(p.undrawn for p in report.placebo)
    print(
        f"placebo sets drawn: {drawn} of {configured}; the estimate at those sets {at_drawn:.0f} s; measured/estimated "
        f"{ratio:.2f} (within 1.5x: {verdict}); CPU {cpu / 60:.1f} min at {torch.get_num_threads()} torch threads "
        f"(CPU over wall {cpu / wall:.2f}; the estimate assumes a speed-up of {thread_speedup(threads_used()):.1f})"
    )
    implied = TOKEN_CPU_SECONDS * cpu / (at_drawn * thread_speedup(threads_used())) if at_drawn else float("nan")
    print(f"the CPU pace this run implies: {1e3 * implied:.2f} ms a token of a whole pass (TOKEN_CPU_SECONDS)")


if __name__ == "__main__":
    sys.exit(main())
