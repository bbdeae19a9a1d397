"""One group member in a process of its own: the program the tests, the campaign and the
benchmarks start when they need to kill, freeze or time a member from outside.

    python -m devtools.member --recipe RECIPE --bootstrap HOSTS --group G [options]

Recipes (``--recipe``):

* ``listing``: a bare :class:`coordination.Coordinator` whose leader hands every member the
  sorted list of member ids (:class:`Listing`);
* ``election``: a :class:`recipes.election.LeaderElection` member named ``--name``; with
  ``--topic`` it writes records there through the leadership's transactional producer while
  it leads (``--on-write-error`` says what a failed write does);
* ``tasks``: a :class:`recipes.tasks.TaskDistribution` worker (worker id: the
  ``--group-instance-id`` if given, else ``--name``) whose every task is a thread doing a
  unit of work every ``--tick`` seconds, after ``owns()`` said yes (:class:`TaskRecorder`);
* ``consumer`` / ``consumer-async``: a :class:`recipes.partitioning.Consumer` (``poll``) or
  :class:`~recipes.partitioning.AsyncConsumer` (``getone``/``getmany``, some cancelled by a
  short ``asyncio.wait_for``) committing after each batch: the arguments and events of the
  interoperability peers (``tests/interop/peers.py``), which Java and librdkafka peers share;
* ``kazoo-election``: a kazoo ``Election`` contender (``--bootstrap`` is the ZooKeeper hosts,
  ``--group`` the election path), the baseline of ``benchmarks/election_failover.py``.

Group settings are passed through only when given (``--session-timeout-ms``,
``--heartbeat-interval-ms``, ``--rebalance-timeout-ms`` alias ``--max-poll-interval-ms``,
``--retry-backoff-ms``, ``--group-instance-id``, ``--client-id``): the library's defaults
otherwise. Callers state the timings they rely on.

**Output.** One JSON object a line on stdout, flushed at once (a SIGKILL loses at most a
line): ``{"event": KIND, ...fields, "t": TIME}``, ``t`` read from ``--clock``: ``wall``
(``time.time()``, the default), ``wall-ms`` (milliseconds, the peers' unit) or ``boot``
(``CLOCK_BOOTTIME``, the campaign's; see :func:`boot_time`). All comparable between
processes on one host. The events:

* every recipe: ``up {pid}`` once the member started (``started {topics}`` for the
  consumers, as the peers say it), ``closed`` once it closed;
* listing: ``prepare {generation, member_id}``, ``joined {generation, member_id, members}``;
* election: ``elected``/``deposed {token, generation[, reason]}``, ``leader {identity,
  token}`` on every change of leader; with ``--views``, ``view {leader, members}`` whenever
  either changes (polled every 20 ms). Writing: ``producer_ready``/``producer_failed``,
  ``wrote {token, seq, checked_at, acked}`` (``checked_at`` read just before the
  ``leadership.check()`` that let the write through, ``acked`` once committed),
  ``check_failed``, ``write_rejected {error, detail}``, ``zombie_write_accepted``. Each
  record written is ``{"token", "identity", "seq", "t"}``;
* tasks: ``started {task, config}`` before the task's first unit, ``stopped {task}`` when
  ``stop_task`` begins (the task worked in between), ``tick {task, checked_at}`` a unit of
  work (``checked_at`` read before the ``owns()`` check), ``error {task, error}``; all with
  ``worker``; with ``--views``, ``view {generation, complete, workers, held}``;
* consumers: ``led {members, assignor}`` when its assignor runs (on the leader),
  ``assigned``/``revoked``/``lost {partitions, generation, member_id}``, ``records
  {partitions: [[topic, partition, first, last, count]...]}``, ``committed {offsets}``,
  ``commit_failed {error}``;
* kazoo-election: ``elected`` when it leads.

**Input and signals.** SIGTERM or SIGINT closes the member (it leaves its group) and the
process exits 0. So does a line ``close`` on stdin, or the end of stdin, unless
``--no-stdin`` (for a process started with stdin on ``/dev/null``). SIGSTOP/SIGCONT freeze
and resume it, SIGKILL is a crash: nothing is done about them, that is what tests use them
for.

``--log PATH`` appends a debug log there, wall-clock stamped and named by ``--name``, to see
where a handoff's or a rebalance's time goes.

The parent's side is :class:`MemberProcess`: it starts the program, collects its events and
closes it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from coordination import Coordinator, Member, ProtocolMetadata

if TYPE_CHECKING:
    from recipes.election import Leadership
    from recipes.partitioning import PartitionAssignor, TopicPartition
    from recipes.tasks import TaskDistribution, TaskError, TaskSpec

# CLOCK_BOOTTIME is system-wide on Linux (so the events of different processes compare) and
# counts time the host spent suspended, as the recipes' leases do.
_BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boot_time() -> float:
    """Seconds on the boot clock, comparable between processes on this host."""
    return time.clock_gettime(_BOOT_CLOCK)


CLOCKS: Final[dict[str, Callable[[], float]]] = {
    "wall": time.time,
    "wall-ms": lambda: time.time() * 1000,
    "boot": boot_time,
}
RECIPES: Final = ("listing", "election", "tasks", "consumer", "consumer-async", "kazoo-election")
# The group settings passed through to the recipe when given, by their Python names.
_GROUP_SETTINGS: Final = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "rebalance_timeout_ms",
    "retry_backoff_ms",
    "group_instance_id",
    "client_id",
)


class Output:
    """Writes events as JSON lines, each flushed at once; callable from any thread.

    Called as ``output(kind, **fields)`` or ``output(event=kind, **fields)``; ``t`` is read
    from ``clock`` unless given.
    """

    def __init__(self, clock: Callable[[], float] = time.time, out: IO[str] | None = None):
        self.clock = clock
        self._out = out or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        record = {"event": event, **fields}
        record.setdefault("t", self.clock())
        line = json.dumps(record)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class Stopping:
    """When the member must close: SIGTERM, SIGINT, or ``close`` or the end of stdin."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def listen(self, *, stdin: bool) -> None:
        """Install the signal handlers (main thread only) and, if ``stdin``, its reader."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: self.event.set())
        if stdin:
            threading.Thread(target=self._read, name="stdin", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def is_set(self) -> bool:
        return self.event.is_set()


def group_settings(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The group settings given on the command line, plus a recipe's ``extra`` ones."""
    given = {name: getattr(args, name) for name in _GROUP_SETTINGS}
    given.update(extra)
    return {name: value for name, value in given.items() if value is not None}


