"""Share consumers (KIP-932) under simulation: ``recipes.queues.ShareConsumer`` members of one
share group reading a topic whose records appear as simulated time goes on, against the
simulator's model of Kafka's share groups (``_share_group_coordinator.py``).

Each consumer acknowledges explicitly, record by record, by a rule drawn from the seed: most
records are accepted, some released (delivered again), some rejected, some renewed (RENEW,
then accepted at the next round), a few left to their lock. On top of the history's faults
(members paused, killed, hung and replaced, cut off; answers lost; the coordinator moved;
brokers stopped), the partitions' leaders move now and then, and fail over when their broker
stops.

Checked at every simulated instant, from what the model applied, not from what the consumers
believe:

- a record the consumer reported accepted (``on_acknowledged`` with no error) was accepted by
  that member at the model, and is acknowledged there; more generally, every acknowledgement
  the consumer reports as done was applied by the model, for that member, with that type (the
  client never reports success for an acknowledgement the model refused);
- no record accepted twice (by the model, or reported so by two consumers);
- no record held (acquired, lock valid) by two members at once;
- no delivery count above the limit, at the model or in a record handed to the application;
- every record a poll hands out, and every record ``on_records_unpolled`` names, is a delivery
  the model made to that member, with that delivery count, and each delivery is accounted
  for once at most (handed out or named, not both, not twice); a record named for its lock
  having run out is no longer held by that member at the model under a lock still running,
  and was named no sooner than the lock's duration after the fetch that acquired it was
  sent; a naming has one of the consumer's reasons (``lock_expired``, ``closed``,
  ``undecodable``: the model's batches always decode, so the last is never reached, but a
  naming for it is held to the same accounting).

After the faults, production stops and the consumers drain: within the bound, every record
produced is acknowledged or archived at the model (none lost), and every delivery whose
ShareFetch answer reached a consumer was handed out or named to ``on_records_unpolled`` by
the time the consumer closed or returned from a poll begun after the answer (none ended
unseen and unnamed; a consumer killed meanwhile is excused: its hooks died with it).
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordination.hooks import CoordinationHooks, RecordsUnpolled
from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    HistorySettings,
    Host,
    Process,
    Scheduler,
    SimCluster,
    SimEventLoop,
    SimTransport,
    Trace,
    Violation,
)
from coordination.testing.simulation._share_group_coordinator import (
    RecordState,
    ShareGroupsModel,
    ShareSettings,
)

from ._loops import TurningLoops

TOPIC = "jobs"
TOPIC_ID = uuid.UUID(int=0x5EA4E)
PARTITIONS = 3
# The reasons on_records_unpolled may give (hooks.RecordsUnpolled.reason).
UNPOLLED_REASONS = frozenset({"lock_expired", "closed", "undecodable"})
RECORDS_PER_S = 4.0  # per partition
MAX_POLL_RECORDS = 10
SETTINGS = ShareSettings()
# How often a consumer's polls read the lag (DescribeShareGroupOffsets to the coordinator).
LAG_REFRESH_MS = 2000
# How long after a leader's broker stops until another broker leads its partitions, at most.
FAILOVER_TICK_S = 0.25
# The chance, at each tick while the faults go on, that a partition's leadership moves.
LEADER_MOVE_CHANCE = 0.04


class SimShareTopic:
    """Every partition gains a record each 1/RECORDS_PER_S simulated seconds until stopped."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.stopped: float | None = None

    def end(self, partition: int, now: float) -> int:
        if self.stopped is not None:
            now = min(now, self.stopped)
        return int((now - self.started) * RECORDS_PER_S + 1e-9)

    def next_record_at(self, partition: int, now: float) -> float | None:
        at = self.started + (self.end(partition, now) + 1) / RECORDS_PER_S
        return None if self.stopped is not None and at > self.stopped else at


