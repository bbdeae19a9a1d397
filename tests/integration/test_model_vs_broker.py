"""The group coordinator model against real brokers: the same scenarios must get the same answers.

Each scenario is a script of requests from a few clients, some of which park (a JoinGroup
waits for the join phase, a follower's SyncGroup for the leader's). It runs twice: against
``GroupCoordinatorModel`` on a manual clock, and against a real broker, one connection per
client, parked requests on threads. Each answer is normalized (member ids become ``A``,
``B``... in order of appearance, or ``i1#1``, ``i1#2``... for the ids of instance ``i1``;
member lists are sorted) and the two transcripts must be equal.

The model answers as Kafka 4.3 does. Where 3.9 answers otherwise, the step says what 3.9
answers (``on_3_9``), so the difference is checked too, not ignored.

Timing: after sending a request that parks, the script waits ``SETTLE_S`` so that the broker
has it before the next request; the model's clock moves by the same amount. Session and
rebalance timeouts are short (1 s) where a scenario waits for them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from coordination._protocol import messages as m
from coordination._protocol.error_codes import error_name
from coordination._transport.kafka import KafkaTransport
from coordination.testing.simulation._group_coordinator import (
    BrokerSettings,
    GroupCoordinatorModel,
    GroupLog,
)
from coordination.transport import CoordinatorNode
from tests.simulation.test_group_coordinator import ManualTimers

pytestmark = pytest.mark.integration

TOPIC = "model-vs-broker"
SETTLE_S = 0.3
ANSWER_TIMEOUT_S = 5.0

RESPONSE_TYPES: dict[type[Any], type[Any]] = {
    m.JoinGroupRequest: m.JoinGroupResponse,
    m.SyncGroupRequest: m.SyncGroupResponse,
    m.HeartbeatRequest: m.HeartbeatResponse,
    m.LeaveGroupRequest: m.LeaveGroupResponse,
    m.OffsetCommitRequest: m.OffsetCommitResponse,
    m.OffsetFetchRequest: m.OffsetFetchResponse,
    m.DescribeGroupRequest: m.DescribeGroupResponse,
}


class _Any:
    """Equal to anything: for an answer Kafka leaves to chance."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<any>"


ANY: Any = _Any()


# -- normalized answers -------------------------------------------------------------------------


class Join(NamedTuple):
    error: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    skip_assignment: bool
    member: str
    members: tuple[tuple[str, str | None, bytes], ...]


class Sync(NamedTuple):
    error: str
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


class Heartbeat(NamedTuple):
    error: str


class Leave(NamedTuple):
    error: str
    member_error: str


class Commit(NamedTuple):
    partitions: tuple[tuple[str, int, str], ...]


class Fetch(NamedTuple):
    error: str
    partitions: tuple[tuple[str, int, int, str | None, str], ...]


class Describe(NamedTuple):
    error: str
    state: str
    protocol_type: str
    protocol: str
    # (member, instance id, metadata, assignment); client id and host differ by driver.
    members: tuple[tuple[str, str | None, bytes, bytes], ...]


Answer = Join | Sync | Heartbeat | Leave | Commit | Fetch | Describe | str


