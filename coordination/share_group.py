"""A member of a Kafka share group (KIP-932, "queues for Kafka"): membership, and the records
it acquires and acknowledges.

In a share group the broker hands out *records*, not partitions: every member assigned a
partition may fetch from it, and each record goes to one member at a time, under an
acquisition lock (``group.share.record.lock.duration.ms``, 30 s by default). The member
acknowledges each record: ACCEPT (done), RELEASE (deliver it again, to anyone), REJECT
(never deliver it again) or RENEW (keep the lock, still working); a record whose lock runs
out is delivered again, up to ``group.share.delivery.count.limit`` deliveries.

:class:`ShareGroupMember` is the protocol, with no policy: it joins the group
(ShareGroupHeartbeat), fetches from each partition's leader in share sessions (ShareFetch,
acknowledgements riding on it) and acknowledges on demand (ShareAcknowledge).
``recipes.queues.ShareConsumer`` is built on it, with Kafka's ``KafkaShareConsumer`` API
(``poll``, ``acknowledge``, ``commit``); build on this directly for a policy of your own.

Example:
    with ShareGroupMember("jobs", ["jobs"], bootstrap_servers="localhost:9092") as member:
        member.wait_assigned(timeout=30)
        outcome = member.fetch({}, max_wait_ms=1000)
        acks = {}
        for r in outcome.records:
            acks.setdefault((r.topic_id, r.partition), {})[r.offset] = AcknowledgeType.ACCEPT
        print(member.acknowledge(acks))   # {(topic_id, partition): 0, ...}: 0 is success

Needs Kafka 4.2 or newer with the ``share.version`` feature enabled (the default of a
cluster formatted by 4.2+); otherwise :meth:`ShareGroupMember.wait_assigned` raises
:class:`~coordination.errors.ShareGroupsUnsupportedError`. The broker sets the session and
heartbeat interval (``group.share.session.timeout.ms``, 45 s, and
``group.share.heartbeat.interval.ms``, 5 s); ``session_timeout_ms`` here is what the member
assumes and must not exceed the broker's.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

from typing_extensions import Self

from ._config import CoordinatorConfig
from ._connect import kafka_transport
from ._engine.share_group import ShareGroupMembership
from ._engine.share_sessions import (
    NO_ANSWER,
    NO_SESSION,
    Acknowledgements,
    AcquiredRecord,
    AcquiredRun,
    FetchInFlight,
    FetchOutcome,
    Leaders,
    ShareSessions,
    TopicLocation,
)
from ._kafka_python import open_admin_client
from ._metrics import MemberMetrics
from ._protocol import share_group as sg
from ._protocol.error_codes import ErrorCode
from ._protocol.share_group import AcknowledgeType, ShareAcquireMode
from ._types import MemberState
from .clock import Clock
from .errors import ConfigurationError, CoordinatorStateError, broker_error
from .parts import check_int, check_part
from .transport import CoordinatorNode, Transport, TransportError

__all__ = [
    "NO_ANSWER",
    "NO_SESSION",
    "AcknowledgeType",
    "Acknowledgements",
    "AcquireMode",
    "AcquiredRecord",
    "AcquiredRun",
    "ClusterLeaders",
    "FetchInFlight",
    "FetchOutcome",
    "Leaders",
    "ShareGroupMember",
    "TopicLocation",
]

AcquireMode = Literal["batch_optimized", "record_limit"]
"""How a fetch bounds what it acquires (Kafka's ``share.acquire.mode``)."""
# The group config of the delivery limit (its broker-wide default:
# group.share.delivery.count.limit).
_DELIVERY_COUNT_LIMIT_KEY = "share.delivery.count.limit"
_ACQUIRE_MODES: dict[str, ShareAcquireMode] = {
    "batch_optimized": ShareAcquireMode.BATCH_OPTIMIZED,
    "record_limit": ShareAcquireMode.RECORD_LIMIT,
}


class ShareGroupMember:
    """One member of a share group: joins, fetches and acknowledges (see the module
    docstring).

    Concurrency: :meth:`fetch`, :meth:`acknowledge` and :meth:`close` are called from one
    thread at a time (the consumer's); the heartbeats run on the member's own thread.
    """

    def __init__(
        self,
        group_id: str,
        topics: Iterable[str],
        *,
        rack_id: str | None = None,
        max_records: int = 500,
        acquire_mode: AcquireMode = "batch_optimized",
        leaders: Leaders | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the share group (Kafka ``group.id``).
            topics: the topics to consume (the subscription).
            rack_id: the member's rack (Kafka ``client.rack``), or None.
            max_records: the most records one fetch acquires per leader (Kafka
                ``max.poll.records``, default 500).
            acquire_mode: Kafka's ``share.acquire.mode`` (KIP-1206, ShareFetch v2, Kafka
                4.2+): ``"batch_optimized"`` (default) acquires whole record batches, so a
                fetch may acquire more than ``max_records``; ``"record_limit"`` never more,
                splitting batches (more fetches, fewer records locked at once). A Kafka 4.1
                broker (ShareFetch v1) knows only the first.
            leaders: where topic ids and partition leaders come from (default: the cluster,
                :class:`ClusterLeaders`).
            transport, clock, **settings: as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: a setting is unknown, missing or invalid.
        """
        if isinstance(topics, str):
            raise ConfigurationError(f"topics must be a list of names, got the string {topics!r}")
        names = frozenset(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ConfigurationError(f"topics must be non-empty topic names, got {topics!r}")
        check_int("max_records", max_records, minimum=1)
        if acquire_mode not in _ACQUIRE_MODES:
            raise ConfigurationError(
                f"acquire_mode must be one of {sorted(_ACQUIRE_MODES)}, got {acquire_mode!r}"
            )
        self._config = CoordinatorConfig.from_settings(group_id, settings)
        check_part("clock", clock, Clock)
        check_part("transport", transport, Transport)
        if transport is None:
            transport, _ = kafka_transport(self._config)
        self._transport = transport
        self._own_leaders = None
        if leaders is None:
            self._own_leaders = ClusterLeaders(self._config.client_settings())
            leaders = self._own_leaders
        self._membership = ShareGroupMembership(
            names, self._config, transport, clock, rack_id=rack_id
        )
        self._sessions = ShareSessions(
            self._membership,
            leaders,
            transport,
            max_records=max_records,
            acquire_mode=_ACQUIRE_MODES[acquire_mode],
        )

    @property
    def group_id(self) -> str:
        return self._config.group_id

    @property
    def config(self) -> CoordinatorConfig:
        return self._config

    @property
    def clock(self) -> Clock:
        """Where the member's time and waits come from."""
        return self._membership.clock

    @property
    def member_id(self) -> str:
        """The member's id (made by this client, KIP-1082)."""
        return self._membership.member_id

    @property
    def member_epoch(self) -> int:
        """0 before the member joined (or after it was fenced), then the broker's epoch."""
        return self._membership.member_epoch

    @property
    def state(self) -> MemberState:
        return self._membership.state

    def assignment(self) -> frozenset[tuple[str, int]]:
        """The partitions the member may fetch from, by topic name (a topic's name is looked
        up from the cluster's metadata when first needed; one that cannot be found yet is
        left out)."""
        return self._sessions.named(self._membership.assignment())

    def start(self) -> None:
        """Start joining in the background (idempotent)."""
        self._membership.start()

    def wait_assigned(self, timeout: float | None = None) -> None:
        """Start if needed; block until the member has joined and has its assignment.

        Raises:
            CoordinationTimeoutError: not there in time; the member keeps trying.
            ShareGroupsUnsupportedError: the broker has no share groups (before Kafka 4.1,
                or ``share.version`` off).
            FatalBrokerError: another error a person must fix (GroupMaxSizeReachedError,
                GroupAuthorizationError, ...).
        """
        self._membership.start()
        self._membership.wait_assigned(timeout)

    def fetch(self, acknowledgements: Acknowledgements, max_wait_ms: int) -> FetchOutcome:
        """Acquire records from every partition of the assignment, sending
        ``acknowledgements`` ({(topic_id, partition): {offset: AcknowledgeType}}) on the way
        (RENEWs first, on their own). Waits up to ``max_wait_ms`` for records.

        Returns:
            The records acquired, and the outcome of the acknowledgements per partition (an
            error code, 0 for success; :data:`NO_ANSWER` when the request got no answer, so
            that they may or may not have been applied; :data:`NO_SESSION` when no share
            session could carry them).

        Raises:
            FatalBrokerError: the member stopped (it cannot go on from the broker's answer).
            CoordinatorStateError: the member is closed.
        """
        self._raise_if_stopped()
        return self._sessions.fetch(acknowledgements, max_wait_ms)

    def start_fetch(
        self, acknowledgements: Acknowledgements, max_wait_ms: int = 0
    ) -> FetchInFlight:
        """The first half of :meth:`fetch`, for a fetch whose answers are taken later (by
        :meth:`finish_fetch`), after other work: the ShareFetches are sent and the broker
        answers meanwhile. Their records' locks are counted from now. Until the answers are
        taken (or the fetch abandoned, :meth:`abandon_fetch`) nothing else is sent to the
        leaders: call no other method of the member but :meth:`assignment` meanwhile.

        Raises:
            FatalBrokerError, CoordinatorStateError: as :meth:`fetch`.
        """
        self._raise_if_stopped()
        return self._sessions.start_fetch(acknowledgements, max_wait_ms, ahead=True)

    def finish_fetch(
        self, inflight: FetchInFlight, timeout: float | None = None
    ) -> FetchOutcome | None:
        """What :meth:`fetch` returns, for the fetch :meth:`start_fetch` sent; None if its
        answers had not begun to arrive within ``timeout`` seconds (None: as long as the
        requests' timeout): ask again.

        Raises:
            FatalBrokerError: as :meth:`fetch`.
        """
        return self._sessions.finish_fetch(inflight, timeout)

    def abandon_fetch(self, inflight: FetchInFlight) -> None:
        """Give up on the answers of ``inflight`` (before :meth:`close`, whose time is up):
        whether its acknowledgements were applied is not known, and the records it acquired
        are released by the broker when the session ends."""
        self._sessions.abandon_fetch(inflight)

    def acknowledge(self, acknowledgements: Acknowledgements) -> dict[tuple[uuid.UUID, int], int]:
        """Send ``acknowledgements`` now (ShareAcknowledge); the outcome per partition, as
        :meth:`fetch` reports it."""
        self._raise_if_stopped()
        return self._sessions.acknowledge(acknowledgements)

    def metrics(self) -> MemberMetrics:
        return self._membership.metrics()

    def delivery_count_limit(self, timeout: float | None = None) -> int | None:
        """The group's delivery count limit as the broker has it: the group's own
        ``share.delivery.count.limit`` (set with IncrementalAlterConfigs on the group), or
        else the broker's ``group.share.delivery.count.limit`` (5 by default). A record
        released (or whose lock runs out) at this delivery is archived by the broker, never
        delivered again. Asked of the group's coordinator (DescribeConfigs on the group), so
        call it once the member has joined (:meth:`wait_assigned`).

        Args:
            timeout: seconds to wait for the answer (default: ``request_timeout_ms``).

        Returns:
            The limit; None when the broker does not name the setting, or the transport
            cannot ask (a transport of your own without ``group_config``).

        Raises:
            TransportError: no answer, or the coordinator is not known yet: ask again later.
            BrokerError: the broker refused, e.g. GroupAuthorizationError without
                DESCRIBE_CONFIGS on the group.
            CoordinatorStateError: the member is closed.
        """
        self._raise_if_stopped()
        group_config = getattr(self._transport, "group_config", None)
        if not callable(group_config):
            return None
        node, timeout = self._coordinator_and_timeout(timeout)
        value = group_config(self.group_id, _DELIVERY_COUNT_LIMIT_KEY, node, timeout)
        return int(value) if isinstance(value, str) and value.isdigit() else None

    def _coordinator_and_timeout(self, timeout: float | None) -> tuple[CoordinatorNode, float]:
        """The coordinator to ask and the seconds to wait (default ``request_timeout_ms``)."""
        node = self._membership.coordinator
        if node is None:
            raise TransportError(
                f"share group {self.group_id!r}: the coordinator is not known yet (not joined)"
            )
        if timeout is None:
            timeout = self._config.request_timeout_ms / 1000
        return node, timeout

    def share_partition_lag(self, timeout: float | None = None) -> dict[tuple[str, int], int]:
        """The lag of each partition of the member's assignment, as the group's coordinator
        has it (DescribeShareGroupOffsets v1, KIP-1226, Kafka 4.2+): the records from the
        share-partition's start offset to its end not yet accepted, rejected or archived,
        those acquired by a member included. One request to the coordinator, on its
        connection; call it once the member has joined.

        Args:
            timeout: seconds to wait for the answer (default: ``request_timeout_ms``).

        Returns:
            ``{(topic, partition): lag}``; a partition the broker cannot tell (its state not
            initialized yet, an error of its own, a broker before Kafka 4.2) is left out.

        Raises:
            TransportError: no answer, or the coordinator is not known yet: ask again later.
            BrokerError: the broker refused, e.g. GroupAuthorizationError without DESCRIBE
                on the group (or TopicAuthorizationError on a topic).
            CoordinatorStateError: the member is closed.
        """
        self._raise_if_stopped()
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.assignment():
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            return {}
        node, timeout = self._coordinator_and_timeout(timeout)
        topics = tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
        request = sg.DescribeShareGroupOffsetsRequest(
            (sg.ShareGroupOffsetsRequestGroup(self.group_id, topics),)
        )
        answer = self._transport.send(
            request, sg.DescribeShareGroupOffsetsResponse, coordinator=node, timeout_s=timeout
        )
        lag: dict[tuple[str, int], int] = {}
        for group in answer.groups:
            if group.error_code != ErrorCode.NONE:
                raise broker_error(
                    group.error_code, group_id=self.group_id, api="DescribeShareGroupOffsets"
                )
            for described in group.topics:
                for p in described.partitions:
                    if p.error_code == ErrorCode.NONE and p.lag >= 0:
                        lag[described.topic_name, p.partition_index] = p.lag
        return lag

    def close(
        self, acknowledgements: Acknowledgements | None = None, timeout: float = 30.0
    ) -> dict[tuple[uuid.UUID, int], int]:
        """Send ``acknowledgements``, close every share session (what the member still
        holds is released at once, for other members to take), leave the group (epoch -1)
        and release the connections. Idempotent.

        Returns:
            The outcome of ``acknowledgements`` per partition, as :meth:`fetch` reports it.
        """
        results: dict[tuple[uuid.UUID, int], int] = {}
        try:
            if self._membership.state is not MemberState.CLOSED:
                results = self._sessions.close(acknowledgements or {})
        finally:
            try:
                self._membership.close(timeout)
            finally:
                self._transport.close()
                if self._own_leaders is not None:
                    self._own_leaders.close()
        return results

    def _raise_if_stopped(self) -> None:
        error = self._membership.fatal_error
        if error is not None:
            raise error
        if self._membership.state is MemberState.CLOSED:
            raise CoordinatorStateError(f"share group {self.group_id!r}: the member is closed")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<ShareGroupMember group={self.group_id!r} member={self.member_id!r} "
            f"epoch={self.member_epoch} state={self.state.value}>"
        )


