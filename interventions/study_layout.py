"""What the replication study adds to a run directory, and the commands that make each part.

Kept apart from the modules that read them so that ``probe replicate``'s option defaults load
without torch. :class:`Commands` spells, for one run's models, data and directory, the command that
adds each part (what a report prints beside a part the run lacks). Beside the recording and the
analysis (:class:`core.run_dir.RunDir` names every file):

the evaluation file   ``probe models eval --out`` (the compliance of base, SFT and DPO)
the replicate record  ``probe replicate``'s options, command line, each stage's estimated and measured time
the report            ``probe report``
``interventions/multi_turn_dpo_replicate/``   ``probe replicate``'s A/B on multi_turn (:data:`INTERVENTION_DIR`)

Example:
    >>> q("runs/my run")
    "'runs/my run'"
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from core.run_dir import RunDir

if TYPE_CHECKING:
    from interventions.study import Study

INTERVENTION_DIR = "multi_turn_dpo_replicate"
TARGET = "multi_turn"
CAUSAL_COMMAND_EXTRA = " --factor 0 --edit scale,mean,patch,steer"  # the arms of claim 4, each against its own placebos


def q(value: Any) -> str:
    """A path or value quoted for a shell line."""
    return shlex.quote(str(value))


def q_path(value: str) -> str:
    """A recorded path quoted for a shell line, moved into the current model home when it pointed into an earlier one
    (:func:`core.builds.in_current_home`)."""
    from core.builds import in_current_home

    return q(in_current_home(value))


class Commands:
    """The commands that produce each part, for this run's models, data and directory."""

    def __init__(self, study: Study) -> None:
        sft, dpo, base = (study.model(r) for r in ("sft", "dpo", "base"))
        self.run_dir = study.run_dir
        self.run = q(study.run_dir)
        # a recorded run names its models and data; without them, the default pair
        if sft is not None and dpo is not None and sft.directory and dpo.directory:
            self.pair = f"--sft {q_path(sft.directory)} --dpo {q_path(dpo.directory)}"
        else:
            self.pair = "--pair smollm2"
        self.base = f" --base {q_path(base.directory)}" if base and base.directory else ""
        self.data = f" --data {q_path(study.data_file)}" if study.data_file else ""

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
        return f"probe models eval {self.pair}{self.base}{test} --out {q(RunDir(self.run_dir).eval_file)}"

    def replicate(self) -> str:
        return f"probe replicate {self.pair}{self.base}{self.data} --out {self.run}"

    def report(self) -> str:
        return f"probe report {self.run}"
