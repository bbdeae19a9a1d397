"""Share groups (KIP-932): our ShareConsumer against Kafka's Java KafkaShareConsumer, and
against a consumer group of the same size (what users would otherwise do).

Throughput: a backlog of ``--records`` small records (100-byte values, 8 partitions) is
written once; then, for each size N (default 1, 4, 8) and each implementation in turn,
a fresh group of N consumers, one process each, reads it from the start. Every record
is acknowledged on its own (explicit mode, ACCEPT) and the next poll carries the
acknowledgements, on both sides. The figure is records/s between the moments the group
had handled 10% and 90% of the backlog (start-up and the tail excluded); a run counts once
the broker reports the group's lag at 0 on every partition (every record acknowledged).

* ``ours-share``: ``recipes.queues.ShareConsumer``, a Python process per consumer;
* ``ours-share-ahead``: the same with ``fetch_ahead=True`` (the next ShareFetch goes out
  as poll returns, its answer coming while the records are handled);
* ``java-share``: ``KafkaShareConsumer`` (kafka-clients 4.3.1), a JVM per consumer
  (``benchmarks/java/ShareBench.java``);
* ``ours-group``: ``recipes.partitioning.Consumer`` (a consumer group, classic protocol),
  a Python process per consumer; no acknowledgements (a consumer group commits offsets).

Redelivery: a share group whose record lock lasts 6 s (``share.record.lock.duration.ms``,
which the test broker allows; a production broker's minimum is 15 s), one partition, 100
records. Consumer A takes them and holds them unacknowledged; consumer B joins (3 s); then
A is

* ``closed`` (SIGTERM, a clean close): A releases what it holds as it leaves;
* ``killed`` (SIGKILL): its connections close with the process, and the broker releases
  what the member held (Kafka 4.1+ does on a share session's disconnection);
* ``frozen`` (SIGSTOP, a machine gone silent with its connections open): the records come
  back only when their locks run out.

The figure is the time from A's end (for ``frozen``: from the end of the lock, A's report of
the records + the lock duration; the broker took the lock a little earlier) until B has
handled every record A held: how soon a member picks up records that became free.
Both consumers are of the same implementation.

Run (JDK 17+ and Maven needed; a Kafka 4.3 broker with share groups is started on loopback
unless ``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one)::

    python benchmarks/share_throughput.py --quick      # N = 1, 4; 2 repeats; 40,000 records
    python benchmarks/share_throughput.py              # N = 1, 4, 8; 3 repeats; 100,000 records

Everything runs on this machine's cores (the broker too): the figures compare the clients
under the same load, not what a cluster of machines would do. Tables give median
[min .. max] over the repeats; the last line holds the headline figures and ratios as
``name=value`` pairs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _java import compile_java
from _share_backlog import produce

from coordination import GroupInspector
from coordination.testing import running_kafka

log = logging.getLogger("share_throughput")

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ShareBench.java"
JAVA_ARTIFACTS = ("org.apache.kafka:kafka-clients:4.3.1", "org.slf4j:slf4j-nop:1.7.36")
IMPLEMENTATIONS = ("ours-share", "ours-share-ahead", "java-share", "ours-group")
SHARE_IMPLEMENTATIONS = ("ours-share", "ours-share-ahead", "java-share")
# The redelivery runs compare the share consumers as they come by default.
REDELIVERY_IMPLEMENTATIONS = ("ours-share", "java-share")
PARTITIONS = 8
VALUE = b"v" * 100
MAX_POLL_RECORDS = 500
POLL_MS = 100
RUN_TIMEOUT_S = 300.0
LOCK_DURATION_MS = 6_000
HELD_RECORDS = 100
# How consumer A ends in a redelivery run.
ENDINGS = {"closed": signal.SIGTERM, "killed": signal.SIGKILL, "frozen": signal.SIGSTOP}
# B's head start before A goes: time to join and to be assigned the partition.
JOIN_WAIT_S = 3.0


class BenchmarkError(Exception):
    pass


# -- one consumer: the child process ------------------------------------------------------


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields, "t": time.time() * 1000}), flush=True)


def run_child(args: argparse.Namespace) -> int:
    """One of our consumers, reporting the JSON lines ShareBench.java reports."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    if args.child == "group":
        return run_group_child(args, stopping)
    from recipes.queues import AcknowledgeType, ShareConsumer

    consumer = ShareConsumer(
        args.group,
        topics=[args.topic],
        bootstrap_servers=args.bootstrap,
        max_poll_records=MAX_POLL_RECORDS,
        fetch_ahead=args.ahead,
    )
    try:
        consumer.start(timeout=60)
        emit("started")
        handled = redelivered = reported = 0
        last_report = 0.0
        while not stopping.is_set():
            records = consumer.poll(timeout_ms=POLL_MS)
            if not records:
                if handled != reported:  # the last records before an idle spell
                    reported = handled
                    emit("progress", handled=handled, redelivered=redelivered)
                continue
            if args.child == "hold":
                emit("held", records=len(records))
                stopping.wait()
                break
            before = redelivered
            for record in records:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                handled += 1
                redelivered += record.delivery_count > 1
            now = time.monotonic()
            if redelivered != before or now - last_report >= 0.1:
                last_report, reported = now, handled
                emit("progress", handled=handled, redelivered=redelivered)
    finally:
        consumer.close()
        emit("closed")
    return 0


