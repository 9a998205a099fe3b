"""The published-format fixture file is what the probes tests rely on."""

from __future__ import annotations

import json
from pathlib import Path


def test_fixture_file_uses_published_capitalised_roles(rolemrc_file: Path) -> None:
    first = json.loads(rolemrc_file.read_text().splitlines()[0])
    assert [t["role"] for t in first["question"]] == ["System", "User"]
