"""The pipeline against Spark Structured Streaming: throughput, latency, a killed driver.

Both run the same parse and per-batch windowed sum on the same events, broker and
cores, in the same run, and both read from Kafka in Spark's executors:

* ours: ``WORKERS`` pipeline workers (``--workers``, default 2; one Spark driver each,
  ``local[1]``), sharing the
  partitions through the group, Parquet (or ``--sink delta``) output;
* the peer: one Structured Streaming driver (``local[WORKERS]``) with the Kafka source, a
  checkpoint and an idempotent ``foreachBatch`` sink of the same kind
  (``benchmarks/_structured_streaming.py``).

Measured:

1. throughput: events already in a fresh topic; time from "go" (JVMs started) until every
   offset is in the output (ours) or the ``availableNow`` query has finished (the peer);
2. end-to-end latency at a steady rate: from an event's acknowledgement by the broker to
   the completion of the batch that publishes it (median and p99 over all events);
3. a killed driver at a steady rate: ours SIGKILLs one worker (the others keep going, the
   group moves its partitions); the peer's driver is SIGKILLed and restarted at once from
   its checkpoint, as a supervisor would. Reported: the longest time any partition went
   without output after the kill ("resumed after"); the time until every event
   acknowledged before the kill is in the output ("exact again after": the output is then
   complete up to the kill, and the final check shows it equal to the expected totals);
   and that both outputs are exact.

    python -m benchmarks.pipeline_throughput [--quick] [--bootstrap HOST:PORT] [--sink delta]
        [--throughput-runs N] [--phases throughput,latency,kill]
        [--parallel-batches N] [--max-partitions-per-batch N] [--max-batch-delay-ms MS]
        [--workers 2] [--worker-master local[1]] [--peer-master local[2]]
        [--peer-kafka-option kafka.KEY=VALUE ...]

The last line prints the figures as name=value pairs.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from kafka.admin import KafkaAdminClient, NewTopic

from coordination.testing import running_kafka
from recipes.pipeline import (
    WINDOWED_SUM_KEYS,
    WINDOWED_SUM_TOTALS,
    BatchPublished,
    DeltaSink,
    WorkerStarted,
)
from recipes.pipeline._cluster import Timeline, WorkerProcess
from recipes.pipeline._delta_totals import COMPACTOR_APP_ID
from recipes.pipeline._generator import Tally, produce
from recipes.pipeline._output import PipelineOutput, PublishedRangeError

PARTITIONS = 12
WORKERS = 2
WINDOW_MS = 10_000
SESSION_TIMEOUT_MS = 6000
_ROOT = Path(__file__).resolve().parents[1]

Results = dict[tuple[str, int], tuple[int, Decimal]]


def create_topic(bootstrap: str) -> str:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    return topic


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Feed:
    """Events produced at a rate in the background; when each was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, events: int, rate: float) -> None:
        self.acked: list[tuple[int, float]] = []  # (events acknowledged so far, when)
        self.tally: Tally | None = None
        self._thread = threading.Thread(
            target=self._run, args=(bootstrap, topic, events, rate), daemon=True
        )

    def start(self) -> Feed:
        self._thread.start()
        return self

    def join(self) -> Tally:
        self._thread.join()
        assert self.tally is not None
        return self.tally

    def _run(self, bootstrap: str, topic: str, events: int, rate: float) -> None:
        self.tally = produce(
            bootstrap,
            topic,
            partitions=PARTITIONS,
            events=events,
            rate=rate,
            window_ms=WINDOW_MS,
            on_progress=lambda n: self.acked.append((n, time.time())),
        )

    def acked_at(self) -> Callable[[int], float]:
        """When event ``i`` (0-based) was acknowledged, as a function of ``i``."""
        counts = [n for n, _ in self.acked]
        return lambda event: self.acked[bisect.bisect_right(counts, event)][1]


T = TypeVar("T")


