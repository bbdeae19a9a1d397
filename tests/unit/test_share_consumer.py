"""The share-group member and consumer (coordination/_engine/share_group.py,
share_sessions.py, recipes/queues) against a small model of the broker's side.

The model answers as Kafka's share-group coordinator and share-partition leader document
it: a joining member (epoch 0) gets epoch 1 and every partition; a share session opens at
epoch 0 and must then be continued with the next epoch; a partition's acknowledgements are
applied all or none (INVALID_RECORD_STATE if any record is not held by the member, as
``SharePartition.acknowledge`` rolls back); a closed session releases what it held.
Threads run on real time with short intervals; the tests wait for conditions.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kafka.record import MemoryRecordsBuilder

import recipes.queues._consumer as consumer_module
from coordination._engine.share_sessions import batches
from coordination._protocol import messages as m
from coordination._protocol import share_group as sg
from coordination._protocol.consumer_group import TopicIdPartitions
from coordination._protocol.error_codes import ErrorCode as E
from coordination.errors import (
    ConfigurationError,
    CoordinatorStateError,
    GroupMaxSizeReachedError,
    ShareGroupsUnsupportedError,
)
from coordination.hooks import (
    CoordinationHooks,
    HeartbeatFailed,
    RebalanceFinished,
    RebalanceStarted,
)
from coordination.share_group import ShareGroupMember, TopicLocation
from coordination.transport import CoordinatorNode, TransportError
from recipes.queues import (
    AcknowledgementError,
    AcknowledgementUncertainError,
    AcknowledgeType,
    AcquisitionLockExpiredError,
    ShareConsumer,
    ShareRecord,
)

TOPIC = uuid.UUID(int=7)
LEADER = CoordinatorNode(1, "leader", 9092)
LEADERS = (LEADER, CoordinatorNode(2, "other-leader", 9092))
A = AcknowledgeType


class Broker:
    """The coordinator and the partition leader of one topic, for one or more members."""

    def __init__(self, records: int = 3, partitions: int = 1, lock_ms: int = 30_000) -> None:
        self.lock = threading.Lock()
        self.partitions = partitions
        self.lock_ms = lock_ms
        self.sent: list[Any] = []
        self.group_epoch = 0
        self.answers: dict[type, list[Any]] = {}  # prepared answers, used first
        # (member id, leader) -> the next epoch expected
        self.sessions: dict[tuple[str, CoordinatorNode | None], int] = {}
        self.session_partitions: dict[tuple[str, CoordinatorNode | None], set[int]] = {}
        # (partition, offset) -> [state, delivery count, holder]
        self.state: dict[tuple[int, int], list[Any]] = {
            (n % partitions, n // partitions): ["available", 0, None] for n in range(records)
        }
        self.closed = False
        self.leaders_apart = False  # partition n led by LEADERS[n % 2], else all by LEADER

    # -- scripting -------------------------------------------------------------------

    def then(self, kind: type, answer: Any) -> None:
        """Answer the next request of ``kind`` with ``answer`` (a response or an error code
        or a TransportError)."""
        with self.lock:
            self.answers.setdefault(kind, []).append(answer)

    def requests(self, kind: type) -> list[Any]:
        with self.lock:
            return [r for r, _ in self.sent if isinstance(r, kind)]

    def expire(self, partition: int, offset: int) -> None:
        """The record's lock runs out: available again."""
        with self.lock:
            self.state[(partition, offset)][0] = "available"
            self.state[(partition, offset)][2] = None

    # -- Transport -------------------------------------------------------------------

    def send(
        self,
        request: Any,
        response_type: type[Any],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: Any = None,
    ) -> Any:
        if self.closed:
            raise TransportError("closed")
        if isinstance(request, m.FindCoordinatorRequest):
            return m.FindCoordinatorResponse(error_code=0, node_id=1, host="h", port=1)
        with self.lock:
            self.sent.append((request, coordinator))
            queued = self.answers.get(response_type)
            prepared = queued.pop(0) if queued else None
        if isinstance(prepared, TransportError):
            raise prepared
        if isinstance(prepared, int):
            return response_type(error_code=prepared)
        if prepared is not None:
            return prepared
        handlers: dict[type, Callable[[Any, CoordinatorNode | None], Any]] = {
            sg.ShareGroupHeartbeatRequest: self._heartbeat,
            sg.ShareFetchRequest: self._fetch,
            sg.ShareAcknowledgeRequest: self._acknowledge,
            sg.DescribeShareGroupOffsetsRequest: self._describe_offsets,
        }
        with self.lock:
            return handlers[type(request)](request, coordinator)

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        pass

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    # -- the broker's side -------------------------------------------------------------

    def _heartbeat(
        self, r: sg.ShareGroupHeartbeatRequest, _: CoordinatorNode | None
    ) -> sg.ShareGroupHeartbeatResponse:
        if r.member_epoch == sg.LEAVE_EPOCH:
            return sg.ShareGroupHeartbeatResponse(0, member_id=r.member_id, member_epoch=-1)
        assignment = None
        if r.member_epoch == sg.JOIN_EPOCH:
            self.group_epoch += 1
            assignment = (TopicIdPartitions(TOPIC, tuple(range(self.partitions))),)
        return sg.ShareGroupHeartbeatResponse(
            0,
            member_id=r.member_id,
            member_epoch=self.group_epoch,
            heartbeat_interval_ms=20,
            assignment=assignment,
        )

    def _session(self, key: tuple[str, CoordinatorNode | None], epoch: int) -> int:
        """The session check of Kafka's ShareSessionCache; an error code or 0."""
        if epoch == sg.OPEN_SESSION_EPOCH:
            self.sessions[key] = 1
            return 0
        expected = self.sessions.get(key)
        if expected is None:
            return E.SHARE_SESSION_NOT_FOUND
        if epoch == sg.CLOSE_SESSION_EPOCH:
            return 0
        if epoch != expected:
            return E.INVALID_SHARE_SESSION_EPOCH
        self.sessions[key] = expected + 1
        return 0

    def _apply(self, member_id: str, p: int, acks: tuple[sg.AcknowledgementBatch, ...]) -> int:
        """All or none, as SharePartition.acknowledge."""
        kinds = {}
        for b in acks:
            for offset in range(b.first_offset, b.last_offset + 1):
                kinds[offset] = b.acknowledge_types[0]
        for offset in kinds:
            st = self.state.get((p, offset))
            if st is None or st[0] != "acquired" or st[2] != member_id:
                return E.INVALID_RECORD_STATE
        for offset, kind in kinds.items():
            st = self.state[(p, offset)]
            if kind == A.ACCEPT:
                st[0], st[2] = "acknowledged", None
            elif kind == A.RELEASE:
                st[0], st[2] = "available", None
            elif kind == A.REJECT:
                st[0], st[2] = "archived", None
        return 0

    def _release(self, member_id: str, partitions: set[int]) -> None:
        for (p, _), st in self.state.items():
            if p in partitions and st[0] == "acquired" and st[2] == member_id:
                st[0], st[2] = "available", None

    def leader_of(self, partition: int) -> CoordinatorNode:
        return LEADERS[partition % len(LEADERS)] if self.leaders_apart else LEADER

    def _fetch(
        self, r: sg.ShareFetchRequest, leader: CoordinatorNode | None
    ) -> sg.ShareFetchResponse:
        assert r.member_id is not None
        key = (r.member_id, leader)
        code = self._session(key, r.share_session_epoch)
        if code:
            return sg.ShareFetchResponse(code)
        # The session's partitions: those named since it opened, less those forgotten.
        fetched = self.session_partitions.setdefault(key, set())
        if r.share_session_epoch == sg.OPEN_SESSION_EPOCH:
            fetched.clear()
        for forgotten in r.forgotten_topics_data:
            fetched.difference_update(forgotten.partitions)
        acked = {}
        for topic in r.topics:
            for part in topic.partitions:
                fetched.add(part.partition_index)
                acked[part.partition_index] = self._apply(
                    r.member_id, part.partition_index, part.acknowledgement_batches
                )
        answers = [
            self._acquire(r.member_id, p, r.max_records, acked.get(p, 0)) for p in sorted(fetched)
        ]
        got = any(a.acquired_records for a in answers)
        if not got:
            time.sleep(min(r.max_wait_ms, 20) / 1000)
        return sg.ShareFetchResponse(
            0,
            acquisition_lock_timeout_ms=self.lock_ms,
            responses=(sg.ShareFetchTopicResponse(TOPIC, tuple(answers)),) if answers else (),
        )

    def _acquire(
        self, member_id: str, p: int, limit: int, acked: int
    ) -> sg.ShareFetchPartitionData:
        offsets = sorted(o for (q, o), st in self.state.items() if q == p and st[0] == "available")
        offsets = offsets[:limit]
        if not offsets:
            return sg.ShareFetchPartitionData(p, acknowledge_error_code=acked)
        builder = MemoryRecordsBuilder(2, 0, 1 << 16, offset=offsets[0])
        ranges = []
        for offset in offsets:
            st = self.state[(p, offset)]
            st[0], st[1], st[2] = "acquired", st[1] + 1, member_id
            ranges.append(sg.AcquiredRecords(offset, offset, st[1]))
        for offset in range(offsets[0], offsets[-1] + 1):
            builder.append(1_000 + offset, b"k", b"v%d" % offset, [])
        builder.close()
        return sg.ShareFetchPartitionData(
            p,
            acknowledge_error_code=acked,
            records=bytes(builder.buffer()),
            acquired_records=tuple(ranges),
        )

    def _acknowledge(
        self, r: sg.ShareAcknowledgeRequest, leader: CoordinatorNode | None
    ) -> sg.ShareAcknowledgeResponse:
        assert r.member_id is not None
        code = self._session((r.member_id, leader), r.share_session_epoch)
        if code:
            return sg.ShareAcknowledgeResponse(code)
        answers = [
            sg.ShareAcknowledgePartitionData(
                part.partition_index,
                self._apply(r.member_id, part.partition_index, part.acknowledgement_batches),
            )
            for topic in r.topics
            for part in topic.partitions
        ]
        if r.share_session_epoch == sg.CLOSE_SESSION_EPOCH:
            self._release(r.member_id, {p for (p, _) in self.state if self.leader_of(p) == leader})
            del self.sessions[(r.member_id, leader)]
        return sg.ShareAcknowledgeResponse(
            0,
            acquisition_lock_timeout_ms=self.lock_ms,
            responses=(sg.ShareAcknowledgeTopicResponse(TOPIC, tuple(answers)),),
        )

    def _describe_offsets(
        self, r: sg.DescribeShareGroupOffsetsRequest, _: CoordinatorNode | None
    ) -> sg.DescribeShareGroupOffsetsResponse:
        """The lag of each partition asked: its records not accepted, rejected or archived."""
        (group,) = r.groups
        undone = ("available", "acquired")
        topics = tuple(
            sg.ShareGroupOffsetsTopic(
                name,
                TOPIC,
                tuple(
                    sg.SharePartitionOffset(
                        p,
                        start_offset=0,
                        leader_epoch=0,
                        lag=sum(q == p and st[0] in undone for (q, _), st in self.state.items()),
                    )
                    for p in partitions
                ),
            )
            for name, partitions in group.topics or ()
        )
        return sg.DescribeShareGroupOffsetsResponse(
            (sg.DescribedShareGroupOffsets(group.group_id, topics),)
        )