class Names:
    """Member ids made comparable across runs: in order of appearance."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._instances: dict[str, int] = {}
        self._dynamic = 0

    def __call__(self, member_id: str, instance: str | None = None) -> str:
        if not member_id or member_id.startswith("bogus"):
            return member_id
        if member_id not in self._names:
            if instance is None and member_id.startswith("i") and "-" in member_id:
                instance = member_id.split("-", 1)[0]  # our instance ids are i1, i2...
            if instance is not None:
                self._instances[instance] = self._instances.get(instance, 0) + 1
                self._names[member_id] = f"{instance}#{self._instances[instance]}"
            else:
                self._names[member_id] = "ABCDEFGHIJ"[self._dynamic]
                self._dynamic += 1
        return self._names[member_id]

    def normalize(self, response: m.Response | None) -> Answer:
        if response is None:
            return "no answer"
        if isinstance(response, m.JoinGroupResponse):
            members = tuple(
                sorted(
                    (self(x.member_id, x.group_instance_id), x.group_instance_id, x.metadata)
                    for x in response.members
                )
            )
            return Join(
                error_name(response.error_code),
                response.generation_id,
                response.protocol_type,
                response.protocol_name,
                self(response.leader),
                response.skip_assignment,
                self(response.member_id),
                members,
            )
        if isinstance(response, m.SyncGroupResponse):
            return Sync(
                error_name(response.error_code),
                response.protocol_type,
                response.protocol_name,
                response.assignment,
            )
        if isinstance(response, m.HeartbeatResponse):
            return Heartbeat(error_name(response.error_code))
        if isinstance(response, m.LeaveGroupResponse):
            return Leave(error_name(response.error_code), error_name(response.member_error_code))
        if isinstance(response, m.OffsetCommitResponse):
            # Kafka 3.9 lists the partitions in hash order.
            return Commit(tuple(sorted((t, p, error_name(c)) for t, p, c in response.partitions)))
        if isinstance(response, m.DescribeGroupResponse):
            described = tuple(
                sorted(
                    (
                        self(x.member_id, x.group_instance_id),
                        x.group_instance_id,
                        x.metadata,
                        x.assignment,
                    )
                    for x in response.members
                )
            )
            return Describe(
                error_name(response.error_code),
                response.state,
                response.protocol_type,
                response.protocol,
                described,
            )
        assert isinstance(response, m.OffsetFetchResponse)
        partitions = tuple(
            sorted((t, p, o, md, error_name(c)) for t, p, o, md, c in response.partitions)
        )
        return Fetch(error_name(response.error_code), partitions)


# -- where the requests go --------------------------------------------------------------------


@dataclass
class Pending:
    """A request on its way: its answer arrives now or later."""

    client: Client
    request: m.Request
    responses: list[m.Response] = field(default_factory=list)
    thread: threading.Thread | None = None

    def answer(self, response: m.Response) -> None:
        self.responses.append(response)


class Driver:
    """Sends a scenario's requests to a broker or to the model."""

    version = "model"

    def start(self, pending: Pending) -> None:
        raise NotImplementedError

    def wait(self, pending: Pending, timeout_s: float) -> m.Response | None:
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def reach(self, group: str, state: str) -> None:
        """Wait until the group is in ``state`` (no step of the transcript)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class ModelDriver(Driver):
    def __init__(self) -> None:
        self.timers = ManualTimers()
        self.model = GroupCoordinatorModel(1, GroupLog(), self.timers, BrokerSettings())
        self.model.load()

    def start(self, pending: Pending) -> None:
        self.model.handle(pending.request, pending.answer)
        self.timers.run_until(self.timers.now())

    def wait(self, pending: Pending, timeout_s: float) -> m.Response | None:
        deadline = self.timers.now() + timeout_s
        while not pending.responses:
            due = self.timers.next_due()
            if due is None or due > deadline:
                self.timers.run_until(deadline)
                break
            self.timers.run_until(due)
        assert len(pending.responses) <= 1, pending.responses
        return pending.responses[0] if pending.responses else None

    def sleep(self, seconds: float) -> None:
        self.timers.advance(seconds)

    def reach(self, group: str, state: str) -> None:
        assert self.model.describe(group).state == state  # the model moves at once


class BrokerDriver(Driver):
    def __init__(self, servers: str, version: str, group: str) -> None:
        self.version = version
        self._servers = servers
        self._transports: dict[str, KafkaTransport] = {}
        self._node = self._find_coordinator(group)

    def _transport(self, name: str) -> KafkaTransport:
        if name not in self._transports:
            self._transports[name] = KafkaTransport(
                client_id=name,
                request_timeout_ms=60_000,
                connection={"bootstrap_servers": self._servers},
            )
        return self._transports[name]

    def _find_coordinator(self, group: str) -> CoordinatorNode:
        transport = self._transport("finder")
        deadline = time.monotonic() + 60
        while True:
            last: object
            found = last = transport.send(
                m.FindCoordinatorRequest(group),
                m.FindCoordinatorResponse,
                coordinator=None,
                timeout_s=10,
            )
            if found.error_code == 0:
                node = CoordinatorNode(found.node_id, found.host, found.port)
                # The broker names the partition's leader before that partition's group
                # coordinator has loaded it (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS):
                # a scenario starts once the coordinator answers for the group.
                described = transport.send(
                    m.DescribeGroupRequest(group),
                    m.DescribeGroupResponse,
                    coordinator=node,
                    timeout_s=10,
                )
                if described.error_code == 0:
                    return node
                last = described
            assert time.monotonic() < deadline, f"no coordinator for {group}: {last}"
            time.sleep(0.2)  # COORDINATOR_NOT_AVAILABLE until __consumer_offsets exists

    def start(self, pending: Pending) -> None:
        transport = self._transport(pending.client.name)
        response_type = RESPONSE_TYPES[type(pending.request)]

        def send() -> None:
            pending.answer(
                transport.send(pending.request, response_type, coordinator=self._node, timeout_s=50)
            )

        pending.thread = threading.Thread(target=send, daemon=True)
        pending.thread.start()

    def wait(self, pending: Pending, timeout_s: float) -> m.Response | None:
        assert pending.thread is not None
        pending.thread.join(timeout_s)
        return pending.responses[0] if pending.responses else None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def reach(self, group: str, state: str) -> None:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        transport = self._transport("watcher")
        while True:
            described = transport.send(
                m.DescribeGroupRequest(group),
                m.DescribeGroupResponse,
                coordinator=self._node,
                timeout_s=ANSWER_TIMEOUT_S,
            )
            if described.state == state:
                return
            assert time.monotonic() < deadline, f"{group} stays {described.state}, not {state}"
            time.sleep(0.01)

    def close(self) -> None:
        for transport in self._transports.values():
            transport.close()


# -- scenarios ---------------------------------------------------------------------------------


@dataclass
class Step:
    label: str
    answer: Answer
    on_3_9: Callable[[Any], Answer] | None = None


class Run:
    """One scenario's run on one driver, and its transcript."""

    def __init__(self, driver: Driver, group: str) -> None:
        self.driver = driver
        self.group = group
        self.names = Names()
        self.transcript: list[Step] = []

    def client(self, name: str, instance: str | None = None, **settings: Any) -> Client:
        return Client(self, name, instance, **settings)

    def start(self, client: Client, request: m.Request) -> Pending:
        pending = Pending(client, request)
        self.driver.start(pending)
        self.driver.sleep(SETTLE_S)  # the broker has it before the next request
        return pending

    def result(
        self,
        label: str,
        pending: Pending,
        *,
        timeout_s: float = ANSWER_TIMEOUT_S,
        on_3_9: Callable[[Any], Answer] | None = None,
    ) -> m.Response | None:
        response = self.driver.wait(pending, timeout_s)
        if isinstance(response, m.JoinGroupResponse):
            pending.client.joined(response)
        self.transcript.append(Step(label, self.names.normalize(response), on_3_9))
        return response

    def call(
        self,
        label: str,
        client: Client,
        request: m.Request,
        on_3_9: Callable[[Any], Answer] | None = None,
    ) -> m.Response | None:
        pending = Pending(client, request)
        self.driver.start(pending)
        return self.result(label, pending, on_3_9=on_3_9)

    def sleep(self, seconds: float) -> None:
        self.driver.sleep(seconds)


