"""The lean fetcher's engine (coordination/_fetch) on a fake cluster and fake leader
connections, with a manual clock: fetch sessions (KIP-227), the error table row by row,
stale answers, throttling, a dropped connection, and the settings it refuses."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kafka.record import MemoryRecordsBuilder

from coordination._fetch import classify
from coordination._fetch.cluster import EARLIEST, LATEST, Metadata, Partition
from coordination._fetch.engine import FetchEngine
from coordination._fetch.settings import fetch_settings
from coordination._protocol import fetch_codec as codec
from coordination._protocol import record_batches
from coordination.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionFailedError,
    CoordinatorStateError,
    ProtocolCodecError,
    TopicAuthorizationError,
)
from coordination.transport import TransportError
from recipes.partitioning import Consumer, TopicPartition

T = "orders"
TID = uuid.UUID("0f8fad5b-d9cb-469f-a161-4f4c1b5d0e11")
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)


def records(first: int, count: int) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 16, offset=first)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, None, f"v{first + i}".encode(), [])
    builder.close()
    return bytes(builder.buffer())


class FakeCluster:
    def __init__(self) -> None:
        self.metadata = Metadata()
        self.leaders: dict[Partition, tuple[int, int]] = {(T, 0): (1, 5), (T, 1): (1, 5)}
        self.refreshes = 0
        self.offsets: dict[tuple[Partition, int], tuple[int, int]] = {}
        self.asked: list[tuple[int, dict[Partition, tuple[int, int]]]] = []
        self.topic_errors: dict[str, int] = {}
        self.isolation = -1
        # OffsetForLeaderEpoch: (error, epoch, end offset) per partition; absent: the end of
        # the epoch asked is far ahead (no truncation).
        self.epoch_answers: dict[Partition, tuple[int, int, int]] = {}
        self.epochs_asked: list[tuple[int, dict[Partition, tuple[int, int]]]] = []

    def refresh(self, topics: Any, timeout_s: float) -> None:
        self.refreshes += 1
        m = self.metadata
        m.brokers = {1: ("b1", 9092), 2: ("b2", 9092)}
        m.topic_ids, m.topic_names = {T: TID}, {TID: T}
        m.leaders = dict(self.leaders)
        m.topic_errors = dict(self.topic_errors)

    def list_offsets(
        self, node: int, wanted: Mapping[Partition, tuple[int, int]], isolation: int, t: float
    ) -> dict[Partition, tuple[int, int]]:
        self.asked.append((node, dict(wanted)))
        self.isolation = isolation
        return {tp: self.offsets.get((tp, ts), (0, 0)) for tp, (ts, _) in wanted.items()}

    def epoch_ends(
        self, node: int, wanted: Mapping[Partition, tuple[int, int]], t: float
    ) -> dict[Partition, tuple[int, int, int]]:
        self.epochs_asked.append((node, dict(wanted)))
        return {tp: self.epoch_answers.get(tp, (0, e, 1 << 40)) for tp, (e, _) in wanted.items()}

    def close(self) -> None:
        pass


class FakeLink:
    def __init__(self, node: int) -> None:
        self.node = node
        self.sent: list[codec.FetchRequest] = []
        self.answers: list[codec.FetchResponse | TransportError] = []
        self.sent_at: float | None = None
        self.closed = False
        self._in_flight = False

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def begin(self, request: codec.FetchRequest, timeout_s: float) -> None:
        assert not self._in_flight and not self.closed
        self.sent.append(request)
        self._in_flight = True
        self.sent_at = 0.0

    def fileno(self) -> int | None:
        return None

    def answer_buffered(self) -> bool:
        return bool(self.answers)

    def finish(self, timeout_s: float) -> codec.FetchResponse:
        self._in_flight = False
        answer = self.answers.pop(0)
        if isinstance(answer, TransportError):
            raise answer
        return answer

    def abandon(self) -> None:
        self._in_flight = False

    def close(self) -> None:
        self.closed = True


_HARNESSES: list[Harness] = []


@pytest.fixture(autouse=True)
def _engines_closed() -> Iterator[None]:
    """Each test's engines closed at its end (their wake-up socket pairs with them)."""
    yield
    while _HARNESSES:
        _HARNESSES.pop().fetcher.close()


class Harness:
    def __init__(self, **config: Any) -> None:
        self.now = 0.0
        self.cluster = FakeCluster()
        self.links: list[FakeLink] = []
        settings = fetch_settings(
            {"bootstrap_servers": "b1:9092", "retry_backoff_ms": 100, **config}, connect=False
        )
        self.fetcher: FetchEngine[TopicPartition] = FetchEngine(
            settings, self.cluster, self._link, clock=lambda: self.now, sleep=self._sleep
        )
        _HARNESSES.append(self)

    def _link(self, node: int, host: str, port: int) -> FakeLink:
        link = FakeLink(node)
        self.links.append(link)
        return link

    def _sleep(self, seconds: float) -> None:
        self.now += seconds

    def link(self, node: int = 1) -> FakeLink:
        return [link for link in self.links if link.node == node][-1]

    def answer(self, node: int = 1, *, error: int = 0, session_id: int = 0, throttle: int = 0,
               parts: tuple[codec.FetchPartitionData, ...] = ()) -> None:  # fmt: skip
        topics = (codec.FetchTopicResponse(None, TID, parts),) if parts else ()
        response = codec.FetchResponse(throttle, error, session_id, topics)
        self.link(node).answers.append(response)

    def poll(self, timeout_ms: int = 0) -> dict[int, list[int]]:
        got = self.fetcher.poll(timeout_ms)
        for tp in got:
            assert type(tp) is TopicPartition  # keyed by the objects assign() was given
        return {tp.partition: [r.offset for r in batch] for tp, batch in got.items()}