def first_showing(
    batches: Iterable[tuple[float, int, int, T]],
) -> Callable[[int], tuple[float, T] | None]:
    """The first batch that made event ``i`` visible in the output, as ``(its time, its
    payload)`` (None: none yet), as a function of ``i``.

    ``batches``: ``(time, partition, end offset, payload)`` per published batch; a batch
    that ends no further than an earlier one of its partition shows nothing new. Event
    ``i`` is offset ``i // PARTITIONS`` of partition ``i % PARTITIONS`` (a fresh topic,
    one producer).
    """
    shown: dict[int, list[tuple[float, T]]] = {}
    ends: dict[int, list[int]] = {}
    for t, p, end, payload in sorted(batches, key=lambda b: b[:3]):
        if not ends.get(p) or end > ends[p][-1]:
            ends.setdefault(p, []).append(end)
            shown.setdefault(p, []).append((t, payload))

    def at(i: int) -> tuple[float, T] | None:
        p = i % PARTITIONS
        k = bisect.bisect_right(ends.get(p, []), i // PARTITIONS)
        return shown[p][k] if k < len(ends.get(p, [])) else None

    return at


def visible_at(visible: list[tuple[float, int, int]]) -> Callable[[int], float | None]:
    """When event ``i`` became visible in the output (None: not yet), as a function of
    ``i``; ``visible``: ``(time, partition, end offset)`` per published batch."""
    at = first_showing((t, p, end, None) for t, p, end in visible)
    return lambda i: None if (hit := at(i)) is None else hit[0]


# Latency counts the events acknowledged this many seconds or more after the first
# (--latency-from-s): 0 counts all; more leaves out both sides' start (a fresh JVM
# compiles Spark's code for its first minutes).
LATENCY_FROM_S = 0.0


def timed_events(feed: Feed, events: int) -> list[int]:
    """The events whose latency counts (see LATENCY_FROM_S)."""
    if not feed.acked:
        return []
    acked_at, start = feed.acked_at(), feed.acked[0][1] + LATENCY_FROM_S
    return [i for i in range(events) if acked_at(i) >= start]


def latencies(feed: Feed, events: int, visible: list[tuple[float, int, int]]) -> list[float]:
    """Seconds from each event's acknowledgement to the batch that made it visible."""
    acked_at, shown_at = feed.acked_at(), visible_at(visible)
    return [t - acked_at(i) for i in timed_events(feed, events) if (t := shown_at(i)) is not None]


def time_to_exact(
    feed: Feed, visible: list[tuple[float, int, int]], killed_at: float
) -> float | None:
    """Seconds from the kill until every event acknowledged before it is in the output
    (None: some never was). With the final check exact, the output then holds exactly
    those events' results: the time to exact output, where "resumed after" is only the
    first batch after the kill."""
    before = max((n for n, t in feed.acked if t <= killed_at), default=0)
    shown_at = visible_at(visible)
    times = [shown_at(i) for i in range(before)]
    if any(t is None for t in times):
        return None
    return max([killed_at, *(t for t in times if t is not None)]) - killed_at


# ---------------------------------------------------------------------------- ours


class Batching(TypedDict, total=False):
    """The workers' batching and compaction settings (--parallel-batches,
    --max-partitions-per-batch, --max-batch-delay-ms, --compaction-interval-ms)."""

    parallel_batches: int
    max_partitions_per_batch: int
    max_batch_delay_ms: int
    compaction_interval_ms: int


BATCHING: Batching = {}
# kafka.* options of the peer's Kafka source (--peer-kafka-option).
PEER_KAFKA_OPTIONS: dict[str, str] = {}
# spark.master of each worker and of the peer's driver (--worker-master, --peer-master).
MASTERS = {"worker": "local[1]", "peer": f"local[{WORKERS}]"}


def start_workers(
    bootstrap: str, topic: str, root: Path, sink: str, n: int | None = None
) -> list[WorkerProcess]:
    n = WORKERS if n is None else n
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
            sink=sink,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            max_batch_records=100_000,
            wait_for_go=True,
            master=MASTERS["worker"],
            **BATCHING,
        )
        for i in range(n)
    ]
    for w in workers:
        w.wait_for(WorkerStarted, timeout=300)
    wait(
        lambda: (
            all(w.owned() for w in workers) and sum(len(w.owned()) for w in workers) == PARTITIONS
        ),
        timeout=120,
        what="a settled assignment",
    )
    return workers


