"""The share consumer: Kafka's ``KafkaShareConsumer`` API on a share group's member."""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from types import TracebackType
from typing import Any, Final, Literal

from typing_extensions import Self

from coordination import ErrorCode
from coordination.clock import Clock
from coordination.errors import ConfigurationError, CoordinationError, CoordinatorStateError
from coordination.hooks import (
    AcknowledgementFailed,
    HookCaller,
    RecordsAcknowledged,
    RecordsAcquired,
    RecordsUnpolled,
    ShareLagRead,
)
from coordination.parts import check_int
from coordination.share_group import (
    NO_ANSWER,
    AcknowledgeType,
    AcquiredRecord,
    AcquiredRun,
    FetchInFlight,
    FetchOutcome,
    Leaders,
    ShareGroupMember,
)
from coordination.transport import Transport, TransportError

from ._errors import (
    AcknowledgementError,
    AcknowledgementUncertainError,
    AcquisitionLockExpiredError,
)
from ._errors import _name as _error_name

log = logging.getLogger("recipes.queues")

TopicPartition = tuple[str, int]
"""A partition: topic name and partition number."""

_Key = tuple[uuid.UUID, int]  # a partition as the member names it: topic id, partition
_USER_TYPES = frozenset(
    {AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.RENEW}
)

# A lag lookup holds its poll up this long at most (the coordinator answers in milliseconds).
_LAG_LOOKUP_S: Final = 1.0
# After a lag lookup that failed, the next waits this long at the soonest.
_LAG_RETRY_S: Final = 30.0

OnAcknowledged = Callable[[TopicPartition, tuple[int, ...], "AcknowledgementError | None"], None]
"""``on_acknowledged(partition, offsets, error)``: error None when they took effect."""