def data(partition: int, first: int = 0, count: int = 0, *, error: int = 0, hw: int = 100,
         leader: codec.LeaderIdAndEpoch | None = None) -> codec.FetchPartitionData:  # fmt: skip
    return codec.FetchPartitionData(
        partition, error, hw, records=records(first, count) if count else None,
        current_leader=leader,
    )  # fmt: skip


def sent_partitions(request: codec.FetchRequest) -> dict[int, int]:
    return {p.partition: p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request: codec.FetchRequest) -> list[int]:
    return [i for t in request.forgotten for i in t.partitions]


def started(**config: Any) -> Harness:
    """A harness with P0 at 10 and P1 at 20, their first Fetch sent."""
    h = Harness(**config)
    h.fetcher.assign([P0, P1])
    h.fetcher.seek(P0, 10)
    h.fetcher.seek(P1, 20)
    assert h.poll() == {}
    return h


# -- fetch sessions ------------------------------------------------------------------------


def test_a_session_opens_with_a_full_fetch_then_sends_only_what_changed() -> None:
    h = started()
    first = h.link().sent[0]
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert sent_partitions(first) == {0: 10, 1: 20}
    assert [t.topic_id for t in first.topics] == [TID]
    assert [p.current_leader_epoch for t in first.topics for p in t.partitions] == [5, 5]
    h.answer(session_id=9, parts=(data(0, 10, 3), data(1, hw=20)))
    assert h.poll() == {0: [10, 11, 12]}
    h.poll()  # the next Fetch: P0 moved, P1 did not
    second = h.link().sent[1]
    assert (second.session_id, second.session_epoch) == (9, 1)
    assert sent_partitions(second) == {0: 13}
    h.answer(session_id=9, parts=(data(1, 20, 1),))
    h.fetcher.assign([P1])  # P0 leaves: forgotten by the session
    assert h.poll() == {1: [20]}
    third = h.link().sent[2]
    assert (third.session_id, third.session_epoch) == (9, 2)
    assert sent_partitions(third) == {1: 21} and forgotten(third) == [0]


def test_a_wakeup_ends_a_poll_at_once_and_keeps_its_fetch_in_flight() -> None:
    h = started()
    h.fetcher.wakeup()  # from another thread, before or while this poll waits
    assert h.poll(1000) == {}
    assert h.now == 0.0  # not waited out
    assert h.link().in_flight and len(h.link().sent) == 1
    h.answer(session_id=9, parts=(data(0, 10, 2),))
    assert h.poll(1000) == {0: [10, 11]}  # the same Fetch's answer
    assert h.poll(0) == {} and h.now == 0.0  # one wakeup ends one poll


def test_without_sessions_every_fetch_is_full_and_sessionless() -> None:
    h = started(enable_incremental_fetch_sessions=False)
    h.answer(session_id=0, parts=(data(0, 10, 1),))
    h.poll()
    for request in h.link().sent:
        assert (request.session_id, request.session_epoch) == (0, -1)
        assert set(sent_partitions(request)) == {0, 1}


@pytest.mark.parametrize(
    "code", [classify.FETCH_SESSION_ID_NOT_FOUND, classify.INVALID_FETCH_SESSION_EPOCH]
)
def test_a_lost_session_is_opened_again_with_a_full_fetch(code: int) -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 1),))
    h.poll()
    h.answer(error=code, session_id=0)
    assert h.poll() == {}
    assert len(h.link().sent) == 2  # the backoff runs
    h.now += 0.2
    h.poll()
    again = h.link().sent[2]
    # A session the broker lost is not closed; one it refused an epoch of is (id 9, epoch
    # 0: close it and open another), else it would hold a slot of the broker's cache.
    closing = 0 if code == classify.FETCH_SESSION_ID_NOT_FOUND else 9
    assert (again.session_id, again.session_epoch) == (closing, 0)
    assert sent_partitions(again) == {0: 11, 1: 20}


def test_a_dropped_connection_reconnects_with_a_new_session_after_a_backoff() -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 1),))
    h.poll()
    refreshes = h.cluster.refreshes
    h.link().answers.append(TransportError("closed by the broker"))
    assert h.poll() == {}  # not an error for the caller
    assert h.links[0].closed and len(h.links) == 1
    h.now += 0.04  # reconnect_backoff_ms: 50
    h.poll()
    assert len(h.links) == 1
    h.now += 0.02
    h.poll()
    assert len(h.links) == 2 and h.cluster.refreshes == refreshes + 1
    again = h.link().sent[0]
    assert (again.session_id, again.session_epoch) == (9, 0)  # closes the old session
    assert sent_partitions(again) == {0: 11, 1: 20}


