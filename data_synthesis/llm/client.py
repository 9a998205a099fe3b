"""A careful chat client over the ``openai`` package: cache, retries, bounded concurrency.

Why not the ``openai`` client's own retries: we need to count them, honour our own
backoff and turn the last failure into a one-line :class:`ProbeError` naming the
endpoint and the status. So the underlying client runs with ``max_retries=0`` and this
layer decides:

* retried (exponential backoff + jitter, at least ``Retry-After``): HTTP 408/409/429/5xx,
  timeouts, connection errors, and malformed replies (a body that is not a chat completion);
* fatal at once: other 4xx (bad model name, bad key, bad request), naming the status.

Every answered request is written to the cache (:mod:`data_synthesis.llm.cache`) the
moment it arrives, keyed by (endpoint, model, messages, params), so a rerun or resumed
run makes no request it has already paid for. Each attempt is appended to
``CACHE_DIR/requests.log`` (JSON lines: key prefix, attempt, outcome, seconds); the
API key is never part of anything written, and is masked in any error text.

Example:
    >>> cfg = ClientConfig.from_env(base_url="http://127.0.0.1:8000/v1", model="/models/tiny")  # doctest: +SKIP
    >>> client = LLMClient(cfg)                                                                  # doctest: +SKIP
    >>> client.chat_many([[{"role": "user", "content": "Say hi"}]])[0].content                    # doctest: +SKIP
    'Hi!'
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ProbeError
from data_synthesis.llm.backoff import BackoffPolicy
from data_synthesis.llm.cache import ReplyCache, normalise_base_url, request_key
from data_synthesis.llm.config import ClientConfig

__all__ = ["ChatReply", "ClientConfig", "ClientStats", "LLMClient", "Messages"]

log = logging.getLogger("data_synthesis.llm")
Messages = list[dict[str, str]]
RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True)
class ChatReply:
    content: str
    finish_reason: str | None = None
    cached: bool = False


@dataclass
class ClientStats:
    """Counters over the client's life: HTTP attempts made, cache hits, retries, final failures."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "cache_hits": self.cache_hits, "retries": self.retries, "failures": self.failures}


