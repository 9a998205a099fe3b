"""A careful client for OpenAI-compatible chat endpoints: cache, retries, bounded concurrency, deadlines.

Requests go through :mod:`judging.client.transport`: the ``openai`` client (request shaping, typed
replies and errors) over ``httpx2``, held to a total deadline and a byte cap. This layer adds
what the ``openai`` client does not decide for us: counted retries with our own backoff, and
the last failure turned into a one-line :class:`ProbeError` naming the endpoint and the
status. It decides:

* retried (exponential backoff + jitter, at least ``Retry-After``): HTTP 408/409/429/5xx,
  timeouts (no complete reply within ``timeout`` seconds), refused or broken connections
  (reset, or closed before the body was complete), and malformed replies (a body that is
  not JSON, JSON nested too deeply to parse, a body over the size cap or compressed, JSON
  that is not a chat completion, a completion with no choices);
* fatal at once: other 4xx (bad model name, bad key, bad request), naming the status.

:func:`_classify` is the one place that maps an exception of the transport or the
protocol to one of those two outcomes; whatever the fault, the caller sees either a
reply or one :class:`ProbeError` line, after at most ``max_retries + 1`` attempts of at
most ``timeout`` seconds each (connect, headers and body together) plus the backoff
between them.

Why the requests run on daemon threads rather than a ``ThreadPoolExecutor``: the
interpreter joins executor threads at exit, so a Ctrl-C during a request that the
server holds would wait for that request to time out (57 s with the old pool). Here a
Ctrl-C stops the batch at once: nothing queued is sent, nothing is retried, the request
in flight is abandoned (its reply, if it comes while the process still lives, is cached),
and ``KeyboardInterrupt`` reaches the caller, which knows what is on disk.

Every answered request is written to the cache (:mod:`judging.client.cache`) the
moment it arrives, keyed by (endpoint, model, messages, params), so a rerun or resumed
run makes no request it has already paid for. Each attempt is appended to
``CACHE_DIR/requests.log`` (JSON lines: key prefix, attempt, outcome, seconds); the
API key is never part of anything written. Every string that came from the server (error
messages, reasons, the start of a malformed body, the reply itself) is scrubbed by
:class:`judging.client.scrub.Scrubber` of the key, any 8 characters of it, URL credentials and
terminal control sequences before it is cut to length, printed, logged or cached.

Example:
    >>> client = LLMClient(ClientConfig(base_url="http://127.0.0.1:8000/v1", model="tiny", cache_dir=None))
    >>> client.params(max_tokens=64)   # sent with, and hashed into the cache key of, every request
    {'temperature': 0.0, 'max_tokens': 64}
    >>> client.kept()
    'the reply cache is off (--no-cache), so nothing was kept; rerun the same command to start again'
    >>> cfg = ClientConfig.from_env(base_url="http://127.0.0.1:8000/v1", model="/models/tiny")  # doctest: +SKIP
    >>> client = LLMClient(cfg)                                                                  # doctest: +SKIP
    >>> client.chat_many([[{"role": "user", "content": "Say hi"}]])[0].content                    # doctest: +SKIP
    'Hi!'
"""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage

from core.errors import Interrupted, ProbeError
from judging.client.backoff import BackoffPolicy
from judging.client.cache import ReplyCache, normalise_base_url, request_key
from judging.client.config import ClientConfig
from judging.client.scrub import Scrubber
from judging.client.transport import MAX_REDIRECTS, MAX_REPLY_BYTES, BadReply, Endpoint, NotJSON, Redirected, complete

__all__ = ["ChatReply", "ClientConfig", "ClientStats", "LLMClient", "Messages"]

log = logging.getLogger("data_synthesis.llm")
Messages = list[dict[str, str]]
T = TypeVar("T")
RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True)
class ChatReply:
    content: str
    finish_reason: str | None = None
    cached: bool = False


@dataclass
class ClientStats:
    """Counters over the client's life: HTTP attempts made, replies received, cache hits, retries, final failures."""

    requests: int = 0
    answered: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0