def test_a_throttled_answer_holds_the_next_fetch_back() -> None:
    h = started()
    h.answer(session_id=9, throttle=1000, parts=(data(0, 10, 1),))
    assert h.poll() == {0: [10]}
    h.now += 0.9
    h.poll()
    assert len(h.link().sent) == 1
    h.now += 0.2
    h.poll()
    assert len(h.link().sent) == 2


# -- partition errors, row by row ----------------------------------------------------------

REFRESH_CODES = [
    classify.NOT_LEADER_OR_FOLLOWER,
    classify.LEADER_NOT_AVAILABLE,
    classify.UNKNOWN_TOPIC_OR_PARTITION,
    classify.FENCED_LEADER_EPOCH,
    classify.UNKNOWN_TOPIC_ID,
    classify.KAFKA_STORAGE_ERROR,
    classify.REPLICA_NOT_AVAILABLE,
    classify.OFFSET_NOT_AVAILABLE,
    classify.INCONSISTENT_TOPIC_ID,
]


@pytest.mark.parametrize("code", REFRESH_CODES)
def test_a_moved_or_unknown_partition_is_looked_up_again_and_fetched_from_its_leader(
    code: int,
) -> None:
    h = started()
    refreshes = h.cluster.refreshes
    h.cluster.leaders[(T, 0)] = (2, 6)  # the new leader, as the next lookup says
    h.answer(session_id=9, parts=(data(0, error=code), data(1, 20, 2)))
    assert h.poll() == {1: [20, 21]}  # the others go on
    assert h.poll() == {}
    assert [sent_partitions(r) for r in h.link(1).sent[1:]] == [{1: 22}]
    assert forgotten(h.link(1).sent[1]) == [0]  # dropped from the old leader's session
    h.now += 0.2
    h.poll()
    assert h.cluster.refreshes == refreshes + 1
    (moved,) = h.link(2).sent
    assert sent_partitions(moved) == {0: 10}
    assert [p.current_leader_epoch for t in moved.topics for p in t.partitions] == [6]


def test_a_new_leader_named_in_the_answer_is_used_without_a_lookup() -> None:
    h = started()
    refreshes = h.cluster.refreshes
    leader = codec.LeaderIdAndEpoch(2, 7)
    h.answer(session_id=9, parts=(data(0, error=classify.NOT_LEADER_OR_FOLLOWER, leader=leader),))
    h.poll()
    h.now += 0.2
    h.poll()
    assert h.cluster.refreshes == refreshes
    assert sent_partitions(h.link(2).sent[0]) == {0: 10}


@pytest.mark.parametrize(
    "code",
    [classify.UNKNOWN_LEADER_EPOCH, classify.UNKNOWN_SERVER_ERROR, classify.REQUEST_TIMED_OUT],
)
def test_a_transient_error_retries_the_same_fetch_after_a_backoff(code: int) -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, error=code),))
    assert h.poll() == {}
    h.answer(session_id=9)  # the long poll for the others (one Fetch per leader at a time)
    h.poll()
    assert 0 not in sent_partitions(h.link().sent[-1])  # the backoff runs
    h.answer(session_id=9)
    h.now += 0.2
    h.poll()
    assert sent_partitions(h.link().sent[-1]) == {0: 10}


def test_topic_authorization_failed_is_raised_as_the_librarys_typed_error() -> None:
    h = started(group_id="g")
    h.answer(session_id=9, parts=(data(0, error=classify.TOPIC_AUTHORIZATION_FAILED),))
    with pytest.raises(TopicAuthorizationError) as caught:
        h.poll()
    assert caught.value.code == 29 and "orders-0" in str(caught.value)
    assert h.poll() == {}  # raised once; retried after the backoff


@pytest.mark.parametrize("code", [classify.CORRUPT_MESSAGE, 12345])
def test_a_code_retrying_cannot_fix_is_raised(code: int) -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, error=code),))
    with pytest.raises(BrokerError):
        h.poll()


def test_an_unlisted_code_is_fatal_as_in_kafkas_consumer() -> None:
    assert classify.partition_outcome(12345) is classify.Outcome.FATAL
    assert classify.session_outcome(12345) is classify.SessionOutcome.NEW_SESSION


# -- offsets: out of range, resets, stale answers --------------------------------------------


@pytest.mark.parametrize(
    ("reset", "timestamp", "start"), [("earliest", EARLIEST, 3), ("latest", LATEST, 50)]
)
def test_an_out_of_range_position_is_reset_per_auto_offset_reset(
    reset: str, timestamp: int, start: int
) -> None:
    h = started(auto_offset_reset=reset)
    h.cluster.offsets[((T, 0), timestamp)] = (0, start)
    h.answer(session_id=9, parts=(data(0, error=classify.OFFSET_OUT_OF_RANGE),))
    h.poll()
    assert h.cluster.asked[-1] == (1, {(T, 0): (timestamp, 5)})
    assert h.fetcher.position(P0, 0) == start
    assert sent_partitions(h.link().sent[-1]) == {0: start}


