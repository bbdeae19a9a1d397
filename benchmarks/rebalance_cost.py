"""Rebalance cost: what one member joining or leaving costs a group reading a busy topic.

For each group size N (default 10, 50, 200) a topic of P = max(20, 2N) partitions gets a
record on every partition every ``produce_interval`` (50 ms, slower when P is large so
that the whole topic stays at or below 1000 records/s; a separate producer process, so
that it does not share a GIL with our consumers). Then, for each implementation in turn,
a fresh group of N consumers subscribes (starting at the end of each partition, no offset
commits anywhere), and once it is stable:

* ``join``: member N+1 is created; the clock starts just before its consumer is built;
* ``leave``: member 0 (the oldest) closes; the clock starts at its ``close()`` call.

Each event comes after a random pause, uniform within one heartbeat interval (500 ms), once
the group is stable. Members heartbeat in step with their joins, and a group is found stable
just after a heartbeat brought the last assignment: without the pause every event of a run
met the heartbeats at the same point of their cycle, which gave one implementation or the
other up to an interval for nothing (before the pause, ours learnt of every leave 0.40-0.45 s
after it and Java's 0.31 s, whatever the repeat). ``--seed`` replays the pauses.

For each event, from every consumer's own record of what it consumed and when:

* ``settle_s``: from the event until every partition is owned by exactly one member of the
  new group and that owner has consumed a record produced after the event;
* ``stalled_partition_s``: on the partitions that keep their owner across the event
  (unaffected ones), the sum of the consumption gaps longer than 1 s (at least 3 produce
  intervals) that overlap [event, settle], each counted over its whole length from the
  event on (also past the settle point: the partition stalled that long).
  The goal is 0: without a group-wide barrier nothing stops a member that keeps its
  partitions.
* ``assigned_s``: from the event until the last partition that moved was announced to its
  new owner (its ``on_partitions_assigned``): the protocol's share of ``settle_s``; the
  rest is the new owner's start of fetching (committed offset, reset, first fetch).

Implementations, taking turns within each repeat against the same broker (the first turn
moving round from one repeat to the next):

* ``ours-consumer``: ``recipes.partitioning.Consumer(group_protocol="consumer",
  group_remote_assignor="uniform", fetcher="kafka-python")``, each member in a process of
  its own (see below): kafka-python's fetcher, this protocol's default until 2026-12-06;
* ``ours-lean``: ``ours-consumer`` with ``fetcher="lean"`` (records fetched on the
  polling thread, no fetcher thread of kafka-python's), this protocol's default now;
* ``ours-classic``: the same ``Consumer`` on the classic protocol with
  ``CooperativeStickyAssignor`` (the best classic case);
* ``java-consumer``: Kafka's Java ``KafkaConsumer`` (kafka-clients 4.3.1,
  ``group.protocol=consumer``, ``group.remote.assignor=uniform``), all members threads of
  one JVM driven over stdin/stdout (``benchmarks/java/RebalanceCost.java``);
* ``java-classic``: the same JVM, ``group.protocol=classic`` with ``CooperativeStickyAssignor``.

Settings: the broker is a Kafka 4.3.1 test broker (``coordination.testing``), whose KIP-848
groups have ``group.consumer.heartbeat.interval.ms=500`` and
``group.consumer.session.timeout.ms=6000``; the classic members use the same:
``heartbeat_interval_ms=500``, ``session_timeout_ms=6000``; every member has a rebalance
timeout (``max.poll.interval.ms``) of 30 s and polls with a 100 ms timeout.

Then the throughput of one poll loop with no rebalance: one consumer of each implementation
reads a backlog of 200,000 records (20 partitions, 100-byte values) from the start; the
figure is records/s between the 10% and the 90% mark, to show that the new protocol's
heartbeat path does not slow fetching (ours in this process: alone, it shares its GIL with
no other member).

Run (JDK 17+ and Maven needed; a broker is started on loopback unless
``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one)::

    python benchmarks/rebalance_cost.py --quick        # N = 10, 3 repeats
    python benchmarks/rebalance_cost.py                # N = 10, 50, 200; 5 repeats
    python benchmarks/rebalance_cost.py --sizes 10,50 --repeats 5
    python benchmarks/rebalance_cost.py --gate-cost --repeats 5   # what poll's lease gate costs
    python benchmarks/rebalance_cost.py --sizes 200 --members-per-process 4   # 51 processes

Where our members run: in child processes (``benchmarks/_rebalance_member.py``, driven over
stdin/stdout as the JVM is), one member per process by default, as deployments run
consumers; ``--members-per-process M`` packs M members into a process (member i in process
i // M) for a machine without room for N+1 interpreters (about 47 MB each). Each process
streams its members' ownership changes and consumption as JSON lines, with times from
``time.time()`` (epoch ms, as the JVM's), and this process keeps the same record of them as
for the JVM's members, so one analysis serves all four. The interpreters start first, a few
at a time (each spends about a second of CPU importing), and only when all are up do the
members start; the joining member's process is started (and has imported) before the clock
starts, as the JVM is up before its consumer is built. Until this layout all of ours were
threads of the benchmark's process, one GIL for N poll loops, heartbeats and fetchers (at
N = 200 they lost their sessions before converging); ``--members-per-process`` of N+1 or
more puts them all in one process again, for comparison. On a machine with few cores, N
interpreters can cost more than one (docs/consumer-group-protocol.md has both layouts at
N = 50 on 2 cores). The Java members stay threads of one JVM (no GIL there); the layouts
differ in what they share (a JVM shares one heap and JIT, our processes nothing but the
machine), so the small-N figures are the fairest comparison and large N shows how each
scales on the machine at hand. A group's processes are stopped with it: there is no pool
of warm processes across groups.

Tables give median [min .. max] over the repeats; the last line holds the headline figures
and ratios as ``name=value`` pairs.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import itertools
import json
import logging
import math
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import TopicAlreadyExistsError

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _java import compile_java
from _rebalance_member import (
    CLOSE_TIMEOUT_S,
    HEARTBEAT_INTERVAL_MS,
    POLL_TIMEOUT_MS,
    REBALANCE_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    now_ms,
    protocol_settings,
)

from coordination.testing import running_kafka
from recipes.partitioning import Consumer

log = logging.getLogger("rebalance_cost")

PRODUCE_INTERVAL_MS = 50
MAX_PRODUCE_RATE = 1_000  # records/s over the whole topic; 2 cores run everything here
MIN_PARTITIONS = 20
GAP_THRESHOLD_S = 1.0
# After a group converged its ownership must stay unchanged this long (the classic
# cooperative protocol takes two rebalances for one join); it also gives every partition
# consumption after the settle point, which closes the last gap.
QUIET_S = 1.5
CONVERGE_TIMEOUT_S = 90.0
STATUS_EVERY_S = 0.1
MEMBER_PROGRAM = Path(__file__).resolve().parent / "_rebalance_member.py"
# Interpreters starting at once: each spends about a second of CPU on its imports.
STARTING_AT_ONCE = 2 * (os.cpu_count() or 2)
PROCESS_START_TIMEOUT_S = 120.0
INDEX_INTERVAL_BYTES = 4096  # the broker's index.interval.bytes (Kafka's default)
BACKLOG_RECORDS = 200_000
BACKLOG_PARTITIONS = 20
BACKLOG_VALUE = b"v" * 100
JAVA_ARTIFACTS = ("org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36")
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "RebalanceCost.java"

IMPLEMENTATIONS = ("ours-consumer", "ours-lean", "ours-classic", "java-consumer", "java-classic")
EVENTS = ("join", "leave")
# (ours, against, name): ratios printed when both ran; below 1, ours is faster.
RATIOS = (
    ("ours-consumer", "java-consumer", "java"),
    ("ours-consumer", "ours-classic", "classic"),
    ("ours-lean", "java-consumer", "lean_java"),
)


class BenchmarkError(Exception):
    """A member failed or a group did not converge in time."""


def produce_interval_ms(partitions: int) -> int:
    return max(PRODUCE_INTERVAL_MS, math.ceil(partitions * 1000 / MAX_PRODUCE_RATE))


def gap_threshold_ms(partitions: int) -> float:
    return max(GAP_THRESHOLD_S * 1000, 3 * produce_interval_ms(partitions))


# -- what the members did ---------------------------------------------------------------------


@dataclass
class Timeline:
    """Every ownership change of a group and every poll's newest record per partition.

    Times are epoch milliseconds; ``consumed[member, partition]`` holds (when, newest record
    timestamp) pairs in time order.
    """

    events: list[tuple[float, int, str, list[int]]] = field(default_factory=list)
    consumed: dict[tuple[int, int], list[tuple[float, int]]] = field(default_factory=dict)


Status = dict[int, dict[int, int]]
"""Each open member's partitions, with the newest record timestamp it consumed (-1: none)."""


