"""The ``coordination`` command: a local Kafka broker, the demo, and groups seen from outside."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time


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

    groups = commands.add_parser("groups", help="list the cluster's groups")
    _connection_arguments(groups)
    describe = commands.add_parser(
        "describe",
        help="a group's state and members, decoded (consumer, election, tasks); does not join",
    )
    describe.add_argument("group", help="the group id")
    describe.add_argument(
        "--timeline",
        nargs="?",
        const=60.0,
        type=float,
        metavar="MINUTES",
        help="also show the rebalances the members recorded in the last MINUTES (default 60)",
    )
    describe.add_argument(
        "--wakeup-topic", help="the members' wakeup_topic (default coordination.wakeups)"
    )
    _connection_arguments(describe)

    args = parser.parse_args(argv)
    if args.command in ("groups", "describe"):
        return _inspect(args)
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


# kafka-python's connection settings the inspection commands take as --flags.
_CONNECTION_FLAGS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)


def _connection_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
        help="default: $KAFKA_BOOTSTRAP_SERVERS, else localhost:9092",
    )
    command.add_argument("--json", action="store_true", help="print JSON")
    for name in _CONNECTION_FLAGS:
        command.add_argument(
            f"--{name.replace('_', '-')}", help="as kafka-python's setting of that name"
        )


def _inspect(args: argparse.Namespace) -> int:
    import json

    from . import describe_group, list_groups, rebalance_timeline
    from .errors import CoordinationError

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    settings = {
        name: getattr(args, name)
        for name in ("bootstrap_servers", *_CONNECTION_FLAGS)
        if getattr(args, name) is not None
    }
    try:
        if args.command == "groups":
            listing = list_groups(**settings)
            if args.json:
                print(json.dumps([vars_of(g) for g in listing], indent=2))
            else:
                print(f"{'GROUP':40s} {'PROTOCOL TYPE':14s} {'STATE':20s} TYPE")
                for g in listing:
                    print(f"{g.group_id:40s} {g.protocol_type:14s} {g.state:20s} {g.group_type}")
            return 0
        group = describe_group(args.group, **settings)
        timeline = None
        if args.timeline is not None:
            timeline = rebalance_timeline(
                args.group,
                since_s=args.timeline * 60,
                wakeup_topic=args.wakeup_topic,
                **settings,
            )
    except (CoordinationError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        out = group.to_json()
        if timeline is not None:
            out["timeline"] = [dataclasses.asdict(r) for r in timeline]
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"group {group.group_id}: {group.state}, protocol type {group.protocol_type!r}, "
        f"protocol {group.protocol!r}, {len(group.members)} member(s)"
    )
    for key, value in group.summary.items():
        print(f"  {key}: {value}")
    for member in group.members:
        static = f" (static {member.group_instance_id})" if member.group_instance_id else ""
        print(f"- {member.member_id}{static} {member.client_id}@{member.client_host}")
        if member.decoded is None:
            print(f"    metadata {member.metadata.hex()}")
            print(f"    assignment {member.assignment.hex()}")
        else:
            for key, value in member.decoded.items():
                print(f"    {key}: {value}")
    if timeline is not None:
        print(f"rebalances recorded in the last {args.timeline:g} min: {len(timeline)}")
        for r in timeline:
            when = time.strftime("%H:%M:%S", time.localtime(r.started_at))
            role = " leader" if r.is_leader else ""
            moved = f"; {r.moved}" if r.moved else ""
            failed = f", {r.failed_attempts} failed attempt(s)" if r.failed_attempts else ""
            print(
                f"  {when} gen {r.generation} {r.member_id}{role}: {r.duration_s * 1000:.0f} ms"
                f"{failed} ({r.reason}){moved}"
            )
    return 0


def vars_of(listing: object) -> dict[str, object]:
    return {k: getattr(listing, k) for k in ("group_id", "protocol_type", "state", "group_type")}


if __name__ == "__main__":
    sys.exit(main())
