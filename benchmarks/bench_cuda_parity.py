"""CUDA parity: the toolkit's stages give the same numbers on ``--device cuda`` as on ``--device cpu`` (float32).

Each stage runs twice, once on ``--reference`` (cpu) and once on ``--device`` (cuda), through the CLI as a user runs
it (``python -m probe_cli ...`` in a subprocess, so each timing includes the start and the model load), or through
the library call where the CLI has no device flag (the attribution pass, :func:`probes.attribution.attribute_run`).
Subject: the tiny pair (``--pair-dir``: its ``sft``, ``dpo`` and ``data`` folders; ``probe models default --pair
tiny`` builds it), on 4 test rows per task (2 capabilities: 16 prompts each), plus the tiny ChatML and no-BOS chat
models of the test suite (:mod:`tests.chat_models`, built from code in seconds, recording only). Checks, with the
thresholds fixed before any GPU figure was read:

* ``record``: ``probe run --dtype float32 --store-dtype float32`` (mlp_out, attn_out, local basis dpo_on_sft): every
  HDF5 activation array within ``|a - b| <= 1e-5 + 1e-4 |b|`` (b: the reference), and ``probe analyze --no-plots``
  (topk_count) ranks the same top layers for every capability and hook.
* ``intervene``: ``probe intervene`` on the reference's run with the same 8 units (scale with its factor-0 control,
  patch both ways, 3 placebo sets, 4 rows, 16 greedy tokens): every generated text equal (else the count that
  differ is printed) and every continuous number of the report's arms (outcome before/after/delta/CI, placebo
  deltas, perplexities, scores) within ``1e-4 + 1e-4 |b|``; placebo percentiles and p-values of ranks are left out
  (ranks of deltas of about 1e-7 legitimately flip), so are timings.
* ``attribution``: the attribution pass (reference log-prob, all positions) of each run: the attribution, sft and
  dpo arrays within ``|a - b| <= 1e-4 max|b| + 1e-4 |b|`` (a sum of gradient x difference products over positions:
  the near-zero entries are cancellations, so the absolute floor scales with the array).

One line per check: the max abs and max rel difference, the seconds on each device, PASS/FAIL; exit status 1 if any
check fails. With ``--device cpu`` it compares cpu with cpu (the suite's machine, no GPU: every check must PASS with
zero difference, which tests the script itself).

    PYTHONPATH=$PWD python benchmarks/bench_cuda_parity.py --pair-dir .devpair --device cuda
    .venv/bin/python benchmarks/bench_cuda_parity.py --pair-dir ~/.cache/rolemrc-probe/tiny_pair --device cpu

Example (the tolerance rule):
    >>> import numpy as np
    >>> Diff.of(np.array([1.0, 2.0]), np.array([1.0, 2.00001]), atol=1e-5, rtol=1e-4).ok
    True
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS_PER_TASK = 4
CAPABILITIES = "multi_turn,role_style"
HOOKS = "mlp_out,attn_out"
ACT_TOL = (1e-5, 1e-4)  # atol, rtol: activations
OUTCOME_TOL = (1e-4, 1e-4)  # atol, rtol: the intervention report's numbers
ATTR_TOL = (1e-4, 1e-4)  # atol as a share of max|reference|, rtol: attribution arrays
STAGE_TIMEOUT_S = 150  # one CLI command; on the tiny subjects each takes seconds
SKIPPED_KEYS = {"seconds", "tokens", "percentile", "p_empirical", "guard", "tokens_per_second"}


@dataclass(frozen=True)
class Diff:
    """The largest differences between two arrays, and whether every element is within ``atol + rtol |b|``."""

    max_abs: float
    max_rel: float
    ok: bool

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> Diff:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return cls(float("inf"), float("inf"), False)
        if a.size == 0:
            return cls(0.0, 0.0, True)
        gap = np.abs(a - b)
        rel = gap / np.maximum(np.abs(b), 1e-30)
        ok = bool(np.all(gap <= atol + rtol * np.abs(b)) and np.isfinite(a).all() == np.isfinite(b).all())
        return cls(float(np.nanmax(gap)), float(np.nanmax(np.where(gap == 0, 0.0, rel))), ok)

    @classmethod
    def merge(cls, diffs: Sequence[Diff]) -> Diff:
        if not diffs:
            return cls(0.0, 0.0, True)
        return cls(max(d.max_abs for d in diffs), max(d.max_rel for d in diffs), all(d.ok for d in diffs))


@dataclass
class Check:
    name: str
    diff: Diff
    seconds: tuple[float, float]
    note: str = ""

    def line(self, devices: tuple[str, str]) -> str:
        verdict = "PASS" if self.diff.ok else "FAIL"
        times = f"{devices[0]} {self.seconds[0]:6.1f}s  {devices[1]} {self.seconds[1]:6.1f}s"
        diff = f"max abs {self.diff.max_abs:.3g}  max rel {self.diff.max_rel:.3g}"
        return f"{verdict}  {self.name:<28} {diff:<36} {times}  {self.note}".rstrip()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair-dir", type=Path, required=True, help="the tiny pair: sft/, dpo/ and data/ inside")
    parser.add_argument("--device", default="cuda", help="the device under test (cpu: compare cpu with cpu)")
    parser.add_argument("--reference", default="cpu", help="the device it is compared with")
    parser.add_argument("--work", type=Path, help="working folder (default: a temporary one, removed)")
    parser.add_argument("--no-chat-models", action="store_true", help="skip the tiny ChatML / no-BOS recordings")
    return parser.parse_args()


def cli(*argv: str | Path) -> float:
    """Run ``python -m probe_cli ARGV`` (from the repository, installed or not); its seconds. Fails loudly."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    command = [sys.executable, "-m", "probe_cli", *map(str, argv)]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=STAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise StageError(f"probe {argv[0]} ran past {STAGE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-6000:])
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise StageError(f"probe {argv[0]} exit status {done.returncode}: {last[:200]}")
    return time.perf_counter() - start


