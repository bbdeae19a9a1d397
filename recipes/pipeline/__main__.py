"""Command line of the pipeline: ``python -m recipes.pipeline demo|worker|generate``.

``demo`` runs the whole pipeline on one machine and verifies it (see
``docs/pipeline.md``); ``worker`` runs one worker (what the demo starts three
of, and what runs on each machine of a real deployment); ``generate`` feeds
the demo's events into a topic.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ._definition import Pipeline
from ._sinks import DeltaSink, ParquetSink, Sink
from ._windowed_sum import (
    DEFAULT_WINDOW_MS,
    WINDOWED_SUM_KEYS,
    WINDOWED_SUM_TOTALS,
    windowed_sum,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m recipes.pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="three workers, a kill, exact results verified")
    demo.add_argument("--bootstrap-servers", help="an existing cluster (default: start one)")
    demo.add_argument("--workers", type=int, default=3)
    demo.add_argument("--partitions", type=int, default=12)
    demo.add_argument("--events", type=int, default=60_000)
    demo.add_argument("--rate", type=float, default=2500.0, help="events per second")
    demo.add_argument("--kills", type=int, default=1, help="workers to SIGKILL mid-way")
    demo.add_argument("--window-ms", type=int, default=10_000)
    demo.add_argument("--master", default="local[1]", help="spark.master of each worker")
    demo.add_argument("--output", help="output directory (default: a temporary one)")
    demo.add_argument(
        "--sink",
        choices=("parquet", "delta"),
        default="parquet",
        help="where results go: Parquet directories, or a Delta table of final totals",
    )
    demo.add_argument(
        "--compaction-interval-ms",
        type=int,
        help="the workers' elected compactor (Parquet: copies batches into segments, off "
        "by default; Delta: merges the partials every 2000 ms by default, 0 each batch)",
    )

    worker = sub.add_parser("worker", help="run one pipeline worker")
    worker.add_argument("--bootstrap-servers", required=True)
    worker.add_argument("--group", required=True, help="the workers' consumer group")
    worker.add_argument(
        "--topic", action="append", help="an input topic of the default pipeline (repeatable)"
    )
    worker.add_argument("--output", help="the default pipeline's output directory")
    worker.add_argument(
        "--sink",
        choices=("parquet", "delta"),
        default="parquet",
        help="the default pipeline's sink: Parquet directories in OUTPUT/published, or a "
        "Delta table at OUTPUT/table (staging in OUTPUT)",
    )
    worker.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=None,
        help="how often the workers' elected compactor runs. With --sink delta (default "
        "2000): it merges the partials (OUTPUT/table_partials) into the totals; 0 merges "
        "each batch on its own. With --sink parquet (default: never): it copies published "
        "batches into compacted segments (OUTPUT/compacted), so the file count stays bounded",
    )
    worker.add_argument(
        "--pipeline",
        metavar="MODULE:FUNCTION",
        help="your pipeline instead of the default: FUNCTION() returns a Pipeline",
    )
    worker.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    worker.add_argument(
        "--name", help="the worker's name in logs and events (default: worker-HOST-PID)"
    )
    worker.add_argument("--master", default="local[1]", help="spark.master")
    worker.add_argument("--window-ms", type=int, default=DEFAULT_WINDOW_MS)
    worker.add_argument("--session-timeout-ms", type=int, default=10_000)
    worker.add_argument(
        "--group-protocol",
        choices=["classic", "consumer"],
        default="classic",
        help="Kafka's group.protocol (default classic; consumer: KIP-848, Kafka 4.0+)",
    )
    worker.add_argument("--max-batch-records", type=int, default=20_000)
    worker.add_argument("--max-batch-delay-ms", type=int, default=1000)
    worker.add_argument(
        "--parallel-batches", type=int, default=2, help="Spark jobs running at once (default 2)"
    )
    worker.add_argument(
        "--max-partitions-per-batch",
        type=int,
        default=64,
        help="partitions staged by one Spark job (default 64; 1 favours latency)",
    )
    worker.add_argument(
        "--wait-for-go", action="store_true", help="join, but process only after 'go' on stdin"
    )

    gen = sub.add_parser("generate", help="feed the demo's events into a topic")
    gen.add_argument("--bootstrap-servers", required=True)
    gen.add_argument("--topic", required=True)
    gen.add_argument("--partitions", type=int, required=True)
    gen.add_argument("--events", type=int, default=60_000)
    gen.add_argument("--rate", type=float, default=0.0, help="events per second (0: no limit)")
    gen.add_argument("--first", type=int, default=0, help="index of the first event")
    gen.add_argument("--window-ms", type=int, default=10_000)

    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "worker":
        return _worker(args)
    return _generate(args)


def _demo(args: argparse.Namespace) -> int:
    import contextlib
    from pathlib import Path

    from coordination.testing import running_kafka

    from ._demo import print_report, run_demo

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(running_kafka(args.bootstrap_servers))
        print(f"broker {bootstrap}")
        report = run_demo(
            bootstrap,
            workers=args.workers,
            partitions=args.partitions,
            events=args.events,
            rate=args.rate,
            kills=args.kills,
            window_ms=args.window_ms,
            master=args.master,
            output_dir=Path(args.output) if args.output else None,
            sink=args.sink,
            compaction_interval_ms=args.compaction_interval_ms,
        )
        print_report(report)
    return 0 if report.ok else 1


def _worker(args: argparse.Namespace) -> int:
    from coordination.errors import ConfigurationError

    from ._events import WorkerEvent
    from ._worker import PipelineWorker

    if args.name is None:
        import os
        import socket

        args.name = f"worker-{socket.gethostname()}-{os.getpid()}"  # PipelineWorker's default
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name} %(levelname)s %(name)s %(message)s",
    )
    printing = threading.Lock()

    def emit(event: WorkerEvent) -> None:
        with printing:
            print(json.dumps(event.as_dict()), flush=True)

    try:
        worker = PipelineWorker(
            args.group,
            _pipeline(args),
            name=args.name,
            master=args.master,
            spark_conf=dict(_setting(kv) for kv in args.spark_conf),
            max_batch_records=args.max_batch_records,
            max_batch_delay_ms=args.max_batch_delay_ms,
            parallel_batches=args.parallel_batches,
            max_partitions_per_batch=args.max_partitions_per_batch,
            on_event=emit,
            bootstrap_servers=args.bootstrap_servers,
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=max(100, args.session_timeout_ms // 6),
            rebalance_timeout_ms=30_000,
            group_protocol=args.group_protocol,
        )
    except ConfigurationError as e:
        print(f"python -m recipes.pipeline worker: error: {e}", file=sys.stderr)
        return 2
    stop, go = threading.Event(), threading.Event()
    if not args.wait_for_go:
        go.set()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            elif line.strip() == "close":
                break
        stop.set()  # "close", or the parent went away
        go.set()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        go.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=commands, name="commands", daemon=True).start()
    worker.start()
    try:
        go.wait()
        worker.run(stop)
    finally:
        worker.close()
    return 0


def _pipeline(args: argparse.Namespace) -> Pipeline:
    """The worker's pipeline: ``--pipeline``'s, or the default from ``--topic`` and ``--output``."""
    if args.pipeline:
        module, _, function = args.pipeline.partition(":")
        if not module or not function:
            raise SystemExit(f"--pipeline {args.pipeline!r}: expected MODULE:FUNCTION")
        pipeline = getattr(importlib.import_module(module), function)()
        if not isinstance(pipeline, Pipeline):
            raise SystemExit(f"--pipeline {args.pipeline}: returned {pipeline!r}, not a Pipeline")
        return pipeline
    if not args.topic or not args.output:
        raise SystemExit("worker: give --topic and --output, or --pipeline MODULE:FUNCTION")
    interval = args.compaction_interval_ms
    sink: Sink = ParquetSink(args.output, compaction_interval_ms=interval or None)
    if args.sink == "delta":
        sink = DeltaSink(
            str(Path(args.output) / "table"),
            staging=args.output,
            key_columns=WINDOWED_SUM_KEYS,
            add_columns=WINDOWED_SUM_TOTALS,
            compaction_interval_ms=2000 if interval is None else interval or None,
        )
    return windowed_sum(args.topic, sink, window_ms=args.window_ms)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--spark-conf {text!r}: expected KEY=VALUE")
    return key, value


def _generate(args: argparse.Namespace) -> int:
    from ._generator import produce

    tally = produce(
        args.bootstrap_servers,
        args.topic,
        partitions=args.partitions,
        events=args.events,
        rate=args.rate,
        window_ms=args.window_ms,
        first=args.first,
    )
    print(
        json.dumps(
            {
                "produced": tally.produced,
                "malformed": tally.malformed,
                "results": [
                    [key, window, count, str(total)]
                    for (key, window), (count, total) in sorted(tally.results.items())
                ],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
