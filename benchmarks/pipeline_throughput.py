"""Throughput of the Spark pipeline with 1, 2 and 3 workers, and recovery after a kill.

For each worker count the same number of events is written to a fresh 12-partition topic
first; then the workers (one process and one Spark JVM each, ``local[1]``) are started,
warmed up and joined to the group, and only then told to go, so JVM start-up is not
measured. Throughput is events / (time from "go" until every offset of every partition is
published). Then, with 3 workers and events fed at a steady rate, the worker owning the
most partitions is SIGKILLed; the benchmark reports when the group noticed (the session
timeout dominates) and when each of its partitions had a batch published by another
worker.

    python -m benchmarks.pipeline_throughput [--quick] [--bootstrap HOST:PORT]

The last line prints the figures as name=value pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka.admin import KafkaAdminClient, NewTopic

from coordination.testing import running_kafka
from recipes.pipeline._cluster import Timeline, WorkerProcess
from recipes.pipeline._generator import produce
from recipes.pipeline._output import PipelineOutput, PublishedRangeError

PARTITIONS = 12
WINDOW_MS = 10_000
SESSION_TIMEOUT_MS = 6000


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def start_workers(bootstrap: str, topic: str, root: Path, n: int) -> list[WorkerProcess]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    workers = [
        WorkerProcess(
            f"w{i + 1}",
            bootstrap_servers=bootstrap,
            group_id=group,
            topic=topic,
            output=root / "output",
            log_dir=root / "logs",
            window_ms=WINDOW_MS,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            wait_for_go=True,
        )
        for i in range(n)
    ]
    for w in workers:
        w.wait_for("started", timeout=300)
    wait(
        lambda: (
            all(w.owned() for w in workers) and sum(len(w.owned()) for w in workers) == PARTITIONS
        ),
        timeout=120,
        what="a settled assignment",
    )
    return workers


def published_all(output: PipelineOutput, topic: str, per_partition: int) -> bool:
    try:
        output.check_published({(topic, p): (0, per_partition) for p in range(PARTITIONS)})
    except PublishedRangeError:
        return False
    return True


def throughput(bootstrap: str, events: int, n: int) -> tuple[float, list[int]]:
    """Events per second with ``n`` workers, and each batch's milliseconds."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, partitions=PARTITIONS, events=events, rate=0, window_ms=WINDOW_MS)
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        output = PipelineOutput(root / "output")
        workers = start_workers(bootstrap, topic, root, n)
        try:
            t0 = time.monotonic()
            for w in workers:
                w.send("go")
            wait(
                lambda: published_all(output, topic, events // PARTITIONS),
                timeout=600,
                what="every offset published",
            )
            elapsed = time.monotonic() - t0
        finally:
            for w in workers:
                w.close()
        batches = [int(e["ms"]) for w in workers for e in w.of("batch")]
    return events / elapsed, batches


def kill_recovery(bootstrap: str, rate: float, seconds: float) -> tuple[float, list[float]]:
    """Seconds from a SIGKILL to the group noticing, and to each partition's next batch."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        workers = start_workers(bootstrap, topic, root, 3)
        t0 = time.time()
        try:
            for w in workers:
                w.send("go")
            stop = threading.Event()
            feeder = threading.Thread(
                target=produce,
                args=(bootstrap, topic),
                kwargs={
                    "partitions": PARTITIONS,
                    "events": int(rate * seconds),
                    "rate": rate,
                    "window_ms": WINDOW_MS,
                    "stop": stop,
                },
                daemon=True,
            )
            feeder.start()
            time.sleep(seconds / 3)
            victim = max(workers, key=lambda w: len(w.owned()))
            owned = sorted(victim.owned())
            victim.kill()
            feeder.join()
            time.sleep(5)
        finally:
            for w in workers:
                w.close()
        report = Timeline(workers, t0).kill_report(victim.name, owned)
    resumed = [s for s in report.resumed_after_s.values() if s is not None]
    if len(resumed) != len(owned) or report.detected_after_s is None:
        raise RuntimeError(f"not every partition of {victim.name} was processed again: {report}")
    return report.detected_after_s, resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small run (a couple of minutes)")
    parser.add_argument("--bootstrap", help="an existing cluster (default: start one)")
    parser.add_argument("--events", type=int, help="events per throughput run")
    args = parser.parse_args()
    logging.getLogger("kafka").setLevel(logging.ERROR)
    events = args.events or (24_000 if args.quick else 240_000)
    events -= events % PARTITIONS
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap, full_jit=True))
        rates: dict[int, float] = {}
        for n in (1, 2, 3):
            rate, batches = throughput(bootstrap, events, n)
            rates[n] = rate
            print(
                f"{n} worker(s): {events} events in {events / rate:6.1f} s = {rate:8.0f} events/s "
                f"({len(batches)} batches, median {statistics.median(batches):.0f} ms, "
                f"longest {max(batches)} ms)",
                flush=True,
            )
        detected, resumed = kill_recovery(bootstrap, rate=2000, seconds=15 if args.quick else 30)
    print(f"speed-up: 2 workers x{rates[2] / rates[1]:.2f}, 3 workers x{rates[3] / rates[1]:.2f}")
    print(
        f"kill: noticed after {detected:.1f} s "
        f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s); "
        f"its {len(resumed)} partitions processed again after {min(resumed):.1f} s to "
        f"{max(resumed):.1f} s (median {statistics.median(resumed):.1f} s)"
    )
    print(
        f"events={events} eps_1={rates[1]:.0f} eps_2={rates[2]:.0f} eps_3={rates[3]:.0f} "
        f"speedup_2={rates[2] / rates[1]:.2f} speedup_3={rates[3] / rates[1]:.2f} "
        f"kill_detect_s={detected:.1f} kill_resume_max_s={max(resumed):.1f} "
        f"kill_resume_median_s={statistics.median(resumed):.1f}"
    )


if __name__ == "__main__":
    main()