class Leaders:
    """The topic's id and its partitions' leaders (the broker's); counts the lookups."""

    def __init__(self, partitions: int = 1, broker: Broker | None = None) -> None:
        self.partitions = partitions
        self.broker = broker
        self.lookups = 0

    def locate(self, topics: frozenset[str]) -> Mapping[uuid.UUID, TopicLocation]:
        self.lookups += 1
        leader = self.broker.leader_of if self.broker is not None else (lambda p: LEADER)
        return {TOPIC: TopicLocation("jobs", {p: leader(p) for p in range(self.partitions)})}


def make(broker: Broker, **kw: Any) -> ShareConsumer:
    return ShareConsumer(
        "g",
        topics=["jobs"],
        transport=broker,
        leaders=kw.pop("leaders", None) or Leaders(broker.partitions, broker),
        bootstrap_servers="x:1",
        retry_backoff_ms=10,
        **kw,
    )


def poll_n(c: ShareConsumer, n: int, timeout_s: float = 5.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        assert time.monotonic() < deadline, got
        got.extend(c.poll(timeout_ms=100))
    return got


def fetches(broker: Broker) -> list[sg.ShareFetchRequest]:
    return broker.requests(sg.ShareFetchRequest)


# ----------------------------------------------------------------- membership


def test_joins_with_its_own_member_id_and_the_subscription_then_sends_only_changes() -> None:
    broker = Broker()
    member = ShareGroupMember(
        "g", ["jobs"], transport=broker, leaders=Leaders(), bootstrap_servers="x:1"
    )
    with member:
        member.wait_assigned(timeout=5)
        assert member.member_epoch == 1
        # Named before the first fetch: the name is looked up when first asked for.
        assert member.assignment() == {("jobs", 0)}
        deadline = time.monotonic() + 5
        while len(broker.requests(sg.ShareGroupHeartbeatRequest)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    join, second, *rest = broker.requests(sg.ShareGroupHeartbeatRequest)
    assert join.member_epoch == 0 and join.subscribed_topic_names == ("jobs",)
    assert join.member_id == member.member_id and len(join.member_id) == 22  # KIP-1082
    assert second.member_epoch == 1 and second.subscribed_topic_names is None
    assert rest[-1].member_epoch == sg.LEAVE_EPOCH and rest[-1].member_id == join.member_id


@pytest.mark.parametrize("code", [E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID])
def test_a_fenced_member_joins_again_at_epoch_0_with_the_same_id(code: int) -> None:
    broker = Broker()
    member = ShareGroupMember(
        "g", ["jobs"], transport=broker, leaders=Leaders(), bootstrap_servers="x:1"
    )
    with member:
        member.wait_assigned(timeout=5)
        broker.then(sg.ShareGroupHeartbeatResponse, int(code))
        deadline = time.monotonic() + 5
        while broker.group_epoch < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        member.wait_assigned(timeout=5)
    beats = broker.requests(sg.ShareGroupHeartbeatRequest)
    joins = [b for b in beats if b.member_epoch == 0]
    assert len(joins) == 2 and {b.member_id for b in joins} == {member.member_id}
    assert joins[1].subscribed_topic_names == ("jobs",)  # a full heartbeat again


def test_not_coordinator_finds_the_coordinator_again() -> None:
    broker = Broker()
    broker.then(sg.ShareGroupHeartbeatResponse, int(E.NOT_COORDINATOR))
    member = ShareGroupMember(
        "g", ["jobs"], transport=broker, leaders=Leaders(), bootstrap_servers="x:1"
    )
    with member:
        member.wait_assigned(timeout=5)
        assert member.member_epoch == 1


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (E.GROUP_MAX_SIZE_REACHED, GroupMaxSizeReachedError, ["group.max.size"]),
        # Kafka 4.1+ with share.version off: UNSUPPORTED_VERSION, no message.
        (E.UNSUPPORTED_VERSION, ShareGroupsUnsupportedError, ["Kafka 4.2", "share.version"]),
    ],
)  # fmt: skip
def test_errors_a_person_must_fix_stop_the_member(
    answer: int, error: type[Exception], words: list[str]
) -> None:
    broker = Broker()
    broker.then(sg.ShareGroupHeartbeatResponse, int(answer))
    c = make(broker)
    with pytest.raises(error) as raised:
        c.start(timeout=5)
    assert all(w in str(raised.value) for w in words), raised.value
    with pytest.raises(error):
        c.poll(timeout_ms=10)
    c.close()


