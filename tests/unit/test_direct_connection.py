"""The dedicated connections a member drives itself: every way an answer can go wrong ends in a
TransportError and a fresh connection, never in an answer taken for another request's.

A scripted server on loopback plays the broker, because a real one never sends a wrong
correlation id, a torn frame or an oversized one. On real brokers these connections carry
every integration test's group requests (PLAINTEXT, and SSL in test_security.py), and
test_wakeups.py closes a member while its listener's fetch waits at the broker.
"""

from __future__ import annotations

import os
import resource
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import group as kgroup
from kafka.protocol.metadata import ApiVersionsResponse

from coordination._protocol import messages as m
from coordination._transport.kafka import KafkaTransport
from coordination._transport.link import DirectConnection, DirectSettings
from coordination.errors import TlsError
from coordination.transport import CoordinatorNode, TransportError

_API_VERSIONS = 18
_HEARTBEAT = 12


def _heartbeat_request() -> Any:
    return kgroup.HeartbeatRequest(
        group_id="g", generation_id=1, member_id="m", group_instance_id=None
    )


def _join_request() -> Any:
    """A request the scripted broker does not know (its versions list only heartbeats)."""
    return kgroup.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        group_instance_id=None,
        protocol_type="t",
        protocols=[],
    )


def _versions_answer(
    correlation_id: int,
    version: int,
    error_code: int = 0,
    apis: tuple[tuple[int, int, int], ...] = ((_HEARTBEAT, 0, 4),),
) -> bytes:
    answer = ApiVersionsResponse(
        version=version,
        error_code=error_code,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, low, high in apis
        ],
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
    """Answers ApiVersions like a broker (offering ``apis``: key, lowest and highest version)
    and every other request as the script says."""

    def __init__(
        self,
        script: Script,
        *,
        versions_v3: bool = True,
        hang_up: bool = False,
        apis: tuple[tuple[int, int, int], ...] = ((_HEARTBEAT, 0, 4),),
    ) -> None:
        self.script = script
        self.versions_v3 = versions_v3
        self.apis = apis
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
                        sock.sendall(_versions_answer(correlation_id, version, apis=self.apis))
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


def test_bytes_after_an_answer_put_the_connection_out_of_use(serve: Any) -> None:
    # An answer is read together with whatever arrived behind it; bytes nobody asked for
    # must not be taken for the next answer.
    broker, connection = serve(
        lambda number, cid: _heartbeat_answer(cid) + (b"\x00\x00\x00\x01x" if number == 1 else b"")
    )
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.connections == 2


@pytest.mark.parametrize("first_s, then_s", [(5.0, 0.3), (0.3, 2.0)])
def test_each_request_waits_as_long_as_its_own_timeout(
    serve: Any, first_s: float, then_s: float
) -> None:
    # The socket keeps its timeout from one request to the next where it fits: a request
    # with a shorter one must still give up in time, one with a longer one must not give up
    # early (a JoinGroup waits for the whole rebalance).
    def answer_the_second_late(number: int, cid: int) -> bytes | None:
        if cid == 2:  # the first heartbeat (ApiVersions was 1)
            return _heartbeat_answer(cid)
        if then_s > 1.0:
            time.sleep(0.6)
            return _heartbeat_answer(cid)
        return None  # silent: the request times out

    _, connection = serve(answer_the_second_late)
    assert connection.exchange(_heartbeat_request(), first_s).error_code == 0
    started = time.monotonic()
    if then_s > 1.0:
        assert connection.exchange(_heartbeat_request(), then_s).error_code == 0
    else:
        with pytest.raises(TransportError):
            connection.exchange(_heartbeat_request(), then_s)
        assert time.monotonic() - started < then_s * 1.1 + 0.2


