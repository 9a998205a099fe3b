"""On-disk cache of answered LLM requests: one atomically written JSON file per reply.

Why one file per entry: a reply is written the moment it arrives (temp file + rename,
:func:`core.atomic.write_atomic`), so an interrupted run loses nothing already answered,
concurrent workers never contend for a lock, and a half-written entry cannot exist.
Entries skip ``fsync``: one per reply would dominate a cached rerun, and an entry lost to
a power cut is simply asked again. The key is a SHA-256 of the request
that determines the reply: endpoint, model, messages and sampling parameters. The API
key is deliberately NOT part of the key and never stored: rotating keys must not
invalidate a cache, and a cache must be safe to share.

Layout: ``CACHE_DIR/ab/abcdef....json`` holding ``{"key", "request", "reply"}``.

Example:
    >>> import tempfile
    >>> cache = ReplyCache(tempfile.mkdtemp())
    >>> key = request_key("http://127.0.0.1:8000/v1", "m", [{"role": "user", "content": "hi"}], {"temperature": 0})
    >>> cache.get(key) is None
    True
    >>> cache.put(key, {"model": "m"}, {"content": "hello"})
    >>> cache.get(key)["content"]
    'hello'
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from core.atomic import write_atomic
from core.errors import ProbeError


def normalise_base_url(base_url: str) -> str:
    """``http://HOST:PORT/v1/`` and ``http://HOST:PORT/v1`` are the same endpoint."""
    return base_url.strip().rstrip("/")


def request_key(base_url: str, model: str, messages: list[dict[str, str]], params: dict[str, Any]) -> str:
    """Hex SHA-256 of everything that determines a reply (never the API key)."""
    blob = json.dumps(
        {"base_url": normalise_base_url(base_url), "model": model, "messages": messages, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ReplyCache:
    """A directory of cached replies; ``None`` as directory disables caching."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ProbeError(
                    f"reply cache {self.directory}: cannot create it ({exc.strerror or exc}); pass another --cache-dir"
                ) from None

    def path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply, or None when absent or unreadable (an unreadable entry is simply re-asked)."""
        if self.directory is None:
            return None
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        reply = entry.get("reply") if isinstance(entry, dict) else None
        return reply if isinstance(reply, dict) and entry.get("key") == key else None

    def put(self, key: str, request: dict[str, Any], reply: dict[str, Any]) -> None:
        """Write one entry atomically (temp file in the same folder, then rename)."""
        if self.directory is None:
            return
        entry = json.dumps({"key": key, "request": request, "reply": reply}, ensure_ascii=False)
        try:
            write_atomic(self.path(key), entry, durable=False)
        except OSError as exc:
            raise ProbeError(
                f"reply cache {self.directory}: cannot write an entry ({exc.strerror or exc}); "
                "the entries written before are kept; free space or pass another --cache-dir"
            ) from None

    def __len__(self) -> int:
        if self.directory is None:
            return 0
        return sum(1 for _ in self.directory.glob("??/*.json"))