def test_an_out_of_range_answer_for_a_position_sought_meanwhile_resets_nothing() -> None:
    h = started(auto_offset_reset="earliest")
    h.fetcher.seek(P0, 40)  # while the Fetch from 10 is in flight
    h.answer(session_id=9, parts=(data(0, error=classify.OFFSET_OUT_OF_RANGE),))
    h.poll()
    assert h.cluster.asked == [] and h.fetcher.position(P0, 0) == 40
    assert sent_partitions(h.link().sent[-1])[0] == 40


def test_with_reset_none_an_out_of_range_position_raises_and_stays() -> None:
    h = started(auto_offset_reset="none")
    h.answer(session_id=9, parts=(data(0, error=classify.OFFSET_OUT_OF_RANGE),))
    with pytest.raises(BrokerError) as caught:
        h.poll()
    assert caught.value.code == 1 and "offset 10" in str(caught.value)
    assert h.fetcher.position(P0, 0) == 10 and h.cluster.asked == []


def test_with_reset_none_a_partition_never_sought_has_no_position() -> None:
    h = Harness(auto_offset_reset="none")
    h.fetcher.assign([P0])
    with pytest.raises(CoordinatorStateError, match="seek it first"):
        h.fetcher.position(P0, 0)


def test_a_stale_answer_after_a_seek_never_moves_the_position() -> None:
    h = started()
    h.fetcher.seek(P0, 5)  # backward, while the Fetch from 10 is in flight
    h.answer(session_id=9, parts=(data(0, 10, 5),))
    assert h.poll() == {}
    assert h.fetcher.position(P0, 0) == 5
    h.answer(session_id=9, parts=(data(0, 5, 2),))
    assert h.poll() == {0: [5, 6]}


def test_a_seek_to_the_position_keeps_what_is_buffered_and_in_flight() -> None:
    h = started(max_poll_records=2)
    h.answer(session_id=9, parts=(data(0, 10, 5),))
    assert h.poll() == {0: [10, 11]}
    h.fetcher.seek(P0, 12)  # where it is: kept
    assert h.poll() == {0: [12, 13]}
    h.fetcher.seek(P0, 10)  # elsewhere: dropped
    assert h.poll() == {}


def test_assign_keeps_the_positions_and_records_of_kept_partitions() -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 3), data(1, 20, 1)))
    h.fetcher.assign([P0, P1])
    assert h.poll() == {0: [10, 11, 12], 1: [20]}
    h.fetcher.assign([TopicPartition(T, 1)])  # an equal object
    assert h.fetcher.position(P1, 0) == 21


def test_the_start_position_comes_from_list_offsets() -> None:
    h = Harness(auto_offset_reset="earliest")
    h.cluster.offsets[((T, 1), EARLIEST)] = (0, 7)
    h.fetcher.assign([P1])
    assert h.fetcher.position(P1, 1000) == 7


def test_max_poll_records_spans_partitions_and_takes_turns() -> None:
    h = started(max_poll_records=4)
    h.answer(session_id=9, parts=(data(0, 10, 3), data(1, 20, 3)))
    first = h.poll()
    second = h.poll()
    assert sum(map(len, first.values())) == 4 and sum(map(len, second.values())) == 2
    assert sorted(first.get(0, []) + second.get(0, [])) == [10, 11, 12]
    assert sorted(first.get(1, []) + second.get(1, [])) == [20, 21, 22]


def test_highwater_is_the_last_answers() -> None:
    h = started()
    assert h.fetcher.highwater(P0) is None
    h.answer(session_id=9, parts=(data(0, 10, 1, hw=77),))
    h.poll()
    assert h.fetcher.highwater(P0) == 77


def test_a_deserializer_error_leaves_the_position_at_its_record() -> None:
    def value(data: bytes | None) -> str:
        if data == b"v11":
            raise ValueError("bad record")
        return (data or b"").decode()

    h = started(value_deserializer=value, max_poll_records=1)
    h.answer(session_id=9, parts=(data(0, 10, 2),))
    assert h.poll() == {0: [10]}
    with pytest.raises(ValueError, match="bad record"):
        h.poll()
    assert h.fetcher.position(P0, 0) == 11


def test_a_batch_compressed_with_a_missing_codec_names_the_package(monkeypatch) -> None:
    monkeypatch.setitem(record_batches._CODECS, 1, ("gzip", lambda: False, lambda b: b))
    h = started()
    builder = MemoryRecordsBuilder(2, 1, 1 << 16, offset=10)
    for _ in range(50):  # kafka-python sends a batch that gzip does not shrink uncompressed
        builder.append(1_700_000_000_000, None, b"x" * 100, [])
    builder.close()
    batch = bytes(builder.buffer())
    assert int.from_bytes(batch[21:23], "big") & 0x07 == 1  # gzip
    gz = codec.FetchPartitionData(0, 0, 100, records=batch)
    h.answer(session_id=9, parts=(gz,))
    with pytest.raises(ProtocolCodecError, match=r"gzip.*install"):
        h.poll()


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("client_rack", "rack-a"),
        ("security_protocol", "SASL_SSL"),
        ("api_version", (3, 0)),
        ("proxy_url", "socks5://p:1080"),
    ],
)
def test_what_it_cannot_do_is_refused_by_name(setting: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"{setting}.*default fetcher"):
        fetch_settings({"bootstrap_servers": "b:9092", setting: value}, connect=False)


