"""A KIP-848 consumer group member (``coordination.consumer_group``) on a real broker.

On Kafka 4: members join, the broker splits the partitions between them (a partition moves
only after its owner revoked it and reported it released), commits are fenced by the
member epoch, and a member that leaves hands its partitions to the others at once. On
Kafka 3.9, which offers no ConsumerGroupHeartbeat, the member stops with a typed error
naming the Kafka version it needs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from coordination import Generation, OffsetAndMetadata, describe_group
from coordination._protocol import messages as m
from coordination._protocol.error_codes import ErrorCode
from coordination.consumer_group import ConsumerGroupMember, Subscription
from coordination.errors import CommitFailedError, UnsupportedVersionError

from .._versions import VERSIONS

pytestmark = pytest.mark.integration


def on_kafka(major: str) -> pytest.MarkDecorator:
    """Run on the tested Kafka versions of one major version only."""
    versions = [v for v in VERSIONS if v.startswith(f"{major}.")]
    return pytest.mark.parametrize("kafka", versions, indirect=True, ids=lambda v: f"kafka-{v}")


PARTITIONS = 4
STALE = ErrorCode.STALE_MEMBER_EPOCH
Log = list[tuple[float, str, str, frozenset[tuple[str, int]]]]


class Owner:
    """Records every callback; ``log`` is shared by the members of one test, in order."""

    def __init__(self, name: str, topic: str, ids: Mapping[uuid.UUID, str], log: Log) -> None:
        self.name, self.topic, self.ids, self.log = name, topic, ids, log
        self.lock = threading.Lock()

    def subscription(self) -> Subscription:
        return Subscription(topics=frozenset({self.topic}))

    def topic_names(self, topic_ids: frozenset[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        return {t: self.ids[t] for t in topic_ids if t in self.ids}

    def _note(self, what: str, partitions: frozenset[tuple[str, int]]) -> None:
        with self.lock:
            self.log.append((time.monotonic(), self.name, what, frozenset(partitions)))

    def revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._note("revoked", partitions)

    def assigned(self, partitions: frozenset[tuple[str, int]], generation: Generation) -> None:
        self._note("assigned", partitions)

    def lost(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._note("lost", partitions)

    def leaving(self) -> None:
        self._note("leaving", frozenset())


def create_topic_with_id(kafka: str, name: str, partitions: int) -> uuid.UUID:
    """Create a topic; its id once the cluster has one (ConsumerGroupHeartbeat names
    topics by id)."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
        deadline = time.monotonic() + 30
        while True:
            described = admin.describe_topics([name])[0]
            if described.get("error_code") == 0 and described.get("topic_id"):
                return uuid.UUID(str(described["topic_id"]))
            assert time.monotonic() < deadline, described
            time.sleep(0.1)
    finally:
        admin.close()


