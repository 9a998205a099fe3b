"""The policy between the LLM client and an endpoint: the ``openai`` client over ``httpx2``, held to our limits.

The ``openai`` package builds and sends the request (``chat.completions.create``), parses the
reply into its typed :class:`~openai.types.chat.ChatCompletion` and raises its typed errors
(:class:`openai.APIStatusError` with the status, headers and body; :class:`openai.APIConnectionError`
wrapping the ``httpx2`` error). It is the ``openai`` client as published: ``httpx2`` is the HTTP
library it is built on. This module adds only what those two do not give:

* **one total deadline**: the client's ``timeout`` bounds each read, so a reply dripping a byte
  a second, or a chunked body that never ends, held a request for ever. Here the transport under
  the client gives connecting, sending, the status line and headers, and every read of the body
  only what is left of one deadline of ``timeout`` seconds (:class:`TimeoutError` when it has
  passed; the client's own per-read timeout stays as a second guard). Building the request and
  parsing the reply are not part of it: a first call's one-time set-up inside ``openai`` (0.3 s)
  must not eat a short ``--timeout``;
* **a body cap**, :data:`MAX_REPLY_BYTES`: a Content-Length over it is refused before reading,
  and a chunked or read-to-close body as soon as it passes it (:class:`BadReply`), so no more
  than the cap is ever held; ``httpx2`` alone reads a body of any size into memory;
* **no compression**: ``Accept-Encoding: identity`` is asked for, and a compressed body sent
  anyway is refused rather than inflated;
* **JSON nested too deeply to parse** becomes a :class:`BadReply`, not a ``RecursionError``;
* **redirects**: one to the same origin (scheme, host and port) is followed with the same POST,
  at most :data:`MAX_REDIRECTS` times, within the same deadline; one to another origin is not
  (the request carries the key) and raises :class:`Redirected`, naming where;
* **proxies** from ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` are honoured, except for loopback
  hosts, which are always reached directly; a proxy URL's ``user:password@`` is sent as
  ``Proxy-Authorization`` (by ``httpx2``). ``~/.netrc`` is not read: the ``Authorization`` sent
  is the one the caller gives;
* **quiet libraries**: ``httpx2`` logs each status line, the server's reason phrase included,
  at INFO; the ``openai``, ``httpx2`` and ``httpcore2`` loggers are set to WARNING, so server
  text reaches a log only through the caller, scrubbed.

Each call builds its own async client on its own event loop (0.4 ms with the shared TLS context),
so calls from any number of threads, or from a thread whose loop already runs (a notebook),
need no shared state; a Ctrl-C in the calling thread cancels the exchange at once.

Example:
    >>> endpoint = Endpoint("http://127.0.0.1:8000/v1", "Bearer EMPTY")
    >>> endpoint.api_key(), endpoint.headers()
    ('EMPTY', {'Accept-Encoding': 'identity'})
    >>> parse_json(b'{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> parse_json(b"[" * 100_000 + b"]" * 100_000)
    Traceback (most recent call last):
    ...
    judging.client.transport.BadReply: the body is JSON nested too deeply to parse
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import inspect
import json
import logging
import ssl
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Coroutine
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx2
import openai
from openai.types.chat import ChatCompletion

MAX_REPLY_BYTES = 16 * 2**20
"""The largest reply body read (16 MiB). A chat completion is kilobytes; 1,000,000 tokens of English
text are about 4 MB. A larger body is refused without ever holding more than this."""

MAX_REDIRECTS = 5
"""Same-origin redirects followed for one request; one more is refused as a loop."""
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
T = TypeVar("T")

for _name in ("openai", "httpx2", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)
# The interpreter's last garbage collection at exit walks every object openai and pydantic made: 0.4 to 2 s after
# a Ctrl-C, where the promise is 0.5 s. Frozen objects are skipped by it (they are freed by reference counting as
# the modules are torn down, as before; only cycles, which the interpreter never promises to finalise at exit,
# stay). A Ctrl-C to `probe judge` mid-read then exits in 0.07 s instead of 1.0 s (tests/test_hostile_endpoints.py).
atexit.register(gc.freeze)


class BadReply(Exception):
    """The endpoint answered, but with bytes that cannot be a reply (too large, compressed, too deeply nested)."""


class NotJSON(ValueError):
    """The body is not JSON; ``text`` is how it begins (server text: scrub it before showing it)."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(reason)
        self.text = text[:4096]


class Redirected(Exception):
    """The endpoint redirected where this client does not follow: to ``url`` on another origin, or in a loop."""

    def __init__(self, url: str, loop: bool = False) -> None:
        super().__init__(url)
        self.url = url
        self.loop = loop


@dataclass(frozen=True)
class Endpoint:
    """Where requests go and the ``Authorization`` header they carry (``Bearer KEY`` or ``Basic ...``)."""

    base_url: str
    authorization: str

    def api_key(self) -> str:
        """The key ``openai`` sends as ``Bearer``; a placeholder when the header is Basic (sent by :meth:`headers`)."""
        scheme, _, credential = self.authorization.partition(" ")
        return credential if scheme == "Bearer" else "EMPTY"

    def headers(self) -> dict[str, str]:
        basic = {} if self.authorization.startswith("Bearer ") else {"Authorization": self.authorization}
        return {"Accept-Encoding": "identity", **basic}


