"""The fault proxy on its own, in front of a local echo server (no broker)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from coordination.testing import free_port
from devtools.campaign._proxy import ProxyFleet


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxied() -> Iterator[tuple[ProxyFleet, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    fleet = ProxyFleet({1: (port, server.server_address[1])})
    fleet.start()
    yield fleet, port
    fleet.stop()
    server.shutdown()
    server.server_close()


def echo(port: int, payload: bytes, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        return s.recv(4096)


def test_passes_traffic(proxied: tuple[ProxyFleet, int]) -> None:
    _, port = proxied
    assert echo(port, b"hello") == b"hello"


def test_delays_traffic(proxied: tuple[ProxyFleet, int]) -> None:
    fleet, port = proxied
    fleet.set(1, "delay", 0.3)
    time.sleep(0.1)
    began = time.monotonic()
    assert echo(port, b"slow") == b"slow"
    assert time.monotonic() - began >= 0.5  # once each way


def test_blackhole_holds_traffic_until_healed(proxied: tuple[ProxyFleet, int]) -> None:
    fleet, port = proxied
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"one")
        assert s.recv(16) == b"one"
        fleet.set(1, "blackhole")
        time.sleep(0.1)
        s.sendall(b"two")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(16)
        fleet.heal(1)
        s.settimeout(5)
        assert s.recv(16) == b"two"


def test_cut_resets_connections(proxied: tuple[ProxyFleet, int]) -> None:
    fleet, port = proxied
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        assert echo(port, b"x") == b"x"
        fleet.set(1, "cut")
        time.sleep(0.1)
        with pytest.raises(OSError):
            s.sendall(b"y")
            if not s.recv(16):
                raise ConnectionResetError("closed")
        with pytest.raises(OSError):
            if not echo(port, b"z"):
                raise ConnectionResetError("closed")
    fleet.heal(1)
    time.sleep(0.1)
    assert echo(port, b"back") == b"back"