@pytest.fixture
def topic(kafka: str) -> Iterator[tuple[str, dict[uuid.UUID, str]]]:
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    yield name, {create_topic_with_id(kafka, name, PARTITIONS): name}


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@on_kafka("4")
def test_members_split_the_partitions_and_a_leaver_hands_them_over(
    kafka: str, topic: tuple[str, dict[uuid.UUID, str]]
) -> None:
    name, ids = topic
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    log: Log = []
    a = ConsumerGroupMember(group, Owner("a", name, ids, log), bootstrap_servers=kafka)
    b = ConsumerGroupMember(group, Owner("b", name, ids, log), bootstrap_servers=kafka)
    everything = {(name, p) for p in range(PARTITIONS)}
    try:
        a.ensure_active_group(timeout=30)
        # Stable means a owns what the broker's last answer assigned: the first answer may
        # assign nothing yet (the group coordinator has not seen the new topic's metadata).
        wait_until(lambda: a.owned() == everything, "a's whole assignment")
        b.start()
        wait_until(lambda: len(b.owned()) == PARTITIONS // 2, "b's half")
        wait_until(lambda: len(a.owned()) == PARTITIONS // 2, "a's half")
        assert a.owned() | b.owned() == everything and not a.owned() & b.owned()
        # Every partition b took, a had revoked first (the broker waits for the release).
        for taken_at, _, _, parts in [e for e in log if e[1:3] == ("b", "assigned")]:
            released = [t for t, w, x, p in log if (w, x) == ("a", "revoked") and parts <= p]
            assert released and min(released) < taken_at, f"b took {sorted(parts)} first"
        assert a.membership_lease() > 1.0 and b.member_epoch > 0

        # Seen from outside (ConsumerGroupDescribe): both members, what each owns, epochs.
        described = describe_group(group, bootstrap_servers=kafka)
        assert described.exists and described.group_type == "consumer"
        assert described.protocol_type == "consumer" and described.protocol == "uniform"
        by_id = {x.member_id: x.decoded for x in described.members}
        assert set(by_id) == {a.member_id, b.member_id}
        for member in (a, b):
            decoded = by_id[member.member_id]
            assert decoded is not None
            assert {tuple(p) for p in decoded["assigned"]} == member.owned()
            assert decoded["member_epoch"] == member.member_epoch
        assert described.summary["group_epoch"] >= max(a.member_epoch, b.member_epoch)

        # Commits carry the member epoch: a's current one is accepted, a past one is not.
        mine = sorted(a.owned())[0]
        a.commit_offsets({mine: OffsetAndMetadata(7, "")})
        assert a.committed_offsets([mine])[mine] == OffsetAndMetadata(7, "")
        stale = Generation(a.member_epoch + 5, a.member_id, "consumer")
        with pytest.raises(CommitFailedError):
            a.commit_offsets({mine: OffsetAndMetadata(8, "")}, generation=stale, timeout=10)
        # Fetches carry it too (OffsetFetch v9): the broker answers only the current epoch.
        engine = a._engine
        for epoch, code in ((a.member_epoch, ErrorCode.NONE), (stale.generation_id, STALE)):
            answer = engine.transport.send(
                m.OffsetFetchRequest(group, (mine,), member_id=a.member_id, member_epoch=epoch),
                m.OffsetFetchResponse,
                coordinator=engine.coordinator,
                timeout_s=10,
            )
            assert answer.version == 9 and answer.error_code == code

        a.close()
        assert any(e[1:3] == ("a", "leaving") for e in log)
        wait_until(lambda: b.owned() == everything, "b takes over a's partitions", 15)
    finally:
        a.close()
        b.close()


@on_kafka("3")
def test_on_kafka_3_the_member_stops_with_the_version_it_needs(
    kafka: str, topic: tuple[str, dict[uuid.UUID, str]]
) -> None:
    name, ids = topic
    member = ConsumerGroupMember("kip848-old", Owner("a", name, ids, []), bootstrap_servers=kafka)
    try:
        with pytest.raises(UnsupportedVersionError, match=r"Kafka 4\.0"):
            member.ensure_active_group(timeout=30)
    finally:
        member.close()


@on_kafka("4")
def test_the_lease_counts_with_the_brokers_session_when_it_is_shorter(
    kafka: str, topic: tuple[str, dict[uuid.UUID, str]], caplog: pytest.LogCaptureFixture
) -> None:
    # The test broker's group.consumer.session.timeout.ms is 6000; this group's own is 3000.
    # The member is left at its default session_timeout_ms, 45000: were the lease to count
    # with that, the broker could give the partitions away 42 s before the lease ran out.
    name, ids = topic
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        resource = ConfigResource(
            ConfigResourceType.GROUP, group, {"consumer.session.timeout.ms": "3000"}
        )
        admin.alter_configs([resource])
    finally:
        admin.close()
    member = ConsumerGroupMember(group, Owner("a", name, ids, []), bootstrap_servers=kafka)
    try:
        member.ensure_active_group(timeout=30)
        assert 0 < member.membership_lease() <= 3.0
        assert "above the group's session timeout at the broker (3000 ms)" in caplog.text
        # Where the broker's is longer, the member's own stands.
        other = ConsumerGroupMember(
            f"{group}-b",
            Owner("b", name, ids, []),
            bootstrap_servers=kafka,
            session_timeout_ms=2000,
            heartbeat_interval_ms=500,
        )
        try:
            other.ensure_active_group(timeout=30)
            assert 0 < other.membership_lease() <= 2.0
        finally:
            other.close()
    finally:
        member.close()