@dataclass(frozen=True, slots=True, eq=False)
class ShareRecord:
    """A record delivered by :meth:`ShareConsumer.poll`, held by this consumer under the
    acquisition lock until it is acknowledged or the lock runs out.

    ``delivery_count``: 1 at its first delivery, one more at each (after a RELEASE, a lock
    that ran out, a consumer that closed holding it). Compared by identity: a record
    delivered again is a new ``ShareRecord``.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    delivery_count: int
    topic_id: uuid.UUID = field(repr=False)


def _record_maker() -> Callable[..., ShareRecord]:
    """ShareRecord's constructor for the fetch path, which makes one per record fetched: it
    sets the slots through their descriptors, twice as fast as the frozen dataclass's own
    ``__init__`` (``object.__setattr__`` per field). A field added to ShareRecord and not
    here fails at import (nine names to unpack)."""
    topic, partition, offset, key, value, headers, timestamp, count, topic_id = (
        getattr(ShareRecord, f.name).__set__ for f in fields(ShareRecord)
    )
    new = object.__new__

    def make(
        t: str,
        p: int,
        o: int,
        k: bytes | None,
        v: bytes | None,
        h: tuple[tuple[str, bytes | None], ...],
        ts: int,
        c: int,
        tid: uuid.UUID,
    ) -> ShareRecord:
        record: ShareRecord = new(ShareRecord)
        topic(record, t)
        partition(record, p)
        offset(record, o)
        key(record, k)
        value(record, v)
        headers(record, h)
        timestamp(record, ts)
        count(record, c)
        topic_id(record, tid)
        return record

    return make


_make_record = _record_maker()


@dataclass(slots=True)
class ShareMetrics:
    """Counts since the consumer started."""

    records_acquired: int = 0
    """Records delivered by poll()."""
    records_redelivered: int = 0
    """Of those, records delivered before (delivery_count above 1)."""
    acknowledged: dict[str, int] = field(default_factory=dict)
    """Records whose acknowledgement took effect, by type (``"ACCEPT"``, ...)."""
    lock_renewals: int = 0
    """RENEWs that took effect."""
    acknowledgements_failed: int = 0
    """Records whose acknowledgement did not take effect (lock expired, no answer, ...)."""
    lag: dict[TopicPartition, int] = field(default_factory=dict)
    """The share-partition lag of each partition of the assignment as last read (by
    ``poll()`` every ``lag_refresh_ms``, or by ``lag()``): the records not done yet,
    acquired ones included. Empty until read; a partition the broker cannot tell is left
    out (Kafka 4.3 tells none for a new group's partition before its first
    acknowledgement)."""
    records_expired_unpolled: int = 0
    """With ``fetch_ahead``: records fetched ahead whose lock ran out before a poll could
    hand them out (never handed out; the broker delivers them again)."""
    records_undecodable: int = 0
    """Records acquired whose batches could not be decoded (never handed out; released at
    once, so the broker delivers them again, or archives them at the delivery limit)."""
    rounds_abandoned: int = 0
    """With ``fetch_ahead``: rounds ``close()`` gave up waiting for (its time ran out before
    every leader answered). What they acquired is not named to ``on_records_unpolled``
    (the consumer never got it); it goes back to the group when its lock runs out."""


@dataclass(slots=True)
class _Held:
    """A delivered record not acknowledged yet, and when its lock runs out (our clock; the
    broker's lock began earlier, so it has run out by then at the latest)."""

    record: ShareRecord
    lock_until: float
    lock_s: float


_NO_TOPIC: Final = uuid.UUID(int=0)


@dataclass(slots=True, eq=False)
class _Partition:
    """One partition's records held, by offset, and its acknowledgements not sent yet: the
    consumer's ``_pending`` entry for the partition, None when it has none. Found once per
    partition rather than once per record: a key holding a topic id is slow to hash."""

    held: dict[int, _Held] = field(default_factory=dict)
    pending: dict[int, AcknowledgeType] | None = None


@dataclass(slots=True, eq=False)
class _Round:
    """A round of ShareFetches sent ahead of the poll that takes its records
    (``fetch_ahead``): the acknowledgements it carries and when it was sent (a RENEW's lock
    runs from then at the latest, and so do its records' locks), the fetch on its way
    (``inflight``, None once its answers are taken) and then its outcome."""

    sent: dict[_Key, dict[int, AcknowledgeType]]
    sent_at: float
    inflight: FetchInFlight | None
    outcome: FetchOutcome | None = None
    error: BaseException | None = None  # the sending's, raised when the round is taken


class ShareConsumer:
    """Consume a topic as a queue: records shared among the members of a share group
    (KIP-932), each acknowledged on its own.

    Example:
        with ShareConsumer("jobs", topics=["jobs"], bootstrap_servers="localhost:9092") as c:
            while True:
                for record in c.poll(timeout_ms=1000):
                    try:
                        handle(record.value)
                        c.acknowledge(record, AcknowledgeType.ACCEPT)
                    except Exception:
                        c.acknowledge(record, AcknowledgeType.RELEASE)  # deliver it again
                c.commit()  # or let the next poll carry the acknowledgements

    Acknowledgement modes (Kafka ``share.acknowledgement.mode``):
        ``"explicit"``: each record is acknowledged with :meth:`acknowledge`; the next
        :meth:`poll` (or :meth:`commit`) sends the acknowledgements. A record left
        unacknowledged stays locked to this consumer until its lock runs out.
        ``"implicit"``: the next :meth:`poll` (or :meth:`commit`, :meth:`close`) accepts
        every record the previous poll returned.

    Acknowledgement types: ACCEPT (done), RELEASE (deliver again, to any member), REJECT
    (never deliver again: archived), RENEW (keep the lock: still working; sent at the next
    poll or commit, the record stays this consumer's).

    Failures: an acknowledgement that did not take effect is reported, never counted: for
    a record whose lock ran out, :class:`AcquisitionLockExpiredError`; for a request that
    got no answer, :class:`AcknowledgementUncertainError`. :meth:`commit` returns them per
    partition; ``on_acknowledged`` hears of every outcome (those sent with a poll too); a
    failure nobody listens to is logged at WARNING.

    Hooks (``hooks=[...]``, :mod:`coordination.hooks`): ``on_records_acquired`` after each
    poll that acquired records, ``on_records_unpolled`` for records acquired that no poll
    handed out, ``on_records_acknowledged`` (per partition and type; RENEW is a lock
    renewal) and ``on_acknowledgement_failed`` for every outcome, on the thread that polls,
    commits or closes; the member's ``on_rebalance_finished`` at each new assignment,
    ``on_heartbeat_failed``, on the heartbeat thread.

    Records that cannot be decoded (a corrupt batch, a compression whose library is not
    installed): their acquired offsets are named to ``on_records_unpolled`` (reason
    ``"undecodable"``, each with its delivery count), counted in ``metrics()
    .records_undecodable``, logged at WARNING, and released with the next request to their
    leader: the broker delivers them again, and archives them at the delivery limit.

    Lag: Kafka tells a share-partition's lag only to DescribeShareGroupOffsets, a request
    to the group's coordinator: :meth:`lag` asks it, and with ``lag_refresh_ms`` set
    :meth:`poll` does every so often; ``metrics().lag`` holds the last reading.

    Fetching ahead (``fetch_ahead=True``): as :meth:`poll` returns records, it sends the
    next round of ShareFetches (carrying the acknowledgements made before this poll), so
    that the broker's answer comes while the application works on these; the next poll
    hands its records out. The records of that round are acquired (a delivery counted,
    the lock running from the answer) before the application asks for them; a poll that
    comes after their lock ran out does not hand them out (``metrics()
    .records_expired_unpolled``; the broker delivers them again). :meth:`commit` and
    :meth:`close` wait for the round out first; :meth:`close` releases its records.

    Concurrency: not thread-safe, as Kafka's consumers: one thread calls poll, acknowledge,
    commit, lag and close. The heartbeats run on the member's own thread (and, with
    ``fetch_ahead``, the round sent ahead on one of its own).
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str],
        acknowledgement_mode: Literal["explicit", "implicit"] = "explicit",
        max_poll_records: int = 500,
        on_acknowledged: OnAcknowledged | None = None,
        lag_refresh_ms: int | None = None,
        fetch_ahead: bool = False,
        rack_id: str | None = None,
        leaders: Leaders | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until the first :meth:`poll` (or
        :meth:`start`).

        Args:
            group_id: the share group (Kafka ``group.id``).
            topics: the topics to consume.
            acknowledgement_mode: ``"explicit"`` (default) or ``"implicit"`` (Kafka
                ``share.acknowledgement.mode``), see the class docstring.
            max_poll_records: the most records a poll acquires from each leader (Kafka
                ``max.poll.records``, default 500).
            on_acknowledged: called, on the polling thread, with every acknowledgement's
                outcome: ``(partition, offsets, error)``, error None when it took effect.
            lag_refresh_ms: how often a :meth:`poll` reads the lag of the assignment's
                share-partitions from the group's coordinator into ``metrics().lag`` (one
                DescribeShareGroupOffsets, Kafka 4.2+; at least 100). Default None: never
                (:meth:`lag` asks on demand).
            fetch_ahead: send the next round of ShareFetches as :meth:`poll` returns
                records, for throughput (see the class docstring). Default False.
            rack_id: the consumer's rack (Kafka ``client.rack``).
            leaders, transport, clock, **settings: as for
                :class:`coordination.share_group.ShareGroupMember` (``bootstrap_servers``,
                security settings, ``session_timeout_ms``, ``hooks``, ...).

        Raises:
            ConfigurationError: an invalid setting.
        """
        if acknowledgement_mode not in ("explicit", "implicit"):
            raise ConfigurationError(
                "acknowledgement_mode must be 'explicit' or 'implicit', got "
                f"{acknowledgement_mode!r}"
            )
        if lag_refresh_ms is not None:
            check_int("lag_refresh_ms", lag_refresh_ms, minimum=100)
        if not isinstance(fetch_ahead, bool):
            raise ConfigurationError(f"fetch_ahead must be True or False, got {fetch_ahead!r}")
        self._fetch_ahead = fetch_ahead
        self._ahead: _Round | None = None  # the round out, not taken yet
        self._fetched: _Round | None = None  # a round done whose records no poll took yet
        self._implicit = acknowledgement_mode == "implicit"
        self._on_acknowledged = on_acknowledged
        self._lag_refresh_s = None if lag_refresh_ms is None else lag_refresh_ms / 1000
        self._lag_due = 0.0
        self._lag_warned = False  # a failed lookup warned since the last reading
        self._member = ShareGroupMember(
            group_id,
            topics,
            rack_id=rack_id,
            max_records=max_poll_records,
            leaders=leaders,
            transport=transport,
            clock=clock,
            **settings,
        )
        self._clock = self._member.clock
        self._hooks = HookCaller(self._member.config.hooks)
        self._partitions: dict[_Key, _Partition] = {}  # those holding records
        # The key and entry of the partition acknowledge() found last (see there).
        self._last_acknowledged: tuple[_Key, _Partition] = ((_NO_TOPIC, -1), _Partition())
        # The key, round and offsets _out() read last (see there).
        self._last_out: tuple[_Key | None, _Round | None, dict[int, AcknowledgeType]] = (
            None,
            None,
            {},
        )
        self._pending: dict[_Key, dict[int, AcknowledgeType]] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._closed = False
        self._metrics = ShareMetrics()

    # ------------------------------------------------------------------ the member's view

    @property
    def group_id(self) -> str:
        return self._member.group_id

    @property
    def member(self) -> ShareGroupMember:
        """The share group's member underneath (member id, epoch, assignment)."""
        return self._member

    @property
    def member_id(self) -> str:
        return self._member.member_id

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer may fetch from now."""
        return self._member.assignment()

    def delivery_count_limit(self, timeout: float | None = None) -> int | None:
        """The group's delivery count limit at the broker (``share.delivery.count.limit``,
        else ``group.share.delivery.count.limit``): a record released (or whose lock runs
        out) at this delivery is archived, never delivered again. Call it once joined (after
        :meth:`start`, or a poll that returned records); see
        :meth:`coordination.share_group.ShareGroupMember.delivery_count_limit`.

        Returns:
            The limit, or None when the broker does not name the setting.

        Raises:
            TransportError: no answer, or not joined yet: ask again later.
            BrokerError: the broker refused (e.g. no DESCRIBE_CONFIGS on the group).
        """
        self._check_open()
        return self._member.delivery_count_limit(timeout)

    def lag(self, timeout: float | None = None) -> dict[TopicPartition, int]:
        """The lag of each share-partition of the assignment, asked of the group's
        coordinator now (DescribeShareGroupOffsets v1, Kafka 4.2+; see
        :meth:`coordination.share_group.ShareGroupMember.share_partition_lag`), and kept
        as ``metrics().lag``. Call it once joined, from the thread that polls.

        Returns:
            ``{(topic, partition): lag}``: the records not done yet (acquired ones
            included); a partition the broker cannot tell is left out.

        Raises:
            TransportError: no answer, or not joined yet: ask again later.
            BrokerError: the broker refused (e.g. no DESCRIBE on the group).
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        lag = self._member.share_partition_lag(timeout)
        self._metrics.lag = lag
        self._hooks.share_lag_read(
            lambda: ShareLagRead(group_id=self.group_id, member_id=self.member_id, lag=dict(lag))
        )
        return dict(lag)

    def metrics(self) -> ShareMetrics:
        """A copy of the consumer's counts."""
        m = self._metrics
        return ShareMetrics(
            m.records_acquired,
            m.records_redelivered,
            dict(m.acknowledged),
            m.lock_renewals,
            m.acknowledgements_failed,
            dict(m.lag),
            m.records_expired_unpolled,
            m.records_undecodable,
            m.rounds_abandoned,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float | None = None) -> None:
        """Join the share group and wait for the assignment (the first poll does it too).

        Raises:
            ShareGroupsUnsupportedError: the broker has no share groups (Kafka 4.2+ with
                ``share.version`` enabled is needed).
            CoordinationTimeoutError: not joined within ``timeout``.
            FatalBrokerError: another error a person must fix.
        """
        self._check_open()
        self._member.wait_assigned(timeout)

    def poll(self, timeout_ms: int) -> list[ShareRecord]:
        """Records acquired for this consumer, waiting up to ``timeout_ms`` for some; sends
        the acknowledgements made since the last poll (in implicit mode: accepts every
        record the last poll returned).

        Raises:
            ShareGroupsUnsupportedError: the broker has no share groups.
            FatalBrokerError: the member stopped on an error a person must fix.
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        self._member.start()  # joins in the background; the fetches wait for the assignment
        deadline = self._clock.monotonic() + max(0, timeout_ms) / 1000
        # The round sent ahead first: its acknowledgements settle before any are made again.
        if not self._take_round(deadline - self._clock.monotonic()):
            return []  # still out at the deadline; the next poll takes it
        if self._implicit:
            self._accept_all_held()
        sent, _ = self._take_pending()  # a refusal is reported; poll goes on
        while True:
            fetched, self._fetched = self._fetched, None
            if fetched is not None:
                assert fetched.outcome is not None
                # The next round goes before these records are held and handed out, so that
                # its answer comes meanwhile; it carries the acknowledgements made so far.
                self._send_round(sent)
                sent = {}
                records = self._hold(fetched.outcome, fetched.sent_at, fetched.sent_at)
                if records:
                    return self._delivered(records, fetched.sent_at)
                # Every lock ran out before this poll: the round just sent, in the time left.
                if not self._take_round(deadline - self._clock.monotonic()):
                    return []
                continue
            # Rounded up: a wait of 1 ms, read back as 0.9999 ms, would not wait at all.
            remaining_ms = max(0, math.ceil((deadline - self._clock.monotonic()) * 1000))
            sent_at = self._clock.monotonic()
            outcome = self._member.fetch(sent, remaining_ms)
            answered_at = self._clock.monotonic()
            self._name_undecodable(outcome, sent_at)
            try:
                self._settle(sent, outcome.acknowledged, outcome, sent_at)
            except BaseException:
                if outcome.runs:  # acquired all the same: close names them
                    self._fetched = _Round({}, sent_at, None, outcome)
                raise
            sent = {}
            if outcome.runs or remaining_ms == 0:
                if outcome.runs:
                    self._send_round({})  # as above: before the records are held
                records = self._hold(outcome, answered_at, sent_at)
                if records or remaining_ms == 0 or self._ahead is None:
                    return self._delivered(records, sent_at)
                # Every lock ran out before they were held: the round just sent, as above.
                if not self._take_round(deadline - self._clock.monotonic()):
                    return []

    def _delivered(self, records: list[ShareRecord], fetched_at: float) -> list[ShareRecord]:
        """``records``, as poll returns them (told to the hooks; the lag read if due), of the
        fetch sent at ``fetched_at``."""
        self._refresh_lag()
        if records and self._hooks:
            self._hooks.records_acquired(
                RecordsAcquired(
                    group_id=self.group_id,
                    member_id=self.member_id,
                    count=len(records),
                    redelivered=sum(r.delivery_count > 1 for r in records),
                    fetched_at=fetched_at,
                )
            )
        return records

    def acknowledge(
        self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge ``record`` (sent with the next :meth:`poll` or :meth:`commit`). A
        later acknowledgement of the same record before then replaces this one.

        Raises:
            CoordinatorStateError: implicit mode, the record is not held by this consumer
                (acknowledged already, delivered again since, or from another consumer), or
                the consumer is closed.
            ConfigurationError: ``ack_type`` is not ACCEPT, RELEASE, REJECT or RENEW.
        """
        # Called once per record: the checks of _check_open, _out and _pending_of are inlined
        # (the same checks, in the same order).
        if self._closed:
            self._check_open()  # raises
        if self._implicit:
            raise CoordinatorStateError(
                "acknowledge() is for acknowledgement_mode='explicit'; in implicit mode the "
                "next poll accepts every record"
            )
        if ack_type not in _USER_TYPES:
            raise ConfigurationError(
                f"ack_type must be ACCEPT, RELEASE, REJECT or RENEW, got {ack_type!r}"
            )
        # The partition of the last record acknowledged first: a poll's records come partition
        # by partition, and a key holding a topic id is slow to hash (UUID's hash is Python's).
        # One found there that does not hold the record (it left _partitions once empty) is
        # looked up again.
        key, partition = self._last_acknowledged
        held = None
        if key[0] is record.topic_id and key[1] == record.partition:
            held = partition.held.get(record.offset)
        if held is None:
            key = (record.topic_id, record.partition)
            found = self._partitions.get(key)
            if found is not None:
                partition = found
                self._last_acknowledged = (key, found)
                held = found.held.get(record.offset)
        if (
            held is None
            or held.record is not record
            or (self._ahead is not None and self._out(key, record))
        ):
            raise CoordinatorStateError(
                f"{record.topic}[{record.partition}] offset {record.offset} is not held by this "
                "consumer: acknowledged already, delivered again since, or not its record"
            )
        pending = partition.pending
        if pending is None:
            pending = self._pending_of(key, partition)
        pending[record.offset] = ack_type

    def _out(self, key: _Key, record: ShareRecord) -> bool:
        """Whether ``record``'s acknowledgement is out in the round sent ahead, and the record
        no longer this consumer's once it lands (a RENEW keeps it: it may be acknowledged
        again, sent once the RENEW's outcome is known)."""
        ahead = self._ahead
        if ahead is None:
            return False
        # The offsets out for the partition of the last call first, as in acknowledge(): the
        # key is the same tuple while acknowledge() finds the same partition.
        last_key, last_round, offsets = self._last_out
        if key is not last_key or ahead is not last_round:
            offsets = ahead.sent.get(key, {})
            self._last_out = (key, ahead, offsets)
        kind = offsets.get(record.offset)
        return kind is not None and kind is not AcknowledgeType.RENEW

    def lock_deadline(self, record: ShareRecord) -> float | None:
        """When ``record``'s acquisition lock runs out by this consumer's clock
        (``member.clock.monotonic()``; the broker's lock began a little earlier), moved on by
        each RENEW that takes effect; None if the consumer does not hold the record
        (acknowledged, refused, delivered again since, or not its record)."""
        partition = self._partitions.get((record.topic_id, record.partition))
        held = partition.held.get(record.offset) if partition is not None else None
        return held.lock_until if held is not None and held.record is record else None

    def commit(self) -> dict[TopicPartition, AcknowledgementError | None]:
        """Send the acknowledgements made so far now (in implicit mode: accept every record
        the last poll returned), and wait for their outcome. With ``fetch_ahead``, the round
        sent ahead is waited for first; the outcome of the acknowledgements it carried is
        reported to ``on_acknowledged`` and the hooks, as a poll's are, not returned here.

        Returns:
            Per partition acknowledged: None if every acknowledgement took effect, else the
            error for the records whose did not (:class:`AcquisitionLockExpiredError`, ...).

        Raises:
            FatalBrokerError: the member stopped on an error a person must fix.
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        self._take_round(None)  # one request per share session at a time
        if self._implicit:
            self._accept_all_held()
        sent, refused = self._take_pending()
        if not sent:
            return refused
        sent_at = self._clock.monotonic()
        return _merged(refused, self._settle(sent, self._member.acknowledge(sent), None, sent_at))

    def close(self, timeout: float = 30.0) -> dict[TopicPartition, AcknowledgementError | None]:
        """Send the acknowledgements made so far (implicit mode: accept the last poll's
        records), release every other record this consumer holds (other members get them at
        once, not after their lock), close the share sessions and leave the group.
        Idempotent.

        Returns:
            The outcome of the acknowledgements, as :meth:`commit` returns it.
        """
        if self._closed:
            return {}
        self._closed = True
        try:
            if not self._take_round(timeout):
                self._abandon_round()
        except Exception as e:  # the round's fetch failed: close all the same
            log.debug("share group %r: the round fetched ahead failed: %r", self.group_id, e)
        if self._implicit:
            self._accept_all_held()
        for key, partition in self._partitions.items():
            acks = self._pending_of(key, partition)
            for offset in partition.held:
                # Not acknowledged: release it now (a RENEW pending is a record still held).
                if acks.get(offset, AcknowledgeType.RENEW) is AcknowledgeType.RENEW:
                    acks[offset] = AcknowledgeType.RELEASE
        sent, refused = self._take_pending()
        # Records fetched ahead and never handed out are released with their sessions.
        if self._fetched is not None:
            assert self._fetched.outcome is not None
            self._unpolled(self._fetched.outcome.records, "closed", self._fetched.sent_at)
            self._fetched = None
        try:
            answered = self._member.close(sent, timeout)
        except Exception:
            self._partitions.clear()
            raise
        return _merged(refused, self._settle(sent, answered)) if sent else refused

    def __enter__(self) -> Self:
        self._member.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ShareConsumer group={self.group_id!r} member={self.member_id!r}>"

    # ------------------------------------------------------------------ bookkeeping

    def _refresh_lag(self) -> None:
        """Read the lag into ``metrics()`` if due (every ``lag_refresh_ms`` once joined);
        a lookup that fails keeps the last reading and waits longer for the next."""
        now = self._clock.monotonic()
        if self._lag_refresh_s is None or now < self._lag_due or self._member.member_epoch <= 0:
            return
        try:
            self.lag(timeout=_LAG_LOOKUP_S)
        except (TransportError, CoordinationError) as e:
            self._lag_due = now + max(self._lag_refresh_s, _LAG_RETRY_S)
            if not self._lag_warned:
                self._lag_warned = True
                log.warning(
                    "share group %r: could not read the share-partition lag "
                    "(DescribeShareGroupOffsets: %s); metrics().lag keeps the last reading, "
                    "asked again in %.0f s",
                    self.group_id,
                    e,
                    max(self._lag_refresh_s, _LAG_RETRY_S),
                )
            return
        self._lag_due = now + self._lag_refresh_s
        self._lag_warned = False

    def _send_round(self, sent: dict[_Key, dict[int, AcknowledgeType]]) -> None:
        """With ``fetch_ahead``, send the next round of ShareFetches, carrying ``sent``: the
        broker answers while the application works on the records this poll returns, and
        the next poll reads the answers. No wait at the broker: the round must not hold the
        next poll's (or a commit's) acknowledgements back longer than a round trip."""
        if not self._fetch_ahead:
            return
        round_ = _Round(sent, self._clock.monotonic(), None)
        try:
            round_.inflight = self._member.start_fetch(sent, 0)
        except BaseException as e:  # raised when the round is taken, as its answers' would
            round_.error = e
        self._ahead = round_

    def _take_round(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` (None: as long as it takes) for the round sent ahead,
        and settle its acknowledgements; its records wait in ``_fetched`` for a poll. False
        if its answers have not come yet.

        Raises:
            The error the round's fetch raised (FatalBrokerError, ...).
        """
        round_ = self._ahead
        if round_ is None:
            return True
        try:
            if round_.error is not None:
                raise round_.error
            assert round_.inflight is not None
            outcome = self._member.finish_fetch(
                round_.inflight, None if timeout_s is None else max(0.0, timeout_s)
            )
        except BaseException:
            self._ahead = None
            self._settle(round_.sent, {})  # some leaders may have applied them: uncertain
            raise
        if outcome is None:
            return False
        self._ahead = None
        round_.inflight, round_.outcome = None, outcome
        self._name_undecodable(outcome, round_.sent_at)
        if outcome.runs:  # kept before settling, which may raise: close names them then
            self._fetched = round_
        self._settle(round_.sent, outcome.acknowledged, outcome, round_.sent_at)
        return True

    def _abandon_round(self) -> None:
        """Give up on the round still out (close's time is up): the outcome of its
        acknowledgements is unknown, reported so (AcknowledgementUncertainError), and they
        are not made again."""
        round_, self._ahead = self._ahead, None
        if round_ is not None:
            self._metrics.rounds_abandoned += 1
            log.warning(
                "share group %r: closing with a fetch still out; its acknowledgements' outcome "
                "is unknown",
                self.group_id,
            )
            if round_.inflight is not None:
                self._member.abandon_fetch(round_.inflight)
            self._settle(round_.sent, {})

    def _hold(
        self, fetched: FetchOutcome, otherwise: float, fetched_at: float
    ) -> list[ShareRecord]:
        """The records to deliver of ``fetched`` (the fetch sent at ``fetched_at``), held
        from when their leader's answer came (``otherwise`` if not known), but for those whose
        lock has run out since then."""
        now = self._clock.monotonic()
        records: list[ShareRecord] = []
        append = records.append
        expired: list[AcquiredRun] = []
        redelivered = 0
        make = _make_record
        for run in fetched.runs:
            tid, topic, p, count, lock_ms, fields = run
            key = (tid, p)
            self._topic_names[tid] = topic
            partition = self._partitions.get(key)
            if partition is None:
                partition = self._partitions[key] = _Partition()
            lock_s = lock_ms / 1000
            lock_until = fetched.answered_at.get(key, otherwise) + lock_s
            if lock_until <= now:
                expired.append(run)
                continue
            held = partition.held
            if count > 1:
                redelivered += len(fields)
            for offset, k, v, h, ts in fields:
                record = make(topic, p, offset, k, v, h, ts, count, tid)
                held[offset] = _Held(record, lock_until, lock_s)
                append(record)
        if expired:
            self._metrics.records_expired_unpolled += sum(len(run.records) for run in expired)
            for emptied in [
                k for k, held in self._partitions.items() if not held.held and held.pending is None
            ]:
                del self._partitions[emptied]
            self._unpolled(FetchOutcome(runs=expired).records, "lock_expired", fetched_at)
        self._metrics.records_acquired += len(records)
        self._metrics.records_redelivered += redelivered
        return records

    def _name_undecodable(self, fetched: FetchOutcome, fetched_at: float) -> None:
        """Count and name the records ``fetched`` (the fetch sent at ``fetched_at``) acquired
        and could not decode: the member releases them with its next request."""
        undecodable = fetched.undecodable
        if not undecodable:
            return
        self._metrics.records_undecodable += len(undecodable)
        for (topic_id, topic, partition), group in itertools.groupby(
            undecodable, key=lambda r: (r.topic_id, r.topic, r.partition)
        ):
            offsets = [r.offset for r in group]
            log.warning(
                "share group %r: %d records of %s[%d] (offsets %d..%d) could not be decoded "
                "(%s); released to be delivered again (archived at the delivery limit)",
                self.group_id,
                len(offsets),
                topic,
                partition,
                offsets[0],
                offsets[-1],
                fetched.undecodable_why.get((topic_id, partition), "unknown"),
            )
        self._unpolled(undecodable, "undecodable", fetched_at)

    def _unpolled(self, records: Sequence[AcquiredRecord], reason: str, fetched_at: float) -> None:
        """Tell the hooks of ``records``, acquired by the fetch sent at ``fetched_at`` and
        never handed out, partition by partition (they come sorted by partition)."""
        if not self._hooks:
            return
        for (topic, partition), group in itertools.groupby(
            records, key=lambda r: (r.topic, r.partition)
        ):
            spent = list(group)
            self._hooks.records_unpolled(
                RecordsUnpolled(
                    group_id=self.group_id,
                    member_id=self.member_id,
                    topic=topic,
                    partition=partition,
                    offsets=tuple(r.offset for r in spent),
                    delivery_counts=tuple(r.delivery_count for r in spent),
                    reason=reason,
                    fetched_at=fetched_at,
                )
            )

    def _end_deliveries(self, fetched: FetchOutcome) -> None:
        """Report the acknowledgements not sent yet of records ``fetched`` delivers again (made,
        fetching ahead, before a poll handed the new delivery out): they were for the
        delivery that has ended, whose lock ran out, and must not apply to the new one, which
        this member holds now."""
        stale: dict[_Key, dict[int, AcknowledgeType]] = {}
        for run in fetched.runs:
            key = (run.topic_id, run.partition)
            pending = self._pending.get(key)
            if not pending:
                continue
            for offset, *_ in run.records:
                kind = pending.get(offset)
                if kind is not None:
                    stale.setdefault(key, {})[offset] = kind
        for key, offsets in stale.items():
            self._apply(key, offsets, int(ErrorCode.INVALID_RECORD_STATE))

    def _pending_of(self, key: _Key, partition: _Partition) -> dict[int, AcknowledgeType]:
        """The acknowledgements not sent yet of ``partition`` (named ``key``)."""
        if partition.pending is None:
            partition.pending = self._pending.setdefault(key, {})
        return partition.pending

    def _held_at(self, key: _Key, offset: int) -> _Held | None:
        partition = self._partitions.get(key)
        return partition.held.get(offset) if partition is not None else None

    def _accept_all_held(self) -> None:
        for key, partition in self._partitions.items():
            acks = self._pending_of(key, partition)
            for offset in partition.held:
                acks.setdefault(offset, AcknowledgeType.ACCEPT)

    def _take_pending(
        self,
    ) -> tuple[
        dict[_Key, dict[int, AcknowledgeType]], dict[TopicPartition, AcknowledgementError | None]
    ]:
        """The acknowledgements to send now; those of records whose lock has run out by this
        consumer's clock are reported at once instead, not sent: Kafka applies a
        partition's acknowledgements all or none, so one of them would fail the others. So
        are those of records fetched ahead again (see _end_deliveries)."""
        if self._fetched is not None and self._pending:
            assert self._fetched.outcome is not None
            self._end_deliveries(self._fetched.outcome)
        pending, self._pending = self._pending, {}
        now = self._clock.monotonic()
        expired: dict[_Key, dict[int, AcknowledgeType]] = {}
        for key, offsets in pending.items():
            partition = self._partitions.get(key)
            if partition is None:
                continue
            partition.pending = None
            held = partition.held
            for offset in [o for o in offsets if o in held and held[o].lock_until <= now]:
                expired.setdefault(key, {})[offset] = offsets.pop(offset)
        code = int(ErrorCode.INVALID_RECORD_STATE)
        refused = self._settle(expired, {key: code for key in expired})
        return {key: offsets for key, offsets in pending.items() if offsets}, refused

    def _settle(
        self,
        sent: dict[_Key, dict[int, AcknowledgeType]],
        codes: dict[_Key, int],
        fetched: FetchOutcome | None = None,
        sent_at: float | None = None,
    ) -> dict[TopicPartition, AcknowledgementError | None]:
        """Apply the outcome of ``sent`` (a code per partition) to the records held, and
        report it. A partition refused with INVALID_RECORD_STATE for several records is
        acknowledged again record by record, to tell which of them had run out, except
        those the fetch that carried ``sent`` delivered again (``fetched``): their lock
        had run out, and sent again the acknowledgement would apply to the new delivery."""
        results: dict[TopicPartition, AcknowledgementError | None] = {}
        for key, offsets in sent.items():
            # A partition the answer does not name: its outcome is unknown.
            code = codes.get(key, NO_ANSWER)
            outcome: int | dict[int, int] = code  # one code for every offset
            if code == ErrorCode.INVALID_RECORD_STATE and len(offsets) > 1 and not self._closed:
                again = {
                    offset
                    for run in (fetched.runs if fetched is not None else ())
                    if (run.topic_id, run.partition) == key
                    for offset, *_ in run.records
                }
                outcome = self._one_by_one(key, offsets, again)
            results[self._name(key)] = self._apply(key, offsets, outcome, sent_at)
        return results

    def _one_by_one(
        self, key: _Key, offsets: dict[int, AcknowledgeType], again: set[int]
    ) -> dict[int, int]:
        outcome: dict[int, int] = {}
        for offset, kind in sorted(offsets.items()):
            held = self._held_at(key, offset)
            expired = held is not None and held.lock_until <= self._clock.monotonic()
            if offset in again or expired:
                outcome[offset] = ErrorCode.INVALID_RECORD_STATE
                continue
            answer = self._member.acknowledge({key: {offset: kind}})
            outcome[offset] = answer.get(key, NO_ANSWER)
        return outcome

    def _apply(
        self,
        key: _Key,
        offsets: dict[int, AcknowledgeType],
        outcome: int | dict[int, int],
        sent_at: float | None = None,
    ) -> AcknowledgementError | None:
        """Apply the outcome of ``offsets``' acknowledgements (one code for all of them, or
        one per offset) to the records held, and report it; a RENEW's lock runs from
        ``sent_at``, when the request went (default: now)."""
        topic, partition = self._name(key)
        now = self._clock.monotonic() if sent_at is None else sent_at
        entry = self._partitions.get(key)
        held = entry.held if entry is not None else {}
        done: list[int] = []
        done_types: dict[AcknowledgeType, int] = {}
        failed: dict[int, list[int]] = {}
        if outcome == ErrorCode.NONE and AcknowledgeType.RENEW not in offsets.values():
            # The usual answer, every record of a poll settled: without the loop below.
            done = sorted(offsets)
            done_types = Counter(offsets.values())
            for offset in done:
                held.pop(offset, None)
        else:
            for offset, kind in sorted(offsets.items()):
                code = outcome if isinstance(outcome, int) else outcome[offset]
                if code == ErrorCode.NONE:
                    done.append(offset)
                    done_types[kind] = done_types.get(kind, 0) + 1
                    if kind is AcknowledgeType.RENEW:
                        record = held.get(offset)
                        if record is not None:
                            record.lock_until = now + record.lock_s
                        continue
                else:
                    failed.setdefault(code, []).append(offset)
                    if entry is not None and entry.pending:
                        # Made while this one was out (after a RENEW, fetching ahead), for
                        # the same delivery: it cannot take effect either; reported with it.
                        entry.pending.pop(offset, None)
                held.pop(offset, None)
        if entry is not None and not held and entry.pending is None:
            del self._partitions[key]
        metrics = self._metrics
        for kind, count in done_types.items():
            metrics.acknowledged[kind.name] = metrics.acknowledged.get(kind.name, 0) + count
        metrics.lock_renewals += done_types.get(AcknowledgeType.RENEW, 0)
        metrics.acknowledgements_failed += sum(len(f) for f in failed.values())
        if done:
            self._report((topic, partition), tuple(done), None)
            if self._hooks:
                by_type = sorted((kind.name, count) for kind, count in done_types.items())
                for ack_type, count in by_type:
                    self._hooks.records_acknowledged(
                        RecordsAcknowledged(
                            group_id=self.group_id,
                            member_id=self.member_id,
                            topic=topic,
                            partition=partition,
                            ack_type=ack_type,
                            count=count,
                        )
                    )
        error: AcknowledgementError | None = None
        for code, failed_offsets in sorted(failed.items()):
            error = _error(topic, partition, tuple(failed_offsets), code)
            self._report((topic, partition), error.offsets, error)
            if self._hooks:
                self._hooks.acknowledgement_failed(_failed_event(self, error))
        return error

    def _report(
        self,
        partition: TopicPartition,
        offsets: tuple[int, ...],
        error: AcknowledgementError | None,
    ) -> None:
        if self._on_acknowledged is not None:
            try:
                self._on_acknowledged(partition, offsets, error)
            except Exception:
                log.exception("on_acknowledged raised; the consumer carries on")
        elif error is not None:
            log.warning("share group %r: %s", self.group_id, error)

    def _name(self, key: _Key) -> TopicPartition:
        return (self._topic_names.get(key[0], str(key[0])), key[1])

    def _check_open(self) -> None:
        if self._closed:
            raise CoordinatorStateError(f"share group {self.group_id!r}: the consumer is closed")