def test_an_answer_larger_than_one_read_arrives_whole_and_what_follows_is_kept() -> None:
    # A fetch's answer can be megabytes, arriving in pieces; the read ahead must neither cut
    # it nor lose the bytes behind it (the second of two answers sent back to back).
    here, there = socket.socketpair()
    connection = DirectConnection("wakeups-in-1", "127.0.0.1", 0, _settings())
    first = os.urandom(300_000)
    second = os.urandom(1_000)

    def send_in_pieces() -> None:
        data = first + second
        for start in range(0, len(data), 70_000):
            there.sendall(data[start : start + 70_000])
            time.sleep(0.01)

    sender = threading.Thread(target=send_in_pieces)
    sender.start()
    try:
        deadline = time.monotonic() + 5
        assert connection._read(here, len(first), deadline) == first
        assert connection._read(here, len(second), deadline) == second
        assert not connection._buffered
    finally:
        sender.join()
        here.close()
        there.close()


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


def test_an_oversized_answer_is_refused_and_the_connection_replaced(serve: Any) -> None:
    broker, connection = serve(
        lambda number, cid: (
            struct.pack(">i", 2_000_000) + b"\0" * 64 if number == 1 else _heartbeat_answer(cid)
        ),
        max_response_bytes=1000,
    )
    with pytest.raises(TransportError, match="2000000 bytes"):
        connection.exchange(_heartbeat_request(), 5.0)
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.connections == 2


def test_an_answer_too_short_for_its_type_is_refused_and_the_connection_replaced(
    serve: Any,
) -> None:
    def cut_short(number: int, cid: int) -> bytes:
        if number > 1:
            return _heartbeat_answer(cid)
        header = struct.pack(">ib", cid, 0)  # correlation id, no tagged fields; no body
        return struct.pack(">i", len(header)) + header

    broker, connection = serve(cut_short)
    with pytest.raises(TransportError, match="unreadable"):
        connection.exchange(_heartbeat_request(), 5.0)
    assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
    assert broker.connections == 2


