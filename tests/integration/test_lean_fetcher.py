"""The partitioning recipe's consumer with ``fetcher="lean"`` on a real broker, each scenario
also run with the default fetcher (kafka-python's KafkaConsumer) so that both are held to
the same behaviour: every record once and in order across partitions, a seek, a
reassignment, a reset after an out-of-range position, gzip batches; and the lean fetcher's
records field for field equal to the default fetcher's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.serializer import Deserializer

from coordination.fetching import LeanRecordFetcher
from recipes.partitioning import Consumer, TopicPartition
from recipes.partitioning._fetcher import KafkaRecordFetcher

from .members import FAST, wait_until
from .test_consumer import create, settled

pytestmark = pytest.mark.integration

FETCHERS = ["default", "lean"]


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    created: list[Consumer] = []
    yield created
    for c in created:
        c.close()


def start(created: list[Consumer], kafka: str, group: str, fetcher: str, **kw: Any) -> Consumer:
    lean: dict[str, Any] = {"fetcher": "lean"} if fetcher == "lean" else {}
    c = Consumer(group, bootstrap_servers=kafka, fetch_max_wait_ms=100, **lean, **{**FAST, **kw})
    created.append(c)
    c.start()
    return c


def produce(
    kafka: str, topic: str, partitions: int, per_partition: int, alone: bool = False, **kw: Any
) -> None:
    """``alone``: each record in a batch of its own."""
    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=5, **kw)
    for i in range(per_partition):
        for p in range(partitions):
            producer.send(
                topic, key=f"k{i}".encode(), value=f"{p}-{i}".encode(), partition=p,
                headers=[("n", str(i).encode())] if i % 2 else [],
            )  # fmt: skip
            if alone:
                producer.flush()
    producer.flush()
    producer.close()


def read(c: Consumer, want: int, timeout: float = 30) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of the next ``want`` records ``c`` returns."""
    got: list[tuple[int, int, bytes]] = []

    def enough() -> bool:
        for tp, records in c.poll(timeout_ms=100).items():
            got.extend((tp.partition, r.offset, r.value) for r in records)
        return len(got) >= want

    wait_until(enough, timeout, f"{want} records (got {len(got)})")
    return got


def in_order_once(got: list[tuple[int, int, bytes]], partitions: int, start: int, end: int) -> None:
    for p in range(partitions):
        offsets = [o for q, o, _ in got if q == p]
        assert offsets == list(range(start, end)), (p, offsets)


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_every_record_once_in_order_across_partitions(kafka: str, consumers, fetcher) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 3)
    produce(kafka, topic, 3, 200)
    c = start(consumers, kafka, f"g-{topic}", fetcher, topics=[topic], max_poll_records=70)
    got = read(c, 600)
    in_order_once(got, 3, 0, 200)
    assert {v for p, o, v in got} == {f"{p}-{i}".encode() for p in range(3) for i in range(200)}
    assert c.poll(timeout_ms=300) == {}  # nothing more, nothing twice


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_seek_rereads_from_the_offset_and_drops_what_was_fetched(
    kafka: str, consumers, fetcher
) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 50)
    c = start(consumers, kafka, f"g-{topic}", fetcher, topics=[topic], max_poll_records=10)
    first = read(c, 10)  # the rest of what was fetched is buffered, then dropped by seek
    tp = TopicPartition(topic, first[0][0])
    c.seek(tp, 45)
    c.seek(TopicPartition(topic, 1 - tp.partition), 40)
    got = read(c, 15)
    assert sorted(o for p, o, _ in got if p == tp.partition) == list(range(45, 50))
    assert [o for p, o, _ in got if p != tp.partition] == list(range(40, 50))
    assert c.poll(timeout_ms=300) == {}


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_reassignment_keeps_kept_partitions_and_hands_over_at_the_commit(
    kafka: str, consumers, fetcher
) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 4)
    produce(kafka, topic, 4, 20)
    group = f"g-{topic}"
    a = start(consumers, kafka, group, fetcher, topics=[topic])
    first = read(a, 80)
    in_order_once(first, 4, 0, 20)
    a.commit()
    b = start(consumers, kafka, group, fetcher, topics=[topic])
    wait_until(lambda: settled([a, b], 4), 30, "the group to share the 4 partitions")
    assert a.assignment() and b.assignment()
    produce(kafka, topic, 4, 10)
    got: dict[str, list[tuple[int, int, bytes]]] = {"a": [], "b": []}

    def all_read() -> bool:
        for name, c in (("a", a), ("b", b)):
            for tp, records in c.poll(timeout_ms=50).items():
                got[name].extend((tp.partition, r.offset, r.value) for r in records)
        return len(got["a"]) + len(got["b"]) >= 40

    wait_until(all_read, 30, "the 40 new records")
    in_order_once(got["a"] + got["b"], 4, 20, 30)  # none twice, none lost
    assert {p for p, _, _ in got["a"]} == {tp.partition for tp in a.assignment()}
    assert {p for p, _, _ in got["b"]} == {tp.partition for tp in b.assignment()}


