"""Ports for test servers: never where outgoing connections take theirs, never twice."""

from __future__ import annotations

import socket

import pytest

from coordination.testing import _ports, free_port


def test_a_port_is_outside_the_range_outgoing_connections_take_theirs_from() -> None:
    # A broker's controller dialling a peer takes an ephemeral local port; a listener port
    # from that range was once taken in between its pick and the broker's bind.
    low, high = _ports.ephemeral_range()
    for _ in range(50):
        port = free_port()
        assert not low <= port <= high, (port, low, high)


def test_no_port_is_handed_out_twice_in_a_process() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_the_port_can_be_listened_on() -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()


def test_a_port_something_holds_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        picks = iter([taken, taken, taken + 1 if taken < 65535 else taken - 1])
        monkeypatch.setattr(_ports, "_LOW", 1024)
        monkeypatch.setattr(_ports, "_HIGH", 65535)
        monkeypatch.setattr(_ports, "ephemeral_range", lambda: (0, 0))
        monkeypatch.setattr(_ports._rng, "randint", lambda low, high: next(picks))
        assert free_port() != taken


def test_with_no_room_below_the_ephemeral_range_the_kernel_chooses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_ports, "ephemeral_range", lambda: (1024, 65535))
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
