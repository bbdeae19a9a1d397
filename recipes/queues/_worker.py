"""The share worker: handlers run on a pool of threads over one share consumer, and each
record is acknowledged by its handler's outcome (accepted, retried after a backoff,
rejected and copied to a dead-letter topic), its lock renewed while the handler works."""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from types import TracebackType
from typing import Any, Final

from typing_extensions import Self

from coordination.clock import SYSTEM_CLOCK, Clock, Thread
from coordination.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorStateError,
    RetriableBrokerError,
)
from coordination.share_group import AcknowledgeType
from coordination.transport import TransportError

from ._consumer import ShareConsumer, ShareRecord, TopicPartition
from ._errors import AcknowledgementError

log = logging.getLogger("recipes.queues")

_Handler = Callable[[ShareRecord], object]
"""``handler(record)``: process one record; returning accepts it, raising fails it."""

_RetryOn = tuple[type[BaseException], ...] | type[BaseException] | Callable[[BaseException], bool]
"""Which handler exceptions are retryable: exception classes, or a predicate."""

DEAD_LETTER_HEADERS: Final = (
    "__dlq.origin.topic",
    "__dlq.origin.partition",
    "__dlq.origin.offset",
    "__dlq.origin.timestamp",
    "__dlq.group.id",
    "__dlq.delivery.count",
    "__dlq.reason",
    "__dlq.error.class",
    "__dlq.error.message",
)
"""The headers a dead-letter copy carries after the record's own (UTF-8 text values)."""

# Kafka's group.share.delivery.count.limit is between 2 and 10.
_MAX_DELIVERY_LIMIT: Final = 10
# A record's lock is renewed once half of it is left: the other half covers the wait of a
# poll under way and the RENEW's round trip.
_RENEW_WHEN_LEFT: Final = 0.5
# The longest the poll thread waits before looking at finished handlers and locks again.
_POLL_MS: Final = 250
# The shortest wait for a renewal or a backoff that is not due yet.
_MIN_WAIT_S: Final = 0.001
_ERROR_MESSAGE_BYTES: Final = 1000
# The group's delivery limit may be read while records are held (those of the poll that
# joined): an answer must come well within their lock (30 s by default).
_LIMIT_LOOKUP_S: Final = 5.0
# A lookup that got no answer is tried again this much later at the soonest (each one
# may hold the poll thread up for _LIMIT_LOOKUP_S).
_LIMIT_RETRY_S: Final = 60.0


@dataclass(slots=True)
class WorkerMetrics:
    """Counts since the worker started. The acknowledgement counts are those the broker
    confirmed; a refused one is counted in ``acknowledgements_failed`` instead."""

    received: int = 0
    """Records delivered to the worker (by its consumer's polls)."""
    accepted: int = 0
    """ACCEPTs that took effect: the handler returned."""
    released: int = 0
    """RELEASEs that took effect: retries, failed dead-letter copies, records not started
    at close."""
    rejected: int = 0
    """REJECTs that took effect: poison records (copied to the dead-letter topic first if
    one is set)."""
    retries: int = 0
    """Retryable handler failures (the record is released after its backoff)."""
    dead_lettered: int = 0
    """Copies the dead-letter topic confirmed."""
    dead_letter_failures: int = 0
    """Copies that failed: the record was released instead of rejected."""
    released_unstarted: int = 0
    """Records released at close without being handled."""
    lock_renewals: int = 0
    """RENEWs that took effect (a handler or a backoff outlasting half the lock)."""
    acknowledgements_failed: int = 0
    """Acknowledgements that did not take effect (lock ran out, no answer, ...)."""
    handler_errors: int = 0
    """Handler calls that raised."""
    lag: dict[TopicPartition, int] = field(default_factory=dict)
    """The consumer's ``metrics().lag`` after its last poll: the share-partition lag of the
    assignment, read every ``lag_refresh_ms`` if that is set (see :class:`ShareConsumer`)."""


class _Why(enum.Enum):
    """Why the worker acknowledged a record as it did (for the metrics)."""

    ACCEPTED = "accepted"
    RETRY = "retry"  # a retryable failure: RELEASE after the backoff
    POISON = "poison"  # REJECT (copied to the dead-letter topic first, if one is set)
    DEAD_LETTER_FAILED = "dead_letter_failed"  # the copy failed: RELEASE, not REJECT
    UNSTARTED = "unstarted"  # delivered, never handled: RELEASE at close
    RENEW = "renew"


@dataclass(frozen=True, slots=True)
class _Decision:
    ack: AcknowledgeType
    why: _Why
    backoff_s: float = 0.0
    error: Exception | None = None  # a retry's: the failure, should it turn final


@dataclass(eq=False, slots=True)
class _Entry:
    """A record the worker holds: queued, being handled, or waiting out its backoff."""

    record: ShareRecord
    lock_s: float
    started: bool = False  # taken by a handler thread (under the condition)
    release_at: float | None = None  # waiting out a backoff until then
    lost: bool = False  # its lock ran out: not ours to acknowledge any more
    # A retry's failure, for the check at its release; queued again with it (a lower
    # delivery limit read since made its delivery the last), it is dead-lettered, not
    # handled again.
    failure: Exception | None = None