class _Timers:
    """The scheduler as the model's timers."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def now(self) -> float:
        return self._scheduler.now

    def call_at(self, when: float, fn: Callable[[], None]) -> Any:
        return self._scheduler.call_at(when, fn)


class SimLeaders:
    """The cluster's metadata as the consumer reads it (``Leaders``): the model's leaders,
    at once; a consumer cut off from the brokers learns nothing."""

    def __init__(self, model: ShareGroupsModel, cluster: SimCluster, transport: SimTransport):
        self._model = model
        self._cluster = cluster
        self._transport = transport

    def locate(self, topics: frozenset[str]) -> dict[uuid.UUID, Any]:
        from coordination.share_group import TopicLocation
        from coordination.transport import TransportError

        if self._transport.isolated_until > self._cluster.scheduler.now:
            raise TransportError("metadata request timed out (cut off from the brokers)")
        leaders = {
            p: None if node is None else self._cluster.brokers[node].node
            for p, node in self._model.leader_of.items()
        }
        return {TOPIC_ID: TopicLocation(TOPIC, leaders)}


@dataclass(frozen=True, slots=True)
class _Report:
    """One acknowledgement outcome a consumer reported through ``on_acknowledged``."""

    process: str
    member_id: str
    partition: int
    offset: int
    kind: Any  # the AcknowledgeType the application asked for
    delivery: int  # of the record it was asked for; 0: not asked (released by close)
    ok: bool


def _accounting(model: ShareGroupsModel, delivery: tuple[str, int, int, int]) -> str:
    made = model.deliveries[delivery]
    if not made:
        return "which the model never delivered to it"
    return f"which the model delivered to it {made} time(s), all accounted for already"


def _code_name(code: int) -> str:
    from coordination import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _rule(salt: str, partition: int, offset: int, delivery: int) -> str:
    """What the application does with a delivery: fixed by the seed and the delivery."""
    draw = random.Random(f"{salt}:{partition}:{offset}:{delivery}").random()
    if draw < 0.10:
        return "release"
    if draw < 0.15:
        return "reject"
    if draw < 0.20:
        return "renew"
    if draw < 0.22:
        return "leave"  # to its lock
    return "accept"


class ShareConsumersDriver(DriverBase):
    name = "share"
    # Whether every delivery that reached a consumer must be accounted for at the end (the
    # workers' driver does not count what its polls hand out).
    checks_unseen = True

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.model: ShareGroupsModel | None = None
        self.cluster: SimCluster | None = None
        self.topic: SimShareTopic | None = None
        self.consumers: dict[str, tuple[Process, Any]] = {}  # by process name
        # By process name: asked to close (the consumer is closed by its polling thread, as
        # it is not thread-safe), and closed.
        self._close_asked: dict[str, Any] = {}
        self._closed: dict[str, Any] = {}
        self.salt = ""
        self.draining = False
        self._rng: random.Random | None = None
        self._trace: Trace | None = None
        self._stopped_brokers: set[int] = set()
        # What each process asked for each record it acknowledged and has not heard back of,
        # in order, with the delivery it was for: fetching ahead, a record's RENEW may be out
        # while its ACCEPT waits.
        self._asked: dict[tuple[str, int, int], list[tuple[Any, int]]] = {}
        self._reports: list[_Report] = []
        self._claimed: dict[tuple[str, int, int, Any, int], int] = {}
        self._accepted_reports: set[tuple[int, int]] = set()
        self._last_lag: dict[str, dict[tuple[str, int], int]] = {}
        # Deliveries as (member id, partition, offset, delivery count), each as many times as
        # polls handed it out or on_records_unpolled named it; and the namings not checked
        # yet, with the time they were told.
        self._accounted: Counter[tuple[str, int, int, int]] = Counter()
        self._unpolled: list[tuple[str, float, RecordsUnpolled]] = []
        self._locks_checked = -1  # the model's locks_taken when the holders were checked
        # The deliveries whose ShareFetch answer reached a consumer's waiting thread, each as
        # many times as it did, with the processes it reached and when; and when each
        # process's last poll that returned began.
        self._reached: Counter[tuple[str, int, int, int]] = Counter()
        self._reached_by: dict[tuple[str, int, int, int], list[tuple[Process, float]]] = {}
        self._polled: dict[str, float] = {}
        # Processes whose close() gave up on a round fetched ahead: what it acquired is not
        # named (documented), so a delivery it left unseen is excused, and counted.
        self._abandoned: set[str] = set()
        self._violation: str | None = None
        # How each acknowledgement ended ("ACCEPT ok", "RELEASE INVALID_RECORD_STATE"...): what
        # the histories reached.
        self.outcomes: Counter[str] = Counter()

    # ------------------------------------------------------------------ the cluster

    def _install(self, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        cluster = transport.cluster
        self.cluster = cluster
        self.topic = SimShareTopic(clock.monotonic())
        self._rng = clock.random()
        self.salt = f"{self._rng.getrandbits(32):08x}"
        self._trace = trace
        self.model = ShareGroupsModel(
            _Timers(clock),
            topic_id=TOPIC_ID,
            partitions=PARTITIONS,
            end=self.topic.end,
            next_record_at=self.topic.next_record_at,
            brokers=cluster.brokers,
            settings=SETTINGS,
            topic_name=TOPIC,
        )
        for broker in cluster.brokers.values():
            broker.model.share_groups = self.model
        cluster.answered = self._answered
        if cluster.coordinator is not None:
            self.model.coordinator_loaded()
        clock.call_later(FAILOVER_TICK_S, self._tick)

    def _tick(self) -> None:
        """Leadership: a stopped broker forgets what it led, its partitions fail over; while
        the faults go on, a partition's leadership moves now and then."""
        cluster, model, rng, trace = self.cluster, self.model, self._rng, self._trace
        assert cluster is not None and model is not None and rng is not None and trace is not None
        for node, broker in cluster.brokers.items():
            if not broker.up and node not in self._stopped_brokers:
                self._stopped_brokers.add(node)
                model.broker_stopped(node)
            elif broker.up:
                self._stopped_brokers.discard(node)
        live = [n for n, b in cluster.brokers.items() if b.up]
        for p, leader in model.leader_of.items():
            if live and (leader is None or leader in self._stopped_brokers):
                new = rng.choice(live)
                model.move_leader(p, new)
                trace(f"partition {p}: leader {leader} -> {new} (failover)")
        if not self.draining and rng.random() < LEADER_MOVE_CHANCE and len(live) > 1:
            p = rng.randrange(PARTITIONS)
            old = model.leader_of[p]
            new = rng.choice([n for n in live if n != old])
            model.move_leader(p, new)
            trace(f"FAULT leader move: partition {p} {old} -> {new}")
        cluster.scheduler.call_later(FAILOVER_TICK_S, self._tick)

    # ------------------------------------------------------------------ members

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from coordination.errors import CoordinationError, CoordinatorStateError
        from recipes.queues import AcknowledgeType, ShareConsumer

        if self.model is None:
            self._install(transport, clock, trace)
        model, cluster = self.model, self.cluster
        assert model is not None and cluster is not None
        process = host.process
        assert process is not None
        me = process.name
        consumer: Any = None

        def on_acknowledged(
            partition: tuple[str, int], offsets: tuple[int, ...], error: Any
        ) -> None:
            for offset in offsets:
                key = (me, partition[1], offset)
                asked = self._asked.get(key)
                # Not asked (not foreseen by _before_close): a release by close, of any delivery.
                kind, delivery = asked.pop(0) if asked else (AcknowledgeType.RELEASE, 0)
                if error is not None or not asked:
                    # A failure ends the delivery: what was asked after it is reported with it.
                    self._asked.pop(key, None)
                self._reports.append(
                    _Report(
                        me, consumer.member_id, partition[1], offset, kind, delivery, error is None
                    )
                )
                outcome = "ok" if error is None else _code_name(error.code)
                self.outcomes[f"{kind.name} {outcome}"] += 1

        driver = self

        class Unpolled(CoordinationHooks):
            def on_records_unpolled(self, event: RecordsUnpolled) -> None:
                driver._unpolled.append((me, clock.monotonic(), event))

        consumer = ShareConsumer(
            GROUP,
            topics=[TOPIC],
            hooks=[Unpolled()],
            fetch_ahead=_fetches_ahead(self.salt, me),
            acknowledgement_mode="explicit",
            max_poll_records=MAX_POLL_RECORDS,
            on_acknowledged=on_acknowledged,
            lag_refresh_ms=LAG_REFRESH_MS,
            leaders=SimLeaders(model, cluster, transport),
            transport=transport,
            clock=clock,
            **self.settings.member_settings(),
        )
        self.consumers[me] = (process, consumer)
        close_asked = self._close_asked[me] = clock.event()
        self._closed[me] = clock.event()
        rng = clock.random()
        idle = clock.event()
        renewing: list[Any] = []
        limit = SETTINGS.delivery_count_limit
        while True:
            if close_asked.is_set():
                self._before_close(me, consumer)
                try:
                    consumer.close(10.0)
                finally:
                    if consumer.metrics().rounds_abandoned:
                        self._abandoned.add(me)
                    self._closed[me].set()
                return
            began = clock.monotonic()
            try:
                records = consumer.poll(timeout_ms=500)  # sends the RENEWs first
            except CoordinatorStateError:
                return  # closed
            except CoordinationError as e:
                trace(f"{me}: poll failed: {type(e).__name__}: {e}")
                clock.sleep(0.1, idle)
                continue
            self._polled[me] = began
            self._check_lag(me, consumer.metrics().lag, clock.monotonic())
            for record in renewing:
                self._ask(me, consumer, record, AcknowledgeType.ACCEPT)
            renewing = []
            handling = 0.0
            self._handed_out(me, consumer.member_id, records)
            for record in records:
                if record.delivery_count > limit and self._violation is None:
                    self._violation = (
                        f"{me} was handed {record.partition}:{record.offset} at delivery "
                        f"{record.delivery_count}, above the limit {limit}"
                    )
                handling += rng.uniform(0.005, 0.03)
                rule = _rule(self.salt, record.partition, record.offset, record.delivery_count)
                if rule == "accept":
                    self._ask(me, consumer, record, AcknowledgeType.ACCEPT)
                elif rule == "release":
                    self._ask(me, consumer, record, AcknowledgeType.RELEASE)
                elif rule == "reject":
                    self._ask(me, consumer, record, AcknowledgeType.REJECT)
                elif rule == "renew":
                    self._ask(me, consumer, record, AcknowledgeType.RENEW)
                    renewing.append(record)
            if records:
                handling += self.slow_seconds(host)
                clock.sleep(handling, idle)
            if rng.random() < 0.3:
                try:
                    consumer.commit()
                except CoordinatorStateError:
                    return
                except CoordinationError as e:
                    trace(f"{me}: commit failed: {type(e).__name__}: {e}")

    def _answered(self, process: Process, request: Any, answer: Any) -> None:
        """A ShareFetch answer reached ``process``: the deliveries it made."""
        # Only ShareFetch answers acquire (their classes are private to the library).
        if not hasattr(answer, "acquisition_lock_timeout_ms") or answer.error_code:
            return
        assert self.cluster is not None
        now = self.cluster.scheduler.now
        for topic in answer.responses:
            for partition in topic.partitions:
                if partition.error_code:
                    continue
                for acquired in getattr(partition, "acquired_records", ()):
                    for offset in range(acquired.first_offset, acquired.last_offset + 1):
                        delivery = (
                            request.member_id,
                            partition.partition_index,
                            offset,
                            acquired.delivery_count,
                        )
                        self._reached[delivery] += 1
                        self._reached_by.setdefault(delivery, []).append((process, now))

    def _unseen(self) -> str | None:
        """A delivery that reached a consumer which owes it (see :meth:`_excuse`), neither
        handed out nor named (None if there is none); the excused ones are counted."""
        for delivery, times in self._reached.items():
            missing = times - self._accounted[delivery]
            if missing <= 0:
                continue
            reached = self._reached_by[delivery]
            excuses = [self._excuse(process, at) for process, at in reached]
            owing = [
                process for (process, _), why in zip(reached, excuses, strict=True) if why is None
            ]
            if len(owing) >= missing:
                _, partition, offset, count = delivery
                return (
                    f"{owing[0].name} was delivered {partition}:{offset} (delivery {count}) by a "
                    "ShareFetch answer it read, and neither handed it out nor named it to "
                    "on_records_unpolled"
                )
            for why in [w for w in excuses if w is not None][: missing - len(owing)]:
                self.outcomes[f"unseen, {why}"] += 1
        return None

    def _excuse(self, process: Process, at: float) -> str | None:
        """Why ``process``'s consumer, reached at ``at`` by a delivery, need not have handed
        it out or named it by now; None if it must have: it closed (``close()`` names what it
        holds), or it is alive and a poll that began after ``at`` returned (a poll takes what
        was fetched ahead first). Excused: a consumer killed meanwhile (its hooks died with
        it); one whose close gave up on a round fetched ahead (a leader answered, another did
        not in time: the round never came back to the consumer; ``metrics()
        .rounds_abandoned``); one alive that has not polled since (a slow handler at the
        end of the history: it names them at its next poll)."""
        closed = self._closed.get(process.name)
        if closed is not None and closed.is_set():
            return "round abandoned by close" if process.name in self._abandoned else None
        if process.dead:
            return "consumer killed"
        if self._polled.get(process.name, -math.inf) <= at:
            return "not polled since"
        return None

    def _account(self, model: ShareGroupsModel, delivery: tuple[str, int, int, int]) -> bool:
        """Count ``delivery`` as handed out or named: False if the model made it fewer times
        than that (to this member, with this count)."""
        self._accounted[delivery] += 1
        return self._accounted[delivery] <= model.deliveries[delivery]

    def _handed_out(self, me: str, member_id: str, records: list[Any]) -> None:
        """A poll handed ``records`` to the application: each must be a delivery the model
        made to the member, not accounted for before."""
        model = self.model
        assert model is not None
        for record in records:
            delivery = (member_id, record.partition, record.offset, record.delivery_count)
            if not self._account(model, delivery) and self._violation is None:
                self._violation = (
                    f"{me} was handed {record.partition}:{record.offset} (delivery "
                    f"{record.delivery_count}), {_accounting(model, delivery)}"
                )

    def _check_unpolled(self, model: ShareGroupsModel) -> None:
        """The records ``on_records_unpolled`` named since the last check."""
        lock_s = SETTINGS.record_lock_duration_ms / 1000
        unpolled, self._unpolled = self._unpolled, []
        for me, at, event in unpolled:
            self.outcomes[f"unpolled {event.reason}"] += len(event.offsets)
            for offset, count in zip(event.offsets, event.delivery_counts, strict=True):
                delivery = (event.member_id, event.partition, offset, count)
                where = f"{event.partition}:{offset} (delivery {count}, {event.reason})"
                if event.reason not in UNPOLLED_REASONS:
                    raise Violation(f"{me} named {where} unpolled, for no known reason")
                if not self._account(model, delivery):
                    raise Violation(f"{me} named {where} unpolled, {_accounting(model, delivery)}")
                if event.reason != "lock_expired":
                    continue
                if at - event.fetched_at < lock_s:
                    raise Violation(
                        f"{me} named {where} unpolled {at - event.fetched_at:.3f}s after its "
                        f"fetch was sent, before a lock of {lock_s}s could run out"
                    )
                if (event.member_id, count) in model.holding(event.partition, offset):
                    raise Violation(f"{me} named {where} unpolled, but its lock still runs")

    def _check_lag(self, me: str, lag: dict[tuple[str, int], int], now: float) -> None:
        """A lag reading (the polls read it every LAG_REFRESH_MS) is a count of the
        partition's records: never negative, never more than it holds."""
        topic = self.topic
        assert topic is not None
        if lag != self._last_lag.get(me):
            self._last_lag[me] = lag
            self.outcomes["lag readings"] += 1
        for (_, p), value in lag.items():
            if not 0 <= value <= topic.end(p, now) and self._violation is None:
                self._violation = f"{me} read a lag of {value} on partition {p}"

    def _ask(self, me: str, consumer: Any, record: Any, kind: Any) -> None:
        from coordination.errors import CoordinatorStateError

        # An acknowledgement not sent yet is replaced by this one (a poll that returned before
        # the round fetched ahead came back sent nothing).
        unsent = consumer._pending.get((record.topic_id, record.partition), {})
        replaces = record.offset in unsent
        try:
            consumer.acknowledge(record, kind)
        except CoordinatorStateError:
            return  # no longer held (its acknowledgement failed meanwhile)
        asked = self._asked.setdefault((me, record.partition, record.offset), [])
        if replaces and asked:
            asked[-1] = (kind, record.delivery_count)
        else:
            asked.append((kind, record.delivery_count))

    def _before_close(self, me: str, consumer: Any) -> None:
        """What ``consumer``'s close will acknowledge, as it will (so that each report names
        the delivery it was for): a RENEW not sent yet goes as a RELEASE, and so does every
        record held without an acknowledgement (but one out in the round fetched ahead, which
        close waits for)."""
        from recipes.queues import AcknowledgeType

        ahead = consumer._ahead
        for (topic_id, partition), entry in consumer._partitions.items():
            pending = consumer._pending.get((topic_id, partition), {})
            out = ahead.sent.get((topic_id, partition), {}) if ahead is not None else {}
            for offset, held in entry.held.items():
                asked = self._asked.setdefault((me, partition, offset), [])
                kind = pending.get(offset)
                if kind is AcknowledgeType.RENEW and asked:
                    asked[-1] = (AcknowledgeType.RELEASE, asked[-1][1])
                elif (
                    kind is None and out.get(offset, AcknowledgeType.RENEW) is AcknowledgeType.RENEW
                ):
                    asked.append((AcknowledgeType.RELEASE, held.record.delivery_count))

    def close(self, host: Host) -> None:
        """Ask the member's polling thread to close its consumer, and wait for it."""
        name = None if host.process is None else host.process.name
        if name not in self._close_asked:
            return
        self._close_asked[name].set()
        self._closed[name].wait(20.0)

    # ------------------------------------------------------------------ invariants

    def check(self, now: float) -> None:
        if self._violation is not None:
            raise Violation(self._violation)
        model = self.model
        if model is None:
            return
        if self._unpolled:
            self._check_unpolled(model)
        if self._reports:
            reports, self._reports = self._reports, []
            for report in reports:
                if report.ok:
                    self._check_success(model, report)
        if model.locks_taken == self._locks_checked:
            return  # no lock taken since: no holder and no delivery count added
        self._locks_checked = model.locks_taken
        for (p, offset), holders in model.holders().items():
            if len(holders) > 1:
                raise Violation(f"record {p}:{offset} held by {holders} at once")
        for count in model.delivery_counts():
            if count > SETTINGS.delivery_count_limit:
                raise Violation(f"a record acquired at delivery {count}, above the limit")

    def _check_success(self, model: ShareGroupsModel, report: _Report) -> None:
        from recipes.queues import AcknowledgeType

        where = f"{report.partition}:{report.offset}"
        state = model.share_partitions[report.partition]
        key = (report.member_id, report.partition, report.offset, report.kind, report.delivery)
        done = [
            kind
            for member_id, kind, delivery in state.applied.get(report.offset, ())
            if member_id == report.member_id
            and kind is report.kind
            and report.delivery in (0, delivery)
        ]
        claimed = self._claimed.get(key, 0)
        if claimed >= len(done):
            raise Violation(
                f"{report.process} reported its {report.kind.name} of {where} (delivery "
                f"{report.delivery}) done, but the model applied no such acknowledgement of "
                "that member to that delivery (it refused it, or applied it to another)"
            )
        self._claimed[key] = claimed + 1
        if report.kind is not AcknowledgeType.ACCEPT:
            return
        accepts = [
            m for m, kind, _ in state.applied[report.offset] if kind is AcknowledgeType.ACCEPT
        ]
        if len(accepts) > 1:
            raise Violation(f"record {where} accepted twice at the model: {accepts}")
        if (report.partition, report.offset) in self._accepted_reports:
            raise Violation(f"record {where} reported accepted twice ({report.process} second)")
        self._accepted_reports.add((report.partition, report.offset))
        if state.state(report.offset)[0] is not RecordState.ACKNOWLEDGED:
            raise Violation(
                f"{report.process} reported {where} accepted, but the model has it "
                f"{state.state(report.offset)[0].value}"
            )

    def settled(self, live: list[Host]) -> str | None:
        model, topic = self.model, self.topic
        if model is None or topic is None:
            return "no consumer started"
        now = model._clock.now()
        if not self.draining:
            self.draining = True
            topic.stopped = now  # the producers stop: the consumers drain the topic
        left = []
        for p, state in model.share_partitions.items():
            end = topic.end(p, now)
            if state.start < end:
                left.append(f"{p}: {end - state.start} from offset {state.start}")
        if left:
            return f"records neither acknowledged nor archived: {', '.join(left)}"
        if self.checks_unseen:
            self.outcomes["deliveries reached"] = sum(self._reached.values())
            if self._unpolled:
                self._check_unpolled(model)
            unseen = self._unseen()
            if unseen is not None:
                raise Violation(unseen)
        return None


