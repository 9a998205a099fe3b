"""Judges score a model's response to a test row, per capability the row belongs to.

Modules:
    base        the judge interface: a :class:`Verdict` per row, a score per capability
    rules       the deterministic rule judge, driven by each test row's ``expect`` block
    llm         the paper's LLM-as-judge protocol through the shared client (:mod:`core.llm`), rubrics in ``rubrics/``
    factory     a judge by name: the one path the CLI, training's evaluation, A/B runs and scripts share
    files       ``probe judge``: a responses file judged against a test file
    agreement   per-capability summaries and the agreement of two judges
"""

from core.judges.base import Judge, Verdict
from core.judges.factory import JUDGE_MODES, JUDGES, make_judge

__all__ = ["JUDGES", "JUDGE_MODES", "Judge", "Verdict", "make_judge"]
