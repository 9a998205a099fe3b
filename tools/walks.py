"""Every call between modules of different rooms during one ``probe`` command: distinct module edges, room pairs,
climbs (a call into a later room: a callback, since no import goes that way) and modules.

    python tools/walks.py -- intervene RUN -c multi_turn --units 20:5 --limit 1 --placebo 0 --outcomes off
    PYTHONPATH=<a checkout of another commit> python tools/walks.py -- ...      # the same count for that code

Used for issue 49's before/after table of the walks; it prints one JSON line after the command's own output.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from types import FrameType
from typing import Any

ROOMS = ["core", "access", "judging", "data_synthesis", "training", "probes", "analysis", "interventions",
         "dictionary", "localize", "lmeval", "study", "probe_cli"]  # fmt: skip
ORDER = {room: i for i, room in enumerate(ROOMS)}


def _module(frame: FrameType | None) -> str | None:
    name = "" if frame is None else str(frame.f_globals.get("__name__", ""))
    return name if name.split(".")[0] in ORDER else None


def main(argv: list[str]) -> dict[str, Any]:
    edges: dict[tuple[str, str], int] = {}

    def profile(frame: FrameType, event: str, _: object) -> None:
        callee = _module(frame) if event == "call" else None
        caller = _module(frame.f_back) if callee else None
        if callee and caller and caller.split(".")[0] != callee.split(".")[0]:
            edges[(caller, callee)] = edges.get((caller, callee), 0) + 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    from probe_cli.main import main as probe

    with contextlib.suppress(SystemExit):
        probe(argv)
    sys.setprofile(None)
    rooms = {(a.split(".")[0], b.split(".")[0]) for a, b in edges}
    climbs = sorted(f"{a} -> {b}" for a, b in edges if ORDER[b.split(".")[0]] > ORDER[a.split(".")[0]])
    modules = {m for edge in edges for m in edge}
    return {"module_edges": len(edges), "room_pairs": len(rooms), "climbs": len(climbs), "modules": len(modules),
            "climb_list": climbs}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[sys.argv.index("--") + 1 :])))
