"""Offline, seeded synthesis of a RoleMRC-format dataset (no network, seconds to run).

``synthesize(out_dir, n_roles, seed)`` writes ``profiles.jsonl``, ``passages.jsonl``,
``sft.jsonl``, ``dpo.jsonl`` and ``test.jsonl`` in the published schemas, with extra
fields (``task``, ``violation``, ``expect``...) that the published readers keep in
``extra``. See docs/data.md for the schemas, the ``expect`` block and the scaling rule.
"""

from data_synthesis.offline.synthesize import FILES, SynthesisConfig, SynthesisSummary, synthesize
from data_synthesis.offline.tasks import VIOLATIONS

__all__ = ["FILES", "VIOLATIONS", "SynthesisConfig", "SynthesisSummary", "synthesize"]
