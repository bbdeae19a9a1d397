"""The KIP-848 consumer group model against a real Kafka 4 broker: the same answers.

As ``test_model_vs_broker.py`` does for the classic protocol: each scenario is a script of
ConsumerGroupHeartbeat, OffsetCommit and OffsetFetch requests, run against
``GroupCoordinatorModel`` on a manual clock and against a real broker (one connection per
member), and the normalized transcripts must be equal. No request parks in this protocol:
every answer comes at once.

What is compared exactly is what the protocol fixes: error codes, member ids (the member
chooses its own, KIP-1082) and epochs, the heartbeat interval, and whether an answer carries
an assignment at all (null: unchanged). Which partitions the ``uniform`` assignor picks is
its own choice, so an assignment is compared by its size and by how many of the member's
previous partitions it keeps; each run checks on its own that no partition is ever assigned
to two members at once. Error messages are not compared (the model sends none).

Timing: Kafka 4.3 computes a group's target assignment at most once a second
(``group.consumer.assignment.interval.ms``, KIP-1263). A scenario waits ``INTERVAL_S`` where
it needs the next target (the model's clock moves as much), and counts on the steps between
two such waits taking well under a second on the broker. Kafka resolves a subscription's
regular expression apart from the heartbeats, in its own time (the model at the next
heartbeat): the regex scenario compares where a member's heartbeats end up (``Settled``),
not the answers on the way.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

from coordination._protocol import consumer_group as cg
from coordination._protocol import messages as m
from coordination._protocol.error_codes import error_name
from coordination._transport.kafka import KafkaTransport

from .test_consumer_group_member import create_topic_with_id, on_kafka
from .test_model_vs_broker import BrokerDriver, Commit, Fetch, ModelDriver

pytestmark = pytest.mark.integration

PARTITIONS = 4
REBALANCE_TIMEOUT_MS = 30_000
# Past the broker's group.consumer.assignment.interval.ms (1 s by default).
INTERVAL_S = 1.2
TIMEOUT_S = 10.0

TopicPartition = tuple[uuid.UUID, int]

# -- normalized answers -------------------------------------------------------------------------


class Assigned(NamedTuple):
    """An assignment: how many partitions, and how many of them the member had before."""

    size: int
    kept: int


class Beat(NamedTuple):
    error: str
    member: str | None
    epoch: int
    heartbeat_interval_ms: int
    assignment: Assigned | None


class Settled(NamedTuple):
    """Where a member's heartbeats ended up (the broker resolves a regular expression apart
    from them, in its own time: the answers on the way are not compared)."""

    error: str
    owned: int


Answer = Beat | Commit | Fetch | Settled


# -- where the requests go --------------------------------------------------------------------


class Model(ModelDriver):
    def __init__(self, topic: str, topic_id: uuid.UUID) -> None:
        super().__init__()
        self.model.log.topics[topic] = (topic_id, PARTITIONS)

    def send(self, client: str, request: m.Request) -> m.Response:
        answers: list[m.Response] = []
        self.model.handle(request, answers.append)
        self.timers.run_until(self.timers.now())
        (answer,) = answers
        return answer


class Broker(BrokerDriver):
    def send(self, client: str, request: m.Request) -> m.Response:
        response_type: type[Any] = {
            cg.ConsumerGroupHeartbeatRequest: cg.ConsumerGroupHeartbeatResponse,
            m.OffsetCommitRequest: m.OffsetCommitResponse,
            m.OffsetFetchRequest: m.OffsetFetchResponse,
        }[type(request)]
        transport: KafkaTransport = self._transport(client)
        answer: m.Response = transport.send(
            request, response_type, coordinator=self._node, timeout_s=TIMEOUT_S
        )
        return answer


Driver = Model | Broker


class Run:
    """One scenario's run on one driver, and its transcript."""

    def __init__(self, driver: Driver, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.driver, self.group, self.topic, self.topic_id = driver, group, topic, topic_id
        self.transcript: list[tuple[str, Answer]] = []
        self.names: dict[str, str] = {}  # member id -> the client's name
        self.owned: dict[str, frozenset[TopicPartition]] = {}  # by client name

    def member(self, name: str, instance: str | None = None) -> Member:
        # The same id in both runs: the group's name is unique to the scenario.
        member_id = f"{name}-{self.group}"
        self.names[member_id] = name
        return Member(self, name, member_id, instance)

    def call(self, label: str, client: Member, request: m.Request) -> m.Response:
        response = self.driver.send(client.name, request)
        self.transcript.append((label, self.normalize(client, response)))
        return response

    def normalize(self, client: Member, response: m.Response) -> Answer:
        if isinstance(response, cg.ConsumerGroupHeartbeatResponse):
            assigned = None
            if response.assignment is not None:
                parts = _partitions(response.assignment)
                assigned = Assigned(len(parts), len(parts & client.owned))
            member = response.member_id
            return Beat(
                error_name(response.error_code),
                self.names.get(member, member) if member is not None else None,
                response.member_epoch,
                response.heartbeat_interval_ms,
                assigned,
            )
        if isinstance(response, m.OffsetCommitResponse):
            return Commit(tuple(sorted((t, p, error_name(c)) for t, p, c in response.partitions)))
        assert isinstance(response, m.OffsetFetchResponse), response
        partitions = tuple(
            sorted((t, p, o, md, error_name(c)) for t, p, o, md, c in response.partitions)
        )
        return Fetch(error_name(response.error_code), partitions)

    def sleep(self, seconds: float) -> None:
        self.driver.sleep(seconds)

    def check_exclusive(self) -> None:
        """No partition is assigned to two members at once (what each was last told)."""
        seen: dict[TopicPartition, str] = {}
        for name, parts in self.owned.items():
            for tp in parts:
                assert tp not in seen, f"{tp} assigned to {seen[tp]} and {name}"
                seen[tp] = name


class Member:
    """One member: its id, epoch and what it owns, updated from the answers it gets."""

    def __init__(self, run: Run, name: str, member_id: str, instance: str | None) -> None:
        self.run, self.name, self.member_id, self.instance = run, name, member_id, instance
        self.epoch = 0
        self.owned: frozenset[TopicPartition] = frozenset()

    def owned_topics(self) -> tuple[cg.TopicIdPartitions, ...]:
        return _by_topic(self.owned)

    def beat(self, label: str, **kw: Any) -> cg.ConsumerGroupHeartbeatResponse:
        """A heartbeat; keyword arguments override the request's fields (by default the
        member's epoch, nothing else: an unchanged member's heartbeat)."""
        fields: dict[str, Any] = {"member_epoch": self.epoch, "instance_id": self.instance}
        fields.update(kw)
        request = cg.ConsumerGroupHeartbeatRequest(
            group_id=fields.pop("group_id", self.run.group),
            member_id=fields.pop("member_id", self.member_id),
            **fields,
        )
        response = self.run.call(label, self, request)
        assert isinstance(response, cg.ConsumerGroupHeartbeatResponse)
        if request.member_id == self.member_id and request.group_id == self.run.group:
            self._note(request, response)
        return response

    def _note(
        self, request: cg.ConsumerGroupHeartbeatRequest, response: cg.ConsumerGroupHeartbeatResponse
    ) -> None:
        if response.error_code != 0:
            return  # a fenced member stays in the group until it leaves or its session ends
        if request.member_epoch < 0:
            self.epoch, self.owned = 0, frozenset()
            self.run.owned.pop(self.name, None)
            return
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = _partitions(response.assignment)
            self.run.owned[self.name] = self.owned
            self.run.check_exclusive()

    def join(self, label: str, **kw: Any) -> cg.ConsumerGroupHeartbeatResponse:
        fields: dict[str, Any] = {
            "member_epoch": cg.JOIN_EPOCH,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "subscribed_topic_names": (self.run.topic,),
            "topic_partitions": (),
        }
        fields.update(kw)
        return self.beat(label, **fields)

    def full(self) -> dict[str, Any]:
        """The fields of a full heartbeat (what a member sends after an error)."""
        return {
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "subscribed_topic_names": (self.run.topic,),
            "topic_partitions": self.owned_topics(),
        }

    def report(self, label: str, **kw: Any) -> cg.ConsumerGroupHeartbeatResponse:
        """A heartbeat that reports what the member owns (after a revocation, say)."""
        return self.beat(label, topic_partitions=self.owned_topics(), **kw)

    def leave(self, label: str, **kw: Any) -> cg.ConsumerGroupHeartbeatResponse:
        return self.beat(label, member_epoch=cg.LEAVE_EPOCH, **kw)

    def commit(self, label: str, **kw: Any) -> None:
        request = m.OffsetCommitRequest(
            self.run.group,
            kw.get("epoch", self.epoch),
            kw.get("member_id", self.member_id),
            None,
            ((self.run.topic, 0, 10, "md"), (self.run.topic, 1, 20, None)),
        )
        self.run.call(label, self, request)

    def fetch(self, label: str, **kw: Any) -> None:
        request = m.OffsetFetchRequest(
            self.run.group,
            ((self.run.topic, 0), (self.run.topic, 1)),
            member_id=kw.get("member_id", self.member_id),
            member_epoch=kw.get("epoch", self.epoch),
        )
        self.run.call(label, self, request)


def _partitions(topics: tuple[cg.TopicIdPartitions, ...]) -> frozenset[TopicPartition]:
    return frozenset((t.topic_id, p) for t in topics for p in t.partitions)


def _by_topic(parts: frozenset[TopicPartition]) -> tuple[cg.TopicIdPartitions, ...]:
    topics: dict[uuid.UUID, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return tuple(cg.TopicIdPartitions(t, tuple(sorted(ps))) for t, ps in sorted(topics.items()))


# -- scenarios ---------------------------------------------------------------------------------


def two_members_share(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins, gets the whole topic")
    a.beat("a: heartbeat, nothing changed")
    b.join("b: joins within the assignment interval: no target for it yet")
    a.beat("a: heartbeat within the interval: nothing to revoke yet")
    run.sleep(INTERVAL_S)
    a.beat("a: the first heartbeat after the interval computes the target: a revokes")
    a.beat("a: heartbeat before reporting the release")
    b.beat("b: heartbeat while a has not released")
    a.report("a: reports what it kept")
    b.beat("b: heartbeat: its partitions arrive")
    b.report("b: reports what it owns")
    a.beat("a: a full heartbeat gets its assignment", **a.full())


def epoch_errors(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins")
    b.join("b: joins")
    run.sleep(INTERVAL_S)
    a.beat("a: told what to revoke")
    a.report("a: reports the release")
    b.beat("b: gets its partitions")
    b.beat("b: a future epoch", member_epoch=b.epoch + 1)
    b.beat("b: its current epoch after that", member_epoch=b.epoch)
    a.beat("a: its previous epoch, owning nothing", member_epoch=a.epoch - 1, topic_partitions=())
    a.beat("a: its previous epoch, owned partitions not said", member_epoch=a.epoch - 1)
    a.beat("a: an older epoch", member_epoch=a.epoch - 2, topic_partitions=())
    a.beat("a: an unknown member id", member_id=f"bogus-{run.group}")
    a.join("a: joins again with its member id: its current state")
    b.leave("b: leaves")
    b.leave("b: leaves again")
    b.beat("b: heartbeat after leaving", member_epoch=1)
    a.beat("a: heartbeat right after b left")
    run.sleep(INTERVAL_S)
    a.beat("a: heartbeat after the interval: b's partitions")


def static_members(run: Run) -> None:
    s1 = run.member("s1", "i1")
    s1.join("s1: joins as i1")
    s1.report("s1: reports what it owns")
    s2 = run.member("s2", "i1")
    s2.join("s2: joins as i1 while s1 is in")
    s1.join("s1: joins again as i1 while in")
    s1.beat("s1: heartbeat with another instance id", instance_id="i9")
    s1.beat("s1: static leave for now", member_epoch=cg.STATIC_LEAVE_EPOCH)
    s1.beat("s1: heartbeat after its static leave", member_epoch=2)
    s2.join("s2: joins as i1 after s1 left")
    s2.report("s2: reports what it owns")
    s1.beat("s1: heartbeat with the replaced id", member_epoch=2)
    s1.leave("s1: leaves with the replaced id")
    s2.leave("s2: leaves for good")
    s2.leave("s2: leaves again")


def offsets(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins")
    a.commit("a: commit with its epoch")
    a.commit("a: commit with a past epoch", epoch=a.epoch - 1)
    a.commit("a: commit with a future epoch", epoch=a.epoch + 1)
    a.commit("a: commit with an unknown member id", member_id=f"bogus-{run.group}")
    a.commit("admin: commit to a group with members", epoch=-1, member_id="")
    a.fetch("a: fetch with its epoch")
    a.fetch("a: fetch with a past epoch", epoch=a.epoch - 1)
    a.fetch("a: fetch with a future epoch", epoch=a.epoch + 1)
    a.fetch("a: fetch with an unknown member id", member_id=f"bogus-{run.group}")
    a.fetch("admin: fetch", epoch=-1, member_id=None)
    b.join("b: joins")
    run.sleep(INTERVAL_S)
    a.beat("a: told what to revoke")
    a.commit("a: commit with its epoch, revocation pending")
    a.report("a: reports the release")
    a.commit("a: commit with its new epoch")
    a.commit("a: commit with its previous epoch", epoch=a.epoch - 1)
    a.leave("a: leaves")
    a.commit("a: commit after leaving", epoch=1)
    b.leave("b: leaves")
    a.commit("admin: commit to the empty group", epoch=-1, member_id="")
    a.fetch("admin: fetch", epoch=-1, member_id=None)


def request_validation(run: Run) -> None:
    a = run.member("a")
    a.join("a: join without a subscription", subscribed_topic_names=None)
    a.join("a: join with an empty subscription", subscribed_topic_names=())
    a.join("a: join without a rebalance timeout", rebalance_timeout_ms=-1)
    a.join("a: join without its owned partitions", topic_partitions=None)
    a.join("a: join owning partitions", topic_partitions=_by_topic(frozenset({(run.topic_id, 0)})))
    a.join("a: join with an empty member id", member_id="")
    a.beat("a: an invalid epoch", member_epoch=-3)
    a.beat("a: a heartbeat to an unknown group", member_epoch=1, group_id=run.group + "-none")
    a.leave("a: a leave from an unknown group", group_id=run.group + "-none")
    a.join("a: joins")
    a.beat("a: a static leave without an instance id", member_epoch=cg.STATIC_LEAVE_EPOCH)
    a.beat("a: a heartbeat with an empty member id", member_id="")
    a.beat("a: still a member")


def _settle(run: Run, member: Member, label: str, owned: int, wait_s: float, **first: Any) -> None:
    """A heartbeat reporting what the member owns, with ``first``'s fields (say, a join's),
    then more until it owns ``owned`` partitions or about ``wait_s`` passed; the
    transcript gets where it ended up."""
    start = len(run.transcript)
    response = member.beat(label, **{"topic_partitions": member.owned_topics(), **first})
    for _ in range(int(wait_s / 0.3)):  # (the model's clock moves with run.sleep only)
        if response.error_code or len(member.owned) == owned:
            break
        run.sleep(0.3)
        response = member.report(label)
    del run.transcript[start:]
    run.transcript.append((label, Settled(error_name(response.error_code), len(member.owned))))


def regex_subscriptions(run: Run) -> None:
    """A regular expression matches whole topic names (RE2J's ``matches``): one that
    matches only part of the topic's name gets nothing, one that matches all of it gets
    the topic, and a second member of the same one its share."""
    a, b = run.member("a"), run.member("b")
    # The topic's random end: re.search would take the topic with it; and the whole name's
    # regex matches no other topic of a broker shared with other tests.
    part = run.topic[-8:]
    whole = ".*" + part
    joining = {
        "member_epoch": cg.JOIN_EPOCH,
        "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
        "subscribed_topic_names": None,
        "topic_partitions": (),
    }
    _settle(run, a, "a: joins by a regex matching part of the name: nothing", PARTITIONS,
            4 * INTERVAL_S, **joining, subscribed_topic_regex=part)  # fmt: skip
    _settle(run, a, "a: then by one matching the whole name: the topic", PARTITIONS,
            TIMEOUT_S, subscribed_topic_regex=whole)  # fmt: skip
    _settle(run, b, "b: joins by the same regex", 0, 0, **joining, subscribed_topic_regex=whole)
    run.sleep(INTERVAL_S)
    _settle(run, a, "a: told to give b its share", PARTITIONS // 2, TIMEOUT_S)
    _settle(run, a, "a: reports the release", PARTITIONS // 2, 0)
    _settle(run, b, "b: takes its share", PARTITIONS // 2, TIMEOUT_S)


SCENARIOS = [
    two_members_share,
    epoch_errors,
    static_members,
    offsets,
    request_validation,
    regex_subscriptions,
]


# -- the comparison ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def topic(kafka: str) -> Iterator[tuple[str, uuid.UUID]]:
    name = f"cg-mvb-{uuid.uuid4().hex[:8]}"
    topic_id = create_topic_with_id(kafka, name, PARTITIONS)
    _await_group_coordinator_metadata(kafka, name)
    yield name, topic_id


def _await_group_coordinator_metadata(kafka: str, topic: str) -> None:
    """The group coordinator learns of a new topic a moment after the admin does: until
    then a member subscribed to it is assigned nothing. A probe member joins until it is."""
    group = f"cg-mvb-probe-{uuid.uuid4().hex[:8]}"
    broker = Broker(kafka, "4", group)
    try:
        deadline = time.monotonic() + 30
        while True:
            member_id = str(uuid.uuid4())
            joined = broker.send(
                "probe",
                cg.ConsumerGroupHeartbeatRequest(
                    group,
                    member_id,
                    cg.JOIN_EPOCH,
                    rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                    subscribed_topic_names=(topic,),
                    topic_partitions=(),
                ),
            )
            broker.send("probe", cg.ConsumerGroupHeartbeatRequest(group, member_id, -1))
            assert isinstance(joined, cg.ConsumerGroupHeartbeatResponse)
            if joined.assignment:
                return
            assert time.monotonic() < deadline, joined
            time.sleep(0.2)
    finally:
        broker.close()


def transcript(
    scenario: Callable[[Run], None], driver: Driver, group: str, topic: tuple[str, uuid.UUID]
) -> list[tuple[str, Answer]]:
    run = Run(driver, group, *topic)
    try:
        scenario(run)
    finally:
        driver.close()
    return run.transcript


@on_kafka("4")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_model_answers_as_the_broker(
    scenario: Callable[[Run], None],
    kafka: str,
    topic: tuple[str, uuid.UUID],
    request: pytest.FixtureRequest,
) -> None:
    version: str = request.node.callspec.params["kafka"]
    group = f"cg-mvb-{scenario.__name__}-{uuid.uuid4().hex[:8]}"
    expected = transcript(scenario, Model(*topic), group, topic)
    actual = transcript(scenario, Broker(kafka, version, group), group, topic)
    differences = [
        f"{label}:\n  model  {want}\n  broker {got}"
        for (label, want), (_, got) in zip(expected, actual, strict=True)
        if want != got
    ]
    assert not differences, "\n".join(differences)