class ClusterLeaders:
    """Topic ids and partition leaders from the cluster (Metadata v10+), through one
    kafka-python admin client, connected at the first question and closed with the member."""

    def __init__(self, client_settings: Mapping[str, Any]) -> None:
        self._config = dict(client_settings)
        self._lock = threading.Lock()  # the admin client is not thread-safe
        self._admin: Any = None

    def locate(self, topics: frozenset[str]) -> dict[uuid.UUID, TopicLocation]:
        with self._lock:
            if self._admin is None:
                self._admin = open_admin_client(self._config)
            brokers = {
                b["broker_id"]: CoordinatorNode(b["broker_id"], b["host"], b["port"])
                for b in self._admin.describe_cluster()["brokers"]
            }
            try:
                described = self._admin.describe_topics(sorted(topics))
            except Exception:
                # One of them does not exist (yet): every topic, the existing ones kept.
                described = [
                    t
                    for t in self._admin.describe_topics()
                    if (t.get("topic") or t.get("name")) in topics
                ]
        found: dict[uuid.UUID, TopicLocation] = {}
        for t in described:
            name = t.get("topic") or t.get("name")
            if t.get("error_code", 0) or not name or not t.get("topic_id"):
                continue
            found[uuid.UUID(str(t["topic_id"]))] = TopicLocation(
                name,
                {
                    p["partition_index"]: brokers.get(p.get("leader_id", -1))
                    for p in t.get("partitions", ())
                },
            )
        return found

    def close(self) -> None:
        """Close the admin client, if it was connected (idempotent)."""
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None


# Show the public classes as coordination.share_group.X in reprs and tracebacks.
for _name in (
    "AcknowledgeType",
    "AcquiredRecord",
    "AcquiredRun",
    "FetchOutcome",
    "Leaders",
    "TopicLocation",
):
    globals()[_name].__module__ = __name__
del _name