def _error(topic: str, partition: int, offsets: tuple[int, ...], code: int) -> AcknowledgementError:
    if code == ErrorCode.INVALID_RECORD_STATE:
        return AcquisitionLockExpiredError(topic, partition, offsets, code)
    if code == NO_ANSWER:
        return AcknowledgementUncertainError(topic, partition, offsets, code)
    return AcknowledgementError(topic, partition, offsets, code)


def _failed_event(consumer: ShareConsumer, error: AcknowledgementError) -> AcknowledgementFailed:
    if isinstance(error, AcquisitionLockExpiredError):
        reason = "lock_expired"
    elif isinstance(error, AcknowledgementUncertainError):
        reason = "uncertain"
    else:
        reason = "refused"
    return AcknowledgementFailed(
        group_id=consumer.group_id,
        member_id=consumer.member_id,
        topic=error.topic,
        partition=error.partition,
        count=len(error.offsets),
        reason=reason,
        error="no response" if reason == "uncertain" else _error_name(error.code),
    )


def _merged(
    *results: dict[TopicPartition, AcknowledgementError | None],
) -> dict[TopicPartition, AcknowledgementError | None]:
    """Outcomes per partition, put together: an error wins over a success."""
    merged: dict[TopicPartition, AcknowledgementError | None] = {}
    for result in results:
        for partition, error in result.items():
            if merged.get(partition) is None:
                merged[partition] = error
    return merged