class Group(abc.ABC):
    """The members of one benchmark group, of one implementation."""

    @abc.abstractmethod
    def start_members(self, count: int) -> None:
        """Start ``count`` members; returns without waiting for them to join."""

    @abc.abstractmethod
    def add_member(self) -> float:
        """Start one more member; returns the time just before it was created."""

    @abc.abstractmethod
    def remove_member(self, index: int) -> float:
        """Close member ``index``; returns the time of its close() call."""

    @abc.abstractmethod
    def status(self) -> Status: ...

    @abc.abstractmethod
    def timeline(self, since_ms: float) -> Timeline:
        """What happened from ``since_ms`` on (ownership changes: all of them)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every member and wait until they have left."""


# -- a child driven over stdin/stdout (ours and the JVM) ---------------------------------------


class LineDriven:
    """A child process that takes commands as lines on stdin and writes JSON lines on
    stdout, read by a thread of its own: replies to commands go to :meth:`answer`, what a
    subclass's :meth:`_received` does not take for itself."""

    who = "the child"

    def __init__(self, command: list[str], reader_name: str) -> None:
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=reader_name, daemon=True)
        self._reader.start()

    def send(self, line: str) -> None:
        assert self._process.stdin is not None
        if self._process.poll() is not None:
            raise BenchmarkError(f"{self.who} exited with {self._process.returncode}")
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def answer(self, key: str, timeout_s: float) -> Any:
        """The value of the next reply that has ``key``."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchmarkError(f"{self.who} did not say {key!r} within {timeout_s:.0f}s")
            try:
                reply = self._replies.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if self._process.poll() is not None:
                    raise BenchmarkError(
                        f"{self.who} exited with {self._process.returncode}"
                    ) from None
                continue
            if key in reply:
                return reply[key]
            log.warning("ignoring a late reply from %s: %s", self.who, reply)

    def _reap(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the child to end, then kill it; then its reader."""
        try:
            self._process.wait(max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop; killing it", self.who)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._reader.join(5)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a stray line from a library
            if not self._received(message):
                self._replies.put(message)
        self._ended()

    def _received(self, message: dict[str, Any]) -> bool:
        """Take a message that is not a reply; False leaves it to :meth:`answer`."""
        return False

    def _ended(self) -> None:
        """The child's output ended."""


# -- ours: recipes.partitioning.Consumer, in processes of their own ---------------------------


class MemberProcess(LineDriven):
    """A process of benchmarks/_rebalance_member.py, hosting some members of a group."""

    def __init__(self, group: OursGroup, number: int) -> None:
        self._group = group
        self.number = number
        self.who = f"process {number}"
        self._stopping = False
        command = [
            sys.executable,
            str(MEMBER_PROGRAM),
            group.bootstrap_servers,
            group.group_id,
            group.topic,
            group.protocol,
            *([group.log_file] if group.log_file else []),
        ]
        super().__init__(command, f"{group.group_id}-process-{number}")

    def stop(self) -> None:
        """Ask every member to close (all at once); :meth:`wait` waits for them."""
        self._stopping = True
        with contextlib.suppress(OSError, BenchmarkError):
            self.send("stop")

    def wait(self, deadline: float) -> None:
        self._reap(deadline - time.monotonic())

    def _received(self, message: dict[str, Any]) -> bool:
        if "changed" in message:
            t, member, kind, partitions = message["changed"]
            self._group.changed(float(t), int(member), str(kind), list(partitions))
        elif "consumed" in message:
            t, member, newest = message["consumed"]
            self._group.consumed(float(t), int(member), {int(p): int(ts) for p, ts in newest})
        elif "error" in message:
            self._group.fail(f"process {self.number}: {message['error']}")
        else:
            return False
        return True

    def _ended(self) -> None:
        if not self._stopping:
            self._group.fail(f"process {self.number} ended unasked")


class OursGroup(Group):
    """Our members, ``members_per_process`` to a process: member i lives in process i // M."""

    def __init__(
        self,
        group_id: str,
        topic: str,
        bootstrap_servers: str,
        protocol: str,
        members_per_process: int,
        log_file: str | None,
    ) -> None:
        self.group_id = group_id
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.protocol = protocol
        self.log_file = log_file
        self._per_process = members_per_process
        self._processes: list[MemberProcess] = []
        self._count = 0  # members started
        # Under _lock: the process readers write it, the benchmark reads it.
        self._lock = threading.Lock()
        self._events: list[tuple[float, int, str, list[int]]] = []
        self._consumed: dict[tuple[int, int], list[tuple[float, int]]] = {}
        self._owned: dict[int, dict[int, int]] = {}  # open members only
        self._error: str | None = None

    # What the processes report.

    def changed(self, t: float, member: int, kind: str, partitions: list[int]) -> None:
        with self._lock:
            self._events.append((t, member, kind, partitions))
            owned = self._owned.get(member)
            if owned is None:
                return  # it is leaving
            for p in partitions:
                if kind == "assigned":
                    owned[p] = -1
                else:
                    owned.pop(p, None)

    def consumed(self, t: float, member: int, newest: Mapping[int, int]) -> None:
        with self._lock:
            owned = self._owned.get(member, {})
            for p, ts in newest.items():
                self._consumed.setdefault((member, p), []).append((t, ts))
                if p in owned:
                    owned[p] = ts

    def fail(self, problem: str) -> None:
        log.error("%s: %s", self.group_id, problem)
        with self._lock:
            self._error = self._error or problem

    # The Group interface.

    def start_members(self, count: int) -> None:
        # Every interpreter first, bounded (starting one costs about a second of CPU),
        # then every member at once: the group forms while no process is still importing.
        wanted = math.ceil(count / self._per_process)
        with ThreadPoolExecutor(STARTING_AT_ONCE) as pool:
            list(pool.map(self._start_process, range(len(self._processes), wanted)))
        for i in range(count):
            self._add(i)
        for i in range(count):
            self._home(i).answer("added", PROCESS_START_TIMEOUT_S)
        self._count = count

    def add_member(self) -> float:
        index = self._count
        if index // self._per_process >= len(self._processes):
            # Before the clock starts: a deployment's process is up before its consumer.
            self._start_process(len(self._processes))
        self._add(index)
        self._count += 1
        return float(self._home(index).answer("t0", PROCESS_START_TIMEOUT_S))

    def remove_member(self, index: int) -> float:
        with self._lock:
            del self._owned[index]
        self._home(index).send(f"leave {index}")
        return float(self._home(index).answer("t0", CLOSE_TIMEOUT_S))

    def status(self) -> Status:
        with self._lock:
            if self._error is not None:
                raise BenchmarkError(self._error)
            return {m: dict(owned) for m, owned in self._owned.items()}

    def timeline(self, since_ms: float) -> Timeline:
        with self._lock:
            return Timeline(
                events=sorted(self._events),
                consumed={
                    key: [pt for pt in points if pt[0] >= since_ms]
                    for key, points in self._consumed.items()
                },
            )

    def close(self) -> None:
        for process in self._processes:
            process.stop()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S + 30
        for process in self._processes:
            process.wait(deadline)
        self._processes.clear()

    def _start_process(self, number: int) -> None:
        process = MemberProcess(self, number)
        with self._lock:
            self._processes.append(process)
        process.answer("ready", PROCESS_START_TIMEOUT_S)

    def _home(self, index: int) -> MemberProcess:
        number = index // self._per_process
        return next(p for p in self._processes if p.number == number)

    def _add(self, index: int) -> None:
        with self._lock:
            self._owned[index] = {}
        self._home(index).send(f"add {index}")


# -- java: KafkaConsumer threads in one JVM ---------------------------------------------------


class JavaDriver(LineDriven):
    """The JVM of benchmarks/java/RebalanceCost.java, one group at a time."""

    who = "the JVM"

    def __init__(self, bootstrap_servers: str, workdir: Path) -> None:
        classpath = compile_java(JAVA_SOURCE, JAVA_ARTIFACTS, workdir, BenchmarkError)
        command = [
            "java",
            "-Xmx1g",
            "-cp",
            os.pathsep.join(classpath),
            "RebalanceCost",
            bootstrap_servers,
            str(SESSION_TIMEOUT_MS),
            str(HEARTBEAT_INTERVAL_MS),
            str(REBALANCE_TIMEOUT_MS),
            str(POLL_TIMEOUT_MS),
        ]
        self.error: str | None = None
        super().__init__(command, "java-reader")

    def ask(self, line: str, answer: str, timeout_s: float = CONVERGE_TIMEOUT_S) -> Any:
        """Send a command; returns the value of the next reply that has ``answer``."""
        self.send(line)
        return self.answer(answer, timeout_s)

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(OSError, BenchmarkError):
                self.send("quit")
        self._reap(CLOSE_TIMEOUT_S)

    def _received(self, message: dict[str, Any]) -> bool:
        if "error" not in message:
            return False
        log.error("Java: %s", message["error"])
        self.error = self.error or str(message["error"])
        return True


class JavaGroup(Group):
    def __init__(self, group_id: str, topic: str, driver: JavaDriver, protocol: str) -> None:
        self._group_id = group_id
        self._topic = topic
        self._driver = driver
        self._protocol = protocol
        driver.error = None

    def start_members(self, count: int) -> None:
        self._driver.ask(
            f"start {self._group_id} {self._topic} {self._protocol} {count}", "started"
        )

    def add_member(self) -> float:
        # The JVM reads its clock itself, so the pipe's delay is not measured.
        return float(self._driver.ask("join", "t0"))

    def remove_member(self, index: int) -> float:
        return float(self._driver.ask(f"leave {index}", "t0"))

    def status(self) -> Status:
        if self._driver.error is not None:
            raise BenchmarkError(f"a Java member failed: {self._driver.error}")
        found = self._driver.ask("status", "status")
        return {int(m): {int(p): int(ts) for p, ts in owned.items()} for m, owned in found.items()}

    def timeline(self, since_ms: float) -> Timeline:
        found = self._driver.ask(f"dump {since_ms:.3f}", "dump")
        return Timeline(
            events=sorted((float(t), int(m), str(k), list(ps)) for t, m, k, ps in found["events"]),
            consumed={
                (int(m), int(p)): [(float(t), int(ts)) for t, ts in points]
                for m, p, points in found["consumed"]
            },
        )

    def close(self) -> None:
        self._driver.ask("stop", "stopped", CLOSE_TIMEOUT_S + 30)


# -- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    settle_s: float
    stalled_partition_s: float
    unaffected: int  # partitions that kept their owner
    moved: int
    # Until the last moved partition's new owner was told of it (its listener's
    # on_partitions_assigned): the protocol's share of settle_s; the rest is the new
    # owner's start of fetching.
    assigned_s: float


def converged(status: Status, members: set[int], partitions: int, after_ms: float) -> bool:
    """Whether exactly ``members`` are open, each owns something, every partition has one
    owner, and each owner consumed a record of its partitions produced at ``after_ms`` or
    later."""
    if set(status) != members or any(not owned for owned in status.values()):
        return False
    owners = [p for owned in status.values() for p in owned]
    if len(owners) != partitions or set(owners) != set(range(partitions)):
        return False
    # Record timestamps are whole milliseconds, rounded down.
    return all(ts >= math.floor(after_ms) for owned in status.values() for ts in owned.values())


def describe(status: Status, members: set[int], partitions: int, after_ms: float) -> str:
    """What keeps ``status`` from having converged, in numbers."""
    owners = [p for owned in status.values() for p in owned]
    waiting = sum(
        1 for owned in status.values() for ts in owned.values() if ts < math.floor(after_ms)
    )
    return (
        f"{len(members - set(status))} members missing, "
        f"{sum(1 for m in members if not status.get(m))} owning nothing, "
        f"{partitions - len(set(owners))} of {partitions} partitions unowned, "
        f"{len(owners) - len(set(owners))} owned twice, "
        f"{waiting} owned but not consumed since the event"
    )


def ownership(status: Status) -> dict[int, int]:
    return {p: m for m, owned in status.items() for p in owned}


def wait_converged(
    group: Group, members: set[int], partitions: int, after_ms: float
) -> dict[int, int]:
    """Wait until the group converged (see :func:`converged`) and kept its ownership for
    ``QUIET_S``; returns the owner of each partition."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while True:
        status = group.status()
        if converged(status, members, partitions, after_ms):
            owners = ownership(status)
            time.sleep(QUIET_S)
            status = group.status()
            if converged(status, members, partitions, after_ms) and ownership(status) == owners:
                return owners
        if time.monotonic() > deadline:
            raise BenchmarkError(
                f"{len(members)} members did not converge within {CONVERGE_TIMEOUT_S:.0f}s: "
                + describe(status, members, partitions, after_ms)
            )
        time.sleep(STATUS_EVERY_S)


def owners_at(timeline: Timeline, t_ms: float, members: set[int]) -> dict[int, int]:
    """Each partition's owner among ``members`` at ``t_ms``, from the ownership changes."""
    owned: dict[int, set[int]] = {}
    for t, m, kind, partitions in timeline.events:
        if t > t_ms:
            break
        mine = owned.setdefault(m, set())
        if kind == "assigned":
            mine.update(partitions)
        else:
            mine.difference_update(partitions)
    return {p: m for m, ps in owned.items() if m in members for p in ps}


def analyse(
    timeline: Timeline,
    t0: float,
    before: set[int],
    final_owners: Mapping[int, int],
    end_ms: float,
    gap_ms: float,
) -> Sample:
    """The event's settle time and the stalled partition-seconds of unaffected partitions."""
    settled_at = t0
    for p, m in final_owners.items():
        first = next(
            (t for t, ts in timeline.consumed.get((m, p), []) if ts >= math.floor(t0)), None
        )
        if first is None:
            raise BenchmarkError(f"member {m} never consumed partition {p} after the event")
        settled_at = max(settled_at, first)
    initial = owners_at(timeline, t0, before)
    taken_away = {
        (m, p) for t, m, kind, ps in timeline.events if t > t0 and kind != "assigned" for p in ps
    }
    unaffected = [
        p for p, m in final_owners.items() if initial.get(p) == m and (m, p) not in taken_away
    ]
    stalled_ms = 0.0
    for p in unaffected:
        times = [t for t, _ in timeline.consumed.get((final_owners[p], p), [])]
        before_t0 = [t for t in times if t <= t0]
        after_settle = [t for t in times if t > settled_at]
        points = [
            before_t0[-1] if before_t0 else t0,
            *(t for t in times if t0 < t <= settled_at),
            after_settle[0] if after_settle else end_ms,
        ]
        # A gap that began before the event counts from the event; one that outlasts the
        # settle point counts to its end: the partition stalled that long.
        for a, b in itertools.pairwise(points):
            if b - a > gap_ms:
                stalled_ms += b - max(a, t0)
    told_at = t0
    for p, m in final_owners.items():
        if p not in unaffected:
            told = [
                t
                for t, who, kind, ps in timeline.events
                if who == m and kind == "assigned" and p in ps
            ]
            told_at = max([told_at, *told[-1:]])
    return Sample(
        settle_s=(settled_at - t0) / 1000,
        stalled_partition_s=stalled_ms / 1000,
        unaffected=len(unaffected),
        moved=len(final_owners) - len(unaffected),
        assigned_s=(told_at - t0) / 1000,
    )


def measure_once(group: Group, size: int, partitions: int, rng: random.Random) -> dict[str, Sample]:
    """Start ``size`` members; once stable, one joins, then member 0 leaves (each event
    after a pause drawn from ``rng``, within one heartbeat interval)."""
    gap_ms = gap_threshold_ms(partitions)
    samples: dict[str, Sample] = {}
    try:
        start = now_ms()
        group.start_members(size)
        members = set(range(size))
        wait_converged(group, members, partitions, start)
        time.sleep(rng.uniform(0, HEARTBEAT_INTERVAL_MS / 1000))
        t0 = group.add_member()
        before, members = members, members | {size}
        owners = wait_converged(group, members, partitions, t0)
        end = now_ms()
        samples["join"] = analyse(group.timeline(t0 - 5000), t0, before, owners, end, gap_ms)
        time.sleep(rng.uniform(0, HEARTBEAT_INTERVAL_MS / 1000))
        t0 = group.remove_member(0)
        before, members = members, members - {0}
        owners = wait_converged(group, members, partitions, t0)
        end = now_ms()
        samples["leave"] = analyse(group.timeline(t0 - 5000), t0, before, owners, end, gap_ms)
    finally:
        group.close()
    return samples


# -- the busy topic, and the backlog of the throughput run --------------------------------------


def produce_forever(bootstrap_servers: str, topic: str, partitions: int, interval_ms: int) -> None:
    """A record on every partition every ``interval_ms``, until killed."""
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks=1, linger_ms=5)
    next_at = time.monotonic()
    while True:
        for p in range(partitions):
            producer.send(topic, value=b"busy", partition=p)
        next_at += interval_ms / 1000
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # behind: do not burst to catch up


