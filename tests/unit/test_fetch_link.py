"""A leader's fetch connection (coordination/_fetch/link.py): a Fetch is sent by begin() and
its answer read by a later finish(), so the lean fetcher can return to the application
while the broker holds the Fetch. A scripted broker on loopback plays the leader; on real
brokers tests/integration/test_lean_fetcher.py covers the same connections.
"""

from __future__ import annotations

import select
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.consumer.fetch import FetchResponse as KafkaFetchResponse

from coordination._fetch.link import FetchLink
from coordination._protocol import fetch_codec as codec
from coordination.transport import TransportError

from .test_direct_connection import ScriptedBroker, _settings

FETCH = (codec.FETCH_KEY, 4, 17)
VERSION = 17  # the highest both sides speak here
REQUEST = codec.FetchRequest(
    max_wait_ms=500,
    min_bytes=1,
    max_bytes=1 << 20,
    isolation_level=codec.READ_UNCOMMITTED,
    session_id=0,
    session_epoch=0,
    topics=(),
)


def _answer(correlation_id: int, session_id: int) -> bytes:
    """A framed FetchResponse v17 (response header v1) opening session ``session_id``."""
    body = KafkaFetchResponse(
        throttle_time_ms=0, error_code=0, session_id=session_id, responses=[]
    ).encode(version=VERSION)
    data = struct.pack(">i", correlation_id) + b"\x00" + bytes(body)
    return struct.pack(">i", len(data)) + data


def _readable(link: FetchLink, timeout_s: float) -> bool:
    fd = link.fileno()
    assert fd is not None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


Links = list[tuple[ScriptedBroker, FetchLink]]


@pytest.fixture
def links() -> Iterator[Links]:
    made: Links = []
    yield made
    for broker, link in made:
        link.close()
        broker.close()


def _start(
    made: Links,
    script: object,
    apis: tuple[tuple[int, int, int], ...] = (FETCH,),
) -> tuple[ScriptedBroker, FetchLink]:
    broker = ScriptedBroker(script, apis=apis)  # type: ignore[arg-type]
    link = FetchLink("fetch 1", "127.0.0.1", broker.port, _settings())
    made.append((broker, link))
    return broker, link


def test_a_fetch_is_sent_at_once_and_its_answer_read_when_it_comes(links: Links) -> None:
    release = threading.Event()

    def script(number: int, correlation_id: int) -> bytes:
        release.wait(10)  # the broker holds the Fetch (a long poll)
        return _answer(correlation_id, session_id=40 + number)

    broker, link = _start(links, script)
    link.begin(REQUEST, timeout_s=2)
    assert link.in_flight and link.sent_at is not None
    assert not link.answer_buffered()
    assert not _readable(link, 0.2)  # begin() returned while the broker holds it
    release.set()
    assert _readable(link, 5)
    response = link.finish(timeout_s=2)
    assert response.session_id == 41
    assert not link.in_flight and link.sent_at is None
    # The next Fetch goes on the same connection.
    link.begin(REQUEST, timeout_s=2)
    assert link.finish(timeout_s=2).session_id == 41
    assert broker.connections == 1


def test_an_abandoned_fetch_closes_the_connection_and_its_answer_is_never_read(
    links: Links,
) -> None:
    first = threading.Event()

    def script(number: int, correlation_id: int) -> bytes | None:
        if number == 1:
            first.wait(10)  # answered only after the link gave up on it
        return _answer(correlation_id, session_id=number)

    broker, link = _start(links, script)
    link.begin(REQUEST, timeout_s=2)
    link.abandon()
    assert not link.in_flight and link.fileno() is None
    first.set()
    link.begin(REQUEST, timeout_s=2)
    assert link.finish(timeout_s=2).session_id == 2  # the second connection's answer
    assert broker.connections == 2


def test_a_fetch_left_unanswered_fails_at_its_timeout_and_the_next_reconnects(
    links: Links,
) -> None:
    def script(number: int, correlation_id: int) -> bytes | None:
        return None if number == 1 else _answer(correlation_id, session_id=number)

    broker, link = _start(links, script)
    link.begin(REQUEST, timeout_s=2)
    with pytest.raises(TransportError, match="no answer"):
        link.finish(timeout_s=0.3)
    assert not link.in_flight and link.fileno() is None
    link.begin(REQUEST, timeout_s=2)
    assert link.finish(timeout_s=2).session_id == 2
    assert broker.connections == 2


def test_a_broker_without_fetch_v12_is_a_fatal_error_naming_the_default_fetcher(
    links: Links,
) -> None:
    _, link = _start(links, lambda number, cid: None, apis=((codec.FETCH_KEY, 0, 11),))
    with pytest.raises(TransportError, match="use the default fetcher") as raised:
        link.begin(REQUEST, timeout_s=2)
    assert raised.value.fatal
    assert not link.in_flight and link.fileno() is None


def test_a_wakeup_from_another_thread_ends_a_poll_waiting_for_a_held_fetch(
    links: Links,
) -> None:
    from coordination._fetch.engine import FetchEngine
    from coordination._fetch.settings import fetch_settings
    from recipes.partitioning import TopicPartition

    from .test_lean_fetcher import FakeCluster

    # The leader holds the Fetch (nothing to read): without a wakeup the poll waits out
    # its 10 s; the wakeup's byte on the engine's socket pair ends the wait.
    broker = ScriptedBroker(lambda number, cid: None, apis=(FETCH,))
    made: list[FetchLink] = []

    def link(node: int, host: str, port: int) -> FetchLink:
        made.append(FetchLink(f"fetch {node}", "127.0.0.1", broker.port, _settings()))
        links.append((broker, made[-1]))
        return made[-1]

    settings = fetch_settings({"bootstrap_servers": "b1:9092"}, connect=False)
    engine: FetchEngine[TopicPartition] = FetchEngine(settings, FakeCluster(), link)
    partition = TopicPartition("orders", 0)
    engine.assign([partition])
    engine.seek(partition, 10)
    threading.Timer(0.3, engine.wakeup).start()
    started = time.monotonic()
    assert engine.poll(10_000) == {}
    assert time.monotonic() - started < 5
    assert made and made[0].in_flight  # the Fetch stays out, its answer read by a later poll
    engine.close()
    engine.wakeup()  # after close: nothing to wake, no error
