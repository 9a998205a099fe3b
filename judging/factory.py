"""Build a judge by name: the one path the CLI, training's evaluation, A/B runs and scripts share.

``rules`` needs nothing but the test rows' ``expect`` blocks; ``llm`` needs an
OpenAI-compatible endpoint, described by a :class:`~judging.client.config.ClientConfig`. The
LLM judge (and with it the ``openai`` client) is imported only when asked for, so the
offline path stays light. ``probe judge`` also accepts ``both``: that is a mode of the
command (two judges and their agreement), not a judge, so it lives in :data:`JUDGE_MODES`.

Example:
    >>> make_judge("rules").name
    'rules'
    >>> make_judge("gpt")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: unknown judge 'gpt'; expected one of rules, llm
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.errors import ProbeError
from judging.base import Judge

if TYPE_CHECKING:
    from judging.client.config import ClientConfig

JUDGES: tuple[str, ...] = ("rules", "llm")
JUDGE_MODES: tuple[str, ...] = (*JUDGES, "both")


def make_judge(name: str, client: ClientConfig | None = None, *, model_flag: str = "--judge-model") -> Judge:
    """The judge called ``name``; ``client`` is the LLM judge's endpoint (``model_flag`` names its model in errors)."""
    if name == "rules":
        from judging.rules import RuleJudge

        return RuleJudge()
    if name == "llm":
        if client is None or not client.model:
            raise ProbeError(
                f"--judge llm needs a model: pass {model_flag} or set OPENAI_MODEL "
                "(and OPENAI_BASE_URL for a local server)"
            )
        from judging.llm import LLMJudge

        return LLMJudge(client)
    raise ProbeError(f"unknown judge {name!r}; expected one of {', '.join(JUDGES)}")