def published_all(output: PipelineOutput, topic: str, ends: dict[int, int]) -> bool:
    try:
        output.check_published({(topic, p): (0, end) for p, end in ends.items()})
    except PublishedRangeError:
        return False
    return True


def compacted(output: Path) -> bool:
    """Whether the totals table includes every version of the partials table (read from
    the two Delta logs as files, without a Spark session in this process)."""
    partials = sorted((output / "table_partials" / "_delta_log").glob("*.json"))
    if not partials:
        return False
    merged = [
        action["txn"]["version"]
        for log in (output / "table" / "_delta_log").glob("*.json")
        for line in log.read_text().splitlines()
        if '"txn"' in line
        for action in [json.loads(line)]
        if action["txn"]["appId"] == COMPACTOR_APP_ID
    ]
    return bool(merged) and max(merged) >= int(partials[-1].stem)


def print_batches(workers: list[WorkerProcess]) -> None:
    """Where a worker's time went: per batch, its Spark job's time (``stage_ms``) and the
    time from the job's start to the batch's publication (``ms``)."""
    for w in workers:
        batches = w.of(BatchPublished)
        stage = sorted(b.stage_ms for b in batches)
        publish = sorted(b.ms for b in batches)
        if batches:
            print(
                f"{w.name}: {len(batches)} batches, {sum(b.records for b in batches)} records;"
                f" job ms {stage[0]}..{stage[-1]}, published after ms {publish[0]}..{publish[-1]}",
                flush=True,
            )


def print_latency_parts(feed: Feed, events: int, workers: list[WorkerProcess]) -> None:
    """Where our latency goes: each event's wait from its acknowledgement until the start
    of the job that published it, and that job's time until the publication."""
    job_of = first_showing(
        (e.t, e.partition, e.end, e.ms / 1000) for w in workers for e in w.of(BatchPublished)
    )
    acked_at = feed.acked_at()
    waited, in_job = [], []
    for i in timed_events(feed, events):
        if (hit := job_of(i)) is not None:
            t, job_s = hit
            waited.append(t - job_s - acked_at(i))
            in_job.append(job_s)
    if waited:
        print(
            f"ours, median per event: {statistics.median(waited):.2f} s waiting for its job, "
            f"{statistics.median(in_job):.2f} s in it (p99 {pct(waited, 0.99):.2f} s and "
            f"{pct(in_job, 0.99):.2f} s)",
            flush=True,
        )


def ours_visible(workers: list[WorkerProcess]) -> list[tuple[float, int, int]]:
    return [(e.t, e.partition, e.end) for w in workers for e in w.of(BatchPublished)]