# ----------------------------------------------------------------- sessions, acknowledgements


def test_session_epochs_and_piggy_backed_acknowledgements() -> None:
    broker = Broker(records=3)
    c = make(broker)
    records = poll_n(c, 3)
    assert [(r.topic, r.partition, r.offset, r.value, r.delivery_count) for r in records] == [
        ("jobs", 0, n, b"v%d" % n, 1) for n in range(3)
    ]
    c.acknowledge(records[0], A.ACCEPT)
    c.acknowledge(records[1], A.ACCEPT)
    c.acknowledge(records[2], A.REJECT)
    c.poll(timeout_ms=50)
    first, *later = fetches(broker)
    assert first.share_session_epoch == 0 and first.topics[0].partitions[0].partition_index == 0
    carrying = next(
        f for f in later if f.topics and f.topics[0].partitions[0].acknowledgement_batches
    )
    assert carrying.topics[0].partitions[0].acknowledgement_batches == (
        sg.AcknowledgementBatch(0, 1, (A.ACCEPT,)),
        sg.AcknowledgementBatch(2, 2, (A.REJECT,)),
    )
    epochs = [f.share_session_epoch for f in fetches(broker)]
    assert epochs == list(range(len(epochs)))
    assert all(f.topics == () for f in later if f is not carrying and f.share_session_epoch > 1)
    assert c.metrics().acknowledged == {"ACCEPT": 2, "REJECT": 1}
    c.close()
    assert broker.requests(sg.ShareAcknowledgeRequest)[-1].share_session_epoch == -1
    assert [st[0] for st in broker.state.values()] == ["acknowledged"] * 2 + ["archived"]


