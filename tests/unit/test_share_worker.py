"""recipes.queues.ShareWorker against a fake share consumer.

The fake stands for the broker's side as far as the worker sees it: records delivered with
a delivery count, each held under a lock that runs out (the record is then available
again, and a late acknowledgement is refused), RENEW moving the lock on, acknowledgements
sent at the next poll or commit and reported through ``on_acknowledged``, close releasing
what is still held, and (where a test gives one) the group's delivery limit: a record
released, or whose lock ran out, at that delivery is archived, and the limit is what
``delivery_count_limit`` answers. Threads run on real time with short intervals.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

import recipes.queues._worker as worker_module
from coordination.errors import (
    ConfigurationError,
    CoordinatorStateError,
    FatalBrokerError,
    GroupAuthorizationError,
)
from coordination.transport import TransportError
from recipes.queues import (
    DEAD_LETTER_HEADERS,
    AcknowledgeType,
    AcquisitionLockExpiredError,
    ShareMetrics,
    ShareRecord,
    ShareWorker,
)

A = AcknowledgeType
TOPIC = "jobs"
TOPIC_ID = uuid.UUID(int=7)


class FakeBroker:
    """One partition's records, their state and what the consumer sent, in order."""

    def __init__(
        self, records: int = 0, lock_s: float = 30.0, delivery_limit: int | None = None
    ) -> None:
        self.lock = threading.Lock()
        self.lock_s = lock_s
        # The group's share.delivery.count.limit; None: not modelled, and not named.
        self.delivery_limit = delivery_limit
        self.limit_errors: list[Exception] = []  # what the next lookups raise, in turn
        self.limit_lookups = 0
        self.lag: dict[tuple[str, int], int] = {}  # what the consumer's metrics() say
        self.deliveries: dict[int, int] = {}
        self.state: dict[int, str] = {}  # available, acquired, accepted, rejected, archived
        self.events: list[
            tuple[str, int, float]
        ] = []  # (ACCEPT/RELEASE/.../dead-letter, offset, when)
        self.refused: list[tuple[int, AcknowledgeType]] = []
        self.fail_poll: BaseException | None = None
        self.renewals_to_refuse = 0
        self.locked_until: dict[int, float] = {}  # the broker's own lock of each record
        self.add(records)

    def add(self, count: int) -> None:
        with self.lock:
            start = len(self.state)
            for offset in range(start, start + count):
                self.state[offset] = "available"
                self.deliveries[offset] = 0

    def released(self, offset: int) -> str:
        """The state of a record released (or whose lock ran out) now, under the lock."""
        last = self.delivery_limit is not None and self.deliveries[offset] >= self.delivery_limit
        return "archived" if last else "available"

    def log(self, what: str, offset: int) -> None:
        with self.lock:
            self.events.append((what, offset, time.monotonic()))

    def acks(self, kind: AcknowledgeType) -> list[int]:
        with self.lock:
            return [offset for what, offset, _ in self.events if what == kind.name]

    def wait_for(self, done: Callable[[], bool], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, self.events
            time.sleep(0.01)


class FakeMember:
    member_epoch = 0


class FakeConsumer:
    """ShareConsumer's face, as the worker uses it, over a FakeBroker."""

    made: ClassVar[list[FakeConsumer]] = []

    def __init__(
        self,
        group_id: str,
        *,
        topics: list[str],
        acknowledgement_mode: str,
        max_poll_records: int,
        on_acknowledged: Callable[..., None],
        clock: Any,
        acquire_mode: str,
        broker: FakeBroker,
        **settings: Any,
    ) -> None:
        assert acknowledgement_mode == "explicit" and topics == [TOPIC]
        self.settings = settings  # the ones the worker passes through
        assert acquire_mode == "record_limit"
        self.group_id = group_id
        self.member_id = "member-1"
        self.member = FakeMember()  # joined at the first poll
        self.max_poll_records = max_poll_records
        self.on_acknowledged = on_acknowledged
        self.broker = broker
        self.held: dict[int, tuple[ShareRecord, float]] = {}
        self.pending: dict[int, AcknowledgeType] = {}
        self.closed = False
        self.thread: threading.Thread | None = None
        FakeConsumer.made.append(self)

    def _same_thread(self) -> None:
        # Not thread-safe, as the real one: one thread only.
        if self.thread is None:
            self.thread = threading.current_thread()
        assert self.thread is threading.current_thread()

    def poll(self, timeout_ms: int) -> list[ShareRecord]:
        self._same_thread()
        assert not self.closed
        self.member.member_epoch = 1
        if self.broker.fail_poll is not None:
            raise self.broker.fail_poll
        self._send()
        records = self._acquire()
        if not records:
            time.sleep(min(timeout_ms, 20) / 1000)
        return records

    def _acquire(self) -> list[ShareRecord]:
        b = self.broker
        now = time.monotonic()
        got: list[ShareRecord] = []
        with b.lock:
            for offset, deadline in b.locked_until.items():
                if deadline <= now and b.state[offset] == "acquired":
                    b.state[offset] = b.released(offset)  # the lock ran out
            for offset, state in sorted(b.state.items()):
                if len(got) >= self.max_poll_records:
                    break
                if state == "available":
                    b.state[offset] = "acquired"
                    b.deliveries[offset] += 1
                    record = ShareRecord(
                        topic=TOPIC,
                        partition=0,
                        offset=offset,
                        key=b"k%d" % offset,
                        value=b"v%d" % offset,
                        headers=(("trace", b"t%d" % offset), ("empty", None)),
                        timestamp=1000 + offset,
                        delivery_count=b.deliveries[offset],
                        topic_id=TOPIC_ID,
                    )
                    self.held[offset] = (record, now + b.lock_s)
                    b.locked_until[offset] = now + b.lock_s
                    got.append(record)
                    b.events.append(("acquired", offset, now))
        return got

    def acknowledge(self, record: ShareRecord, ack_type: AcknowledgeType) -> None:
        self._same_thread()
        held = self.held.get(record.offset)
        if held is None or held[0] is not record:
            raise CoordinatorStateError("not held")
        self.pending[record.offset] = ack_type

    def commit(self) -> dict[Any, Any]:
        self._same_thread()
        self._send()
        return {}

    def delivery_count_limit(self, timeout: float | None = None) -> int | None:
        self._same_thread()  # the poll thread asks
        with self.broker.lock:
            self.broker.limit_lookups += 1
            if self.broker.limit_errors:
                raise self.broker.limit_errors.pop(0)
            return self.broker.delivery_limit

    def metrics(self) -> ShareMetrics:
        self._same_thread()
        with self.broker.lock:
            return ShareMetrics(lag=dict(self.broker.lag))

    def lock_deadline(self, record: ShareRecord) -> float | None:
        held = self.held.get(record.offset)
        return held[1] if held is not None and held[0] is record else None

    def close(self, timeout: float = 30.0) -> dict[Any, Any]:
        self._same_thread()
        for offset in self.held:
            if self.pending.get(offset, A.RENEW) is A.RENEW:
                self.pending[offset] = A.RELEASE
        self._send()
        self.closed = True
        return {}

    def _send(self) -> None:
        b = self.broker
        pending, self.pending = self.pending, {}
        now = time.monotonic()
        for offset, kind in sorted(pending.items()):
            _, deadline = self.held[offset]
            with b.lock:
                ok = deadline > now and b.state[offset] == "acquired"
                if ok and kind is A.RENEW and b.renewals_to_refuse > 0:
                    b.renewals_to_refuse -= 1
                    ok = False
                if ok:
                    b.events.append((kind.name, offset, now))
                    if kind is A.RENEW:
                        self.held[offset] = (self.held[offset][0], now + b.lock_s)
                        b.locked_until[offset] = now + b.lock_s
                    else:
                        b.state[offset] = {
                            A.ACCEPT: "accepted",
                            A.RELEASE: b.released(offset),
                            A.REJECT: "rejected",
                        }[kind]
                else:
                    b.refused.append((offset, kind))
            if not ok or kind is not A.RENEW:
                del self.held[offset]
            error = None if ok else AcquisitionLockExpiredError(TOPIC, 0, (offset,), 73)
            self.on_acknowledged((TOPIC, 0), (offset,), error)


class FakeFuture:
    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def get(self, timeout: float) -> object:
        if self.error is not None:
            raise self.error
        return object()


class FakeProducer:
    def __init__(self, broker: FakeBroker, error: Exception | None = None) -> None:
        self.broker = broker
        self.error = error
        self.sent: list[dict[str, Any]] = []

    def send(self, topic: str, **record: Any) -> FakeFuture:
        self.sent.append({"topic": topic, **record})
        offset = int(dict(record["headers"])["__dlq.origin.offset"])
        if self.error is None:
            self.broker.log("dead-letter", offset)
        return FakeFuture(self.error)

    def headers(self, copy: int = 0) -> dict[str, bytes]:
        """The headers of the ``copy``-th record sent (the first by default), by name."""
        return dict(self.sent[copy]["headers"])


@pytest.fixture(autouse=True)
def fake_consumer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(worker_module, "ShareConsumer", FakeConsumer)
    FakeConsumer.made.clear()
    yield


@pytest.fixture
def workers() -> Iterator[list[ShareWorker]]:
    made: list[ShareWorker] = []
    yield made
    for w in made:
        w.close()


def make(
    workers: list[ShareWorker],
    broker: FakeBroker,
    handler: Callable[[ShareRecord], object],
    **kw: Any,
) -> ShareWorker:
    kw.setdefault("redelivery_backoff_ms", 0)
    w = ShareWorker("g", topics=[TOPIC], handler=handler, broker=broker, **kw)
    workers.append(w)
    return w


def dead_lettering(
    workers: list[ShareWorker],
    broker: FakeBroker,
    handler: Callable[[ShareRecord], object],
    producer: FakeProducer | None = None,
    **kw: Any,
) -> tuple[ShareWorker, FakeProducer]:
    """A worker (see ``make``) that copies the records it gives up on to ``jobs.dlq`` through
    ``producer``, a new FakeProducer over ``broker`` by default; returns both."""
    if producer is None:
        producer = FakeProducer(broker)
    w = make(
        workers, broker, handler, dead_letter_topic="jobs.dlq", dead_letter_producer=producer, **kw
    )
    return w, producer


class Retryable(Exception):
    pass


class Poison(Exception):
    pass


def test_each_outcome_becomes_its_acknowledgement(workers: list[ShareWorker]) -> None:
    broker = FakeBroker(records=4)
    tried: list[tuple[int, int]] = []

    def handle(record: ShareRecord) -> None:
        tried.append((record.offset, record.delivery_count))
        if record.offset == 1 and record.delivery_count == 1:
            raise Retryable("once")
        if record.offset == 2:
            raise Poison("never")
        if record.offset == 3:
            raise Retryable("always")

    w = make(workers, broker, handle, retry_on=Retryable, max_deliveries=3)
    w.start()
    broker.wait_for(
        lambda: broker.state == {0: "accepted", 1: "accepted", 2: "rejected", 3: "rejected"}
    )
    assert sorted(tried) == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1), (3, 2), (3, 3)]
    assert sorted(broker.acks(A.RELEASE)) == [1, 3, 3]
    w.close()
    m = w.metrics()
    assert (m.accepted, m.released, m.rejected, m.retries, m.handler_errors) == (2, 3, 2, 3, 5)
    assert (m.dead_lettered, m.dead_letter_failures, m.acknowledgements_failed) == (0, 0, 0)


