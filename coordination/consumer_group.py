"""A member of a Kafka consumer group of the new protocol (KIP-848, ``group.protocol=consumer``).

Kafka 4.0 made a second group protocol generally available: the broker computes every
member's assignment and hands it out in the answers to ConsumerGroupHeartbeat, and each
member moves to it on its own, without a group-wide barrier. It exists for consumer
groups only (partitions of subscribed topics), so it has no ``metadata`` or
``perform_assignment`` to supply: a :class:`ConsumerGroupMember` tells its
:class:`PartitionCallbacks` which partitions to give up and which to take.

``recipes.partitioning.Consumer(..., group_protocol="consumer")`` is built on it; build
on it directly to own partitions of a KIP-848 group in a consumer of your own.

Example:
    class Owner(PartitionCallbacks):
        def subscription(self):
            return Subscription(topics=frozenset({"orders"}))
        def topic_names(self, topic_ids):
            return names_from_metadata(topic_ids)
        def revoked(self, partitions): ...    # commit, stop
        def assigned(self, partitions, generation): ...
        def lost(self, partitions): ...       # stop, commit nothing
        def leaving(self): ...

    with ConsumerGroupMember("orders-workers", Owner(), bootstrap_servers="localhost:9092") as m:
        m.ensure_active_group(timeout=30)
        print(m.owned())

Timeouts: the broker sets the session and the heartbeat interval of a KIP-848 group
(``group.consumer.session.timeout.ms``, 45 s by default, and
``group.consumer.heartbeat.interval.ms``, 5 s; a group may have its own,
``consumer.session.timeout.ms``); the member heartbeats at the interval the broker sends.
The membership lease counts with the session: before its first join the member reads the
group's from the broker (DescribeConfigs) and uses it where it is below
``session_timeout_ms`` (45000 by default, as the broker's), with a warning. Where it cannot
be read (no DESCRIBE_CONFIGS on the group; a transport of your own without
``group_config``), ``session_timeout_ms`` stands: keep it at or below the broker's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from typing_extensions import Self

from ._config import CoordinatorConfig
from ._connect import kafka_transport
from ._engine import offsets as _offsets
from ._engine.consumer_group import (
    ConsumerGroupMembership,
    PartitionCallbacks,
    SessionLookup,
    Subscription,
)
from ._metrics import MemberMetrics
from ._types import Generation, MemberState, OffsetAndMetadata
from .clock import Clock
from .errors import CoordinationError
from .parts import check_part
from .transport import CoordinatorNode, Transport

__all__ = ["ConsumerGroupMember", "PartitionCallbacks", "Subscription"]


class ConsumerGroupMember:
    """One member of a KIP-848 consumer group; the broker assigns, ``callbacks`` act."""

    def __init__(
        self,
        group_id: str,
        callbacks: PartitionCallbacks,
        *,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the consumer group (Kafka ``group.id``).
            callbacks: what the member tells of its partitions (:class:`PartitionCallbacks`).
            transport, clock, **settings: as for :class:`coordination.Coordinator`.
                ``rebalance_timeout_ms`` is the time the member has to give up a partition
                once told to (the broker removes it from the group after that).

        Raises:
            ConfigurationError: a setting is unknown, missing or invalid.
        """
        self._config = CoordinatorConfig.from_settings(group_id, settings)
        check_part("clock", clock, Clock)
        check_part("transport", transport, Transport)
        check_part("callbacks", callbacks, PartitionCallbacks)
        if transport is None:
            transport, _ = kafka_transport(self._config)
        session_lookup = _broker_session(transport, self._config)
        self._engine = ConsumerGroupMembership(
            callbacks, self._config, transport, clock, session_lookup=session_lookup
        )

    @property
    def group_id(self) -> str:
        return self._config.group_id

    @property
    def config(self) -> CoordinatorConfig:
        return self._config

    @property
    def clock(self) -> Clock:
        """Where the member's time and waits come from (see :class:`coordination.Coordinator`)."""
        return self._engine.clock

    @property
    def member_id(self) -> str:
        """The member's id (made by this client, KIP-1082)."""
        return self._engine.member_id

    @property
    def member_epoch(self) -> int:
        """The member's epoch: 0 before it joined (or after it was fenced), then the epoch
        the broker gave it; it grows at every new assignment."""
        return self._engine.member_epoch

    @property
    def state(self) -> MemberState:
        return self._engine.state

    @property
    def failure(self) -> CoordinationError | None:
        """The error that stopped this member (a :class:`FatalBrokerError` a person must fix:
        an instance id in use, an unknown assignor, ...), or None while nothing did."""
        return self._engine.fatal_error

    def generation(self) -> Generation:
        """The member's epoch and id as a :class:`Generation` (what commits are fenced by)."""
        return self._engine.generation

    def owned(self) -> frozenset[tuple[str, int]]:
        """The partitions handed to ``assigned`` and not given up since."""
        return self._engine.owned()

    def start(self) -> None:
        """Start joining in the background (idempotent)."""
        self._engine.start()

    def ensure_active_group(self, timeout: float | None = None) -> None:
        """Start if needed; block until the member owns its whole assignment and told the
        broker so.

        Raises:
            CoordinationTimeoutError: not there in time; the member keeps trying.
            FatalBrokerError: the member stopped on an error a person must fix (for instance
                :class:`~coordination.errors.UnsupportedVersionError` from a broker older
                than Kafka 4.0, :class:`~coordination.errors.UnsupportedAssignorError`).
        """
        self._engine.start()
        self._engine.wait_stable(timeout)

    def subscription_changed(self) -> None:
        """Tell the broker the new subscription (``callbacks.subscription()``) now."""
        self._engine.subscription_changed()

    def membership_lease(self) -> float:
        """Seconds during which the broker cannot have given this member's partitions to
        another: from the last answered heartbeat's sending, the session timeout (the
        broker's where it is shorter than ``session_timeout_ms``, see above); while a
        revocation is pending, no later than ``rebalance_timeout_ms`` after the heartbeat
        that asked for it. 0.0 when not in the group."""
        return self._engine.membership_lease()

    def commit_offsets(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
        *,
        generation: Generation | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Commit offsets, fenced by the member's epoch (as
        :meth:`coordination.Coordinator.commit_offsets` is by the generation).

        Raises:
            CommitFailedError: the epoch is stale or the member was fenced: nothing was
                committed.
            CoordinationTimeoutError, BrokerError: as for ``Coordinator.commit_offsets``.
        """
        _offsets.commit(self._engine, offsets, generation, timeout)

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], *, timeout: float = 30.0
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """The group's committed offsets for ``partitions`` (None: nothing committed).

        While the member has an epoch, the fetch carries it (OffsetFetch v9): if the broker
        has moved the member on, the member heartbeats at once and the fetch is sent again
        with the new epoch; if the member was fenced, it loses its partitions and this
        raises.

        Raises:
            MembershipLostError: the broker fenced the member or does not know it.
            CoordinationTimeoutError, BrokerError: as for ``Coordinator.committed_offsets``.
        """
        return _offsets.fetch(self._engine, partitions, timeout, fenced_by_epoch=True)

    def metrics(self) -> MemberMetrics:
        return self._engine.metrics()

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        """Give up the partitions (``callbacks.leaving``), leave the group (a static member
        leaves with epoch -2: the broker keeps its assignment for its session), stop.

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
        return (
            f"<ConsumerGroupMember group={self.group_id!r} member={self.member_id!r} "
            f"epoch={self.member_epoch} state={self.state.value}>"
        )


def _broker_session(transport: Transport, config: CoordinatorConfig) -> SessionLookup | None:
    """The group's session timeout as the broker has it (a group config, Kafka 4.0+), where
    the transport can ask: it has ``group_config(group_id, key, node, timeout_s) -> str |
    None`` (Kafka's transport and the simulator's do)."""
    group_config = getattr(transport, "group_config", None)
    if not callable(group_config):
        return None
    timeout_s = config.request_timeout_ms / 1000

    def lookup(node: CoordinatorNode) -> int | None:
        value = group_config(config.group_id, "consumer.session.timeout.ms", node, timeout_s)
        return int(value) if isinstance(value, str) and value.isdigit() else None

    return lookup