def fetcher_of(kind: str, kafka: str, **kw: Any) -> Any:
    config = {"bootstrap_servers": kafka, "fetch_max_wait_ms": 100, **kw}
    if kind == "lean":
        return LeanRecordFetcher[TopicPartition](**config)
    return KafkaRecordFetcher(**config)


def fetched(fetcher: Any, want: int, timeout: float = 30) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for tp, batch in fetcher.poll(100).items():
            got.extend((tp.partition, r.offset) for r in batch)
    return got


def from_on(got: list[tuple[int, int]], offset: int) -> bool:
    return bool(got) and got == [(0, o) for o in range(offset, offset + len(got))]


# Through the fetcher itself (the Consumer's part, following the fetcher's reset, is in
# test_consumer.py's past-the-end test, with either fetcher).
@pytest.mark.parametrize("fetcher", FETCHERS)
@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_an_out_of_range_position_is_reset_per_auto_offset_reset(
    kafka: str, fetcher: str, reset: str
) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 30)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    f = fetcher_of(fetcher, kafka, auto_offset_reset=reset)
    try:
        f.assign(tps)
        f.seek(tps[0], 1000)  # past the end: OFFSET_OUT_OF_RANGE
        f.seek(tps[1], 20)  # in range: not reset
        if reset == "earliest":
            got = fetched(f, 40)
            assert [o for p, o in got if p == 0] == list(range(30))
        else:
            got = fetched(f, 10)
            deadline = time.monotonic() + 30
            while f.position(tps[0], 1000) != 30 and time.monotonic() < deadline:
                got += fetched(f, 1, timeout=0.2)
            assert f.position(tps[0], 1000) == 30
            produce(kafka, topic, 1, 5)
            got += fetched(f, 5)
            assert [o for p, o in got if p == 0] == list(range(30, 35))
        assert [o for p, o in got if p == 1] == list(range(20, 30))
    finally:
        f.close()


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_seek_drops_what_was_fetched_and_what_is_in_flight(kafka: str, fetcher: str) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    produce(kafka, topic, 1, 40, alone=True)  # a stale answer's batches then differ
    tp = TopicPartition(topic, 0)
    f = fetcher_of(fetcher, kafka, auto_offset_reset="earliest", max_poll_records=5)
    try:
        f.assign([tp])
        assert fetched(f, 5) == [(0, o) for o in range(5)]  # 35 more fetched, not returned
        f.seek(tp, 2)  # backward
        assert from_on(fetched(f, 3), 2)
        f.seek(tp, 30)  # forward, past what is buffered
        assert from_on(fetched(f, 5), 30)
        f.seek(tp, 20)
        f.poll(0)  # a Fetch from 20 goes out
        f.seek(tp, 10)  # its answer, when it comes, must not count
        got = fetched(f, 20)
        assert from_on(got, 10) and len(got) == 20
        assert f.position(tp, 1000) == 30
    finally:
        f.close()


def test_an_out_of_range_position_with_reset_none_raises_until_sought(kafka: str) -> None:
    from coordination.errors import BrokerError

    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    produce(kafka, topic, 1, 10)
    tp = TopicPartition(topic, 0)
    f = LeanRecordFetcher[TopicPartition](bootstrap_servers=kafka, auto_offset_reset="none")
    try:
        f.assign([tp])
        f.seek(tp, 50)
        with pytest.raises(BrokerError, match="offset 50") as caught:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                f.poll(100)
        assert caught.value.code == 1
        assert f.position(tp, 1000) == 50  # not moved
        f.seek(tp, 8)
        assert fetched(f, 2) == [(0, 8), (0, 9)]
    finally:
        f.close()


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_gzip_batches_are_read(kafka: str, consumers, fetcher) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 300, compression_type="gzip", batch_size=4096)
    c = start(consumers, kafka, f"g-{topic}", fetcher, topics=[topic])
    got = read(c, 600)
    in_order_once(got, 2, 0, 300)
    assert {v for _, _, v in got} == {f"{p}-{i}".encode() for p in range(2) for i in range(300)}


class _Text(Deserializer):  # type: ignore[misc]
    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> str | None:
        return None if data is None else f"{topic[:4]}:{len(headers)}:{data.decode()}"


def test_the_lean_fetchers_records_equal_the_default_fetchers(kafka: str) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 40)
    produce(kafka, topic, 2, 40, compression_type="gzip")
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    records: dict[str, dict[Any, list[Any]]] = {}
    config = {"bootstrap_servers": kafka, "auto_offset_reset": "earliest"}
    fetchers: list[tuple[str, Any]] = [
        ("default", KafkaRecordFetcher(**config, value_deserializer=_Text())),
        ("lean", LeanRecordFetcher[TopicPartition](**config, value_deserializer=_Text())),
    ]
    for name, fetcher in fetchers:
        fetcher.assign(tps)
        got: dict[Any, list[Any]] = {(tp.topic, tp.partition): [] for tp in tps}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 160 and time.monotonic() < deadline:
            for tp, batch in fetcher.poll(200).items():
                got[(tp.topic, tp.partition)].extend(batch)
        assert fetcher.end_offsets(tps, 10_000) == {tps[0]: 80, tps[1]: 80}
        assert [fetcher.highwater(tp) for tp in tps] == [80, 80]
        fetcher.close()
        records[name] = got
    assert records["lean"] == records["default"]
    assert sum(map(len, records["lean"].values())) == 160
    sample = records["lean"][(topic, 0)][1]
    assert sample.headers == [("n", b"1")] and sample.value == "lean:1:0-1" and sample.key == b"k1"