# -- listing --------------------------------------------------------------------------------


class Listing(Coordinator):
    """The leader hands every member the sorted list of member ids and its own position."""

    def __init__(
        self,
        group_id: str,
        *,
        protocols: Sequence[str] = ("v1",),
        protocol_type: str = "listing",
        **settings: Any,
    ) -> None:
        super().__init__(group_id, **settings)
        self.protocols = list(protocols)
        self._type = protocol_type
        self.lock = threading.Lock()
        self.completed: list[tuple[int, str, str, dict[str, Any]]] = []
        self.prepared: list[tuple[int, str]] = []
        self.assigned_as_leader: list[int] = []

    def protocol_type(self) -> str:
        return self._type

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata(p, p.encode()) for p in self.protocols]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ids = sorted(m.member_id for m in members)
        with self.lock:
            self.assigned_as_leader.append(len(ids))
        plan = {"leader": leader_id, "members": ids, "protocol": protocol}
        return {i: json.dumps({**plan, "index": n}).encode() for n, i in enumerate(ids)}

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        with self.lock:
            self.prepared.append((generation, member_id))

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        with self.lock:
            self.completed.append((generation, member_id, protocol, json.loads(assignment)))

    def last(self) -> tuple[int, str, str, dict[str, Any]]:
        with self.lock:
            return self.completed[-1]