@pytest.mark.parametrize(
    ("setting", "settings"),
    [
        ("client_rack", {"client_rack": "rack-a"}),
        ("security_protocol", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                               "sasl_plain_username": "u", "sasl_plain_password": "p"}),
    ],
)  # fmt: skip
def test_a_lean_consumer_refuses_them_at_construction(setting: str, settings: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"{setting}.*default fetcher"):
        Consumer("g", topics=[T], bootstrap_servers="b:9092", fetcher="lean", **settings)


def test_unknown_and_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"does not know.*fetch_max_wait"):
        fetch_settings({"fetch_max_wait": 1}, connect=False)
    with pytest.raises(ConfigurationError, match="max_poll_records"):
        fetch_settings({"max_poll_records": 0}, connect=False)
    with pytest.raises(ConfigurationError, match="auto_offset_reset"):
        fetch_settings({"auto_offset_reset": "smallest"}, connect=False)
    with pytest.raises(ConfigurationError, match="isolation_level"):
        fetch_settings({"isolation_level": "committed"}, connect=False)


def test_the_consumer_takes_fetch_settings_with_the_lean_fetcher() -> None:
    c = Consumer(
        "g", topics=[T], bootstrap_servers="b:9092", fetcher="lean", max_poll_records=7,
        fetch_max_wait_ms=50, check_crcs=False,
    )  # fmt: skip
    assert c._lean and c._fetcher is None  # made by start()
    with pytest.raises(ConfigurationError, match=r"^fetcher= must be"):
        Consumer("g", topics=[T], bootstrap_servers="b:9092", fetcher="leaner")  # type: ignore[arg-type]


def test_a_lean_consumer_needs_the_system_clock() -> None:
    from coordination.testing import ManualClock

    with pytest.raises(ConfigurationError, match="system clock"):
        Consumer("g", topics=[T], bootstrap_servers="b:9092", fetcher="lean", clock=ManualClock())


def test_a_partition_without_a_leader_is_looked_up_with_a_growing_backoff() -> None:
    h = Harness()
    del h.cluster.leaders[(T, 1)]  # e.g. a topic being created
    h.fetcher.assign([P1])
    h.fetcher.seek(P1, 0)
    times = []
    for _ in range(40):
        before = h.cluster.refreshes
        h.poll(100)
        if h.cluster.refreshes > before:
            times.append(round(h.now, 2))
    assert h.now == pytest.approx(4.0)
    assert 5 <= len(times) <= 8  # 40 with a flat 100 ms backoff
    assert max(b - a for a, b in itertools.pairwise(times)) <= 1.11  # whole 100 ms polls
    h.cluster.leaders[(T, 1)] = (1, 5)
    h.now += 1.0
    h.poll()
    assert sent_partitions(h.link().sent[0]) == {1: 0}


def test_a_topic_that_may_not_be_read_raises_from_the_lookup() -> None:
    h = Harness(group_id="g")
    h.cluster.topic_errors[T] = classify.TOPIC_AUTHORIZATION_FAILED
    del h.cluster.leaders[(T, 0)]
    h.fetcher.assign([P0])
    h.fetcher.seek(P0, 0)
    with pytest.raises(TopicAuthorizationError):
        h.poll()


def test_a_lean_consumer_that_reaches_no_broker_fails_to_start_saying_so() -> None:
    import socket

    from coordination.errors import ConnectionFailedError

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Consumer(
        "g", topics=[T], bootstrap_servers=f"127.0.0.1:{port}", fetcher="lean",
        bootstrap_timeout_ms=500,
    )  # fmt: skip
    try:
        with pytest.raises(ConnectionFailedError, match="bootstrap"):
            c.start()
    finally:
        c.close(1)


def test_the_fetch_settings_are_what_the_requests_carry() -> None:
    h = started(fetch_max_wait_ms=250, fetch_min_bytes=64, fetch_max_bytes=1 << 22,
                max_partition_fetch_bytes=4096)  # fmt: skip
    request = h.link().sent[0]
    assert (request.max_wait_ms, request.min_bytes, request.max_bytes) == (250, 64, 1 << 22)
    assert request.isolation_level == codec.READ_UNCOMMITTED
    assert {p.partition_max_bytes for t in request.topics for p in t.partitions} == {4096}


@pytest.mark.parametrize("check_crcs", [True, False])
def test_check_crcs_refuses_a_batch_whose_crc_fails(check_crcs: bool) -> None:
    h = started(check_crcs=check_crcs)
    batch = bytearray(records(10, 2))
    at = batch.index(b"v11")
    batch[at : at + 3] = b"v1X"  # a value changed: the CRC no longer matches
    h.answer(session_id=9, parts=(codec.FetchPartitionData(0, 0, 100, records=bytes(batch)),))
    if check_crcs:
        with pytest.raises(ProtocolCodecError, match="CRC"):
            h.poll()
    else:
        assert h.poll() == {0: [10, 11]}