def ours_throughput(bootstrap: str, events: int, sink: str) -> float:
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, partitions=PARTITIONS, events=events, rate=0, window_ms=WINDOW_MS)
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        output = PipelineOutput(root / "output")
        workers = start_workers(bootstrap, topic, root, sink)
        try:
            t0 = time.monotonic()
            for w in workers:
                w.send("go")
            ends = {p: events // PARTITIONS for p in range(PARTITIONS)}
            wait(lambda: published_all(output, topic, ends), 900, "every offset published")
            published_s = time.monotonic() - t0
            print_batches(workers)
            if sink == "parquet":
                view = output.segments.view()
                print(
                    f"ours: {len(output.published_files())} data files to read "
                    f"({len(view.segments)} compacted segments holding "
                    f"{sum(len(s.batches) for s in view.segments)} batches, "
                    f"{len(output.published_paths())} batches on their own)",
                    flush=True,
                )
            if sink == "delta":
                # The totals table, which the peer's MERGE writes, holds everything only
                # once the elected compactor has merged the last partials.
                wait(lambda: compacted(root / "output"), 300, "the totals compacted")
                print(
                    f"ours: every offset published after {published_s:.1f} s, in the "
                    f"totals after {time.monotonic() - t0:.1f} s",
                    flush=True,
                )
            return events / (time.monotonic() - t0)
        finally:
            for w in workers:
                w.close()


def ours_streaming(
    bootstrap: str, events: int, rate: float, sink: str, *, kill: bool
) -> tuple[list[float], float | None, bool, float | None]:
    """Latencies, the longest stall of a killed worker's partitions, whether exact, and
    the time to exact output after the kill."""
    topic = create_topic(bootstrap)
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        output = PipelineOutput(root / "output")
        workers = start_workers(bootstrap, topic, root, sink)
        t0 = time.time()
        stall: float | None = None
        to_exact: float | None = None
        killed_at: float | None = None
        try:
            for w in workers:
                w.send("go")
            feed = Feed(bootstrap, topic, events, rate).start()
            victim, owned = None, []
            if kill:
                wait(lambda: len(feed.acked) > 0 and feed.acked[-1][0] >= events // 2, 600, "half")
                victim = max(workers, key=lambda w: len(w.owned()))
                owned = sorted(victim.owned())
                killed_at = time.time()
                victim.kill()
            tally = feed.join()
            ends = {p: events // PARTITIONS for p in range(PARTITIONS)}
            wait(lambda: published_all(output, topic, ends), 600, "every offset published")
        finally:
            for w in workers:
                w.close()
        print_batches(workers)
        if not kill:
            print_latency_parts(feed, events, workers)
        if victim is not None:
            report = Timeline(workers, t0).kill_report(victim.name, owned)
            resumed = [s for s in report.resumed_after_s.values() if s is not None]
            stall = max(resumed) if len(resumed) == len(owned) else None
        if killed_at is not None:
            to_exact = time_to_exact(feed, ours_visible(workers), killed_at)
        exact = read_ours(root / "output", sink) == tally.results
        return latencies(feed, events, ours_visible(workers)), stall, exact, to_exact


def read_ours(output: Path, sink: str) -> Results:
    from recipes.pipeline._spark import read_results, spark_session

    spark = spark_session("local[1]", app_name="bench-verify")
    if sink == "parquet":
        return read_results(spark, PipelineOutput(output))
    # The sink's read: the totals and whatever partials the compactor has not merged yet.
    delta_sink = DeltaSink(
        str(output / "table"),
        staging=output,
        key_columns=WINDOWED_SUM_KEYS,
        add_columns=WINDOWED_SUM_TOTALS,
    )
    return table_results(delta_sink.read(spark).collect())


def table_results(rows: list[Any]) -> Results:
    return {(r["key"], r["window_start_ms"]): (r["event_count"], r["value_sum"]) for r in rows}


# ---------------------------------------------------------------------------- the peer


class StreamingDriver:
    """``benchmarks/_structured_streaming.py`` in a child process, its events collected."""

    def __init__(self, bootstrap: str, topic: str, root: Path, sink: str, *, once: bool) -> None:
        args = [
            sys.executable,
            "-m",
            "benchmarks._structured_streaming",
            f"--bootstrap-servers={bootstrap}",
            f"--topic={topic}",
            f"--checkpoint={root / 'checkpoint'}",
            f"--output={root / 'output'}",
            f"--sink={sink}",
            f"--master={MASTERS['peer']}",
            f"--window-ms={WINDOW_MS}",
            "--wait-for-go",
            *(["--available-now"] if once else []),
            *(f"--kafka-option={k}={v}" for k, v in PEER_KAFKA_OPTIONS.items()),
        ]
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self._log = open(root / "logs" / "streaming.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            args,
            cwd=_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "PYTHONPATH": str(_ROOT)},
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == kind]

    def go(self) -> None:
        wait(lambda: bool(self.of("started")), 300, "the streaming driver's start")
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def streaming_visible(drivers: list[StreamingDriver]) -> list[tuple[float, int, int]]:
    return [
        (e["t"], int(p), end)
        for d in drivers
        for e in d.of("batch")
        for p, end in e["ends"].items()
    ]


def streaming_throughput(bootstrap: str, events: int, sink: str) -> float:
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, partitions=PARTITIONS, events=events, rate=0, window_ms=WINDOW_MS)
    with tempfile.TemporaryDirectory(prefix="streaming-bench-") as tmp:
        driver = StreamingDriver(bootstrap, topic, Path(tmp), sink, once=True)
        try:
            driver.go()
            t0 = time.monotonic()
            wait(lambda: bool(driver.of("done")), 900, "the available-now query")
            return events / (time.monotonic() - t0)
        finally:
            driver.close()


def streaming_streaming(
    bootstrap: str, events: int, rate: float, sink: str, *, kill: bool
) -> tuple[list[float], float | None, bool, float | None]:
    """As :func:`ours_streaming`, for the peer (a killed driver restarts from its
    checkpoint)."""
    topic = create_topic(bootstrap)
    with tempfile.TemporaryDirectory(prefix="streaming-bench-") as tmp:
        root = Path(tmp)
        drivers = [StreamingDriver(bootstrap, topic, root, sink, once=False)]
        stall: float | None = None
        to_exact: float | None = None
        killed_at: float | None = None
        try:
            drivers[0].go()
            feed = Feed(bootstrap, topic, events, rate).start()
            if kill:
                wait(lambda: len(feed.acked) > 0 and feed.acked[-1][0] >= events // 2, 600, "half")
                killed_at = time.time()
                drivers[0].kill()
                drivers.append(StreamingDriver(bootstrap, topic, root, sink, once=False))
                drivers[1].go()
            tally = feed.join()
            last = {p: events // PARTITIONS for p in range(PARTITIONS)}

            def caught_up() -> bool:
                seen: dict[int, int] = {}
                for _, p, end in streaming_visible(drivers):
                    seen[p] = max(seen.get(p, 0), end)
                return all(seen.get(p, 0) >= end for p, end in last.items())

            wait(caught_up, 600, "the streaming query to catch up")
            if killed_at is not None:
                resumed = [t for t, _, _ in streaming_visible(drivers[1:])]
                stall = min(resumed) - killed_at if resumed else None
                to_exact = time_to_exact(feed, streaming_visible(drivers), killed_at)
        finally:
            for d in drivers:
                d.close()
        exact = read_streaming(root / "output", sink) == tally.results
        return latencies(feed, events, streaming_visible(drivers)), stall, exact, to_exact


def read_streaming(output: Path, sink: str) -> Results:
    from pyspark.sql import functions as F

    from recipes.pipeline._spark import spark_session

    spark = spark_session("local[1]", app_name="bench-verify")
    if sink == "delta":
        return table_results(spark.read.format("delta").load(str(output / "table")).collect())
    parts = spark.read.parquet(*(str(p) for p in output.glob("batch=*")))
    rows = (
        parts.groupBy("key", "window_start_ms")
        .agg(
            F.sum("event_count").alias("event_count"),
            F.sum("value_sum").cast("decimal(38,9)").alias("value_sum"),
        )
        .collect()
    )
    return table_results(rows)


# ---------------------------------------------------------------------------- main


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PHASES = ("throughput", "latency", "kill")


def main() -> None:
    global WORKERS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small run (several minutes)")
    parser.add_argument("--bootstrap", help="an existing cluster (default: start one)")
    parser.add_argument("--sink", choices=("parquet", "delta"), default="parquet")
    parser.add_argument("--events", type=int, help="events per throughput run")
    parser.add_argument(
        "--throughput-runs",
        type=int,
        default=1,
        help="throughput runs, ours and the peer's alternating (the machine is noisy)",
    )
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"which phases to run, comma-separated (default: {','.join(PHASES)})",
    )
    parser.add_argument(
        "--stream-seconds", type=int, help="seconds the latency and kill phases stream"
    )
    parser.add_argument(
        "--latency-from-s",
        type=float,
        default=0.0,
        help="latency of the events acknowledged this long after the first only (0: all)",
    )
    parser.add_argument(
        "--workers", type=int, default=WORKERS, help="how many pipeline workers (default 2)"
    )
    parser.add_argument("--parallel-batches", type=int, help="the workers' setting")
    parser.add_argument("--max-partitions-per-batch", type=int, help="the workers' setting")
    parser.add_argument("--max-batch-delay-ms", type=int, help="the workers' setting")
    parser.add_argument(
        "--compaction-interval-ms",
        type=int,
        help="the workers' setting (Parquet: compaction on; Delta: 0 merges each batch)",
    )
    parser.add_argument(
        "--worker-master", default=MASTERS["worker"], help="spark.master of each worker"
    )
    parser.add_argument(
        "--peer-master", default=MASTERS["peer"], help="spark.master of the peer's driver"
    )
    parser.add_argument(
        "--peer-kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a kafka.* option of the peer's Kafka source (repeatable), e.g. "
        "kafka.fetch.max.wait.ms=10, the one the workers' source sets",
    )
    args = parser.parse_args()
    for option in args.peer_kafka_option:
        key, sep, value = option.partition("=")
        if not sep or not key.startswith("kafka."):
            parser.error(f"--peer-kafka-option: KEY=VALUE with a kafka.* key, got {option!r}")
        PEER_KAFKA_OPTIONS[key] = value
    if args.workers < 1:
        parser.error(f"--workers: at least 1 worker, got {args.workers}")
    WORKERS = args.workers
    MASTERS.update(worker=args.worker_master, peer=args.peer_master)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not phases or set(phases) - set(PHASES):
        parser.error(f"--phases: choose from {', '.join(PHASES)}, got {args.phases!r}")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    if args.parallel_batches is not None:
        BATCHING["parallel_batches"] = args.parallel_batches
    if args.max_partitions_per_batch is not None:
        BATCHING["max_partitions_per_batch"] = args.max_partitions_per_batch
    if args.max_batch_delay_ms is not None:
        BATCHING["max_batch_delay_ms"] = args.max_batch_delay_ms
    if args.compaction_interval_ms is not None:
        BATCHING["compaction_interval_ms"] = args.compaction_interval_ms
    events = args.events or (60_000 if args.quick else 600_000)
    events -= events % PARTITIONS
    rate = 1000.0 if args.quick else 2000.0
    global LATENCY_FROM_S
    LATENCY_FROM_S = args.latency_from_s
    streamed = int(rate * (args.stream_seconds or (30 if args.quick else 60)))
    streamed -= streamed % PARTITIONS
    figures = [f"sink={args.sink}"]
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap, full_jit=True))
        print(
            f"{WORKERS} workers of {MASTERS['worker']} against one driver of "
            f"{MASTERS['peer']}; sink {args.sink}; {PARTITIONS} partitions; "
            f"worker batching {BATCHING or 'default'}"
        )
        if "throughput" in phases:
            figures.append(throughput_phase(bootstrap, events, args.sink, args.throughput_runs))
        if "latency" in phases:
            figures.append(latency_phase(bootstrap, streamed, rate, args.sink))
        if "kill" in phases:
            figures.append(kill_phase(bootstrap, streamed, rate, args.sink))
    print(" ".join(figures))