class Client:
    """One member process: its own connection, member id and generation."""

    def __init__(
        self,
        run: Run,
        name: str,
        instance: str | None,
        *,
        session_ms: int = 10_000,
        rebalance_ms: int = 3_000,
        protocol_type: str = "sim",
        protocols: tuple[tuple[str, bytes], ...] = (("p1", b"meta"),),
    ) -> None:
        self.run, self.name, self.instance = run, name, instance
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.protocol_type, self.protocols = protocol_type, protocols
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.members: tuple[m.JoinGroupResponseMember, ...] = ()

    def joined(self, response: m.JoinGroupResponse) -> None:
        if response.error_code in (0, 79) and response.member_id:  # NONE, MEMBER_ID_REQUIRED
            self.member_id = response.member_id
        if response.error_code == 0:
            self.generation, self.protocol_name = response.generation_id, response.protocol_name
            if response.members:
                self.members = response.members

    def join_request(self, **kw: Any) -> m.JoinGroupRequest:
        return m.JoinGroupRequest(
            kw.get("group", self.run.group),
            kw.get("session_ms", self.session_ms),
            kw.get("rebalance_ms", self.rebalance_ms),
            kw.get("member_id", self.member_id),
            kw.get("instance", self.instance),
            kw.get("protocol_type", self.protocol_type),
            kw.get("protocols", self.protocols),
            "a reason",
        )

    def join(self, label: str, on_3_9: Callable[[Any], Answer] | None = None, **kw: Any) -> None:
        self.run.call(label, self, self.join_request(**kw), on_3_9)

    def start_join(self, **kw: Any) -> Pending:
        return self.run.start(self, self.join_request(**kw))

    def sync_request(self, *, assign: bool = False, **kw: Any) -> m.SyncGroupRequest:
        names = self.run.names
        assignments = tuple(
            (x.member_id, f"to-{names(x.member_id, x.group_instance_id)}".encode())
            for x in (self.members if assign else ())
        )
        return m.SyncGroupRequest(
            kw.get("group", self.run.group),
            kw.get("generation", self.generation),
            kw.get("member_id", self.member_id),
            kw.get("instance", self.instance),
            kw.get("protocol_type", self.protocol_type),
            kw.get("protocol_name", self.protocol_name),
            kw.get("assignments", assignments),
        )

    def sync(self, label: str, on_3_9: Callable[[Any], Answer] | None = None, **kw: Any) -> None:
        self.run.call(label, self, self.sync_request(**kw), on_3_9)

    def start_sync(self, **kw: Any) -> Pending:
        return self.run.start(self, self.sync_request(**kw))

    def heartbeat(self, label: str, **kw: Any) -> None:
        request = m.HeartbeatRequest(
            kw.get("group", self.run.group),
            kw.get("generation", self.generation),
            kw.get("member_id", self.member_id),
            kw.get("instance", self.instance),
        )
        self.run.call(label, self, request)

    def leave(self, label: str, **kw: Any) -> None:
        request = m.LeaveGroupRequest(
            kw.get("group", self.run.group),
            kw.get("member_id", self.member_id),
            kw.get("instance", self.instance),
            "leaving",
        )
        self.run.call(label, self, request)

    def commit(self, label: str, on_3_9: Callable[[Any], Answer] | None = None, **kw: Any) -> None:
        offsets = kw.get("offsets", ((TOPIC, 0, 10, "md"), (TOPIC, 1, 20, None)))
        request = m.OffsetCommitRequest(
            kw.get("group", self.run.group),
            kw.get("generation", self.generation),
            kw.get("member_id", self.member_id),
            kw.get("instance", self.instance),
            offsets,
        )
        self.run.call(label, self, request, on_3_9)

    def fetch(self, label: str, **kw: Any) -> None:
        request = m.OffsetFetchRequest(
            kw.get("group", self.run.group), ((TOPIC, 0), (TOPIC, 1)), require_stable=True
        )
        self.run.call(label, self, request)

    def describe(self, label: str, on_3_9: Callable[[Any], Answer] | None = None) -> None:
        self.run.call(label, self, m.DescribeGroupRequest(self.run.group), on_3_9)


