"""Verifiable constraints on a reply: 18 offline checkers (no NLTK, no download) and their carry-over over turns.

A constraint is a JSON object in a test row's ``expect.constraints`` list: ``type`` (one of :data:`CHECKERS`),
``value`` (a word or phrase, where the type takes one), ``n`` (a count, where it takes one), ``from_turn`` (the user
turn that set it, 1-based; it holds in that turn's reply and every later one) and ``sentence`` (how the prompt phrased
it, informative). :func:`check` decides one constraint on one reply, :func:`check_all` a list, and
:func:`check_turns` a whole conversation: reply ``k`` (the answer to user turn ``k``) must meet every constraint set
in turns ``1..k``, so a constraint met in one turn and dropped in the next fails.

An empty reply (nothing but white space) meets no constraint, even one that only forbids something: a model that
says nothing has followed nothing. Words are runs of letters or digits in any script, an apostrophe inside a word
keeps it whole ("don't" is one word); phrases are compared on those words, case-insensitively. docs/data.md says
where each type differs from IFEval's checker of the same name.

A row's constraints are bounded when the row is read (:func:`constraints_problem`), so that no hand-edited row can keep
the judge busy for minutes: at most :data:`MAX_CONSTRAINTS` per row, and a ``value`` of at most
:data:`MAX_VALUE_CHARS` characters and :data:`MAX_VALUE_WORDS` words (``forbid_words``' ``|``-separated words
together). The synthesizers write one to four constraints per row, each value a word or a short phrase.

Example:
    >>> check("the river is long.", {"type": "lowercase"})
    (True, 'lowercase: no uppercase letter')
    >>> check("The river is long.", {"type": "lowercase"})
    (False, 'lowercase: has uppercase letters')
    >>> check_turns(["- a\\n- b", "- c"], [{"type": "bullet_count", "n": 2, "from_turn": 1}])
    (False, 'turn 2: bullet_count: 1 bullet line(s), expected exactly 2')
    >>> constraints_problem([{"type": "forbid_words", "value": "|".join(["very"] * 300_000)}])
    "item 0: forbid_words: 'value' holds 1,499,999 characters; at most 1,000"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

WORD_RE = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
BULLET_RE = re.compile(r"^\s*(?:[-*\u2022])\s+\S")
SENTENCE_END_RE = re.compile(r"[.!?\u2026\u3002\uff01\uff1f]+(?=\s|$|[\"'\u201d\u2019)\]])")
CONTRACTION_RE = re.compile(
    r"\b\w+(?:n['\u2019]t|['\u2019](?:re|ve|ll|d|m))\b|\b(?:it|that|there|what|he|she|let|here|who)['\u2019]s\b",
    re.IGNORECASE,
)
COMMAS = (",", "\uff0c", "\u3001")
OPEN_QUOTES, CLOSE_QUOTES = ('"', "\u201c"), ('"', "\u201d")
POSTSCRIPT_RE = re.compile(r"^\s*p\.\s?s\.", re.IGNORECASE | re.MULTILINE)
TITLE_RE = re.compile(r"<<([^\n<>]+)>>")
NARRATION_RE = re.compile(r"^\s*\*[^*\n]{1,80}\*\s*")

Result = tuple[bool, str]
MAX_CONSTRAINTS = 64
MAX_VALUE_CHARS = 1_000
MAX_VALUE_WORDS = 100


def words(text: str) -> list[str]:
    """The reply's words, lowercased (curly apostrophes made straight)."""
    return [w.lower().replace("\u2019", "'") for w in WORD_RE.findall(text)]


def _phrase(value: Any) -> list[str]:
    return words(str(value or ""))


def _has_phrase(text: str, value: Any) -> bool:
    needle, hay = _phrase(value), words(text)
    return bool(needle) and any(hay[i : i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))


def _count_phrase(text: str, value: Any) -> int:
    needle, hay = _phrase(value), words(text)
    return sum(hay[i : i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1)) if needle else 0


def sentences(text: str) -> list[str]:
    """Sentences: text ended by . ! ? ... (or the end), each holding at least one word."""
    parts = SENTENCE_END_RE.split(text)
    return [p for p in parts if WORD_RE.search(p)]


def _letters(text: str) -> list[str]:
    return [c for c in text if c.isalpha() and (c.isupper() or c.islower())]