def test_commit_sends_now_and_close_releases_what_is_left() -> None:
    broker = Broker(records=3)
    c = make(broker)
    a, b, _ = poll_n(c, 3)
    c.acknowledge(a, A.ACCEPT)
    assert c.commit() == {("jobs", 0): None}
    ack = broker.requests(sg.ShareAcknowledgeRequest)[-1]
    assert ack.share_session_epoch >= 1 and not ack.is_renew_ack
    c.acknowledge(b, A.ACCEPT)
    assert c.close() == {("jobs", 0): None}
    closing = broker.requests(sg.ShareAcknowledgeRequest)[-1]
    assert closing.share_session_epoch == -1
    assert closing.topics[0].partitions[0].acknowledgement_batches == (
        sg.AcknowledgementBatch(1, 1, (A.ACCEPT,)),
        sg.AcknowledgementBatch(2, 2, (A.RELEASE,)),
    )
    assert broker.state[(0, 2)][0] == "available"
    assert broker.requests(sg.ShareGroupHeartbeatRequest)[-1].member_epoch == -1
    with pytest.raises(CoordinatorStateError):
        c.poll(timeout_ms=1)


def test_implicit_mode_accepts_the_last_polls_records_with_the_next_poll() -> None:
    broker = Broker(records=2)
    c = make(broker, acknowledgement_mode="implicit")
    records = poll_n(c, 2)
    with pytest.raises(CoordinatorStateError, match="explicit"):
        c.acknowledge(records[0])
    c.poll(timeout_ms=50)
    assert [st[0] for st in broker.state.values()] == ["acknowledged"] * 2
    c.close()


