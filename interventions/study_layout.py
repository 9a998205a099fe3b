"""The files of a run directory that the replication study reads and writes, and the commands that make each part.

Kept apart from the modules that read them so that ``probe replicate``'s option defaults load
without torch. :class:`Commands` spells, for one run's models, data and directory, the command that
adds each part (what a report prints beside a part the run lacks). Beside ``activations.h5`` and
``analysis/``:

``eval.json``        ``probe models eval --out`` (the compliance of base, SFT and DPO)
``replicate.json``   ``probe replicate``'s record: options, command line, each stage's estimated and measured time
``report.html``      ``probe report``
``interventions/multi_turn_dpo_replicate/``   ``probe replicate``'s A/B on multi_turn

Example:
    >>> q("runs/my run")
    "'runs/my run'"
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interventions.study import Study

EVAL_FILE = "eval.json"
REPLICATE_FILE = "replicate.json"
REPORT_FILE = "report.html"
INTERVENTION_DIR = "multi_turn_dpo_replicate"
TARGET = "multi_turn"
CAUSAL_COMMAND_EXTRA = " --factor 0 --edit scale,mean,patch,steer"  # the arms of claim 4, each against its own placebos


def q(value: Any) -> str:
    """A path or value quoted for a shell line."""
    return shlex.quote(str(value))


class Commands:
    """The commands that produce each part, for this run's models, data and directory."""

    def __init__(
        self, study: Study
    ) -> None:  # a recorded run names its models and data; without them, the default pair
        sft, dpo, base = (study.model(r) for r in ("sft", "dpo", "base"))
        self.run_dir = study.run_dir
        self.run = q(study.run_dir)
        named = sft is not None and dpo is not None and bool(sft.directory and dpo.directory)
        self.pair = f"--sft {q(sft.directory)} --dpo {q(dpo.directory)}" if named else "--pair smollm2"
        self.base = f" --base {q(base.directory)}" if base and base.directory else ""
        self.data = f" --data {q(study.data_file)}" if study.data_file else ""

    def record(self, capabilities: str = "all") -> str:
        return f"probe run -c {capabilities} {self.pair}{self.data} --out {self.run}"

    def analyze(self) -> str:
        return f"probe analyze {self.run}"

    def explain(self, capability: str) -> str:
        return f"probe explain {self.run} -c {capability}"

    def intervene(self, extra: str = "") -> str:
        return f"probe intervene {self.run} -c {TARGET}{extra}"

    def evaluate(self) -> str:
        test = self.data.replace("--data", "--test")
        return f"probe models eval {self.pair}{self.base}{test} --out {q(self.run_dir / EVAL_FILE)}"

    def replicate(self) -> str:
        return f"probe replicate {self.pair}{self.base}{self.data} --out {self.run}"

    def report(self) -> str:
        return f"probe report {self.run}"
