"""Judges score a model's response to a test row, per capability the row belongs to."""

from core.judges.base import Judge, Verdict
from core.judges.factory import JUDGE_MODES, JUDGES, make_judge

__all__ = ["JUDGES", "JUDGE_MODES", "Judge", "Verdict", "make_judge"]