def test_a_dropped_fetch_connection_is_reconnected_without_losing_a_record(kafka: str) -> None:
    import socket

    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 20)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    f = LeanRecordFetcher[TopicPartition](
        bootstrap_servers=kafka, auto_offset_reset="earliest", fetch_max_wait_ms=2000
    )
    try:
        f.assign(tps)
        got = fetched(f, 40)
        f.poll(0)  # a long-polling Fetch is in flight
        links = list(f._engine._links.values())
        assert links and all(link.in_flight for link in links)
        for link in links:  # as a broker restart or an idle timeout would
            link._sock.shutdown(socket.SHUT_RDWR)  # type: ignore[attr-defined]
        produce(kafka, topic, 2, 10)
        got += fetched(f, 20)
        for p in (0, 1):
            assert [o for q, o in got if q == p] == list(range(30))
        assert f._engine._links and all(  # a new connection each
            link not in links for link in f._engine._links.values()
        )
    finally:
        f.close()


def test_read_committed_leaves_aborted_transactions_out_as_the_default_fetcher(
    kafka: str,
) -> None:
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=kafka, transactional_id=f"tx-{topic}")
    producer.init_transactions()
    plain = KafkaProducer(bootstrap_servers=kafka)
    for round_ in range(3):
        for outcome in ("commit", "abort"):
            producer.begin_transaction()
            for i in range(4):
                producer.send(topic, value=f"{outcome}-{round_}-{i}".encode(), partition=0)
            producer.flush()
            plain.send(topic, value=f"plain-{round_}".encode(), partition=0).get(10)
            if outcome == "commit":
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    producer.close()
    plain.close()
    read: dict[str, list[tuple[int, bytes]]] = {}
    for kind in FETCHERS:
        f = fetcher_of(kind, kafka, auto_offset_reset="earliest", isolation_level="read_committed")
        try:
            f.assign([tp])
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 20
            while len(got) < 18 and time.monotonic() < deadline:
                for _, batch in f.poll(100).items():
                    got.extend((r.offset, r.value) for r in batch)
            read[kind] = got
        finally:
            f.close()
    values = [v.decode() for _, v in read["lean"]]
    # Each round: a committed transaction, a plain record, an aborted transaction (left
    # out), a plain record.
    assert values == [
        v for r in range(3) for v in [*(f"commit-{r}-{i}" for i in range(4)), *[f"plain-{r}"] * 2]
    ]
    assert not any(v.startswith("abort") for v in values)
    assert read["lean"] == read["default"]


def test_a_topic_deleted_and_created_again_is_read_under_its_new_id(kafka: str) -> None:
    from kafka.admin import KafkaAdminClient

    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    produce(kafka, topic, 1, 10)
    tp = TopicPartition(topic, 0)
    f = LeanRecordFetcher[TopicPartition](
        bootstrap_servers=kafka, auto_offset_reset="earliest", fetch_max_wait_ms=100
    )
    try:
        f.assign([tp])
        assert [o for _, o in fetched(f, 10)] == list(range(10))
        old_id = f._engine._cluster.metadata.topic_ids[topic]
        admin = KafkaAdminClient(bootstrap_servers=kafka)
        admin.delete_topics([topic])
        admin.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                create(kafka, topic, 1)
                break
            except Exception:  # the deletion is still going on
                time.sleep(0.5)
        produce(kafka, topic, 1, 5)
        got = fetched(f, 5)  # position 10 is out of range there: reset to the earliest
        assert [o for _, o in got] == list(range(5))
        assert f._engine._cluster.metadata.topic_ids[topic] != old_id
    finally:
        f.close()


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_backlog_of_megabytes_and_a_batch_over_the_partition_limit_are_read(
    kafka: str, consumers, fetcher
) -> None:
    # Answers of several MB (over kafka-python's 1 MB default frame limit), and a first
    # batch larger than max_partition_fetch_bytes, which the broker sends whole (KIP-74).
    topic = f"lean-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=50, batch_size=1 << 20)
    value = b"x" * 10_000
    for i in range(400):  # 4 MB over two partitions, in batches of up to 1 MiB
        producer.send(topic, value=value, partition=i % 2)
    producer.flush()
    producer.close()
    c = start(
        consumers, kafka, f"g-{topic}", fetcher, topics=[topic], max_partition_fetch_bytes=100_000
    )
    got = read(c, 400, timeout=60)
    assert len(got) == 400 and {len(v) for _, _, v in got} == {10_000}
    in_order_once(got, 2, 0, 200)