class _Retryable(Exception):
    def __init__(self, what: str, retry_after: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after


class _Stopped(Exception):
    """The batch was stopped (a fatal error elsewhere, or Ctrl-C) before this request was answered."""


class LLMClient:
    """Thread-safe chat client; one instance per endpoint/model."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.stats = ClientStats()
        self.cache = ReplyCache(config.cache_dir)
        self.backoff = BackoffPolicy(base=config.backoff_base, max_delay=config.backoff_max)
        self.max_reply_bytes = MAX_REPLY_BYTES
        self._lock = threading.Lock()
        self._scrubber = Scrubber(config.secrets())
        self._endpoint = Endpoint(config.base_url, config.authorization())
        self._log_path: Path | None = config.cache_dir / "requests.log" if config.cache_dir is not None else None
        self._token_param = "max_tokens"

    # ------------------------------------------------------------------ public
    def kept(self, what: str = "replies") -> str:
        """What a stopped run leaves in the reply cache, and how to go on."""
        if self.cache.directory is None:
            return "the reply cache is off (--no-cache), so nothing was kept; rerun the same command to start again"
        return (
            f"{self.stats.answered + self.stats.cache_hits} {what} are kept in the reply cache {self.cache.directory}; "
            "rerun the same command to resume (cached replies are not asked again)"
        )

    @contextmanager
    def stops_explained(self, stopped: str, unwritten: str, what: str = "replies") -> Iterator[None]:
        """Ctrl-C becomes :class:`~core.errors.Interrupted` (``stopped``); an endpoint failure gains ``unwritten``;
        both end with what the reply cache kept. Subclasses of ProbeError (a data error) pass unchanged."""
        try:
            yield
        except KeyboardInterrupt:
            raise Interrupted(f"{stopped}; {self.kept(what)}") from None
        except ProbeError as exc:
            if type(exc) is not ProbeError:
                raise
            raise ProbeError(f"{exc}; {unwritten}; {self.kept(what)}") from None

    def params(self, **overrides: Any) -> dict[str, Any]:
        """Sampling parameters sent with (and hashed into the cache key of) every request."""
        params: dict[str, Any] = {"temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        params.update({k: v for k, v in overrides.items() if v is not None})
        return params

    def chat(self, messages: Messages, **params: Any) -> ChatReply:
        """One reply: from the cache if answered before, else from the endpoint (with retries)."""
        return self._chat(messages, self.params(**params), threading.Event())

    def chat_many(self, batch: Sequence[Messages], **params: Any) -> list[ChatReply]:
        """Replies in input order, at most ``concurrency`` requests in flight.

        Identical requests in one batch are sent once. The first fatal error stops the batch:
        nothing more is sent or retried, what is running is waited for (its reply is cached)
        and the error is raised. A Ctrl-C stops it too, without waiting.
        """
        if not batch:
            return []
        full = self.params(**params)
        keys = [request_key(self.config.base_url, self.config.model, messages, full) for messages in batch]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}  # key -> first position
        unique = sorted(first.items(), key=lambda kv: kv[1])
        stop = threading.Event()
        jobs = [lambda i=i: self._chat(batch[i], full, stop) for _, i in unique]
        replies = dict(
            zip(
                (key for key, _ in unique),
                _run_bounded(jobs, min(self.config.concurrency, len(jobs)), stop),
                strict=True,
            )
        )
        return [replies[key] for key in keys]

    # ----------------------------------------------------------------- private
    def _chat(self, messages: Messages, full: dict[str, Any], stop: threading.Event) -> ChatReply:
        key = request_key(self.config.base_url, self.config.model, messages, full)
        cached = self.cache.get(key)
        if cached is not None:
            self._bump("cache_hits")
            return ChatReply(str(cached.get("content", "")), cached.get("finish_reason"), cached=True)
        reply = self._ask_with_retries(key, messages, full, stop)
        request = {
            "base_url": normalise_base_url(self.config.base_url),
            "model": self.config.model,
            "messages": messages,
            "params": full,
        }
        self.cache.put(key, request, {"content": reply.content, "finish_reason": reply.finish_reason})
        self._bump("answered")
        return reply

    def _ask_with_retries(
        self, key: str, messages: Messages, params: dict[str, Any], stop: threading.Event
    ) -> ChatReply:
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            if stop.is_set():
                raise _Stopped(key)
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
                stop.wait(delay)
                continue
            except ProbeError as exc:
                self._record(key, attempt, str(exc), started)
                self._bump("failures")
                raise
            self._record(key, attempt, "ok", started)
            return reply
        raise AssertionError("unreachable")

    def _ask_once(self, messages: Messages, params: dict[str, Any]) -> ChatReply:
        self._bump("requests")
        sent = self._wire_params(params)
        try:
            completion = complete(
                self._endpoint,
                {"model": self.config.model, "messages": messages, **sent},
                self.config.timeout,
                self.max_reply_bytes,
            )
        except Redirected as exc:
            raise self._final(_redirect_advice(self._clip(exc.url, 300), exc.loop)) from None
        except openai.APIStatusError as exc:
            return self._refused(exc, messages, params, sent)
        except (OSError, openai.APIConnectionError, BadReply, NotJSON) as exc:
            raise self._classify(exc) from None
        return self._completion(completion)

    def _refused(
        self, exc: openai.APIStatusError, messages: Messages, params: dict[str, Any], sent: dict[str, Any]
    ) -> ChatReply:
        """A status that is not 2xx: ask again with ``max_completion_tokens`` if that is the complaint, else a
        retryable (408, 409, 429, 5xx) or a final error naming the status and the server's message."""
        message = self._server_message(exc)
        if exc.status_code == 400 and "max_tokens" in sent and "max_completion_tokens" in message:
            # Newer OpenAI models reject max_tokens; switch once for this client and ask again.
            log.info("endpoint wants max_completion_tokens instead of max_tokens; switching")
            self._token_param = "max_completion_tokens"
            return self._ask_once(messages, params)
        what = f"HTTP {exc.status_code}{message}"
        if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
            raise _Retryable(what, exc.response.headers.get("retry-after"))
        raise self._final(what)

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
        return self._scrubber.scrub(text)

    def _clip(self, text: str, limit: int) -> str:
        """Server text on one line of at most ``limit`` characters: scrubbed first, then cut."""
        return _one_line(self._scrubber.scrub(text), limit)

    def _classify(self, exc: BaseException) -> _Retryable:
        """The one mapping of a failed exchange: what went wrong, in words (every such failure is retried)."""
        cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ is not None else exc
        if isinstance(cause, (TimeoutError, openai.APITimeoutError, httpx2.TimeoutException)):
            return _Retryable(f"timed out after {self.config.timeout:g}s")
        if isinstance(cause, BadReply):
            return _Retryable(f"malformed reply ({self._clip(str(cause), 200)})")
        if isinstance(cause, NotJSON):
            begins = self._clip(cause.text, 60)
            return _Retryable(
                f"malformed reply (the body is not valid JSON: {self._clip(str(cause), 80)}; it begins {begins!r})"
            )
        said = f"{type(cause).__name__}: {self._clip(_first_words(cause), 80)}".removesuffix(": ")
        if _refused(cause):
            return _Retryable("connection failed: refused (is a server listening there?)")
        if isinstance(cause, httpx2.ConnectError | httpx2.ProxyError | OSError):
            return _Retryable(
                f"connection failed: could not connect ({self._clip(str(cause), 80)}; is a server listening there?)"
            )
        if isinstance(cause, httpx2.ReadError | httpx2.WriteError) or _broke_off(cause):
            return _Retryable(f"connection failed: the connection broke before the reply was complete ({said})")
        return _Retryable(f"malformed reply ({said})")

    def _completion(self, completion: ChatCompletion) -> ChatReply:
        """Content of the first choice; anything that is not a chat completion is retryable garbage.

        ``openai`` builds its typed reply without validating it, so each level is checked for its type."""
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Retryable("malformed reply (not a chat completion: JSON without 'choices')")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if not isinstance(message, ChatCompletionMessage) or not (content is None or isinstance(content, str)):
            raise _Retryable("malformed reply (first choice has no message text)")
        finish = getattr(choices[0], "finish_reason", None)
        return ChatReply(
            self._scrubber.scrub(content or ""), self._clip(finish, 40) if isinstance(finish, str) else None
        )

    def _server_message(self, exc: openai.APIStatusError) -> str:
        """The error message of a failed reply (OpenAI's ``error.message``, FastAPI's ``detail``),
        else its reason phrase."""
        body, message = exc.body, None
        if isinstance(body, dict):
            inner = body.get("error", body)
            message = inner.get("message") if isinstance(inner, dict) else inner
            message = message or body.get("detail")
        text = _as_text(message) or exc.response.reason_phrase
        return f" {self._clip(text, 200)}" if text else ""

    def _bump(self, counter: str) -> None:
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)

    def _record(self, key: str, attempt: int, outcome: str, started: float) -> None:
        if self._log_path is None:
            return
        line = json.dumps(
            {
                "time": round(time.time(), 3),
                "key": key[:16],
                "attempt": attempt,
                "outcome": self._mask(outcome),
                "seconds": round(time.monotonic() - started, 3),
            }
        )
        try:
            with self._lock, self._log_path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError:
            pass  # a diagnostic log must not stop a run; the cache write that follows reports a full disk


