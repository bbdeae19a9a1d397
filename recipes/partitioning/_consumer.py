"""A Kafka consumer on this library's group membership: fetch owned partitions, commit fenced."""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import kafka.errors as kafka_errors
from typing_extensions import Self

from coordination import Generation, MemberMetrics, OffsetAndMetadata, describe_group
from coordination.clock import SYSTEM_CLOCK, Clock
from coordination.errors import (
    AuthenticationFailedError,
    ConfigurationError,
    ConnectionFailedError,
    CoordinationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
    TlsError,
    broker_error,
)
from coordination.fetching import LeanRecordFetcher
from coordination.lease import LeaseGuard
from coordination.parts import check_int, check_part
from coordination.transport import Transport

from ._broker_assigned import BrokerAssignedPartitioning
from ._fetcher import KafkaRecordFetcher, RecordFetcher
from ._listener import ForwardingListener, RebalanceListener
from ._metadata import TopicMetadata
from ._partitioning import ConsumerPartitioning
from .assignors import PartitionAssignor
from .protocol import TopicPartition

log = logging.getLogger("recipes.partitioning")

# kafka-python KafkaConsumer settings that shape fetching (not group membership): the
# Consumer hands them to its default fetcher. Public, for code that wraps a Consumer.
FETCH_SETTINGS: frozenset[str] = frozenset(
    {
        "auto_offset_reset",
        "fetch_min_bytes",
        "fetch_max_wait_ms",
        "fetch_max_bytes",
        "max_partition_fetch_bytes",
        "max_poll_records",
        "isolation_level",
        "check_crcs",
        "key_deserializer",
        "value_deserializer",
        "receive_buffer_bytes",
        "send_buffer_bytes",
        "bootstrap_timeout_ms",
    }
)
_POLL_SLICE_MS = 100  # the fetch lock is released this often so rebalances are not held up


@dataclass(frozen=True, slots=True)
class ConsumerMetrics:
    """A snapshot from :meth:`Consumer.metrics`."""

    member: MemberMetrics
    """The group member's counters (rebalances, heartbeats, ...)."""
    positions: dict[TopicPartition, int | None]
    """Each owned partition's position (None while its start is being established)."""
    lag: dict[TopicPartition, int | None]
    """Each owned partition's records behind its end (Kafka ``records-lag``), None if not
    known yet."""
    paused: frozenset[TopicPartition]
    """The partitions paused now."""

    @property
    def total_lag(self) -> int:
        """The sum of the known lags (Kafka ``records-lag-max`` is ``max(lag.values())``)."""
        return sum(v for v in self.lag.values() if v is not None)


class PartitionsNotOwnedError(CoordinationError):
    """Offsets were to be committed for partitions this consumer does not own (any more).

    They were revoked or lost in a rebalance and may belong to another member now; their
    offsets were not committed (the others in the same call were not either)."""


