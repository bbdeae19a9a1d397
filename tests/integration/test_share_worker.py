"""recipes.queues.ShareWorker on a real broker (share groups, KIP-932, Kafka 4.x).

Two workers split the records and each is accepted exactly once; a retryable failure comes
back (delivery count 2) and is accepted; a poison record is copied to the dead-letter topic
with its origin headers and rejected, never delivered again; closing releases the records
delivered but not started, and another consumer gets them at once (the lock is 30 s); a
handler that outlasts the group's 1.5 s lock keeps its record (renewed), which no other
consumer gets meanwhile; the group's delivery limit is read from the broker, and where it is
below ``max_deliveries`` a failing record is dead-lettered at the broker's last delivery
rather than archived by the broker, also when an operator lowers it while the worker runs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from recipes.queues import DEAD_LETTER_HEADERS, ShareConsumer, ShareRecord, ShareWorker

from .test_consumer_group_member import create_topic_with_id
from .test_share_consumer import (
    ON_SHARE_BROKERS,
    TIMEOUT_S,
    produced,
    share_group,
    share_group_config,
)

pytestmark = [pytest.mark.integration, ON_SHARE_BROKERS]


class Retryable(Exception):
    pass


class Poison(Exception):
    pass


@pytest.fixture
def closing() -> Iterator[list[ShareWorker | ShareConsumer]]:
    """Workers and consumers a test makes (append them); closed at its end."""
    made: list[ShareWorker | ShareConsumer] = []
    yield made
    for each in made:
        each.close()


def worker(
    kafka: str,
    group: str,
    topic: str,
    handler: Callable[[ShareRecord], object],
    made: list[ShareWorker | ShareConsumer],
    **kw: object,
) -> ShareWorker:
    w = ShareWorker(group, topics=[topic], handler=handler, bootstrap_servers=kafka, **kw)  # type: ignore[arg-type]
    made.append(w)
    w.start()
    return w


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def topic_with_dead_letters(kafka: str, records: int) -> tuple[str, str]:
    """A new topic holding ``records`` records (see ``produced``) and its own empty
    dead-letter topic, ``<topic>.dlq``; returns both names."""
    topic = produced(kafka, records)
    dead_letters = f"{topic}.dlq"
    create_topic_with_id(kafka, dead_letters, 1)
    return topic, dead_letters


def retrying_worker(
    kafka: str,
    group: str,
    topic: str,
    dead_letters: str,
    handler: Callable[[ShareRecord], object],
    made: list[ShareWorker | ShareConsumer],
    **kw: object,
) -> ShareWorker:
    """A started worker that retries ``Retryable`` at once up to ``max_deliveries=4``, then
    copies the record to ``dead_letters``; ``kw`` adds settings."""
    return worker(
        kafka,
        group,
        topic,
        handler,
        made,
        retry_on=Retryable,
        max_deliveries=4,
        redelivery_backoff_ms=0,
        dead_letter_topic=dead_letters,
        **kw,
    )


def first_dead_letter(kafka: str, dead_letters: str) -> Any:
    """The first record of the dead-letter topic (a kafka-python ConsumerRecord), read from
    its start; fails (StopIteration) where none comes within 10 s."""
    reader = KafkaConsumer(
        dead_letters,
        bootstrap_servers=kafka,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        return next(iter(reader))
    finally:
        reader.close()


def assert_nothing_for_a_new_member(
    kafka: str, group: str, topic: str, made: list[ShareWorker | ShareConsumer]
) -> None:
    """A new member of the group is delivered nothing: every record was acknowledged for good."""
    other = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    made.append(other)
    assert other.poll(timeout_ms=1500) == []


def test_two_workers_split_the_records_and_accept_each_once(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    topic = produced(kafka, 0, partitions=2)
    group = share_group(kafka)
    handled: list[tuple[str, int, int, int]] = []
    lock = threading.Lock()

    def handler_of(name: str) -> Callable[[ShareRecord], None]:
        def handle(record: ShareRecord) -> None:
            with lock:
                handled.append((name, record.partition, record.offset, record.delivery_count))
            time.sleep(0.01)

        return handle

    a = worker(kafka, group, topic, handler_of("a"), closing, concurrency=2)
    b = worker(kafka, group, topic, handler_of("b"), closing, concurrency=2)
    # Spread over 2 s, so that both have joined while records still come.
    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=0)
    try:
        for n in range(80):
            producer.send(topic, value=b"job-%d" % n, partition=n % 2)
            if n % 4 == 3:
                producer.flush(timeout=TIMEOUT_S)
                time.sleep(0.1)
    finally:
        producer.close(timeout=TIMEOUT_S)
    wait_until(lambda: a.metrics().accepted + b.metrics().accepted >= 80, "80 accepted")
    a.close()
    b.close()
    records = [(p, o) for _, p, o, _ in handled]
    assert sorted(records) == sorted(set(records)) and len(records) == 80  # none twice
    assert {n for n, _, _, _ in handled} == {"a", "b"}, "one worker got everything"
    assert {count for _, _, _, count in handled} == {1}
    assert a.metrics().acknowledgements_failed == b.metrics().acknowledgements_failed == 0
    # Every record was accepted: a new member of the group gets none.
    assert_nothing_for_a_new_member(kafka, group, topic, closing)


def test_a_retryable_failure_is_delivered_again_and_accepted(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    topic = produced(kafka, 1)
    seen: list[int] = []

    def handle(record: ShareRecord) -> None:
        seen.append(record.delivery_count)
        if record.delivery_count == 1:
            raise Retryable("the database is restarting")

    w = worker(
        kafka,
        share_group(kafka),
        topic,
        handle,
        closing,
        retry_on=Retryable,
        redelivery_backoff_ms=200,
    )
    wait_until(lambda: w.metrics().accepted == 1, "accepted at the second delivery")
    assert seen == [1, 2]
    m = w.metrics()
    assert (m.retries, m.released, m.rejected, m.acknowledgements_failed) == (1, 1, 0, 0)


def test_a_poison_record_goes_to_the_dead_letter_topic_and_is_rejected(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    topic, dead_letters = topic_with_dead_letters(kafka, 2)
    group = share_group(kafka)
    tried: list[tuple[int, int]] = []

    def handle(record: ShareRecord) -> None:
        tried.append((record.offset, record.delivery_count))
        if record.offset == 1:
            raise Poison("cannot parse job-1")

    w = worker(
        kafka,
        group,
        topic,
        handle,
        closing,
        retry_on=Retryable,
        dead_letter_topic=dead_letters,
    )
    wait_until(lambda: w.metrics().rejected == 1 and w.metrics().accepted == 1, "both acked")
    assert w.metrics().dead_lettered == 1
    copy = first_dead_letter(kafka, dead_letters)
    assert (copy.key, copy.value) == (b"1", b"job-1")
    headers = dict(copy.headers)
    assert set(DEAD_LETTER_HEADERS) <= set(headers)
    assert headers["__dlq.origin.topic"] == topic.encode()
    assert (headers["__dlq.origin.partition"], headers["__dlq.origin.offset"]) == (b"0", b"1")
    assert headers["__dlq.group.id"] == group.encode()
    assert headers["__dlq.delivery.count"] == b"1"
    assert headers["__dlq.reason"] == b"not_retryable"
    assert headers["__dlq.error.class"].endswith(b".Poison")
    assert headers["__dlq.error.message"] == b"cannot parse job-1"
    # Rejected: never delivered again, to this worker or another member.
    assert_nothing_for_a_new_member(kafka, group, topic, closing)
    assert sorted(tried) == [(0, 1), (1, 1)]


def test_closing_releases_the_records_not_started_for_another_consumer_at_once(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    topic = produced(kafka, 3)
    group = share_group(kafka)  # the lock: 30 s, the broker's default
    started = threading.Event()
    finish = threading.Event()
    handled: list[int] = []

    def handle(record: ShareRecord) -> None:
        handled.append(record.offset)
        started.set()
        finish.wait(TIMEOUT_S)

    w = worker(kafka, group, topic, handle, closing, concurrency=1, prefetch=2)
    assert started.wait(TIMEOUT_S)
    wait_until(lambda: w.metrics().received == 3, "the worker holds all three")
    other = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    closing.append(other)
    other.start(timeout=TIMEOUT_S)
    closer = threading.Thread(target=w.close)
    closed_at = time.monotonic()
    closer.start()
    again: list[ShareRecord] = []
    while len(again) < 2:
        assert time.monotonic() - closed_at < 10, again
        for record in other.poll(timeout_ms=300):
            again.append(record)
            other.acknowledge(record)
    assert closer.is_alive()  # still draining: the first record's handler runs
    assert sorted(r.offset for r in again) == sorted(set(range(3)) - set(handled))
    assert {r.delivery_count for r in again} == {2}
    finish.set()
    closer.join(TIMEOUT_S)
    m = w.metrics()
    assert (m.accepted, m.released_unstarted, m.acknowledgements_failed) == (1, 2, 0)
    assert other.commit() == {(topic, 0): None}


def test_a_handler_longer_than_the_lock_keeps_its_record(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    topic = produced(kafka, 1)
    group = share_group(kafka, **{"share.record.lock.duration.ms": "1500"})
    started = threading.Event()
    calls: list[int] = []

    def handle(record: ShareRecord) -> None:
        calls.append(record.delivery_count)
        started.set()
        time.sleep(4.5)  # three locks' worth

    w = worker(kafka, group, topic, handle, closing)
    other = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    closing.append(other)
    assert started.wait(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while w.metrics().accepted == 0:
        assert time.monotonic() < deadline, w.metrics()
        assert other.poll(timeout_ms=300) == []  # never handed the record being handled
        assert len(calls) == 1
    m = w.metrics()
    assert m.lock_renewals >= 3 and m.acknowledgements_failed == 0
    assert other.poll(timeout_ms=1000) == []
    assert calls == [1]


def test_the_group_delivery_limit_is_read_from_the_broker(
    kafka: str, closing: list[ShareWorker | ShareConsumer]
) -> None:
    # The broker's group.share.delivery.count.limit (5 by default) for a group without its
    # own; the group's share.delivery.count.limit where it has one.
    topic = produced(kafka, 0)
    own = {"share.delivery.count.limit": "3"}
    for group, limit in ((share_group(kafka), 5), (share_group(kafka, **own), 3)):
        c = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
        closing.append(c)
        c.start(timeout=TIMEOUT_S)
        assert c.delivery_count_limit() == limit
        assert c.member.delivery_count_limit(timeout=TIMEOUT_S) == limit


def test_a_failure_is_dead_lettered_at_the_brokers_limit_below_max_deliveries(
    kafka: str, closing: list[ShareWorker | ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    # The broker archives a record released at the group's limit (2 here) without a copy;
    # with max_deliveries=4 the worker would release it there. It reads the limit from the
    # broker and makes the failure final at delivery 2: copied, then rejected.
    topic, dead_letters = topic_with_dead_letters(kafka, 1)
    group = share_group(kafka, **{"share.delivery.count.limit": "2"})
    tried: list[int] = []

    def handle(record: ShareRecord) -> None:
        tried.append(record.delivery_count)
        raise Retryable("the database is down")

    w = retrying_worker(kafka, group, topic, dead_letters, handle, closing)
    # Two outcomes: the release of delivery 1, then a reject (or, were the limit ignored, a
    # second release, which the broker archives).
    wait_until(lambda: w.metrics().released + w.metrics().rejected >= 2, "two outcomes")
    m = w.metrics()
    assert (m.released, m.rejected, m.dead_lettered, m.acknowledgements_failed) == (1, 1, 1, 0)
    assert tried == [1, 2] and w.final_delivery == 2
    assert "share.delivery.count.limit=2" in caplog.text and "which wins" in caplog.text
    copy = first_dead_letter(kafka, dead_letters)
    assert (copy.key, copy.value) == (b"0", b"job-0")
    headers = dict(copy.headers)
    assert headers["__dlq.delivery.count"] == b"2"
    assert headers["__dlq.reason"] == b"max_deliveries"
    # Rejected: never delivered again.
    assert_nothing_for_a_new_member(kafka, group, topic, closing)


def test_a_limit_lowered_while_the_worker_runs_still_dead_letters_a_failing_record(
    kafka: str, closing: list[ShareWorker | ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    # The group starts with the broker's limit (5), max_deliveries=4: a failure is final at
    # delivery 4. During the record's first delivery an operator lowers the group's limit
    # to 2, which Kafka applies at once: released at delivery 2, the record would be
    # archived without a copy. The worker reads the new limit (every 0.5 s here) and
    # dead-letters the record at delivery 2 instead.
    topic, dead_letters = topic_with_dead_letters(kafka, 1)
    group = share_group(kafka)
    tried: list[int] = []

    def handle(record: ShareRecord) -> None:
        tried.append(record.delivery_count)
        if record.delivery_count == 1:
            assert w.final_delivery == 4
            share_group_config(kafka, group, **{"share.delivery.count.limit": "2"})
            wait_until(lambda: w.final_delivery == 2, "the lowered limit read", timeout_s=10)
        raise Retryable("the database is down")

    w = retrying_worker(
        kafka, group, topic, dead_letters, handle, closing, delivery_limit_refresh_ms=500
    )
    wait_until(lambda: w.metrics().released + w.metrics().rejected >= 2, "two outcomes")
    m = w.metrics()
    assert (m.released, m.rejected, m.dead_lettered, m.acknowledgements_failed) == (1, 1, 1, 0)
    assert tried == [1, 2]
    assert "share.delivery.count.limit=2 (was 5)" in caplog.text
    copy = first_dead_letter(kafka, dead_letters)
    headers = dict(copy.headers)
    assert (copy.key, headers["__dlq.delivery.count"]) == (b"0", b"2")
    # Rejected: never delivered again.
    assert_nothing_for_a_new_member(kafka, group, topic, closing)


def test_the_worker_example_of_the_docs_runs(
    kafka: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = (Path(__file__).parents[2] / "docs" / "queues.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Worker") :]
    example = section[section.index("```python\n") + 10 : section.index("\n```\n")]
    name = f"emails-{uuid.uuid4().hex[:8]}"
    topic = produced(kafka, 3)
    create_topic_with_id(kafka, f"{name}.dlq", 1)
    group = share_group(kafka)
    code = (
        example.replace('"emails",', f'"{group}",')
        .replace('["emails"]', f'["{topic}"]')
        .replace('"emails.dlq"', f'"{name}.dlq"')
        .replace("localhost:9092", kafka)
    )
    # SIGTERM, as `kill` sends it, once the three records are handled.
    previous = signal.getsignal(signal.SIGTERM)

    printed: list[str] = []

    def terminate_when_done() -> None:
        def sent_three() -> bool:
            printed.append(capsys.readouterr().out)
            return "".join(printed).count("sending") >= 3

        wait_until(sent_three, "three sent")
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_done)
    killer.start()
    try:
        exec(compile(code, "docs/queues.md", "exec"), {"__name__": "example"})
    finally:
        signal.signal(signal.SIGTERM, previous)
        killer.join(TIMEOUT_S)
    other = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    try:
        assert other.poll(timeout_ms=1500) == []  # all three accepted
    finally:
        other.close()