def stable_pair(run: Run, a: Client, b: Client) -> None:
    """Dynamic members a (the leader) and b, joined and synced in generation 2."""
    a.join("a: join without a member id")
    a.join("a: join with its member id")
    a.sync("a: leader sync", assign=True)
    b.join("b: join without a member id")
    joining = b.start_join()
    a.heartbeat("a: heartbeat while b joins")
    a.join("a: rejoin")
    run.result("b: join completes", joining)
    syncing = b.start_sync()
    a.sync("a: leader sync", assign=True)
    run.result("b: follower sync completes", syncing)


def stable_static_pair(run: Run, s1: Client, s2: Client) -> None:
    """Static members s1 (the leader) and s2, joined and synced in generation 2."""
    s1.join("s1: static join")
    s1.sync("s1: leader sync", assign=True)
    joining = s2.start_join()
    s1.join("s1: rejoin")
    run.result("s2: join completes", joining)
    syncing = s2.start_sync()
    s1.sync("s1: leader sync", assign=True)
    run.result("s2: follower sync completes", syncing)


def dynamic_members(run: Run) -> None:
    a, b = run.client("a"), run.client("b")
    stable_pair(run, a, b)
    b.heartbeat("b: heartbeat")
    a.commit("a: commit")
    b.commit("b: commit with a stale generation", generation=1)
    a.fetch("a: fetch")
    b.leave("b: leave")
    a.heartbeat("a: heartbeat after b left")
    a.join("a: rejoin alone")
    a.sync("a: leader sync", assign=True)
    b.heartbeat("b: heartbeat after leaving")
    a.leave("a: leave")
    a.heartbeat("a: heartbeat after leaving")
    a.commit("admin: commit to the Empty group", generation=-1, member_id="")
    a.commit("a: commit with its old generation to the Empty group")
    a.fetch("admin: fetch")


