"""The loopback provider servers the tests and benchmarks time calls through add no latency of
their own: every handler is served with Nagle's algorithm off (TCP_NODELAY on each connection)."""

from __future__ import annotations

import socket

import pytest

from tests.loopback import LoopbackServer, ThreadedServer
from tests.sse_loopback import StreamingChatServer


@pytest.mark.parametrize("server", [LoopbackServer, StreamingChatServer], ids=lambda c: c.__name__)
def test_every_loopback_server_answers_with_nagles_algorithm_off(server: type[ThreadedServer]) -> None:
    seen: list[int] = []
    with server() as srv:
        handler = srv._httpd.RequestHandlerClass
        setup = handler.setup

        def recording_setup(self) -> None:
            setup(self)
            seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        handler.setup = recording_setup
        host, port = srv._httpd.server_address[:2]
        with socket.create_connection((host, port), timeout=5) as c:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            c.recv(1)
    assert seen and all(seen), seen
