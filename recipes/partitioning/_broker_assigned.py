"""Partition ownership under Kafka's consumer group protocol (KIP-848): the broker assigns.

:class:`BrokerAssignedPartitioning` is what :class:`~recipes.partitioning.Consumer` stands
on with ``group_protocol="consumer"``, in place of :class:`ConsumerPartitioning` (the
classic protocol, where the group's leader assigns). Same listener, same ownership view;
underneath, a :class:`coordination.consumer_group.ConsumerGroupMember`.

What differs from the classic protocol (docs/partitioning.md has the whole comparison):

- The broker computes the assignment (``group_remote_assignor``: ``"uniform"`` or
  ``"range"``, or None for the broker's default); client-side assignors do not exist.
- Every rebalance is incremental: a member gives up only what moves, and takes a partition
  once its previous owner reported it released. No member waits for the others.
- A pattern is evaluated by the broker, with RE2J, on *whole* topic names: ``"orders"``
  matches the topic ``orders`` only, not ``orders-eu`` (the classic protocol's pattern
  matches at the start of a name, as Python's ``re.match``).
- Static membership: a second process with the same ``group_instance_id`` is refused
  (``UnreleasedInstanceIdError``), where the classic protocol fences the first one.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from coordination import Generation, MemberMetrics, OffsetAndMetadata
from coordination.clock import Clock
from coordination.consumer_group import ConsumerGroupMember, Subscription
from coordination.errors import ConfigurationError, CoordinationError
from coordination.lease import LeaseGuard
from coordination.transport import Transport, open_admin_client

from ._listener import RebalanceListener
from ._metadata import TopicMetadata
from .protocol import TopicPartition

log = logging.getLogger("recipes.partitioning")

_EMPTY: frozenset[TopicPartition] = frozenset()


class BrokerAssignedPartitioning:
    """A member of a KIP-848 consumer group: the broker assigns it a share of the
    subscribed partitions, and ``listener`` hears what it gives up and takes.

    Example:
        member = BrokerAssignedPartitioning("orders-workers", topics=["orders"],
                                            listener=Printer(), bootstrap_servers="...")
        with member:
            member.ensure_active_group(timeout=30)
            print(member.owned())
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        group_remote_assignor: str | None = None,
        listener: RebalanceListener | None = None,
        rack_id: str | None = None,
        lease_margin_ms: int | None = None,
        topic_metadata: TopicMetadata | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id, topics, pattern, listener, rack_id, lease_margin_ms, transport, clock,
                **settings: as for :class:`ConsumerPartitioning` (``client_rack`` is
                accepted for ``rack_id``); the pattern is the broker's to evaluate (RE2J
                syntax, whole topic names).
            group_remote_assignor: the broker's assignor (Kafka ``group.remote.assignor``):
                one of the broker's ``group.consumer.assignors`` (``"uniform"``,
                ``"range"``), or None for its default.
            topic_metadata: where topic names come from for the topic ids in the
                assignments; it must have ``topic_ids() -> Mapping[uuid.UUID, str]``.
                Default: the cluster.

        Raises:
            ConfigurationError: a bad setting, e.g. both or neither of topics and pattern.
        """
        if (topics is None) == (pattern is None):
            raise ConfigurationError("give exactly one of topics=[...] or pattern='regex'")
        if "client_rack" in settings:
            rack_id = rack_id or settings.pop("client_rack")
        if group_remote_assignor is not None and (
            not isinstance(group_remote_assignor, str) or not group_remote_assignor
        ):
            raise ConfigurationError(
                "group_remote_assignor must be the name of one of the broker's "
                f"group.consumer.assignors ('uniform', 'range'), got {group_remote_assignor!r}"
            )
        self._listener = listener or RebalanceListener()
        self._subscription = Subscription(
            topics=None if topics is None else frozenset(_topic_names(topics)),
            pattern=None if pattern is None else _pattern_text(pattern),
            assignor=group_remote_assignor,
            rack=rack_id,
        )
        self._owned: frozenset[TopicPartition] = _EMPTY
        self._member = ConsumerGroupMember(
            group_id, _Callbacks(self), transport=transport, clock=clock, **settings
        )
        self._lease_margin_ms = lease_margin_ms
        self._lease = None if lease_margin_ms is None else self._guard_lease()
        # Topic ids resolved so far. A topic id names one topic for good (a topic made
        # again under the same name gets a new id), so a name once found stays right.
        self._names: dict[uuid.UUID, str] = {}
        self._topics: _TopicNames
        if topic_metadata is None:  # an admin client per lookup: nothing to close later
            self._topics = _ClusterTopicIds(self._member.config.client_settings())
        else:
            if not callable(getattr(topic_metadata, "topic_ids", None)):
                raise ConfigurationError(
                    "topic_metadata= must have topic_ids() for group_protocol='consumer' "
                    "(the broker names topics by id in assignments)"
                )
            self._topics = _AmongAllTopicIds(topic_metadata)

    # ------------------------------------------------------------------ the member's view

    @property
    def group_id(self) -> str:
        return self._member.group_id

    @property
    def config(self) -> Any:
        return self._member.config

    @property
    def clock(self) -> Clock:
        return self._member.clock

    @property
    def member(self) -> ConsumerGroupMember:
        """The KIP-848 member underneath (member id and epoch, lease)."""
        return self._member

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def failure(self) -> CoordinationError | None:
        """The error that stopped the member, or None while nothing did."""
        return self._member.failure

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now (never waits)."""
        return self._owned

    def subscription(self) -> frozenset[str] | str:
        """The subscribed topics, or the pattern the broker evaluates."""
        sub = self._subscription
        return sub.pattern if sub.pattern is not None else frozenset(sub.topics or ())

    def subscribe(
        self, topics: Iterable[str] | None = None, pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Change the subscription; the next heartbeat (sent now) tells the broker."""
        if (topics is None) == (pattern is None):
            raise ConfigurationError("give exactly one of topics=[...] or pattern='regex'")
        old = self._subscription
        self._subscription = Subscription(
            topics=None if topics is None else frozenset(_topic_names(topics)),
            pattern=None if pattern is None else _pattern_text(pattern),
            assignor=old.assignor,
            rack=old.rack,
        )
        self._member.subscription_changed()

    def generation(self) -> Generation:
        return self._member.generation()

    def membership_lease(self) -> float:
        return self._member.membership_lease()

    @property
    def lease(self) -> LeaseGuard:
        """The membership-lease guard, as :attr:`ConsumerPartitioning.lease`: while
        ``lease.holds()``, no other member can own a partition this one owns.

        Raises:
            ConfigurationError: the default ``lease_margin_ms`` leaves no room with these
                settings (pass a smaller one).
        """
        if self._lease is None:
            self._lease = self._guard_lease()
        return self._lease

    def _guard_lease(self) -> LeaseGuard:
        return LeaseGuard(
            self._member.membership_lease,
            self._member.config,
            self._lease_margin_ms,
            why=", or the lease of a consumer's partitions would never hold",
        )

    def start(self) -> None:
        self._member.start()

    def ensure_active_group(self, timeout: float | None = None) -> None:
        self._member.ensure_active_group(timeout)

    def commit_offsets(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
        *,
        generation: Generation | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._member.commit_offsets(offsets, generation=generation, timeout=timeout)

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], *, timeout: float = 30.0
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        return self._member.committed_offsets(partitions, timeout=timeout)

    def metrics(self) -> MemberMetrics:
        return self._member.metrics()

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        self._member.close(timeout, leave_group=leave_group)

    def __enter__(self) -> BrokerAssignedPartitioning:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the callbacks

    def _give_up(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None:
        """Tell the listener first (still owned meanwhile), then drop them."""
        try:
            if lost:
                self._listener.on_partitions_lost(partitions)
            else:
                self._listener.on_partitions_revoked(partitions)
        finally:
            self._owned = self._owned - partitions

    def _names_of(self, topic_ids: frozenset[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The names of those of ``topic_ids`` that are known or can be found now: only
        the ids never resolved are looked up."""
        unknown = topic_ids - self._names.keys()
        if unknown:
            self._names.update(self._topics.names_of(unknown))
        return {t: self._names[t] for t in topic_ids if t in self._names}

    def _take(self, partitions: frozenset[TopicPartition]) -> None:
        self._owned = self._owned | partitions
        self._listener.on_partitions_assigned(partitions)


class _Callbacks:
    """What the KIP-848 member calls, turned into the listener's calls."""

    def __init__(self, owner: BrokerAssignedPartitioning) -> None:
        self._owner = owner

    def subscription(self) -> Subscription:
        return self._owner._subscription

    def topic_names(self, topic_ids: frozenset[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        return self._owner._names_of(topic_ids)

    def revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._owner._give_up(_tps(partitions), lost=False)

    def assigned(self, partitions: frozenset[tuple[str, int]], generation: Generation) -> None:
        self._owner._take(_tps(partitions))

    def lost(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._owner._give_up(_tps(partitions), lost=True)

    def leaving(self) -> None:
        owned = self._owner.owned()
        if owned:
            self._owner._give_up(owned, lost=False)


class _TopicNames(Protocol):
    """Where the names of the topic ids in assignments are found."""

    def names_of(self, topic_ids: Iterable[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        """The names of those of ``topic_ids`` that name a topic (others left out)."""
        ...


class _AmongAllTopicIds:
    """A ``topic_metadata=`` (with ``topic_ids()``, every topic's id and name) as
    :class:`_TopicNames`."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata

    def names_of(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        known: Mapping[uuid.UUID, str] = self._metadata.topic_ids()
        return {t: known[t] for t in topic_ids if t in known}


class _ClusterTopicIds:
    """Topic ids from the cluster (Metadata v10+), through a kafka-python admin client made
    for each lookup and closed after it: lookups are rare (a topic id the member has not
    seen), and an admin client kept open runs an I/O thread and a metadata refresh of its
    own for as long as the member lives, in each of a process's members."""

    def __init__(self, client_settings: Mapping[str, Any]) -> None:
        self._config = dict(client_settings)

    def topic_ids(self) -> dict[uuid.UUID, str]:
        """Every topic's id and name."""
        return self._described(None)

    def names_of(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The names of these topic ids (Metadata by id, v12+: any broker with KIP-848
        groups has it); an id of no topic (deleted) is left out.

        Raises:
            CoordinationError: the cluster could not be asked (the member asks again after
                its retry backoff).
        """
        return self._described(list(topic_ids))

    def _described(self, topics: list[uuid.UUID] | None) -> dict[uuid.UUID, str]:
        from kafka.errors import KafkaError

        what = "every topic" if topics is None else f"topic ids {sorted(map(str, topics))}"
        try:
            admin = open_admin_client(self._config)
        except (KafkaError, OSError) as e:
            raise CoordinationError(f"looking up the names of {what}: {e}") from e
        try:
            described = admin.describe_topics(topics)
        except (KafkaError, OSError) as e:
            raise CoordinationError(f"looking up the names of {what}: {e}") from e
        finally:
            admin.close()
        ids: dict[uuid.UUID, str] = {}
        for topic in described:
            if topic.get("error_code", 0) == 0 and topic.get("topic_id") and topic.get("name"):
                ids[uuid.UUID(str(topic["topic_id"]))] = topic["name"]
        return ids


def _tps(partitions: Iterable[tuple[str, int]]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in partitions)


def _topic_names(topics: Iterable[str]) -> list[str]:
    if isinstance(topics, str):
        raise ConfigurationError(f"topics must be a list of names, got the string {topics!r}")
    names = list(topics)
    if not names or not all(isinstance(t, str) and t for t in names):
        raise ConfigurationError(f"topics must be non-empty topic names, got {names!r}")
    return names


def _pattern_text(pattern: str | re.Pattern[str]) -> str:
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    if not isinstance(text, str) or not text:
        raise ConfigurationError(f"pattern must be a non-empty regular expression, got {text!r}")
    return text