def static_members(run: Run) -> None:
    s1, s2 = run.client("s1", "i1"), run.client("s2", "i2")
    stable_static_pair(run, s1, s2)
    s1b = run.client("s1b", "i1")  # i1 restarts: KIP-345 replacement, KIP-814 for a leader
    s1b.join("s1b: replaces i1 in a Stable group")
    s1.heartbeat("s1: heartbeat with the replaced id")
    s1.commit("s1: commit with the replaced id")
    s1.sync("s1: sync with the replaced id")
    s1.leave("s1: leave with the replaced id")
    s1b.sync("s1b: sync")
    s1b.heartbeat("s1b: heartbeat")
    s2b = run.client("s2b", "i2")
    s2b.join("s2b: replaces follower i2")
    s2b.sync("s2b: sync")
    s2.heartbeat("s2: heartbeat with the replaced id")
    s2b.leave("s2b: leave by member id")
    s1b.heartbeat("s1b: heartbeat after s2b left")
    s1b.join("s1b: rejoin alone")
    s1b.sync("s1b: leader sync", assign=True)
    s1b.leave("admin: remove instance i9", member_id="", instance="i9")
    s1b.leave("admin: remove instance i1", member_id="")
    s1b.heartbeat("s1b: heartbeat after removal")


def static_replacement_fences_a_parked_join(run: Run) -> None:
    s1, a = run.client("s1", "i1"), run.client("a")
    s1.join("s1: static join")
    s1.sync("s1: leader sync", assign=True)
    a.join("a: join without a member id")
    joining = a.start_join()
    s1.join("s1: rejoin")
    run.result("a: join completes", joining)
    syncing = a.start_sync()
    s1.sync("s1: leader sync", assign=True)
    run.result("a: follower sync completes", syncing)
    parked = s1.start_join()  # a rebalance that waits for a
    replacing = run.client("s1b", "i1").start_join()
    run.result("s1: parked join fenced by the replacement", parked)
    s1.sync("s1: sync with the replaced id")
    a.join("a: rejoin")
    run.result("s1b: join completes as leader", replacing)


def join_rules(run: Run) -> None:
    a, b = run.client("a"), run.client("b")
    stable_pair(run, a, b)
    b.join("b: rejoin unchanged in a Stable group")
    changed = b.start_join(protocols=(("p1", b"changed"),))
    a.heartbeat("a: heartbeat during the rebalance")
    a.join("a: rejoin")
    run.result("b: join with changed metadata completes", changed)
    b.join("b: the same join again while completing", protocols=(("p1", b"changed"),))
    a.join("a: the same join again while completing")
    a.commit("a: commit while completing")
    b.heartbeat("b: heartbeat while completing")
    syncing = b.start_sync()
    a.sync("a: leader sync", assign=True)
    run.result("b: follower sync completes", syncing)
    rejoining = a.start_join()  # a leader's rejoin rebalances a Stable group
    b.commit("b: commit while preparing")
    b.sync("b: sync while preparing")
    b.join("b: rejoin", protocols=(("p1", b"changed"),))
    run.result("a: join completes", rejoining)
    b.heartbeat("b: heartbeat with the previous generation", generation=b.generation - 1)
    syncing = b.start_sync()
    rejoining = a.start_join(protocols=(("p1", b"new"),))  # changed metadata while completing
    run.result("b: parked sync after a's rejoin", syncing)
    b.join("b: rejoin", protocols=(("p1", b"changed"),))
    run.result("a: join with changed metadata completes", rejoining)


def leadership(run: Run) -> None:
    a, b = run.client("a", rebalance_ms=1_000), run.client("b", rebalance_ms=1_000)
    stable_pair(run, a, b)
    # A rebalance the leader misses: the member that rejoined leads.
    changed = b.start_join(protocols=(("p1", b"changed"),))
    run.result("b: join completes without the leader", changed, timeout_s=3)
    a.heartbeat("a: heartbeat after its removal")
    b.sync("b: leader sync", assign=True)
    c = run.client("c")
    c.join("c: join without a member id")
    joining = c.start_join()
    b.join("b: rejoin", protocols=(("p1", b"changed"),))
    run.result("c: join completes", joining)
    syncing = c.start_sync()
    b.sync("b: leader sync", assign=True)
    run.result("c: follower sync completes", syncing)
    # The leader leaves: the one member left leads the next generation.
    b.leave("b: leader leaves")
    c.heartbeat("c: heartbeat after the leader left")
    c.join("c: rejoin")
    c.sync("c: leader sync", assign=True)