def test_misuse_of_acknowledge_is_refused() -> None:
    broker = Broker(records=1)
    c = make(broker)
    (record,) = poll_n(c, 1)
    with pytest.raises(ConfigurationError):
        c.acknowledge(record, A.GAP)
    c.acknowledge(record)
    c.commit()
    with pytest.raises(CoordinatorStateError, match="not held"):
        c.acknowledge(record)  # acknowledged already
    c.close()


def test_each_record_is_acknowledged_once_across_partitions_and_deliveries() -> None:
    # acknowledge() tries the partition it found last first: records of two partitions in
    # turn, and a record delivered again once its partition held nothing for a while (the
    # partition found last then), are each taken as their own, and once.
    broker = Broker(records=4, partitions=2)
    c = make(broker)
    records = sorted(poll_n(c, 4), key=lambda r: (r.offset, r.partition))  # p0, p1, p0, p1
    first = records[0]
    for r in records[1:]:
        c.acknowledge(r, A.ACCEPT)
    c.acknowledge(first, A.RELEASE)
    assert c.commit() == {("jobs", 0): None, ("jobs", 1): None}
    for r in records:
        with pytest.raises(CoordinatorStateError, match="not held"):
            c.acknowledge(r)  # acknowledged already
    (again,) = poll_n(c, 1)
    assert (again.partition, again.offset, again.delivery_count) == (0, 0, 2)
    c.acknowledge(again)
    with pytest.raises(CoordinatorStateError, match="not held"):
        c.acknowledge(first)  # of the delivery that ended
    assert c.commit() == {("jobs", 0): None}
    assert [st[0] for st in broker.state.values()] == ["acknowledged"] * 4
    c.close()


def test_renew_keeps_the_record_and_goes_alone_in_a_share_acknowledge() -> None:
    broker = Broker(records=1)
    c = make(broker)
    (record,) = poll_n(c, 1)
    c.acknowledge(record, A.RENEW)
    assert c.poll(timeout_ms=20) == []
    renew = broker.requests(sg.ShareAcknowledgeRequest)[-1]
    assert renew.is_renew_ack
    assert renew.topics[0].partitions[0].acknowledgement_batches == (
        sg.AcknowledgementBatch(0, 0, (A.RENEW,)),
    )
    assert c.metrics().lock_renewals == 1
    c.acknowledge(record, A.ACCEPT)  # still held
    assert c.commit() == {("jobs", 0): None}
    c.close()


def test_an_expired_lock_is_reported_for_the_right_records_only() -> None:
    # Kafka refuses the whole partition (INVALID_RECORD_STATE); the consumer sends the
    # acknowledgements again one by one to tell which record's lock had run out.
    broker = Broker(records=2)
    heard: list[tuple[Any, ...]] = []
    c = make(broker, on_acknowledged=lambda *outcome: heard.append(outcome))
    first, second = poll_n(c, 2)
    broker.expire(0, 0)
    c.acknowledge(first)
    c.acknowledge(second)
    (error,) = c.commit().values()
    assert isinstance(error, AcquisitionLockExpiredError)
    assert error.offsets == (0,) and error.topic == "jobs" and error.code == E.INVALID_RECORD_STATE
    assert "share.record.lock.duration.ms" in str(error)
    assert (("jobs", 0), (1,), None) in heard
    assert broker.state[(0, 1)][0] == "acknowledged"
    c.close()


def test_records_delivered_again_by_the_fetch_that_refused_their_acks_are_not_resent() -> None:
    # Their locks ran out at the broker (the consumer was frozen before it got them, say):
    # the ShareFetch carrying their ACCEPTs is refused and acquires them again for this
    # consumer. Sent again one by one, the ACCEPTs would apply to the new delivery, and be
    # reported as taking effect for the old one (the share campaign, seed 2).
    broker = Broker(records=2)
    heard: list[tuple[Any, ...]] = []
    c = make(broker, on_acknowledged=lambda *outcome: heard.append(outcome))
    first, second = poll_n(c, 2)
    broker.expire(0, 0)
    broker.expire(0, 1)
    c.acknowledge(first)
    c.acknowledge(second)
    again = poll_n(c, 2)
    assert [(r.offset, r.delivery_count) for r in again] == [(0, 2), (1, 2)]
    ((partition, offsets, error),) = heard
    assert (partition, offsets) == (("jobs", 0), (0, 1))
    assert isinstance(error, AcquisitionLockExpiredError)
    assert [broker.state[(0, o)][0] for o in (0, 1)] == ["acquired", "acquired"]
    c.close()


