"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1, for tests, demos and dry runs.

Real failure modes (429 with ``Retry-After``, 500, a garbage body, a reply slower than
the client's timeout, a body cut short or reset by the peer) are hard to get from a real
server on demand; this server plays them from a script, records every request it receives (arrival time and JSON body),
and otherwise answers chat completions through a ``responder`` function. It is bounded: it
binds a free port on loopback only, serves from a daemon thread, and shuts itself down
after ``lifetime`` seconds even if a test forgets to stop it.

Example:
    >>> with ScriptedServer([Step(429, retry_after="0"), Step(content="hi")]) as server:  # doctest: +SKIP
    ...     LLMClient(ClientConfig(base_url=server.base_url, model="m", cache_dir=None)).chat(
    ...         [{"role": "user", "content": "x"}]).content
    'hi'
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Step:
    """One scripted answer: an HTTP status with a body, optionally late.

    ``content`` builds a valid chat completion; ``body`` sends raw text instead (garbage);
    otherwise an error status gets an OpenAI-style error object.
    """

    status: int = 200
    content: str | None = None
    body: str | None = None
    retry_after: str | None = None
    delay: float = 0.0
    message: str | None = None  # error message of an error status (default: "scripted status N")
    content_type: str = "text/plain"  # of a raw ``body``
    fault: str | None = None  # a transport fault instead of an answer: one of FAULTS
    location: str | None = None  # a redirect: ``status`` (e.g. 307) with this Location header


FAULTS = ("truncate", "reset", "drop")
"""``truncate``: promise a longer body than is sent, then close; ``reset``: half the body, then a
TCP reset (RST); ``drop``: close the connection without answering."""


@dataclass
class Received:
    time: float
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)