# ---------------------------------------------------------------------------- the worker

DEAD_LETTER_TOPIC = "jobs-dead"
WORKER_CONCURRENCY = 2
# Below the model's delivery limit (5): a failure is final at the third delivery, when the
# worker copies the record to the dead-letter topic before its REJECT.
MAX_DELIVERIES = 3
# The chance that a dead-letter copy is not confirmed (the record is released instead).
DEAD_LETTER_FAILURE = 0.1


class Retryable(Exception):
    """A handler failure the worker retries (``retry_on``)."""


class Poison(Exception):
    """A handler failure the worker does not retry: the record is dead-lettered at once."""


def _worker_rule(salt: str, partition: int, offset: int, delivery: int) -> str:
    """What the handler does with a delivery: fixed by the seed and the delivery. A record
    is poison at every delivery, or not at all."""
    if random.Random(f"{salt}:poison:{partition}:{offset}").random() < 0.04:
        return "poison"
    draw = random.Random(f"{salt}:{partition}:{offset}:{delivery}").random()
    if draw < 0.15:
        return "fail"  # retryable
    if draw < 0.18:
        return "slow"  # longer than half the lock: the worker renews it
    return "succeed"


class SimDeadLetters:
    """The dead-letter producer's stand-in (``send(...).get(timeout)``, as kafka-python's):
    a copy takes a round trip of simulated time, fails now and then (drawn from the seed), and
    is recorded by the driver once confirmed, by the origin partition and offset its headers
    name."""

    def __init__(self, driver: ShareWorkersDriver, clock: Scheduler, process: str) -> None:
        self._driver = driver
        self._clock = clock
        self._rng = clock.random()
        self._process = process

    def send(self, topic: str, *, key: Any, value: Any, headers: Any) -> _SimCopy:
        return _SimCopy(self, topic, dict(headers))

    def close(self, timeout: float | None = None) -> None:
        pass


