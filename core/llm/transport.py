"""One HTTP exchange with a total deadline and a byte cap: the only way the LLM client reaches an endpoint.

Why not the ``openai``/``httpx`` client: their ``timeout`` bounds each read, so a server that
drips one byte a second, or sends a chunked body that never ends, held a request for ever;
and they read a body of any size into memory (300 MB took 2.3 GB). Here:

* every ``recv`` and ``send`` is given only what is left of one monotonic deadline, so
  ``timeout`` bounds connect, status line, headers and body together;
* the status line and headers are bounded by :mod:`http.client` (64 KiB a line, 100 headers),
  the body by :data:`MAX_REPLY_BYTES`: refused before reading when its Content-Length says
  so, and as soon as it passes the cap otherwise (chunked or read-to-close), so no more than
  the cap is ever held;
* :func:`parse_json` refuses nesting deeper than the interpreter can parse (a ``RecursionError``
  before) as a :class:`BadReply`, not a traceback;
* no compression is asked for (``Accept-Encoding: identity``), so a small body cannot inflate;
* a redirect (301, 302, 303, 307, 308) to the same origin (scheme, host and port) is followed with
  the same POST, at most :data:`MAX_REDIRECTS` times, within the same deadline; one to another
  origin is not (the request carries the key) and raises :class:`Redirected`, naming where.

Proxies from ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` are honoured as before, except for
loopback hosts, which are always reached directly; a proxy URL's ``user:password@`` is sent
as ``Proxy-Authorization``.

Example:
    >>> deadline = Deadline(5.0)
    >>> 0 < deadline.remaining() <= 5.0
    True
    >>> parse_json(b'{"a": [1, 2]}')
    {'a': [1, 2]}
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import socket
import ssl
import time
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

MAX_REPLY_BYTES = 16 * 2**20
"""The largest reply body read (16 MiB). A chat completion is kilobytes; 1,000,000 tokens of English
text are about 4 MB. A larger body is refused without ever holding more than this."""

MAX_REDIRECTS = 5
"""Same-origin redirects followed for one request; one more is refused as a loop."""
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_BLOCK = 64 * 1024
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class BadReply(Exception):
    """The endpoint answered, but with bytes that cannot be a reply (too large, too deeply nested)."""


class Redirected(Exception):
    """The endpoint redirected where this client does not follow: to ``url`` on another origin, or in a loop."""

    def __init__(self, url: str, loop: bool = False) -> None:
        super().__init__(url)
        self.url = url
        self.loop = loop


@dataclass(frozen=True)
class HttpReply:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names
    body: bytes


class Deadline:
    """A point in monotonic time; :meth:`remaining` raises :class:`TimeoutError` once it has passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete reply within {self.seconds:g}s")
        return left


def post_json(
    url: str, payload: Any, headers: dict[str, str], timeout: float, max_bytes: int = MAX_REPLY_BYTES
) -> HttpReply:
    """POST ``payload`` as JSON to ``url``; the whole exchange, redirects included, ends within ``timeout`` seconds.

    Raises :class:`TimeoutError` at the deadline, :class:`BadReply` for a body over ``max_bytes``,
    :class:`Redirected` for a redirect it does not follow, :class:`OSError` or
    :class:`http.client.HTTPException` for a failed connection or a broken reply.
    """
    deadline = Deadline(timeout)
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    for _ in range(MAX_REDIRECTS + 1):
        reply = _post_once(urlsplit(url), body, headers, deadline, max_bytes)
        location = reply.headers.get("location") if reply.status in REDIRECTS else None
        if location is None:
            return reply
        target = urljoin(url, location)
        if _origin(target) != _origin(url):
            raise Redirected(target)
        url = target
    raise Redirected(url, loop=True)


def _post_once(
    target: SplitResult, body: bytes, headers: dict[str, str], deadline: Deadline, max_bytes: int
) -> HttpReply:
    connection, path, extra = _open(target, deadline)
    sock = connection.sock
    try:
        connection.putrequest("POST", path)
        for name, value in {
            **extra,
            **headers,
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
        }.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        data = _read_capped(response, max_bytes)
        return HttpReply(response.status, response.reason or "", {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        connection.close()
        sock.close()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def parse_json(data: bytes) -> Any:
    """``data`` as JSON; :class:`ValueError` if it is not JSON, :class:`BadReply` if nested too deeply to parse."""
    try:
        return json.loads(data)
    except RecursionError:
        raise BadReply("the body is JSON nested too deeply to parse") from None


def _read_capped(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    promised = response.length  # None: chunked, or read until the server closes
    if promised is not None and promised > max_bytes:
        raise BadReply(f"the body is {promised} bytes, over the {_size(max_bytes)} cap")
    data = bytearray()
    while True:
        block = response.read(min(_BLOCK, max_bytes + 1 - len(data)))
        if not block:
            if promised is not None and len(data) < promised:  # read(amt) does not check this itself
                raise http.client.IncompleteRead(b"", promised - len(data))
            return bytes(data)
        data += block
        if len(data) > max_bytes:
            raise BadReply(f"the body is over the {_size(max_bytes)} cap")


def _open(target: SplitResult, deadline: Deadline) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """A connection with every read and write bounded by ``deadline``, the request path, and proxy headers."""
    host, port = target.hostname or "", target.port
    path = (target.path or "/") + (f"?{target.query}" if target.query else "")
    proxy = _proxy_for(target)
    extra: dict[str, str] = {}
    if proxy is None:
        connection = _connection(target.scheme, host, port, deadline)
    elif target.scheme == "https":  # TLS to the endpoint through a CONNECT tunnel
        connection = _connection("https", proxy.hostname or "", proxy.port or 80, deadline)
        connection.set_tunnel(host, port, headers=_auth(proxy, "Proxy-Authorization"))
    else:  # plain HTTP through a proxy: the absolute URL goes on the request line
        connection = _connection("http", proxy.hostname or "", proxy.port or 80, deadline)
        path = f"http://{target.hostname}{f':{port}' if port else ''}{path}"
        extra = _auth(proxy, "Proxy-Authorization")
    try:
        connection.timeout = deadline.remaining()
        connection.connect()
    except BaseException:
        connection.close()
        raise
    connection.sock = _DeadlineSocket(connection.sock, deadline)
    return connection, path, extra


def _connection(scheme: str, host: str, port: int | None, deadline: Deadline) -> http.client.HTTPConnection:
    if scheme == "https":
        return http.client.HTTPSConnection(
            host, port, timeout=deadline.remaining(), context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(host, port, timeout=deadline.remaining())


def _proxy_for(target: SplitResult) -> SplitResult | None:
    host = target.hostname or ""
    if host in _LOOPBACK or host.startswith("127.") or urllib.request.proxy_bypass(host):
        return None
    proxy = urllib.request.getproxies().get(target.scheme)
    return urlsplit(proxy if "://" in proxy else f"http://{proxy}") if proxy else None


def _auth(url: SplitResult, header: str = "Authorization") -> dict[str, str]:
    """HTTP Basic credentials from ``user:password@`` in ``url``, if any."""
    if url.username is None:
        return {}
    pair = f"{unquote(url.username)}:{unquote(url.password or '')}".encode()
    return {header: "Basic " + base64.b64encode(pair).decode("ascii")}


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


class _DeadlineSocket:
    """A socket whose every send and receive may take only what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(self._deadline.remaining())
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:  # noqa: ARG002 - socket.makefile's signature
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        """Nothing: ``http.client`` closes the connection while the body may still be read;
        :func:`post_json` closes the socket."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.remaining())
        return self._sock.recv_into(buffer)
