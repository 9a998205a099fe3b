"""Judging: the judges that score a model's response to a test row, per capability the row belongs to, and the
OpenAI-compatible client that the LLM judge and LLM synthesis talk through.

A room of its own, right above :mod:`core` and :mod:`access` (it imports only ``core``): ``core`` holds what every room
needs and no room owns, while these serve four rooms (data_synthesis, training, interventions, lmeval) and the CLI,
and carry an engine of their own (HTTP with retries, caches, deadlines). See docs/extending.md, "Where a new piece
goes".

Modules:
    base        the judge interface: a :class:`Verdict` per row, a score per capability
    rules       the deterministic rule judge, driven by each test row's ``expect`` block
    llm         the paper's LLM-as-judge protocol through the shared client, rubrics in ``rubrics/``
    factory     a judge by name: the one path the CLI, training's evaluation, A/B runs and scripts share
    files       ``probe judge``: a responses file judged against a test file
    agreement   per-capability summaries and the agreement of two judges
    client/     the OpenAI-compatible client (:mod:`judging.client`)
"""

from judging.base import Judge, Verdict
from judging.factory import JUDGE_MODES, JUDGES, make_judge

__all__ = ["JUDGES", "JUDGE_MODES", "Judge", "Verdict", "make_judge"]
