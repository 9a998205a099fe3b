"""Run every ``benchmarks/bench_*.py`` in its own process and print their figures.

Targets are printed next to the figures, never asserted: a benchmark informs, a test decides.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    failures = 0
    for script in sorted(here.glob("bench_*.py")):
        print(f"\n=== {script.name}", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(script), *sys.argv[1:]])
        print(f"=== {script.name}: exit {code} in {time.perf_counter() - start:.1f} s", flush=True)
        failures += code != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