@contextlib.contextmanager
def busy_producer(
    bootstrap_servers: str, topic: str, partitions: int
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--produce",
            bootstrap_servers,
            topic,
            str(partitions),
            str(produce_interval_ms(partitions)),
        ]
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics({topic: {"num_partitions": partitions}}, wait_for_metadata=True)
    except TopicAlreadyExistsError:
        pass  # an earlier run against the same cluster made it
    finally:
        admin.close()


def warm_topic(bootstrap_servers: str, topic: str, partitions: int) -> float:
    """Make the broker write every partition's first index entries now; the seconds it took.

    The broker adds an index entry to a partition once ``index.interval.bytes`` (4 KB) of
    records followed the last one: the first write into the partition's memory-mapped
    offset and time index files. On these machines' disks each such first write took 35-90
    ms, and the busy producer's requests carry every partition: about 22 s after it started,
    one request took 14-36 s in the broker (its request log: local time; thread dumps: the
    handler writing into the index files), and every partition of the topic stalled at once,
    in the middle of whichever group was being measured. Taken here, before any group.
    """
    started = time.monotonic()
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks=1, linger_ms=5)
    try:
        # The entry is written by the append that follows the 4 KB: two batches each.
        for value in (b"w" * (INDEX_INTERVAL_BYTES + 1024), b"w"):
            for p in range(partitions):
                producer.send(topic, value=value, partition=p)
            producer.flush()
    finally:
        producer.close()
    return time.monotonic() - started