def static_protocol_changes(run: Run) -> None:
    both = (("p1", b"s"), ("p2", b"s"))
    s1, s2 = run.client("s1", "i1", protocols=both), run.client("s2", "i2", protocols=both)
    stable_static_pair(run, s1, s2)
    # New metadata that keeps the group's protocol: replaced without a rebalance.
    s1b = run.client("s1b", "i1", protocols=(("p1", b"new"), ("p2", b"new")))
    s1b.join("s1b: replaces i1 with new metadata")
    s1b.sync("s1b: leader sync in a Stable group, ignored", assign=True)
    s2.sync("s2: sync in a Stable group")
    # A replacement that changes the group's protocol: a rebalance.
    s2b = run.client("s2b", "i2", protocols=(("p2", b"only"),))
    joining = s2b.start_join()
    s1b.heartbeat("s1b: heartbeat during the rebalance")
    s1b.join("s1b: rejoin")
    run.result("s2b: join completes", joining)
    s2.heartbeat("s2: heartbeat with the replaced id")


def validation_errors(run: Run) -> None:
    a = run.client("a")
    a.join("a: join without a member id")
    a.join("a: join with its member id")
    a.sync("a: leader sync", assign=True)
    run.client("c", protocol_type="other").join("c: another protocol type")
    run.client("d", protocols=(("p9", b""),)).join("d: no common protocol")
    run.client("e", session_ms=100).join("e: session timeout below the minimum")
    run.client("f", session_ms=2_000_000).join("f: session timeout above the maximum")
    a.join("a: join with an unknown member id", member_id="bogus-1")
    a.join("a: join with an unknown instance id", instance="i7")
    g = run.client("g")
    g.join("g: join without a member id")
    g.join("g: join with its pending id and an instance id", instance="i8")
    a.heartbeat("a: heartbeat with an unknown member id", member_id="bogus-1")
    a.heartbeat("a: heartbeat with a wrong generation", generation=7)
    a.sync("a: sync with another protocol name", protocol_name="p9")
    a.sync("a: sync without a protocol name", protocol_name=None)
    a.sync("a: sync with a wrong generation", generation=7)
    a.sync("a: sync with an unknown member id", member_id="bogus-1")
    a.commit("a: commit with a wrong generation", generation=7)
    a.commit("admin: commit to a group with members", generation=-1, member_id="")
    a.commit("a: commit without a generation", generation=-1)
    a.commit("a: commit with an unknown instance id", instance="i7")
    long_metadata = ((TOPIC, 0, 1, "x" * 5000), (TOPIC, 1, 2, "short"))
    a.commit("a: commit with metadata too long for one partition", offsets=long_metadata)
    a.fetch("a: fetch")
    a.leave("a: leave with an unknown member id", member_id="bogus-1")
    other: dict[str, Any] = {"group": run.group + "-none"}
    a.join("a: join an unknown group with a member id", **other)
    a.heartbeat("a: heartbeat to an unknown group", **other)
    a.sync("a: sync to an unknown group", **other)
    a.leave("a: leave an unknown group", **other)
    a.commit(
        "a: commit to an unknown group with a generation",
        on_3_9=lambda c: Commit(tuple((t, p, "ILLEGAL_GENERATION") for t, p, _ in c.partitions)),
        **other,
    )
    a.fetch("a: fetch from an unknown group", **other)
    a.leave("a: leave")
    # g is still pending, so the join phase the leave began ends only when its timeout of 0
    # (the longest of no members) fires: on the broker's timer thread, a moment later.
    run.driver.reach(run.group, "Empty")
    a.commit("static admin: commit to the Empty group", generation=-1, member_id="", instance="i1")


