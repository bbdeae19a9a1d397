"""Closing the Kafka transport stops kafka-python's I/O thread before closing its selector."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kafka.net.selector import NetworkSelector

from coordination._transport.kafka import KafkaTransport
from coordination.transport import TransportError


def test_close_waits_for_a_busy_io_thread_before_closing_its_selector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    transport = KafkaTransport(
        client_id="close-test",
        request_timeout_ms=1000,
        connection={"bootstrap_servers": "127.0.0.1:1"},
    )
    net = transport._net
    net.start()
    thread = net._io_thread
    assert thread is not None
    # The loop is busy past close()'s first wait for it (a loaded machine, a slow callback).
    busy = threading.Event()

    def slow() -> None:
        busy.set()
        time.sleep(0.5)

    net.call_soon_threadsafe(slow)
    assert busy.wait(5)
    transport.close()

    assert not thread.is_alive()
    assert net._closed
    assert failures == []  # closed under the loop: ValueError, I/O operation on closed epoll


def test_a_transport_closed_before_its_io_thread_ran_stops_the_thread_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kafka-python's loop clears its stop flag when it starts: here the new thread starts
    # its loop only once close() has asked it to stop (a loaded machine can run it that late).
    asked_to_stop = threading.Event()
    original_run, original_stop = NetworkSelector.run_forever, NetworkSelector.stop

    def late_run(self: Any) -> None:
        asked_to_stop.wait(10)
        original_run(self)

    def noted_stop(self: Any, timeout_ms: int | None = None) -> None:
        asked_to_stop.set()
        original_stop(self, timeout_ms=timeout_ms)

    monkeypatch.setattr(NetworkSelector, "run_forever", late_run)
    monkeypatch.setattr(NetworkSelector, "stop", noted_stop)
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    transport = KafkaTransport(
        client_id="close-test",
        request_timeout_ms=1000,
        connection={"bootstrap_servers": "127.0.0.1:1"},
    )

    def unavailable(*args: Any) -> None:
        raise RuntimeError("the loop is not running")

    monkeypatch.setattr(transport._manager, "run", unavailable)
    net = transport._net
    net.start()
    thread = net._io_thread
    assert thread is not None
    transport.close()

    thread.join(10)
    assert not thread.is_alive()
    assert net._closed
    assert failures == []  # before: ValueError, I/O operation on closed epoll object


def test_a_send_that_raced_close_does_not_start_the_io_thread_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A send checks that the transport is open, then close() runs to its end on another
    # thread, then the send connects: it must not start kafka-python's I/O thread on the
    # closed selector (the thread died on "I/O operation on closed epoll object" in CI).
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    transport = KafkaTransport(
        client_id="close-test",
        request_timeout_ms=1000,
        connection={"bootstrap_servers": "127.0.0.1:1"},
    )
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport._ensure_bootstrapped(1.0)  # where the send goes after its check
    time.sleep(0.2)
    assert transport._net._io_thread is None
    assert failures == []
