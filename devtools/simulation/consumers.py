"""Consumers under simulation: ``recipes.partitioning.Consumer`` members reading a topic
whose records appear as simulated time goes on, polling, pausing, resuming and committing.

Each history picks one rebalance protocol for the group: all EAGER (``range``), all
COOPERATIVE (``cooperative-sticky``), or a group in the middle of the upgrade (each
member lists ``[cooperative-sticky, range]`` or ``[cooperative-sticky]``).

Checked at every simulated instant:

- no partition is owned by two living consumers whose membership leases both hold (what
  the engine promises, through the recipe's own bookkeeping of owned partitions: EAGER
  revocation, COOPERATIVE hand-over, lost partitions);
- every committed offset was returned by ``poll()``, and so was every record below it
  (nothing is lost: a commit never passes a record no consumer was given), read from what
  the coordinator wrote to its log, not from what the consumers believe;
- committed offsets never go backwards (until the group and its offsets are deleted).

After the faults: every partition is owned by exactly one consumer whose lease holds, and
its position is established (it is being read).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import repeat
from typing import Any, NamedTuple

from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    GroupLog,
    HistorySettings,
    Host,
    OffsetRecord,
    OffsetTombstone,
    Process,
    Scheduler,
    SimEventLoop,
    SimTransport,
    Trace,
    Violation,
)

from ._supervisor import start_supervised

TOPIC = "events"
TOPIC_ID = uuid.UUID(int=0xE7E475)  # the topic's id, for KIP-848 assignments
PARTITIONS = 6
# consumer-848's pattern histories: the pattern, the topic created later that it matches,
# and one created with it that it matches only in part (a search, not a whole name).
PATTERN = r"events(-\w+)?"
LATE_TOPIC, LATE_TOPIC_ID = "events-late", uuid.UUID(int=0x1A7E)
DECOY_TOPIC, DECOY_TOPIC_ID = "xevents-late", uuid.UUID(int=0xDEC0)
LATE_PARTITIONS = 3
RECORDS_PER_S = 10.0  # per partition
MAX_RECORDS = 25  # per partition per poll
FETCH_MAX_WAIT_S = 0.1


class SimRecord(NamedTuple):
    """A fetched record (a tuple: a poll makes up to MAX_RECORDS of them per partition)."""

    topic: str
    partition: int
    offset: int


# SimRecord(topic, partition, offset) without the Python frame of a NamedTuple's __new__,
# for a tuple of the three (a poll makes up to MAX_RECORDS records per partition).
_new_record = partial(tuple.__new__, SimRecord)


class SimTopic:
    """A topic whose partitions each gain a record every 1/RECORDS_PER_S simulated seconds,
    every one acknowledged (the producer side cannot lose records here)."""

    def __init__(self, started: float) -> None:
        self.started = started

    def end(self, now: float) -> int:
        """The offset after the last record of every partition at ``now``."""
        return int((now - self.started) * RECORDS_PER_S)

    def time_of(self, offset: int) -> float:
        """When the record at ``offset`` exists (``end`` passes it)."""
        return self.started + (offset + 1) / RECORDS_PER_S + 1e-9


class SimFetcher:
    """A :class:`recipes.partitioning.RecordFetcher` over :class:`SimTopic` s (by name): each
    poll takes a fetch's round trip, and waits for records when there are none. A member cut
    off from the brokers fetches nothing."""

    def __init__(
        self,
        topics: Mapping[str, SimTopic],
        clock: Scheduler,
        transport: SimTransport,
        rng: random.Random | None = None,
    ) -> None:
        self._topics = topics
        self._clock = clock
        self._transport = transport
        self._rng = rng or clock.random()
        self._positions: dict[Any, int | None] = {}

    def assign(self, partitions: Sequence[Any]) -> None:
        self._positions = {tp: self._positions.get(tp) for tp in partitions}

    def seek(self, partition: Any, offset: int) -> None:
        if partition not in self._positions:
            raise AssertionError(f"seek of unassigned {partition}")
        self._positions[partition] = offset

    def position(self, partition: Any, timeout_ms: int) -> int | None:
        if partition not in self._positions:
            raise AssertionError(f"position of unassigned {partition}")
        if self._positions[partition] is None:
            self._positions[partition] = 0  # auto_offset_reset="earliest"
        return self._positions[partition]

    def poll(self, timeout_ms: int) -> Mapping[Any, Sequence[Any]]:
        # One fetch, as a broker answers with fetch.min.bytes above what arrives meanwhile:
        # after fetch.max.wait (or the poll's timeout, if shorter), with what is there.
        clock = self._clock
        rtt = self._rng.uniform(0.002, 0.02)
        clock.sleep(max(rtt, min(timeout_ms / 1000, FETCH_MAX_WAIT_S)), clock.event())
        now = clock.monotonic()
        if self._transport.isolated_until > now:
            return {}
        ends = {name: topic.end(now) for name, topic in self._topics.items()}
        fetched: dict[Any, list[SimRecord]] = {}
        for tp, position in self._positions.items():
            end = ends[tp.topic]
            start = 0 if position is None else position
            if start < end:
                last = min(end, start + MAX_RECORDS)
                fields = zip(repeat(tp.topic), repeat(tp.partition), range(start, last))
                fetched[tp] = list(map(_new_record, fields))
                self._positions[tp] = last
        return fetched

    def close(self) -> None:
        pass  # nothing to release


class _Member:
    def __init__(self, process: Process, consumer: Any) -> None:
        self.process = process
        self.consumer = consumer
        # ConsumerPartitioning (classic) or BrokerAssignedPartitioning (KIP-848).
        self.group = consumer._group
        # What holds the frozenset group.owned() returns (only ever replaced whole), read
        # by the check after every step without owned()'s two calls.
        self.owner: Any = getattr(self.group, "_ownership", self.group)
        assert self.owner._owned is self.group.owned()


class ConsumersDriver(DriverBase):
    name = "consumer"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.margin_s = settings.heartbeat_interval_ms / 1000
        self.members: dict[str, _Member] = {}  # by process name
        # The members the check looks at after every step: the same, less those found dead
        # (a history's restarts leave more dead members than living ones by its end).
        self._checked: dict[str, _Member] = {}
        self.mode: str | None = None  # the group's rebalance protocol, picked at the start
        self.topic: SimTopic | None = None
        self.metadata: Any = None
        self.log: GroupLog | None = None
        self._read_entries = 0
        # Every offset poll() returned, by partition; and how far, from 0, all were returned.
        self.returned: dict[tuple[str, int], set[int]] = {}
        self.covered: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}

    def _assignors(self, clock: Scheduler) -> list[Any]:
        from recipes.partitioning import CooperativeStickyAssignor, RangeAssignor

        rng = clock.random()
        if self.mode is None:
            self.mode = rng.choice(["eager", "cooperative", "upgrade"])
        if self.mode == "eager":
            return [RangeAssignor()]
        if self.mode == "cooperative" or rng.random() < 0.5:
            return [CooperativeStickyAssignor()]
        return [CooperativeStickyAssignor(), RangeAssignor()]

    def _settings(self, host: Host, transport: SimTransport, clock: Scheduler) -> dict[str, Any]:
        """A member's consumer settings: the topic (made by the first member), the group's
        rebalance protocol, the simulated fetcher, transport and clock."""
        from recipes.partitioning import InMemoryTopicMetadata

        if self.topic is None:
            self.topic = SimTopic(clock.monotonic())
            self.metadata = InMemoryTopicMetadata({TOPIC: PARTITIONS})
            self.log = transport.cluster.log
        return {
            "topics": [TOPIC],
            "assignors": self._assignors(clock),
            "topic_metadata": self.metadata,
            "transport": transport,
            "clock": clock,
            "fetcher": self._fetcher(host, transport, clock),
            "group_instance_id": host.instance_id,
            **self.settings.member_settings(),
        }

    def _topics(self) -> dict[str, tuple[uuid.UUID, int, SimTopic]]:
        """The topics as the lean fetcher's Metadata sees them: name -> (id, count, topic)."""
        assert self.topic is not None
        return {TOPIC: (TOPIC_ID, PARTITIONS, self.topic)}

    def _fetcher(self, host: Host, transport: SimTransport, clock: Scheduler) -> Any:
        assert self.topic is not None  # made by the first host's _settings
        return self._fetcher_of(host, transport, clock, {TOPIC: self.topic})

    def _fetcher_of(
        self,
        host: Host,
        transport: SimTransport,
        clock: Scheduler,
        topics: Mapping[str, SimTopic],
    ) -> Any:
        """Host 1's consumer, in a quarter of its incarnations, reads through the lean fetcher's
        engine (devtools/simulation/lean.py, the one ``fetcher="lean"`` runs), the others
        through SimFetcher. Either takes the one random stream drawn here, so the choice
        moves no other draw of the history."""
        rng = clock.random()
        if host.index == 1 and rng.random() < 0.25:
            from .lean import lean_fetcher

            return lean_fetcher(self._topics, transport, clock, rng)
        return SimFetcher(topics, clock, transport, rng)

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from coordination.errors import CoordinationError
        from recipes.partitioning import (
            Consumer,
            PartitionsNotOwnedError,
            RebalanceListener,
        )

        process = host.process
        assert process is not None
        me = process.name
        driver = self
        consumer: Any = None

        def commit(why: str) -> None:
            try:
                consumer.commit(timeout=5.0)
            except (PartitionsNotOwnedError, CoordinationError) as e:
                trace(f"{me}: commit ({why}) failed: {type(e).__name__}")

        class Listener(RebalanceListener):
            def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
                driver.take_slow(host, clock)
                commit("on revocation")  # as a Java consumer's commitSync() there
                trace(f"{me}: revoked {sorted(p for _, p in partitions)}")

            def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
                trace(f"{me}: lost {sorted(p for _, p in partitions)}")

            def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
                driver.take_slow(host, clock)
                trace(f"{me}: assigned {sorted(p for _, p in partitions)}")

        consumer = Consumer(GROUP, listener=Listener(), **self._settings(host, transport, clock))
        self.members[process.name] = self._checked[process.name] = _Member(process, consumer)
        consumer.start()
        self._consume(consumer, clock, trace, me, commit)

    def _consume(
        self, consumer: Any, clock: Scheduler, trace: Trace, me: str, commit: Callable[[str], None]
    ) -> None:
        """The application's poll loop, until the consumer is closed."""
        from coordination.errors import (
            CoordinationError,
            CoordinatorStateError,
            FatalBrokerError,
            FencedInstanceError,
        )

        rng = clock.random()
        idle = clock.event()
        while True:
            try:
                batch = consumer.poll(timeout_ms=500)
            except CoordinatorStateError:
                return  # closed
            except FencedInstanceError:
                trace(f"{me}: stops: fenced by a newer process of its instance")
                return
            except FatalBrokerError:
                raise  # the member stopped for good: its supervisor's (or a finding)
            except CoordinationError as e:
                trace(f"{me}: poll failed: {type(e).__name__}")
                continue
            count = 0
            for tp, records in batch.items():
                self._returned(tp, [r.offset for r in records])
                count += len(records)
            if count:
                clock.sleep(rng.uniform(0.02, 0.1), idle)  # handling them
            draw = rng.random()
            if draw < 0.3:
                commit("after a poll")
            elif draw < 0.33:
                owned = sorted(consumer.assignment())
                if owned:
                    consumer.pause(rng.choice(owned))
            elif draw < 0.4 and consumer.paused():
                consumer.resume(*consumer.paused())

    def close(self, host: Host) -> None:
        member = None if host.process is None else self.members.get(host.process.name)
        if member is not None:
            member.consumer.close(10.0)

    # ------------------------------------------------------------------ invariants

    def _returned(self, tp: Any, offsets: list[int]) -> None:
        key = (tp.topic, tp.partition)
        seen = self.returned.setdefault(key, set())
        seen.update(offsets)
        covered = self.covered.get(key, 0)
        while covered in seen:
            covered += 1
        self.covered[key] = covered

    def _holders(self) -> dict[tuple[str, int], list[str]]:
        holders: dict[tuple[str, int], list[str]] = {}
        for name, member in list(self.members.items()):
            if member.process.dead:
                del self.members[name]
                continue
            group = member.group
            owned = group.owned()
            if not owned or group.membership_lease() <= self.margin_s:
                continue
            for tp in owned:
                holders.setdefault((tp.topic, tp.partition), []).append(name)
        return holders

    def _read_commits(self) -> None:
        """What the coordinator wrote since the last look: each commit must be backed by
        records returned by poll() and must not go backwards."""
        log = self.log
        if log is None or len(log.entries) == self._read_entries:
            return
        for entry in log.entries[self._read_entries :]:
            if isinstance(entry, OffsetTombstone) and entry.group_id == GROUP:
                self.committed.pop((entry.topic, entry.partition), None)
            elif isinstance(entry, OffsetRecord) and entry.group_id == GROUP:
                key = (entry.topic, entry.partition)
                before = self.committed.get(key, 0)
                where = f"{entry.topic}-{entry.partition}"
                if entry.offset < before:
                    raise Violation(
                        f"committed offset of {where} went back {before} -> {entry.offset}"
                    )
                if entry.offset > self.covered.get(key, 0):
                    missing = min(
                        o for o in range(entry.offset) if o not in self.returned.get(key, set())
                    )
                    raise Violation(
                        f"offset {entry.offset} committed for {where}, but poll() never "
                        f"returned record {missing} (lost)"
                    )
                self.committed[key] = entry.offset
        self._read_entries = len(log.entries)

    def check(self, now: float) -> None:
        log = self.log
        if log is not None and len(log.entries) != self._read_entries:
            self._read_commits()
        # Cheap first: only a partition two living consumers own can be owned twice.
        living = self._living()
        seen: frozenset[Any] = frozenset()
        clash: frozenset[Any] = frozenset()
        for member in living.values():
            # group.owned(), which never takes the lock: a check between steps.
            owned = member.owner._owned
            if not owned:
                continue
            if not seen:
                seen = owned  # (not changed below: a union makes a new set)
            elif not seen.isdisjoint(owned):
                clash = clash | (seen & owned)
                seen = seen | owned
            else:
                seen = seen | owned
        if not clash:
            return
        # Then the leases, of the members holding those partitions only (after a fault, a
        # member whose lease ran out may still list partitions for many steps).
        holders: dict[tuple[str, int], list[str]] = {}
        for name, member in living.items():
            held = clash & member.owner._owned
            if not held or member.group.membership_lease() <= self.margin_s:
                continue
            for tp in held:
                holders.setdefault((tp.topic, tp.partition), []).append(name)
        for tp, names in holders.items():
            if len(names) > 1:
                raise Violation(f"partition {tp} owned by {names} at once, each with a lease")

    def _living(self) -> dict[str, _Member]:
        """The members whose process lives, in the order they started (for the checks)."""
        checked = self._checked
        for member in checked.values():
            if member.process.dead:  # a dead process stays dead: forgotten once
                for name in [name for name, member in checked.items() if member.process.dead]:
                    del checked[name]
                break
        return checked

    def subscribed_partitions(self) -> list[tuple[str, int]]:
        """The partitions the group must own once the faults are over."""
        return [(TOPIC, p) for p in range(PARTITIONS)]

    def settled(self, live: list[Host]) -> str | None:
        holders = self._holders()
        wanted = self.subscribed_partitions()
        wrong = [tp for tp in wanted if len(holders.get(tp, ())) != 1]
        if wrong:
            return f"partitions not owned by exactly one consumer: {wrong}"
        stray = sorted(holders.keys() - set(wanted))
        if stray:
            raise Violation(f"partitions owned that no consumer subscribed to: {stray}")
        unread = []
        for member in self.members.values():
            # Read without the consumer's lock, which a poll holds while it waits.
            positions = member.consumer._positions
            for tp in member.consumer.assignment():
                if tp not in positions:
                    unread.append((tp.topic, tp.partition))
        return f"partitions owned but not positioned: {sorted(unread)}" if unread else None