def _run_bounded(jobs: Sequence[Callable[[], T]], workers: int, stop: threading.Event) -> list[T]:
    """Results of ``jobs`` in order, at most ``workers`` at a time, on daemon threads.

    The first exception sets ``stop`` (no further job starts), waits for the running ones
    and is raised. A ``KeyboardInterrupt`` in the waiting thread sets ``stop`` and is
    raised at once: the running jobs are abandoned, not joined.
    """
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    order = iter(range(len(jobs)))
    lock = threading.Lock()
    finished = threading.Semaphore(0)

    def work() -> None:
        try:
            while not stop.is_set():
                with lock:
                    index = next(order, None)
                if index is None:
                    return
                results[index] = jobs[index]()
        except BaseException as exc:  # handed to the waiting thread
            with lock:
                errors.append(exc)
            stop.set()
        finally:
            finished.release()

    threads = [threading.Thread(target=work, name=f"llm-{n}", daemon=True) for n in range(workers)]
    try:
        for thread in threads:
            thread.start()
        for _ in threads:
            finished.acquire()
    except BaseException:
        stop.set()
        raise
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    return results


def _redirect_advice(url: str, loop: bool) -> str:
    """What a redirect this client does not follow (to ``url``, scrubbed) means for the user: where it led, and the
    ``--base-url`` to use."""
    if loop:
        return f"redirected more than {MAX_REDIRECTS} times, last to {url}; point --base-url at the final URL"
    base = url.split("?", 1)[0].removesuffix("/chat/completions")
    return (
        f"redirected to another origin, {url}; requests are not sent on to another origin (they carry the key): "
        f"point --base-url at it (--base-url {base})"
    )


def _refused(exc: BaseException) -> bool:
    """Whether ``exc``, or what it wraps, is a refused connection."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_words(exc: BaseException) -> str:
    """The message of ``exc``, else of what it wraps (httpx2's ReadError says nothing; its OSError does)."""
    seen: BaseException | None = exc
    while seen is not None and not str(seen):
        seen = seen.__cause__ or seen.__context__
    return str(seen) if seen is not None else ""


def _broke_off(exc: BaseException) -> bool:
    """Whether ``exc`` says the server closed the connection before the reply was complete (h11's words)."""
    text = str(exc).lower()
    return isinstance(exc, httpx2.RemoteProtocolError) and ("closed" in text or "disconnected" in text)


def _as_text(value: Any) -> str:
    """A server's message as text: a string as it is, anything else as JSON ('' if it cannot be)."""
    if value is None or isinstance(value, str):
        return value or ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError, TypeError):
        return ""


def _one_line(text: str, limit: int) -> str:
    """Only ever given scrubbed text (see :meth:`LLMClient._clip`):
    cutting first would let a secret straddle the cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
