"""On-disk cache of answered LLM requests: one atomically written JSON file per reply.

Why one file per entry: a reply is written the moment it arrives (temp file + rename),
so an interrupted run loses nothing already answered, concurrent workers never contend
for a lock, and a half-written entry cannot exist. The key is a SHA-256 of the request
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
import tempfile
from pathlib import Path
from typing import Any


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
            self.directory.mkdir(parents=True, exist_ok=True)

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
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"key": key, "request": request, "reply": reply}, handle, ensure_ascii=False)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        if self.directory is None:
            return 0
        return sum(1 for _ in self.directory.glob("??/*.json"))
