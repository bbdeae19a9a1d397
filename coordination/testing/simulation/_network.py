"""A simulated Kafka cluster and network: brokers running the group coordinator model,
and one transport per member process that reaches them with latency and faults.

What the network does as Kafka's does:
- One connection per broker per member. The broker handles a connection's requests one
  at a time, in order (it mutes the connection until it has answered), so a heartbeat
  sent while a JoinGroup is parked waits behind it, as with a real broker.
- A request that gets no answer in its timeout fails, and the client closes the
  connection (kafka-python does): requests queued on it fail too; one the broker already
  took is still applied, and its answer goes nowhere.
- A stopped broker refuses connections at once; a partitioned one swallows requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..._protocol import messages as m
from ..._protocol.error_codes import ErrorCode
from ...transport import CoordinatorNode, FollowUp, TransportError
from ._group_coordinator import BrokerSettings, GroupCoordinatorModel, GroupLog
from ._scheduler import TIMED_OUT, Process, Scheduler, Timer, _Task

R = TypeVar("R", bound=m.Response)

# More JoinGroups than this from one member within the window is a rejoin storm: no fault
# makes a member rejoin that often (backoffs are 100 ms and up), only a loop does.
STORM_JOINS = 30
STORM_WINDOW_S = 1.0


class _ModelTimers:
    """The scheduler as the model's timers."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def now(self) -> float:
        return self._scheduler.now

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        return self._scheduler.call_at(when, fn)


@dataclass
class Broker:
    node_id: int
    model: GroupCoordinatorModel
    up: bool = True
    # Until when requests to this broker vanish (a network partition), and their answers.
    drop_requests_until: float = 0.0
    drop_responses_until: float = 0.0

    @property
    def node(self) -> CoordinatorNode:
        return CoordinatorNode(self.node_id, f"broker-{self.node_id}", 9092)


@dataclass
class NetworkSettings:
    latency_s: tuple[float, float] = (0.0002, 0.002)
    # How long a new coordinator takes to load the group after a move or broker stop.
    load_time_s: tuple[float, float] = (0.0, 0.3)
    # How long until another broker becomes coordinator after the coordinator stops.
    failover_s: tuple[float, float] = (0.05, 0.5)