class Consumer:
    """A Kafka consumer whose group membership is this library's: subscribe, poll, commit.

    Example:
        with Consumer("orders-workers", topics=["orders"],
                      bootstrap_servers="localhost:9092") as consumer:
            while True:
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    for record in records:
                        handle(record)
                consumer.commit()        # the positions of the records returned so far

    It joins the group with Kafka's ``consumer`` protocol (so Java and librdkafka consumers
    can share the group), fetches the records of the partitions it owns with kafka-python,
    and commits offsets with its member id and generation: a consumer that lost its
    partitions in a rebalance cannot commit over their new owner (the broker refuses with
    ``CommitFailedError``; a partition it no longer owns raises
    :class:`PartitionsNotOwnedError` before anything is sent).

    Threads:
        Rebalances happen on the group's membership thread, not inside :meth:`poll`; the
        listener runs there (see :class:`RebalanceListener`). Records a :meth:`poll`
        returns belong to partitions owned at that moment; :meth:`poll`, :meth:`commit`,
        :meth:`pause` and :meth:`resume` may be called from one user thread and from the
        listener's callbacks.

    Positions:
        Each owned partition has a position, the offset of the next record :meth:`poll`
        returns: its committed offset when it is assigned (or, with none committed, where
        ``auto_offset_reset`` says), then the offset after the last record returned.
        :meth:`commit` commits these positions. The fetcher is kept at them: records fetched
        but not returned (a partition paused meanwhile) are fetched again, never skipped.
        A partition's records are returned only once its position is established; if
        fetching the committed offsets fails during a rebalance, the rebalance's
        completion is retried and the partition waits. They are also held back until the
        listener's ``on_partitions_assigned`` has returned for the partition (as in Java,
        where it runs inside ``poll()``), so the listener may :meth:`pause` or :meth:`seek`
        it before any of its records is returned. :meth:`position` tells a partition's
        position, :meth:`seek` moves it.

    Pause and resume:
        Paused partitions are not fetched and return no records; :meth:`resume` goes on
        from the record after the last one returned. As in Java, the EAGER protocol forgets
        all paused state at each rebalance (everything is revoked), COOPERATIVE only that of
        the revoked partitions.
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        assignors: Sequence[PartitionAssignor] | None = None,
        listener: RebalanceListener | None = None,
        auto_offset_reset: str = "earliest",
        topic_metadata: TopicMetadata | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        fetcher: RecordFetcher | Literal["lean", "kafka-python"] | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        stop_at_lease_end: bool = True,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start` (or ``with``).

        Args:
            group_id, topics, pattern, assignors: as for :class:`ConsumerPartitioning`.
            group_protocol: Kafka's ``group.protocol``: ``"classic"`` (JoinGroup and
                SyncGroup; the group's leader assigns with ``assignors``) or ``"consumer"``
                (KIP-848, Kafka 4.0+: the broker assigns, no group-wide barrier; see
                :class:`BrokerAssignedPartitioning` and docs/partitioning.md).
            group_remote_assignor: with ``group_protocol="consumer"``, the broker's assignor
                (``"uniform"``, ``"range"``; None: the broker's default).
            listener: told of revoked, assigned and lost partitions.
            stop_at_lease_end: :meth:`poll` returns no record while the member's membership
                lease is within ``lease_margin_ms`` of its end (default
                ``heartbeat_interval_ms``), when the broker may soon give its partitions to
                another member; records flow again once a heartbeat renews it. False: hand
                out records until a loss is known (Java's and kafka-python's behaviour).
            auto_offset_reset: where to start in a partition without a committed offset:
                ``"earliest"`` or ``"latest"`` (Kafka ``auto.offset.reset``). The default is
                ``"earliest"``, NOT ``"latest"`` as in Java, kafka-python and aiokafka: a new
                group here reads what was written before its first commit instead of
                silently skipping it (nothing lost is this library's promise). Pass
                ``"latest"`` to start at the end.
            topic_metadata, transport, clock: the group side's sources of topic metadata,
                group requests, and time and waits, as for :class:`ConsumerPartitioning`
                (defaults: the cluster and the system's clock). The clock also makes this
                consumer's lock and times :meth:`poll`'s ``timeout_ms``.
            fetcher: where the records come from (a :class:`RecordFetcher`), or one made
                by :meth:`start` from the fetch settings: ``"kafka-python"``, kafka-python's
                ``KafkaConsumer``; ``"lean"``, :class:`coordination.fetching.LeanRecordFetcher`,
                which fetches on the polling thread (no I/O thread; a fraction of the CPU
                of an idle consumer, and rebalance steps that do not wait for a fetch) and
                refuses at construction the settings it does not support (``client_rack``,
                SASL, ...). None (the default): ``"lean"`` with ``group_protocol="consumer"``
                where the settings allow it, else ``"kafka-python"``; see
                docs/partitioning.md.
            **settings: group settings (see :class:`coordination.Coordinator`; also
                ``lease_margin_ms``, and with the classic protocol ``rack_id`` and
                ``metadata_max_age_ms``, as for :class:`ConsumerPartitioning`) and kafka-python
                fetch settings
                (``max_poll_records``, ``fetch_max_wait_ms``, ``isolation_level``,
                ``value_deserializer``, ``bootstrap_timeout_ms``: how
                long :meth:`start` waits for the cluster (default 30000), ...), for the
                default fetcher (or ``fetcher="lean"``) only.

        Raises:
            ConfigurationError: a bad setting, or fetch settings given with a ``fetcher``
                (they would be silently ignored).
        """
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigurationError(
                f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}"
            )
        # fetcher="lean": the lean fetcher, built by start() from the fetch settings.
        self._lean = fetcher == "lean"
        check_part("fetcher", None if isinstance(fetcher, str) else fetcher, RecordFetcher)
        if isinstance(fetcher, str) and fetcher not in ("lean", "kafka-python"):
            raise ConfigurationError(
                f"fetcher= must be a RecordFetcher, 'lean', 'kafka-python' or None, got {fetcher!r}"
            )
        own_fetcher = None if isinstance(fetcher, str) else fetcher
        fetch = {k: settings.pop(k) for k in list(settings) if k in FETCH_SETTINGS}
        if own_fetcher is not None and fetch:
            raise ConfigurationError(
                f"fetch settings {sorted(fetch)} apply to the default fetcher only; with "
                "fetcher= given, configure that fetcher instead"
            )
        self._user_listener = listener or RebalanceListener()
        forwarding = ForwardingListener(self._revoked, self._assigned)
        self._group: ConsumerPartitioning | BrokerAssignedPartitioning
        if group_protocol == "classic":
            if group_remote_assignor is not None:
                raise ConfigurationError(
                    "group_remote_assignor is for group_protocol='consumer' (the broker "
                    "assigns); the classic protocol's assignors are given as assignors=[...]"
                )
            self._group = ConsumerPartitioning(
                group_id,
                topics=topics,
                pattern=pattern,
                assignors=assignors,
                listener=forwarding,
                topic_metadata=topic_metadata,
                transport=transport,
                clock=clock,
                **settings,
            )
        elif group_protocol == "consumer":
            if assignors is not None or "partition_assignment_strategy" in settings:
                raise ConfigurationError(
                    "group_protocol='consumer' has no client-side assignors (the broker "
                    "assigns): pass group_remote_assignor='uniform' or 'range' instead"
                )
            self._group = BrokerAssignedPartitioning(
                group_id,
                topics=topics,
                pattern=pattern,
                group_remote_assignor=group_remote_assignor,
                listener=forwarding,
                topic_metadata=topic_metadata,
                transport=transport,
                clock=clock,
                **settings,
            )
        else:
            raise ConfigurationError(
                f"group_protocol must be 'classic' or 'consumer' (Kafka's group.protocol), "
                f"got {group_protocol!r}"
            )
        self._clock = self._group.clock
        self._lease_gate: LeaseGuard | None = None
        if stop_at_lease_end:
            try:
                self._lease_gate = self._group.lease
            except ConfigurationError as e:
                raise ConfigurationError(f"{e} (or pass stop_at_lease_end=False)") from e
        # When poll() found the lease low, for one warning per low spell (None: it holds).
        self._lease_low_since: float | None = None
        # What a poll waits on, a slice at a time, while the lease is low: never set, so a
        # poll always waits its timeout (a caller polling in a loop never spins).
        self._lease_wait = self._clock.event()
        self._fetch_config = {
            **self._group.config.client_settings(),
            **fetch,
            # The rack also picks the closest replica to fetch from (KIP-392).
            **({"client_rack": settings["client_rack"]} if settings.get("client_rack") else {}),
            "auto_offset_reset": auto_offset_reset,
            "enable_auto_commit": False,
            "client_id": self._group.config.client_id,
        }
        if self._lean:
            self._check_lean()  # asked for: what it cannot do is an error
        elif fetcher is None and group_protocol == "consumer":
            # This protocol's default, where the settings allow it; else kafka-python's.
            try:
                self._check_lean()
                self._lean = True
            except ConfigurationError as e:
                log.info("group %s: fetching with kafka-python: %s", self._group.group_id, e)
        log.debug(
            "group %s: fetching with %s",
            self._group.group_id,
            "the lean fetcher"
            if self._lean
            else "a fetcher given"
            if own_fetcher
            else "kafka-python",
        )
        self._lock = self._clock.rlock()
        # The polling thread takes self._lock again right after each fetch slice, and locks
        # are not fair: a rebalance callback waiting for it could wait several slices (0.9 s
        # measured). A callback says it waits (_callback_waiting); the polling thread then
        # lets it in before its next slice (_callback_in: the callback has the lock).
        self._callback_waiting = False
        self._callback_in = self._clock.event()
        # Set by a rebalance callback and by a change of what the fetcher reads: a poll with
        # nothing to fetch waits on it rather than in a fetch slice under self._lock.
        self._knock = self._clock.event()
        self._fetcher: RecordFetcher | None = own_fetcher  # made by start() if not given
        # Invariants, under self._lock: self._positions holds the owned partitions whose
        # start is established; the fetcher is assigned (self._fetching) those that are not
        # paused, and reads each from its position. kafka-python's own pause is not used:
        # in 3.0.12 a partition paused and resumed there was never fetched again.
        self._fetching: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}  # next offset to hand to the user
        # Owned, but the start position is not established yet (not fetched meanwhile).
        self._unpositioned: set[TopicPartition] = set()
        # Positioned, but the user's on_partitions_assigned has not returned for them yet:
        # not fetched, so that the listener can pause them (or seek) before any of their
        # records is returned, as Java's consumer runs it inside poll() before fetching.
        self._announcing: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        # Each owned partition's end as the fetcher last reported it (for metrics()).
        self._ends: dict[TopicPartition, int] = {}
        # Fetched after the next offset to return, not returned yet (a poll's max_records
        # was reached): the fetcher's position is past them, self._positions is not. Only
        # for partitions in self._fetching; dropped whenever the fetcher is sought.
        self._held: dict[TopicPartition, list[Any]] = {}
        # Returned to a caller that may yet refuse them (see _Delivery): the offset after
        # them, where the next poll goes on. self._positions moves there only once the
        # caller confirms they were handed out.
        self._reserved: dict[TopicPartition, int] = {}
        # Changed whenever a partition's position is set other than by returning records
        # (seek, assignment, revocation): a delivery of an older epoch moves nothing.
        self._epochs: dict[TopicPartition, int] = {}
        self._epoch = itertools.count()
        # Deliveries confirmed or refused, appended without the lock (from an event loop,
        # which must never wait for it) and applied under it (_settle) before anything
        # reads or moves a position.
        self._settled: collections.deque[_Delivery | _Pausing] = collections.deque()
        # Revoked (once the listener returned) or lost (from the start), not cleaned up yet:
        # poll() returns none of their records. Set by the membership thread without
        # self._lock (rebinding a frozenset is atomic), so that it takes effect at once even
        # while the polling thread holds the lock and keeps taking it again.
        self._withdrawn: frozenset[TopicPartition] = frozenset()
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def group(self) -> ConsumerPartitioning:
        """The classic protocol's group member underneath (generation, metrics, is_leader,
        ...).

        Raises:
            CoordinatorStateError: the consumer uses ``group_protocol="consumer"``: its
                member is :attr:`broker_assigned`.
        """
        if isinstance(self._group, BrokerAssignedPartitioning):
            raise CoordinatorStateError(
                f"consumer of group {self._group.group_id!r} uses group_protocol='consumer': "
                "its group member is consumer.broker_assigned"
            )
        return self._group

    @property
    def broker_assigned(self) -> BrokerAssignedPartitioning:
        """The KIP-848 group member underneath (``group_protocol="consumer"``).

        Raises:
            CoordinatorStateError: the consumer uses the classic protocol (see :attr:`group`).
        """
        if not isinstance(self._group, BrokerAssignedPartitioning):
            raise CoordinatorStateError(
                f"consumer of group {self._group.group_id!r} uses the classic protocol: its "
                "group member is consumer.group"
            )
        return self._group

    def _check_lean(self) -> None:
        """Raise ConfigurationError, naming the setting, if the lean fetcher cannot fetch
        for this consumer (a clock of its own, SASL, ``client_rack``, ...)."""
        if self._clock is not SYSTEM_CLOCK:
            # Its waits are on real sockets (poll(2)): a simulated clock cannot time them.
            raise ConfigurationError(
                "fetcher='lean' waits on the brokers' sockets in real time: it needs the "
                "system clock (a clock= of your own goes with a fetcher of your own)"
            )
        LeanRecordFetcher.validate(**self._fetch_config)

    def start(self) -> None:
        """Connect the fetcher, then join the group in the background (idempotent).

        Waits for the cluster up to ``bootstrap_timeout_ms`` (default 30000).

        Raises:
            CoordinatorStateError: the consumer was closed.
            ConnectionFailedError: the bootstrap servers could not be reached in time, or
                refused the connection (TLS, SASL); the group was not joined.
            ConfigurationError: kafka-python refused a fetch setting.
        """
        with self._lock:
            if self._closed:
                raise CoordinatorStateError(f"consumer of group {self._group.group_id!r} is closed")
            if self._fetcher is None:
                try:
                    self._fetcher = (
                        LeanRecordFetcher[TopicPartition](**self._fetch_config)
                        if self._lean
                        else KafkaRecordFetcher(**self._fetch_config)
                    )
                except (Exception, AssertionError) as e:
                    raise self._diagnosed(self._fetcher_error(e, "connecting the fetcher")) from e
        self._group.start()
        self._started = True

    def close(self, timeout: float = 30.0) -> None:
        """Revoke (listener first), leave the group, close the fetcher (idempotent)."""
        self._group.close(timeout)
        with self._lock:
            self._closed = True
            if self._fetcher is not None:
                fetcher, self._fetcher = self._fetcher, None
                self._fetching = frozenset()
                try:
                    fetcher.close()
                except Exception as e:  # nothing is left to lose: say so and go on
                    log.warning("group %s: closing the fetcher: %s", self._group.group_id, e)

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

    # ------------------------------------------------------------------ records

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer owns now."""
        return self._group.owned()

    def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Records of owned, unpaused partitions, fetched within ``timeout_ms``.

        Args:
            timeout_ms: how long to wait when no record is ready.
            max_records: return at most this many (default: all that were fetched, up
                to the fetcher's ``max_poll_records``). The others stay fetched for the
                next polls; positions move past the returned records only, so
                :meth:`commit` never covers a record that was not returned.

        Returns:
            kafka-python ``ConsumerRecord`` lists by partition, possibly empty.

        Raises:
            CoordinatorStateError: the consumer was closed.
            FatalBrokerError: the group member stopped on an error a person must fix
                (e.g. :class:`~coordination.errors.UnreleasedInstanceIdError`: another
                process holds this ``group_instance_id``; ``GroupAuthorizationError``);
                every later poll raises it too. Close the consumer.
            ConnectionFailedError: the fetcher cannot reach the cluster (see :meth:`start`).
            BrokerError: the broker refused the fetch (e.g. TOPIC_AUTHORIZATION_FAILED).
            ValueError: ``max_records`` is not a positive int.
        """
        return self._poll(timeout_ms, max_records, None)

    def _poll(
        self, timeout_ms: int, max_records: int | None, delivery: _Delivery | None
    ) -> dict[TopicPartition, list[Any]]:
        """:meth:`poll`; with a ``delivery``, the returned records are reserved for it,
        and the positions move past them once it is confirmed (see :class:`_Delivery`)."""
        if max_records is not None:
            check_int("max_records", max_records, minimum=1, error=ValueError)
        if not self._started:
            self.start()
        deadline = self._clock.monotonic() + timeout_ms / 1000
        while True:
            self._let_a_callback_in()
            with self._lock:
                if self._closed:
                    raise CoordinatorStateError(
                        f"consumer of group {self._group.group_id!r} is closed"
                    )
                failure = self._group.failure
                if failure is not None:
                    # The member stopped for good: no partition will come (Kafka's
                    # consumers throw it from poll too).
                    raise failure
                self._settle()
                if delivery is not None and delivery.outcome is not None:
                    return {}  # its caller is gone: take nothing for it
                lease_holds = self._lease_holds()
                idle = False
                if lease_holds:
                    result = self._take(max_records, delivery)
                    if result:
                        return result
                    if self._fetching:
                        self._fetch_slice(deadline)
                        if delivery is not None and delivery.outcome is not None:
                            return {}  # refused meanwhile: what was fetched stays held
                        result = self._take(max_records, delivery)
                    else:
                        # Nothing to fetch: wait without the lock, so that a rebalance
                        # callback (about to give this consumer partitions) is not held up
                        # by a fetch slice that has nothing to read.
                        idle = True
                        self._knock.clear()
            if not lease_holds or idle:
                # Neither returned nor fetched (what is held stays held): wait a slice, or
                # until a rebalance callback or a new fetch assignment knocks.
                left_s = deadline - self._clock.monotonic()
                if left_s <= 0:
                    return {}
                interrupt = self._knock if idle else self._lease_wait
                self._clock.sleep(min(_POLL_SLICE_MS / 1000, left_s), interrupt)
                continue
            if result or self._clock.monotonic() >= deadline:
                return result

    def _fetch_slice(self, deadline: float) -> None:
        """(Under self._lock) One fetch of at most a slice; the records of partitions still
        returnable are held, never one twice."""
        # Rounded up: a slice rounded down to 0 ms would never reach the deadline on a clock
        # that moves only as the fetcher waits (a simulated one).
        left_ms = math.ceil((deadline - self._clock.monotonic()) * 1000)
        assert self._fetcher is not None  # made by start(), dropped only by close()
        try:
            fetched = self._fetcher.poll(max(0, min(_POLL_SLICE_MS, left_ms)))
        except (kafka_errors.KafkaError, OSError) as e:  # a deserializer's own errors pass
            raise self._fetcher_error(e, "Fetch") from e
        owned = self._group.owned()
        for ktp, batch in fetched.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            records = list(batch)
            if not records or not self._returnable(tp, owned):
                # Revoked or paused while the fetch was in flight. Not returned, so
                # self._positions stays; the fetcher starts there again on resume.
                continue
            held = self._held.get(tp)
            after = held[-1].offset + 1 if held else self._next(tp)
            if records[0].offset < after:
                if not held and tp not in self._reserved and self._past_the_end(tp, after):
                    # The position was past the partition's end (OFFSET_OUT_OF_RANGE), so
                    # the fetcher reset it per auto_offset_reset: go on from there, as
                    # Kafka's consumer does. These records were never returned.
                    self._reset_by_fetcher(tp, records[0].offset)
                else:  # returned or held already: never twice
                    records = [r for r in records if r.offset >= after]
            if records:
                if held is None:
                    self._held[tp] = records  # a list of this call's own, copied from the batch
                else:
                    held.extend(records)
        self._settle()  # a pause asked for meanwhile applies to what was fetched

    def _lease_holds(self) -> bool:
        """(Under self._lock) Whether records may be handed out: the membership lease is
        above its margin, or nothing is owned (nothing to hand out). Logs each low spell."""
        if self._lease_gate is None or not self._group.owned() or self._lease_gate.holds():
            if self._lease_low_since is not None:
                log.info(
                    "group %s: membership lease renewed after %.1fs; poll() returns records again",
                    self._group.group_id,
                    self._clock.monotonic() - self._lease_low_since,
                )
                self._lease_low_since = None
            return True
        if self._lease_low_since is None:
            self._lease_low_since = self._clock.monotonic()
            log.warning(
                "group %s: membership lease within lease_margin_ms of its end (no heartbeat "
                "answered lately): poll() returns no records until it is renewed, as the "
                "broker may soon give this member's partitions to another",
                self._group.group_id,
            )
        return False

    def _let_a_callback_in(self) -> None:
        """(Polling thread, not holding self._lock) If a rebalance callback waits for the
        lock, wait until it has it (at most one slice): it moves partitions in or out, which
        is what the next slice should see."""
        self._callback_in.clear()
        if self._callback_waiting:
            self._callback_in.wait(_POLL_SLICE_MS / 1000)

    @contextlib.contextmanager
    def _locked_for_callback(self) -> Iterator[None]:
        """self._lock for a rebalance callback, ahead of the polling thread's next slice."""
        self._callback_waiting = True
        self._knock.set()
        fetcher = self._fetcher
        wakeup = getattr(fetcher, "wakeup", None)
        if callable(wakeup):
            wakeup()  # a fetcher that can cut its wait short (the lean one) releases the lock
        try:
            with self._lock:
                self._callback_waiting = False
                self._callback_in.set()
                yield
        finally:
            self._callback_waiting = False
            self._knock.set()

    def _returnable(self, tp: TopicPartition, owned: frozenset[TopicPartition]) -> bool:
        """Whether ``tp``'s records may be returned now (under the lock)."""
        return (
            tp in owned
            and tp in self._fetching
            and tp not in self._paused
            and tp not in self._withdrawn
            and tp in self._positions
        )

    def _next(self, tp: TopicPartition) -> int:
        """The offset of the next record to return for (positioned) ``tp``."""
        return self._reserved.get(tp, self._positions[tp])

    def _take(
        self, max_records: int | None, delivery: _Delivery | None
    ) -> dict[TopicPartition, list[Any]]:
        """Up to ``max_records`` held records, returned (under the lock): the positions
        move past them, or, for a ``delivery``, they are reserved for it."""
        if not self._held:
            return {}
        owned = self._group.owned()
        left = math.inf if max_records is None else max_records
        result: dict[TopicPartition, list[Any]] = {}
        for tp in list(self._held):
            if left <= 0:
                break
            if not self._returnable(tp, owned):
                # Lost (the membership thread says so without the lock) or withdrawn: not
                # one more record. The fetcher is sought when the partition is kept.
                del self._held[tp]
                continue
            records = self._held.pop(tp)  # no longer held: the caller's own list
            n = len(records)
            if left < n:
                n = int(left)
                # The rest at the end, so the next take starts with another partition.
                records, self._held[tp] = records[:n], records[n:]
            left -= n
            result[tp] = records
            end = records[-1].offset + 1
            if delivery is None:
                self._positions[tp] = end
                self._reserved.pop(tp, None)
            else:
                self._reserved[tp] = end
                delivery.spans[tp] = (self._epochs.get(tp, -1), records)
        return result

    def _settle(self) -> None:
        """Apply the deliveries confirmed or refused since (under the lock).

        Confirmed: the positions move past their records, if nothing moved them since (a
        seek, a revocation) and no refused delivery before them left a gap: then their
        records are returned again rather than skipped. Refused: the next poll goes on
        from their first record again (held again when nothing was returned after them,
        else fetched again).
        """
        while self._settled:
            delivery = self._settled.popleft()
            if isinstance(delivery, _Pausing):
                self._apply_pausing(delivery)
                continue
            for tp, (epoch, records) in delivery.spans.items():
                if self._epochs.get(tp) != epoch or tp not in self._positions:
                    continue  # sought, revoked or lost since: the records are moot
                first, end = records[0].offset, records[-1].offset + 1
                position = self._positions[tp]
                if delivery.outcome == "handed":
                    if first <= position < end:
                        self._positions[tp] = end
                    if self._reserved.get(tp, end) <= self._positions[tp]:
                        self._reserved.pop(tp, None)
                    continue
                if self._next(tp) <= first:
                    continue  # returned again already
                if self._reserved.get(tp) == end and tp in self._fetching:
                    self._held[tp] = records + self._held.get(tp, [])
                else:  # records after them were returned: fetch from them again
                    self._held.pop(tp, None)
                    if tp in self._fetching and self._fetcher is not None:
                        self._fetcher.seek(tp, max(first, position))
                if first <= position:
                    self._reserved.pop(tp, None)
                else:
                    self._reserved[tp] = first

    def _deliver(self, delivery: _Delivery, handed: bool) -> None:
        """Confirm or refuse ``delivery``: safe from any thread, never waits (the lock's
        holder applies it before the next poll, commit or position)."""
        delivery.outcome = "handed" if handed else "refused"
        self._settled.append(delivery)
        self._settle_if_free()

    def _settle_if_free(self) -> None:
        """Apply what was confirmed, refused or asked for now if the lock is free; else its
        holder, or the next poll, commit or position, does. Never waits."""
        if self._lock.acquire(blocking=False):
            try:
                self._settle()
            finally:
                self._lock.release()

    # An event loop must never wait for the consumer's lock (a commit holds it for a round
    # trip, a poll for a fetch slice): the asyncio face asks for pauses through the queue
    # of settled deliveries and reads without the lock. Each reader copies the queue
    # before the state: what it sees applied twice is idempotent, nothing is missed.

    def _pause_soon(self, partitions: Iterable[TopicPartition], pause: bool) -> None:
        """:meth:`pause` (or :meth:`resume`) without waiting: applied before the next poll
        takes a record."""
        self._settled.append(_Pausing(frozenset(TopicPartition(*tp) for tp in partitions), pause))
        self._settle_if_free()

    def _apply_pausing(self, pausing: _Pausing) -> None:
        if pausing.pause:
            self._paused |= pausing.partitions & self._group.owned()
        else:
            self._paused -= pausing.partitions
        self._reassign_fetcher()

    def _paused_now(self) -> frozenset[TopicPartition]:
        """:meth:`paused` without waiting, pauses asked for included."""
        asked = list(self._settled)
        paused = set(self._paused)
        owned = self._group.owned()
        for item in asked:
            if isinstance(item, _Pausing):
                if item.pause:
                    paused |= item.partitions & owned
                else:
                    paused -= item.partitions
        return frozenset(paused)

    def _position_now(self, partition: TopicPartition) -> int | None:
        """:meth:`position` without waiting, confirmed deliveries included."""
        tp = TopicPartition(*partition)
        settled = list(self._settled)
        position = self._positions.get(tp)
        epoch = self._epochs.get(tp)
        if position is None or tp not in self._group.owned():
            return None
        for item in settled:
            if isinstance(item, _Delivery) and item.outcome == "handed" and tp in item.spans:
                span_epoch, records = item.spans[tp]
                if span_epoch == epoch and records[0].offset <= position <= records[-1].offset:
                    position = records[-1].offset + 1
        return position

    def _metrics_now(self) -> ConsumerMetrics:
        """:meth:`metrics` without waiting: when the lock is busy, the lag from the ends
        last seen."""
        if self._lock.acquire(blocking=False):
            try:
                return self.metrics()
            finally:
                self._lock.release()
        owned = sorted(self._group.owned())
        ends = dict(self._ends)
        positions = {tp: self._position_now(tp) for tp in owned}
        lag: dict[TopicPartition, int | None] = {}
        for tp, position in positions.items():
            end = ends.get(tp)
            lag[tp] = None if end is None or position is None else max(0, end - position)
        return ConsumerMetrics(
            member=self._group.metrics(), positions=positions, lag=lag, paused=self._paused_now()
        )

    def __iter__(self) -> Iterator[Any]:
        """Records one by one, forever (until :meth:`close`)."""
        while not self._closed:
            for records in self.poll().values():
                yield from records

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """Commit offsets, fenced by this member's generation.

        Args:
            offsets: next offset to read by partition; default: the position after the last
                record :meth:`poll` returned, for every owned partition. With nothing to
                commit (none given, or no owned partition with a position yet, as before
                the first assignment) nothing is sent and the call returns.

        Raises:
            PartitionsNotOwnedError: some partitions are not owned (nothing was committed).
            CommitFailedError: the broker refused: the member lost its generation (a
                rebalance or an expired session); nothing was committed.
        """
        with self._lock:
            self._settle()
            owned = self._group.owned()
            generation: Generation = self._group.generation()
            if offsets is None:
                wanted = {
                    tp: OffsetAndMetadata(o) for tp, o in self._positions.items() if tp in owned
                }
            else:
                wanted = {
                    TopicPartition(*tp): o
                    if isinstance(o, OffsetAndMetadata)
                    else OffsetAndMetadata(o)
                    for tp, o in offsets.items()
                }
                foreign = sorted(tp for tp in wanted if tp not in owned)
                if foreign:
                    raise PartitionsNotOwnedError(
                        f"group {self._group.group_id!r}: not committing: this consumer does "
                        f"not own {', '.join(f'{t}-{p}' for t, p in foreign)} (revoked or lost "
                        "in a rebalance)"
                    )
            if not wanted:
                # Nothing to commit (nothing consumed yet, or not yet in a group): as
                # Java's consumer, nothing is sent and nothing can fail.
                return
            # Committed under the lock, so ownership cannot change between check and commit.
            self._group.commit_offsets(
                {(tp.topic, tp.partition): om for tp, om in wanted.items()},
                generation=generation,
                timeout=timeout,
            )

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions``."""
        found = self._group.committed_offsets([(t, p) for t, p in partitions])
        return {TopicPartition(*k): (v.offset if v else None) for k, v in found.items()}

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records of these (owned) partitions until :meth:`resume`.

        Partitions this consumer does not own are ignored.
        """
        with self._lock:
            wanted = {TopicPartition(*tp) for tp in partitions} & self._group.owned()
            self._paused |= wanted
            self._reassign_fetcher()  # what was fetched for them is dropped with them

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these paused partitions again.

        Each goes on from its position (the record after the last one :meth:`poll`
        returned), whatever was fetched while it was paused.
        """
        with self._lock:
            wanted = {TopicPartition(*tp) for tp in partitions} & self._paused
            self._paused -= wanted
            self._reassign_fetcher()

    def paused(self) -> frozenset[TopicPartition]:
        """The partitions paused now."""
        with self._lock:
            return frozenset(self._paused)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float = 30.0
    ) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (owned or not); asks the brokers.

        Raises:
            CoordinatorStateError: the consumer is not started, or its fetcher (one of your
                own) has no ``end_offsets``.
        """
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            ask = getattr(self._fetcher, "end_offsets", None)
            if ask is None:
                raise CoordinatorStateError(
                    f"consumer of group {self._group.group_id!r}: end_offsets needs a started "
                    "consumer whose fetcher has end_offsets(partitions, timeout_ms) "
                    "(the default fetcher has)"
                )
            ends: dict[TopicPartition, int] = ask(wanted, int(timeout * 1000))
            return ends

    def metrics(self) -> ConsumerMetrics:
        """The member's group metrics, and each owned partition's position and lag.

        The lag is the partition's end as of the last fetch response minus the position
        (Kafka ``records-lag``); None until a fetch has seen the partition, and with a
        fetcher that has no ``highwater``. A partition not fetched now (paused, or its
        assignment still being completed) keeps the end its last fetch saw. No request is
        sent; nothing is raised for a partition the fetcher does not read.
        """
        with self._lock:
            self._settle()
            owned = self._group.owned()
            positions = {tp: self._positions.get(tp) for tp in sorted(owned)}
            highwater = getattr(self._fetcher, "highwater", None)
            lag: dict[TopicPartition, int | None] = {}
            for tp, position in positions.items():
                # Only a partition the fetcher reads has an end it knows (kafka-python
                # raises IllegalStateError for the others: paused, not positioned yet,
                # being announced); for those, the end its last fetch saw.
                if highwater is not None and tp in self._fetching:
                    try:
                        end = highwater(tp)
                    except kafka_errors.KafkaError:
                        end = None
                    if end is not None:
                        self._ends[tp] = int(end)
                end = self._ends.get(tp)
                lag[tp] = None if end is None or position is None else max(0, end - position)
        return ConsumerMetrics(
            member=self._group.metrics(), positions=positions, lag=lag, paused=self.paused()
        )

    def position(self, partition: TopicPartition) -> int | None:
        """The offset of the next record :meth:`poll` returns for ``partition``.

        Returns:
            The position; None if the partition is not owned, or owned but its start
            position is not established yet.
        """
        with self._lock:
            self._settle()
            tp = TopicPartition(*partition)
            return self._positions.get(tp) if tp in self._group.owned() else None

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the position of ``partition``: :meth:`poll` goes on from there.

        Records fetched but not returned are dropped; paused, the partition stays paused.
        On a partition whose start position is not established yet (its assignment is
        still being completed), the seek replaces the committed offset as its start.

        Raises:
            PartitionsNotOwnedError: this consumer does not own ``partition``.
            ValueError: ``offset`` is not an int >= 0.
        """
        check_int("seek's offset", offset, minimum=0, error=ValueError)
        tp = TopicPartition(*partition)
        with self._lock:
            if tp not in self._group.owned():
                raise PartitionsNotOwnedError(
                    f"group {self._group.group_id!r}: cannot seek {tp.topic}-{tp.partition}: "
                    "this consumer does not own it (revoked or lost in a rebalance)"
                )
            self._settle()
            self._positions[tp] = offset
            self._moved(tp)
            self._unpositioned.discard(tp)
            self._reassign_fetcher()
            if tp in self._fetching and self._fetcher is not None:
                self._fetcher.seek(tp, offset)

    # ------------------------------------------------------------------ ownership changes

    # The user's listener runs without self._lock: it may wait for another thread that
    # polls or commits (the partitions are still owned meanwhile, so those still work).

    def _revoked(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None:
        if lost:
            # They may be another member's already: not one more record of them.
            self._withdrawn = self._withdrawn | partitions
        try:
            if lost:
                self._user_listener.on_partitions_lost(partitions)
            else:
                self._user_listener.on_partitions_revoked(partitions)
        finally:
            self._withdrawn = self._withdrawn | partitions
            with self._locked_for_callback():
                self._withdrawn = self._withdrawn - partitions  # no position any more
                self._paused -= partitions
                self._unpositioned -= partitions
                self._announcing -= partitions
                for tp in partitions:
                    self._positions.pop(tp, None)
                    self._ends.pop(tp, None)
                    self._moved(tp)
                self._reassign_fetcher(resync=True)

    def _assigned(self, partitions: frozenset[TopicPartition]) -> None:
        """Start fetching the added partitions at their committed offsets, once the user's
        listener has been told of them.

        Idempotent: when it raises (the OffsetFetch timed out, or the user's listener
        raised), on_join_complete is retried with the same assignment, and the partitions
        whose start position is not established yet are still in self._unpositioned, and
        those not announced yet in self._announcing, so they are done then.
        """
        with self._locked_for_callback():
            owned = self._group.owned()
            self._unpositioned = (self._unpositioned | partitions) & owned
            self._announcing = (self._announcing | partitions) & owned
            todo = frozenset(self._unpositioned)
        committed = (
            self._group.committed_offsets([(tp.topic, tp.partition) for tp in todo]) if todo else {}
        )
        with self._locked_for_callback():
            todo &= self._unpositioned  # a seek meanwhile established the others
            if todo and self._fetcher is not None and not self._closed:
                try:
                    # kafka-python finds a reset position only for an assigned partition.
                    self._reassign_fetcher(extra=todo)
                    for tp in sorted(todo):
                        om = committed.get((tp.topic, tp.partition))
                        self._positions[tp] = (
                            om.offset if om is not None else self._reset_position(tp)
                        )
                        self._moved(tp)
                except BaseException:
                    # Not fetched until a retry establishes where to start.
                    for tp in todo:
                        self._positions.pop(tp, None)
                    self._reassign_fetcher()
                    raise
                self._unpositioned -= todo
                self._reassign_fetcher(resync=True)
        self._user_listener.on_partitions_assigned(partitions)
        with self._locked_for_callback():
            self._announcing -= partitions
            self._reassign_fetcher()  # seeks each to its position

    def _reset_position(self, tp: TopicPartition) -> int:
        """Where auto_offset_reset starts a partition with no committed offset."""
        timeout_ms = self._group.config.request_timeout_ms
        try:
            assert self._fetcher is not None
            offset = self._fetcher.position(tp, timeout_ms)
        except (kafka_errors.KafkaError, OSError) as e:
            raise self._fetcher_error(e, f"ListOffsets of {tp.topic}-{tp.partition}") from e
        if offset is None:
            raise CoordinationTimeoutError(
                f"group {self._group.group_id!r}: the start offset of {tp.topic}-{tp.partition} "
                f"(auto_offset_reset={self._fetch_config['auto_offset_reset']!r}) was not found "
                f"within {timeout_ms} ms; the rebalance's completion is retried"
            )
        return int(offset)

    def _reassign_fetcher(
        self, *, extra: frozenset[TopicPartition] = frozenset(), resync: bool = False
    ) -> None:
        """Make the fetcher read the positioned, unpaused partitions the user's listener was
        told of, each from its position.

        Args:
            extra: also these (no position yet), to find where they start.
            resync: seek the partitions the fetcher keeps too (after a rebalance), not only
                those it gets, so that nothing can move them past a record not returned.
        """
        if self._fetcher is None or self._closed:
            return
        wanted = (frozenset(self._positions) - self._paused - self._announcing) | extra
        for tp in [tp for tp in self._held if tp not in wanted]:
            del self._held[tp]  # fetched again from its position when fetched again
        if wanted != self._fetching:
            added = wanted - self._fetching
            # Kept partitions keep their fetch state (and what was fetched) in kafka-python.
            self._fetcher.assign(sorted(wanted))
            self._fetching = wanted
            self._knock.set()
        else:
            added = frozenset()
        for tp in sorted(wanted if resync else added):
            if tp in self._positions:
                self._held.pop(tp, None)
                self._fetcher.seek(tp, self._next(tp))

    def _past_the_end(self, tp: TopicPartition, offset: int) -> bool:
        """(Under self._lock) Whether ``offset`` lies past ``tp``'s end as the fetcher last
        saw it (a fetcher that does not tell its high watermark: never)."""
        highwater = getattr(self._fetcher, "highwater", None)
        end = highwater(tp) if callable(highwater) else None
        return isinstance(end, int) and end < offset

    def _reset_by_fetcher(self, tp: TopicPartition, offset: int) -> None:
        """(Under self._lock) The fetcher reset ``tp`` to ``offset``: the position follows."""
        log.warning(
            "group %s: %s-%d: position %d is past the partition's end; reset to %d "
            "(auto_offset_reset %r)",
            self._group.group_id,
            tp.topic,
            tp.partition,
            self._positions[tp],
            offset,
            self._fetch_config.get("auto_offset_reset"),
        )
        self._positions[tp] = offset
        self._moved(tp)

    def _moved(self, tp: TopicPartition) -> None:
        """``tp``'s position was set (or dropped) other than by returning records: what
        was held or reserved for it is moot."""
        self._held.pop(tp, None)
        self._reserved.pop(tp, None)
        self._epochs[tp] = next(self._epoch)

    def _diagnosed(self, error: CoordinationError) -> CoordinationError:
        """The cause of a failed bootstrap of the fetcher, if the group side can tell it.

        kafka-python's consumer reports a refused SASL login or a failed TLS handshake as a
        bootstrap timeout; this library's transport tells them apart
        (:class:`AuthenticationFailedError`, :class:`TlsError`), so it is asked once."""
        secured = self._fetch_config.get("security_protocol", "PLAINTEXT") != "PLAINTEXT"
        if type(error) is not ConnectionFailedError or not secured:
            return error  # (plaintext: nothing to refuse; no time spent asking)
        try:
            describe_group(self._group.group_id, **self._group.config.client_settings())
        except (AuthenticationFailedError, TlsError) as refused:
            return refused
        except CoordinationError:
            pass  # not reachable from here either: the fetcher's error says it
        return error

    def _fetcher_error(self, e: Exception, doing: str) -> CoordinationError:
        """A kafka-python error of the fetcher as this library's, saying what to do."""
        group = self._group.group_id
        if isinstance(e, CoordinationError):
            return e
        errno = getattr(e, "errno", None)
        if isinstance(e, kafka_errors.BrokerResponseError) and isinstance(errno, int):
            return broker_error(errno, group_id=group, api=f"{doing} (the consumer's fetcher)")
        if isinstance(
            e, kafka_errors.KafkaConfigurationError | TypeError | ValueError | AssertionError
        ):
            return ConfigurationError(
                f"group {group!r}: kafka-python refused the consumer's fetch settings: {e}"
            )
        servers = self._fetch_config.get("bootstrap_servers")
        if not isinstance(
            e,
            kafka_errors.KafkaTimeoutError
            | kafka_errors.KafkaConnectionError
            | kafka_errors.SaslAuthenticationFailedError
            | kafka_errors.AuthorizationError
            | kafka_errors.IncompatibleBrokerVersion
            | OSError,
        ):
            return CoordinationError(
                f"group {group!r}: {doing} failed in kafka-python ({type(e).__name__}: {e}); "
                f"bootstrap servers {servers!r}"
            )
        return ConnectionFailedError(
            f"group {group!r}: {doing}: cannot reach the bootstrap servers {servers!r} "
            f"({type(e).__name__}: {e}); check that they name running Kafka brokers reachable "
            "from this host, with the right security_protocol, ssl_* and sasl_* settings "
            "(bootstrap_timeout_ms says how long to wait for them)"
        )


@dataclass(frozen=True, slots=True)
class _Pausing:
    """A pause (or resume) asked for without waiting for the consumer's lock."""

    partitions: frozenset[TopicPartition]
    pause: bool


class _Delivery:
    """The records one poll returns to a caller that may not take them: the asyncio face,
    whose ``getmany`` may be cancelled after its poll ran on the fetch thread.

    They are reserved, not handed out: the positions (and so :meth:`Consumer.commit`) move
    past them only once the caller confirms (``Consumer._deliver(delivery, True)``); a
    refusal gives them back to the next poll. Neither waits for the consumer's lock.
    """

    __slots__ = ("outcome", "spans")

    def __init__(self) -> None:
        # Set by _take: each partition's epoch then and the records reserved.
        self.spans: dict[TopicPartition, tuple[int, list[Any]]] = {}
        self.outcome: str | None = None  # "handed" or "refused", set once by the caller
