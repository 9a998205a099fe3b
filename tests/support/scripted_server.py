"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1, for tests, demos and dry runs.

Real failure modes (429 with ``Retry-After``, 500, a garbage body, a reply slower than
the client's timeout, a body cut short or reset by the peer) are hard to get from a real
server on demand; this server plays them from a script, records every request it receives (arrival time and JSON body), and
otherwise answers chat completions through a ``responder`` function. It is bounded: it
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
import threading
import time
from collections.abc import Callable, Sequence
import socket
import struct
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
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class ScriptedServer:
    """Plays ``script`` in order, then answers with ``responder(request_json)`` (default: "ok").

    ``port=0`` picks a free port; pass a former server's ``port`` to "restart" the same endpoint.
    """

    def __init__(self, script: Sequence[Step] = (), responder: Responder | None = None, lifetime: float = 120.0,
                 port: int = 0) -> None:
        self.script = list(script)
        self.responder = responder or (lambda request: "ok")
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="scripted-llm", daemon=True)
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
            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

            def do_GET(self) -> None:
                self._send(200, json.dumps({"status": "ok"}) if self.path.endswith("/health") else json.dumps({"object": "list", "data": []}))

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
                if step.fault is not None:
                    self._fault(step.fault, json.dumps(completion(step.content or "ok")))
                elif step.body is not None:
                    self._send(step.status, step.body, step.content_type, step.retry_after)
                elif step.status == 200:
                    self._send(200, json.dumps(completion(step.content or "", (body or {}).get("model", "scripted"))))
                else:
                    message = step.message or f"scripted status {step.status}"
                    error = {"error": {"message": message, "type": "scripted", "code": step.status}}
                    self._send(step.status, json.dumps(error), retry_after=step.retry_after)

            def _send(self, status: int, text: str, ctype: str = "application/json", retry_after: str | None = None) -> None:
                data = text.encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(data)))
                    if retry_after is not None:
                        self.send_header("retry-after", retry_after)
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