def _lowercase(text: str, _c: Mapping[str, Any]) -> Result:
    letters = _letters(text)
    if not letters:
        return False, "has no letters"
    return (False, "has uppercase letters") if any(c.isupper() for c in letters) else (True, "no uppercase letter")


def _all_caps(text: str, _c: Mapping[str, Any]) -> Result:
    letters = _letters(text)
    if not letters:
        return False, "has no letters"
    return (False, "has lowercase letters") if any(c.islower() for c in letters) else (True, "no lowercase letter")


def _start_with(text: str, c: Mapping[str, Any]) -> Result:
    need = _phrase(c.get("value"))
    got = words(NARRATION_RE.sub("", text, count=1))[: len(need)]
    return got == need and bool(need), f"must start with {c.get('value')!r}"


def _end_with(text: str, c: Mapping[str, Any]) -> Result:
    need = _phrase(c.get("value"))
    got = words(text)[-len(need) :] if need else []
    return got == need and bool(need), f"must end with {c.get('value')!r}"


def _include_word(text: str, c: Mapping[str, Any]) -> Result:
    return _has_phrase(text, c.get("value")), f"must include {c.get('value')!r}"


def _forbid_words(text: str, c: Mapping[str, Any]) -> Result:
    found = [w for w in str(c.get("value") or "").split("|") if _has_phrase(text, w)]
    return not found, f"uses the forbidden {', '.join(map(repr, found))}" if found else "no forbidden word"


def _word_frequency(text: str, c: Mapping[str, Any]) -> Result:
    count, n = _count_phrase(text, c.get("value")), int(c.get("n") or 0)
    return count >= n, f"{c.get('value')!r} appears {count} time(s), expected at least {n}"


def _max_words(text: str, c: Mapping[str, Any]) -> Result:
    count, n = len(words(text)), int(c.get("n") or 0)
    return count <= n, f"{count} words, expected at most {n}"


def _min_words(text: str, c: Mapping[str, Any]) -> Result:
    count, n = len(words(text)), int(c.get("n") or 0)
    return count >= n, f"{count} words, expected at least {n}"


def _max_sentences(text: str, c: Mapping[str, Any]) -> Result:
    count, n = len(sentences(text)), int(c.get("n") or 0)
    return count <= n, f"{count} sentence(s), expected at most {n}"


def _bullet_count(text: str, c: Mapping[str, Any]) -> Result:
    count, n = sum(bool(BULLET_RE.match(line)) for line in text.splitlines()), int(c.get("n") or 0)
    return count == n, f"{count} bullet line(s), expected exactly {n}"


def _wrap_quotes(text: str, _c: Mapping[str, Any]) -> Result:
    t = text.strip()
    ok = len(t) > 2 and t[0] in OPEN_QUOTES and t[-1] in CLOSE_QUOTES
    return ok, "must be wrapped in double quotes"


def _wrap_brackets(text: str, _c: Mapping[str, Any]) -> Result:
    t = text.strip()
    return len(t) > 2 and t[0] == "[" and t[-1] == "]", "must be wrapped in square brackets"


def _no_commas(text: str, _c: Mapping[str, Any]) -> Result:
    return not any(comma in text for comma in COMMAS), "must use no commas"


def _postscript(text: str, _c: Mapping[str, Any]) -> Result:
    match = POSTSCRIPT_RE.search(text)
    ok = match is not None and bool(WORD_RE.search(text[: match.start()]) and WORD_RE.search(text[match.end() :]))
    return ok, "must end with a postscript line starting with 'P.S.'"


def _title(text: str, _c: Mapping[str, Any]) -> Result:
    return any(WORD_RE.search(t) for t in TITLE_RE.findall(text)), "must hold a title in double angle brackets"


def _no_contractions(text: str, _c: Mapping[str, Any]) -> Result:
    found = CONTRACTION_RE.findall(text)
    return not found, f"formal register: uses the contraction(s) {', '.join(found)}" if found else "no contraction"


def _max_capital_words(text: str, c: Mapping[str, Any]) -> Result:
    count = sum(len(w) > 1 and w.isupper() for w in WORD_RE.findall(text))
    n = int(c.get("n") or 0)
    return count <= n, f"{count} all-capital word(s), expected at most {n}"


