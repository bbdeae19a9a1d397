"""Command line of the pipeline: ``python -m recipes.pipeline demo|worker|generate``.

``demo`` runs the whole pipeline on one machine and verifies it (see
``docs/pipeline.md``); ``worker`` runs one worker (what the demo starts three
of, and what runs on each machine of a real deployment); ``generate`` feeds
the demo's events into a topic.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from ._spark import DEFAULT_WINDOW_MS


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

    worker = sub.add_parser("worker", help="run one pipeline worker")
    worker.add_argument("--bootstrap-servers", required=True)
    worker.add_argument("--group", required=True, help="the workers' consumer group")
    worker.add_argument("--topic", required=True, help="the input topic")
    worker.add_argument("--output", required=True, help="the output directory")
    worker.add_argument("--name", default="worker")
    worker.add_argument("--master", default="local[1]", help="spark.master")
    worker.add_argument("--window-ms", type=int, default=DEFAULT_WINDOW_MS)
    worker.add_argument("--session-timeout-ms", type=int, default=10_000)
    worker.add_argument("--max-batch-records", type=int, default=20_000)
    worker.add_argument("--max-batch-delay-ms", type=int, default=1000)
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
        )
        print_report(report)
    return 0 if report.ok else 1


def _worker(args: argparse.Namespace) -> int:
    from ._worker import PipelineWorker

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name} %(levelname)s %(name)s %(message)s",
    )
    printing = threading.Lock()

    def emit(event: Any) -> None:
        with printing:
            print(json.dumps(event), flush=True)

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
    worker = PipelineWorker(
        args.group,
        topic=args.topic,
        output=args.output,
        name=args.name,
        master=args.master,
        window_ms=args.window_ms,
        max_batch_records=args.max_batch_records,
        max_batch_delay_ms=args.max_batch_delay_ms,
        on_event=emit,
        bootstrap_servers=args.bootstrap_servers,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 6),
        rebalance_timeout_ms=30_000,
    )
    worker.start()
    try:
        go.wait()
        worker.run(stop)
    finally:
        worker.close()
    return 0


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