class _ReportingListing(Listing):
    def __init__(self, group_id: str, emit: Output, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self._emit = emit

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        super().on_join_prepare(generation, member_id)
        self._emit("prepare", generation=generation, member_id=member_id)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        super().on_join_complete(generation, member_id, protocol, assignment)
        members = json.loads(assignment)["members"]
        self._emit("joined", generation=generation, member_id=member_id, members=members)


def run_listing(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    member = _ReportingListing(
        args.group, emit, bootstrap_servers=args.bootstrap, **group_settings(args)
    )
    member.start()
    emit("up", pid=os.getpid())
    stopping.wait()
    member.close()
    emit("closed")


# -- election -------------------------------------------------------------------------------


def write_while_leading(
    leadership: Leadership, topic: str, on_error: str, interval: float, emit: Output
) -> None:
    """Write records to ``topic`` through the leadership's transactional producer, checking
    the leadership before each commit, every ``interval`` seconds.

    ``on_error``: ``stop`` ends the writing at the first failure; after a deposition it
    tries once more, so that ``check()`` reports it (``check_failed``). ``zombie`` does the
    same, but after a failed check still writes once: the broker must refuse it. ``retry``
    replaces the producer after any failure but losing the leadership (fenced, timed out,
    broker gone: a new producer fences whatever the old one left behind), and ends as soon
    as the leadership is lost.
    """
    from recipes.election import NotLeaderError

    producer: Any = None
    seq = 0
    try:
        while not (on_error == "retry" and leadership.lost.is_set()):
            if producer is None:
                try:
                    producer = leadership.transactional_producer()
                except Exception as e:  # deposed meanwhile, or a broker fault
                    emit("producer_failed", token=leadership.token, error=repr(e)[:300])
                    if on_error != "retry" or isinstance(e, NotLeaderError):
                        return
                    leadership.lost.wait(1.0)
                    continue
                emit("producer_ready", token=leadership.token)
            try:
                producer.begin_transaction()
                record = {"token": leadership.token, "identity": leadership.identity, "seq": seq}
                producer.send(topic, json.dumps({**record, "t": emit.clock()}).encode())
                checked_at = emit.clock()
                leadership.check()
                producer.commit_transaction()
                acked = emit.clock()
                emit("wrote", token=leadership.token, seq=seq, checked_at=checked_at, acked=acked)
                seq += 1
            except NotLeaderError as e:
                emit("check_failed", token=leadership.token, reason=str(e))
                if on_error == "zombie":
                    _zombie_write(producer, topic, leadership, emit)
                else:
                    with contextlib.suppress(Exception):
                        producer.abort_transaction()
                return
            except Exception as e:
                emit(
                    "write_rejected",
                    token=leadership.token,
                    seq=seq,
                    error=type(e).__name__,
                    detail=repr(e)[:300],
                )
                if on_error != "retry":
                    return
                with contextlib.suppress(Exception):
                    producer.close(timeout=1)
                producer = None
                seq += 1
            # Deposed between writes: the next round's check() reports it (or, retrying,
            # the loop ends).
            leadership.lost.wait(interval)
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=1)


def _zombie_write(producer: Any, topic: str, leadership: Leadership, emit: Output) -> None:
    """Write as if still leader, ignoring the check: the broker must refuse it."""
    try:
        with contextlib.suppress(Exception):  # still inside the transaction the check stopped
            producer.begin_transaction()
        producer.send(topic, json.dumps({"token": leadership.token, "zombie": True}).encode())
        producer.commit_transaction()
        emit("zombie_write_accepted", token=leadership.token)
    except Exception as e:
        emit("write_rejected", token=leadership.token, error=type(e).__name__)


def run_election(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from recipes.election import LeaderElection, LeaderInfo

    writers: list[threading.Thread] = []

    def on_elected(leadership: Leadership) -> None:
        emit("elected", token=leadership.token, generation=leadership.generation_id)
        if args.topic:
            writer = threading.Thread(
                target=write_while_leading,
                args=(leadership, args.topic, args.on_write_error, args.interval, emit),
                daemon=True,
            )
            writers.append(writer)
            writer.start()

    def on_deposed(leadership: Leadership) -> None:
        emit(
            "deposed",
            token=leadership.token,
            generation=leadership.generation_id,
            reason=leadership.reason,
        )

    def on_leader_change(info: LeaderInfo | None) -> None:
        emit(
            "leader",
            identity=info.identity if info else None,
            token=info.token if info else None,
        )

    election = LeaderElection(
        args.group,
        identity=_required(args, "name"),
        eligible=not args.ineligible,
        priority=args.priority,
        on_elected=on_elected,
        on_deposed=on_deposed,
        on_leader_change=on_leader_change,
        bootstrap_servers=args.bootstrap,
        **group_settings(args),
    )
    election.start()
    emit("up", pid=os.getpid())
    # Polled rather than taken from on_leader_change: that fires only when the leader
    # changes, and a benchmark also needs to see a new member counted by everyone.
    view: tuple[str | None, int] | None = None
    while not stopping.wait(0.02 if args.views else None):
        info = election.leader()
        now = (info.identity if info else None, len(election.members()))
        if now != view:
            view = now
            emit("view", leader=now[0], members=now[1])
    election.close()
    for writer in writers:
        writer.join(5)
    emit("closed")


def run_kazoo_election(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from kazoo.client import KazooClient

    timeout_s = (args.session_timeout_ms or 6000) / 1000
    client = KazooClient(hosts=args.bootstrap, timeout=timeout_s)
    client.start(timeout=30)
    election = client.Election(args.group, _required(args, "name"))

    def lead() -> None:
        emit("elected")
        stopping.wait()

    contender = threading.Thread(target=election.run, args=(lead,), daemon=True)
    contender.start()
    emit("up", pid=os.getpid())
    stopping.wait()
    # A leader's lead() returns now and run() deletes its lock node; a follower still
    # waiting to be elected withdraws.
    election.cancel()
    contender.join(10)
    client.stop()
    client.close()
    emit("closed")


# -- tasks ----------------------------------------------------------------------------------


class TaskRecorder:
    """start_task/stop_task that run ticking threads and report every event to ``emit``
    (called as ``emit(event=kind, **fields)``): the tasks recipe's worker, in this process or
    in a test's."""

    def __init__(
        self,
        worker_id: str,
        emit: Callable[..., None],
        tick: float = 0.1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.worker_id = worker_id
        self.emit = emit
        self.tick = tick
        self.clock = clock
        self.distribution: TaskDistribution | None = None
        self._threads: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._lock = threading.Lock()

    def start_task(self, task: str, spec: TaskSpec) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=self._work, args=(task, stop), daemon=True)
        with self._lock:
            self._threads[task] = (stop, thread)
        self.emit(event="started", task=task, worker=self.worker_id, config=spec.config)
        thread.start()

    def stop_task(self, task: str) -> None:
        self.emit(event="stopped", task=task, worker=self.worker_id)
        with self._lock:
            stop, thread = self._threads.pop(task)
        stop.set()
        thread.join()

    def on_task_error(self, task: str, error: TaskError) -> None:
        self.emit(event="error", task=task, worker=self.worker_id, error=type(error).__name__)

    def _work(self, task: str, stop: threading.Event) -> None:
        assert self.distribution is not None
        while not stop.wait(self.tick):
            checked_at = self.clock()
            if not self.distribution.owns(task):
                continue
            self.emit(event="tick", task=task, worker=self.worker_id, checked_at=checked_at)


def run_tasks(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from recipes.tasks import TaskDistribution, TopicTasks

    worker_id = args.group_instance_id or _required(args, "name")
    source: Any
    if args.task_topic:
        source = TopicTasks(args.task_topic)
    elif args.task_count is not None:
        source = {f"task-{i:02d}": 1.0 for i in range(args.task_count)}
    else:
        source = json.loads(args.tasks or "{}")
    recorder = TaskRecorder(worker_id, emit, args.tick, emit.clock)
    distribution = TaskDistribution(
        args.group,
        worker_id=worker_id,
        start_task=recorder.start_task,
        stop_task=recorder.stop_task,
        on_task_error=recorder.on_task_error,
        tasks=source,
        bootstrap_servers=args.bootstrap,
        **group_settings(
            args, stop_timeout_ms=args.stop_timeout_ms, max_delay_ms=args.max_delay_ms
        ),
    )
    recorder.distribution = distribution
    distribution.start()
    listed = {"tasks": sorted(source)} if isinstance(source, dict) else {}
    emit("up", worker=worker_id, pid=os.getpid(), **listed)
    # Each rebalance's outcome as this worker saw it (the leader sees the whole group).
    last = None
    while not stopping.wait(0.05 if args.views else None):
        view = distribution.describe()
        if view is not None and view != last:
            last = view
            emit(
                "view",
                worker=worker_id,
                generation=view.generation,
                complete=view.complete,
                workers={w: list(ts) for w, ts in view.workers.items()},
                held={w: list(ts) for w, ts in view.held.items()},
            )
    distribution.close()
    emit("closed", worker=worker_id)


# -- consumers ------------------------------------------------------------------------------


def _partition_list(partitions: frozenset[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def _assignors(names: str, emit: Output) -> list[PartitionAssignor]:
    """The assignors named (a preference list), each printing ``led`` when it runs: an
    assignor runs only on the group's leader."""
    from recipes.partitioning import (
        CooperativeStickyAssignor,
        RangeAssignor,
        RoundRobinAssignor,
        StickyAssignor,
    )
    from recipes.partitioning.protocol import Assignment, Subscription

    kinds: dict[str, Callable[[], PartitionAssignor]] = {
        "range": RangeAssignor,
        "roundrobin": RoundRobinAssignor,
        "sticky": StickyAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }

    def reporting(assignor: PartitionAssignor) -> PartitionAssignor:
        original = assignor.assign

        def assign(
            partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> dict[str, Assignment]:
            emit("led", members=len(subscriptions), assignor=assignor.name)
            return original(partitions_per_topic, subscriptions)

        assignor.assign = assign  # type: ignore[method-assign]
        return assignor

    return [reporting(kinds[name.strip()]()) for name in names.split(",")]


class _Membership:
    """What a rebalance event reports of the member: its generation and member id."""

    def __init__(self, emit: Output) -> None:
        self.emit = emit
        self.group: Callable[[], Any] | None = None  # the consumer's group, once made

    def report(self, kind: str, partitions: frozenset[TopicPartition]) -> None:
        assert self.group is not None
        g = self.group().generation()
        self.emit(
            kind,
            partitions=_partition_list(partitions),
            generation=g.generation_id,
            member_id=g.member_id,
        )


def _consumer_options(args: argparse.Namespace, emit: Output) -> dict[str, Any]:
    return {
        "topics": args.topics.split(","),
        "assignors": _assignors(args.assignor, emit),
        "bootstrap_servers": args.bootstrap,
        "max_poll_records": args.max_poll_records,
        **group_settings(args),
    }


def _report_batch(batch: Mapping[Any, Sequence[Any]], emit: Output) -> dict[Any, list[int]]:
    """Print a ``records`` event; returns ``partition -> [first, last, count]``."""
    ranges = {
        tp: [records[0].offset, records[-1].offset, len(records)] for tp, records in batch.items()
    }
    emit("records", partitions=[[t, p, *r] for (t, p), r in sorted(ranges.items())])
    return ranges


def run_consumer(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from coordination import errors
    from recipes.partitioning import Consumer, RebalanceListener

    membership = _Membership(emit)

    class Reporter(RebalanceListener):
        def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("assigned", partitions)

        def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            # Each batch was committed right after it was processed: nothing to commit here.
            membership.report("revoked", partitions)

        def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("lost", partitions)

    consumer = Consumer(args.group, listener=Reporter(), **_consumer_options(args, emit))
    membership.group = lambda: consumer.group
    consumer.start()
    emit("started", topics=args.topics.split(","))
    try:
        while not stopping.is_set():
            batch = consumer.poll(timeout_ms=args.poll_ms)
            if not batch:
                continue
            ranges = _report_batch(batch, emit)
            offsets = {tp: r[1] + 1 for tp, r in ranges.items()}
            try:
                consumer.commit(offsets)
            except (errors.CommitFailedError, errors.CoordinationError) as e:
                emit("commit_failed", error=str(e))
                continue
            emit("committed", offsets=[[t, p, o] for (t, p), o in sorted(offsets.items())])
    finally:
        consumer.close()
        emit("closed")


async def _consume_async(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from coordination import errors
    from recipes.partitioning import AsyncConsumer, AsyncRebalanceListener, TopicPartition

    rng = random.Random()
    membership = _Membership(emit)

    class Reporter(AsyncRebalanceListener):
        async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("assigned", partitions)

        async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            # What was handed out was committed right after: nothing to commit here.
            membership.report("revoked", partitions)

        async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("lost", partitions)

    consumer = AsyncConsumer(args.group, listener=Reporter(), **_consumer_options(args, emit))
    membership.group = lambda: consumer.consumer.group
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.event.set)
    await consumer.start()
    emit("started", topics=args.topics.split(","))
    wait_s = args.poll_ms / 1000
    try:
        while not stopping.is_set():
            draw = rng.random()
            try:
                if draw < 0.4:
                    record = await asyncio.wait_for(consumer.getone(), wait_s)
                    batch = {TopicPartition(record.topic, record.partition): [record]}
                elif draw < 0.6:  # often cancelled while its fetch runs
                    batch = await asyncio.wait_for(
                        consumer.getmany(timeout_ms=args.poll_ms, max_records=rng.randint(1, 20)),
                        wait_s * rng.uniform(0.2, 1.0),
                    )
                else:
                    batch = await consumer.getmany(timeout_ms=args.poll_ms)
            except TimeoutError:
                continue  # cancelled: its records come again
            if not batch:
                continue
            ranges = _report_batch(batch, emit)
            # The positions: past what was handed out, nothing more. Named explicitly so
            # that what is reported is what was committed (a revoked one fails the call).
            offsets = {tp: consumer.position(tp) for tp in ranges}
            wanted = {tp: o for tp, o in offsets.items() if o is not None}
            try:
                await consumer.commit(wanted)
            except errors.CoordinationError as e:
                emit("commit_failed", error=str(e))
                continue
            emit("committed", offsets=[[t, p, o] for (t, p), o in sorted(wanted.items())])
    finally:
        await consumer.close()
        emit("closed")


def run_consumer_async(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    asyncio.run(_consume_async(args, emit, stopping))


# -- the parent's side ----------------------------------------------------------------------

ROOT: Final = Path(__file__).resolve().parents[1]


class MemberProcess:
    """A ``python -m devtools.member ARGS`` child, run from this checkout: a reader thread
    collects the events it prints (``events``); it can be signalled (SIGKILL, SIGSTOP,
    SIGCONT), and closed. ``stderr`` as for :class:`subprocess.Popen`."""

    def __init__(self, *args: str, stderr: Any = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devtools.member", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self._changed = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):  # a stray line from a library
                event = json.loads(line)
                with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        with self._changed:
            return [e for e in self.events if e["event"] == kind]

    def last(self, *kinds: str) -> dict[str, Any] | None:
        """The latest event of any of these kinds, if any."""
        with self._changed:
            found = [e for e in self.events if e["event"] in kinds]
        return found[-1] if found else None

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def request_close(self) -> None:
        """Ask the member to close (``close`` on its stdin), without waiting."""
        assert self.process.stdin is not None
        self.process.stdin.write("close\n")
        self.process.stdin.flush()

    def close(self, timeout: float = 15.0) -> None:
        """Ask the process to close (resuming it if frozen); kill it if it has not exited
        within ``timeout`` seconds; reap it."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGCONT)
                self.request_close()
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(5)  # the pipe ends when the process does
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


# -- the command line -----------------------------------------------------------------------

_RUN: Final[dict[str, Callable[[argparse.Namespace, Output, Stopping], None]]] = {
    "listing": run_listing,
    "election": run_election,
    "tasks": run_tasks,
    "consumer": run_consumer,
    "consumer-async": run_consumer_async,
    "kazoo-election": run_kazoo_election,
}


def _required(args: argparse.Namespace, name: str) -> str:
    value = getattr(args, name)
    if not value:
        raise SystemExit(f"--recipe {args.recipe} needs --{name}")
    return str(value)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devtools.member",
        description="One group member in a process of its own, reporting JSON lines.",
    )
    p.add_argument("--recipe", required=True, choices=RECIPES)
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (ZooKeeper hosts)")
    p.add_argument("--group", required=True, help="the group id (the ZooKeeper election path)")
    p.add_argument("--name", help="election identity; task worker id (unless static)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="what t is read from")
    p.add_argument("--no-stdin", action="store_true", help="stop on SIGTERM/SIGINT only")
    p.add_argument("--log", metavar="PATH", help="append a debug log there")
    g = p.add_argument_group("group settings (passed through when given)")
    g.add_argument("--session-timeout-ms", type=int)
    g.add_argument("--heartbeat-interval-ms", type=int)
    g.add_argument("--rebalance-timeout-ms", "--max-poll-interval-ms", type=int)
    g.add_argument("--retry-backoff-ms", type=int)
    g.add_argument("--group-instance-id")
    g.add_argument("--client-id")
    g.add_argument("--views", action="store_true", help="election, tasks: report view changes")
    e = p.add_argument_group("election")
    e.add_argument("--ineligible", action="store_true")
    e.add_argument("--priority", type=int, default=0)
    e.add_argument("--topic", help="write records here while leading")
    e.add_argument("--interval", type=float, default=0.1, help="seconds between writes")
    e.add_argument("--on-write-error", choices=("stop", "zombie", "retry"), default="stop")
    t = p.add_argument_group("tasks (the task set: --tasks, --task-count or --task-topic)")
    t.add_argument("--tasks", help="a JSON object: task id -> weight")
    t.add_argument("--task-count", type=int, help="tasks task-00, task-01, ... of weight 1")
    t.add_argument("--task-topic", help="read the task set from this compacted topic")
    t.add_argument("--tick", type=float, default=0.1, help="seconds between units of work")
    t.add_argument("--stop-timeout-ms", type=int)
    t.add_argument("--max-delay-ms", type=int)
    c = p.add_argument_group("consumer, consumer-async")
    c.add_argument("--topics", default="")
    c.add_argument("--assignor", default="cooperative-sticky", help="a preference list")
    c.add_argument("--poll-ms", type=int, default=100)
    c.add_argument("--max-poll-records", type=int, default=500)
    return p


def _log_to(path: str, name: str) -> None:
    logging.basicConfig(
        filename=path,
        level=logging.DEBUG,
        format=f"%(created).4f {name} %(threadName)s %(name)s %(message)s",
    )
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("kafka.net.connection").setLevel(logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.log:
        _log_to(args.log, args.name or f"pid{os.getpid()}")
    stopping = Stopping()
    stopping.listen(stdin=not args.no_stdin)
    _RUN[args.recipe](args, Output(CLOCKS[args.clock]), stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