class StageError(Exception):
    """A stage could not run (a CLI exit status, a timeout): its checks FAIL and the next stages still run."""


def subset_data(pair_dir: Path, out: Path) -> Path:
    """The first ROWS_PER_TASK test rows of every task, with the pair's DPO pairs beside them; the data folder."""
    out.mkdir(parents=True, exist_ok=True)
    seen: Counter[str] = Counter()
    kept = []
    for line in (pair_dir / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines():
        task = json.loads(line)["task"]
        if seen[task] < ROWS_PER_TASK:
            kept.append(line)
            seen[task] += 1
    (out / "test.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    shutil.copy(pair_dir / "data" / "dpo.jsonl", out / "dpo.jsonl")
    return out


def h5_arrays(path: Path, group: str) -> dict[str, np.ndarray]:
    import h5py

    found: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f[group].visititems(
            lambda name, obj: (
                found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" else None
            )
        )
    return found


def compare_h5(a: Path, b: Path, group: str, tol: tuple[float, float], scaled: bool = False) -> tuple[Diff, int]:
    """Every float array under ``group``: the merged difference and how many arrays were compared."""
    left, right = h5_arrays(a, group), h5_arrays(b, group)
    if sorted(left) != sorted(right) or not right:
        return Diff(float("inf"), float("inf"), False), len(right)
    diffs = []
    for name, ref in right.items():
        atol = tol[0] * float(np.max(np.abs(ref))) if scaled and ref.size else tol[0]
        diffs.append(Diff.of(left[name], ref, atol, tol[1]))
    return Diff.merge(diffs), len(right)


def record(models: tuple[Path, Path], data: Path, out: Path, device: str) -> float:
    """``probe run`` then ``probe analyze --no-plots`` into ``out``; their seconds."""
    seconds = cli(
        "run",
        "--sft", models[0], "--dpo", models[1], "--data", data / "test.jsonl", "-c", CAPABILITIES, "--hook", HOOKS,
        "--device", device, "--dtype", "float32", "--store-dtype", "float32", "--out", out, "--no-analyze", "-q",
    )  # fmt: skip
    return seconds + cli("analyze", out, "--no-plots", "--stability-resamples", "0")


def top_layers(run: Path) -> dict[str, list[int]]:
    summary = json.loads((run / "analysis" / "summary.json").read_text(encoding="utf-8"))
    return {
        f"{cap}/{hook}": [row["layer"] for row in per_hook["top_layers"]]
        for cap, hooks in summary["capabilities"].items()
        for hook, per_hook in hooks.items()
    }


def recording_checks(name: str, runs: tuple[Path, Path], seconds: tuple[float, float]) -> list[Check]:
    diff, n = compare_h5(runs[1] / "activations.h5", runs[0] / "activations.h5", "activations", ACT_TOL)
    ranks = top_layers(runs[1]), top_layers(runs[0])
    differ = [key for key in ranks[1] if ranks[0].get(key) != ranks[1][key]]
    same = ranks[0].keys() == ranks[1].keys() and not differ
    note = "top layers equal" if same else f"top layers differ: {', '.join(differ) or 'keys'}"
    return [
        Check(f"{name} activations ({n})", diff, seconds),
        Check(f"{name} top layers", Diff(0.0, 0.0, same), seconds, note),
    ]


def intervene(run: Path, data: Path, out: Path, device: str) -> float:
    return cli(
        "intervene", run, "--edit", "scale,patch", "--top-k", "8", "--placebo", "3", "--limit", "4",
        "--max-new-tokens", "16", "--bootstrap", "200", "--outcome-pairs", "4", "--split", "test",
        "--data", data / "test.jsonl", "--device", device, "--dtype", "float32", "--out", out,
    )  # fmt: skip


def texts(out: Path) -> dict[tuple[int, str], str]:
    """Every generated text of the run, keyed by (row, arm or baseline)."""
    found: dict[tuple[int, str], str] = {}
    for line in (out / "generations.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for group in ("baselines", "intervened", "placebo"):
            for arm, text in _strings(row.get(group), group):
                found[(row["row"], arm)] = text
    return found


def _strings(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield prefix, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _strings(inner, f"{prefix}/{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _strings(inner, f"{prefix}/{i}")


def numbers(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number of a report, by path, leaving out SKIPPED_KEYS."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        yield prefix, float(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key not in SKIPPED_KEYS:
                yield from numbers(inner, f"{prefix}/{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from numbers(inner, f"{prefix}/{i}")


def intervene_checks(outs: tuple[Path, Path], seconds: tuple[float, float]) -> list[Check]:
    gen = texts(outs[1]), texts(outs[0])
    differ = sum(gen[0].get(key) != text for key, text in gen[1].items())
    same = gen[0].keys() == gen[1].keys() and differ == 0
    reports = [json.loads((out / "ab_report.json").read_text(encoding="utf-8"))["arms"] for out in outs]
    left, right = dict(numbers(reports[1])), dict(numbers(reports[0]))
    keys = sorted(right)
    diff = (
        Diff.of(np.array([left[k] for k in keys]), np.array([right[k] for k in keys]), *OUTCOME_TOL)
        if left.keys() == right.keys()
        else Diff(float("inf"), float("inf"), False)
    )
    return [
        Check("intervene generations", Diff(0.0, 0.0, same), seconds, f"{differ} of {len(gen[1])} texts differ"),
        Check(f"intervene report numbers ({len(keys)})", diff, seconds),
    ]


def attribution(run: Path, device: str) -> tuple[Path, float]:
    from probes.attribution import attribute_run

    start = time.perf_counter()
    path = attribute_run(run, device=device)
    return path, time.perf_counter() - start


def chat_pair(name: str, data: Path, root: Path) -> tuple[Path, Path]:
    from tests.chat_models import build_chat_model, corpus_from_data, perturbed_copy

    sft = build_chat_model(name, corpus_from_data(data), root / name / "sft")
    return sft, perturbed_copy(sft, root / name / "dpo", seed=1, scale=0.2)


def versions() -> str:
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    precision = torch.get_float32_matmul_precision()
    return (
        f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, {gpu}"
        f" (float32 matmul precision {precision}), {os.cpu_count()} CPUs"
    )


def run_checks(args: argparse.Namespace, work: Path) -> list[Check]:
    devices = (args.reference, args.device)
    data = subset_data(args.pair_dir, work / "data")
    runs = work / "run_0", work / "run_1"

    def record_stage(name: str, models: tuple[Path, Path], runs: tuple[Path, Path]) -> list[Check]:
        rec = record(models, data, runs[0], devices[0]), record(models, data, runs[1], devices[1])
        return recording_checks(name, runs, rec)

    def intervene_stage() -> list[Check]:
        outs = work / "intervene_0", work / "intervene_1"
        sec = intervene(runs[0], data, outs[0], devices[0]), intervene(runs[0], data, outs[1], devices[1])
        return intervene_checks(outs, sec)

    def attribution_stage() -> list[Check]:
        made = attribution(runs[0], devices[0]), attribution(runs[1], devices[1])
        diff, n = compare_h5(made[1][0], made[0][0], "/", ATTR_TOL, scaled=True)
        return [Check(f"attribution arrays ({n})", diff, (made[0][1], made[1][1]))]

    def chat_stage(name: str) -> list[Check]:
        return record_stage(name, chat_pair(name, data, work / "chat"), (work / f"{name}_0", work / f"{name}_1"))

    stages: list[tuple[str, Callable[[], list[Check]]]] = [
        (
            "tiny pair recording",
            lambda: record_stage("tiny pair", (args.pair_dir / "sft", args.pair_dir / "dpo"), runs),
        ),
        ("intervene", intervene_stage),
        ("attribution", attribution_stage),
    ]
    if not args.no_chat_models:
        stages += [(f"{name} recording", partial(chat_stage, name)) for name in ("chatml", "nobos")]
    checks: list[Check] = []
    for name, stage in stages:
        try:
            done = stage()
        except Exception as exc:  # a one-shot device run: a stage that breaks FAILs, and the next ones still run
            traceback.print_exc()
            done = [Check(name, Diff(float("inf"), float("inf"), False), (0.0, 0.0), f"did not run: {exc}")]
        _report(done, devices)
        checks += done
    return checks


def _report(checks: Sequence[Check], devices: tuple[str, str]) -> None:
    for check in checks:
        print(check.line(devices), flush=True)


def main() -> int:
    args = parse_args()
    if not (args.pair_dir / "sft").is_dir() or not (args.pair_dir / "data" / "test.jsonl").is_file():
        print(f"--pair-dir {args.pair_dir}: expected a tiny pair folder (sft/, dpo/, data/test.jsonl)", file=sys.stderr)
        return 2
    print(f"{args.device} against {args.reference}: {versions()}", flush=True)
    start = time.perf_counter()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        checks = run_checks(args, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="cuda_parity_") as tmp:
            checks = run_checks(args, Path(tmp))
    failed = [c.name for c in checks if not c.diff.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks PASS in {time.perf_counter() - start:.0f} s", end="")
    print(f"; FAIL: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
