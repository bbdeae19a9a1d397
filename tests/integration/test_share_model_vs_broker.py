"""The share-group model against a real Kafka 4 broker: the same ShareGroupHeartbeat answers.

As ``test_consumer_group_model_vs_broker.py`` does for KIP-848's consumer groups: each
scenario is a script of ShareGroupHeartbeat requests, sent as a member sends them, to
``ShareGroupsModel`` on a manual clock and to a real broker (one connection per member), and
the normalized transcripts must be equal.

Compared exactly: error codes, member ids (the member chooses its own) and epochs, the
heartbeat interval, and whether an answer carries an assignment at all (null: unchanged).
Which partitions the ``simple`` assignor picks is its own choice, so an assignment is
compared by its size and by how many of the member's previous partitions it keeps; each run
checks on its own the assignor's contract: every partition assigned, balanced over the
members, a partition given to two members only when there are more members than partitions.
Error messages are not compared (the model sends none).

What Kafka 4.3.1 answers, which the model must answer too:

- a group's first join gets epoch 2 and no partitions: the share-partitions' state is being
  initialized; about a second later a heartbeat gets epoch 3 and every partition;
- a join while others are in gets its share at once; the others get theirs (and the bumped
  epoch) with their next heartbeat;
- a heartbeat with the member's previous epoch is accepted (its answer may have been lost):
  a full one (with the subscription, as a member sends after an error) gets the assignment
  again, a plain one gets none; any other epoch is FENCED_MEMBER_EPOCH, which leaves the
  member in the group; an unknown member UNKNOWN_MEMBER_ID; a leave (epoch -1) moves the
  leaver's partitions to the others' next heartbeat.

Timing: Kafka 4.3 computes a group's target assignment at most once a second
(``group.share.assignment.interval.ms``), by the first heartbeat after it; until then a
heartbeat gets the last target, a member that joined meanwhile no partitions
(``within_the_interval``). Other scenarios wait ``INTERVAL_S`` before a change whose new
target they need at once (the model's clock moves as much), and ``INIT_S`` for a new
group's partitions.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import pytest

from coordination._protocol import messages as m
from coordination._protocol import share_group as sg
from coordination._protocol.error_codes import error_name
from coordination._transport.kafka import KafkaTransport
from coordination.share_group import ShareGroupMember
from coordination.testing._broker import TEST_BROKER_CONFIG
from coordination.testing.simulation._share_group_coordinator import (
    ShareGroupsModel,
    ShareSettings,
)
from coordination.transport import CoordinatorNode, FollowUp, TransportError
from tests.simulation.test_group_coordinator import ManualTimers

from .test_consumer_group_member import create_topic_with_id, wait_until
from .test_model_vs_broker import BrokerDriver
from .test_share_consumer import ON_SHARE_BROKERS

pytestmark = [pytest.mark.integration, ON_SHARE_BROKERS]

PARTITIONS = 2
# Past the broker's assignment interval (1 s by default).
INTERVAL_S = 1.2
# Past a new group's share-partition initialization and the next assignment after it (about
# a second on 4.3.1).
INIT_S = 2.0
TIMEOUT_S = 10.0

# The broker's settings, which the model is given.
SETTINGS = ShareSettings(
    heartbeat_interval_ms=int(TEST_BROKER_CONFIG["group.share.heartbeat.interval.ms"]),
    session_timeout_ms=45_000,  # group.share.session.timeout.ms, Kafka's default
)

# -- normalized answers -------------------------------------------------------------------------


class Assigned(NamedTuple):
    """An assignment: how many partitions, and how many of them the member had before."""

    size: int
    kept: int


class _Choice:
    """Equal to any assignment: which member the assignor gives more is its own choice."""

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, Assigned)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<the assignor's choice>"


CHOICE: Any = _Choice()


class Beat(NamedTuple):
    error: str
    member: str | None
    epoch: int
    heartbeat_interval_ms: int
    assignment: Assigned | None


# -- where the requests go --------------------------------------------------------------------


class Model:
    def __init__(self, topic_id: uuid.UUID) -> None:
        self.timers = ManualTimers()
        self.model = ShareGroupsModel(
            self.timers,
            topic_id=topic_id,
            partitions=PARTITIONS,
            end=lambda p, now: 0,
            next_record_at=lambda p, now: None,
            brokers=(1,),
            settings=SETTINGS,
        )
        self.model.coordinator_loaded()

    def send(self, client: str, request: sg.ShareGroupHeartbeatRequest) -> object:
        answers: list[object] = []
        self.model.handle(1, request, answers.append, None)
        self.timers.run_until(self.timers.now())
        (answer,) = answers
        return answer

    def sleep(self, seconds: float) -> None:
        self.timers.advance(seconds)

    def close(self) -> None:
        pass


class Broker(BrokerDriver):
    def send(self, client: str, request: sg.ShareGroupHeartbeatRequest) -> object:
        transport: KafkaTransport = self._transport(client)
        answer: object = transport.send(
            request, sg.ShareGroupHeartbeatResponse, coordinator=self._node, timeout_s=TIMEOUT_S
        )
        return answer


Driver = Model | Broker


class Run:
    """One scenario's run on one driver, and its transcript."""

    def __init__(self, driver: Driver, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.driver, self.group, self.topic, self.topic_id = driver, group, topic, topic_id
        self.transcript: list[tuple[str, Beat]] = []
        self.names: dict[str, str] = {}  # member id -> the client's name
        self.owned: dict[str, frozenset[int]] = {}  # by client name: what each was last told

    def member(self, name: str) -> Member:
        # The same id in both runs: the group's name ends with the scenario's own 8 digits.
        member_id = f"{name}-{self.group[-8:]}"
        self.names[member_id] = name
        return Member(self, name, member_id)

    def call(
        self,
        label: str,
        client: Member,
        request: sg.ShareGroupHeartbeatRequest,
        choice: bool = False,
    ) -> sg.ShareGroupHeartbeatResponse:
        response = self.driver.send(client.name, request)
        assert isinstance(response, sg.ShareGroupHeartbeatResponse), response
        assigned = None
        if response.assignment is not None:
            parts = _partitions(response.assignment)
            assigned = Assigned(len(parts), len(parts & client.owned))
        member = response.member_id
        answer = Beat(
            error_name(response.error_code),
            self.names.get(member, member) if member is not None else None,
            response.member_epoch,
            response.heartbeat_interval_ms,
            CHOICE if choice else assigned,
        )
        self.transcript.append((label, answer))
        return response

    def sleep(self, seconds: float) -> None:
        self.driver.sleep(seconds)

    def check_simple_assignor(self) -> None:
        """The ``simple`` assignor's contract over what each member was last told, once every
        member has heard of the last change: every partition assigned, balanced, and shared
        only when there are more members than partitions."""
        given = list(self.owned.values())
        sizes = [len(parts) for parts in given]
        assert max(sizes) - min(sizes) <= 1, self.owned
        holders = [sum(p in parts for parts in given) for p in range(PARTITIONS)]
        # As many members a partition as it takes to give each member one (Kafka 4.3.1 gives
        # 3 members on 2 partitions {0, 1}, {0} and {1}); one while there are enough.
        assert holders == [-(-len(given) // PARTITIONS)] * PARTITIONS, self.owned


class Member:
    """One member: its id, epoch and partitions, updated from the answers it gets."""

    def __init__(self, run: Run, name: str, member_id: str) -> None:
        self.run, self.name, self.member_id = run, name, member_id
        self.epoch = sg.JOIN_EPOCH
        self.owned: frozenset[int] = frozenset()

    def beat(
        self, label: str, *, lost: bool = False, choice: bool = False, **kw: Any
    ) -> sg.ShareGroupHeartbeatResponse:
        """A heartbeat; keyword arguments override the request's fields (by default the
        member's epoch, nothing else: an unchanged member's heartbeat). ``lost``: the member
        never gets the answer (the transcript does). ``choice``: whether the answer carries
        an assignment, and which, is the assignor's choice (checked by
        :meth:`Run.check_simple_assignor`)."""
        fields: dict[str, Any] = {"member_epoch": self.epoch}
        fields.update(kw)
        request = sg.ShareGroupHeartbeatRequest(
            group_id=fields.pop("group_id", self.run.group),
            member_id=fields.pop("member_id", self.member_id),
            **fields,
        )
        response = self.run.call(label, self, request, choice)
        ours = request.member_id == self.member_id and request.group_id == self.run.group
        if ours and not lost:
            self._note(request, response)
        return response

    def _note(
        self, request: sg.ShareGroupHeartbeatRequest, response: sg.ShareGroupHeartbeatResponse
    ) -> None:
        if response.error_code != 0:
            return  # a fenced member stays in the group until it leaves or its session ends
        if request.member_epoch == sg.LEAVE_EPOCH:
            self.epoch, self.owned = sg.JOIN_EPOCH, frozenset()
            self.run.owned.pop(self.name, None)
            return
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = self.run.owned[self.name] = _partitions(response.assignment)

    def join(self, label: str, **kw: Any) -> sg.ShareGroupHeartbeatResponse:
        return self.beat(label, **{"member_epoch": sg.JOIN_EPOCH, **self.full(), **kw})

    def full(self) -> dict[str, Any]:
        """The fields of a full heartbeat (what a member sends after an error)."""
        return {"subscribed_topic_names": (self.run.topic,)}

    def leave(self, label: str, **kw: Any) -> sg.ShareGroupHeartbeatResponse:
        return self.beat(label, member_epoch=sg.LEAVE_EPOCH, **kw)


def _partitions(topics: tuple[Any, ...]) -> frozenset[int]:
    return frozenset(p for t in topics for p in t.partitions)


# -- scenarios ---------------------------------------------------------------------------------


def first_member(run: Run) -> None:
    a = run.member("a")
    a.join("a: the group's first join: epoch 2, no partitions while they are initialized")
    a.beat("a: heartbeat at once: nothing yet")
    run.sleep(INIT_S)
    a.beat("a: heartbeat once initialized: epoch 3, every partition")
    a.beat("a: heartbeat, nothing changed")
    run.check_simple_assignor()


def members_share(run: Run) -> None:
    a, b, c = run.member("a"), run.member("b"), run.member("c")
    a.join("a: joins")
    run.sleep(INIT_S)
    a.beat("a: gets every partition")
    run.sleep(INTERVAL_S)
    b.join("b: joins: its half at once")
    b.beat("b: heartbeat, nothing changed")
    a.beat("a: heartbeat: its half, the next epoch")
    a.beat("a: heartbeat, nothing changed")
    run.check_simple_assignor()
    run.sleep(INTERVAL_S)
    # Which member takes both partitions is the assignor's choice: the joining one (seen in
    # CI) or one of the two before it (seen in other runs).
    c.join("c: joins a group of as many members as partitions: one or both", choice=True)
    a.beat("a: heartbeat after c joined", choice=True)
    b.beat("b: heartbeat after c joined", choice=True)
    a.beat("a: heartbeat, nothing changed")
    run.check_simple_assignor()


def within_the_interval(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins")
    run.sleep(INIT_S)
    a.beat("a: every partition: a target computed now")
    b.join("b: joins within the interval: the last target's epoch, no partitions")
    a.beat("a: heartbeat within the interval: nothing changed")
    b.beat("b: heartbeat within the interval: nothing yet")
    run.sleep(INTERVAL_S)
    b.beat("b: heartbeat past the interval: the next epoch, its half")
    a.beat("a: its half, the next epoch")
    run.check_simple_assignor()
    a.leave("a: leaves")
    b.beat("b: heartbeat within the interval after the leave: nothing changed")
    a.join("a: joins again with its id within the interval: no partitions")
    run.sleep(INTERVAL_S)
    b.beat("b: past the interval: its half")
    a.beat("a: its half")
    run.check_simple_assignor()


def lost_answer(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins")
    run.sleep(INIT_S)
    a.beat("a: gets every partition")
    run.sleep(INTERVAL_S)
    b.join("b: joins")
    previous = a.epoch
    a.beat("a: the answer with its new assignment and epoch, lost", lost=True)
    a.beat("a: its previous epoch again, a plain heartbeat: no assignment")
    a.beat(
        "a: its previous epoch, a full heartbeat: the assignment again",
        member_epoch=previous,
        **a.full(),
    )
    a.beat("a: its current epoch, a plain heartbeat")
    a.beat("a: its current epoch, a full heartbeat: the assignment again", **a.full())
    b.beat("b: heartbeat")
    run.check_simple_assignor()


def epoch_errors(run: Run) -> None:
    a, b = run.member("a"), run.member("b")
    a.join("a: joins")
    run.sleep(INIT_S)
    a.beat("a: gets every partition")
    run.sleep(INTERVAL_S)
    b.join("b: joins")
    a.beat("a: its half, the next epoch")
    a.beat("a: an epoch older than its previous", member_epoch=a.epoch - 2)
    a.beat("a: an older epoch, full", member_epoch=a.epoch - 2, **a.full())
    a.beat("a: a future epoch", member_epoch=a.epoch + 1)
    a.beat("a: its current epoch: still a member")
    a.beat("a: an unknown member id", member_id=f"bogus-{run.group[-8:]}")
    a.beat("a: an unknown member id, full", member_id=f"bogus-{run.group[-8:]}", **a.full())
    b.join("b: joins again with its member id: its current state")
    run.sleep(INTERVAL_S)
    b.leave("b: leaves")
    b.leave("b: leaves again")
    b.beat("b: heartbeat after leaving", member_epoch=1)
    a.beat("a: heartbeat after b left: every partition")
    run.check_simple_assignor()
    a.beat("a: heartbeat to an unknown group", group_id=run.group + "-none")
    a.leave("a: leave an unknown group", group_id=run.group + "-none")


def request_validation(run: Run) -> None:
    a = run.member("a")
    a.join("a: join without a subscription", subscribed_topic_names=None)
    a.join("a: join with an empty member id", member_id="")
    a.join("a: join with a member id longer than a UUID's 36 characters", member_id="m" * 37)
    a.join("a: joins")
    a.beat("a: a heartbeat with an empty member id", member_id="")
    a.beat("a: an invalid epoch", member_epoch=-3)
    a.beat("a: still a member")


SCENARIOS = [
    first_member,
    members_share,
    within_the_interval,
    lost_answer,
    epoch_errors,
    request_validation,
]


# -- the comparison ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def topic(kafka: str) -> Iterator[tuple[str, uuid.UUID]]:
    name = f"share-mvb-{uuid.uuid4().hex[:8]}"
    topic_id = create_topic_with_id(kafka, name, PARTITIONS)
    _await_share_partitions(kafka, name)
    yield name, topic_id


def _await_share_partitions(kafka: str, topic: str) -> None:
    """A probe group joins until it is assigned the topic's partitions: the first share
    group of a new broker waits for the share-group state topic to be made, and the group
    coordinator learns of a new topic a moment after the admin does. The scenarios' groups
    then see only their own initialization."""
    group = f"share-mvb-probe-{uuid.uuid4().hex[:8]}"
    broker = Broker(kafka, "4", group)
    try:
        member_id = f"probe-{group[-8:]}"
        join = sg.ShareGroupHeartbeatRequest(group, member_id, sg.JOIN_EPOCH, None, (topic,))
        answer = broker.send("probe", join)
        assert isinstance(answer, sg.ShareGroupHeartbeatResponse) and answer.error_code == 0
        epoch = answer.member_epoch
        wait_until(
            lambda: _assigned(
                broker.send("probe", sg.ShareGroupHeartbeatRequest(group, member_id, epoch))
            ),
            "a probe group's first assignment",
        )
        broker.send("probe", sg.ShareGroupHeartbeatRequest(group, member_id, sg.LEAVE_EPOCH))
    finally:
        broker.close()


def _assigned(answer: object) -> bool:
    assert isinstance(answer, sg.ShareGroupHeartbeatResponse) and answer.error_code == 0, answer
    return bool(answer.assignment and _partitions(answer.assignment))


def transcript(
    scenario: Callable[[Run], None], driver: Driver, group: str, topic: tuple[str, uuid.UUID]
) -> list[tuple[str, Beat]]:
    run = Run(driver, group, *topic)
    try:
        scenario(run)
    finally:
        driver.close()
    return run.transcript


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_share_model_answers_as_the_broker(
    scenario: Callable[[Run], None],
    kafka: str,
    topic: tuple[str, uuid.UUID],
    request: pytest.FixtureRequest,
) -> None:
    version: str = request.node.callspec.params["kafka"]
    group = f"share-mvb-{scenario.__name__}-{uuid.uuid4().hex[:8]}"
    expected = transcript(scenario, Model(topic[1]), group, topic)
    actual = transcript(scenario, Broker(kafka, version, group), group, topic)
    differences = [
        f"{label}:\n  model  {want}\n  broker {got}"
        for (label, want), (_, got) in zip(expected, actual, strict=True)
        if want != got
    ]
    assert not differences, "\n".join(differences)


# -- the member after a lost answer --------------------------------------------------------------

R = TypeVar("R", bound=m.Response)


class LosingTransport(KafkaTransport):
    """The Kafka transport, but the first ShareGroupHeartbeat answer carrying an assignment
    after :meth:`lose_next_assignment` is lost: the broker handled the request, the member
    gets a TransportError."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._armed = threading.Event()
        self.lost: sg.ShareGroupHeartbeatResponse | None = None
        self.after_loss: list[sg.ShareGroupHeartbeatRequest] = []

    def lose_next_assignment(self) -> None:
        self._armed.set()

    def send(
        self,
        request: Any,
        response_type: type[R],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: FollowUp | None = None,
    ) -> R:
        if self.lost is not None and isinstance(request, sg.ShareGroupHeartbeatRequest):
            self.after_loss.append(request)
        response = super().send(
            request, response_type, coordinator=coordinator, timeout_s=timeout_s, then=then
        )
        if (
            self._armed.is_set()
            and isinstance(response, sg.ShareGroupHeartbeatResponse)
            and response.assignment is not None
        ):
            self._armed.clear()
            self.lost = response
            raise TransportError("the answer was lost")
        return response


def test_a_member_whose_heartbeat_answer_is_lost_gets_its_assignment_again(
    kafka: str, topic: tuple[str, uuid.UUID]
) -> None:
    """Kafka answers a plain heartbeat of the previous epoch without the assignment, so a
    member that lost the answer moving it to a new one would keep its old partitions until
    the group changes again; after a heartbeat without an answer the member sends a full one,
    which gets the assignment."""
    name, _ = topic
    group = f"share-mvb-lost-{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = {"bootstrap_servers": kafka}
    transport = LosingTransport(
        client_id="losing", request_timeout_ms=10_000, connection={"bootstrap_servers": kafka}
    )
    a = ShareGroupMember(group, [name], transport=transport, **settings)
    with a:
        a.wait_assigned(timeout=TIMEOUT_S)
        every = {(name, p) for p in range(PARTITIONS)}
        wait_until(lambda: a.assignment() == every, "a's first assignment: every partition")
        transport.lose_next_assignment()
        with ShareGroupMember(group, [name], **settings) as b:
            b.wait_assigned(timeout=TIMEOUT_S)
            wait_until(lambda: transport.lost is not None, "the answer moving a, lost")
            wait_until(
                lambda: bool(b.assignment()) and a.assignment() == every - b.assignment(),
                "a's new assignment, despite the lost answer",
            )
    assert transport.lost is not None and len(_partitions(transport.lost.assignment or ())) == 1
    first = transport.after_loss[0]
    assert first.member_epoch == transport.lost.member_epoch - 1  # its previous epoch
    assert first.subscribed_topic_names == (name,)  # a full heartbeat