def write_backlog(bootstrap_servers: str, topic: str) -> None:
    create_topic(bootstrap_servers, topic, BACKLOG_PARTITIONS)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers, acks=1, linger_ms=20, batch_size=256 * 1024
    )
    for i in range(BACKLOG_RECORDS):
        producer.send(topic, value=BACKLOG_VALUE, partition=i % BACKLOG_PARTITIONS)
    producer.flush()
    producer.close()


def drain_ours(
    bootstrap_servers: str, group_id: str, topic: str, protocol: str, *, gate: bool = True
) -> float:
    """Records/s of one Consumer's poll loop reading the backlog, between 10% and 90%;
    ``gate``: poll's check of the membership lease (``stop_at_lease_end``)."""
    consumer = Consumer(
        group_id,
        topics=[topic],
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        stop_at_lease_end=gate,
        **protocol_settings(protocol),
    )
    count, count_from = 0, -1
    started = t_from = time.monotonic()
    try:
        while count < BACKLOG_RECORDS * 9 // 10:
            if time.monotonic() - started > 300:
                raise BenchmarkError(f"read {count} of {BACKLOG_RECORDS} records in 300 s")
            count += sum(len(r) for r in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values())
            if count_from < 0 and count >= BACKLOG_RECORDS // 10:
                t_from, count_from = time.monotonic(), count
        return (count - count_from) / (time.monotonic() - t_from)
    finally:
        consumer.close()


