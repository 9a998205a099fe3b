"""Judges score a model's response to a test row, per capability the row belongs to."""

from data_synthesis.judge.base import Judge, Verdict

__all__ = ["Judge", "Verdict"]