def test_acknowledgements_behind_a_new_session_are_not_applied_to_the_next_delivery() -> None:
    # The session was lost (a leader moved, say) and the record's lock with it: the new
    # session's opening fetch (which may not carry acknowledgements) acquires the record
    # again, and the ACCEPT that waited behind it, sent, would apply to that new delivery,
    # which the application has not seen (the share simulation, seed 29).
    broker = Broker(records=1)
    heard: list[tuple[Any, ...]] = []
    c = make(broker, on_acknowledged=lambda *outcome: heard.append(outcome))
    (record,) = poll_n(c, 1)
    broker.then(sg.ShareFetchResponse, int(E.SHARE_SESSION_NOT_FOUND))
    assert c.poll(timeout_ms=0) == []  # the session is gone: the next fetch opens one
    broker.expire(0, 0)
    c.acknowledge(record)
    (again,) = poll_n(c, 1)
    assert (again.offset, again.delivery_count) == (0, 2)
    ((partition, offsets, error),) = heard
    assert (partition, offsets) == (("jobs", 0), (0,))
    assert isinstance(error, AcquisitionLockExpiredError)
    assert broker.state[(0, 0)][0] == "acquired"  # the new delivery is the application's
    assert not broker.requests(sg.ShareAcknowledgeRequest)
    c.close()


def test_a_record_past_its_lock_by_the_consumers_clock_is_not_sent() -> None:
    broker = Broker(records=1, lock_ms=30)
    c = make(broker)
    (record,) = poll_n(c, 1)
    time.sleep(0.05)
    c.acknowledge(record)
    before = len(broker.requests(sg.ShareAcknowledgeRequest))
    (error,) = c.commit().values()
    assert isinstance(error, AcquisitionLockExpiredError)
    assert len(broker.requests(sg.ShareAcknowledgeRequest)) == before
    c.close()


def test_a_lost_session_reports_its_acknowledgements_and_opens_a_new_one() -> None:
    broker = Broker(records=2)
    heard: list[Any] = []
    c = make(broker, on_acknowledged=lambda p, o, e: heard.append(e))
    first, _ = poll_n(c, 2)
    c.acknowledge(first)
    broker.then(sg.ShareFetchResponse, int(E.SHARE_SESSION_NOT_FOUND))
    c.poll(timeout_ms=50)
    (error,) = [e for e in heard if e is not None]
    assert type(error) is AcknowledgementError and error.code == E.SHARE_SESSION_NOT_FOUND
    assert fetches(broker)[-1].share_session_epoch == 0 or any(
        f.share_session_epoch == 0 for f in fetches(broker)[2:]
    )
    c.close()


def test_no_answer_makes_the_outcome_uncertain() -> None:
    broker = Broker(records=1)
    c = make(broker)
    (record,) = poll_n(c, 1)
    c.acknowledge(record)
    broker.then(sg.ShareAcknowledgeResponse, TransportError("timed out"))
    (error,) = c.commit().values()
    assert isinstance(error, AcknowledgementUncertainError)
    assert "may or may not" in str(error)
    c.close()


def test_a_partition_the_answer_leaves_out_has_an_uncertain_outcome() -> None:
    broker = Broker(records=1)
    c = make(broker)
    (record,) = poll_n(c, 1)
    c.acknowledge(record)
    # Answered, without a word about the partition acknowledged: not a success.
    broker.then(sg.ShareAcknowledgeResponse, sg.ShareAcknowledgeResponse(0, responses=()))
    (error,) = c.commit().values()
    assert isinstance(error, AcknowledgementUncertainError)
    c.close()


def test_a_moved_leader_makes_the_consumer_look_it_up_again() -> None:
    broker = Broker(records=1)
    leaders = Leaders()
    c = make(broker, leaders=leaders)
    c.start(timeout=5)
    lookups = leaders.lookups
    moved = sg.ShareFetchPartitionData(0, error_code=E.NOT_LEADER_OR_FOLLOWER)
    broker.then(
        sg.ShareFetchResponse,
        sg.ShareFetchResponse(0, responses=(sg.ShareFetchTopicResponse(TOPIC, (moved,)),)),
    )
    poll_n(c, 1)
    assert leaders.lookups > lookups
    assert fetches(broker)[1].share_session_epoch == 0  # the session there was dropped
    c.close()


def test_fetches_go_to_the_leader_not_the_coordinator() -> None:
    broker = Broker(records=1)
    c = make(broker)
    poll_n(c, 1)
    with broker.lock:
        where = {type(r): node for r, node in broker.sent}
    assert where[sg.ShareFetchRequest] == LEADER
    assert where[sg.ShareGroupHeartbeatRequest] != LEADER
    c.close()


def test_batches_are_runs_of_one_type() -> None:
    acks = {5: A.ACCEPT, 6: A.ACCEPT, 7: A.RELEASE, 9: A.RELEASE, 10: A.RELEASE}
    assert batches(acks) == (
        sg.AcknowledgementBatch(5, 6, (1,)),
        sg.AcknowledgementBatch(7, 7, (2,)),
        sg.AcknowledgementBatch(9, 10, (2,)),
    )
    assert batches({}) == ()