def gate_cost(bootstrap_servers: str, run_id: str, repeats: int) -> int:
    """What poll's membership-lease gate costs a poll loop: the backlog drained with and
    without it, taking turns; prints the ratio (gated / ungated) per protocol."""
    backlog = f"rebalance-cost-{run_id}-backlog"
    write_backlog(bootstrap_servers, backlog)
    rates: dict[tuple[str, bool], list[float]] = {}
    for r in range(repeats):
        for protocol in ("consumer", "classic"):
            for gate in (True, False):
                group_id = f"rc-{run_id}-gate-{protocol}-{gate}-{r}"
                rate = drain_ours(bootstrap_servers, group_id, backlog, protocol, gate=gate)
                rates.setdefault((protocol, gate), []).append(rate)
                print(f"  {protocol:>8} gate={gate!s:<5} run{r + 1}: {rate:9.0f} records/s")
    pairs = []
    for protocol in ("consumer", "classic"):
        on, off = rates[protocol, True], rates[protocol, False]
        ratio = statistics.median(on) / statistics.median(off)
        # Per run, gated against the ungated run next to it: the spread of the ratio.
        per_run = [a / b for a, b in zip(on, off, strict=True)]
        print(
            f"{protocol}: gated {statistics.median(on):.0f} [{min(on):.0f} .. {max(on):.0f}], "
            f"ungated {statistics.median(off):.0f} [{min(off):.0f} .. {max(off):.0f}] "
            f"records/s; ratio {ratio:.2f} (per run {min(per_run):.2f} .. {max(per_run):.2f})"
        )
        pairs.append(f"gate_cost_{protocol}={ratio:.2f}")
    print(" ".join(pairs))
    return 0


