"""The ``coordination`` command: start a local Kafka broker, or run the demo."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coordination", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser(
        "broker", help="start a local Apache Kafka (KRaft) broker from Maven Central jars"
    )
    broker.add_argument("--version", default=None, help="Kafka version (default: newest 4.x)")
    broker.add_argument("--brokers", type=int, default=1, help="how many brokers (default 1)")
    broker.add_argument(
        "--port",
        type=int,
        default=9092,
        help="port of the first broker (default 9092; the next ones follow)",
    )

    demo = commands.add_parser("demo", help="a few members join a group, one leaves")
    demo.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="an existing Kafka (default: start a local broker)",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="log what the engine does")

    args = parser.parse_args(argv)
    from .testing import NEWEST_KAFKA, KafkaCluster

    if args.command == "broker":
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        ports = [args.port + i for i in range(args.brokers)]
        cluster = KafkaCluster(args.brokers, version=args.version or NEWEST_KAFKA, ports=ports)
        print(
            f"starting Kafka {cluster.version} ({args.brokers} broker(s)); the first run "
            "downloads its jars with mvn...",
            flush=True,
        )
        with cluster:
            print(
                f"ready: bootstrap_servers={cluster.bootstrap_servers}  (Ctrl-C stops it)",
                flush=True,
            )
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        return 0

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    logging.getLogger("kafka").setLevel(logging.ERROR)
    from ._demo import run

    if args.bootstrap_servers:
        run(args.bootstrap_servers)
    else:
        print("starting a local Kafka broker...", flush=True)
        with KafkaCluster(1) as cluster:
            run(cluster.bootstrap_servers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