class _SimCopy:
    def __init__(self, producer: SimDeadLetters, topic: str, headers: dict[str, bytes]) -> None:
        self._producer = producer
        self._topic = topic
        self._headers = headers

    def get(self, timeout: float) -> None:
        producer = self._producer
        cluster = producer._driver.cluster
        assert cluster is not None
        producer._clock.sleep(2 * cluster.latency(), producer._clock.event())
        if producer._rng.random() < DEAD_LETTER_FAILURE:
            raise TimeoutError("the dead-letter copy was not confirmed (simulated)")
        where = (
            int(self._headers["__dlq.origin.partition"]),
            int(self._headers["__dlq.origin.offset"]),
        )
        producer._driver.dead_lettered[where] = producer._process


class ShareWorkersDriver(ShareConsumersDriver):
    """The share worker (``recipes.queues.ShareWorker``) of each member, with the topic, the
    faults and the model of the share consumers' histories. Its handler succeeds, fails (a
    retryable error), or takes longer than half the lock (the worker renews it), drawn from
    the seed for each delivery; a few records are poison (a failure not retried). Failures
    are final at the third delivery; poison records are copied to a dead-letter stand-in that
    fails one copy in ten.

    Checked at every simulated instant, on top of the share consumers' invariants (no record
    held by two members at once, no delivery above the limit), from what the model applied:

    - a record ACCEPTed was returned from by a handler (a failure is never accepted);
    - a record REJECTed was copied to the dead-letter topic first (nothing dropped silently);
    - no member runs more handlers at once than its concurrency.

    After the faults, every record produced is accepted or archived (none lost).
    """

    name = "share-worker"
    checks_unseen = False

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.workers: dict[str, tuple[Process, Any]] = {}
        self.succeeded: set[tuple[int, int]] = set()  # a handler returned for (p, offset)
        self.dead_lettered: dict[tuple[int, int], str] = {}  # copied, by which process
        self._running: Counter[str] = Counter()
        self._read: dict[int, int] = {}  # how far the model's applied list was checked

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from coordination.errors import CoordinationError
        from recipes.queues import ShareWorker

        process = host.process
        assert process is not None
        me = process.name
        never = clock.event()

        def handle(record: Any) -> None:
            rule, seconds = self._handler_began(me, host, record)
            try:
                clock.sleep(seconds, never)
                self._handler_ends(rule, record)
            finally:
                self._running[me] -= 1

        worker = ShareWorker(
            GROUP, handler=handle, **self._worker_settings(me, transport, clock, trace)
        )
        self.workers[me] = (process, worker)
        try:
            worker.run()
        except CoordinationError as e:
            trace(f"{me}: the worker stopped: {type(e).__name__}: {e}")
        finally:
            self._count(worker.metrics())

    def _worker_settings(
        self, me: str, transport: SimTransport, clock: Scheduler, trace: Trace
    ) -> dict[str, Any]:
        if self.model is None:
            self._install(transport, clock, trace)
        model, cluster = self.model, self.cluster
        assert model is not None and cluster is not None
        settings = self.settings.member_settings()  # the member's retry backoff included
        return {
            "topics": [TOPIC],
            "concurrency": WORKER_CONCURRENCY,
            "retry_on": Retryable,
            "max_deliveries": MAX_DELIVERIES,
            "redelivery_backoff_ms": 200,
            "redelivery_backoff_max_ms": 800,
            "dead_letter_topic": DEAD_LETTER_TOPIC,
            "dead_letter_producer": SimDeadLetters(self, clock, me),
            "dead_letter_timeout_ms": 2000,
            "drain_timeout_ms": 2000,
            "leaders": SimLeaders(model, cluster, transport),
            "transport": transport,
            "clock": clock,
            **settings,
        }

    def _handler_began(self, me: str, host: Host, record: Any) -> tuple[str, float]:
        """A handler starts on ``record``: what it is to do, and for how long."""
        self._running[me] += 1
        if self._running[me] > WORKER_CONCURRENCY and self._violation is None:
            self._violation = f"{me} ran {self._running[me]} handlers at once"
        rule = _worker_rule(self.salt, record.partition, record.offset, record.delivery_count)
        lock_s = SETTINGS.record_lock_duration_ms / 1000
        seconds = 0.6 * lock_s if rule == "slow" else 0.02
        return rule, seconds + self.slow_seconds(host)

    def _handler_ends(self, rule: str, record: Any) -> None:
        """Return (the record succeeded) or raise, as ``rule`` says."""
        self.outcomes[f"handler {rule}"] += 1
        if rule == "fail":
            raise Retryable(f"{record.partition}:{record.offset}")
        if rule == "poison":
            raise Poison(f"{record.partition}:{record.offset}")
        self.succeeded.add((record.partition, record.offset))

    def _count(self, metrics: Any) -> None:
        self.outcomes["dead-letter copies failed"] += metrics.dead_letter_failures
        self.outcomes["released unstarted at close"] += metrics.released_unstarted

    def close(self, host: Host) -> None:
        name = None if host.process is None else host.process.name
        if name in self.workers:
            self.workers[name][1].close()

    def check(self, now: float) -> None:
        super().check(now)
        model = self.model
        if model is None:
            return
        from recipes.queues import AcknowledgeType

        for p, state in model.share_partitions.items():
            new = state.applied_in_order[self._read.get(p, 0) :]
            self._read[p] = len(state.applied_in_order)
            for offset, member_id, kind in new:
                where = f"{p}:{offset}"
                if kind is AcknowledgeType.ACCEPT and (p, offset) not in self.succeeded:
                    raise Violation(f"{member_id} accepted {where}, which no handler returned")
                if kind is AcknowledgeType.REJECT and (p, offset) not in self.dead_lettered:
                    raise Violation(f"{member_id} rejected {where} with no dead-letter copy")
                self.outcomes[f"applied {kind.name}"] += 1