def run_group_child(args: argparse.Namespace, stopping: threading.Event) -> int:
    from recipes.partitioning import Consumer

    consumer = Consumer(
        args.group,
        topics=[args.topic],
        bootstrap_servers=args.bootstrap,
        auto_offset_reset="earliest",
        max_poll_records=MAX_POLL_RECORDS,
    )
    try:
        emit("started")
        handled = reported = 0
        last_report = 0.0
        while not stopping.is_set():
            count = sum(len(r) for r in consumer.poll(timeout_ms=POLL_MS).values())
            handled += count
            now = time.monotonic()
            if handled != reported and (count == 0 or now - last_report >= 0.1):
                last_report, reported = now, handled
                emit("progress", handled=handled, redelivered=0)
    finally:
        consumer.close()
        emit("closed")
    return 0


# -- the parent: processes, groups, figures --------------------------------------------------


class Child:
    """A consumer process and the lines it reported."""

    def __init__(self, command: list[str], name: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
        )
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.append(json.loads(line))
            except json.JSONDecodeError:
                log.debug("%s: %s", self.name, line.rstrip())

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in list(self.lines) if e["event"] == event]

    def wait_for(self, event: str, timeout_s: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while not (found := self.of(event)):
            if self.process.poll() is not None:
                raise BenchmarkError(f"{self.name} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{self.name}: no {event!r} within {timeout_s:.0f} s")
            time.sleep(0.02)
        return found[0]

    def progress(self) -> tuple[int, int]:
        """Records handled and, of those, redelivered, as last reported."""
        last = self.of("progress")
        return (last[-1]["handled"], last[-1]["redelivered"]) if last else (0, 0)

    def stop(self, how: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(how)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop; killing it", self.name)
            self.process.kill()
            self.process.wait()
        self._reader.join(5)


class Launcher:
    def __init__(self, bootstrap: str, java_classpath: list[str] | None) -> None:
        self.bootstrap = bootstrap
        self.java_classpath = java_classpath
        self.script = str(Path(__file__).resolve())

    def start(self, implementation: str, group: str, topic: str, mode: str, name: str) -> Child:
        if implementation == "java-share":
            assert self.java_classpath is not None
            command = [
                "java",
                "-Xmx256m",
                "-cp",
                os.pathsep.join(self.java_classpath),
                "ShareBench",
                "--bootstrap",
                self.bootstrap,
                "--group",
                group,
                "--topic",
                topic,
                "--mode",
                mode,
                "--max-poll-records",
                str(MAX_POLL_RECORDS),
                "--poll-ms",
                str(POLL_MS),
            ]
        else:
            kind = "group" if implementation == "ours-group" else mode
            command = [sys.executable, self.script, "--child", kind, self.bootstrap, group, topic]
            command += ["ahead"] if implementation == "ours-share-ahead" else []
        return Child(command, name)


def admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"share-bench-{uuid.uuid4().hex[:8]}"
    client = admin(bootstrap)
    try:
        client.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        client.close()
    return topic


def new_group(bootstrap: str, implementation: str, **config: str) -> str:
    """A fresh group id; a share group starts at the beginning of its partitions (a share
    group starts at their end by default)."""
    group = f"{implementation}-{uuid.uuid4().hex[:8]}"
    if implementation in SHARE_IMPLEMENTATIONS:
        client = admin(bootstrap)
        try:
            settings = {"share.auto.offset.reset": "earliest", **config}
            client.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, settings)])
        finally:
            client.close()
    return group