def test_retry_on_takes_a_predicate(workers: list[ShareWorker]) -> None:
    broker = FakeBroker(records=2)

    def handle(record: ShareRecord) -> None:
        if record.delivery_count == 1:
            raise ValueError("retry me" if record.offset == 0 else "fatal")

    w = make(workers, broker, handle, retry_on=lambda exc: "retry" in str(exc))
    w.start()
    broker.wait_for(lambda: broker.state == {0: "accepted", 1: "rejected"})
    assert broker.deliveries == {0: 2, 1: 1}


def test_a_poison_record_is_copied_to_the_dead_letter_topic_before_its_reject(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=1)

    def handle(record: ShareRecord) -> None:
        raise Poison("bad payload")

    w, producer = dead_lettering(workers, broker, handle, retry_on=Retryable)
    w.start()
    broker.wait_for(lambda: broker.state == {0: "rejected"})
    assert [what for what, _, _ in broker.events] == ["acquired", "dead-letter", "REJECT"]
    (copy,) = producer.sent
    assert (copy["topic"], copy["key"], copy["value"]) == ("jobs.dlq", b"k0", b"v0")
    headers = copy["headers"]
    assert headers[:2] == [("trace", b"t0"), ("empty", b"")]
    assert dict(headers[2:]) == {
        "__dlq.origin.topic": b"jobs",
        "__dlq.origin.partition": b"0",
        "__dlq.origin.offset": b"0",
        "__dlq.origin.timestamp": b"1000",
        "__dlq.group.id": b"g",
        "__dlq.delivery.count": b"1",
        "__dlq.reason": b"not_retryable",
        "__dlq.error.class": f"{__name__}.Poison".encode(),
        "__dlq.error.message": b"bad payload",
    }
    assert [name for name, _ in headers[2:]] == list(DEAD_LETTER_HEADERS)
    w.close()
    assert (w.metrics().dead_lettered, w.metrics().rejected) == (1, 1)