def throughput_phase(bootstrap: str, events: int, sink: str, runs: int) -> str:
    ours_runs: list[float] = []
    peer_runs: list[float] = []
    for _ in range(runs):
        ours_runs.append(ours_throughput(bootstrap, events, sink))
        peer_runs.append(streaming_throughput(bootstrap, events, sink))
        print(
            f"throughput, {events} events: ours {ours_runs[-1]:.0f}/s, Structured Streaming "
            f"{peer_runs[-1]:.0f}/s: ratio {ours_runs[-1] / peer_runs[-1]:.2f}",
            flush=True,
        )
    ours_eps, peer_eps = statistics.median(ours_runs), statistics.median(peer_runs)
    # The median of each run's ratio: a run's two sides saw the same machine load.
    ratio = statistics.median(o / p for o, p in zip(ours_runs, peer_runs, strict=True))
    if runs > 1:
        print(
            f"throughput, medians of {runs} runs: ours {ours_eps:.0f}/s, Structured "
            f"Streaming {peer_eps:.0f}/s; median ratio {ratio:.2f}",
            flush=True,
        )
    return (
        f"events={events} runs={runs} ours_eps={ours_eps:.0f} ss_eps={peer_eps:.0f} "
        f"eps_ratio={ratio:.2f}"
    )