def test_requests_from_two_threads_each_get_their_own_answer(serve: Any) -> None:
    # The answer's error code is its correlation id: a mix-up would show.
    _, connection = serve(lambda number, cid: _heartbeat_answer(cid, error_code=cid))
    mixed_up: list[tuple[int, int]] = []

    def send_many() -> None:
        for _ in range(200):
            request = _heartbeat_request()
            answer = connection.exchange(request, 5.0)
            if answer.error_code != request.header.correlation_id:
                mixed_up.append((request.header.correlation_id, answer.error_code))

    threads = [threading.Thread(target=send_many) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not mixed_up


def test_a_request_waiting_for_a_busy_connection_gives_up_at_its_timeout(serve: Any) -> None:
    _, connection = serve(lambda number, cid: None)

    def hold_the_connection() -> None:
        with pytest.raises(TransportError):
            connection.exchange(_heartbeat_request(), 3.0)

    parked = threading.Thread(target=hold_the_connection)
    parked.start()
    time.sleep(0.3)  # the first request holds the connection, unanswered
    started = time.monotonic()
    with pytest.raises(TransportError, match="busy"):
        connection.exchange(_heartbeat_request(), 0.5)
    assert time.monotonic() - started < 2.0
    parked.join(10)


def test_descriptors_above_1023_do_not_cost_a_connection_per_request(serve: Any) -> None:
    # select() refuses such descriptors; a process with many members and files has them.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        broker, connection = serve(lambda number, cid: _heartbeat_answer(cid))
        for _ in range(3):
            assert connection.exchange(_heartbeat_request(), 5.0).error_code == 0
        assert broker.connections == 1
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_closing_cuts_a_connect_short() -> None:
    # A listener whose accept queue is full drops further connection attempts, as a
    # black-holed address does: the connect would wait for its whole timeout.
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        port = full.getsockname()[1]
        queued = socket.create_connection(("127.0.0.1", port))
        settings = _settings()
        settings.connect_timeout_s = 20.0
        connection = DirectConnection("coordinator-1", "127.0.0.1", port, settings)
        took = _closed_while_waiting(connection, 0.5)  # 0.5 s: connecting
        queued.close()
    assert took < 2.0


def test_a_broker_without_the_request_is_a_transport_error(serve: Any) -> None:
    # The scripted broker knows only ApiVersions and Heartbeat.
    broker, _ = serve(lambda number, cid: _heartbeat_answer(cid))
    transport = KafkaTransport(
        client_id="test",
        request_timeout_ms=1000,
        connection={"bootstrap_servers": f"127.0.0.1:{broker.port}"},
    )
    try:
        node = transport.dedicated_node("admin", 1, "127.0.0.1", broker.port)
        join = _join_request()
        with pytest.raises(TransportError, match="does not support"):
            transport.send_kafka(join, node_id=node, timeout_s=5.0)
        heartbeat = transport.send_kafka(_heartbeat_request(), node_id=node, timeout_s=5.0)
        assert heartbeat.error_code == 0
    finally:
        transport.close()


def _closed_while_waiting(connection: DirectConnection, wait_s: float) -> float:
    """Start a request on another thread, close the connection ``wait_s`` later, and return
    how long the request took to fail after the close (it must fail with a TransportError)."""
    failures: list[BaseException] = []

    def send() -> None:
        try:
            connection.exchange(_heartbeat_request(), 30.0)
        except BaseException as e:
            failures.append(e)

    waiting = threading.Thread(target=send)
    waiting.start()
    time.sleep(wait_s)
    started = time.monotonic()
    connection.close()
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(failures) == 1 and isinstance(failures[0], TransportError)
    return time.monotonic() - started


def test_closing_wakes_a_request_waiting_for_its_answer(serve: Any) -> None:
    _, connection = serve(lambda number, cid: None)
    assert _closed_while_waiting(connection, 0.3) < 2.0  # 0.3 s: it has sent, and waits
    with pytest.raises(TransportError, match="closed"):
        connection.exchange(_heartbeat_request(), 1.0)


class _RefusedCertificate(ssl.SSLContext):
    """A client context whose handshake refuses the broker's certificate, as a real one does
    for a broker whose certificate does not name it or was signed by another CA."""

    reason = "Hostname mismatch, certificate is not valid for 'broker-2'."
    handshakes = 0

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:
        type(self).handshakes += 1
        error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {self.reason}")
        error.verify_code = 62
        error.verify_message = self.reason
        raise error


def test_a_certificate_the_coordinator_presents_and_tls_refuses_stops_the_member(
    serve: Any,
) -> None:
    # Bootstrap worked, then the coordinator (another broker) presents a certificate the
    # settings do not accept: retrying cannot fix it, so the member stops with TlsError
    # naming the setting, as it does when every bootstrap server shows it.
    broker, _ = serve(lambda number, cid: _heartbeat_answer(cid))
    settings = _settings()
    settings.tls = _RefusedCertificate(ssl.PROTOCOL_TLS_CLIENT)
    connection = DirectConnection("coordinator-2", "127.0.0.1", broker.port, settings)
    with pytest.raises(TransportError) as raised:
        connection.exchange(_heartbeat_request(), 2.0)
    assert raised.value.fatal and raised.value.error_type is TlsError
    stop = raised.value.stop_error("heartbeat")
    assert isinstance(stop, TlsError)
    assert "TLS certificate not accepted (Hostname mismatch" in str(stop)
    assert "connect by a name the certificate lists" in str(stop)


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


def test_a_new_coordinator_retires_the_connection_to_the_former_one(serve: Any) -> None:
    former, _ = serve(lambda number, cid: _heartbeat_answer(cid))
    current, _ = serve(lambda number, cid: _heartbeat_answer(cid))
    transport = KafkaTransport(
        client_id="test", request_timeout_ms=1000, connection={"bootstrap_servers": "x:1"}
    )
    try:
        for node_id, broker in ((1, former), (2, current)):
            node = transport.dedicated_node(
                "coordinator", node_id, "127.0.0.1", broker.port, single=True
            )
            assert (
                transport.send_kafka(_heartbeat_request(), node_id=node, timeout_s=5).error_code
                == 0
            )
        admin = transport.dedicated_node("admin", 1, "127.0.0.1", former.port)
        transport.send_kafka(_heartbeat_request(), node_id=admin, timeout_s=5)
        # Only the coordinator's purpose has one broker at a time.
        assert sorted(transport._direct) == ["admin-1", "coordinator-2"]
    finally:
        transport.close()


# ------------------------------------------------------------ two requests back to back


def test_the_second_request_goes_out_before_the_first_is_answered(serve: Any) -> None:
    # The broker answers nothing until the second request is there: a connection that
    # waited for the first answer before sending the second would never get one.
    held: list[int] = []

    def answer_both_once_both_are_in(number: int, cid: int) -> bytes | None:
        if not held:
            held.append(cid)
            return None
        return _heartbeat_answer(held[0], error_code=0) + _heartbeat_answer(cid, error_code=27)

    _, connection = serve(answer_both_once_both_are_in)
    first, second = connection.exchange_pair(_heartbeat_request(), _heartbeat_request(), 2.0)
    assert (first.error_code, second.error_code) == (0, 27)


def test_a_second_request_left_unanswered_is_its_error_and_the_connection_is_replaced(
    serve: Any,
) -> None:
    def only_the_first_on_the_first_connection(number: int, cid: int) -> bytes | None:
        return _heartbeat_answer(cid) if number > 1 or cid == 2 else None

    broker, connection = serve(only_the_first_on_the_first_connection)
    first, second = connection.exchange_pair(_heartbeat_request(), _heartbeat_request(), 0.5)
    assert first.error_code == 0
    assert isinstance(second, TransportError)
    # Its answer may still come: the next request must not read it as its own.
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 0
    assert broker.connections == 2


def test_a_first_request_left_unanswered_fails_both(serve: Any) -> None:
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid) if number > 1 else None)
    with pytest.raises(TransportError):
        connection.exchange_pair(_heartbeat_request(), _heartbeat_request(), 0.5)
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 0
    assert broker.connections == 2