def protocol_votes(run: Run) -> None:
    # Candidates are the protocols every member supports; each votes for its favourite.
    a = run.client("a", protocols=(("x", b"a"), ("y", b"a")))
    b = run.client("b", protocols=(("y", b"b"), ("x", b"b")))
    c = run.client("c", protocols=(("y", b"c"), ("z", b"c")))
    a.join("a: join without a member id")
    a.join("a: join with its member id")
    a.sync("a: leader sync", assign=True)
    b.join("b: join without a member id")
    c.join("c: join without a member id")
    joining_b, joining_c = b.start_join(), c.start_join()
    a.join("a: rejoin")
    run.result("b: join completes", joining_b)
    run.result("c: join completes", joining_c)
    # A tie: 4.3 takes the first protocol in java.util.HashMap order ("p1" before "p2"),
    # 3.9 the first in a Scala map of random member order.
    tie = run.group + "-tie"
    d = run.client("d", protocols=(("p2", b"d"), ("p1", b"d")))
    e = run.client("e", protocols=(("p1", b"e"), ("p2", b"e")))
    d.join("d: join without a member id", group=tie)
    d.join("d: join with its member id", group=tie)
    e.join("e: join without a member id", group=tie)
    joining_e = e.start_join(group=tie)
    d.join("d: rejoin", group=tie, on_3_9=lambda j: j._replace(protocol_name=ANY, members=ANY))
    run.result("e: join completes", joining_e, on_3_9=lambda j: j._replace(protocol_name=ANY))


def timeouts(run: Run) -> None:
    settings: dict[str, Any] = {"session_ms": 6_000, "rebalance_ms": 1_000}
    a, b = run.client("a", **settings), run.client("b", **settings)
    stable_pair(run, a, b)
    # The join phase ends at the rebalance timeout without b, which did not rejoin.
    rejoining = a.start_join()
    run.result("a: join completes without b", rejoining, timeout_s=3)
    b.heartbeat("b: heartbeat after its removal")
    a.sync("a: leader sync", assign=True)
    # A pending member (told MEMBER_ID_REQUIRED) holds the join phase up until its session ends.
    run.client("c", session_ms=1_000).join("c: join without a member id, never back")
    rejoining = a.start_join(rebalance_ms=5_000)
    run.result("a: join completes when c's session ends", rejoining, timeout_s=3)
    a.sync("a: leader sync", assign=True)
    # A member that never sends SyncGroup is removed after the rebalance timeout.
    d = run.client("d", **settings)
    d.join("d: join without a member id")
    joining = d.start_join()
    a.join("a: rejoin", rebalance_ms=1_000)
    run.result("d: join completes", joining)
    a.sync("a: leader sync", assign=True)
    run.sleep(1.5)
    a.heartbeat("a: heartbeat after d failed to sync")
    d.heartbeat("d: heartbeat after its removal")
    a.join("a: rejoin alone")
    a.sync("a: leader sync", assign=True)
    # A member whose session ends is removed.
    e = run.client("e", session_ms=1_000, rebalance_ms=1_000)
    e.join("e: join without a member id")
    joining = e.start_join()
    a.join("a: rejoin")
    run.result("e: join completes", joining)
    syncing = e.start_sync()
    a.sync("a: leader sync", assign=True)
    run.result("e: follower sync completes", syncing)
    run.sleep(1.6)
    a.heartbeat("a: heartbeat after e's session ended")
    a.join("a: rejoin alone")
    a.sync("a: leader sync", assign=True)
    # A static member that does not rejoin stays in the next generation.
    s = run.client("s", "i1", **settings)
    joining = s.start_join()
    a.join("a: rejoin")
    run.result("s: join completes", joining)
    syncing = s.start_sync()
    a.sync("a: leader sync", assign=True)
    run.result("s: follower sync completes", syncing)
    rejoining = a.start_join()
    run.result("a: join completes with s, which did not rejoin", rejoining, timeout_s=3)
    # A follower's unchanged rejoin in a Stable group keeps its old session timeout.
    syncing = s.start_sync()
    a.sync("a: leader sync", assign=True)
    run.result("s: follower sync completes", syncing)
    s.join("s: rejoin unchanged with a 1 s session", session_ms=1_000)
    run.sleep(1.6)
    a.heartbeat("a: heartbeat, s still a member")
    s.heartbeat("s: heartbeat, its 6 s session still runs")


def assignments(run: Run) -> None:
    a, b = run.client("a"), run.client("b")
    a.join("a: join without a member id")
    a.join("a: join with its member id")
    a.sync("a: leader sync", assign=True)
    b.join("b: join without a member id")
    joining = b.start_join()
    a.join("a: rejoin")
    run.result("b: join completes", joining)
    syncing = b.start_sync()
    # The leader assigns to itself and to an unknown member only: b gets an empty assignment.
    only_a = ((a.member_id, b"for-a"), ("bogus-9", b"for-nobody"))
    a.sync("a: leader sync without b", assignments=only_a)
    run.result("b: follower sync completes", syncing)
    b.sync("b: sync again in the Stable group")