def test_a_failed_dead_letter_copy_releases_the_record_instead_of_rejecting_it(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=1)
    attempts: list[int] = []

    def handle(record: ShareRecord) -> None:
        attempts.append(record.delivery_count)
        raise Retryable("down")

    unreachable = FakeProducer(broker, error=TimeoutError("no dead-letter topic leader"))
    w, producer = dead_lettering(workers, broker, handle, unreachable, max_deliveries=2)
    w.start()
    broker.wait_for(lambda: len(producer.sent) >= 2)
    w.close()
    assert broker.acks(A.REJECT) == []
    assert broker.state == {0: "available"}  # never dropped
    assert attempts[:3] == [1, 2, 3]  # retried once, then the copy failed at each delivery
    m = w.metrics()
    assert m.dead_letter_failures >= 2 and m.dead_lettered == 0 and m.rejected == 0
    assert producer.sent[0]["headers"][-3] == ("__dlq.reason", b"max_deliveries")


def always_failing(attempts: list[int]) -> Callable[[ShareRecord], None]:
    def handle(record: ShareRecord) -> None:
        attempts.append(record.delivery_count)
        raise Retryable("down")

    return handle


def test_the_brokers_lower_delivery_limit_makes_a_failure_final_at_its_last_delivery(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture
) -> None:
    # The group's limit is 2, max_deliveries 4: released at delivery 2, the record would be
    # archived by the broker without a copy. It is dead-lettered and rejected there instead.
    broker = FakeBroker(records=1, delivery_limit=2)
    attempts: list[int] = []
    w, producer = dead_lettering(workers, broker, always_failing(attempts), max_deliveries=4)
    assert w.final_delivery == 4  # not read before the worker joins
    w.start()
    broker.wait_for(lambda: broker.state[0] != "available" and broker.state[0] != "acquired")
    w.close()
    assert broker.state == {0: "rejected"}
    assert attempts == [1, 2] and w.final_delivery == 2
    assert [what for what, _, _ in broker.events if what != "acquired"] == [
        "RELEASE",
        "dead-letter",
        "REJECT",
    ]
    headers = producer.headers()
    assert headers["__dlq.delivery.count"] == b"2" and headers["__dlq.reason"] == b"max_deliveries"
    assert broker.limit_lookups == 1
    wins = [r for r in caplog.records if "which wins" in r.getMessage()]
    assert len(wins) == 1 and "share.delivery.count.limit=2" in wins[0].getMessage()