def test_read_committed_asks_for_committed_records_and_offsets() -> None:
    h = started(isolation_level="read_committed", auto_offset_reset="earliest")
    assert h.link().sent[0].isolation_level == codec.READ_COMMITTED
    h.fetcher.assign([P0, P1, TopicPartition(T, 2)])
    h.cluster.leaders[(T, 2)] = (1, 5)
    h.cluster.refresh((), 0)
    h.fetcher.position(TopicPartition(T, 2), 0)
    assert h.cluster.asked and h.cluster.isolation == codec.READ_COMMITTED


def _transactional(batch: bytes, producer_id: int, control: bool = False) -> bytes:
    """``batch`` with a producer id and the transactional (and control) attribute, as a
    transactional producer's batch and its marker look (the CRC is not checked here)."""
    out = bytearray(batch)
    out[43:51] = producer_id.to_bytes(8, "big")
    attributes = int.from_bytes(out[21:23], "big") | 0x10 | (0x20 if control else 0)
    out[21:23] = attributes.to_bytes(2, "big")
    return bytes(out)


def test_read_committed_leaves_out_the_batches_of_aborted_transactions() -> None:
    from coordination._fetch.records import decode_partition

    data = (
        _transactional(records(0, 2), 7)  # aborted: 0-1
        + _transactional(records(2, 2), 8)  # committed: 2-3
        + records(4, 1)  # no transaction: 4
        + _transactional(records(5, 1), 7, control=True)  # 7's ABORT marker
        + _transactional(records(6, 1), 8, control=True)  # 8's COMMIT marker
        + _transactional(records(7, 2), 7)  # 7 again, committed later: 7-8
    )
    aborted = (codec.AbortedTransaction(7, 0),)
    raws, through = decode_partition(data, 0, False, aborted, read_committed=True)
    assert [r[0] for r in raws] == [2, 3, 4, 7, 8] and through == 8
    raws, _ = decode_partition(data, 0, False, aborted, read_committed=False)
    assert [r[0] for r in raws] == [0, 1, 2, 3, 4, 7, 8]


def test_end_offsets_ask_the_leaders_and_time_out_on_an_unknown_one() -> None:
    from coordination.errors import CoordinationTimeoutError

    h = Harness()
    h.cluster.offsets[((T, 0), LATEST)] = (0, 42)
    h.cluster.offsets[((T, 1), LATEST)] = (0, 43)
    assert h.fetcher.end_offsets([P0, P1], 1000) == {P0: 42, P1: 43}
    assert h.cluster.asked[-1] == (1, {(T, 0): (LATEST, 5), (T, 1): (LATEST, 5)})
    del h.cluster.leaders[(T, 1)]
    h.cluster.refresh((), 0)
    with pytest.raises(CoordinationTimeoutError, match="orders"):
        h.fetcher.end_offsets([P1], 500)


# -- what a review found: errors kept per partition, records never dropped ------------------


def test_a_deserializer_error_in_one_partition_drops_no_record_of_another() -> None:
    def value(data: bytes | None) -> str:
        if data == b"v20":
            raise ValueError("bad record in P1")
        return (data or b"").decode()

    h = started(value_deserializer=value)
    h.answer(session_id=9, parts=(data(0, 10, 3), data(1, 20, 2)))
    got: dict[int, list[int]] = {}
    raised = 0
    for _ in range(4):  # whichever partition's turn comes first
        try:
            for p, offsets in h.poll().items():
                got.setdefault(p, []).extend(offsets)
        except ValueError:
            raised += 1
    assert got.get(0) == [10, 11, 12] and 1 not in got
    assert raised >= 1
    assert h.fetcher.position(P0, 0) == 13 and h.fetcher.position(P1, 0) == 20
    h.fetcher.seek(P1, 21)  # past the bad record
    h.answer(session_id=9)  # the Fetch in flight (P0's)
    h.poll()
    h.answer(session_id=9, parts=(data(1, 21, 1),))
    assert h.poll(100) == {1: [21]}


def test_an_error_of_one_partition_is_raised_by_the_next_poll_while_others_flow() -> None:
    h = started(group_id="g", max_poll_records=2)
    h.answer(
        session_id=9,
        parts=(data(0, error=classify.TOPIC_AUTHORIZATION_FAILED), data(1, 20, 4)),
    )
    assert h.poll() == {1: [20, 21]}  # the records that came with it first
    with pytest.raises(TopicAuthorizationError, match="orders-0"):
        h.poll()  # then the error, though more records wait
    assert h.poll() == {1: [22, 23]}


def test_position_raises_only_its_own_partitions_error() -> None:
    h = Harness(auto_offset_reset="earliest", group_id="g")
    h.cluster.offsets[((T, 0), EARLIEST)] = (classify.TOPIC_AUTHORIZATION_FAILED, -1)
    h.cluster.offsets[((T, 1), EARLIEST)] = (0, 4)
    h.fetcher.assign([P0, P1])
    assert h.fetcher.position(P1, 1000) == 4  # P0's refusal is not P1's
    with pytest.raises(TopicAuthorizationError):
        h.fetcher.position(P0, 0)


def test_an_answer_that_came_while_the_application_did_not_poll_is_read() -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 3),))  # answered at once
    h.now += 60.0  # the application worked longer than request_timeout_ms + fetch_max_wait_ms
    assert h.poll() == {0: [10, 11, 12]}
    assert not h.links[0].closed and len(h.links) == 1


