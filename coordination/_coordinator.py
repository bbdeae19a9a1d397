"""The public ``Coordinator`` interface: subclass it to coordinate anything over a Kafka group."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from typing_extensions import Self

from ._config import CoordinatorConfig
from ._connect import kafka_transport
from ._engine import offsets as _offsets
from ._engine.membership import GroupMembership
from ._inspection import GroupDescription, group_description
from ._logging import MemberLogAdapter
from ._metrics import MemberMetrics
from ._types import Generation, Member, MemberState, OffsetAndMetadata, ProtocolMetadata
from .clock import Clock
from .errors import CoordinationError
from .parts import check_part
from .transport import Transport

log = logging.getLogger("coordination")


class Coordinator(abc.ABC):
    """One member of a Kafka group, with the group logic supplied by a subclass.

    This is Kafka's ``AbstractCoordinator`` (the base of the Java consumer, Kafka
    Connect's workers and Schema Registry's leader election) as a public, typed
    API, in the shape KIP-795 proposed. A subclass says what the members
    advertise (:meth:`metadata`), how the leader divides the work
    (:meth:`perform_assignment`) and what a member does with its share
    (:meth:`on_join_complete`); the engine does the rest: it finds the group's
    coordinator and follows it when it moves, joins, heartbeats, rejoins on
    every rebalance, and handles every error the broker can answer.

    Example:
        class Greeter(Coordinator):
            def protocol_type(self) -> str:
                return "greeter"

            def metadata(self) -> list[ProtocolMetadata]:
                return [ProtocolMetadata("v1", b"hello")]

            def perform_assignment(self, leader_id, protocol, members):
                return {m.member_id: f"you are {i + 1} of {len(members)}".encode()
                        for i, m in enumerate(sorted(members, key=lambda m: m.member_id))}

            def on_join_complete(self, generation, member_id, protocol, assignment):
                print(generation, assignment.decode())

        with Greeter("greeters", bootstrap_servers="localhost:9092") as member:
            member.ensure_active_group(timeout=30)

    Threads:
        ``start()`` (or ``ensure_active_group``, or entering the ``with`` block)
        starts two daemon threads per member. The *membership thread* runs
        :meth:`metadata`, :meth:`on_join_prepare`, :meth:`perform_assignment`
        and :meth:`on_join_complete`, one at a time, never concurrently. The
        *heartbeat thread* keeps the session alive meanwhile, so a slow callback
        does not get the member evicted (but :meth:`perform_assignment` must
        finish within ``rebalance_timeout_ms``, or the broker evicts the members
        that wait for it; the engine logs a warning when it runs over).
        :meth:`on_leave_prepare` runs on the thread that calls :meth:`close`.

    What a callback may call:
        ``generation()``, ``generation_if_stable()``, ``member_id``, ``state``,
        ``is_leader``, ``membership_lease()``, ``clock``, ``metrics()`` and
        ``request_rejoin()`` are safe anywhere.
        ``close()`` and ``ensure_active_group()`` must not be called from a
        callback: they wait for the membership thread, which is running the
        callback (``close`` raises :class:`~coordination.errors.CoordinatorStateError`).

    When a callback raises:
        The exception is logged with its traceback and the member keeps
        working: a raising :meth:`on_join_prepare` or :meth:`on_leave_prepare`
        is skipped; a raising :meth:`perform_assignment` fails that rebalance
        and the leader rejoins after a backoff; a raising
        :meth:`on_join_complete` is called again with the same assignment after
        a backoff, until it succeeds or a new rebalance supersedes it.

    Errors:
        Errors the engine can recover from are retried, answered by a rejoin or
        by finding the coordinator again, and logged. Errors a person must fix
        (a fenced static member, missing ACLs, a protocol mismatch, a session
        timeout the broker refuses) stop the member: ``state`` becomes CLOSED
        and :meth:`ensure_active_group` raises the typed error, which names the
        group, the member and what to do.
    """

    rejoin_changes_metadata: bool = False
    """Set True (in the class or on a member before :meth:`start`) if every JoinGroup the
    member sends while it holds a generation carries metadata that differs from what it
    joined that generation with, for instance because the metadata names the generation it
    holds. The broker then rebalances whenever a member rejoins, however the rejoin and a
    departing member's LeaveGroup are ordered, so a member that leaves announces its
    departure on the wake-up channel ahead of its LeaveGroup: the others rejoin while the
    broker still handles the LeaveGroup, which makes a graceful hand-over a few
    milliseconds faster. Every member of the group should agree; a member whose rejoin is
    answered with its own generation anyway (an older version) asks by heartbeat until the
    rebalance shows, which costs it up to 250 ms."""

    def __init__(
        self,
        group_id: str,
        *,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the group to join (Kafka ``group.id``).
            transport: where requests go (a :class:`coordination.transport.Transport`);
                default: Kafka, through kafka-python. Tests pass a
                ``coordination.testing.ScriptedTransport``, a simulation its simulated network.
            clock: where time and every wait of the member come from (its threads, locks,
                events; a :class:`coordination.clock.Clock`); default: the system's. Tests pass
                a ``coordination.testing.ManualClock`` or a simulation's clock.
            **settings: the fields of :class:`CoordinatorConfig` (``session_timeout_ms``,
                ``group_instance_id``, ...) and kafka-python's connection settings
                (``bootstrap_servers`` (required), ``security_protocol``, ``ssl_*``, ``sasl_*``),
                under their kafka-python names.

        Raises:
            ConfigurationError: a setting is unknown, missing or invalid, or ``clock`` or
                ``transport`` is not one; the message names it.
        """
        self._config = CoordinatorConfig.from_settings(group_id, settings)
        check_part("clock", clock, Clock)
        check_part("transport", transport, Transport)
        wakeups = None
        if transport is None:
            transport, wakeups = kafka_transport(self._config)
        self._engine = GroupMembership(self, self._config, transport, clock, wakeups)

    # -- what a subclass implements ------------------------------------------------------

    @abc.abstractmethod
    def protocol_type(self) -> str:
        """The class of protocols this group speaks, e.g. ``"consumer"`` or ``"election"``.

        Every member of a group must return the same; the broker rejects a member of another
        type with INCONSISTENT_GROUP_PROTOCOL. Use your own type, not ``"consumer"``, unless
        you implement Kafka's consumer protocol: Kafka 4 may convert ``consumer`` groups.
        """

    @abc.abstractmethod
    def metadata(self) -> Sequence[ProtocolMetadata]:
        """The protocols this member supports, most preferred first, each with its metadata.

        Called before every join. The broker picks the protocol that every member supports
        and most members prefer; the leader then sees each member's metadata for it. To
        upgrade a protocol without stopping the group, roll out members that advertise
        ``[new, old]``, then members that advertise ``[new]``.
        """

    @abc.abstractmethod
    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        """Divide the work; runs only on the member the broker picked as leader.

        Args:
            leader_id: this member's id.
            protocol: the protocol the broker selected.
            members: every member with its metadata for ``protocol`` (this one included).

        Returns:
            Each member id's assignment bytes; a member left out gets ``b""``.

        Must be deterministic and finish well within ``rebalance_timeout_ms``.
        """

    @abc.abstractmethod
    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        """This member joined ``generation`` and received ``assignment`` from the leader."""

    def on_join_prepare(self, generation: int, member_id: str) -> None:  # noqa: B027
        """Called before each (re)join; by default does nothing.

        Args:
            generation: the previous generation, or -1 if there was none or it was lost
                (then the previous assignment is no longer this member's: do not act on it).
            member_id: the member id of the previous generation, or "".
        """

    def on_leave_prepare(self) -> None:  # noqa: B027
        """Called by :meth:`close` before the member leaves; by default does nothing."""

    # -- what the engine provides ----------------------------------------------------------

    @property
    def group_id(self) -> str:
        """The group this member belongs to."""
        return self._config.group_id

    @property
    def clock(self) -> Clock:
        """The clock this member's time and waits come from: the ``clock=`` it was given, or
        :data:`coordination.clock.SYSTEM_CLOCK`. Its membership lease is counted on it, so
        work the lease guards waits on it (``LeaseGuard.start_watchdog(member.clock, ...)``)."""
        return self._engine.clock

    @property
    def config(self) -> CoordinatorConfig:
        """The validated settings."""
        return self._config

    def start(self) -> None:
        """Start joining the group in the background (idempotent); returns at once.

        Raises:
            CoordinatorStateError: the member was closed.
        """
        self._engine.start()

    def ensure_active_group(self, timeout: float | None = None) -> None:
        """Start if needed and block until this member is stable in a generation.

        Stable means joined, synced, and :meth:`on_join_complete` has returned.

        Args:
            timeout: seconds to wait; None waits forever.

        Raises:
            CoordinationTimeoutError: not stable in time; the member keeps trying.
            FatalBrokerError: the member stopped on an error a person must fix.
            ConnectionFailedError: the cluster refuses these settings: a SASL login
                (AuthenticationFailedError) or TLS (TlsError). An unreachable cluster
                (DNS, TCP) is retried; the timeout error says why.
            CoordinatorStateError: the member was closed.
        """
        self._engine.start()
        self._engine.wait_stable(timeout)

    def generation(self) -> Generation:
        """The current generation, stable or not (``NO_GENERATION`` if none)."""
        return self._engine.generation

    def member_logger(self, logger: logging.Logger) -> logging.LoggerAdapter[logging.Logger]:
        """``logger`` with this member's group, member id and generation on every record, as
        ``extra`` fields (``record.group_id``, ``record.member_id``, ``record.generation``).

        Example:
            self.log = self.member_logger(logging.getLogger("my_service"))
            self.log.info("took over %d shards", n)   # the record says who and when
        """
        return MemberLogAdapter(logger, self._config.group_id, self._engine.peek_generation)

    def note_rebalance_change(self, moved: str) -> None:
        """Say, from :meth:`on_join_complete`, what the rebalance changed for this member
        (e.g. ``"+2 -1 shards"``): the ``moved`` of its :class:`RebalanceRecord`, which
        :meth:`metrics` and ``coordination describe --timeline`` show."""
        self._engine.note_rebalance_change(moved)

    def generation_if_stable(self) -> Generation | None:
        """The current generation if the member is stable, else None."""
        return self._engine.generation_if_stable()

    @property
    def member_id(self) -> str:
        """The id the coordinator gave this member ("" until it has one)."""
        return self._engine.generation.member_id

    @property
    def state(self) -> MemberState:
        """Where the member is in the join protocol."""
        return self._engine.state

    @property
    def failure(self) -> CoordinationError | None:
        """The error that stopped this member (a :class:`FatalBrokerError` a person must fix:
        authorization, an instance id in use, ...), or None while nothing did."""
        return self._engine.fatal_error

    @property
    def is_leader(self) -> bool:
        """True if the broker picked this member as the leader of the current generation."""
        leader = self._engine.leader_id
        return leader is not None and leader == self._engine.generation.member_id

    def request_rejoin(self, reason: str) -> None:
        """Ask for a rebalance (e.g. because this member's metadata changed).

        ``reason`` is logged and sent to the broker with the JoinGroup (KIP-800). Kafka starts
        a rebalance when the leader rejoins or a member's metadata changed; a follower that
        rejoins with unchanged metadata just gets the current generation back.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError("request_rejoin needs a non-empty reason")
        self._engine.request_rejoin(reason)

    def membership_lease(self) -> float:
        """Seconds during which the broker cannot have removed this member from the group.

        Counted from the send time of the last request whose success proved the broker
        restarted this member's session (a heartbeat or a completed JoinGroup; not a SyncGroup,
        which a Kafka 4 broker answers without restarting it once the group is stable), plus
        the smaller of
        ``session_timeout_ms`` and ``rebalance_timeout_ms``: the broker's timers started no
        earlier than that. 0.0 when the member has no confirmed place in a generation.

        This is what makes leadership safe: a member that acts as the only one of its kind
        (a leader, the owner of a task) must stop before its lease runs out, because after
        that the group may have moved on without it, even if this process has noticed
        nothing (a network partition, a long pause). The time is read from a clock that also
        counts time the host spent suspended (``CLOCK_BOOTTIME`` on Linux).

        Static members: the lease holds only while no other process uses this member's
        ``group_instance_id``. When one joins with it, the broker replaces this member at once
        (KIP-345), without waiting for its session; this process learns it from its next
        request (:class:`~coordination.errors.FencedInstanceError`). Run at most one process
        per instance id at a time (a StatefulSet starts a pod's successor only after the pod
        is gone).
        """
        return self._engine.membership_lease()

    def commit_offsets(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
        *,
        generation: Generation | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Commit offsets for the group, fenced by this member's generation.

        The commit carries the member id and generation, so the broker refuses it if the
        member missed a rebalance or was removed: a member that lost its partitions cannot
        commit over their new owner. Coordinator moves and loading are retried until
        ``timeout``.

        Args:
            offsets: by ``(topic, partition)``, the offset of the next record to process and
                an optional metadata string.
            generation: commit only if this is still the member's generation (e.g. the one
                whose assignment the records were processed under); default: the current one.
            timeout: seconds to keep retrying.

        Raises:
            CommitFailedError: the generation is stale, the member id is gone or the group
                is rebalancing; nothing was committed and the member rejoins by itself.
            CoordinationTimeoutError: the coordinator did not answer in time (the commit may
                or may not have been applied).
            BrokerError: any other refusal (e.g. OFFSET_METADATA_TOO_LARGE,
                TOPIC_AUTHORIZATION_FAILED), naming the partitions.
        """
        _offsets.commit(self._engine, offsets, generation, timeout)

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], *, timeout: float = 30.0
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """The group's committed offsets for ``partitions`` (None: nothing committed).

        Waits for pending transactional offset commits (``require_stable``).

        Raises:
            CoordinationTimeoutError: the coordinator did not answer in time.
            BrokerError: the broker refused (e.g. GROUP_AUTHORIZATION_FAILED).
        """
        return _offsets.fetch(self._engine, partitions, timeout)

    def describe_group(self, *, timeout: float = 30.0) -> GroupDescription:
        """The group as its coordinator stores it now (DescribeGroups), asked over this
        member's own connection; as :func:`coordination.describe_group` answers it.

        Only a Stable group's members come with their metadata, and with the assignment of
        the current generation: during a rebalance, a Kafka 4 broker sends each member's
        last assignment, an older one none. Does not rebalance.

        Raises:
            CoordinationTimeoutError: the coordinator did not answer in time.
            BrokerError: the broker refused (e.g. GROUP_AUTHORIZATION_FAILED: no DESCRIBE
                on the group).
        """
        return group_description(self._config.group_id, _offsets.describe(self._engine, timeout))

    def metrics(self) -> MemberMetrics:
        """Counters and timings of this member."""
        return self._engine.metrics()

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        """Leave the group and stop (idempotent).

        Runs :meth:`on_leave_prepare`, then, for a dynamic member, sends LeaveGroup so the
        group rebalances at once; a static member leaves nothing behind but its session,
        which expires after ``session_timeout_ms`` unless it comes back. Then stops the
        engine's threads and closes the connections.

        Args:
            timeout: seconds for the whole close.
            leave_group: False to not send LeaveGroup even for a dynamic member: when some
                of its work may still run, the group then reassigns it only after the
                session times out, not at once.

        Raises:
            CoordinatorStateError: called from a callback (it would wait for itself).
        """
        self._engine.close(timeout, leave_group=leave_group)

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
        g = self.generation()
        return (
            f"<{type(self).__name__} group={self.group_id!r} member={g.member_id!r} "
            f"generation={g.generation_id} state={self.state.value}>"
        )