class ShareWorker:
    """Process a share group's records with a handler on ``concurrency`` threads, each
    record acknowledged by the handler's outcome.

    Example:
        import signal
        from recipes.queues import ShareRecord, ShareWorker

        def handle(record: ShareRecord) -> None:
            print("sending", record.value)  # raise to fail the record

        worker = ShareWorker(
            "emails", topics=["emails"], handler=handle, concurrency=4,
            dead_letter_topic="emails.dlq", bootstrap_servers="localhost:9092",
        )
        signal.signal(signal.SIGTERM, lambda *_: worker.stop())  # `kill` drains, then exits
        worker.run()  # blocks until stop(); then drains and closes

    Outcomes:
        The handler returns: ACCEPT. It raises a retryable exception (``retry_on``; by
        default every ``Exception``) and the record's ``delivery_count`` is below the last
        delivery (``max_deliveries``, or the group's limit at the broker if that is lower,
        see below): the record is held for its backoff (its lock renewed), then RELEASEd so
        that the broker delivers it again, to any member. Otherwise (a non-retryable
        exception, or the last delivery) it is poison: REJECT, after its copy to
        ``dead_letter_topic`` (if set) is confirmed; a copy that fails makes it a RELEASE
        instead, never a silent drop by the worker.

    The broker's delivery limit:
        The broker archives a record released (or whose lock runs out) at the group's
        ``share.delivery.count.limit``-th delivery (the broker's
        ``group.share.delivery.count.limit`` unless the group has its own; 5 by default),
        without any copy. So the worker reads that limit from the broker (DescribeConfigs
        on the group) once it has joined, before its first records go to the handlers, and
        again every ``delivery_limit_refresh_ms`` (an operator may change it), and a
        failure is final at delivery ``min(max_deliveries, limit)``: a poison record is
        dead-lettered at the broker's last delivery at the latest. A retry is checked
        again at its release (after its backoff): if a lower limit read meanwhile makes
        its delivery the last, it is dead-lettered instead. A limit lowered less than
        ``delivery_limit_refresh_ms`` before a failure may not be read yet. Where the limit
        cannot be read (no DESCRIBE_CONFIGS permission on the group, no answer), a warning
        names it and the last reading (or ``max_deliveries``) stands: keep
        ``max_deliveries`` below the broker's limit then. Either way, a record whose
        dead-letter copy fails at the broker's last delivery is released and so archived by
        the broker: a ``max_deliveries`` below the limit leaves that copy a delivery more
        to succeed.

    Concurrency:
        One poll thread owns the :class:`ShareConsumer` (which is not thread-safe): it
        polls while fewer than ``concurrency + prefetch`` records are held, hands records
        to the handler threads through a queue, and makes every acknowledgement, the
        handlers' outcomes included (they come back to it), and every RENEW. Handlers run
        on their own threads; they may call :meth:`stop`, never :meth:`close` (it waits for
        them).

    Closing:
        :meth:`stop` (or :meth:`close`) stops polling, RELEASEs at once every record not
        started (and those waiting out a backoff), lets the running handlers finish within
        ``drain_timeout_ms`` (renewing their locks) and acknowledges their outcomes, then
        closes the consumer, which releases whatever is still held and leaves the group.
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str],
        handler: _Handler,
        concurrency: int = 1,
        prefetch: int | None = None,
        retry_on: _RetryOn = (Exception,),
        max_deliveries: int = 4,
        delivery_limit_refresh_ms: int = 30_000,
        redelivery_backoff_ms: int = 1000,
        redelivery_backoff_max_ms: int = 10_000,
        dead_letter_topic: str | None = None,
        dead_letter_producer: Any = None,
        dead_letter_timeout_ms: int = 30_000,
        drain_timeout_ms: int = 30_000,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start` (or :meth:`run`).

        Args:
            group_id: the share group (Kafka ``group.id``).
            topics: the topics to consume.
            handler: ``handler(record)``, called on a handler thread for each record.
            concurrency: handler threads (default 1).
            prefetch: records fetched ahead of the handlers, waiting for a free thread
                (default ``concurrency``); their locks are renewed while they wait.
            retry_on: the retryable exceptions: a class, a tuple of classes, or a predicate
                ``retry_on(exc) -> bool``. Default: every ``Exception``.
            max_deliveries: the delivery (``record.delivery_count``) from which a failure
                is final (default 4, 1 to 10), or the group's delivery limit at the broker
                (``share.delivery.count.limit``, 5 by default) if that is lower: see "The
                broker's delivery limit" above. Below the broker's limit, a failed
                dead-letter copy at the last delivery leaves the record one more delivery.
            delivery_limit_refresh_ms: how often the group's delivery limit is read again
                from the broker (default 30000), so that a change an operator makes is in
                force at the worker within that time; one DescribeConfigs each time, from
                the poll thread.
            redelivery_backoff_ms: how long a record whose handler failed retryably is held
                before its release for redelivery (default 1000), doubled with each
                delivery, up to ``redelivery_backoff_max_ms`` (default 10000). 0 releases at
                once. (``retry_backoff_ms`` is the member's wait between failed requests,
                passed to the consumer like the other ``settings``.)
            dead_letter_topic: where poison records are copied before their REJECT
                (default None: rejected without a copy). Must not be one of ``topics``.
            dead_letter_producer: a kafka-python ``KafkaProducer`` (or an object with its
                ``send(topic, key=, value=, headers=).get(timeout)``) for the copies;
                default: one made at the first copy from the consumer's connection settings
                (bootstrap servers, TLS, SASL) with ``acks="all"``, closed with the worker.
            dead_letter_timeout_ms: how long a copy may take to be confirmed (default
                30000); then it counts as failed.
            drain_timeout_ms: how long closing waits for the running handlers (default
                30000).
            clock: the clock (default the system's), as for :class:`ShareConsumer`.
            **settings: as for :class:`ShareConsumer` (``bootstrap_servers``, security
                settings, ``session_timeout_ms``, ``retry_backoff_ms``, ``rack_id``,
                ``transport``, ...), except
                ``acknowledgement_mode``, ``on_acknowledged`` and ``max_poll_records``,
                which the worker sets. ``acquire_mode`` is ``"record_limit"`` unless given:
                a fetch acquires no more records than the worker has room for.

        Raises:
            ConfigurationError: an invalid setting; the message names it.
        """
        topics = list(topics)
        self._check_settings(settings)
        _check(callable(handler), "handler must be callable: handler(record) -> None")
        _check_int("concurrency", concurrency, 1)
        prefetch = concurrency if prefetch is None else prefetch
        _check_int("prefetch", prefetch, 0)
        _check_int(
            "max_deliveries",
            max_deliveries,
            1,
            _MAX_DELIVERY_LIMIT,
            hint=": the group's share.delivery.count.limit at the broker (2 to 10) caps it",
        )
        _check_int("delivery_limit_refresh_ms", delivery_limit_refresh_ms, 1)
        _check_int("redelivery_backoff_ms", redelivery_backoff_ms, 0)
        _check_int(
            "redelivery_backoff_max_ms",
            redelivery_backoff_max_ms,
            redelivery_backoff_ms,
            None,
            "redelivery_backoff_ms",
        )
        _check_int("dead_letter_timeout_ms", dead_letter_timeout_ms, 1)
        _check_int("drain_timeout_ms", drain_timeout_ms, 0)
        self._is_retryable = _retry_predicate(retry_on)
        if dead_letter_topic is not None:
            _check(
                isinstance(dead_letter_topic, str) and dead_letter_topic.strip() != "",
                f"dead_letter_topic must be a topic name, got {dead_letter_topic!r}",
            )
            _check(
                dead_letter_topic not in topics,
                f"dead_letter_topic {dead_letter_topic!r} is one of the consumed topics: "
                "poison records would come back; use a topic of its own",
            )
        _check(
            dead_letter_producer is None or dead_letter_topic is not None,
            "dead_letter_producer is set without a dead_letter_topic: set the topic too",
        )
        self._handler = handler
        self._concurrency = concurrency
        self._capacity = concurrency + prefetch
        self._max_deliveries = max_deliveries
        # The delivery from which a failure is final: min(max_deliveries, the broker's
        # limit) once the poll thread has read the limit (before the handlers see records),
        # and again at each refresh.
        self._final_delivery = max_deliveries
        self._limit: int | None = None  # the last reading
        self._limit_refresh_s = delivery_limit_refresh_ms / 1000
        self._limit_lookup_due: float | None = 0.0  # None: given up (the broker refused)
        self._limit_warned = False  # a failed lookup warned since the last reading
        self._redelivery_backoff_s = redelivery_backoff_ms / 1000
        self._redelivery_backoff_max_s = redelivery_backoff_max_ms / 1000
        self._dead_letter_topic = dead_letter_topic
        self._producer = dead_letter_producer
        self._own_producer = dead_letter_producer is None
        self._dead_letter_timeout_s = dead_letter_timeout_ms / 1000
        self._drain_timeout_s = drain_timeout_ms / 1000
        self._clock = clock or SYSTEM_CLOCK
        # Whole batches would lock records beyond the worker's capacity, idle while
        # other members could take them.
        settings.setdefault("acquire_mode", "record_limit")
        self._consumer = ShareConsumer(
            group_id,
            topics=topics,
            acknowledgement_mode="explicit",
            max_poll_records=self._capacity,
            on_acknowledged=self._on_acknowledged,
            clock=self._clock,
            **settings,
        )
        # Shared with the handler threads, under the condition:
        self._cond = self._clock.condition()
        self._queue: deque[_Entry] = deque()
        self._finished: list[tuple[_Entry, _Decision]] = []
        self._handlers_exit = False
        # The poll thread's own:
        # An ordered set (a dict's keys): the same order in every run of a history, as
        # the simulator replays it (a set of these would follow their memory addresses).
        self._held: dict[_Entry, None] = {}
        self._acked: dict[tuple[str, int, int], _Why] = {}  # acknowledged, outcome unknown
        self._unsent = False  # acknowledgements made since the last poll or commit
        self._metrics = WorkerMetrics()
        self._metrics_lock = threading.Lock()
        self._producer_lock = threading.Lock()
        self._stopping = self._clock.event()
        self._threads: list[Thread] = []
        self._poll_thread: Thread | None = None
        self._error: BaseException | None = None
        self._lifecycle = threading.Lock()
        self._closed = False

    @staticmethod
    def _check_settings(settings: dict[str, Any]) -> None:
        for name, instead in (
            ("acknowledgement_mode", "the worker acknowledges explicitly"),
            ("on_acknowledged", "read metrics() instead"),
            ("max_poll_records", "set concurrency and prefetch instead"),
        ):
            _check(name not in settings, f"{name} is the worker's to set: {instead}")

    # ------------------------------------------------------------------ public face

    @property
    def group_id(self) -> str:
        return self._consumer.group_id

    @property
    def member_id(self) -> str:
        return self._consumer.member_id

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the poll thread (a fatal broker error, ...), or None."""
        return self._error

    @property
    def final_delivery(self) -> int:
        """The delivery from which a failure is final: ``max_deliveries``, or the group's
        delivery limit at the broker once read, if that is lower."""
        return self._final_delivery

    def metrics(self) -> WorkerMetrics:
        """A copy of the worker's counts."""
        with self._metrics_lock:
            m = self._metrics
            copy = WorkerMetrics(**{f.name: getattr(m, f.name) for f in fields(m)})
            copy.lag = dict(m.lag)
            return copy

    def start(self) -> None:
        """Start the poll thread and the handler threads, and return; the poll thread joins
        the group. Errors come out of :meth:`run` (and :attr:`error`).

        Raises:
            CoordinatorStateError: the worker was started already.
        """
        with self._lifecycle:
            if self._poll_thread is not None or self._closed:
                raise CoordinatorStateError("the worker was started already, or closed")
            name = f"share-worker-{self.group_id}"
            self._threads.extend(self._handler_threads(name))
            for thread in self._threads:
                thread.start()
            self._poll_thread = self._clock.thread(self._serve_poll, f"{name}-poll")
            self._poll_thread.start()

    def run(self) -> None:
        """Start (unless started) and block until :meth:`stop` is called or the worker
        fails; returns once it has drained and closed. KeyboardInterrupt closes it too.

        Raises:
            ShareGroupsUnsupportedError, FatalBrokerError, ...: the error that stopped the
                poll thread (after the drain).
        """
        if self._poll_thread is None:
            self.start()
        try:
            self._join_poll_thread()
        except KeyboardInterrupt:
            self.close()
            raise
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Ask the worker to drain and close, and return at once. Safe from any thread,
        a handler or a signal handler included."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Stop, and wait for the drain (see the class docstring) and the consumer's close.
        Idempotent. The error that stopped the worker, if any, is logged, not raised.

        Raises:
            CoordinatorStateError: called from a handler (it would wait for itself): call
                :meth:`stop` there.
        """
        if self._clock.current_thread() in self._threads:
            raise CoordinatorStateError(
                "close() was called from a handler, which the drain waits for: call stop()"
            )
        self.stop()
        with self._lifecycle:
            never_started = self._poll_thread is None and not self._closed
            self._closed = True
        if never_started:
            self._drain()
        elif self._poll_thread is not None:
            self._join_poll_thread()

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
        return f"<ShareWorker group={self.group_id!r} concurrency={self._concurrency}>"

    def _join_poll_thread(self) -> None:
        thread = self._poll_thread
        assert thread is not None
        while thread.is_alive():
            thread.join(0.5)  # in slices: the main thread stays interruptible

    # ------------------------------------------------------------------ the poll thread

    def _serve_poll(self) -> None:
        try:
            while not self._stopping.is_set():
                self._step()
        except BaseException as exc:
            self._error = exc
            log.error("share group %r: the worker stops on %r", self.group_id, exc)
        self._drain()

    def _step(self) -> None:
        if self._consumer.member.member_epoch > 0:
            # Joined: read the limit if due (the first time before records wait on it),
            # before the releases below are checked against it.
            self._learn_delivery_limit()
        self._take_finished()
        now = self._clock.monotonic()
        for entry in [e for e in self._held if e.release_at is not None and e.release_at <= now]:
            self._release_retry(entry)
        self._renew(now)
        wait_s = self._next_due(now)
        if len(self._held) < self._capacity:
            records = self._consumer.poll(timeout_ms=int(wait_s * 1000))
            self._unsent = False
            self._dispatch(records)
        else:
            self._send()
            with self._cond:
                if not self._finished and not self._stopping.is_set():
                    self._cond.wait(wait_s)

    def _dispatch(self, records: list[ShareRecord]) -> None:
        if records:
            # Before the handlers see them (the first poll may bring records with the join).
            self._learn_delivery_limit()
        now = self._clock.monotonic()
        entries = []
        for record in records:
            deadline = self._consumer.lock_deadline(record)
            entries.append(_Entry(record, lock_s=max(0.0, (deadline or now) - now)))
        self._held.update(dict.fromkeys(entries))
        lag = self._consumer.metrics().lag  # refreshed by the poll, if due
        with self._metrics_lock:
            self._metrics.received += len(entries)
            self._metrics.lag = lag
        with self._cond:
            self._queue.extend(entries)
            self._cond.notify_all()

    def _learn_delivery_limit(self) -> None:
        """Read the group's delivery limit at the broker, if due (at first, then every
        ``delivery_limit_refresh_ms``), and make a failure final at ``min(max_deliveries,
        limit)`` (see the class docstring)."""
        due = self._limit_lookup_due
        if due is None or self._clock.monotonic() < due:
            return
        try:
            limit = self._consumer.delivery_count_limit(timeout=_LIMIT_LOOKUP_S)
        except (TransportError, RetriableBrokerError) as e:
            # No answer: asked again later; meanwhile the last reading stands.
            retry_s = max(self._limit_refresh_s, _LIMIT_RETRY_S)
            self._limit_lookup_due = self._clock.monotonic() + retry_s
            self._warn_limit_unknown(f"no answer: {e}", f"asked again in {retry_s:.0f} s")
            return
        except CoordinationError as e:  # the broker refused: it will not say
            self._limit_lookup_due = None
            self._warn_limit_unknown(f"{type(e).__name__}: {e}", "not asked again")
            return
        if limit is None:
            self._limit_lookup_due = None
            self._warn_limit_unknown("the broker does not name it", "not asked again")
            return
        self._limit_lookup_due = self._clock.monotonic() + self._limit_refresh_s
        self._limit_warned = False
        if limit == self._limit:
            return
        was = "" if self._limit is None else f" (was {self._limit})"
        self._limit = limit
        if limit < self._max_deliveries:
            log.warning(
                "share group %r: max_deliveries=%d is above the group's delivery limit at the "
                "broker (share.delivery.count.limit=%d%s), which wins: a failure is final at "
                "delivery %d, when the record is still copied to the dead-letter topic rather "
                "than archived by the broker",
                self.group_id,
                self._max_deliveries,
                limit,
                was,
                limit,
            )
        else:
            log.log(
                logging.DEBUG if not was else logging.INFO,
                "share group %r: the group's delivery limit at the broker is %d%s",
                self.group_id,
                limit,
                was,
            )
        with self._cond:  # the handler threads read it
            self._final_delivery = min(self._max_deliveries, limit)

    def _warn_limit_unknown(self, why: str, then: str) -> None:
        """Warn of a failed lookup, once until a lookup succeeds again."""
        if self._limit_warned:
            log.debug("share group %r: delivery limit lookup failed (%s)", self.group_id, why)
            return
        self._limit_warned = True
        if self._limit is None:
            stands = f"a failure is final at max_deliveries={self._max_deliveries}"
        else:
            stands = (
                f"the last one read ({self._limit}) stands: a failure is final at delivery "
                f"{self._final_delivery}"
            )
        log.warning(
            "share group %r: could not read the group's delivery limit from the broker "
            "(share.delivery.count.limit, DescribeConfigs on the group: %s; %s): %s; a record "
            "the broker delivers as many times as its limit is archived without a "
            "dead-letter copy when released, so keep max_deliveries below the broker's limit",
            self.group_id,
            why,
            then,
            stands,
        )

    def _take_finished(self) -> None:
        """Acknowledge the outcomes the handlers came back with."""
        with self._cond:
            finished, self._finished = self._finished, []
        for entry, decision in finished:
            if entry.lost:
                self._held.pop(entry, None)
                log.warning(
                    "share group %r: %s handled (%s) after its lock ran out: not acknowledged, "
                    "it is delivered again",
                    self.group_id,
                    _where(entry.record),
                    decision.why.value,
                )
            elif decision.error is not None and not self._stopping.is_set():  # a retry
                entry.failure = decision.error
                if decision.backoff_s > 0:
                    entry.release_at = self._clock.monotonic() + decision.backoff_s
                else:
                    self._release_retry(entry)
            else:
                self._acknowledge(entry, decision.ack, decision.why)

    def _release_retry(self, entry: _Entry) -> None:
        """RELEASE a retry, unless a lower delivery limit read since its failure makes its
        delivery the last: released there, the broker would archive it without a copy, so
        it goes back to a handler thread to be dead-lettered and rejected."""
        if entry.failure is None or entry.record.delivery_count < self._final_delivery:
            self._acknowledge(entry, AcknowledgeType.RELEASE, _Why.RETRY)
            return
        with self._metrics_lock:
            self._metrics.retries -= 1  # not retried after all
        entry.release_at = None
        entry.started = False
        with self._cond:
            self._queue.appendleft(entry)
            self._cond.notify_all()

    def _acknowledge(self, entry: _Entry, ack: AcknowledgeType, why: _Why) -> None:
        self._held.pop(entry, None)
        record = entry.record
        try:
            self._consumer.acknowledge(record, ack)
        except CoordinatorStateError:
            # Refused at a RENEW or a send meanwhile (counted there): no longer ours.
            log.warning("share group %r: %s is no longer held", self.group_id, _where(record))
            return
        self._acked[(record.topic, record.partition, record.offset)] = why
        self._unsent = True

    def _renew(self, now: float) -> None:
        """RENEW the lock of each record held once half of it is left; let go of those
        whose lock ran out already (a RENEW that failed, a poll thread held up)."""
        for entry in list(self._held):
            if entry.lost:
                continue
            deadline = self._consumer.lock_deadline(entry.record)
            if deadline is None or deadline <= now:
                self._lose(entry)
            elif deadline - entry.lock_s * _RENEW_WHEN_LEFT <= now:  # as _next_due has it
                record = entry.record
                self._consumer.acknowledge(record, AcknowledgeType.RENEW)
                self._acked[(record.topic, record.partition, record.offset)] = _Why.RENEW
                self._unsent = True

    def _lose(self, entry: _Entry) -> None:
        entry.lost = True
        with self._cond:
            started = entry.started
            if not started:
                self._queue.remove(entry)
        if not started:
            self._held.pop(entry, None)
        # A started one stays held until its handler comes back (it is not waited for).
        log.warning(
            "share group %r: the lock of %s ran out; it may go to another member",
            self.group_id,
            _where(entry.record),
        )

    def _next_due(self, now: float) -> float:
        """Seconds until a lock needs renewing or a backoff ends (at most _POLL_MS)."""
        due = now + _POLL_MS / 1000
        for entry in self._held:
            if entry.lost:
                continue
            if entry.release_at is not None:
                due = min(due, entry.release_at)
            deadline = self._consumer.lock_deadline(entry.record)
            if deadline is not None:
                due = min(due, deadline - entry.lock_s * _RENEW_WHEN_LEFT)
        # Due now, or in at least a millisecond: a wait shorter than the clock's resolution
        # ends with the clock where it was, the renewal still not due by _renew's sum (its
        # rounding differs), and the poll thread would spin.
        return 0.0 if due <= now else max(due - now, _MIN_WAIT_S)

    def _send(self) -> None:
        """Send the acknowledgements made since the last poll, now."""
        if self._unsent:
            self._unsent = False
            self._consumer.commit()  # outcomes come to _on_acknowledged

    def _on_acknowledged(
        self,
        partition: TopicPartition,
        offsets: tuple[int, ...],
        error: AcknowledgementError | None,
    ) -> None:
        """The consumer's report of acknowledgements (on the poll thread)."""
        with self._metrics_lock:
            m = self._metrics
            for offset in offsets:
                why = self._acked.pop((partition[0], partition[1], offset), None)
                if error is not None:
                    m.acknowledgements_failed += 1
                elif why is _Why.ACCEPTED:
                    m.accepted += 1
                elif why is _Why.POISON:
                    m.rejected += 1
                elif why is _Why.RENEW:
                    m.lock_renewals += 1
                else:  # a RELEASE: by the worker, or by the consumer's close
                    m.released += 1
                    if why is _Why.UNSTARTED:
                        m.released_unstarted += 1
        if error is not None:
            log.warning("share group %r: %s", self.group_id, error)

    # ------------------------------------------------------------------ draining

    def _drain(self) -> None:
        """Release what was not started, wait for the running handlers, close."""
        self._stopping.set()
        try:
            self._take_finished()
            with self._cond:
                unstarted = list(self._queue)
                self._queue.clear()
            for entry in unstarted:
                self._acknowledge(entry, AcknowledgeType.RELEASE, _Why.UNSTARTED)
            for entry in [e for e in self._held if e.release_at is not None]:
                self._acknowledge(entry, AcknowledgeType.RELEASE, _Why.RETRY)
            self._send()  # at once: the other members get them now
            self._wait_for_handlers()
        except Exception:
            log.exception("share group %r: draining failed; closing", self.group_id)
        try:
            self._consumer.close()  # releases what is still held
        except Exception:
            log.exception("share group %r: closing the consumer failed", self.group_id)
        with self._cond:
            self._handlers_exit = True
            self._cond.notify_all()
        if self._producer is not None and self._own_producer:
            try:
                self._producer.close(timeout=5)
            except Exception:
                log.exception(
                    "share group %r: closing the dead-letter producer failed", self.group_id
                )

    def _wait_for_handlers(self) -> None:
        deadline = self._clock.monotonic() + self._drain_timeout_s
        while True:
            self._take_finished()
            now = self._clock.monotonic()
            running = [e for e in self._held if not e.lost]
            if not running:
                return
            if now >= deadline:
                log.warning(
                    "share group %r: %d handlers still running after the drain timeout; "
                    "their records are released and may be handled again elsewhere",
                    self.group_id,
                    len(running),
                )
                return
            self._renew(now)
            self._send()
            with self._cond:
                if not self._finished:
                    self._cond.wait(min(self._next_due(now), deadline - now))

    # ------------------------------------------------------------------ handler threads
    #
    # The records queued for the handlers are taken with _take() and their outcomes given
    # back with _finish(); what an outcome means is _decide()'s. Here ``concurrency``
    # threads each call the handler in turn; the asyncio face starts one thread instead,
    # which runs the handlers as coroutines on its loop (``_handler_threads`` is the seam).

    def _handler_threads(self, name: str) -> list[Thread]:
        """The threads that run the handlers (not started)."""
        return [
            self._clock.thread(self._serve_handler, f"{name}-handler-{n}")
            for n in range(self._concurrency)
        ]

    def _serve_handler(self) -> None:
        while (entry := self._take()) is not None:
            if entry.failure is not None:
                decision = self._dead_letter_at_release(entry)
            else:
                decision = self._handle(entry.record)
            self._finish(entry, decision)

    def _take(self) -> _Entry | None:
        """The next record for a handler, marked started; None once the handlers are to
        exit."""
        with self._cond:
            while not self._queue and not self._handlers_exit:
                self._cond.wait()
            if not self._queue:
                return None
            return self._start_next_locked()

    def _start_next_locked(self) -> _Entry:
        """The queue's next record, taken off it and marked started (under the condition:
        the drain releases only the records no handler started)."""
        entry = self._queue.popleft()
        entry.started = True
        return entry

    def _finish(self, entry: _Entry, decision: _Decision) -> None:
        """Hand a record's decided acknowledgement to the poll thread."""
        with self._cond:
            self._finished.append((entry, decision))
            self._cond.notify_all()

    def _serve_started_handlers(
        self,
        begin: Callable[[ShareRecord, Callable[[BaseException | None], None]], None],
        gone: Callable[[], BaseException | None],
        check_every_s: float,
    ) -> None:
        """The one handler thread of handlers that run elsewhere (the asyncio face's
        coroutines, on its loop): ``begin(record, done)`` starts one without waiting for
        it, and ``done(raised)`` is called, from any thread, once it returned (``raised``
        None) or raised. At most ``concurrency`` run at once. Their outcomes are decided
        here, in turn (a dead-letter copy holds the next ones up, as it holds a handler
        thread). While any runs, ``gone()`` is asked every ``check_every_s``: an error
        says that none of them can end any more (the loop was closed), and each is
        decided as having raised it."""
        running: set[_Entry] = set()  # begun, not ended; under the condition
        ended: list[tuple[_Entry, BaseException | None]] = []  # under the condition

        def ending(entry: _Entry) -> Callable[[BaseException | None], None]:
            def done(raised: BaseException | None) -> None:
                with self._cond:
                    if entry in running:  # else given up for gone already
                        running.discard(entry)
                        ended.append((entry, raised))
                        self._cond.notify_all()

            return done

        while True:
            lost = gone() if running else None
            with self._cond:
                if lost is not None:
                    ended.extend((entry, lost) for entry in running)
                    running.clear()
                outcomes = ended[:]
                ended.clear()
                starting = []
                while self._queue and len(running) < self._concurrency:
                    entry = self._start_next_locked()
                    starting.append(entry)
                    if entry.failure is None:
                        running.add(entry)
                if not outcomes and not starting:
                    if self._handlers_exit and not self._queue:
                        return  # the worker closed; what still runs is not waited for
                    self._cond.wait(check_every_s if running else None)
                    continue
            for entry in starting:
                if entry.failure is not None:
                    self._finish(entry, self._dead_letter_at_release(entry))
                else:
                    begin(entry.record, ending(entry))
            for entry, raised in outcomes:
                self._finish(entry, self._decide(entry.record, raised))

    def _dead_letter_at_release(self, entry: _Entry) -> _Decision:
        """A retry whose delivery became the last (see _release_retry): no handler runs."""
        assert entry.failure is not None
        return self._poison(entry.record, entry.failure, "max_deliveries")

    def _handle(self, record: ShareRecord) -> _Decision:
        """Run the handler and decide the record's acknowledgement."""
        try:
            self._handler(record)
        except BaseException as exc:
            return self._decide(record, exc)
        return self._decide(record, None)

    def _decide(self, record: ShareRecord, raised: BaseException | None) -> _Decision:
        """The acknowledgement of ``record`` whose handler returned (``raised`` None) or
        raised ``raised``. May block: a dead-letter copy waits for its confirmation."""
        if raised is None:
            return _Decision(AcknowledgeType.ACCEPT, _Why.ACCEPTED)
        if isinstance(raised, Exception):
            return self._failed(record, raised)
        # SystemExit, KeyboardInterrupt in a handler: stop, and let the record go.
        log.error("share group %r: a handler raised %r; stopping", self.group_id, raised)
        self._error = raised
        self.stop()
        return _Decision(AcknowledgeType.RELEASE, _Why.RETRY)

    def _failed(self, record: ShareRecord, exc: Exception) -> _Decision:
        with self._metrics_lock:
            self._metrics.handler_errors += 1
        retryable = self._is_retryable(exc)
        with self._cond:
            final_delivery = self._final_delivery
        if retryable and record.delivery_count < final_delivery:
            with self._metrics_lock:
                self._metrics.retries += 1
            backoff = self._redelivery_backoff_s * 2 ** (record.delivery_count - 1)
            log.info(
                "share group %r: %s failed (%r), delivery %d: retried",
                self.group_id,
                _where(record),
                exc,
                record.delivery_count,
            )
            backoff = min(backoff, self._redelivery_backoff_max_s)
            return _Decision(AcknowledgeType.RELEASE, _Why.RETRY, backoff, exc)
        return self._poison(record, exc, "max_deliveries" if retryable else "not_retryable")

    def _poison(self, record: ShareRecord, exc: Exception, reason: str) -> _Decision:
        """Copy ``record`` to the dead-letter topic (if set), then REJECT it; RELEASE it
        if the copy fails."""
        log.warning(
            "share group %r: %s failed (%r), delivery %d: poison (%s)",
            self.group_id,
            _where(record),
            exc,
            record.delivery_count,
            reason,
        )
        if self._dead_letter_topic is not None and not self._dead_letter(record, reason, exc):
            return _Decision(AcknowledgeType.RELEASE, _Why.DEAD_LETTER_FAILED)
        return _Decision(AcknowledgeType.REJECT, _Why.POISON)

    def _dead_letter(self, record: ShareRecord, reason: str, exc: Exception) -> bool:
        """Copy ``record`` to the dead-letter topic; True once the copy is confirmed."""
        assert self._dead_letter_topic is not None
        try:
            producer = self._dead_letter_producer()
            future = producer.send(
                self._dead_letter_topic,
                key=record.key,
                # kafka-python sends no record without a key and a value
                value=b"" if record.value is None and record.key is None else record.value,
                headers=_dead_letter_headers(record, self.group_id, reason, exc),
            )
            future.get(timeout=self._dead_letter_timeout_s)
        except Exception as failure:
            with self._metrics_lock:
                self._metrics.dead_letter_failures += 1
            log.error(
                "share group %r: copying %s to %r failed (%r): released, not rejected",
                self.group_id,
                _where(record),
                self._dead_letter_topic,
                failure,
            )
            return False
        with self._metrics_lock:
            self._metrics.dead_lettered += 1
        return True

    def _dead_letter_producer(self) -> Any:
        with self._producer_lock:
            if self._producer is None:
                from kafka import KafkaProducer

                timeout_ms = int(self._dead_letter_timeout_s * 1000)
                self._producer = KafkaProducer(
                    **self._consumer.member.config.client_settings(),
                    acks="all",
                    delivery_timeout_ms=timeout_ms,
                    max_block_ms=timeout_ms,
                )
            return self._producer