class BrokerAssignedConsumersDriver(ConsumersDriver):
    """The consumer on Kafka's consumer group protocol (KIP-848, ``group_protocol="consumer"``),
    against the simulator's model of the KIP-848 coordinator: the broker assigns (uniform),
    each member reconciles on its own.

    Checked on top of the consumer's invariants: a member's epoch never goes back while it
    stays in the group (it returns to 0 only when fenced, and rejoins above it). Half the
    hosts are static (``group_instance_id``), as in the classic drivers: one restarted
    while the broker still holds its instance is refused (UNRELEASED_INSTANCE_ID) and
    stops, as Kafka's consumers do; its supervisor (here: the driver) starts it again a
    session later.

    Half the histories subscribe by pattern (``events(-\\w+)?``, the broker's to match with
    whole topic names): at a random time two topics are created, one the pattern matches
    (``events-late``: its partitions must be owned and read after the faults, as the first
    topic's) and one it matches only in part (``xevents-late``: never owned). The broker's
    assignment names the new topic by id before a member's metadata knows its name (each
    member learns it up to 3 s later): those partitions wait for their name.
    """

    name = "consumer-848"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.epochs: dict[str, int] = {}  # by process name: the highest epoch seen
        self.refused_instances = 0  # static members refused, and started again
        self.by_pattern: bool | None = None  # picked at the first member's start
        self.topics: dict[str, SimTopic] = {}  # by name: those created so far

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        me = host.process.name if host.process is not None else ""
        start = super().start

        def stopped() -> None:
            self.members[me].consumer.close(10.0)
            self.refused_instances += 1

        start_supervised(
            lambda t: start(host, t, clock, trace),
            stopped,
            me=me,
            transport=transport,
            clock=clock,
            trace=trace,
            session_s=self.settings.session_timeout_ms / 1000,
        )

    def _settings(self, host: Host, transport: SimTransport, clock: Scheduler) -> dict[str, Any]:
        if self.topic is None:
            self.topic = SimTopic(clock.monotonic())
            self.topics[TOPIC] = self.topic
            self.log = transport.cluster.log
            self.log.topics[TOPIC] = (TOPIC_ID, PARTITIONS)
            rng = clock.random()
            self.by_pattern = rng.random() < 0.5
            if self.by_pattern:
                clock.call_later(rng.uniform(5.0, 120.0), partial(self._create_late, clock))
        subscription: dict[str, Any] = (
            {"pattern": PATTERN} if self.by_pattern else {"topics": [TOPIC]}
        )
        return {
            **subscription,
            "group_protocol": "consumer",
            "group_remote_assignor": "uniform",
            "topic_metadata": _KnownTopics(self, clock, lag_s=clock.random().uniform(0.0, 3.0)),
            "transport": transport,
            "clock": clock,
            "fetcher": self._fetcher(host, transport, clock),
            "group_instance_id": host.instance_id,  # static on half the hosts
            "client_rack": _rack(host),
            **self.settings.member_settings(),
            # Every other member assumes a session three times the broker's: its lease must
            # count with the broker's session, read before it joins (DescribeConfigs).
            **(
                {"session_timeout_ms": 3 * self.settings.session_timeout_ms}
                if host.index % 2
                else {}
            ),
        }

    def _topics(self) -> dict[str, tuple[uuid.UUID, int, SimTopic]]:
        assert self.log is not None
        return {
            name: (topic_id, count, self.topics[name])
            for name, (topic_id, count) in self.log.topics.items()
            if name in self.topics
        }

    def _fetcher(self, host: Host, transport: SimTransport, clock: Scheduler) -> Any:
        return self._fetcher_of(host, transport, clock, self.topics)

    def _create_late(self, clock: Scheduler) -> None:
        """The pattern's second topic, and one it does not match, created now."""
        assert self.log is not None
        now = clock.monotonic()
        for name, topic_id in ((LATE_TOPIC, LATE_TOPIC_ID), (DECOY_TOPIC, DECOY_TOPIC_ID)):
            self.topics[name] = SimTopic(now)
            self.log.topics[name] = (topic_id, LATE_PARTITIONS)

    def settled(self, live: list[Host]) -> str | None:
        unsettled = super().settled(live)
        if unsettled is not None:
            return unsettled
        # Each member's rack reached the broker and stayed there (through rejoins, the full
        # requests after errors, a static member's takeover).
        assert self.log is not None
        group = self.log.consumer_groups.get(GROUP)
        racks = {m.member_id: m.rack_id for m in group.members.values()} if group else {}
        for host in live:
            member = None if host.process is None else self.members.get(host.process.name)
            if member is None or member.process.dead:
                continue
            member_id = member.group._member.member_id
            if member_id in racks and racks[member_id] != _rack(host):
                raise Violation(
                    f"{member.process.name}'s rack at the broker is {racks[member_id]!r}, "
                    f"not {_rack(host)!r}"
                )
        return None

    def subscribed_partitions(self) -> list[tuple[str, int]]:
        late = (
            [(LATE_TOPIC, p) for p in range(LATE_PARTITIONS)] if LATE_TOPIC in self.topics else []
        )
        return super().subscribed_partitions() + late

    def check(self, now: float) -> None:
        for name, member in self._living().items():
            # Between steps: no lock needed (and the member without its property's frame).
            epoch = member.group._member._engine._epoch
            if epoch <= 0:
                continue  # not in the group (joining, fenced, left): the broker gives the next
            if epoch < self.epochs.get(name, 0):
                raise Violation(f"{name}'s member epoch went back {self.epochs[name]} -> {epoch}")
            self.epochs[name] = epoch
        super().check(now)