CHECKERS: dict[str, Callable[[str, Mapping[str, Any]], Result]] = {
    "lowercase": _lowercase,
    "all_caps": _all_caps,
    "start_with": _start_with,
    "end_with": _end_with,
    "include_word": _include_word,
    "forbid_words": _forbid_words,
    "word_frequency": _word_frequency,
    "max_words": _max_words,
    "min_words": _min_words,
    "max_sentences": _max_sentences,
    "bullet_count": _bullet_count,
    "wrap_quotes": _wrap_quotes,
    "wrap_brackets": _wrap_brackets,
    "no_commas": _no_commas,
    "postscript": _postscript,
    "title": _title,
    "no_contractions": _no_contractions,
    "max_capital_words": _max_capital_words,
}
TAKES_VALUE = frozenset({"start_with", "end_with", "include_word", "forbid_words", "word_frequency"})
TAKES_N = frozenset({"word_frequency", "max_words", "min_words", "max_sentences", "bullet_count", "max_capital_words"})


def constraints_problem(items: list[Any]) -> str | None:
    """What is wrong with a row's constraint list (for the row reader's one-line error), or None: too many, or the
    first item that :func:`constraint_problem` refuses, by its index."""
    if len(items) > MAX_CONSTRAINTS:
        return f"holds {len(items):,} constraints; at most {MAX_CONSTRAINTS} (module doc of core.constraints)"
    for i, item in enumerate(items):
        problem = constraint_problem(item)
        if problem:
            return f"item {i}: {problem}"
    return None


def constraint_problem(item: Any) -> str | None:
    """What is wrong with one constraint object, or None; its value within the bounds (module doc)."""
    if not isinstance(item, dict):
        return f"expected an object, got {type(item).__name__}"
    kind = item.get("type")
    if kind not in CHECKERS:
        return f"'type' must be one of {', '.join(CHECKERS)}, got {kind!r}"
    value = item.get("value")
    if kind in TAKES_VALUE and isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return f"{kind}: 'value' holds {len(value):,} characters; at most {MAX_VALUE_CHARS:,}"
    if kind in TAKES_VALUE and not (isinstance(value, str) and _phrase(value)):
        return f"{kind}: 'value' must be a non-empty word or phrase"
    if kind in TAKES_VALUE and len(_phrase(value)) > MAX_VALUE_WORDS:
        return f"{kind}: 'value' holds {len(_phrase(value)):,} words; at most {MAX_VALUE_WORDS}"
    for name in ("n", "from_turn"):
        number = item.get(name)
        needed = name == "n" and kind in TAKES_N
        if (number is not None or needed) and (isinstance(number, bool) or not isinstance(number, int) or number < 0):
            return f"{kind}: {name!r} must be a non-negative integer"
    return None


def check(reply: str, constraint: Mapping[str, Any]) -> Result:
    """Whether ``reply`` meets one constraint, and why (a reply of white space only meets none)."""
    kind = str(constraint.get("type"))
    if kind not in CHECKERS:
        raise ValueError(f"unknown constraint type {kind!r}; expected one of {', '.join(CHECKERS)}")
    if not reply.strip():
        return False, f"{kind}: the reply is empty"
    ok, why = CHECKERS[kind](reply, constraint)
    return ok, f"{kind}: {why}"


def check_all(reply: str, constraints: Sequence[Mapping[str, Any]]) -> Result:
    """All constraints met? The reason lists each failure (or says how many were met)."""
    failed = [why for ok, why in (check(reply, c) for c in constraints) if not ok]
    if failed:
        return False, "; ".join(failed)
    return True, f"all {len(constraints)} constraint(s) met"


def active(constraints: Sequence[Mapping[str, Any]], turn: int) -> list[Mapping[str, Any]]:
    """The constraints in force in the reply to user turn ``turn`` (1-based): those set in that turn or before."""
    return [c for c in constraints if int(c.get("from_turn") or 1) <= turn]


def check_turns(replies: Sequence[str], constraints: Sequence[Mapping[str, Any]], first_turn: int = 1) -> Result:
    """Every reply meets every constraint set up to its turn; ``replies[0]`` answers user turn ``first_turn``."""
    for k, reply in enumerate(replies, start=first_turn):
        ok, why = check_all(reply, active(constraints, k))
        if not ok:
            return False, f"turn {k}: {why}"
    return True, f"all constraints held over {len(replies)} turn(s)"