def test_the_limit_is_read_once_joined_before_any_record_comes(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(delivery_limit=3)
    w = make(workers, broker, lambda record: None, max_deliveries=4)
    w.start()
    broker.wait_for(lambda: w.final_delivery == 3)
    w.close()
    assert broker.limit_lookups == 1 and broker.events == []


def test_max_deliveries_below_the_brokers_limit_stands(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = FakeBroker(records=1, delivery_limit=5)
    attempts: list[int] = []
    w = make(workers, broker, always_failing(attempts), max_deliveries=3)
    w.start()
    broker.wait_for(lambda: broker.state == {0: "rejected"})
    w.close()
    assert attempts == [1, 2, 3] and w.final_delivery == 3
    assert broker.limit_lookups == 1
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r for r in warnings if "limit" in r.getMessage()] == []


def test_a_refused_limit_lookup_warns_naming_the_setting_and_max_deliveries_stands(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = FakeBroker(records=2, delivery_limit=2)
    broker.limit_errors.append(GroupAuthorizationError(30, group_id="g", api="DescribeConfigs"))
    attempts: list[int] = []
    w = make(workers, broker, always_failing(attempts), max_deliveries=3)
    w.start()
    # max_deliveries stands: the records are released at delivery 2, and the broker (its
    # limit 2) archives them: what the warning tells the user to avoid.
    broker.wait_for(lambda: broker.state == {0: "archived", 1: "archived"})
    w.close()
    assert w.final_delivery == 3 and broker.limit_lookups == 1  # not asked again
    (warning,) = [r for r in caplog.records if "delivery limit" in r.getMessage()]
    assert warning.levelname == "WARNING"
    text = warning.getMessage()
    assert "share.delivery.count.limit" in text and "GroupAuthorizationError" in text
    assert "max_deliveries=3" in text and "not asked again" in text


def test_a_limit_lookup_without_answer_is_asked_again_later(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "_LIMIT_RETRY_S", 0.0)
    broker = FakeBroker(records=1, delivery_limit=2)
    broker.limit_errors.append(TransportError("DescribeConfigs got no response"))
    attempts: list[int] = []
    w, _ = dead_lettering(
        workers,
        broker,
        always_failing(attempts),
        max_deliveries=4,
        delivery_limit_refresh_ms=1,  # asked again at the next poll
    )
    w.start()
    broker.wait_for(lambda: broker.state == {0: "rejected"})
    w.close()
    # Delivery 1 went to the handler with max_deliveries (no answer yet); delivery 2 came
    # with the limit read, and was the last.
    assert attempts == [1, 2] and broker.limit_lookups >= 2 and w.final_delivery == 2
    (warning,) = [r for r in caplog.records if "could not read" in r.getMessage()]
    assert "no answer" in warning.getMessage() and "asked again" in warning.getMessage()


def test_a_limit_lowered_while_the_worker_runs_is_read_and_a_failure_at_it_dead_lettered(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture
) -> None:
    # The group's limit is 5 when the worker starts; an operator lowers it to 2 during the
    # first delivery. Released at delivery 2, the record would be archived without a copy.
    broker = FakeBroker(records=1, delivery_limit=5)
    attempts: list[int] = []

    def handle(record: ShareRecord) -> None:
        attempts.append(record.delivery_count)
        if record.delivery_count == 1:
            broker.delivery_limit = 2
            time.sleep(0.3)  # a refresh (every 0.1 s) reads it meanwhile
        raise Retryable("down")

    w, producer = dead_lettering(
        workers, broker, handle, max_deliveries=4, delivery_limit_refresh_ms=100
    )
    w.start()
    broker.wait_for(lambda: broker.state[0] not in ("available", "acquired"))
    w.close()
    assert broker.state == {0: "rejected"} and attempts == [1, 2] and w.final_delivery == 2
    assert [what for what, _, _ in broker.events if what != "acquired"] == [
        "RELEASE",
        "dead-letter",
        "REJECT",
    ]
    assert producer.headers()["__dlq.delivery.count"] == b"2"
    assert "share.delivery.count.limit=2 (was 5)" in caplog.text


def test_a_retry_whose_delivery_a_limit_lowered_during_its_backoff_makes_the_last_is_dead_lettered(
    workers: list[ShareWorker],
) -> None:
    # Delivery 2 fails while the limit is 5: a retry, held for its backoff (2 s). The limit
    # is lowered to 2 meanwhile: released then, the record would be archived without a
    # copy. At its release the worker sees that delivery 2 is the last and dead-letters it.
    broker = FakeBroker(records=1, delivery_limit=5)
    attempts: list[int] = []
    w, producer = dead_lettering(
        workers,
        broker,
        always_failing(attempts),
        max_deliveries=4,
        redelivery_backoff_ms=1000,
        delivery_limit_refresh_ms=100,
    )
    w.start()
    broker.wait_for(lambda: w.metrics().retries == 2)
    broker.delivery_limit = 2
    broker.wait_for(lambda: broker.state[0] not in ("available", "acquired"))
    w.close()
    assert broker.state == {0: "rejected"} and attempts == [1, 2]
    assert [what for what, _, _ in broker.events if what not in ("acquired", "RENEW")] == [
        "RELEASE",
        "dead-letter",
        "REJECT",
    ]
    headers = producer.headers()
    assert headers["__dlq.delivery.count"] == b"2" and headers["__dlq.reason"] == b"max_deliveries"
    m = w.metrics()
    assert (m.retries, m.released, m.dead_lettered, m.rejected) == (1, 1, 1, 1)


def test_a_failed_refresh_keeps_the_last_reading_and_warns_once(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "_LIMIT_RETRY_S", 0.0)
    broker = FakeBroker(delivery_limit=3)
    w = make(workers, broker, lambda record: None, delivery_limit_refresh_ms=20)
    w.start()
    broker.wait_for(lambda: w.final_delivery == 3)
    with broker.lock:
        broker.limit_errors.extend(TransportError("no response") for _ in range(3))
        asked = broker.limit_lookups
    broker.wait_for(lambda: broker.limit_lookups >= asked + 4)  # three failed, then one not
    w.close()
    assert w.final_delivery == 3
    (warning,) = [r for r in caplog.records if "could not read" in r.getMessage()]
    assert warning.levelname == "WARNING" and "the last one read (3) stands" in warning.getMessage()


def test_the_consumers_lag_after_each_poll_is_in_the_workers_metrics(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker()
    w = make(workers, broker, lambda record: None)
    assert w.metrics().lag == {}
    w.start()
    with broker.lock:
        broker.lag = {(TOPIC, 0): 7}
    broker.wait_for(lambda: w.metrics().lag == {(TOPIC, 0): 7})
    with broker.lock:
        broker.lag = {(TOPIC, 0): 0}
    broker.wait_for(lambda: w.metrics().lag == {(TOPIC, 0): 0})


def test_a_retry_waits_its_backoff_before_the_release(workers: list[ShareWorker]) -> None:
    # Locks and waits long enough that a poll thread held up by a loaded machine (a
    # parallel test run) does not let a lock run out where the test expects none.
    broker = FakeBroker(records=1, lock_s=0.6)
    failed_at: list[float] = []

    def handle(record: ShareRecord) -> None:
        if record.delivery_count == 1:
            failed_at.append(time.monotonic())
            raise Retryable("later")

    w = make(workers, broker, handle, redelivery_backoff_ms=1200)
    w.start()
    broker.wait_for(lambda: broker.state == {0: "accepted"})
    ((_, _, released_at),) = [e for e in broker.events if e[0] == "RELEASE"]
    assert released_at - failed_at[0] >= 1.2
    # The 0.6 s lock was renewed meanwhile; nothing was refused.
    assert len(broker.acks(A.RENEW)) >= 2 and broker.refused == []


def test_a_long_handler_keeps_its_lock_renewed_before_it_runs_out(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=1, lock_s=0.8)

    def handle(record: ShareRecord) -> None:
        time.sleep(3.0)

    w = make(workers, broker, handle)
    w.start()
    broker.wait_for(lambda: broker.state == {0: "accepted"})
    assert broker.refused == [] and broker.deliveries == {0: 1}
    renewals = [when for what, _, when in broker.events if what == "RENEW"]
    assert len(renewals) >= 3
    # Each lock (from the acquisition, then from each renewal) was renewed before it ran out.
    times = [when for what, _, when in broker.events if what in ("acquired", "RENEW", "ACCEPT")]
    assert len(times) == len(renewals) + 2
    assert all(after - before < 0.8 for before, after in itertools.pairwise(times))
    w.close()
    assert w.metrics().lock_renewals == len(renewals)


def test_a_record_whose_lock_ran_out_is_not_acknowledged_after_its_handler(
    workers: list[ShareWorker], caplog: pytest.LogCaptureFixture
) -> None:
    # A 1 s lock: the second delivery's ACCEPT must reach the broker within it even when a
    # loaded machine holds the poll thread up (0.3 s failed once so).
    broker = FakeBroker(records=1, lock_s=1.0)
    broker.renewals_to_refuse = 1
    handled: list[int] = []

    def handle(record: ShareRecord) -> None:
        handled.append(record.delivery_count)
        if record.delivery_count == 1:
            time.sleep(2.5)

    w = make(workers, broker, handle)
    w.start()
    broker.wait_for(lambda: broker.state == {0: "accepted"})
    # The first delivery's outcome came after its lock: not acknowledged; the second was.
    assert handled == [1, 2] and broker.acks(A.ACCEPT) == [0]
    w.close()
    m = w.metrics()
    assert (m.accepted, m.acknowledgements_failed) == (1, 1)
    assert "lock of jobs[0] offset 0 ran out" in caplog.text


def test_close_releases_the_unstarted_at_once_and_waits_for_the_running(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=5)
    started = threading.Event()
    finish = threading.Event()

    def handle(record: ShareRecord) -> None:
        started.set()
        finish.wait(10)

    w = make(workers, broker, handle, concurrency=1, prefetch=4)
    w.start()
    assert started.wait(5)
    closing = threading.Thread(target=w.close)
    closing.start()
    # The four waiting ones are released while the first is still being handled.
    broker.wait_for(lambda: len(broker.acks(A.RELEASE)) == 4)
    assert sorted(broker.acks(A.RELEASE)) == [1, 2, 3, 4] and closing.is_alive()
    finish.set()
    closing.join(5)
    assert not closing.is_alive()
    assert broker.state == {
        0: "accepted",
        1: "available",
        2: "available",
        3: "available",
        4: "available",
    }
    assert FakeConsumer.made[0].closed
    m = w.metrics()
    assert (m.accepted, m.released, m.released_unstarted) == (1, 4, 4)


def test_a_handler_past_the_drain_timeout_has_its_record_released_by_the_close(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=1)
    started = threading.Event()
    finish = threading.Event()

    def handle(record: ShareRecord) -> None:
        started.set()
        finish.wait(10)

    w = make(workers, broker, handle, drain_timeout_ms=300)
    w.start()
    assert started.wait(5)
    began = time.monotonic()
    w.close()
    assert 0.3 <= time.monotonic() - began < 2
    assert broker.state == {0: "available"} and broker.acks(A.RELEASE) == [0]
    finish.set()


def test_handlers_run_concurrently(workers: list[ShareWorker]) -> None:
    broker = FakeBroker(records=3)
    together = threading.Barrier(3, timeout=5)
    w = make(workers, broker, lambda record: together.wait(), concurrency=3)
    w.start()
    broker.wait_for(lambda: set(broker.state.values()) == {"accepted"})


def test_a_handler_may_stop_the_worker_but_not_close_it(workers: list[ShareWorker]) -> None:
    broker = FakeBroker(records=1)
    refused: list[BaseException] = []

    def handle(record: ShareRecord) -> None:
        try:
            w.close()
        except CoordinatorStateError as exc:
            refused.append(exc)
        w.stop()

    w = make(workers, broker, handle)
    run = threading.Thread(target=w.run)
    run.start()
    run.join(5)
    assert not run.is_alive() and broker.state == {0: "accepted"}
    assert "stop()" in str(refused[0])


def test_a_fatal_poll_error_stops_the_worker_and_run_raises_it(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=0)
    broker.fail_poll = FatalBrokerError(30, group_id="g", api="ShareFetch")
    w = make(workers, broker, lambda record: None)
    with pytest.raises(FatalBrokerError):
        w.run()
    assert w.error is broker.fail_poll and FakeConsumer.made[0].closed


def test_a_with_block_starts_the_worker_and_drains_it_at_its_end() -> None:
    broker = FakeBroker(records=3)
    with ShareWorker("g", topics=[TOPIC], handler=lambda record: None, broker=broker) as w:
        broker.wait_for(lambda: set(broker.state.values()) == {"accepted"})
    assert FakeConsumer.made[0].closed
    assert (w.metrics().received, w.metrics().accepted) == (3, 3)


def test_close_without_start_closes_the_consumer(workers: list[ShareWorker]) -> None:
    w = make(workers, FakeBroker(), lambda record: None)
    w.close()
    w.close()
    assert FakeConsumer.made[0].closed
    with pytest.raises(CoordinatorStateError):
        w.start()


def test_the_members_retry_backoff_passes_through_and_the_redelivery_backoff_stays_the_workers(
    workers: list[ShareWorker],
) -> None:
    broker = FakeBroker(records=1)
    failed = threading.Event()

    def handle(record: ShareRecord) -> None:
        if record.delivery_count == 1:
            failed.set()
            raise ValueError("try again")

    w = make(
        workers,
        broker,
        handle,
        redelivery_backoff_ms=1500,
        retry_backoff_ms=250,
        retry_backoff_max_ms=2000,
    )
    w.start()
    assert failed.wait(5)
    # The member's request backoff reaches the consumer; the worker keeps its own.
    assert FakeConsumer.made[0].settings == {"retry_backoff_ms": 250, "retry_backoff_max_ms": 2000}
    time.sleep(0.5)
    assert broker.acks(A.RELEASE) == []  # still held: 1.5 s, not the member's 0.25 s
    broker.wait_for(lambda: w.metrics().accepted == 1)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"handler": None}, "handler"),
        ({"concurrency": 0}, "concurrency"),
        ({"prefetch": -1}, "prefetch"),
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"max_deliveries": 11}, "max_deliveries"),
        ({"delivery_limit_refresh_ms": 0}, "delivery_limit_refresh_ms"),
        ({"redelivery_backoff_ms": -1}, "redelivery_backoff_ms"),
        (
            {"redelivery_backoff_ms": 500, "redelivery_backoff_max_ms": 100},
            "redelivery_backoff_max_ms",
        ),
        ({"retry_on": "ValueError"}, "retry_on"),
        ({"retry_on": (ValueError, int)}, "retry_on"),
        ({"dead_letter_topic": "jobs"}, "dead_letter_topic"),
        ({"dead_letter_topic": ""}, "dead_letter_topic"),
        ({"dead_letter_producer": object()}, "dead_letter_topic"),
        ({"dead_letter_timeout_ms": 0}, "dead_letter_timeout_ms"),
        ({"drain_timeout_ms": -5}, "drain_timeout_ms"),
        ({"acknowledgement_mode": "implicit"}, "acknowledgement_mode"),
        ({"max_poll_records": 10}, "max_poll_records"),
        ({"on_acknowledged": print}, "on_acknowledged"),
    ],
)
def test_a_bad_setting_is_a_configuration_error_naming_it(
    settings: dict[str, Any], named: str
) -> None:
    args: dict[str, Any] = {"handler": lambda record: None, "broker": FakeBroker(), **settings}
    with pytest.raises(ConfigurationError, match=named):
        ShareWorker("g", topics=[TOPIC], **args)