def latency_phase(bootstrap: str, streamed: int, rate: float, sink: str) -> str:
    ours_lat, _, ours_ok, _ = ours_streaming(bootstrap, streamed, rate, sink, kill=False)
    peer_lat, _, peer_ok, _ = streaming_streaming(bootstrap, streamed, rate, sink, kill=False)
    p50, peer_p50 = statistics.median(ours_lat), statistics.median(peer_lat)
    p99, peer_p99 = pct(ours_lat, 0.99), pct(peer_lat, 0.99)
    print(
        f"latency at {rate:.0f}/s (events from {LATENCY_FROM_S:.0f} s on): ours median "
        f"{p50:.2f} s, p99 {p99:.2f} s; Structured Streaming median {peer_p50:.2f} s, "
        f"p99 {peer_p99:.2f} s; ratios {p50 / peer_p50:.2f} and {p99 / peer_p99:.2f}; "
        f"exact {ours_ok}/{peer_ok}",
        flush=True,
    )
    return (
        f"latency_from_s={LATENCY_FROM_S:.0f} ours_latency_p50_s={p50:.2f} "
        f"ss_latency_p50_s={peer_p50:.2f} latency_p50_ratio={p50 / peer_p50:.2f} "
        f"ours_latency_p99_s={p99:.2f} ss_latency_p99_s={peer_p99:.2f} "
        f"latency_p99_ratio={p99 / peer_p99:.2f} latency_exact={ours_ok and peer_ok}"
    )