def test_a_fetch_without_an_answer_past_its_time_is_given_up() -> None:
    h = started()
    h.now += 31.0  # nothing came within request_timeout_ms + fetch_max_wait_ms
    assert h.poll() == {}
    assert h.links[0].closed


def test_a_failed_position_lookup_is_asked_again_after_a_growing_backoff() -> None:
    h = Harness(auto_offset_reset="earliest")
    h.cluster.list_offsets = _failing  # type: ignore[method-assign,assignment]
    h.fetcher.assign([P0])
    assert h.fetcher.position(P0, 2000) is None
    asked = h.cluster.refreshes  # one lookup of the leaders per failed ListOffsets
    assert asked <= 8, asked  # 0.1, 0.2, 0.4, 0.8, 1, ... s: not one every 100 ms (21)


def _failing(*args: Any) -> Any:
    raise TransportError("refused")


def test_a_fetch_answer_over_the_size_limit_raises_a_configuration_error() -> None:
    from coordination._transport.link import ResponseTooLargeError

    h = started()
    h.link().answers.append(ResponseTooLargeError("a response of 9 bytes", 9, 8))
    with pytest.raises(ConfigurationError, match="receive_message_max_bytes"):
        h.poll()


def test_the_answer_size_limit_follows_the_fetch_sizes() -> None:
    settings = fetch_settings({"bootstrap_servers": "b1:9092", "fetch_max_bytes": 5_000_000})
    assert settings.direct is not None
    assert settings.direct.max_response_bytes == 5_000_000 + 1_048_576
    bigger = fetch_settings(
        {"bootstrap_servers": "b1:9092", "receive_message_max_bytes": 90_000_000}
    )
    assert bigger.direct is not None and bigger.direct.max_response_bytes == 90_000_000


def test_a_connection_retrying_cannot_fix_is_raised() -> None:
    h = started()
    h.link().answers.append(TransportError("no Fetch v12", fatal=True))
    with pytest.raises(ConnectionFailedError, match="no Fetch v12"):
        h.poll()


def test_a_topic_created_again_opens_new_sessions_closing_the_old() -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 1),))
    h.poll()
    new_id = uuid.UUID("1f8fad5b-d9cb-469f-a161-4f4c1b5d0e12")

    def refresh(topics: Any, timeout_s: float) -> None:
        FakeCluster.refresh(h.cluster, topics, timeout_s)
        h.cluster.metadata.topic_ids, h.cluster.metadata.topic_names = {T: new_id}, {new_id: T}

    h.cluster.refresh = refresh  # type: ignore[method-assign]
    refreshes = h.cluster.refreshes
    h.answer(session_id=9, parts=(data(0, error=classify.UNKNOWN_TOPIC_OR_PARTITION),))
    h.poll()
    assert h.cluster.refreshes == refreshes + 1
    request = h.link().sent[-1]
    assert (request.session_id, request.session_epoch) == (9, 0)  # a full one, closing 9
    assert [t.topic_id for t in request.topics] == [new_id]


def test_full_fetches_list_the_partitions_in_turn() -> None:
    h = started(enable_incremental_fetch_sessions=False)
    firsts = []
    for _ in range(4):
        firsts.append(h.link().sent[-1].topics[0].partitions[0].partition)
        h.answer(session_id=0, parts=(data(0, hw=10), data(1, hw=20)))
        h.poll()
    assert set(firsts) == {0, 1}


def test_a_leader_named_in_an_answer_with_an_older_epoch_is_not_taken() -> None:
    h = started()
    refreshes = h.cluster.refreshes
    stale = codec.LeaderIdAndEpoch(2, 4)  # the metadata says epoch 5
    h.answer(session_id=9, parts=(data(0, error=classify.NOT_LEADER_OR_FOLLOWER, leader=stale),))
    h.poll()
    h.now += 0.2
    h.poll()
    assert h.cluster.refreshes == refreshes + 1  # looked up instead
    assert all(link.node == 1 for link in h.links)


def test_an_answer_of_another_session_starts_the_session_again() -> None:
    h = started()
    h.answer(session_id=9, parts=(data(0, 10, 1),))
    h.poll()
    h.answer(session_id=12, parts=(data(1, 20, 1),))  # not session 9's
    assert h.poll() == {}
    h.now += 0.2
    h.poll()
    request = h.link().sent[-1]
    assert (request.session_id, request.session_epoch) == (9, 0)


# -- KIP-320: a new leader's log is checked before it is fetched from ------------------------


def with_epoch(batch: bytes, epoch: int) -> bytes:
    """``batch`` (one record batch) as written under leader epoch ``epoch`` (the header's
    partitionLeaderEpoch, which the batch's CRC does not cover)."""
    return batch[:12] + epoch.to_bytes(4, "big", signed=True) + batch[16:]


def moved_after_reading(**config: Any) -> Harness:
    """P0's records 10..14 (leader epoch 5) handed out; then its leader moves to broker 2,
    epoch 6, found by the lookup after the old leader's NOT_LEADER_OR_FOLLOWER."""
    h = started(**config)
    five = codec.FetchPartitionData(0, 0, 100, records=with_epoch(records(10, 5), 5))
    h.answer(session_id=9, parts=(five,))
    assert h.poll() == {0: [10, 11, 12, 13, 14]}
    h.cluster.leaders[(T, 0)] = (2, 6)
    h.answer(session_id=9, parts=(data(0, error=classify.NOT_LEADER_OR_FOLLOWER),))
    h.poll()
    h.now += 0.2
    return h


