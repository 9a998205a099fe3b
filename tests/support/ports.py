"""A free TCP port on 127.0.0.1, for servers and process groups a test starts (never a fixed one: two suites may
run at once on one machine)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