def kill_phase(bootstrap: str, streamed: int, rate: float, sink: str) -> str:
    _, ours_stall, ours_ok, ours_exact = ours_streaming(bootstrap, streamed, rate, sink, kill=True)
    _, peer_stall, peer_ok, peer_exact = streaming_streaming(
        bootstrap, streamed, rate, sink, kill=True
    )
    ratio = f"{ours_exact / peer_exact:.2f}" if ours_exact is not None and peer_exact else "none"
    print(
        f"killed driver: ours output resumed after {_s(ours_stall)} (other workers never "
        f"stopped), Structured Streaming after {_s(peer_stall)} (restart from checkpoint); "
        f"exact again (every event acknowledged before the kill in the output) after "
        f"{_s(ours_exact)} against {_s(peer_exact)} (ratio {ratio}); "
        f"exact {ours_ok}/{peer_ok}",
        flush=True,
    )
    return (
        f"ours_kill_resume_s={_s(ours_stall, unit='')} ss_kill_resume_s={_s(peer_stall, unit='')} "
        f"ours_kill_exact_s={_s(ours_exact, unit='')} ss_kill_exact_s={_s(peer_exact, unit='')} "
        f"kill_exact_ratio={ratio} kill_exact={ours_ok and peer_ok}"
    )


def _s(seconds: float | None, unit: str = " s") -> str:
    return "none" if seconds is None else f"{seconds:.1f}{unit}"


if __name__ == "__main__":
    main()
