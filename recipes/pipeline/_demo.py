"""The pipeline demo: three Spark workers, events fed, one worker killed, exact results checked.

``python -m recipes.pipeline demo`` (and ``bash scripts/demo.sh``) runs
:func:`run_demo` against a local broker it starts, or against
``--bootstrap-servers``. The integration test runs the same function.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ._cluster import Kill, Timeline, WorkerProcess
from ._events import BatchAbandoned, BatchPublished, PartitionRecovered, WorkerStarted
from ._generator import EventSpec, Tally, produce
from ._output import PipelineOutput, PipelineOutputError, PublishedRangeError
from ._sinks import DeltaSink
from ._windowed_sum import WINDOWED_SUM_KEYS, WINDOWED_SUM_TOTALS

__all__ = ["DemoReport", "run_demo"]


@dataclass
class DemoReport:
    """The outcome of one demo run.

    Attributes:
        ok: The results equal what was fed, and the published ranges cover every
            partition's offsets exactly once.
        tally: What the generator produced (and the broker acknowledged).
        results: What the pipeline published, ``{(key, window_start_ms): (count, sum)}``.
        mismatches: Keys and windows whose results differ, with both values.
        timeline: The workers' merged events.
        kills: The workers killed and when their partitions ran again.
        seconds: Wall-clock duration of the run.
        problems: Anything else that went wrong (coverage, timeouts).
    """

    ok: bool
    tally: Tally
    results: dict[tuple[str, int], tuple[int, Decimal]]
    mismatches: list[str]
    timeline: Timeline
    kills: list[Kill]
    seconds: float
    problems: list[str] = field(default_factory=list)


def run_demo(
    bootstrap_servers: str,
    *,
    workers: int = 3,
    partitions: int = 12,
    events: int = 60_000,
    rate: float = 2500.0,
    kills: int = 1,
    window_ms: int = 10_000,
    output_dir: Path | None = None,
    master: str = "local[1]",
    session_timeout_ms: int = 6000,
    sink: str = "parquet",
    compaction_interval_ms: int | None = None,
    spark_conf: Mapping[str, str] | None = None,
    on_progress: Callable[[int], None] | None = None,
    say: Callable[[str], None] = print,
) -> DemoReport:
    """Run the demo and verify it; see the module docstring.

    Args:
        bootstrap_servers: The Kafka cluster.
        workers: Worker processes to start.
        partitions: Partitions of the input topic.
        events: Events to feed.
        rate: Events per second.
        kills: Workers to SIGKILL while events are fed (at evenly spaced points;
            at least one worker survives).
        window_ms: The tumbling window.
        output_dir: Where results go; default: a new temporary directory.
        master: ``spark.master`` of each worker.
        sink: ``delta``: a Delta table of final totals (``<output>/table``);
            ``parquet``: published Parquet directories of each batch's partial totals.
        compaction_interval_ms: The workers' ``--compaction-interval-ms`` (None: the
            sink's default: 2000 ms for Delta, no compaction for Parquet).
        spark_conf: Further Spark settings of each worker.
        on_progress: Called with the number of events fed so far, as they are fed
            (a test injects faults from it).
        session_timeout_ms: The workers' session timeout: how soon a killed
            worker's partitions move.
        say: Where progress lines go.

    Returns:
        The report; ``ok`` says whether the results were exact.

    Raises:
        TimeoutError: The workers did not start, or the pipeline did not catch up in time.
        GeneratorError: An event was not acknowledged.
    """
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    # kafka-python warns about its own event loop timing under load; not the demo's news.
    logging.getLogger("kafka").setLevel(logging.ERROR)
    kills = max(0, min(kills, workers - 1))
    t0 = time.time()
    run_id = uuid.uuid4().hex[:8]
    topic, group_id = f"pipeline-demo-{run_id}", f"pipeline-demo-{run_id}"
    root = output_dir or Path(tempfile.mkdtemp(prefix="pipeline-demo-"))
    output = PipelineOutput(root / "output")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    say(f"input topic {topic}: {partitions} partitions; output {output.root}")

    procs = [
        WorkerProcess(
            f"w{n + 1}",
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            topic=topic,
            output=output.root,
            log_dir=root / "logs",
            window_ms=window_ms,
            sink=sink,
            compaction_interval_ms=compaction_interval_ms,
            spark_conf=spark_conf,
            master=master,
            session_timeout_ms=session_timeout_ms,
        )
        for n in range(workers)
    ]
    try:
        say(f"starting {workers} workers (a Spark JVM each, {master}); logs in {root / 'logs'}")
        # On a fresh machine the first worker downloads Spark's packages (about 100 MB) while
        # the others wait for it (see spark_session): minutes on a slow link or busy machine.
        for w in procs:
            w.wait_for(WorkerStarted, timeout=900)
        # Settled: every worker has a share and together they own every partition
        # once (the first to join briefly owns everything).
        _wait(
            lambda: (
                all(w.owned() for w in procs)
                and sum(len(w.owned()) for w in procs) == partitions
                and set().union(*(w.owned() for w in procs)) == set(range(partitions))
            ),
            timeout=120,
            what="every partition assigned",
        )
        say(f"workers up after {time.time() - t0:.1f} s; feeding {events} events at {rate:.0f}/s")
        for w in procs:
            say(f"  {w.name} (pid {w.pid}) owns {sorted(w.owned())}")

        kill_points = [events * (k + 1) // (kills + 1) for k in range(kills)]
        produced = [0]
        progress = threading.Condition()

        def fed(n: int) -> None:
            with progress:
                produced[0] = n
                progress.notify_all()
            if on_progress is not None:
                on_progress(n)

        tallies: list[Tally] = []
        failures: list[BaseException] = []

        def feed() -> None:
            try:
                tallies.append(
                    produce(
                        bootstrap_servers,
                        topic,
                        partitions=partitions,
                        events=events,
                        rate=rate,
                        window_ms=window_ms,
                        spec=EventSpec(),
                        on_progress=fed,
                    )
                )
            except BaseException as e:
                failures.append(e)
                fed(events)

        feeder = threading.Thread(target=feed, name="generator", daemon=True)
        feeder.start()
        killed: list[tuple[str, list[int]]] = []
        for point in kill_points:
            with progress:
                progress.wait_for(lambda p=point: produced[0] >= p)  # type: ignore[misc]
            alive = [w for w in procs if w.alive]
            victim = max(alive, key=lambda w: (len(w.owned()), len(w.of(BatchPublished))))
            owned = sorted(victim.owned())
            victim.kill()
            killed.append((victim.name, owned))
            say(
                f"  +{time.time() - t0:5.1f} s  SIGKILL {victim.name} (pid {victim.pid}), "
                f"which owned {owned}, after {produced[0]} events"
            )
        feeder.join()
        if failures:
            raise failures[0]
        tally = tallies[0]
        say(f"  +{time.time() - t0:5.1f} s  fed {tally.produced} events; waiting for the pipeline")

        probe = KafkaConsumer(bootstrap_servers=bootstrap_servers)
        try:
            kparts = [KafkaTopicPartition(topic, p) for p in range(partitions)]
            ends = {(topic, tp.partition): (0, o) for tp, o in probe.end_offsets(kparts).items()}
        finally:
            probe.close()
        problems: list[str] = []

        def caught_up() -> bool:
            try:
                output.check_published(ends)
            except PublishedRangeError:
                return False
            return True

        try:
            _wait(caught_up, timeout=180, what="every offset published")
        except TimeoutError as e:
            problems.append(str(e))
        say(f"  +{time.time() - t0:5.1f} s  caught up; closing the workers")
    finally:
        for w in procs:
            w.close()

    timeline = Timeline(procs, t0)
    with open(root / "events.jsonl", "w") as f:
        for event in timeline.events:
            f.write(json.dumps(event.as_dict()) + "\n")
    try:
        output.check_published(ends)
    except PublishedRangeError as e:
        problems.extend(e.problems)
    results = _read(output, sink, root / "logs" / "verify.log")
    mismatches = [
        f"{key} @ {window}: published {results.get((key, window))}, "
        f"fed {tally.results.get((key, window))}"
        for key, window in sorted(set(results) | set(tally.results))
        if results.get((key, window)) != tally.results.get((key, window))
    ]
    return DemoReport(
        ok=not mismatches and not problems,
        tally=tally,
        results=results,
        mismatches=mismatches,
        timeline=timeline,
        kills=[timeline.kill_report(name, owned) for name, owned in killed],
        seconds=time.time() - t0,
        problems=problems,
    )


def print_report(report: DemoReport, say: Callable[[str], None] = print) -> None:
    """Print the verification, the ownership timeline and the rebalance durations."""
    t = report.timeline
    say("")
    say("Ownership timeline (seconds since start):")
    for line in t.format_ownership():
        say(line)
    say("")
    say("Rebalances (per generation: when, members, longest JoinGroup-to-assignment):")
    for generation, at, members, ms in t.rebalances():
        say(f"  generation {generation:>3} at {at:6.1f} s: {members} member(s), {ms} ms")
    for kill in report.kills:
        resumed = [s for s in kill.resumed_after_s.values() if s is not None]
        say(
            f"Kill of {kill.worker} at {kill.at - t.t0:.1f} s: noticed by the group after "
            f"{_s(kill.detected_after_s)}; its {len(kill.partitions)} partitions processed "
            f"again after {_s(min(resumed) if resumed else None)} to "
            f"{_s(max(resumed) if resumed else None)}"
            + (
                ""
                if len(resumed) == len(kill.partitions)
                else f" ({len(kill.partitions) - len(resumed)} got no new data)"
            )
        )
    batches = t.of(BatchPublished)
    abandoned = t.of(BatchAbandoned)
    recovered = [e for e in t.of(PartitionRecovered) if e.published or e.orphans]
    say(
        f"Batches: {len(batches)} published, {len(abandoned)} abandoned; "
        f"{len(recovered)} takeovers found an unpublished commit or orphans"
    )
    say("")
    tally = report.tally
    pub_count = sum(c for c, _ in report.results.values())
    pub_sum = sum((s for _, s in report.results.values()), Decimal(0))
    fed_sum = sum((s for _, s in tally.results.values()), Decimal(0))
    say(
        f"Fed:       {tally.produced} events ({tally.malformed} malformed), "
        f"{len(tally.results)} key-windows, count {tally.produced - tally.malformed}, "
        f"sum {fed_sum}"
    )
    say(f"Published: {len(report.results)} key-windows, count {pub_count}, sum {pub_sum}")
    per_key: dict[str, int] = {}
    for (key, _), (count, _) in report.results.items():
        per_key[key] = per_key.get(key, 0) + count
    say("Counts per key: " + ", ".join(f"{k}={c}" for k, c in sorted(per_key.items())))
    for line in report.mismatches[:20]:
        say(f"  MISMATCH {line}")
    for line in report.problems:
        say(f"  PROBLEM {line}")
    verdict = "EXACT: every key and window matches what was fed" if report.ok else "FAILED"
    say(f"{verdict} ({report.seconds:.1f} s)")


def _read(
    output: PipelineOutput, sink: str, log: Path
) -> dict[tuple[str, int], tuple[int, Decimal]]:
    from ._spark import read_results, spark_session

    # The JVM writes its start-up chatter to file descriptor 2 itself: point it at a log.
    saved = os.dup(2)
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 2)
        spark = spark_session("local[1]", app_name="coordination-pipeline-verify")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    try:
        if sink == "parquet":
            return read_results(spark, output)
        # The sink's read: the totals and the partials its compactor has not merged yet.
        delta_sink = DeltaSink(
            str(output.root / "table"),
            staging=output.root,
            key_columns=WINDOWED_SUM_KEYS,
            add_columns=WINDOWED_SUM_TOTALS,
        )
        rows = delta_sink.read(spark).collect()
        results = {
            (r["key"], r["window_start_ms"]): (r["event_count"], r["value_sum"]) for r in rows
        }
        if len(results) != len(rows):
            raise PipelineOutputError("the Delta table holds a key and window twice")
        return results
    finally:
        spark.stop()


def _wait(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"