def share_lag(inspector: GroupInspector, group: str) -> int | None:
    """The share group's records not yet acknowledged, over its partitions; None while the
    broker cannot tell."""
    try:
        state = inspector.describe(group).summary.get("share_partitions") or {}
    except Exception as e:  # a coordinator moving, a group not described yet
        log.debug("describe %s: %s", group, e)
        return None
    lags = [int(p.get("lag", -1)) for p in state.values()]
    if len(lags) < PARTITIONS or any(lag < 0 for lag in lags):
        return None
    return sum(lags)


def crossing(children: Sequence[Child], target: int) -> tuple[float, int]:
    """The first moment (ms) the group's summed progress reached ``target``, and the sum then."""
    points = sorted(
        (e["t"], i, e["handled"]) for i, c in enumerate(children) for e in c.of("progress")
    )
    current = [0] * len(children)
    for t, i, handled in points:
        current[i] = handled
        if sum(current) >= target:
            return t, sum(current)
    raise BenchmarkError(f"the group never reached {target} records")


def throughput_run(
    launcher: Launcher,
    inspector: GroupInspector,
    implementation: str,
    size: int,
    topic: str,
    records: int,
) -> float:
    """Records/s of ``size`` consumers reading the backlog, between 10% and 90%."""
    group = new_group(launcher.bootstrap, implementation)
    children = [
        launcher.start(implementation, group, topic, "run", f"{implementation}-{i}")
        for i in range(size)
    ]
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while sum(c.progress()[0] for c in children) < records:
            for c in children:
                if c.process.poll() is not None:
                    raise BenchmarkError(f"{c.name} exited with {c.process.returncode}")
            if time.monotonic() > deadline:
                got = sum(c.progress()[0] for c in children)
                raise BenchmarkError(f"{implementation} N={size}: {got} of {records} records")
            time.sleep(0.1)
        if implementation in SHARE_IMPLEMENTATIONS:
            # Done means acknowledged: the broker says nothing is left.
            while share_lag(inspector, group) != 0:
                if time.monotonic() > deadline:
                    raise BenchmarkError(f"{implementation} N={size}: lag not 0 at the end")
                time.sleep(0.2)
        t10, n10 = crossing(children, records // 10)
        t90, n90 = crossing(children, records * 9 // 10)
        return (n90 - n10) / ((t90 - t10) / 1000)
    finally:
        for c in children:
            c.stop()


def redelivery_run(launcher: Launcher, implementation: str, how: str) -> float:
    """Seconds until B handled what A held: from A's end, or (A frozen) from the end of
    the lock A held the records under."""
    topic = create_topic(launcher.bootstrap, 1)
    produce(launcher.bootstrap, topic, HELD_RECORDS, 1)
    group = new_group(
        launcher.bootstrap,
        implementation,
        **{"share.record.lock.duration.ms": str(LOCK_DURATION_MS)},
    )
    a = launcher.start(implementation, group, topic, "hold", f"{implementation}-holder")
    b: Child | None = None
    try:
        holding = a.wait_for("held")
        held, held_at = holding["records"], holding["t"]
        b = launcher.start(implementation, group, topic, "run", f"{implementation}-taker")
        b.wait_for("started")
        time.sleep(JOIN_WAIT_S)
        # Frozen, A frees nothing: the lock's end is when the records become free.
        ended = held_at + LOCK_DURATION_MS if how == "frozen" else time.time() * 1000
        a.process.send_signal(ENDINGS[how])
        deadline = time.monotonic() + 60
        while b.progress()[1] < held:
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"{implementation} {how}: {b.progress()[1]} of {held} records came back"
                )
            time.sleep(0.02)
        back = float(next(e["t"] for e in b.of("progress") if e["redelivered"] >= held))
        return (back - ended) / 1000
    finally:
        a.stop(signal.SIGKILL if how == "frozen" else signal.SIGTERM)
        if b is not None:
            b.stop()


def spread(values: Sequence[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))} .. {fmt.format(max(values))}]"
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Share consumers (ours and Java's) and a consumer group reading one "
        "backlog; redelivery after a consumer ends."
    )
    parser.add_argument("--quick", action="store_true", help="N = 1, 4; 2 repeats; 40,000 records")
    parser.add_argument("--sizes", help="comma-separated group sizes N (default 1,4,8)")
    parser.add_argument("--repeats", type=int, help="runs per size and implementation (default 3)")
    parser.add_argument("--records", type=int, help="the backlog (default 100,000)")
    parser.add_argument(
        "--implementations",
        default=",".join(IMPLEMENTATIONS),
        help=f"comma-separated subset of {','.join(IMPLEMENTATIONS)}",
    )
    parser.add_argument("--no-redelivery", action="store_true", help="skip the redelivery runs")
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="an existing cluster with share groups (default: $KAFKA_BOOTSTRAP_SERVERS, else a "
        "broker started for this run)",
    )
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in (args.sizes or ("1,4" if args.quick else "1,4,8")).split(",")]
    args.repeats = args.repeats or (2 if args.quick else 3)
    args.records = args.records or (40_000 if args.quick else 100_000)
    args.implementations = [i.strip() for i in args.implementations.split(",") if i.strip()]
    unknown = set(args.implementations) - set(IMPLEMENTATIONS)
    if unknown:
        parser.error(f"unknown implementations {sorted(unknown)}: choose from {IMPLEMENTATIONS}")
    return args


