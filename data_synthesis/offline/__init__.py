"""Offline, seeded synthesis of a RoleMRC-format dataset (no network, seconds to run).

``synthesize(out_dir, n_roles, seed)`` writes ``profiles.jsonl``, ``passages.jsonl``,
``sft.jsonl``, ``dpo.jsonl`` and ``test.jsonl`` in the published schemas, with extra
fields (``task``, ``violation``, ``expect``...) that the published readers keep in
``extra``. See docs/data.md for the schemas, the ``expect`` block and the scaling rule.

Modules:
    vocab           closed vocabularies: every cue a tiny model must learn
    profiles        role profiles and the system prompts built from them
    passages        a passage pool generated from structured facts, so every answer is exact
    replies         reply templates: the role's style prefix, the behaviour's body, the nested requirement
    chats           free chats: in-character small talk without a passage
    tasks           one episode (prompt, compliant reply, expectations, violations) per task
    synthesize      the files: profiles, SFT, DPO and test
"""

from data_synthesis.offline.synthesize import FILES, SynthesisConfig, SynthesisSummary, synthesize
from data_synthesis.offline.tasks import VIOLATIONS

__all__ = ["FILES", "VIOLATIONS", "SynthesisConfig", "SynthesisSummary", "synthesize"]
