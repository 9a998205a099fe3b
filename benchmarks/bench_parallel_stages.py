"""Data-parallel ``probe models eval`` and ``probe analyze --metric attribution`` (issue 41): N processes against one.

Each stage runs its real command once as one process with ``OMP_NUM_THREADS=CORES``, then under ``torchrun
--nproc-per-node N`` with ``OMP_NUM_THREADS=CORES/N`` per process (the same cores, split), on the default pair and
the first ``--rows`` multi_turn rows of its test split (recorded once, untimed, for the attribution pass). Printed:
wall seconds of each whole command (loading included), the speed-up ratio, whether the outputs are equal (the eval
JSON identical; the attribution file's arrays identical), and PASS/FAIL. Targets, fixed before measuring: the outputs
equal, and a speed-up >= 0.8x on a CPU machine (the same cores; data parallelism should cost little there), >= 0.7 x N
with N GPUs.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_parallel_stages.py --rows 24 --nproc 2
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_TARGET = 0.8


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}


def _timed(command: list[str], threads: int, nproc: int) -> float:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    full = [*(launcher if nproc > 1 else [sys.executable]), "-m", "probe_cli", *command]
    start = time.perf_counter()
    done = subprocess.run(full, env=_env(threads), cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"FAIL: {' '.join(command[:2])} exit {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def _subset(test_file: Path, rows: int, out: Path) -> Path:
    """The first ``rows`` multi_turn rows of ``test_file``, as they are written there."""
    from core.capabilities import capabilities_of
    from core.rows import read_test_rows

    lines = [line for line in test_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    parsed = read_test_rows(test_file)
    if len(parsed) != len(lines):
        sys.exit(f"FAIL: {test_file}: {len(lines)} lines but {len(parsed)} rows")
    chosen = [
        line
        for line, row in zip(lines, parsed, strict=True)
        if "multi_turn" in {c.value for c in capabilities_of(row.task)}
    ]
    out.write_text("\n".join(chosen[:rows]) + "\n", encoding="utf-8")
    return out


def _arrays(path: Path) -> dict[str, object]:
    import h5py

    found: dict[str, object] = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, d: found.update({n: d[()].tobytes()}) if isinstance(d, h5py.Dataset) else None)
    return found


def _line(stage: str, one: float, many: float, nproc: int, cores: int, equal: bool) -> bool:
    ratio = one / many
    ok = equal and ratio >= CPU_TARGET
    print(
        f"{stage}: 1 process x {cores} threads {one:.1f} s; {nproc} processes x {max(1, cores // nproc)} threads "
        f"{many:.1f} s; speed-up {ratio:.2f}x (target >= {CPU_TARGET}x on CPU); outputs equal: {equal} -> "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--stage", choices=("both", "eval", "attribution"), default="both")
    args = parser.parse_args()
    from training.default_pair import ensure_default_pair

    pair = ensure_default_pair()
    split = max(1, args.cores // args.nproc)
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        root = Path(tmp)
        data = _subset(Path(pair.test_file), args.rows, root / "rows.jsonl")
        models = ["--sft", str(pair.sft_dir), "--dpo", str(pair.dpo_dir)]
        ok = True
        if args.stage in ("both", "eval"):
            ok &= _evaluation(models, data, root, args, split)
        if args.stage in ("both", "attribution"):
            ok &= _attribution(models, data, root, args, split)
    print("PASS" if ok else "FAIL")


def _evaluation(models: list[str], data: Path, root: Path, args: argparse.Namespace, split: int) -> bool:
    """``probe models eval`` (the weights' hashes are computed first, untimed, so neither run pays them)."""
    from core.provenance import weights_sha256

    for path in models[1::2]:
        weights_sha256(path)
    evaluate = ["models", "eval", *models, "--test", str(data), "--max-new-tokens", str(args.max_new_tokens)]
    one = _timed([*evaluate, "--out", str(root / "one.json")], args.cores, 1)
    many = _timed([*evaluate, "--out", str(root / "many.json")], split, args.nproc)
    same = json.loads((root / "one.json").read_text()) == json.loads((root / "many.json").read_text())
    return _line("models eval", one, many, args.nproc, args.cores, same)


def _attribution(models: list[str], data: Path, root: Path, args: argparse.Namespace, split: int) -> bool:
    """``probe analyze --metric attribution`` on a recording of the rows (made once, untimed)."""
    record = ["run", *models, "--data", str(data), "-c", "multi_turn", "--hook", "mlp_out", "--no-analyze"]
    _timed([*record, "--quiet", "--out", str(root / "run")], args.cores, 1)
    shutil.copytree(root / "run", root / "run2")
    analyze = ["analyze", "--metric", "attribution", "--no-plots", "--stability-resamples", "0"]
    one = _timed([analyze[0], str(root / "run"), *analyze[1:]], args.cores, 1)
    many = _timed([analyze[0], str(root / "run2"), *analyze[1:]], split, args.nproc)
    name = "attribution_reference_logprob.h5"
    same = _arrays(root / "run" / name) == _arrays(root / "run2" / name)
    return _line("attribution", one, many, args.nproc, args.cores, same)


if __name__ == "__main__":
    main()