def test_hooks_hear_the_join_its_failures_and_the_assignment() -> None:
    heard: list[str] = []

    class Heard(CoordinationHooks):
        def on_rebalance_started(self, event: RebalanceStarted) -> None:
            heard.append(f"started {event.reason}")

        def on_rebalance_finished(self, event: RebalanceFinished) -> None:
            heard.append(f"finished {event.generation}")

        def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
            heard.append(f"failed {event.error}")

    broker = Broker()
    broker.then(sg.ShareGroupHeartbeatResponse, int(E.COORDINATOR_LOAD_IN_PROGRESS))
    c = make(broker, hooks=[Heard()])
    c.start(timeout=5)
    c.close()
    assert heard == [
        "started joining",
        "failed ShareGroupHeartbeat returned COORDINATOR_LOAD_IN_PROGRESS",
        "finished 1",
    ]
    assert c.member.metrics().failed_rebalance_total == 1


def test_a_session_per_leader_each_with_its_own_epochs() -> None:
    broker = Broker(records=4, partitions=2)
    broker.leaders_apart = True
    c = make(broker)
    records = poll_n(c, 4)
    for record in records:
        c.acknowledge(record, A.ACCEPT if record.partition == 0 else A.REJECT)
    assert c.commit() == {("jobs", 0): None, ("jobs", 1): None}
    with broker.lock:
        sent = [(r, node) for r, node in broker.sent if isinstance(r, sg.ShareFetchRequest)]
    for leader, partition in zip(LEADERS, (0, 1), strict=True):
        to_it = [r for r, node in sent if node == leader]
        assert to_it[0].share_session_epoch == 0
        assert [p.partition_index for t in to_it[0].topics for p in t.partitions] == [partition]
        assert [r.share_session_epoch for r in to_it] == list(range(len(to_it)))
    acks = {node: r for r, node in broker.sent if isinstance(r, sg.ShareAcknowledgeRequest)}
    assert set(acks) == set(LEADERS)
    c.close()
    closing = [
        node
        for r, node in broker.sent
        if isinstance(r, sg.ShareAcknowledgeRequest) and r.share_session_epoch == -1
    ]
    assert sorted(n.node_id for n in closing) == [1, 2]
    assert [st[0] for (p, _), st in sorted(broker.state.items())] == [
        "acknowledged",
        "acknowledged",
        "archived",
        "archived",
    ]


class SlowLeaderBroker(Broker):
    """The broker model, with the second leader answering ShareFetches ``delay_s`` late."""

    delay_s = 1.0

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        if isinstance(request, sg.ShareFetchRequest) and kw.get("coordinator") == LEADERS[1]:
            time.sleep(self.delay_s)
        return super().send(request, response_type, **kw)


def test_a_records_lock_runs_from_its_own_leaders_answer_not_the_slowest() -> None:
    # The fetches to all leaders go at once and the poll waits for every answer: counted
    # from the last, a fast leader's records would look held for longer than the broker
    # holds them.
    broker = SlowLeaderBroker(records=2, partitions=2)
    broker.leaders_apart = True
    c = make(broker)
    c.start(timeout=5)
    records = poll_n(c, 2, timeout_s=10)
    (fast,) = [r for r in records if r.partition == 0]
    (slow,) = [r for r in records if r.partition == 1]
    fast_deadline, slow_deadline = c.lock_deadline(fast), c.lock_deadline(slow)
    assert fast_deadline is not None and slow_deadline is not None
    assert slow_deadline - fast_deadline > broker.delay_s / 2
    c.close()


def _batch_bytes(first_offset: int, count: int) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 16, offset=first_offset)
    for n in range(count):
        builder.append(1_000 + n, b"k", b"v%d" % (first_offset + n), [])
    builder.close()
    return bytes(builder.buffer())