def fetched_from_new_leader(h: Harness) -> list[dict[int, int]]:
    return (
        [sent_partitions(r) for r in h.link(2).sent]
        if any(link.node == 2 for link in h.links)
        else []
    )


def test_after_a_leader_moves_the_position_is_checked_with_the_new_leader_then_fetched() -> None:
    h = moved_after_reading()
    h.poll()
    # The epoch of the last record fetched (5), under the new leader's epoch (6), asked of
    # the new leader before any Fetch to it.
    assert h.cluster.epochs_asked == [(2, {(T, 0): (5, 6)})]
    assert fetched_from_new_leader(h) == [{0: 15}]
    h.poll()
    assert len(h.cluster.epochs_asked) == 1  # checked once per move


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_log_truncated_below_the_position_is_fetched_again_from_where_it_now_ends(
    reset: str,
) -> None:
    h = moved_after_reading(auto_offset_reset=reset)
    h.cluster.epoch_answers[(T, 0)] = (0, 5, 12)  # epoch 5 ends at 12 in the new log
    h.poll()
    assert fetched_from_new_leader(h) == [{0: 12}]
    assert h.fetcher.position(P0, 0) == 12
    h.answer(2, parts=(data(0, 12, 2),))
    assert h.poll() == {0: [12, 13]}  # the new log's records at those offsets


def test_with_auto_offset_reset_none_a_truncation_below_the_position_is_the_partitions_error() -> (
    None
):
    h = moved_after_reading(auto_offset_reset="none")
    h.cluster.epoch_answers[(T, 0)] = (0, 5, 12)
    with pytest.raises(BrokerError, match="truncated at 12 below the position 15"):
        h.poll()
    h.now += 10
    h.poll()
    assert fetched_from_new_leader(h) == []  # not fetched until the application seeks
    h.fetcher.seek(P0, 12)
    h.poll()
    assert fetched_from_new_leader(h) == [{0: 12}]


def test_records_buffered_but_not_handed_out_past_the_new_end_are_fetched_again() -> None:
    h = started(max_poll_records=2)
    five = codec.FetchPartitionData(0, 0, 100, records=with_epoch(records(10, 5), 5))
    h.answer(session_id=9, parts=(five,))
    assert h.poll() == {0: [10, 11]}  # 12..14 buffered
    h.cluster.leaders[(T, 0)] = (2, 6)
    h.fetcher._stale = True  # a lookup is due (as after any error)
    h.cluster.epoch_answers[(T, 0)] = (0, 5, 13)  # only 12 survived the truncation
    h.poll()
    # Back to the position (12), not to the new end: 12 was never handed out.
    assert h.fetcher.position(P0, 0) == 12
    assert fetched_from_new_leader(h) == [{0: 12}]


def test_an_epoch_the_new_leader_does_not_know_resets_the_position() -> None:
    h = moved_after_reading(auto_offset_reset="earliest")
    h.cluster.epoch_answers[(T, 0)] = (0, -1, -1)
    h.cluster.offsets[((T, 0), EARLIEST)] = (0, 3)
    h.poll()
    h.poll()
    assert h.fetcher.position(P0, 0) == 3
    assert fetched_from_new_leader(h) == [{0: 3}]


def test_a_check_refused_for_now_is_asked_again_and_nothing_is_fetched_meanwhile() -> None:
    h = moved_after_reading()
    h.cluster.epoch_answers[(T, 0)] = (classify.FENCED_LEADER_EPOCH, -1, -1)
    h.poll()
    assert fetched_from_new_leader(h) == []
    del h.cluster.epoch_answers[(T, 0)]
    h.now += 0.2
    h.poll()
    assert len(h.cluster.epochs_asked) == 2
    assert fetched_from_new_leader(h) == [{0: 15}]


def test_a_position_sought_after_the_move_is_not_checked() -> None:
    h = moved_after_reading()
    h.fetcher.seek(P0, 40)  # the application's own position: nothing to check it against
    h.poll()
    assert h.cluster.epochs_asked == []
    assert fetched_from_new_leader(h) == [{0: 40}]


def test_a_check_the_new_leader_refuses_is_the_partitions_error_and_not_asked_at_once_again() -> (
    None
):
    h = moved_after_reading()
    h.cluster.epoch_answers[(T, 0)] = (classify.TOPIC_AUTHORIZATION_FAILED, -1, -1)
    with pytest.raises(TopicAuthorizationError):
        h.poll()
    h.poll()
    h.poll()
    assert len(h.cluster.epochs_asked) == 1  # not again before retry_backoff_ms
    assert fetched_from_new_leader(h) == []


def test_with_auto_offset_reset_none_an_epoch_the_new_leader_does_not_know_is_an_error() -> None:
    h = moved_after_reading(auto_offset_reset="none")
    h.cluster.epoch_answers[(T, 0)] = (0, -1, -1)
    with pytest.raises(BrokerError, match="its leader knows no epoch below the position 15"):
        h.poll()
