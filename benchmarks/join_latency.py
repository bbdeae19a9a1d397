"""Join latency: how long a group takes to absorb one new member.

For each group size N (default 1, 10, 50) and each implementation, start N
members of a fresh group, wait until they are stable, then start one more
member and measure the time until *all* N+1 members have completed the
rebalance, i.e. each has received its assignment of the same, new
generation. The three implementations run against the same broker, with the
same settings (session timeout 10 s, heartbeat interval 500 ms, rebalance
timeout / max.poll.interval.ms 30 s) and the classic rebalance protocol:

* ``ours``: a ``coordination.Coordinator`` subclass with a range assignment, the members
  of a process under one client id (as with the default), so they share a wake-up listener;
* ``kafka-python``: ``KafkaConsumer`` (range assignor), one polling thread each;
* ``java``: Kafka's Java ``KafkaConsumer`` (kafka-clients 4.3.1, ``group.protocol=classic``,
  ``RangeAssignor``), all members as threads of one JVM driven over stdin/stdout
  (``benchmarks/java/JoinLatency.java``, compiled with ``javac`` at run time).

Both consumers subscribe to one 64-partition topic; ``ours`` divides the same 64
partition numbers. The clock starts just before the new member's client is
created and stops at the last member's assignment callback. Existing members
learn of the rebalance from their next heartbeat, so the result depends mostly
on where in the heartbeat interval the new member arrives: run r of R starts it
at the same point, (r + 0.5) / R of an interval past a fixed settling time, for
every implementation. Implementations take turns within each run. The report
gives median [min .. max] and the mean, which for runs spread this way estimates
the latency of a member arriving at a random moment.

``ours-procs`` is ours again, with the members spread over four worker processes started
beforehand (``python -m devtools.member --recipe shares``), as production runs one member
per process; the new member starts in one of them, so Python's start-up is not measured.

Run (JDK 17+ and Maven needed; a Kafka 4.3.1 broker is started on loopback unless
``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one)::

    python benchmarks/join_latency.py --quick          # about a minute
    python benchmarks/join_latency.py                  # N = 1, 10, 50; 10 runs each
    python benchmarks/join_latency.py --sizes 1,10 --repeats 3

The last line of the output holds the headline figures as ``name=value`` pairs.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import faulthandler
import json
import logging
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import TopicAlreadyExistsError

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _java import compile_java

from coordination.testing import running_kafka
from devtools import member
from devtools.member import RangeShares

log = logging.getLogger("join_latency")

SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 500
REBALANCE_TIMEOUT_MS = 30_000
# How long a consumer's poll() blocks. It bounds how late a consumer's polling thread
# acts on a rebalance its heartbeat thread discovered, so both consumers use the same.
POLL_TIMEOUT_MS = 100
TOPIC = "join-latency"
# One client id for all of ours, as members left at the default have: the members of a
# process then share one wake-up listener (docs/membership.md). The other clients get one
# per member, as their defaults give them; the broker's group coordination ignores it.
OURS_CLIENT_ID = "join-latency"
PARTITIONS = 64
JAVA_ARTIFACTS = ("org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36")
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "JoinLatency.java"
# After the N members agree on a generation, it must stay unchanged this long before the
# new member is started: a member still joining would otherwise start a rebalance inside
# the measured interval. Three heartbeat intervals let every member hear of one.
SETTLE_S = 3 * HEARTBEAT_INTERVAL_MS / 1000
# Longest wait for a group to converge; well above a session timeout, so a member that
# was evicted would still show up as a slow run rather than hang the benchmark.
CONVERGE_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 60.0

IMPLEMENTATIONS = ("ours", "ours-procs", "kafka-python", "java")
SHORT = {"ours": "ours", "ours-procs": "ourp", "kafka-python": "kp", "java": "java"}
# Ours, measured two ways: every member in this process (as Java's run in one JVM), and
# members spread over worker processes (as production runs them: one GIL per process).
OURS = ("ours", "ours-procs")
WORKER_PROCESSES = 4


class BenchmarkError(Exception):
    """A member failed or a group did not converge in time."""


class Tracker:
    """The latest generation each member of one group completed, and when.

    Members report from their own threads (or, for Java, from the thread reading the
    JVM's output); times are seconds on one clock per implementation, so only
    differences between them mean anything.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._latest: dict[int, tuple[int, float]] = {}
        self._events = 0
        self._last_arrival = 0.0  # time.monotonic() when the latest event came in
        self._error: str | None = None

    def record(self, member: int, generation: int, at: float) -> None:
        with self._changed:
            self._latest[member] = (generation, at)
            self._events += 1
            self._last_arrival = time.monotonic()
            self._changed.notify_all()

    def fail(self, problem: str) -> None:
        with self._changed:
            if self._error is None:
                self._error = problem
            self._changed.notify_all()

    def wait_converged(self, members: int, above: int, timeout_s: float) -> tuple[int, float]:
        """Wait until ``members`` members all completed one generation newer than ``above``.

        Returns:
            That generation and the time the last of them completed it.
        """
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                if self._error is not None:
                    raise BenchmarkError(self._error)
                done = self._converged(members, above)
                if done is not None:
                    return done
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    by_member = {m: g for m, (g, _) in sorted(self._latest.items())}
                    raise BenchmarkError(
                        f"{members} members did not converge on a generation above {above} "
                        f"within {timeout_s:.0f}s; last generation of each member that "
                        f"completed one: {by_member}"
                    )
                self._changed.wait(remaining)

    def wait_stable(self, members: int, timeout_s: float, phase_s: float) -> int:
        """Wait until ``members`` members agree on a generation that then stays put.

        Returns ``SETTLE_S + phase_s`` after the last member completed that generation
        (as seen here: for Java, when its line arrived), not after this thread noticed:
        kafka-python's groups often pass through a short-lived first generation.

        Returns:
            The generation.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            generation, _ = self.wait_converged(members, -1, deadline - time.monotonic())
            with self._changed:
                events = self._events
                quiet_until = self._last_arrival + SETTLE_S + phase_s
            time.sleep(max(0.0, quiet_until - time.monotonic()))
            with self._changed:
                if self._events == events:
                    return generation

    def _converged(self, members: int, above: int) -> tuple[int, float] | None:
        if len(self._latest) != members:
            return None
        generations = {g for g, _ in self._latest.values()}
        if len(generations) != 1:
            return None
        generation = generations.pop()
        if generation <= above:
            return None
        return generation, max(at for _, at in self._latest.values())


class Group(abc.ABC):
    """The members of one benchmark group, of one implementation."""

    def __init__(self, group_id: str, tracker: Tracker) -> None:
        self.group_id = group_id
        self.tracker = tracker

    @abc.abstractmethod
    def start_members(self, count: int) -> None:
        """Start ``count`` members; returns without waiting for them to join."""

    @abc.abstractmethod
    def add_member(self) -> float:
        """Start one more member; returns the start time, on the tracker's clock."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every member and wait until they have left."""


# -- ours: coordination.Coordinator ---------------------------------------------------------


class InProcessGroup(Group):
    """A group whose members live in this process, started one at a time."""

    @abc.abstractmethod
    def _start_one(self) -> None: ...

    def start_members(self, count: int) -> None:
        for _ in range(count):
            self._start_one()

    def add_member(self) -> float:
        t0 = time.perf_counter()
        self._start_one()
        return t0


class OursGroup(InProcessGroup):
    def __init__(self, group_id: str, tracker: Tracker, bootstrap_servers: str) -> None:
        super().__init__(group_id, tracker)
        self._bootstrap_servers = bootstrap_servers
        self._members: list[RangeShares] = []

    def _start_one(self) -> None:
        index = len(self._members)

        def on_assigned(generation: int, at: float) -> None:
            self.tracker.record(index, generation, at)

        member = RangeShares(
            self.group_id,
            topic=TOPIC,
            partitions=PARTITIONS,
            on_assigned=on_assigned,
            bootstrap_servers=self._bootstrap_servers,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            client_id=OURS_CLIENT_ID,
        )
        self._members.append(member)
        member.start()

    def close(self) -> None:
        # In parallel: one by one, each LeaveGroup would rebalance the members still there.
        threads = [
            threading.Thread(target=m.close, args=(CLOSE_TIMEOUT_S,), daemon=True)
            for m in self._members
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(CLOSE_TIMEOUT_S + 5)
        self._members.clear()


class ProcessesGroup(Group):
    """Our members spread round-robin over worker processes started beforehand
    (``devtools.member``'s ``shares``); the new member starts in one of them, so its time does
    not include starting Python."""

    def __init__(self, group_id: str, tracker: Tracker, workers: list[_Worker]) -> None:
        super().__init__(group_id, tracker)
        self._workers = workers
        self._count = 0
        for w in workers:
            w.use(tracker)

    def start_members(self, count: int) -> None:
        shares: list[list[int]] = [[] for _ in self._workers]
        for index in range(count):
            shares[index % len(self._workers)].append(index)
        self._count = count
        for worker, share in zip(self._workers, shares, strict=True):
            if share:
                worker.command(f"start {self.group_id} {' '.join(map(str, share))}")
        for worker, share in zip(self._workers, shares, strict=True):
            if share:
                worker.expect("started", CONVERGE_TIMEOUT_S)

    def add_member(self) -> float:
        worker = self._workers[self._count % len(self._workers)]
        worker.command(f"join {self.group_id} {self._count}")
        self._count += 1
        return float(worker.expect("t0", CONVERGE_TIMEOUT_S)["t"])

    def close(self) -> None:
        try:
            for w in self._workers:
                w.command("stop")
            for w in self._workers:
                w.expect("stopped", CLOSE_TIMEOUT_S + 30)
        finally:
            for w in self._workers:
                w.use(None)


class _Worker:
    """One worker process, ``devtools.member``'s ``shares`` pool: commands in, JSON events
    out; ``assigned`` events go to the tracker in use, the answers to whoever waits with
    :meth:`expect`."""

    def __init__(self, bootstrap_servers: str) -> None:
        # With JOIN_WORKER_LOG=PATH, each worker appends its members' logs there (wall-clock
        # times, one line per request), to see where a rebalance's time goes.
        trace = os.environ.get("JOIN_WORKER_LOG")
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devtools.member",
                "--recipe=shares",
                "--clock=perf",  # the system's monotonic clock on Linux, as in this process
                f"--bootstrap={bootstrap_servers}",
                f"--topic={TOPIC}",
                f"--partitions={PARTITIONS}",
                f"--session-timeout-ms={SESSION_TIMEOUT_MS}",
                f"--heartbeat-interval-ms={HEARTBEAT_INTERVAL_MS}",
                f"--rebalance-timeout-ms={REBALANCE_TIMEOUT_MS}",
                f"--client-id={OURS_CLIENT_ID}",
                *([f"--log={trace}"] if trace else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=member.ROOT,
            env={**os.environ, "PYTHONPATH": str(member.ROOT)},
        )
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self._tracker: Tracker | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def use(self, tracker: Tracker | None) -> None:
        self._tracker = tracker

    def command(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def expect(self, word: str, timeout_s: float) -> dict[str, Any]:
        try:
            event = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise BenchmarkError(f"a worker process did not answer {word!r}") from None
        if event["event"] != word:
            raise BenchmarkError(f"a worker process answered {event}, expected {word!r}")
        return event

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a stray line from a library
            if event["event"] == "assigned":
                tracker = self._tracker
                if tracker is not None:
                    tracker.record(event["member"], event["generation"], event["t"])
            elif event["event"] != "up":
                self._lines.put(event)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()


# -- kafka-python: KafkaConsumer ------------------------------------------------------------


class _AssignmentListener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base
    def __init__(self, member: KafkaPythonMember) -> None:
        self._member = member

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._member.assigned()


class KafkaPythonMember:
    """One KafkaConsumer and the thread that polls it (a KafkaConsumer is not thread-safe)."""

    def __init__(self, index: int, group_id: str, tracker: Tracker, bootstrap: str) -> None:
        self._index = index
        self._group_id = group_id
        self._tracker = tracker
        self._bootstrap = bootstrap
        self._stopping = threading.Event()
        self._consumer: Any = None
        self.thread = threading.Thread(target=self._run, name=f"kp-member-{index}", daemon=True)

    def assigned(self) -> None:
        at = time.perf_counter()
        # The public snapshot of the membership; it has the generation just joined.
        generation = self._consumer.group_metadata().generation_id
        self._tracker.record(self._index, generation, at)

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        try:
            # Created here, not by the caller, as the Java driver does: the measured
            # interval includes building the client for every implementation.
            self._consumer = KafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=self._group_id,
                client_id=f"join-latency-{self._index}",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                max_poll_interval_ms=REBALANCE_TIMEOUT_MS,
                partition_assignment_strategy=(RangePartitionAssignor,),
                # Membership only: no offset commits on the rebalance path.
                enable_auto_commit=False,
            )
        except Exception as e:
            self._tracker.fail(f"kafka-python member {self._index} could not start: {e!r}")
            return
        try:
            self._consumer.subscribe(topics=[TOPIC], listener=_AssignmentListener(self))
            while not self._stopping.is_set():
                self._consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        except Exception as e:
            if not self._stopping.is_set():
                self._tracker.fail(f"kafka-python member {self._index} failed: {e!r}")
        finally:
            self._consumer.close(autocommit=False)


class KafkaPythonGroup(InProcessGroup):
    def __init__(self, group_id: str, tracker: Tracker, bootstrap_servers: str) -> None:
        super().__init__(group_id, tracker)
        self._bootstrap_servers = bootstrap_servers
        self._members: list[KafkaPythonMember] = []

    def _start_one(self) -> None:
        member = KafkaPythonMember(
            len(self._members), self.group_id, self.tracker, self._bootstrap_servers
        )
        self._members.append(member)
        member.thread.start()

    def close(self) -> None:
        for m in self._members:
            m.stop()
        for m in self._members:
            m.thread.join(CLOSE_TIMEOUT_S)
        self._members.clear()


# -- java: KafkaConsumer threads in one JVM ---------------------------------------------------


class JavaDriver:
    """The JVM of benchmarks/java/JoinLatency.java, one group at a time."""

    def __init__(self, bootstrap_servers: str, workdir: Path) -> None:
        classpath = compile_java(JAVA_SOURCE, JAVA_ARTIFACTS, workdir, BenchmarkError)
        command = [
            "java",
            "-Xmx1g",
            "-cp",
            os.pathsep.join(classpath),
            "JoinLatency",
            bootstrap_servers,
            TOPIC,
            str(SESSION_TIMEOUT_MS),
            str(HEARTBEAT_INTERVAL_MS),
            str(REBALANCE_TIMEOUT_MS),
            str(POLL_TIMEOUT_MS),
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._replies: queue.Queue[list[str]] = queue.Queue()
        self._tracker_lock = threading.Lock()
        self._tracker: Tracker | None = None
        self._reader = threading.Thread(target=self._read, name="java-reader", daemon=True)
        self._reader.start()

    def use(self, tracker: Tracker | None) -> None:
        """Send the events of the coming group to ``tracker``."""
        with self._tracker_lock:
            self._tracker = tracker

    def command(self, line: str) -> None:
        assert self._process.stdin is not None
        if self._process.poll() is not None:
            raise BenchmarkError(f"the JVM exited with {self._process.returncode}")
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def expect(self, word: str, timeout_s: float) -> list[str]:
        """The next reply that starts with ``word``."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchmarkError(f"the JVM did not answer {word!r} within {timeout_s:.0f}s")
            try:
                reply = self._replies.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if self._process.poll() is not None:
                    raise BenchmarkError(
                        f"the JVM exited with {self._process.returncode}"
                    ) from None
                continue
            if reply[0] == word:
                return reply
            log.warning("ignoring a late reply from the JVM: %s", " ".join(reply))

    def close(self) -> None:
        try:
            if self._process.poll() is None:
                with contextlib.suppress(OSError, BenchmarkError):
                    self.command("quit")
                self._process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("the JVM did not quit; killing it")
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._reader.join(5)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            words = line.split()
            if not words:
                continue
            with self._tracker_lock:
                tracker = self._tracker
            if words[0] == "assigned" and tracker is not None:
                tracker.record(int(words[1]), int(words[2]), int(words[3]) / 1e9)
            elif words[0] == "error":
                problem = f"Java member {words[1]}: {' '.join(words[2:])}"
                log.error("%s", problem)
                if tracker is not None:
                    tracker.fail(problem)
            else:
                self._replies.put(words)


class JavaGroup(Group):
    def __init__(self, group_id: str, tracker: Tracker, driver: JavaDriver) -> None:
        super().__init__(group_id, tracker)
        self._driver = driver
        driver.use(tracker)

    def start_members(self, count: int) -> None:
        self._driver.command(f"start {self.group_id} {count}")
        self._driver.expect("started", CONVERGE_TIMEOUT_S)

    def add_member(self) -> float:
        self._driver.command("join")
        # The JVM reads its clock itself, so the pipe's delay is not measured.
        return int(self._driver.expect("t0", CONVERGE_TIMEOUT_S)[1]) / 1e9

    def close(self) -> None:
        try:
            self._driver.command("stop")
            self._driver.expect("stopped", CLOSE_TIMEOUT_S + 30)
        finally:
            self._driver.use(None)


# -- the benchmark --------------------------------------------------------------------------


def measure_once(
    open_group: Callable[[str, Tracker], Group],
    group_id: str,
    size: int,
    phase_s: float,
    *,
    dump_stacks: bool = False,
) -> float:
    """Milliseconds from starting member N+1 until all N+1 completed the new generation.

    Member N+1 starts ``phase_s`` (plus the settling time) after the N members completed
    their generation. Existing members learn of a rebalance from their next heartbeat,
    and they heartbeat in step, from the moment they joined; so where the new member
    lands in the heartbeat interval decides most of the latency, and must not be left
    to chance (or, worse, be the same every time).
    """
    tracker = Tracker()
    group = open_group(group_id, tracker)
    try:
        group.start_members(size)
        before = tracker.wait_stable(size, CONVERGE_TIMEOUT_S, phase_s)
        t0 = group.add_member()
        _, t1 = tracker.wait_converged(size + 1, before, CONVERGE_TIMEOUT_S)
        return (t1 - t0) * 1000
    except BenchmarkError:
        if dump_stacks:
            # Where the members that did not make it are stuck (before close ends them).
            faulthandler.dump_traceback(all_threads=True)
        raise
    finally:
        group.close()


def create_topic(bootstrap_servers: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics({TOPIC: {"num_partitions": PARTITIONS}}, wait_for_metadata=True)
    except TopicAlreadyExistsError:
        pass  # an earlier run against the same cluster made it
    finally:
        admin.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time for a group of N members to absorb one new member, for "
        "coordination, kafka-python and the Java consumer."
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run (N = 1, 10; 2 runs each), about a minute"
    )
    parser.add_argument("--sizes", help="comma-separated group sizes N (default 1,10,50)")
    parser.add_argument("--repeats", type=int, help="runs per size and implementation (default 10)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="unrecorded runs (N=1) per implementation first (default 1)",
    )
    parser.add_argument(
        "--implementations",
        default=",".join(IMPLEMENTATIONS),
        help=f"comma-separated subset of {','.join(IMPLEMENTATIONS)}",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="an existing cluster (default: $KAFKA_BOOTSTRAP_SERVERS, else a "
        "broker started for this run)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log at INFO level; dump every thread's stack when a run fails",
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or ("1,10" if args.quick else "1,10,50")
    args.sizes = [int(s) for s in sizes.split(",") if s.strip()]
    args.repeats = args.repeats or (2 if args.quick else 10)
    args.implementations = [i.strip() for i in args.implementations.split(",") if i.strip()]
    unknown = set(args.implementations) - set(IMPLEMENTATIONS)
    if unknown:
        parser.error(f"unknown implementations {sorted(unknown)}; choose from {IMPLEMENTATIONS}")
    if any(n < 1 for n in args.sizes) or args.repeats < 1 or args.warmup < 0:
        parser.error("sizes and --repeats must be positive, --warmup not negative")
    return args


def report(
    results: Mapping[tuple[str, int], list[float]],
    failures: Mapping[tuple[str, int], int],
    implementations: Sequence[str],
    sizes: Sequence[int],
    repeats: int,
) -> None:
    columns = [*implementations]
    ratios = [
        (ours, other)
        for ours in OURS
        for other in ("java", "kafka-python")
        if ours in implementations and other in implementations
    ]
    medians = {key: statistics.median(v) for key, v in results.items() if v}
    means = {key: statistics.fmean(v) for key, v in results.items() if v}

    def ratio_cells(stat: Mapping[tuple[str, int], float], n: int) -> str:
        cells = ""
        for ours, other in ratios:
            if (ours, n) in stat and (other, n) in stat:
                cells += f" | {stat[ours, n] / stat[other, n]:9.2f}"
            else:
                cells += f" | {'-':>9}"
        return cells

    print()
    print(
        f"Join latency (ms): member N+1 starts -> all N+1 members have the new generation's "
        f"assignment; {repeats} runs per cell"
    )
    print(
        f"session.timeout.ms={SESSION_TIMEOUT_MS} heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}"
        f" rebalance timeout={REBALANCE_TIMEOUT_MS} consumer poll timeout={POLL_TIMEOUT_MS} "
        f"topic partitions={PARTITIONS}"
    )
    width = 26 if not failures else 36
    header = f"{'N':>4} | " + " | ".join(f"{c:^{width}}" for c in columns)
    header += "".join(f" | {SHORT[o] + '/' + SHORT[r]:>9}" for o, r in ratios)
    print("\nmedian [min .. max]")
    print(header)
    print("-" * len(header))
    for n in sizes:
        cells = []
        for impl in columns:
            samples = results.get((impl, n), [])
            failed = failures.get((impl, n), 0)
            if samples:
                cell = f"{medians[impl, n]:7.0f} [{min(samples):5.0f} .. {max(samples):5.0f}]"
            else:
                cell = "no result"
            if failed:
                cell += f" ({failed} failed)"
            cells.append(f"{cell:^{width}}")
        print(f"{n:>4} | " + " | ".join(cells) + ratio_cells(medians, n))
    # The runs spread the new member's arrival evenly over the heartbeat interval, so
    # their mean estimates the latency of an arrival at a random moment; the median of
    # so few runs moves by up to half a step of that spread with where each client's
    # heartbeats happen to fall.
    print("\nmean")
    print(
        f"{'N':>4} | "
        + " | ".join(f"{c:^12}" for c in columns)
        + "".join(f" | {SHORT[o] + '/' + SHORT[r]:>9}" for o, r in ratios)
    )
    for n in sizes:
        cells = [
            f"{means[impl, n]:^12.0f}" if (impl, n) in means else f"{'-':^12}" for impl in columns
        ]
        print(f"{n:>4} | " + " | ".join(cells) + ratio_cells(means, n))
    print("(ratios below 1: ours is faster)")
    headline: list[str] = []
    for n in sizes:
        for impl in columns:
            if (impl, n) in medians:
                headline.append(f"{SHORT[impl]}_n{n}_ms={medians[impl, n]:.1f}")
        for ours, other in ratios:
            if (ours, n) in medians and (other, n) in medians:
                prefix = "" if ours == "ours" else f"{SHORT[ours]}_"
                headline.append(
                    f"{prefix}ratio_vs_{SHORT[other]}_n{n}="
                    f"{medians[ours, n] / medians[other, n]:.3f}"
                )
    print(" ".join(headline))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kafka-python warns at every group's first join (its leader assigns before it has
        # the topic's metadata, then rebalances again) and logs cancelled requests on close
        # as errors. A member that really fails shows up as a failed or slow run.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    run_id = uuid.uuid4().hex[:8]
    results: dict[tuple[str, int], list[float]] = {}
    failures: dict[tuple[str, int], int] = {}
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap_servers, full_jit=True))
        create_topic(bootstrap)
        openers: dict[str, Callable[[str, Tracker], Group]] = {}
        if "ours" in args.implementations:
            openers["ours"] = lambda g, t: OursGroup(g, t, bootstrap)
        if "ours-procs" in args.implementations:
            processes = [_Worker(bootstrap) for _ in range(WORKER_PROCESSES)]
            for process in processes:
                stack.callback(process.close)
            openers["ours-procs"] = lambda g, t: ProcessesGroup(g, t, processes)
        if "kafka-python" in args.implementations:
            openers["kafka-python"] = lambda g, t: KafkaPythonGroup(g, t, bootstrap)
        if "java" in args.implementations:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="join-")))
            driver = JavaDriver(bootstrap, workdir)
            stack.callback(driver.close)
            openers["java"] = lambda g, t: JavaGroup(g, t, driver)
        print(
            f"broker {bootstrap}; sizes {args.sizes}; {args.repeats} runs each; "
            f"{args.warmup} warm-up run(s)",
            flush=True,
        )

        def run(impl: str, n: int, label: str, phase_s: float) -> float | None:
            group_id = f"join-latency-{run_id}-{SHORT[impl]}-n{n}-{label}"
            try:
                ms = measure_once(openers[impl], group_id, n, phase_s, dump_stacks=args.verbose)
            except BenchmarkError as e:
                print(f"  {impl:>12} N={n:<3} {label}: FAILED: {e}", flush=True)
                return None
            print(f"  {impl:>12} N={n:<3} {label}: {ms:8.1f} ms", flush=True)
            return ms

        for w in range(args.warmup):
            for impl in args.implementations:
                run(impl, 1, f"warmup{w + 1}", 0.0)
        for n in args.sizes:
            # Implementations take turns within each repetition, so a slow drift of the
            # machine (or the broker) does not favour one of them.
            for r in range(args.repeats):
                # Run r starts the new member at the same point of the heartbeat interval
                # for every implementation; the runs spread evenly over the interval.
                phase_s = (r + 0.5) / args.repeats * HEARTBEAT_INTERVAL_MS / 1000
                for impl in args.implementations:
                    ms = run(impl, n, f"run{r + 1}", phase_s)
                    if ms is None:
                        failures[impl, n] = failures.get((impl, n), 0) + 1
                    else:
                        results.setdefault((impl, n), []).append(ms)
    report(results, failures, args.implementations, args.sizes, args.repeats)
    # Only a failure of this library fails the benchmark: the other clients are the
    # yardstick, and their failures are reported in the table.
    return 1 if any(impl in OURS for impl, _ in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
