"""Interoperability peers: other Kafka clients' consumers in a group with this library's members.

Three kinds of peer, each a separate process that reports what it does as JSON lines (see
``java/PeerConsumer.java`` for the events):

* ``java``: Kafka's own ``KafkaConsumer`` (kafka-clients 4.3.1, classic protocol),
  ``java/PeerConsumer.java`` compiled with ``javac`` against jars from Maven Central;
* ``rdkafka``: librdkafka through confluent-kafka, ``rdkafka_peer.py``;
* ``ours``: this library's ``Consumer``, ``python -m devtools.member --recipe consumer``
  (the same arguments and events).

A share group's peer is Kafka's ``KafkaShareConsumer``, ``java/SharePeer.java`` (its own
arguments and events, see there), started by :func:`start_java_share_peer`.

Example:
    create_topic(kafka, "orders", partitions=6)
    peers = [start_java_peer(kafka, group, ["orders"], name=f"java-{i}") for i in range(2)]
    peers.append(start_rdkafka_peer(kafka, group, ["orders"], name="rdkafka-0"))
    wait_settled(peers, topic_partitions("orders", 6), timeout=60)
    produced = produce(kafka, "orders", 100, partitions=6)
    wait_until(lambda: produced <= consumed_by(peers), 30, "every record consumed")
    assert_single_ownership(peers)

Ownership is reconstructed from each peer's rebalance callbacks, whose meaning differs by
protocol but composes the same way: with the eager protocol a member revokes everything it
owns at the start of a rebalance and is then assigned its whole new set; with the
cooperative protocol "assigned" and "revoked" carry only the increments. In both cases
"assigned" adds and "revoked" / "lost" remove, so one reconstruction serves both clients
and both protocols.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from coordination.testing._maven import cache_dir, resolve_classpath

HERE: Final = Path(__file__).resolve().parent
JAVA_SOURCE: Final = HERE / "java" / "PeerConsumer.java"
JAVA_SHARE_SOURCE: Final = HERE / "java" / "SharePeer.java"
# slf4j-nop: kafka-clients logs through SLF4J; without a binding it prints a warning, with
# a real one it would flood stderr. The peers report on stdout, in JSON.
JAVA_ARTIFACTS: Final = ("org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36")

Kind = Literal["java", "rdkafka", "ours"]
Event = dict[str, Any]
TopicPartition = tuple[str, int]
Record = tuple[str, int, int]


class PeerError(AssertionError):
    """A peer did not do what a test waited for; the message has its last events and stderr."""


def now_ms() -> float:
    """Epoch milliseconds: the clock the peers stamp their events with."""
    return time.time() * 1000


# -- the Java peer's build ------------------------------------------------------------------


def compile_java_peer(source: Path = JAVA_SOURCE) -> list[Path]:
    """Compile a Java peer, ``PeerConsumer.java`` unless ``source`` names another (once per
    source version), and return its classpath.

    The classes live in the project's cache directory under a key made from the source and
    the artifacts, so an edit recompiles and concurrent test runs never see half a build.
    """
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise PeerError(f"`{tool}` is not on PATH: install a JDK (17+)")
    jars = resolve_classpath(list(JAVA_ARTIFACTS))
    digest = hashlib.sha256(source.read_bytes())
    digest.update("\n".join(JAVA_ARTIFACTS).encode())
    classes = cache_dir() / "interop" / f"peer-{digest.hexdigest()[:16]}"
    main_class = classes / f"{source.stem}.class"
    if not main_class.exists():
        classes.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="peer-", dir=classes.parent))
        try:
            done = subprocess.run(
                [
                    "javac",
                    "-d",
                    str(staging),
                    "-cp",
                    os.pathsep.join(map(str, jars)),
                    str(source),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                raise PeerError(f"javac failed:\n{done.stdout}{done.stderr}")
            try:
                staging.rename(classes)
            except OSError:
                # Another run finished the same build first; theirs is as good as ours.
                if not main_class.exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return [classes, *jars]


# -- a peer process ------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """One peer's ownership of one partition, from ``start`` to ``end`` (epoch ms).

    ``end`` is ``math.inf`` while the peer still owns the partition; ``ended_by`` says what
    ended it: ``revoked``, ``lost``, ``exit`` (the process ended without a callback, e.g.
    killed) or ``""`` (still owned).
    """

    peer: str
    partition: TopicPartition
    start: float
    end: float
    ended_by: str


def _partitions(event: Event) -> list[TopicPartition]:
    return [(str(t), int(p)) for t, p in event.get("partitions", [])]


def ownership_intervals(
    name: str, events: Sequence[Event], exited_at: float | None = None
) -> list[Interval]:
    """Reconstruct the intervals in which the peer ``name`` owned each partition.

    "assigned" opens an interval, "revoked" or "lost" closes it (see the module docstring
    for why this fits eager and cooperative callbacks alike). An interval still open when
    the process ended closes at ``exited_at``: a killed member can no longer process
    anything, even while the broker still counts it as a member.

    A lost partition is a special case: the member learns of the loss only after the
    broker removed it from the group (session expired, say, while the process was
    frozen), and others may own the partition by then. What matters is whether it still
    acted as owner, so the interval ends at its last records or commit for that partition
    (or at its start, if none), not at the "lost" callback.
    """
    open_: dict[TopicPartition, float] = {}
    last_activity: dict[TopicPartition, float] = {}
    out: list[Interval] = []
    for e in events:
        kind, t = e.get("event"), float(e.get("t", 0.0))
        if kind == "assigned":
            for tp in _partitions(e):
                # A second "assigned" of an owned partition (no client does this) keeps the
                # earlier start: ownership is never under-estimated.
                open_.setdefault(tp, t)
        elif kind in ("revoked", "lost"):
            for tp in _partitions(e):
                if tp not in open_:
                    continue  # an eager revocation of nothing, or a close after a loss
                start = open_.pop(tp)
                end = t if kind == "revoked" else max(start, last_activity.get(tp, start))
                out.append(Interval(name, tp, start, end, str(kind)))
        elif kind == "records":
            for t_, p, *_ in e["partitions"]:
                last_activity[(t_, p)] = t
        elif kind == "committed":
            for t_, p, _ in e["offsets"]:
                last_activity[(t_, p)] = t
    for tp, start in open_.items():
        if exited_at is None:
            out.append(Interval(name, tp, start, math.inf, ""))
        else:
            out.append(Interval(name, tp, start, max(start, exited_at), "exit"))
    return out


def owned_partitions(events: Iterable[Event]) -> frozenset[TopicPartition]:
    """The partitions owned after ``events``: "assigned" adds, "revoked" / "lost" remove."""
    owned: set[TopicPartition] = set()
    for e in events:
        if e.get("event") == "assigned":
            owned.update(_partitions(e))
        elif e.get("event") in ("revoked", "lost"):
            owned.difference_update(_partitions(e))
    return frozenset(owned)


class PeerProcess:
    """A peer consumer process and the events it reported so far.

    A reader thread appends each JSON line of the process's stdout to ``events``; all
    accessors copy under a lock, so tests may call them while the peer runs. The process
    runs in its own session, so a Ctrl-C of the test run does not reach it and only this
    object ends it (``terminate``, ``kill``, ``close``), or, once the process that started it
    is gone (a killed test run), its own watch of its parent (``devtools.orphans``; the Java
    peers' ``exitWhenOrphaned``).
    """

    def __init__(
        self,
        name: str,
        kind: Kind,
        command: Sequence[str],
        stderr_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.kind: Kind = kind
        self.command = list(command)
        self.stderr_path = stderr_path
        self._lock = threading.Condition()
        self._events: list[Event] = []
        self._exited_at: float | None = None
        with open(stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,
                env=dict(env) if env is not None else None,
            )
        self.pid = self.process.pid
        self._reader = threading.Thread(target=self._read, name=f"peer-{name}", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited {self.process.returncode}"
        return f"<PeerProcess {self.name} {self.kind} pid={self.pid} {state}>"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "unparsed", "line": line, "t": now_ms()}
            with self._lock:
                self._events.append(event)
                self._lock.notify_all()
        # EOF: the process is gone (or closed stdout, which the peers never do). The
        # harness's clock reads after the death, which keeps ownership over-estimated.
        self.process.wait()
        with self._lock:
            if self._exited_at is None:
                self._exited_at = now_ms()
            self._lock.notify_all()

    # -- what it reported ------------------------------------------------------------------

    @property
    def events(self) -> list[Event]:
        """A copy of every event so far, in the order printed."""
        with self._lock:
            return list(self._events)

    def of(self, *kinds: str) -> list[Event]:
        """The events of the given kinds (``"assigned"``, ``"led"``, ...)."""
        return [e for e in self.events if e.get("event") in kinds]

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def exited_at(self) -> float | None:
        """When the harness saw the process end (epoch ms), or None while it runs."""
        with self._lock:
            return self._exited_at

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions this peer owns now, by its callbacks; empty once it has exited."""
        if self.exited_at is not None:
            return frozenset()
        return owned_partitions(self.events)

    def intervals(self) -> list[Interval]:
        """Its ownership intervals (see :func:`ownership_intervals`)."""
        with self._lock:
            events, exited = list(self._events), self._exited_at
        return ownership_intervals(self.name, events, exited)

    def led_count(self) -> int:
        """How many times this peer ran the group's assignment."""
        return len(self.of("led"))

    def committed(self) -> dict[TopicPartition, int]:
        """The last offset it committed for each partition."""
        out: dict[TopicPartition, int] = {}
        for e in self.of("committed"):
            for t, p, offset in e["offsets"]:
                out[(t, p)] = int(offset)
        return out

    def commits(self) -> list[tuple[float, TopicPartition, int]]:
        """Every successful commit: (time, partition, offset), in order."""
        return [
            (float(e["t"]), (t, p), int(offset))
            for e in self.of("committed")
            for t, p, offset in e["offsets"]
        ]

    def consumed(self) -> set[Record]:
        """The (topic, partition, offset) of every record it was handed."""
        out: set[Record] = set()
        for e in self.of("records"):
            for t, p, first, last, count in e["partitions"]:
                # A plain producer's offsets are consecutive; a gap would mean a transaction
                # marker or compaction, which these tests do not use.
                if last - first + 1 != count:
                    raise PeerError(f"{self.name}: non-consecutive batch {[t, p, first, last]}")
                out.update((t, p, o) for o in range(first, last + 1))
        return out

    def errors(self) -> list[Event]:
        return self.of("error", "unparsed")

    def stderr_tail(self, chars: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def describe(self, last: int = 15) -> str:
        """A summary for failure messages: state, last events and stderr tail."""
        lines = [f"{self!r}: owns {sorted(self.owned())}, stderr {self.stderr_path}"]
        lines += [f"  {json.dumps(e)}" for e in self.events[-last:]]
        tail = self.stderr_tail(1500).strip()
        if tail:
            lines.append("  stderr: ..." + tail.replace("\n", "\n  "))
        return "\n".join(lines)

    # -- waiting and ending -----------------------------------------------------------------

    def wait_for(
        self, predicate: Callable[[PeerProcess], bool], timeout: float, what: str = ""
    ) -> None:
        """Block until ``predicate(self)`` holds; re-checked at each event and every 0.1 s.

        Raises:
            PeerError: not within ``timeout`` seconds, or the process exited before.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                # The predicate calls the accessors, which take the lock again: it is
                # re-entrant (a Condition over an RLock).
                if predicate(self):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PeerError(
                        f"timed out after {timeout}s waiting for {what or 'it'}:\n{self.describe()}"
                    )
                if self._exited_at is not None:
                    raise PeerError(f"exited while waiting for {what or 'it'}:\n{self.describe()}")
                self._lock.wait(min(remaining, 0.1))

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM: the peer closes its consumer (revokes, leaves the group) and exits.

        Returns:
            The exit status, 0 after a clean close. (A JVM that ran its shutdown hooks on
            SIGTERM exits with 143 however cleanly they ended; that is reported as 0.)

        Raises:
            PeerError: it did not exit within ``timeout`` (it is then killed).
        """
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise PeerError(
                f"did not exit within {timeout}s of SIGTERM:\n{self.describe()}"
            ) from None
        self._reader.join(10)
        if self.kind == "java" and code == 128 + signal.SIGTERM:
            return 0
        return code

    def kill(self) -> int:
        """SIGKILL, as a crash: no callbacks, no LeaveGroup; the session has to expire."""
        if self.running:
            self.process.kill()
        code = self.process.wait()
        self._reader.join(10)
        return code

    def signal(self, sig: int) -> None:
        """Send ``sig`` (e.g. SIGSTOP / SIGCONT to freeze and thaw the peer)."""
        if self.running:
            self.process.send_signal(sig)

    def close(self) -> None:
        """End the process if it still runs (SIGCONT first, in case it was frozen)."""
        if self.running:
            self.signal(signal.SIGCONT)
            with contextlib.suppress(PeerError):
                self.terminate(15)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _peer_args(
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    client_id: str,
    *,
    assignor: str = "cooperative-sticky",
    session_timeout_ms: int = 6000,
    heartbeat_interval_ms: int = 500,
    max_poll_interval_ms: int = 30000,
    group_instance_id: str | None = None,
    poll_ms: int = 100,
    max_poll_records: int = 500,
    group_protocol: str = "classic",
) -> list[str]:
    """The command line every kind of peer takes (see rdkafka_peer.py's usage)."""
    args = [
        "--bootstrap",
        bootstrap_servers,
        "--group",
        group_id,
        "--topics",
        ",".join(topics),
        "--assignor",
        assignor,
        "--client-id",
        client_id,
        "--session-timeout-ms",
        str(session_timeout_ms),
        "--heartbeat-interval-ms",
        str(heartbeat_interval_ms),
        "--max-poll-interval-ms",
        str(max_poll_interval_ms),
        "--poll-ms",
        str(poll_ms),
        "--max-poll-records",
        str(max_poll_records),
    ]
    if group_instance_id:
        args += ["--group-instance-id", group_instance_id]
    if group_protocol != "classic":
        args += ["--group-protocol", group_protocol]
    return args


def _log_dir(log_dir: Path | None) -> Path:
    directory = log_dir or Path(tempfile.gettempdir()) / "coordination-interop"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _start(
    kind: Kind,
    program: Sequence[str],
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    name: str,
    log_dir: Path | None,
    options: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> PeerProcess:
    command = [*program, *_peer_args(bootstrap_servers, group_id, topics, name, **options)]
    return PeerProcess(name, kind, command, _log_dir(log_dir) / f"{name}.stderr", env=env)


def start_java_peer(
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    *,
    name: str,
    log_dir: Path | None = None,
    **options: Any,
) -> PeerProcess:
    """Start a Java ``KafkaConsumer`` peer; ``name`` is also its client.id.

    ``options``: ``assignor`` (``range``, ``cooperative-sticky`` or a preference list such
    as ``range,cooperative-sticky``, Kafka's rolling upgrade to cooperative rebalancing),
    ``session_timeout_ms``, ``heartbeat_interval_ms``, ``max_poll_interval_ms``,
    ``group_instance_id``, ``poll_ms``, ``max_poll_records``. Its stderr goes to
    ``<log_dir>/<name>.stderr``.
    """
    classpath = os.pathsep.join(map(str, compile_java_peer()))
    java = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    program = [*java, "-cp", classpath, "PeerConsumer"]
    return _start("java", program, bootstrap_servers, group_id, topics, name, log_dir, options)


def start_java_share_peer(
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    *,
    name: str,
    log_dir: Path | None = None,
    max_poll_records: int = 500,
    release_every: int = 0,
    stop_after: int = 0,
    poll_ms: int = 100,
) -> PeerProcess:
    """Start a Java ``KafkaShareConsumer`` peer in the share group ``group_id`` (explicit
    acknowledgement); ``name`` is also its client.id.

    It accepts every record, but releases those at their first delivery whose offset is a
    multiple of ``release_every`` (if not 0); it stops polling after ``stop_after`` records
    (if not 0). Each ``poll`` waits up to ``poll_ms``. Its stderr goes to
    ``<log_dir>/<name>.stderr``.
    """
    classpath = os.pathsep.join(map(str, compile_java_peer(JAVA_SHARE_SOURCE)))
    java = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    command = [
        *java,
        "-cp",
        classpath,
        "SharePeer",
        "--bootstrap",
        bootstrap_servers,
        "--group",
        group_id,
        "--topics",
        ",".join(topics),
        "--client-id",
        name,
        "--max-poll-records",
        str(max_poll_records),
        "--release-every",
        str(release_every),
        "--stop-after",
        str(stop_after),
        "--poll-ms",
        str(poll_ms),
    ]
    return PeerProcess(name, "java", command, _log_dir(log_dir) / f"{name}.stderr")


def start_rdkafka_peer(
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    *,
    name: str,
    log_dir: Path | None = None,
    **options: Any,
) -> PeerProcess:
    """Start a librdkafka (confluent-kafka) peer; ``name`` is also its client.id.

    ``options`` as for :func:`start_java_peer`; ``assignor`` is ``cooperative-sticky``,
    ``range`` or ``roundrobin`` (librdkafka cannot mix eager and cooperative assignors).
    Its stderr, which includes librdkafka's ``cgrp`` debug log, goes to
    ``<log_dir>/<name>.stderr``.
    """
    if importlib.util.find_spec("confluent_kafka") is None:
        raise PeerError("the rdkafka peer needs confluent-kafka: pip install confluent-kafka")
    program = [sys.executable, "-m", "tests.interop.rdkafka_peer"]
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    return _start(
        "rdkafka", program, bootstrap_servers, group_id, topics, name, log_dir, options, env
    )


def start_ours_peer(
    bootstrap_servers: str,
    group_id: str,
    topics: Sequence[str],
    *,
    name: str,
    log_dir: Path | None = None,
    **options: Any,
) -> PeerProcess:
    """Start a peer running this library's ``Consumer``; ``name`` is also its client_id.

    ``options`` as for :func:`start_java_peer`; ``assignor`` is any of ``range``,
    ``roundrobin``, ``sticky``, ``cooperative-sticky`` or a preference list.
    """
    program = [
        sys.executable,
        "-m",
        "devtools.member",
        "--recipe=consumer",
        "--clock=wall-ms",
        "--no-stdin",
    ]
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    return _start("ours", program, bootstrap_servers, group_id, topics, name, log_dir, options, env)


# -- topics and records ---------------------------------------------------------------------


def topic_partitions(topic: str, partitions: int) -> frozenset[TopicPartition]:
    return frozenset((topic, p) for p in range(partitions))


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions (replication 1), if it is new."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], wait_for_metadata=True)
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def produce(bootstrap_servers: str, topic: str, n: int, partitions: int) -> set[Record]:
    """Write ``n`` records to ``topic``, record ``i`` to partition ``i % partitions``.

    Returns:
        The (topic, partition, offset) of every record written.
    """
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(topic, value=f"record-{i}".encode(), partition=i % partitions)
            for i in range(n)
        ]
        producer.flush(30)
        written = [f.get(timeout=30) for f in futures]
    finally:
        producer.close()
    return {(m.topic, m.partition, m.offset) for m in written}


# -- checks over several peers --------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, peers: Sequence[PeerProcess] = ()
) -> None:
    """Poll ``condition`` every 0.05 s; on timeout fail with ``peers``' recent events."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    details = "\n".join(p.describe() for p in peers)
    raise PeerError(f"timed out after {timeout}s waiting for {what}\n{details}")


def consumed_by(peers: Iterable[PeerProcess]) -> set[Record]:
    out: set[Record] = set()
    for p in peers:
        out |= p.consumed()
    return out


def ownership_problems(
    peers: Sequence[PeerProcess], partitions: Iterable[TopicPartition]
) -> list[str]:
    """Why the running ``peers`` do not own ``partitions`` exactly once each (empty: they do)."""
    problems: list[str] = []
    owners: dict[TopicPartition, list[str]] = {}
    for p in peers:
        for tp in p.owned():
            owners.setdefault(tp, []).append(p.name)
    expected = set(partitions)
    for tp in sorted(expected):
        names = owners.get(tp, [])
        if len(names) != 1:
            problems.append(f"{tp} owned by {names or 'nobody'}")
    for tp in sorted(set(owners) - expected):
        problems.append(f"{tp} is not expected but owned by {owners[tp]}")
    return problems


def wait_settled(
    peers: Sequence[PeerProcess],
    partitions: Iterable[TopicPartition],
    timeout: float,
    quiet: float = 1.0,
    *,
    same_generation: bool = True,
) -> None:
    """Wait until the running ``peers`` agree on one assignment of ``partitions``.

    That is: each running peer was last assigned in the same generation, they own
    ``partitions`` exactly once each, and no rebalance callback has run for ``quiet``
    seconds. The generation matters: a peer that is still starting has not joined yet,
    and a lone first member owns everything in a complete, but not final, assignment.
    ``same_generation=False`` for a KIP-848 group, whose members each have an epoch of
    their own: then every running peer must own some of ``partitions``.
    """
    expected = frozenset(partitions)
    live = [p for p in peers if p.running]

    def settled() -> bool:
        generations = set()
        for p in live:
            assigned = p.of("assigned")
            if not assigned:
                return False
            generations.add(assigned[-1].get("generation"))
        if same_generation and len(generations) != 1:
            return False
        if not same_generation and not all(p.owned() for p in live):
            return False
        if ownership_problems(live, expected):
            return False
        last = max(
            (float(e["t"]) for p in live for e in p.of("assigned", "revoked", "lost")),
            default=0.0,
        )
        return now_ms() - last >= quiet * 1000

    wait_until(
        settled,
        timeout,
        f"{[p.name for p in live]} to own {sorted(expected)} once each, in one generation",
        live,
    )


def overlapping(intervals: Iterable[Interval]) -> list[tuple[Interval, Interval]]:
    """Pairs of ``intervals`` in which two peers owned the same partition at the same time.

    Intervals are half-open: one that ends exactly when another starts does not overlap.
    """
    by_partition: dict[TopicPartition, list[Interval]] = {}
    for i in intervals:
        by_partition.setdefault(i.partition, []).append(i)
    found: list[tuple[Interval, Interval]] = []
    for group in by_partition.values():
        group.sort(key=lambda i: i.start)
        for n, a in enumerate(group):
            for b in group[n + 1 :]:
                if b.start >= a.end:
                    break  # sorted by start: no later interval can overlap a either
                if a.peer != b.peer:
                    found.append((a, b))
    return found


def assert_single_ownership(peers: Sequence[PeerProcess]) -> None:
    """Fail if any partition was owned by two peers at the same time, ever.

    Each peer's intervals come from its own callbacks (:func:`ownership_intervals`), stamped
    with one clock (all peers run on this machine). The stamps make the intervals as long
    as they can be: an interval starts when the "assigned" callback starts and ends when
    "revoked" returns. The protocol orders those across members: in an eager rebalance
    every member revokes before it rejoins, and nobody is assigned before the SyncGroup
    that needs all of them; in a cooperative one the owner revokes after the first round
    and the new owner is assigned only in the second, which the owner's rejoin starts.
    So a correct group shows no overlap however the processes are scheduled, and an
    overlap is a real double ownership, not a race of the check.
    """
    found = overlapping(i for p in peers for i in p.intervals())
    if found:
        lines = [
            f"{a.partition}: {a.peer} [{a.start:.1f}, {a.end:.1f}) ended by {a.ended_by or '-'}"
            f" overlaps {b.peer} [{b.start:.1f}, {b.end:.1f}) ended by {b.ended_by or '-'}"
            for a, b in found
        ]
        raise PeerError("partitions owned twice at once:\n" + "\n".join(lines))


def commits_going_back(peers: Sequence[PeerProcess]) -> list[str]:
    """Commits, across all peers in time order, that moved a partition's offset backwards."""
    commits = sorted((t, tp, offset, p.name) for p in peers for t, tp, offset in p.commits())
    highest: dict[TopicPartition, tuple[int, str]] = {}
    problems: list[str] = []
    for t, tp, offset, name in commits:
        before = highest.get(tp)
        if before is not None and offset < before[0]:
            problems.append(
                f"{tp}: {name} committed {offset} at {t:.1f} after {before[1]} "
                f"committed {before[0]}"
            )
        else:
            highest[tp] = (offset, name)
    return problems


def assert_commits_move_forward(peers: Sequence[PeerProcess]) -> None:
    """Fail if a partition's committed offset ever went backwards, across all peers."""
    problems = commits_going_back(peers)
    if problems:
        raise PeerError("committed offsets went backwards:\n" + "\n".join(problems))


def last_committed(peers: Iterable[PeerProcess]) -> dict[TopicPartition, int]:
    """The latest commit per partition over all peers (by the commits' times)."""
    latest: dict[TopicPartition, tuple[float, int]] = {}
    for p in peers:
        for t, tp, offset in p.commits():
            if tp not in latest or t >= latest[tp][0]:
                latest[tp] = (t, offset)
    return {tp: offset for tp, (_, offset) in latest.items()}