class AsyncShareWorkersDriver(TurningLoops, ShareWorkersDriver):
    """The share worker through its asyncio face (``AsyncShareWorker``), as shipped, on an
    asyncio event loop of the member's own (:class:`SimEventLoop`: asyncio's loop on
    simulated time): ``await worker.run()``, ``async def`` handlers that await their work,
    a few of which are cancelled while they run (the worker retries those), and
    ``await worker.close()`` at a graceful restart.

    Checked on top of the share worker's invariants: every handler coroutine runs on its
    member's loop, and every loop keeps turning (nothing makes it wait for itself).
    """

    name = "share-worker-async"

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from coordination.errors import CoordinationError
        from recipes.queues import AsyncShareWorker

        process = host.process
        assert process is not None
        me = process.name
        loop = SimEventLoop(clock, me)
        loop_thread = clock.current_thread()

        async def handle(record: Any) -> None:
            if clock.current_thread() is not loop_thread and self._violation is None:
                self._violation = f"{me}: a handler coroutine ran off its event loop"
            rule, seconds = self._handler_began(me, host, record)
            try:
                if _cancelled(self.salt, record):
                    self.outcomes["handler cancelled"] += 1
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()  # as a timeout of the application's would
                await asyncio.sleep(seconds)
                self._handler_ends(rule, record)
            finally:
                self._running[me] -= 1

        face = AsyncShareWorker(
            GROUP, handler=handle, **self._worker_settings(me, transport, clock, trace)
        )
        self.workers[me] = (process, face)
        self._watch_loop(me, process, loop, face, clock)

        async def ticker() -> None:
            while True:
                self._turned(me, clock)
                await asyncio.sleep(self.TURN_S)

        async def application() -> None:
            ticking = asyncio.get_running_loop().create_task(ticker())
            try:
                await face.run()
            except CoordinationError as e:
                trace(f"{me}: the worker stopped: {type(e).__name__}: {e}")
            finally:
                ticking.cancel()
                self._count(face.metrics())

        loop.run_until_complete(application())

    def close(self, host: Host) -> None:
        self._close_on_loop(host, lambda face: face.close())

    def settled(self, live: list[Host]) -> str | None:
        return self._stalled_loop() or super().settled(live)


def _fetches_ahead(salt: str, me: str) -> bool:
    """Whether the consumer of ``me`` fetches ahead (``fetch_ahead``): half of them, drawn from
    the seed and the process."""
    return random.Random(f"{salt}:ahead:{me}").random() < 0.5


def _cancelled(salt: str, record: Any) -> bool:
    """Whether the handler coroutine of this delivery is cancelled while it runs."""
    seed = f"{salt}:cancel:{record.partition}:{record.offset}:{record.delivery_count}"
    return random.Random(seed).random() < 0.03