def complete(
    endpoint: Endpoint, request: dict[str, Any], timeout: float, max_bytes: int = MAX_REPLY_BYTES
) -> ChatCompletion:
    """``chat.completions.create(**request)`` at ``endpoint``; the whole exchange, redirects included, ends within
    ``timeout`` seconds.

    Raises :class:`TimeoutError` at the deadline, :class:`BadReply` for a body over ``max_bytes``, compressed or
    nested too deeply, :class:`Redirected` for a redirect it does not follow, :class:`NotJSON` for a body that
    is not JSON, and the ``openai`` errors: :class:`openai.APIStatusError` for a status that is not 2xx,
    :class:`openai.APIConnectionError` (its ``__cause__`` the ``httpx2`` error) for a failed or broken connection.
    """
    return _run(_complete(endpoint, request, timeout, max_bytes))


async def _complete(endpoint: Endpoint, request: dict[str, Any], timeout: float, max_bytes: int) -> ChatCompletion:
    async with _client(endpoint, timeout, max_bytes) as client:
        try:
            reply: ChatCompletion | str = await client.chat.completions.create(**request)
        except RecursionError:
            raise BadReply("the body is JSON nested too deeply to parse") from None
        except json.JSONDecodeError as exc:
            raise NotJSON(str(exc), exc.doc) from None
        except UnicodeDecodeError as exc:
            raise NotJSON(str(exc), exc.object.decode("utf-8", "replace")) from None
    if isinstance(reply, str):  # what openai returns for a body that is neither JSON nor labelled JSON
        parse_json(reply)
        raise NotJSON("not a JSON object", reply)
    return reply


def parse_json(data: bytes | str) -> Any:
    """``data`` as JSON; :class:`NotJSON` if it is not JSON, :class:`BadReply` if nested too deeply to parse."""
    try:
        return json.loads(data)
    except RecursionError:
        raise BadReply("the body is JSON nested too deeply to parse") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        text = data if isinstance(data, str) else data[:4096].decode("utf-8", "replace")
        raise NotJSON(str(exc), text) from None


def _client(endpoint: Endpoint, timeout: float, max_bytes: int) -> openai.AsyncOpenAI:
    url = urlsplit(endpoint.base_url)
    proxy = _proxy_for(url.scheme, url.hostname or "")
    try:
        inner = httpx2.AsyncHTTPTransport(verify=_tls_context(), proxy=proxy, trust_env=False)
    except (ImportError, ValueError) as exc:  # a SOCKS proxy without socksio, a proxy URL httpx2 cannot use
        raise OSError(f"the proxy from the environment cannot be used ({exc})") from None
    http = httpx2.AsyncClient(
        transport=_Policy(inner, max_bytes, timeout), trust_env=False, follow_redirects=False, timeout=timeout
    )
    return openai.AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key(),
        default_headers=endpoint.headers(),
        http_client=http,
        max_retries=0,  # retries are the caller's: counted, logged and backed off there
        timeout=timeout,
    )


class _Policy(httpx2.AsyncBaseTransport):
    """Each exchange within one deadline of ``timeout`` seconds; redirects followed only to the same origin;
    compressed bodies refused; every body capped at ``max_bytes``."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int, timeout: float) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._timeout = timeout

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = _Deadline(self._timeout)
        for _ in range(MAX_REDIRECTS + 1):
            response = await deadline.bound(self._inner.handle_async_request(request))
            location = response.headers.get("location") if response.status_code in REDIRECTS else None
            if location is None:
                return await self._capped(response, deadline)
            await response.aclose()
            target = urljoin(str(request.url), location)
            if _origin(target) != _origin(str(request.url)):
                raise Redirected(target)
            request = httpx2.Request(
                request.method, target, headers=request.headers, content=request.content, extensions=request.extensions
            )
        raise Redirected(str(request.url), loop=True)

    async def _capped(self, response: httpx2.Response, deadline: _Deadline) -> httpx2.Response:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        promised = response.headers.get("content-length")
        refusal = None
        if encoding not in ("", "identity"):
            refusal = f"the body is compressed ({encoding}) though only identity was accepted"
        elif promised is not None and promised.isdigit() and int(promised) > self._max_bytes:
            refusal = f"the body is {promised} bytes, over the {_size(self._max_bytes)} cap"
        if refusal is not None:
            await response.aclose()
            raise BadReply(refusal)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._max_bytes, deadline),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, max_bytes: int, deadline: _Deadline) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen, chunks = 0, self._inner.__aiter__()
        while True:
            try:
                chunk = await self._deadline.bound(chunks.__anext__())
            except StopAsyncIteration:
                return
            seen += len(chunk)
            if seen > self._max_bytes:
                raise BadReply(f"the body is over the {_size(self._max_bytes)} cap")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Deadline:
    """A point ``seconds`` from now; :meth:`bound` gives an awaitable only the time left before it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    async def bound(self, awaitable: Awaitable[T]) -> T:
        left = self._end - time.monotonic()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            return await asyncio.wait_for(awaitable, left)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never awaited when no time was left
            raise TimeoutError(f"no complete reply within {self.seconds:g}s") from None


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` to its end on a new event loop: in this thread, or on a helper thread if one already runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # handed to the calling thread
            box["error"] = exc

    helper = threading.Thread(target=work, name="llm-exchange", daemon=True)
    helper.start()
    helper.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL from the environment for ``scheme://host``; None for loopback and ``NO_PROXY`` hosts."""
    if host in _LOOPBACK or host.startswith("127.") or urllib.request.proxy_bypass(host):
        return None
    proxy = urllib.request.getproxies().get(scheme)
    return (proxy if "://" in proxy else f"http://{proxy}") if proxy else None


@cache
def _tls_context() -> ssl.SSLContext:
    """``httpx2``'s default verifying context (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), made once: 36 ms."""
    return httpx2.create_ssl_context(trust_env=True)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"