def _dead_letter_headers(
    record: ShareRecord, group_id: str, reason: str, exc: BaseException
) -> list[tuple[str, bytes]]:
    """The headers of ``record``'s dead-letter copy: its own (a null value sent empty:
    kafka-python's producer takes bytes only), then :data:`DEAD_LETTER_HEADERS`."""
    own = [(key, value if value is not None else b"") for key, value in record.headers]
    values = (
        record.topic,
        str(record.partition),
        str(record.offset),
        str(record.timestamp),
        group_id,
        str(record.delivery_count),
        reason,
        f"{type(exc).__module__}.{type(exc).__qualname__}",
        str(exc)[:_ERROR_MESSAGE_BYTES],
    )
    return own + [
        (name, v.encode("utf-8", "replace"))
        for name, v in zip(DEAD_LETTER_HEADERS, values, strict=True)
    ]


def _retry_predicate(retry_on: _RetryOn) -> Callable[[BaseException], bool]:
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    if isinstance(retry_on, tuple):
        classes = retry_on
        _check(
            all(isinstance(c, type) and issubclass(c, BaseException) for c in classes),
            f"retry_on must be exception classes or a predicate, got {retry_on!r}",
        )
        return lambda exc: isinstance(exc, classes)
    _check(
        callable(retry_on), f"retry_on must be exception classes or a predicate, got {retry_on!r}"
    )
    return retry_on


def _where(record: ShareRecord) -> str:
    return f"{record.topic}[{record.partition}] offset {record.offset}"


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigurationError(message)


def _check_int(
    name: str,
    value: object,
    low: int,
    high: int | None = None,
    low_name: str = "",
    hint: str = "",
) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    ok = ok and (high is None or value <= high)  # type: ignore[operator]
    floor = f"{low_name} ({low})" if low_name else str(low)
    bounds = f"from {low} to {high}" if high is not None else f"at least {floor}"
    _check(ok, f"{name} must be an integer {bounds}, got {value!r}{hint}")
