"""A scripted stand-in for a capable instruction-following LLM behind the loopback server.

:class:`GoodLLM` answers the synthesis prompts of :mod:`data_synthesis.llm.synthesis` the
way a good chat model would, with a few realistic slips (a reply wrapped in prose, a
persona that never parses), so that the tests exercise the real parsing and repair path.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from data_synthesis.offline import vocab
from data_synthesis.offline.replies import apply_requirement, requirement_for

OCCUPATIONS = {d.occupation: d.name for d in vocab.DOMAINS}


def _line(text: str, lead: str) -> str | None:
    found = re.search(rf"^- {re.escape(lead)}(.*)$", text, re.M)
    return found.group(1).strip() if found else None


def _requirement(sentence: str | None) -> Any:
    if not sentence:
        return None
    sentence = sentence.rstrip(".")
    for kind, text in vocab.FORMAT_SENTENCES.items():
        if sentence == text:
            return requirement_for(kind)
    found = re.search(r"include the phrase '(.+)' in every reply", sentence)
    if found:
        return requirement_for("include_phrase", found.group(1))
    found = re.search(r"end every reply with the word '(.+)'", sentence)
    return requirement_for("end_with_word", found.group(1)) if found else None


class GoodLLM:
    """Answers like a capable instruction-following model, with a few realistic slips."""

    def __init__(self) -> None:
        self.calls = 0
        self.slipped = False
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        self.calls += 1
        text = request["messages"][-1]["content"]
        first = request["messages"][1]["content"]
        if "Seed persona:" in first:
            return self._profile(first, repairing=len(request["messages"]) > 2)
        if "missing CHARACTER replies" in first:
            n = int(re.search(r"Write the (\d+) missing", first).group(1))  # type: ignore[union-attr]
            start = _line(first, "Start every reply with exactly: ")
            return json.dumps({"replies": [f"{start} Glad to talk with you." for _ in range(n)]})
        if "Write the CHARACTER's next reply" in first:
            reply = self._reply(first)
            if self.calls % 7 == 0 and len(request["messages"]) == 2:
                # wrong: repaired
                return f"Sure! Here it is:\n```json\n{json.dumps({'reply': 'I would rather not.'})}\n```"
            return f"```json\n{json.dumps({'reply': reply})}\n```"
        raise AssertionError(f"unexpected request: {text[:80]}")

    def _profile(self, text: str, repairing: bool) -> str:
        persona = re.search(r"Seed persona: ([^,]+), (.+)\.\n", text)
        assert persona is not None
        name, description = persona.group(1), persona.group(2)
        if name.startswith("_never_"):
            return "{}"
        domains = [OCCUPATIONS[w] for w in re.findall(r"[a-z]+", description) if w in OCCUPATIONS][:2]
        card = {
            "description": description,
            "personality": vocab.PERSONALITIES[0],
            "catchphrase": vocab.CATCHPHRASES[self.calls % 5],
            "gesture": vocab.GESTURES[self.calls % 4],
            "domains": domains,
        }
        with self.lock:
            slip, self.slipped = not self.slipped and not repairing, self.slipped or not repairing
        if slip:
            card["catchphrase"] = "Yo!"  # not in the closed list: must be repaired (once, for one persona)
        return "Here is the profile: " + json.dumps(card)

    def _reply(self, text: str) -> str:
        start = _line(text, "Start the reply with exactly: ") or ""
        refusal = _line(text, "Then refuse with this sentence: ")
        answer = re.search(r'contains the exact words "(.+)"', text)
        attempt = _line(text, "Begin that sentence with: ")
        if refusal:
            body = refusal
        else:
            assert answer is not None
            body = f"{attempt + ' ' if attempt else ''}It is {answer.group(1)}."
        req = _requirement(_line(text, "The whole reply must obey this system instruction: "))
        return apply_requirement(f"{start} {body}", req, prefix=start)