@contextmanager
def java_classpath(implementations: Sequence[str]) -> Iterator[list[str] | None]:
    if "java-share" not in implementations:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="share-bench-") as workdir:
        yield compile_java(JAVA_SOURCE, JAVA_ARTIFACTS, Path(workdir), BenchmarkError)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        kind, bootstrap, group, topic = argv[1:5]
        return run_child(
            argparse.Namespace(
                child=kind, bootstrap=bootstrap, group=group, topic=topic, ahead="ahead" in argv[5:]
            )
        )
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    rates: dict[tuple[str, int], list[float]] = {}
    latency: dict[tuple[str, str], list[float]] = {}
    with ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap_servers))
        classpath = stack.enter_context(java_classpath(args.implementations))
        inspector = stack.enter_context(GroupInspector(bootstrap_servers=bootstrap))
        launcher = Launcher(bootstrap, classpath)
        topic = create_topic(bootstrap, PARTITIONS)
        print(f"writing the backlog: {args.records:,} records on {PARTITIONS} partitions")
        produce(bootstrap, topic, args.records, PARTITIONS)
        for repeat in range(args.repeats):
            for size in args.sizes:
                for implementation in args.implementations:
                    rate = throughput_run(
                        launcher, inspector, implementation, size, topic, args.records
                    )
                    rates.setdefault((implementation, size), []).append(rate)
                    print(f"  repeat {repeat + 1} N={size} {implementation}: {rate:,.0f} records/s")
            if args.no_redelivery:
                continue
            for implementation in (
                i for i in args.implementations if i in REDELIVERY_IMPLEMENTATIONS
            ):
                for how in ENDINGS:
                    seconds = redelivery_run(launcher, implementation, how)
                    latency.setdefault((implementation, how), []).append(seconds)
                    print(
                        f"  repeat {repeat + 1} redelivery {how} {implementation}: {seconds:.2f} s"
                    )
    print(f"\nThroughput, records/s between 10% and 90% of {args.records:,} ({args.repeats} runs)")
    print(f"{'N':>3}  " + "  ".join(f"{i:>28}" for i in args.implementations))
    headline: dict[str, str] = {}
    for size in args.sizes:
        cells = [spread(rates[i, size]) for i in args.implementations]
        print(f"{size:>3}  " + "  ".join(f"{c:>28}" for c in cells))
        for mine, name in (("ours-share", "share"), ("ours-share-ahead", "share_ahead")):
            ours = rates.get((mine, size))
            for peer in ("java-share", "ours-group"):
                if ours and (peer, size) in rates:
                    ratio = statistics.median(ours) / statistics.median(rates[peer, size])
                    headline[f"{name}_vs_{peer.replace('-', '_')}_n{size}"] = f"{ratio:.2f}"
    if latency:
        print(
            f"\nRedelivery, s after the holder's end (frozen: after its lock's end) "
            f"(lock {LOCK_DURATION_MS} ms, {HELD_RECORDS} records)"
        )
        for (implementation, how), values in sorted(latency.items()):
            print(f"  {implementation:>12} {how:>7}: {spread(values, 2)}")
        for how in ENDINGS:
            if ("ours-share", how) in latency and ("java-share", how) in latency:
                ours_s = statistics.median(latency["ours-share", how])
                java_s = statistics.median(latency["java-share", how])
                headline[f"redelivery_{how}_s"] = f"{ours_s:.2f}"
                headline[f"redelivery_{how}_java_s"] = f"{java_s:.2f}"
                if how != "frozen":  # both near 0 after the lock's end: no ratio
                    headline[f"redelivery_{how}_vs_java"] = f"{ours_s / java_s:.2f}"
    for (implementation, size), values in sorted(rates.items()):
        if implementation in ("ours-share", "ours-share-ahead"):
            name = implementation.replace("-", "_")
            headline[f"{name}_n{size}"] = f"{statistics.median(values):.0f}"
    print("\n" + " ".join(f"{k}={v}" for k, v in headline.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