def test_an_acquired_offset_with_no_record_is_a_gap_only_inside_the_batches_read_whole() -> None:
    broker = Broker(records=0)
    # Acquired 0..6: offsets 0-1 and 3 are records (2 was compacted away); the batch of 5-6
    # is cut short at the end of the answer (max bytes), so 4-6 are not known to be empty.
    cut = _batch_bytes(5, 2)
    records = _batch_bytes(0, 2) + _batch_bytes(3, 1) + cut[: len(cut) - 7]
    partition = sg.ShareFetchPartitionData(
        0, records=records, acquired_records=(sg.AcquiredRecords(0, 6, 1),)
    )
    broker.then(
        sg.ShareFetchResponse,
        sg.ShareFetchResponse(
            0,
            acquisition_lock_timeout_ms=30_000,
            responses=(sg.ShareFetchTopicResponse(TOPIC, (partition,)),),
        ),
    )
    c = make(broker)
    got = poll_n(c, 3)
    assert [r.offset for r in got] == [0, 1, 3]
    for r in got:
        c.acknowledge(r, A.ACCEPT)
    c.commit()
    sent = [
        b
        for request in [*fetches(broker), *broker.requests(sg.ShareAcknowledgeRequest)]
        for t in request.topics
        for p in t.partitions
        for b in p.acknowledgement_batches
    ]
    acked = {
        offset: kinds[0] if len(kinds) == 1 else kinds[offset - first]
        for first, last, kinds in (
            (b.first_offset, b.last_offset, b.acknowledge_types) for b in sent
        )
        for offset in range(first, last + 1)
    }
    # 2 is a GAP; 4, 5 and 6 are left to come back when their lock runs out, not archived.
    assert acked == {0: A.ACCEPT, 1: A.ACCEPT, 2: A.GAP, 3: A.ACCEPT}
    c.close()


# ----------------------------------------------------------------- lag


def lag_lookups(broker: Broker) -> list[sg.DescribeShareGroupOffsetsRequest]:
    return broker.requests(sg.DescribeShareGroupOffsetsRequest)


def test_polls_read_the_lag_into_the_metrics_at_most_every_lag_refresh_ms() -> None:
    broker = Broker(records=6, partitions=2)
    c = make(broker, lag_refresh_ms=300)
    try:
        got = poll_n(c, 6)
        # Acquired, not acknowledged yet: still lag.
        broker_lag = {("jobs", 0): 3, ("jobs", 1): 3}
        deadline = time.monotonic() + 5
        while c.metrics().lag != broker_lag:
            assert time.monotonic() < deadline, c.metrics().lag
            c.poll(timeout_ms=50)
        for r in got[:4]:
            c.acknowledge(r, A.ACCEPT)
        c.commit()
        started, asked = time.monotonic(), len(lag_lookups(broker))
        while sum(c.metrics().lag.values()) != 2:
            assert time.monotonic() < deadline, c.metrics().lag
            c.poll(timeout_ms=50)
        # Many polls, one lookup per 0.3 s at most.
        polls = len(fetches(broker))
        assert len(lag_lookups(broker)) - asked <= (time.monotonic() - started) / 0.3 + 1 < polls
    finally:
        c.close()
    (request,) = {r.groups for r in lag_lookups(broker)}  # the assignment's partitions only
    assert request == (sg.ShareGroupOffsetsRequestGroup("g", (("jobs", (0, 1)),)),)


def test_a_failed_lag_lookup_keeps_the_last_reading_and_warns_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_module, "_LAG_RETRY_S", 0.0)  # asked again at the refresh
    broker = Broker(records=2)
    c = make(broker, lag_refresh_ms=100)
    try:
        poll_n(c, 2)
        assert c.lag() == {("jobs", 0): 2}
        for _ in range(2):
            broker.then(sg.DescribeShareGroupOffsetsResponse, TransportError("no answer"))
        with caplog.at_level("WARNING", "recipes.queues"):
            deadline = time.monotonic() + 5
            while broker.answers.get(sg.DescribeShareGroupOffsetsResponse):
                assert time.monotonic() < deadline
                c.poll(timeout_ms=20)
        assert c.metrics().lag == {("jobs", 0): 2}
        (warning,) = [r for r in caplog.records if "share-partition lag" in r.getMessage()]
        assert "no answer" in warning.getMessage()
    finally:
        c.close()


def test_without_lag_refresh_ms_polls_ask_no_lag_and_lag_asks_now() -> None:
    broker = Broker(records=3)
    c = make(broker)
    try:
        got = poll_n(c, 3)
        for _ in range(5):
            c.poll(timeout_ms=20)
        assert lag_lookups(broker) == [] and c.metrics().lag == {}
        c.acknowledge(got[0], A.REJECT)
        c.commit()
        assert c.lag() == {("jobs", 0): 2} == c.metrics().lag
        assert len(lag_lookups(broker)) == 1
    finally:
        c.close()


def test_lag_refresh_ms_below_100_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="lag_refresh_ms"):
        make(Broker(), lag_refresh_ms=10)


def test_the_fetch_paths_records_are_the_records_the_dataclass_makes() -> None:
    import dataclasses

    values = ("t", 3, 17, b"k", b"v", (("h", b"1"),), 1_700_000_000_000, 2, uuid.uuid4())
    made = consumer_module._make_record(*values)
    expected = ShareRecord(*values)
    assert type(made) is ShareRecord
    assert dataclasses.astuple(made) == dataclasses.astuple(expected)
    assert repr(made) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.offset = 18  # type: ignore[misc]
    assert made != expected  # compared by identity, as every ShareRecord