def test_a_second_request_the_broker_lacks_is_not_sent_and_the_first_still_is(
    serve: Any,
) -> None:
    asked: list[int] = []

    def answer(number: int, cid: int) -> bytes:
        asked.append(cid)
        return _heartbeat_answer(cid)

    _, connection = serve(answer)
    join = _join_request()
    first, second = connection.exchange_pair(_heartbeat_request(), join, 2.0)
    assert first.error_code == 0
    assert isinstance(second, TransportError) and "does not support" in str(second)
    assert len(asked) == 1  # only the heartbeat reached the broker


class _FollowUp:
    """A heartbeat offered to ride with a request to broker 1."""

    def __init__(self, *, leads: bool) -> None:
        self.broker_id = 1
        self.leads = leads
        self.answers: list[Any] = []

    def request(self) -> Any:
        return _heartbeat_request()

    def answered(self, response: Any) -> None:
        self.answers.append(response)


@pytest.mark.parametrize("leads", [False, True], ids=["behind", "ahead"])
def test_a_follow_up_goes_behind_the_request_or_ahead_of_it(serve: Any, leads: bool) -> None:
    # The broker handles a connection's requests in order: the first it reads is answered
    # NONE, the second REBALANCE_IN_PROGRESS (27).
    read: list[int] = []

    def answer_in_order(number: int, cid: int) -> bytes:
        read.append(cid)
        return _heartbeat_answer(cid, error_code=0 if len(read) == 1 else 27)

    broker, _ = serve(answer_in_order)
    transport = KafkaTransport(
        client_id="test", request_timeout_ms=1000, connection={"bootstrap_servers": "x:1"}
    )
    follow_up = _FollowUp(leads=leads)
    try:
        response = transport.send(
            m.HeartbeatRequest("g", 1, "m", None),
            m.HeartbeatResponse,
            coordinator=CoordinatorNode(1, "127.0.0.1", broker.port),
            timeout_s=5,
            then=follow_up,
        )
    finally:
        transport.close()
    (answer,) = follow_up.answers
    order = (
        (answer.error_code, response.error_code)
        if leads
        else (response.error_code, answer.error_code)
    )
    assert order == (0, 27)
    assert len(read) == 2