def completion(content: str, model: str = "scripted") -> dict[str, Any]:
    """A minimal, valid ``chat.completion`` object."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class ScriptedServer:
    """Plays ``script`` in order, then answers with ``responder(request_json)`` (default: "ok").

    ``port=0`` picks a free port; pass a former server's ``port`` to "restart" the same endpoint.
    """

    def __init__(
        self, script: Sequence[Step] = (), responder: Responder | None = None, lifetime: float = 120.0, port: int = 0
    ) -> None:
        self.script = list(script)
        self.responder = responder or (lambda _request: "ok")
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="scripted-llm", daemon=True
        )
        self._timer = threading.Timer(lifetime, self.stop)
        self._timer.daemon = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def chat_requests(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path.endswith("/chat/completions")]

    def start(self) -> ScriptedServer:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # releases held requests
        self._timer.cancel()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hold(self, seconds: float) -> None:
        """Sleep up to ``seconds`` in a handler (or a responder); returns early when the server stops."""
        self._stopped.wait(seconds)

    def _next(self, request: dict[str, Any] | None) -> Step:
        with self._lock:
            if self.script:
                return self.script.pop(0)
        try:
            return Step(content=self.responder(request or {}))
        except Exception as exc:  # a broken responder is a 500, like a real server bug
            return Step(500, body=json.dumps({"error": {"message": f"responder failed: {exc}"}}))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, _format: str, *args: Any) -> None:  # keep test output clean
                return

            def do_GET(self) -> None:
                self._send(
                    200,
                    json.dumps({"status": "ok"})
                    if self.path.endswith("/health")
                    else json.dumps({"object": "list", "data": []}),
                )

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server._lock:
                    server.received.append(Received(time.monotonic(), self.path, body, dict(self.headers)))
                step = server._next(body)
                if step.delay:
                    server.hold(step.delay)
                if step.location is not None:
                    self._send(step.status, "", location=step.location)
                elif step.fault is not None:
                    self._fault(step.fault, json.dumps(completion(step.content or "ok")))
                elif step.body is not None:
                    self._send(step.status, step.body, step.content_type, step.retry_after)
                elif step.status == 200:
                    self._send(200, json.dumps(completion(step.content or "", (body or {}).get("model", "scripted"))))
                else:
                    message = step.message or f"scripted status {step.status}"
                    error = {"error": {"message": message, "type": "scripted", "code": step.status}}
                    self._send(step.status, json.dumps(error), retry_after=step.retry_after)

            def _send(
                self,
                status: int,
                text: str,
                ctype: str = "application/json",
                retry_after: str | None = None,
                location: str | None = None,
            ) -> None:
                data = text.encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data)))
                    if retry_after is not None:
                        self.send_header("retry-after", retry_after)
                    if location is not None:
                        self.send_header("location", location)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def _fault(self, fault: str, text: str) -> None:
                if fault not in FAULTS:
                    raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
                self.close_connection = True
                data = text.encode("utf-8")
                try:
                    if fault != "drop":
                        self.send_response(200)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(data) * 2 if fault == "truncate" else len(data)))
                        self.end_headers()
                        self.wfile.write(data[: len(data) // 2] if fault == "reset" else data)
                        self.wfile.flush()
                        time.sleep(0.05)  # let the client read the headers and the first bytes
                    if fault == "reset":  # SO_LINGER 0: close() sends RST instead of FIN
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    else:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    self.connection.close()
                except OSError:
                    pass

        return Handler


# ---- a raw-socket server for replies no well-behaved HTTP server would send ---------------------

HOSTILE = ("drip", "drip-headers", "endless", "huge", "huge-chunked", "nest", "echo", "silent", "raw")
"""``drip``: a valid reply, one byte every ``interval`` s (headers at once, then the body); ``drip-headers``:
the status line and headers dripped too; ``endless``: a chunked body whose chunks never end; ``huge``: a
``size``-byte body behind an honest Content-Length; ``huge-chunked``: the same size, chunked, no length;
``nest``: a 200 JSON reply of ``depth`` nested ``[``; ``echo``: status ``status`` with ``text`` as the
error message (which may hold the key, escapes, anything); ``silent``: accept, read, never answer;
``raw``: ``text`` sent as it is (a bad status line, a header flood), then the connection closed."""


@dataclass(frozen=True)
class Hostile:
    kind: str
    interval: float = 0.05
    size: int = 0
    depth: int = 100_000
    status: int = 500
    text: str = ""
    content_type: str = "application/json"


class HostileServer:
    """Plays one :data:`HOSTILE` behaviour for every request, on 127.0.0.1, from daemon threads.

    Bounded: every loop stops when the client goes away, when :meth:`stop` is called or after
    ``lifetime`` seconds. ``requests`` counts the requests read.
    """

    def __init__(self, behaviour: Hostile, lifetime: float = 30.0) -> None:
        if behaviour.kind not in HOSTILE:
            raise ValueError(f"unknown behaviour {behaviour.kind!r}; expected one of {HOSTILE}")
        self.behaviour = behaviour
        self.requests = 0
        self._stopped = threading.Event()
        self._ends = time.monotonic() + lifetime
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._accept, name="hostile-llm", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        self._listener.close()

    def _live(self) -> bool:
        return not self._stopped.is_set() and time.monotonic() < self._ends

    def _accept(self) -> None:
        while self._live():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                self._read_request(conn)
                self.requests += 1
                self._play(conn)
            except OSError:
                pass  # the client went away: what a deadline or a cap is for

    @staticmethod
    def _read_request(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 20:
            block = conn.recv(65536)
            if not block:
                return
            data += block
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < min(length, 1 << 20):
            block = conn.recv(65536)
            if not block:
                return
            body += block

    def _play(self, conn: socket.socket) -> None:
        b = self.behaviour
        reply = json.dumps(completion("ok")).encode()
        if b.kind == "silent":
            while self._live():
                self._stopped.wait(0.05)
        elif b.kind in ("drip", "drip-headers"):
            head = _head(200, b.content_type, len(reply))
            if b.kind == "drip":
                conn.sendall(head)
            self._drip(conn, reply if b.kind == "drip" else head + reply)
        elif b.kind == "endless":
            conn.sendall(_head(200, b.content_type, None))
            while self._live():
                conn.sendall(b"1\r\n \r\n")
                self._stopped.wait(b.interval)
        elif b.kind in ("huge", "huge-chunked"):
            conn.sendall(_head(200, b.content_type, b.size if b.kind == "huge" else None))
            block, sent = b" " * 65536, 0
            while sent < b.size and self._live():
                part = block[: b.size - sent]
                conn.sendall(part if b.kind == "huge" else b"%x\r\n%s\r\n" % (len(part), part))
                sent += len(part)
            if b.kind == "huge-chunked":
                conn.sendall(b"0\r\n\r\n")
        elif b.kind == "nest":
            body = b"[" * b.depth + b"]" * b.depth
            conn.sendall(_head(200, b.content_type, len(body)) + body)
        elif b.kind == "raw":
            conn.sendall(b.text.encode("utf-8", "surrogateescape"))
        else:  # echo
            body = json.dumps({"error": {"message": b.text, "type": "hostile", "code": b.status}}).encode()
            conn.sendall(_head(b.status, b.content_type, len(body), reason=b.text) + body)

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if not self._live():
                return
            conn.sendall(data[i : i + 1])
            self._stopped.wait(self.behaviour.interval)


def _head(status: int, content_type: str, length: int | None, reason: str = "Hostile") -> bytes:
    """Status line and headers; ``length=None`` means chunked. ``reason`` goes on the status line as it is."""
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    reason_bytes = reason.encode("utf-8", "replace").replace(b"\r", b" ").replace(b"\n", b" ")[:4000]
    return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\n%s\r\nconnection: close\r\n\r\n" % (
        status,
        reason_bytes,
        content_type.encode(),
        framing.encode(),
    )