class _Retryable(Exception):
    def __init__(self, what: str, retry_after: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after


class LLMClient:
    """Thread-safe chat client; one instance per endpoint/model."""

    def __init__(self, config: ClientConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        import openai

        self.config = config
        self.stats = ClientStats()
        self.cache = ReplyCache(config.cache_dir)
        self.backoff = BackoffPolicy(base=config.backoff_base, max_delay=config.backoff_max)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._key = config.api_key()
        self._openai = openai.OpenAI(base_url=config.base_url, api_key=self._key, max_retries=0, timeout=config.timeout)
        self._log_path: Path | None = config.cache_dir / "requests.log" if config.cache_dir is not None else None
        self._token_param = "max_tokens"

    # ------------------------------------------------------------------ public
    def params(self, **overrides: Any) -> dict[str, Any]:
        """Sampling parameters sent with (and hashed into the cache key of) every request."""
        params: dict[str, Any] = {"temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        params.update({k: v for k, v in overrides.items() if v is not None})
        return params

    def chat(self, messages: Messages, **params: Any) -> ChatReply:
        """One reply: from the cache if answered before, else from the endpoint (with retries)."""
        full = self.params(**params)
        key = request_key(self.config.base_url, self.config.model, messages, full)
        cached = self.cache.get(key)
        if cached is not None:
            self._bump("cache_hits")
            return ChatReply(str(cached.get("content", "")), cached.get("finish_reason"), cached=True)
        reply = self._ask_with_retries(key, messages, full)
        request = {"base_url": normalise_base_url(self.config.base_url), "model": self.config.model, "messages": messages, "params": full}
        self.cache.put(key, request, {"content": reply.content, "finish_reason": reply.finish_reason})
        return reply

    def chat_many(self, batch: Sequence[Messages], **params: Any) -> list[ChatReply]:
        """Replies in input order, at most ``concurrency`` requests in flight.

        Identical requests in one batch are sent once. The first fatal error cancels what
        has not started, waits for what is running (their replies are cached) and is raised.
        """
        if not batch:
            return []
        full = self.params(**params)
        keys = [request_key(self.config.base_url, self.config.model, messages, full) for messages in batch]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}  # key -> first position
        pool = ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(first)), thread_name_prefix="llm")
        try:
            futures = {key: pool.submit(self.chat, batch[i], **params) for key, i in sorted(first.items(), key=lambda kv: kv[1])}
            done, _ = wait(futures.values(), return_when=FIRST_EXCEPTION)
            failed = [f for f in futures.values() if f in done and f.exception() is not None]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            return [futures[key].result() for key in keys]
        finally:
            # On an error or Ctrl-C: drop the queued requests, let the running ones finish (and be cached).
            pool.shutdown(wait=True, cancel_futures=True)

    # ----------------------------------------------------------------- private
    def _ask_with_retries(self, key: str, messages: Messages, params: dict[str, Any]) -> ChatReply:
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            started = time.monotonic()
            try:
                reply = self._ask_once(messages, params)
            except _Retryable as exc:
                self._record(key, attempt, exc.what, started)
                if attempt + 1 >= attempts:
                    self._bump("failures")
                    raise self._final(f"{exc.what} after {attempts} attempt(s)") from None
                self._bump("retries")
                delay = self.backoff.delay(attempt, exc.retry_after)
                log.info("retrying %s in %.2fs (%s)", key[:12], delay, self._mask(exc.what))
                self._sleep(delay)
                continue
            except ProbeError as exc:
                self._record(key, attempt, str(exc), started)
                self._bump("failures")
                raise
            self._record(key, attempt, "ok", started)
            return reply
        raise AssertionError("unreachable")

    def _ask_once(self, messages: Messages, params: dict[str, Any]) -> ChatReply:
        import openai

        self._bump("requests")
        sent = self._wire_params(params)
        try:
            response = self._openai.chat.completions.create(model=self.config.model, messages=messages, **sent)  # type: ignore[arg-type]
        except openai.BadRequestError as exc:
            if "max_tokens" in sent and "max_completion_tokens" in str(exc.message):
                # Newer OpenAI models reject max_tokens; switch once for this client and ask again.
                log.info("endpoint wants max_completion_tokens instead of max_tokens; switching")
                self._token_param = "max_completion_tokens"
                return self._ask_once(messages, params)
            raise self._final(f"HTTP {exc.status_code}{_server_message(exc)}") from None
        except openai.APITimeoutError:
            raise _Retryable(f"timed out after {self.config.timeout:g}s") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection failed ({_cause(exc)}; is a server listening there?)") from None
        except openai.APIStatusError as exc:
            what = f"HTTP {exc.status_code}{_server_message(exc)}"
            if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
                raise _Retryable(what, exc.response.headers.get("retry-after")) from None
            raise self._final(what) from None
        except openai.APIError as exc:  # e.g. a JSON body that is not a chat completion
            raise _Retryable(f"malformed reply ({_one_line(str(exc), 120)})") from None
        return _parse_completion(response)

    def _wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Parameters as this endpoint wants them (the cache key always uses ``max_tokens``)."""
        if self._token_param == "max_tokens" or "max_tokens" not in params:
            return params
        renamed = dict(params)
        renamed[self._token_param] = renamed.pop("max_tokens")
        return renamed

    def _final(self, what: str) -> ProbeError:
        return ProbeError(self._mask(f"LLM endpoint {self.config.base_url} (model {self.config.model!r}): {what}"))

    def _mask(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key and self._key != "EMPTY" else text

    def _bump(self, counter: str) -> None:
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)

    def _record(self, key: str, attempt: int, outcome: str, started: float) -> None:
        if self._log_path is None:
            return
        line = json.dumps({"time": round(time.time(), 3), "key": key[:16], "attempt": attempt, "outcome": self._mask(outcome),
                           "seconds": round(time.monotonic() - started, 3)})
        with self._lock, self._log_path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def _parse_completion(response: Any) -> ChatReply:
    """Content of the first choice; anything that is not a chat completion is retryable garbage."""
    choices = getattr(response, "choices", None)
    if isinstance(response, str) or not choices:
        shown = _one_line(response, 80) if isinstance(response, str) else "JSON without 'choices'"
        raise _Retryable(f"malformed reply (not a chat completion: {shown!r})")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if message is None or not (content is None or isinstance(content, str)):
        raise _Retryable("malformed reply (first choice has no message text)")
    return ChatReply(content or "", getattr(choices[0], "finish_reason", None))


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        message = message or body.get("detail")
    text = str(message) if message else getattr(exc.response, "reason_phrase", "")
    return f" {_one_line(text, 200)}" if text else ""


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return _one_line(type(inner).__name__ if inner is not None else str(exc), 80)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