# ------------------------------------------------------------ a request answered later


def test_a_request_sent_ahead_is_answered_when_taken_and_frees_the_connection(
    serve: Any,
) -> None:
    # The broker holds the first answer until told to: the request was out before its
    # answer was asked for, and ready() tells whether the answer is there without taking it.
    release = threading.Event()
    asked: list[int] = []

    def held_first(number: int, cid: int) -> bytes:
        asked.append(cid)
        if len(asked) == 1:
            release.wait(5)
        return _heartbeat_answer(cid, error_code=27 if len(asked) == 1 else 0)

    broker, connection = serve(held_first)
    outstanding = connection.send_ahead(_heartbeat_request(), 5.0)
    assert not outstanding.ready(0.2)
    release.set()
    assert outstanding.ready(2.0)
    assert outstanding.answer().error_code == 27
    # The connection is free again, and the same one.
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 0
    assert broker.connections == 1


def test_an_exchange_waits_for_the_answer_of_a_request_sent_ahead(serve: Any) -> None:
    # Another thread's exchange must not read the answer owed to the request sent ahead.
    asked: list[int] = []

    def numbered(number: int, cid: int) -> bytes:
        asked.append(cid)
        return _heartbeat_answer(cid, error_code=len(asked))  # 1, 2: which request it was

    _, connection = serve(numbered)
    outstanding = connection.send_ahead(_heartbeat_request(), 5.0)
    time.sleep(0.2)  # its answer is there, unread
    got: list[int] = []
    other = threading.Thread(
        target=lambda: got.append(connection.exchange(_heartbeat_request(), 5.0).error_code)
    )
    other.start()
    other.join(0.3)
    assert other.is_alive() and not got  # waits while the connection is reserved
    assert outstanding.answer().error_code == 1
    other.join(5)
    assert got == [2]


def test_an_abandoned_request_closes_its_connection(serve: Any) -> None:
    # Its answer, arriving late, must never be read as the next request's.
    late = threading.Event()

    def slow_first(number: int, cid: int) -> bytes:
        if number == 1:
            late.wait(5)
        return _heartbeat_answer(cid, error_code=27 if number == 1 else 0)

    broker, connection = serve(slow_first)
    connection.send_ahead(_heartbeat_request(), 5.0).abandon()
    late.set()
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 0
    assert broker.connections == 2


def test_a_request_sent_ahead_without_an_answer_in_time_fails_and_the_connection_is_replaced(
    serve: Any,
) -> None:
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid) if number > 1 else None)
    outstanding = connection.send_ahead(_heartbeat_request(), 0.3)
    began = time.monotonic()
    assert outstanding.ready(5.0)  # its time is up: taking it does not wait
    assert 0.2 < time.monotonic() - began < 2.0
    with pytest.raises(TransportError):
        outstanding.answer()
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 0
    assert broker.connections == 2


def test_an_answer_that_came_in_time_is_read_however_late_it_is_taken(serve: Any) -> None:
    # The application may work longer than the request's timeout before the next poll takes
    # the answer fetched ahead: it is there, and must not be thrown away as timed out.
    broker, connection = serve(lambda number, cid: _heartbeat_answer(cid, error_code=27))
    outstanding = connection.send_ahead(_heartbeat_request(), 0.3)
    time.sleep(0.6)
    assert outstanding.ready(0.0)
    assert outstanding.answer().error_code == 27
    assert connection.exchange(_heartbeat_request(), 2.0).error_code == 27
    assert broker.connections == 1
