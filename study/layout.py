"""What the replication study adds to a run directory, and the commands that make each part.

Kept apart from the modules that read them so that ``probe replicate``'s option defaults load
without torch. :class:`Commands` spells, for one run's models, data and directory, the command that
adds each part (what a report prints beside a part the run lacks). Beside the recording and the
analysis (:class:`core.run_dir.RunDir` names every file):

the evaluation file   ``probe models eval --out`` (the compliance of base, SFT and DPO)
the replicate record  ``probe replicate``'s options, command line, each stage's estimated and measured time
the report            ``probe report``
``interventions/multi_turn_dpo_replicate/``   ``probe replicate``'s A/B on multi_turn (:data:`INTERVENTION_DIR`)
``localize/multi_turn_replicate/``             ``probe replicate``'s localize of multi_turn (:data:`LOCALIZE_DIR`)

Example:
    >>> q("runs/my run")
    "'runs/my run'"
"""

from __future__ import annotations

import shlex
from typing import Any

from interventions.recipes import RECIPES

INTERVENTION_DIR = "multi_turn_dpo_replicate"
TARGET = "multi_turn"
LOCALIZE_DIR = f"{TARGET}_replicate"
# the arms of claim 4, each against its own placebos: the ablation (scale at factor 0) and every directional recipe
CAUSAL_RECIPES = ("scale", *(name for name, recipe in RECIPES.items() if recipe.directional))
CAUSAL_COMMAND_EXTRA = f" --factor 0 --edit {','.join(CAUSAL_RECIPES)}"


def q(value: Any) -> str:
    """A path or value quoted for a shell line."""
    return shlex.quote(str(value))


def q_path(value: str) -> str:
    """A recorded path quoted for a shell line, moved into the current model home when it pointed into an earlier one
    (:func:`core.builds.in_current_home`)."""
    from core.builds import in_current_home

    return q(in_current_home(value))
