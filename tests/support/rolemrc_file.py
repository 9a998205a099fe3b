"""A small test file in the *published* RoleMRC format, for the probes tests.

Roles are capitalised (``System``/``User``/``Assistant``) as in the released
``roleMRC_test.jsonl``; every capability has rows, and prompt lengths vary so that
batches need left padding. The session fixture ``rolemrc_file`` (tests/conftest.py) writes it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from core.capabilities import TASKS

TEXT = "the archivist reads old maps of the river city and answers questions about its bridges granite flood"
WORDS = TEXT.split()


def write_rolemrc_file(path: Path, n_rows: int = 36, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n_rows):
            task = TASKS[i % len(TASKS)].name
            question = [
                {
                    "role": "System",
                    "content": "You are the archivist. " + " ".join(rng.choices(WORDS, k=rng.randint(2, 40))),
                },
                {"role": "User", "content": " ".join(rng.choices(WORDS, k=rng.randint(2, 10)))},
            ]
            if "2nd" in task:
                question += [
                    {"role": "Assistant", "content": "I cannot answer that."},
                    {"role": "User", "content": "Tell me of the bridge."},
                ]
            handle.write(json.dumps({"question": question, "reference": "ref", "task": task}) + "\n")
    return path