def _rack(host: Host) -> str | None:
    """consumer-848's racks: two, and no rack on every third host."""
    return None if host.index % 3 == 2 else f"rack-{host.index % 2}"


class _KnownTopics:
    """A member's view of the topics' ids: a topic created at ``t`` is known from ``t +
    lag_s`` (metadata reaches each client in its own time)."""

    def __init__(self, driver: BrokerAssignedConsumersDriver, clock: Scheduler, lag_s: float):
        self._driver = driver
        self._clock = clock
        self._lag_s = lag_s

    def topic_ids(self) -> dict[uuid.UUID, str]:
        assert self._driver.log is not None
        now = self._clock.monotonic()
        return {
            topic_id: name
            for name, (topic_id, _) in self._driver.log.topics.items()
            if self._driver.topics[name].started + self._lag_s <= now or name == TOPIC
        }


class AsyncConsumersDriver(ConsumersDriver):
    """The consumer through its asyncio face, as shipped: each member runs a
    :class:`recipes.partitioning.AsyncConsumer` on an asyncio event loop of its own
    (:class:`SimEventLoop`: asyncio's loop on simulated time). Its application either
    iterates (``async for``, as docs/partitioning.md's loop) or mixes ``getone()`` and
    ``getmany()`` (some with ``max_records``), a share of them cancelled by
    ``asyncio.wait_for`` before, while or after their fetch runs; it commits after some records it
    was handed, pauses and resumes through the loop-side calls, and its listener's
    callbacks are coroutines (a slow one awaits; the revocation commits).

    Checked on top of the consumer's invariants, with "returned" meaning handed to the
    application: a commit never passes a record that was not handed out (a cancelled call's
    records included); listener callbacks run on the member's loop; every loop keeps
    turning (nothing makes it wait for itself).
    """

    name = "consumer-async"
    _TICK_S = 0.25  # a loop that waits for itself stops for good: a second shows it

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        # By process name: the member's loop, and when its ticker last ran.
        self.loops: dict[str, tuple[Process, SimEventLoop]] = {}
        self.ticks: dict[str, float] = {}
        self.faces: dict[str, Any] = {}
        self._violation: str | None = None

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from coordination.errors import CoordinationError
        from recipes.partitioning import (
            AsyncConsumer,
            AsyncRebalanceListener,
            PartitionsNotOwnedError,
        )

        process = host.process
        assert process is not None
        me = process.name
        driver = self
        loop = SimEventLoop(clock, me)
        loop_thread = clock.current_thread()
        face: Any = None

        def on_the_loop(what: str) -> None:
            if clock.current_thread() is not loop_thread and self._violation is None:
                self._violation = f"{me}: {what} ran off its event loop"

        async def commit(why: str) -> None:
            try:
                await face.commit(timeout=5.0)
            except (PartitionsNotOwnedError, CoordinationError) as e:
                trace(f"{me}: commit ({why}) failed: {type(e).__name__}")

        class Listener(AsyncRebalanceListener):
            async def on_partitions_revoked(self, partitions: frozenset[Any]) -> None:
                on_the_loop("on_partitions_revoked")
                await asyncio.sleep(driver.slow_seconds(host))
                await commit("on revocation")
                trace(f"{me}: revoked {sorted(p for _, p in partitions)}")

            async def on_partitions_lost(self, partitions: frozenset[Any]) -> None:
                on_the_loop("on_partitions_lost")
                trace(f"{me}: lost {sorted(p for _, p in partitions)}")

            async def on_partitions_assigned(self, partitions: frozenset[Any]) -> None:
                on_the_loop("on_partitions_assigned")
                await asyncio.sleep(driver.slow_seconds(host))
                trace(f"{me}: assigned {sorted(p for _, p in partitions)}")

        face = AsyncConsumer(GROUP, listener=Listener(), **self._settings(host, transport, clock))
        self.members[me] = self._checked[me] = _Member(process, face.consumer)
        self.faces[me] = face
        self.loops[me] = (process, loop)
        self.ticks[me] = clock.monotonic()
        loop.run_until_complete(self._application(face, clock, trace, me, commit))

    async def _application(
        self, face: Any, clock: Scheduler, trace: Trace, me: str, commit: Callable[[str], Any]
    ) -> None:
        from coordination.errors import (
            CoordinationError,
            CoordinatorStateError,
            FatalBrokerError,
            FencedInstanceError,
        )

        rng = clock.random()
        ticker = asyncio.get_running_loop().create_task(self._tick(me, clock))
        try:
            await face.start()
            if rng.random() < 0.3:
                try:
                    async for record in face:  # the documented loop
                        self._returned(record, [record.offset])
                        await asyncio.sleep(rng.uniform(0.001, 0.01))  # handling it
                        await commit("after a record")
                except FencedInstanceError:
                    trace(f"{me}: stops: fenced by a newer process of its instance")
                return
            while True:
                try:
                    batch = await self._take(face, rng, trace, me)
                except CoordinatorStateError:
                    return  # closed
                except FencedInstanceError:
                    trace(f"{me}: stops: fenced by a newer process of its instance")
                    return
                except FatalBrokerError:
                    raise  # a finding
                except CoordinationError as e:
                    trace(f"{me}: getmany failed: {type(e).__name__}")
                    continue
                for tp, records in batch.items():
                    self._returned(tp, [r.offset for r in records])
                # Handling takes 1-10 ms a record; a commit follows a quarter of them (the
                # handling time since the last commit is taken in one wait: fewer steps).
                handling = 0.0
                for records in batch.values():
                    for _ in records:
                        handling += rng.uniform(0.001, 0.01)
                        if rng.random() < 0.25:
                            await asyncio.sleep(handling)
                            handling = 0.0
                            await commit("after a record")
                await asyncio.sleep(handling)
                draw = rng.random()
                if draw < 0.03:
                    owned = sorted(face.assignment())
                    if owned:
                        face.pause(rng.choice(owned))
                elif draw < 0.1 and face.paused():
                    face.resume(*face.paused())
        finally:
            ticker.cancel()
            del self.ticks[me]  # the application is over: its loop has nothing left to run

    async def _take(self, face: Any, rng: Any, trace: Trace, me: str) -> dict[Any, list[Any]]:
        """One ``getone()`` or ``getmany()``, maybe cancelled: what it handed out."""
        style = rng.random()
        if style < 0.4:
            call = face.getone()
        else:
            call = face.getmany(500, max_records=None if style < 0.7 else rng.randint(2, 10))
        if rng.random() < 0.15:
            try:
                result = await asyncio.wait_for(call, rng.uniform(0.0, 0.15))
            except asyncio.TimeoutError:
                trace(f"{me}: a {'getone' if style < 0.4 else 'getmany'} was cancelled")
                return {}
        else:
            result = await call
        if style < 0.4:
            from recipes.partitioning import TopicPartition

            # Keyed by its partition (a kafka-python record, with its list of headers, is
            # not hashable; a SimRecord was).
            return {TopicPartition(result.topic, result.partition): [result]}
        return dict(result)

    async def _tick(self, me: str, clock: Scheduler) -> None:
        while True:
            self.ticks[me] = clock.monotonic()
            await asyncio.sleep(self._TICK_S)

    def close(self, host: Host) -> None:
        name = None if host.process is None else host.process.name
        if name not in self.loops:
            return
        _, loop = self.loops[name]
        face = self.faces[name]
        loop.run_from_thread(lambda: face.close(10.0), timeout=30.0)

    def check(self, now: float) -> None:
        if self._violation is not None:
            raise Violation(self._violation)
        super().check(now)

    def settled(self, live: list[Host]) -> str | None:
        for name, (process, loop) in list(self.loops.items()):
            if process.dead or name not in self.ticks:
                continue
            stalled = loop.time() - self.ticks[name]
            if process.paused_until is None and stalled > 1.0:
                return f"{name}'s event loop stopped turning {stalled:.1f}s ago"
        return super().settled(live)