# -- the benchmark --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="What one member joining or leaving costs a group of N consumers of a "
        "busy topic, for our Consumer (KIP-848 and classic) and Java's KafkaConsumer."
    )
    parser.add_argument("--quick", action="store_true", help="N = 10 only, 3 repeats")
    parser.add_argument("--sizes", help="comma-separated group sizes N (default 10,50,200)")
    parser.add_argument("--repeats", type=int, help="runs per size and implementation (default 5)")
    parser.add_argument(
        "--implementations",
        default=",".join(IMPLEMENTATIONS),
        help=f"comma-separated subset of {','.join(IMPLEMENTATIONS)}",
    )
    parser.add_argument(
        "--no-throughput", action="store_true", help="skip the poll-loop throughput runs"
    )
    parser.add_argument(
        "--gate-cost",
        action="store_true",
        help="only the poll-loop throughput of our Consumer with and without poll's lease "
        "gate (stop_at_lease_end), on both protocols",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="an existing cluster (default: $KAFKA_BOOTSTRAP_SERVERS, else a "
        "broker started for this run)",
    )
    parser.add_argument(
        "--members-per-process",
        type=int,
        default=1,
        metavar="M",
        help="our members per process (default 1, as deployments run them; more packs "
        "them for a machine without room for N processes; N+1 or more puts them all in "
        "one process, under one GIL)",
    )
    parser.add_argument(
        "--log", help="write our members' DEBUG logs to this file (where the time goes)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=random.randrange(1_000_000),
        help="seed of the pauses before each event (default: a new one, printed)",
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or ("10" if args.quick else "10,50,200")
    args.sizes = [int(s) for s in sizes.split(",") if s.strip()]
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.implementations = [i.strip() for i in args.implementations.split(",") if i.strip()]
    unknown = set(args.implementations) - set(IMPLEMENTATIONS)
    if unknown:
        parser.error(f"unknown implementations {sorted(unknown)}; choose from {IMPLEMENTATIONS}")
    if any(n < 2 for n in args.sizes) or args.repeats < 1:
        parser.error("sizes must be at least 2 and --repeats positive")
    if args.members_per_process < 1:
        parser.error("--members-per-process must be positive")
    return args


def cell(samples: Sequence[float], failed: int, digits: int) -> str:
    if not samples:
        text = "no result"
    else:
        text = (
            f"{statistics.median(samples):.{digits}f} "
            f"[{min(samples):.{digits}f}..{max(samples):.{digits}f}]"
        )
    return text + (f" ({failed} failed)" if failed else "")


def ratio(ours: Sequence[float], base: Sequence[float]) -> float | None:
    if not ours or not base or statistics.median(base) == 0:
        return None
    return statistics.median(ours) / statistics.median(base)


def _ratio_title(ours: str, base: str) -> str:
    """A ratio's column title: ``ours/java``, ``lean/java``, ``ours/classic``."""
    short = {"ours-consumer": "ours", "ours-lean": "lean", "java-consumer": "java"}
    return f"{short.get(ours, ours)}/{short.get(base, base.split('-')[-1])}"


def name(impl: str) -> str:
    return impl.replace("-", "_")


def layout(members_per_process: int) -> str:
    """Where our members run, in words."""
    if members_per_process == 1:
        return "one process per member (N+1 processes once the member joined)"
    return (
        f"{members_per_process} members per process, member i in process i // "
        f"{members_per_process} (the joining member in a new process when the last is full)"
    )


def report(
    results: Mapping[tuple[str, int, str], list[Sample]],
    failures: Mapping[tuple[str, int], int],
    throughput: Mapping[str, list[float]],
    implementations: Sequence[str],
    sizes: Sequence[int],
    members_per_process: int,
) -> None:
    headline: list[str] = []
    if any(i.startswith("ours") for i in implementations):
        print(f"\nours: {layout(members_per_process)}")
        headline.append(f"ours_members_per_process={members_per_process}")
    # (attribute, name in the headline, its unit there)
    metrics = (
        ("settle_s", "settle", "s"),
        ("assigned_s", "assigned", "s"),
        ("stalled_partition_s", "stalled", "ps"),
    )
    ratios = [(a, b, r) for a, b, r in RATIOS if a in implementations and b in implementations]
    width = 30
    for n in sizes:
        partitions = max(MIN_PARTITIONS, 2 * n)
        print(
            f"\nN={n}: {partitions} partitions, a record per partition every "
            f"{produce_interval_ms(partitions)} ms; gaps > {gap_threshold_ms(partitions):.0f} ms "
            "count as stalled; settle in s, stalled in partition-s; median [min..max] over runs"
        )
        header = f"{'event/metric':<16} | " + " | ".join(f"{i:^{width}}" for i in implementations)
        header += "".join(f" | {_ratio_title(a, b):>13}" for a, b, _ in ratios)
        print(header)
        print("-" * len(header))
        for event in EVENTS:
            for attr, short, unit in metrics:
                cells = []
                values: dict[str, list[float]] = {}
                for impl in implementations:
                    values[impl] = [getattr(s, attr) for s in results.get((impl, n, event), [])]
                    cells.append(f"{cell(values[impl], failures.get((impl, n), 0), 2):^{width}}")
                line = f"{event + ' ' + short:<16} | " + " | ".join(cells)
                for impl in implementations:
                    if values[impl]:
                        headline.append(
                            f"n{n}_{event}_{short}_{name(impl)}_{unit}="
                            f"{statistics.median(values[impl]):.3f}"
                        )
                for ours, base, ratio_name in ratios:
                    r = ratio(values[ours], values[base])
                    line += f" | {'-' if r is None else f'{r:.2f}':>13}"
                    if r is not None:
                        headline.append(f"n{n}_{event}_{short}_ratio_{ratio_name}={r:.3f}")
                print(line)
            moved = {
                impl: statistics.median(s.moved for s in results[impl, n, event])
                for impl in implementations
                if results.get((impl, n, event))
            }
            print(
                f"{'  moved':<16} | "
                + " | ".join(f"{moved.get(impl, '-'):^{width}}" for impl in implementations)
            )
    if throughput:
        print(
            f"\nPoll-loop throughput, one consumer reading {BACKLOG_RECORDS} records "
            f"({BACKLOG_PARTITIONS} partitions) with no rebalance: records/s, median [min..max]"
        )
        for impl in implementations:
            if throughput.get(impl):
                print(f"  {impl:<14} {cell(throughput[impl], 0, 0)}")
                headline.append(
                    f"throughput_{name(impl)}_rps={statistics.median(throughput[impl]):.0f}"
                )
        for ours, base, ratio_name in ratios:
            r = ratio(throughput.get(ours, []), throughput.get(base, []))
            if r is not None:
                print(f"  {ours}/{base}: {r:.2f}")
                headline.append(f"throughput_ratio_{ratio_name}={r:.3f}")
    print("(settle and stalled ratios below 1: ours is faster; throughput above 1)")
    print(" ".join(headline))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--produce"]:
        bootstrap, topic, partitions, interval_ms = argv[1:5]
        produce_forever(bootstrap, topic, int(partitions), int(interval_ms))
        return 0
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # kafka-python logs cancelled requests on close as errors; a member that really fails
    # shows up as a failed run.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if args.log:
        handler = logging.FileHandler(args.log)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s")
        )
        for logger in ("coordination", "recipes"):
            logging.getLogger(logger).addHandler(handler)
            logging.getLogger(logger).setLevel(logging.DEBUG)
            logging.getLogger(logger).propagate = False  # to the file only
    run_id = uuid.uuid4().hex[:8]
    results: dict[tuple[str, int, str], list[Sample]] = {}
    failures: dict[tuple[str, int], int] = {}
    throughput: dict[str, list[float]] = {}
    failed_ours = False
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap_servers, full_jit=True))
        driver: JavaDriver | None = None
        if any(i.startswith("java") for i in args.implementations):
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rebal-")))
            driver = JavaDriver(bootstrap, workdir)
            stack.callback(driver.close)

        def open_group(impl: str, group_id: str, topic: str) -> Group:
            kind, protocol = impl.split("-")
            if kind == "ours":
                return OursGroup(
                    group_id, topic, bootstrap, protocol, args.members_per_process, args.log
                )
            assert driver is not None
            return JavaGroup(group_id, topic, driver, protocol)

        if args.gate_cost:
            return gate_cost(bootstrap, run_id, args.repeats)
        print(
            f"broker {bootstrap}; sizes {args.sizes}; {args.repeats} runs each; --seed {args.seed}",
            flush=True,
        )
        if any(i.startswith("ours") for i in args.implementations):
            print(f"ours: {layout(args.members_per_process)}", flush=True)
        if not args.no_throughput:
            backlog = f"rebalance-cost-{run_id}-backlog"
            write_backlog(bootstrap, backlog)
            for r in range(args.repeats):
                for impl in args.implementations:
                    group_id = f"rc-{run_id}-tp-{name(impl)}-{r}"
                    kind, protocol = impl.split("-")
                    try:
                        if kind == "ours":
                            rate = drain_ours(bootstrap, group_id, backlog, protocol)
                        else:
                            assert driver is not None
                            rate = float(
                                driver.ask(
                                    f"drain {group_id} {backlog} {protocol} {BACKLOG_RECORDS}",
                                    "drained",
                                    330,
                                )
                            )
                    except BenchmarkError as e:
                        print(f"  throughput {impl:>14} run{r + 1}: FAILED: {e}", flush=True)
                        failed_ours = failed_ours or kind == "ours"
                        continue
                    print(f"  throughput {impl:>14} run{r + 1}: {rate:9.0f} records/s", flush=True)
                    throughput.setdefault(impl, []).append(rate)
        for n in args.sizes:
            partitions = max(MIN_PARTITIONS, 2 * n)
            topic = f"rebalance-cost-{run_id}-n{n}"
            create_topic(bootstrap, topic, partitions)
            warmed_s = warm_topic(bootstrap, topic, partitions)
            print(
                f"N={n}: {partitions} partitions' first index entries written in {warmed_s:.1f} s",
                flush=True,
            )
            with busy_producer(bootstrap, topic, partitions):
                # Implementations take turns within each repetition, so a slow drift of the
                # machine (or the broker) does not favour one of them, and the first turn
                # moves round: the first group of a run meets a cold broker (at N = 200 the
                # first run's events cost ours many times what the later ones did).
                impls = args.implementations
                for r in range(args.repeats):
                    for impl in impls[r % len(impls) :] + impls[: r % len(impls)]:
                        group_id = f"rc-{run_id}-{name(impl)}-n{n}-{r}"
                        try:
                            # The same pauses for every implementation of a repeat.
                            rng = random.Random(f"{args.seed}-{n}-{r}")
                            samples = measure_once(
                                open_group(impl, group_id, topic), n, partitions, rng
                            )
                        except BenchmarkError as e:
                            print(f"  {impl:>14} N={n:<3} run{r + 1}: FAILED: {e}", flush=True)
                            failures[impl, n] = failures.get((impl, n), 0) + 1
                            failed_ours = failed_ours or impl.startswith("ours")
                            continue
                        for event, s in samples.items():
                            results.setdefault((impl, n, event), []).append(s)
                            print(
                                f"  {impl:>14} N={n:<3} run{r + 1} {event:<5}: settle "
                                f"{s.settle_s:6.2f} s (assigned {s.assigned_s:5.2f} s), "
                                f"stalled {s.stalled_partition_s:6.2f} "
                                f"partition-s ({s.unaffected} unaffected, {s.moved} moved)",
                                flush=True,
                            )
    report(
        results, failures, throughput, args.implementations, args.sizes, args.members_per_process
    )
    # Only a failure of this library fails the benchmark: Java's consumer is the yardstick.
    return 1 if failed_ours else 0


if __name__ == "__main__":
    sys.exit(main())