def leaving(run: Run) -> None:
    a, b = run.client("a"), run.client("b")
    stable_pair(run, a, b)
    rejoining = a.start_join()
    b.leave("b: leave during the rebalance")
    run.result("a: join completes", rejoining)
    c = run.client("c")
    c.join("c: join without a member id")
    c.leave("c: a pending member leaves")
    c.join("c: join with the id it gave up")
    # 4.3 rebalances a CompletingRebalance group when a pending member leaves; 3.9 does not.
    a.sync(
        "a: leader sync after a pending member left",
        assign=True,
        on_3_9=lambda _: Sync("NONE", "sim", "p1", b"to-A"),
    )
    a.leave("a: leave")
    a.leave("a: leave again")
    # The last member leaves while another is pending: the join phase waits a rebalance
    # timeout of 0 (the longest of no members), so the group is Empty at once.
    d, e = run.client("d"), run.client("e")
    d.join("d: join without a member id")
    d.join("d: join with its member id")
    d.sync("d: leader sync", assign=True)
    e.join("e: join without a member id")
    d.leave("d: leave while e is pending")
    run.driver.reach(run.group, "Empty")  # on the broker's timer thread, a moment later
    run.client("x", protocol_type="other").join("x: another protocol type, Empty group")
    e.join("e: join with its member id")


def without_assignments(described: Describe) -> Describe:
    return described._replace(members=tuple((*x[:3], b"") for x in described.members))


def describing(run: Run) -> None:
    a, b = run.client("a"), run.client("b")
    a.describe("a: describe a group that does not exist")
    stable_pair(run, a, b)
    a.describe("a: describe the Stable group: metadata and assignments")
    rejoining = a.start_join()
    # 4.3 sends each member's last assignment while rebalancing; 3.9 none.
    b.describe("b: describe during the rebalance", on_3_9=without_assignments)
    b.join("b: rejoin")
    run.result("a: join completes", rejoining)
    b.describe("b: describe while completing the rebalance", on_3_9=without_assignments)
    a.leave("a: leave")
    b.leave("b: leave")
    a.describe("a: describe the Empty group")


def offsets_without_members(run: Run) -> None:
    admin, a = run.client("admin"), run.client("a")
    admin.commit("admin: commit to a new group", generation=-1)
    admin.fetch("admin: fetch")
    a.join("a: join without a member id")
    a.join("a: join with its member id")
    admin.commit("admin: commit to a group with members", generation=-1)
    a.commit("a: commit while completing")
    a.sync("a: leader sync", assign=True)
    a.commit("a: commit", offsets=((TOPIC, 0, 33, "a"),))
    a.leave("a: leave")
    admin.commit("admin: commit to the Empty group", generation=-1)
    admin.commit("admin: commit with a generation to the Empty group", generation=2)
    admin.fetch("admin: fetch")


SCENARIOS = [
    dynamic_members,
    static_members,
    static_replacement_fences_a_parked_join,
    join_rules,
    leadership,
    assignments,
    static_protocol_changes,
    validation_errors,
    protocol_votes,
    timeouts,
    leaving,
    offsets_without_members,
    describing,
]


# -- the comparison ----------------------------------------------------------------------------


def transcript(run_scenario: Callable[[Run], None], driver: Driver, group: str) -> list[Step]:
    run = Run(driver, group)
    try:
        run_scenario(run)
    finally:
        driver.close()
    return run.transcript


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_model_answers_as_the_broker(
    scenario: Callable[[Run], None], kafka: str, request: pytest.FixtureRequest
) -> None:
    version: str = request.node.callspec.params["kafka"]
    _create_topic(kafka)
    group = f"mvb-{scenario.__name__}-{uuid.uuid4().hex[:8]}"
    expected = transcript(scenario, ModelDriver(), group)
    actual = transcript(scenario, BrokerDriver(kafka, version, group), group)
    if version.startswith("3."):
        expected = [Step(s.label, s.on_3_9(s.answer) if s.on_3_9 else s.answer) for s in expected]
    assert [(s.label, s.answer) for s in actual] == [(s.label, s.answer) for s in expected]


_topics_created: set[str] = set()


def _create_topic(servers: str) -> None:
    if servers in _topics_created:
        return
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    _topics_created.add(servers)