class SimCluster:
    """Brokers 1..n; one of them coordinates every group at a time."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        brokers: int = 3,
        settings: BrokerSettings | None = None,
        network: NetworkSettings | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.rng = scheduler.rng
        self.network = network or NetworkSettings()
        self.log = GroupLog()
        timers = _ModelTimers(scheduler)
        broker_settings = settings or BrokerSettings()
        self.brokers = {
            n: Broker(n, GroupCoordinatorModel(n, self.log, timers, broker_settings))
            for n in range(1, brokers + 1)
        }
        self.transports: list[SimTransport] = []
        # A slow network: extra latency each way until then.
        self.slow_until = 0.0
        self.slow_extra_s = 0.0
        self.coordinator: int | None = 1
        # Set when a member floods the coordinator with JoinGroups (a liveness bug).
        self.storm: str | None = None
        self.brokers[1].model.load()
        self.moves = 0
        # Scripted scenarios: requests for which this returns True vanish on the way.
        self.lose: Callable[[m.Request], bool] | None = None
        # A driver's view of what reached its members: called with the process, the request
        # and its answer as the answer is handed to the thread waiting for it (never for one
        # lost on the way, one that came after its wait ended, or one of a dead process).
        self.answered: Callable[[Process, Any, Any], None] | None = None

    # ------------------------------------------------------------------ faults

    def move_coordinator(self) -> None:
        """The group's coordinator moves to another live broker (partition leadership moved)."""
        live = [n for n, b in self.brokers.items() if b.up and n != self.coordinator]
        if self.coordinator is not None:
            self.brokers[self.coordinator].model.unload()
        self.coordinator = None
        if live:
            self._become_coordinator(self.rng.choice(live))

    def stop_broker(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if not broker.up:
            return
        broker.up = False
        for transport in list(self.transports):
            transport.reset(node_id, f"broker {node_id} stopped")
        if self.coordinator == node_id:
            broker.model.unload()
            self.coordinator = None
            self.scheduler.call_later(self._pick(self.network.failover_s), self._failover)

    def start_broker(self, node_id: int) -> None:
        self.brokers[node_id].up = True
        if self.coordinator is None:
            self._failover()

    def partition(self, node_id: int, seconds: float, *, responses_only: bool = False) -> None:
        """Requests to ``node_id`` (or only its answers) vanish for ``seconds``."""
        broker = self.brokers[node_id]
        until = self.scheduler.now + seconds
        broker.drop_responses_until = max(broker.drop_responses_until, until)
        if not responses_only:
            broker.drop_requests_until = max(broker.drop_requests_until, until)

    def _failover(self) -> None:
        if self.coordinator is not None:
            return
        live = [n for n, b in self.brokers.items() if b.up]
        if live:
            self._become_coordinator(self.rng.choice(live))

    def _become_coordinator(self, node_id: int) -> None:
        self.coordinator = node_id
        self.moves += 1
        self.brokers[node_id].model.load(self._pick(self.network.load_time_s))

    # ------------------------------------------------------------------ helpers

    def _pick(self, bounds: tuple[float, float]) -> float:
        return self.rng.uniform(*bounds)

    def latency(self) -> float:
        latency = self._pick(self.network.latency_s)
        if self.scheduler.now < self.slow_until:
            latency += self.rng.uniform(0.0, self.slow_extra_s)
        return latency

    def slow(self, seconds: float, extra_s: float) -> None:
        """Every message takes up to ``extra_s`` longer for ``seconds``."""
        self.slow_until = self.scheduler.now + seconds
        self.slow_extra_s = extra_s

    def coordinator_model(self) -> GroupCoordinatorModel | None:
        return None if self.coordinator is None else self.brokers[self.coordinator].model


@dataclass
class _Call:
    """A request on its way, and the thread that waits for its answer."""

    request: m.Request
    waiters: deque[tuple[_Task, object]] = field(default_factory=deque)
    answer: Any = None
    done: bool = False


class _Connection:
    """One member's connection to one broker: requests are handled one at a time."""

    def __init__(self) -> None:
        self.queue: deque[_Call] = deque()
        self.busy = False
        self.closed = False


class SimTransport:
    """A member process's network (``coordination``'s ``Transport``) in the simulation."""

    def __init__(self, cluster: SimCluster, process: Process) -> None:
        self._cluster = cluster
        self.cluster = cluster  # what a driver reads back (the coordinator's log)
        self._scheduler = cluster.scheduler
        self._process = process
        self._connections: dict[int, _Connection] = {}
        self.closed = False
        self.sent = 0
        # Until when this member is cut off from every broker (both ways): shared with its
        # siblings, as a network partition cuts off every client of a host.
        self._isolation = [0.0]
        # When its last JoinGroups left: a member that keeps rejoining is a storm.
        self._joins: deque[float] = deque(maxlen=STORM_JOINS)
        cluster.transports.append(self)

    @property
    def isolated_until(self) -> float:
        return self._isolation[0]

    @isolated_until.setter
    def isolated_until(self, until: float) -> None:
        self._isolation[0] = until

    def sibling(self) -> SimTransport:
        """Another transport of the same process, with connections of its own (as a second
        client in one process has: a request timing out on one does not close the other's
        connection), cut off from the brokers together with this one."""
        other = SimTransport(self._cluster, self._process)
        other._isolation = self._isolation
        return other

    # ------------------------------------------------------------------ Transport

    def send(
        self,
        request: m.Request,
        response_type: type[R],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: FollowUp | None = None,
    ) -> R:
        # ``then`` is never sent: the simulated cluster has no wake-up partition.
        if self.closed or self._process.dead:
            raise TransportError("transport is closed")
        self.sent += 1
        cluster = self._cluster
        if isinstance(request, m.JoinGroupRequest):
            self._count_join()
        if coordinator is None:
            node_id = self._scheduler.rng.choice(sorted(cluster.brokers))
        else:
            node_id = coordinator.node_id
        broker = cluster.brokers[node_id]
        call = _Call(request)
        if not broker.up:
            # Connection refused, after a round trip.
            self._finish_later(call, TransportError(f"broker {node_id} refused the connection"))
        else:
            connection = self._connections.get(node_id)
            if connection is None or connection.closed:
                connection = self._connections[node_id] = _Connection()
            connection.queue.append(call)
            self._pump(node_id, connection)
        answer = self._scheduler.block(call.waiters, timeout_s) if not call.done else call.answer
        if answer is TIMED_OUT:
            self._close_connection(node_id, "request timed out")
            raise TransportError(f"{type(request).__name__} to broker {node_id} timed out")
        if isinstance(answer, TransportError):
            raise answer
        assert isinstance(answer, response_type), answer
        return answer

    def group_config(
        self, group_id: str, key: str, node: CoordinatorNode, timeout_s: float
    ) -> str | None:
        """DescribeConfigs of the group at ``node`` (see KafkaTransport.group_config), the
        broker's answer after a round trip; a broker down or cut off does not answer."""
        if self.closed or self._process.dead:
            raise TransportError("transport is closed")
        broker = self._cluster.brokers[node.node_id]
        now = self._scheduler.now
        never = self._scheduler.event()
        if not broker.up or now < broker.drop_requests_until or now < self.isolated_until:
            self._scheduler.sleep(timeout_s, never)
            raise TransportError(f"DescribeConfigs to broker {node.node_id} timed out")
        self._scheduler.sleep(2 * self._cluster.latency(), never)
        return broker.model.group_config(group_id, key)

    def _count_join(self) -> None:
        now = self._scheduler.now
        self._joins.append(now)
        stormy = len(self._joins) == STORM_JOINS and now - self._joins[0] < STORM_WINDOW_S
        if stormy and self._cluster.storm is None:
            self._cluster.storm = (
                f"{self._process.name} sent {STORM_JOINS} JoinGroups within "
                f"{now - self._joins[0]:.3f}s (a rejoin storm)"
            )

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        self._close_connection(coordinator.node_id, "disconnected by the member")

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        pass  # nothing to prepare: messages are passed as objects

    def close(self) -> None:
        self.closed = True
        for node_id in list(self._connections):
            self._close_connection(node_id, "transport closed")
        if self in self._cluster.transports:
            self._cluster.transports.remove(self)

    def reset(self, node_id: int, why: str) -> None:
        """The connection to ``node_id`` was reset by the other side."""
        self._close_connection(node_id, why)

    # ------------------------------------------------------------------ the wire

    def _pump(self, node_id: int, connection: _Connection) -> None:
        """Hand the connection's next request to the broker, after the way there."""
        if connection.busy or connection.closed or not connection.queue:
            return
        connection.busy = True
        call = connection.queue[0]
        self._scheduler.call_later(
            self._cluster.latency(), lambda: self._arrive(node_id, connection, call)
        )

    def _arrive(self, node_id: int, connection: _Connection, call: _Call) -> None:
        broker = self._cluster.brokers[node_id]
        if connection.closed:
            return
        now = self._scheduler.now
        lost = self._cluster.lose is not None and self._cluster.lose(call.request)
        if lost or not broker.up or now < broker.drop_requests_until or now < self.isolated_until:
            return  # lost on the way; the member times out and closes the connection
        responded = False

        def respond(response: m.Response) -> None:
            nonlocal responded
            if responded:
                raise AssertionError(f"the model answered {call.request!r} twice")
            responded = True
            self._scheduler.call_later(
                self._cluster.latency(), lambda: self._deliver(node_id, connection, call, response)
            )

        request = call.request
        if isinstance(request, m.FindCoordinatorRequest):
            respond(self._find_coordinator())
        else:
            broker.model.handle(request, respond)

    def _find_coordinator(self) -> m.FindCoordinatorResponse:
        cluster = self._cluster
        if cluster.coordinator is None:
            return m.FindCoordinatorResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        node = cluster.brokers[cluster.coordinator].node
        return m.FindCoordinatorResponse(
            error_code=ErrorCode.NONE, node_id=node.node_id, host=node.host, port=node.port
        )

    def _deliver(
        self, node_id: int, connection: _Connection, call: _Call, response: m.Response
    ) -> None:
        broker = self._cluster.brokers[node_id]
        if connection.closed:
            return
        if connection.queue and connection.queue[0] is call:
            connection.queue.popleft()
        connection.busy = False
        if not broker.up:
            self._close_connection(node_id, "broker stopped")
            return
        now = self._scheduler.now
        if now < broker.drop_responses_until or now < self.isolated_until:
            # Applied, answer lost: the member waits out its timeout.
            self._pump(node_id, connection)
            return
        if self._cluster.answered is not None and not call.done and not self._process.dead:
            self._cluster.answered(self._process, call.request, response)
        self._finish(call, response)
        self._pump(node_id, connection)

    def _close_connection(self, node_id: int, why: str) -> None:
        connection = self._connections.pop(node_id, None)
        if connection is None:
            return
        connection.closed = True
        for call in connection.queue:
            self._finish(call, TransportError(f"connection to broker {node_id} closed: {why}"))
        connection.queue.clear()

    def _finish_later(self, call: _Call, answer: Any) -> None:
        self._scheduler.call_later(self._cluster.latency() * 2, lambda: self._finish(call, answer))

    def _finish(self, call: _Call, answer: Any) -> None:
        if call.done:
            return
        call.done = True
        call.answer = answer
        for task, token in call.waiters:
            self._scheduler.wake(task, token, answer)
        call.waiters.clear()
