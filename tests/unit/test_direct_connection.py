"""The dedicated connections a member drives itself: every way an answer can go wrong ends in a
TransportError and a fresh connection, never in an answer taken for another request's.

A scripted server on loopback plays the broker, because a real one never sends a wrong
correlation id, a torn frame or an oversized one (tests/integration/test_transport.py runs
the same connection against a real broker).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import group as kgroup
from kafka.protocol.metadata import ApiVersionsResponse

from coordination._transport.base import TransportError
from coordination._transport.kafka import KafkaTransport
from coordination._transport.link import DirectConnection, DirectSettings

_API_VERSIONS = 18
_HEARTBEAT = 12


def _heartbeat_request() -> Any:
    return kgroup.HeartbeatRequest(
        group_id="g", generation_id=1, member_id="m", group_instance_id=None
    )


def _versions_answer(correlation_id: int, version: int, error_code: int = 0) -> bytes:
    answer = ApiVersionsResponse(
        version=version,
        error_code=error_code,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=_HEARTBEAT, min_version=0, max_version=4)],
        throttle_time_ms=0,
    )
    answer.with_header(correlation_id=correlation_id)
    return bytes(answer.encode(header=True, framed=True))


def _heartbeat_answer(correlation_id: int, error_code: int = 0) -> bytes:
    answer = kgroup.HeartbeatResponse(version=4, throttle_time_ms=0, error_code=error_code)
    answer.with_header(correlation_id=correlation_id)
    return bytes(answer.encode(header=True, framed=True))


# How the server answers a heartbeat: (connection number, correlation id) -> bytes to send,
# or None to say nothing.
Script = Callable[[int, int], "bytes | None"]


class ScriptedBroker:
    """Answers ApiVersions like a broker and heartbeats as the script says."""

    def __init__(self, script: Script, *, versions_v3: bool = True, hang_up: bool = False) -> None:
        self.script = script
        self.versions_v3 = versions_v3
        # Close each connection after its first answer, as a broker closes an idle one.
        self.hang_up = hang_up
        self.connections = 0
        self.api_versions_asked: list[int] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(sock)
            threading.Thread(target=self._serve, args=(sock, self.connections), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        with sock:
            while True:
                head = _read(sock, 4)
                if head is None:
                    return
                frame = _read(sock, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                if api_key == _API_VERSIONS:
                    self.api_versions_asked.append(version)
                    if version > 0 and not self.versions_v3:
                        sock.sendall(_versions_answer(correlation_id, 0, error_code=35))
                    else:
                        sock.sendall(_versions_answer(correlation_id, version))
                    continue
                answer = self.script(number, correlation_id)
                if answer is not None:
                    sock.sendall(answer)
                    if self.hang_up:
                        return

    def close(self) -> None:
        self._server.close()
        for sock in self._open:
            sock.close()


def _read(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _settings(max_response_bytes: int = 1_000_000) -> DirectSettings:
    return DirectSettings(
        client_id="test",
        tls=None,
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        connect_timeout_s=2.0,
        max_response_bytes=max_response_bytes,
        client_software=("coordination-tests", "0"),
    )


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[ScriptedBroker, DirectConnection]]]:
    made: list[tuple[ScriptedBroker, DirectConnection]] = []

    def start(script: Script, **kwargs: Any) -> tuple[ScriptedBroker, DirectConnection]:
        max_response_bytes = kwargs.pop("max_response_bytes", 1_000_000)
        broker = ScriptedBroker(script, **kwargs)
        connection = DirectConnection(
            "coordinator-1", "127.0.0.1", broker.port, _settings(max_response_bytes)
        )
        made.append((broker, connection))
        return broker, connection

    yield start
    for broker, connection in made:
        connection.close()
        broker.close()


def test_an_answer_is_decoded_and_the_connection_reused(serve: Any) -> None:
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid, error_code=27))
    for _ in range(3):
        assert connection.exchange(_heartbeat_request(), 5.0).error_code == 27
    assert broker.connections == 1
    assert broker.api_versions_asked == [3]


def test_a_connection_the_broker_closed_while_idle_is_replaced_without_an_error(
    serve: Any,
) -> None:
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid), hang_up=True)
    for _ in range(3):
        assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
        time.sleep(0.1)  # the broker's close arrives
    assert broker.connections == 3


def test_an_old_broker_is_asked_its_versions_with_v0(serve: Any) -> None:
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid), versions_v3=False)
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.api_versions_asked == [3, 0]


def test_an_answer_to_another_request_is_refused_and_the_connection_replaced(
    serve: Any,
) -> None:
    # The first connection answers with a correlation id off by one.
    broker, connection = serve(
        lambda number, cid: _heartbeat_answer(cid + 1 if number == 1 else cid, error_code=0)
    )
    with pytest.raises(TransportError, match="expected"):
        connection.exchange(_heartbeat_request(), 5.0)
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.connections == 2


def test_a_torn_answer_fails_and_the_next_request_reconnects(serve: Any) -> None:
    def torn_then_whole(number: int, cid: int) -> bytes:
        whole = _heartbeat_answer(cid)
        return whole[:7] if number == 1 else whole

    broker, connection = serve(torn_then_whole)
    # The first connection's half answer is followed by nothing: it times out.
    with pytest.raises(TransportError):
        connection.exchange(_heartbeat_request(), 0.5)
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.connections == 2


def test_a_silent_broker_fails_the_request_at_its_timeout(serve: Any) -> None:
    _, connection = serve(lambda number, cid: None)
    started = time.monotonic()
    with pytest.raises(TransportError, match="no response"):
        connection.exchange(_heartbeat_request(), 0.5)
    assert 0.4 < time.monotonic() - started < 3.0


def test_an_oversized_answer_is_refused(serve: Any) -> None:
    _, connection = serve(
        lambda number, cid: struct.pack(">i", 2_000_000) + b"\0" * 64, max_response_bytes=1000
    )
    with pytest.raises(TransportError, match="2000000 bytes"):
        connection.exchange(_heartbeat_request(), 5.0)


def test_closing_wakes_a_request_waiting_for_its_answer(serve: Any) -> None:
    _, connection = serve(lambda number, cid: None)
    failures: list[BaseException] = []

    def wait_for_answer() -> None:
        try:
            connection.exchange(_heartbeat_request(), 30.0)
        except BaseException as e:
            failures.append(e)

    waiting = threading.Thread(target=wait_for_answer)
    waiting.start()
    time.sleep(0.3)  # it has sent, and waits
    started = time.monotonic()
    connection.close()
    waiting.join(5.0)
    assert not waiting.is_alive()
    assert time.monotonic() - started < 2.0
    assert len(failures) == 1 and isinstance(failures[0], TransportError)
    with pytest.raises(TransportError, match="closed"):
        connection.exchange(_heartbeat_request(), 1.0)


def test_nothing_answers_where_nothing_listens() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    connection = DirectConnection("coordinator-1", "127.0.0.1", port, _settings())
    with pytest.raises(TransportError, match="refused"):
        connection.exchange(_heartbeat_request(), 2.0)


@pytest.mark.parametrize(
    ("settings", "direct"),
    [
        ({}, True),
        ({"security_protocol": "PLAINTEXT"}, True),
        ({"security_protocol": "SSL"}, True),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, False),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, False),
        ({"proxy_url": "socks5://127.0.0.1:1080"}, False),
        ({"api_version": (3, 9)}, False),
    ],
)
def test_which_connections_this_side_drives(settings: dict[str, Any], direct: bool) -> None:
    transport = KafkaTransport(
        client_id="test",
        request_timeout_ms=1000,
        connection={"bootstrap_servers": "127.0.0.1:1", **settings},
    )
    try:
        node = transport.dedicated_node("coordinator", 1, "127.0.0.1", 1)
        assert (transport._direct_connection(node) is not None) is direct
    finally:
        transport.close()
