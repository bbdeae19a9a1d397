"""The ``coordination`` command: a local Kafka broker, and groups seen from outside."""

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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._metrics import RebalanceRecord
    from .testing import KafkaCluster


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

    groups = commands.add_parser("groups", help="list the cluster's groups")
    _connection_arguments(groups)
    describe = commands.add_parser(
        "describe",
        help="a group's state and members, decoded (consumer, election, tasks, KIP-848 "
        "consumer groups, share groups); does not join",
    )
    describe.add_argument("group", help="the group id")
    describe.add_argument(
        "--timeline",
        nargs="?",
        const=60.0,
        type=_minutes,
        metavar="MINUTES",
        help="also show the rebalances the members recorded in the last MINUTES (default 60)",
    )
    describe.add_argument(
        "--wakeup-topic", help="the members' wakeup_topic (default coordination.wakeups)"
    )
    _connection_arguments(describe)

    reset = commands.add_parser(
        "reset-share-offsets",
        help="set where a share group (KIP-932) starts in its partitions; prints the plan "
        "unless --execute (the group must have no members)",
    )
    reset.add_argument("group", help="the share group id")
    reset.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,P...]",
        help="a topic, all its partitions or those listed (repeat for several)",
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log's start")
    to.add_argument("--to-latest", action="store_true", help="the log's end (skip everything)")
    to.add_argument("--to-offset", type=int, metavar="N", help="this offset in every partition")
    reset.add_argument("--execute", action="store_true", help="apply the plan")
    _connection_arguments(reset)

    args = parser.parse_args(argv)
    if args.command in ("groups", "describe"):
        return _inspect(args)
    if args.command == "reset-share-offsets":
        from ._share_reset import reset_share_offsets

        return reset_share_offsets(args, _connection_settings)
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
            return _serve(cluster)
    raise AssertionError(f"unknown command {args.command!r}")  # argparse allows no other


def _serve(cluster: KafkaCluster) -> int:
    """Keep ``cluster`` up until SIGTERM or Ctrl-C (0), or until one of its brokers dies (1:
    not a port that refuses behind a "ready" line; the end of its log goes to stderr, as
    the cluster's directory is deleted when the others stop)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(1.0):
            dead = [n for n in range(1, cluster.size + 1) if not cluster.is_running(n)]
            if dead:
                log_file = cluster.log_of(dead[0])
                tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""
                print(f"broker {dead[0]} exited; the end of its log:\n{tail}", file=sys.stderr)
                return 1
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
# Where the SASL password is read from when neither --command-config nor the flag gives it.
PASSWORD_VARIABLE = "COORDINATION_SASL_PLAIN_PASSWORD"
# Exit status of `describe` when the group does not exist (1: any other error).
NO_SUCH_GROUP = 3


def _connection_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--bootstrap-servers",
        help="default: bootstrap.servers of --command-config, else $KAFKA_BOOTSTRAP_SERVERS, "
        "else localhost:9092",
    )
    command.add_argument(
        "--command-config",
        metavar="FILE",
        help="a Kafka client properties file, as Kafka's own tools take (security.protocol, "
        "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...): keeps the password "
        "off the command line",
    )
    command.add_argument("--json", action="store_true", help="print JSON")
    for name in _CONNECTION_FLAGS:
        command.add_argument(
            f"--{name.replace('_', '-')}",
            help=(
                f"deprecated: visible to every user of the machine (ps) and kept in shell "
                f"history; use --command-config or ${PASSWORD_VARIABLE}"
                if name == "sasl_plain_password"
                else "as kafka-python's setting of that name (overrides --command-config)"
            ),
        )


def _connection_settings(args: argparse.Namespace) -> dict[str, object]:
    """The connection settings of the flags, the --command-config file and the environment.

    Raises:
        ConfigurationError: the file cannot be read or holds a key or value that cannot be used.
    """
    from ._properties import client_settings, read_properties

    settings: dict[str, object] = {}
    if args.command_config is not None:
        settings.update(client_settings(read_properties(args.command_config)))
    if args.sasl_plain_password is not None:
        print(
            "warning: --sasl-plain-password is deprecated and will be removed: every user of "
            "this machine can read it (ps, /proc) and your shell history keeps it; put "
            f"sasl.jaas.config in a --command-config file or set ${PASSWORD_VARIABLE}",
            file=sys.stderr,
        )
    for name in _CONNECTION_FLAGS:
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if "sasl_plain_password" not in settings and os.environ.get(PASSWORD_VARIABLE):
        settings["sasl_plain_password"] = os.environ[PASSWORD_VARIABLE]
    if args.bootstrap_servers is not None:
        settings["bootstrap_servers"] = args.bootstrap_servers
    settings.setdefault(
        "bootstrap_servers", os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
    )
    return settings


def _inspect(args: argparse.Namespace) -> int:
    import json

    from . import describe_group, list_groups, rebalance_timeline
    from .errors import CoordinationError

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        settings = _connection_settings(args)
        if args.command == "groups":
            listing = list_groups(**settings)
            if args.json:
                print(json.dumps([vars_of(g) for g in listing], indent=2))
            else:
                print(f"{'GROUP':40s} {'PROTOCOL TYPE':14s} {'STATE':20s} TYPE")
                for g in listing:
                    print(
                        _printable(
                            f"{g.group_id:40s} {g.protocol_type:14s} {g.state:20s} {g.group_type}"
                        )
                    )
            return 0
        group = describe_group(args.group, **settings)
        if not group.exists:
            print(
                f"error: group {_printable(args.group)!r} does not exist (the coordinator "
                "describes it as Dead, with no members and no protocol type, and it is no "
                "KIP-848 consumer group nor share group either)",
                file=sys.stderr,
            )
            return NO_SUCH_GROUP
        timeline = None
        if args.timeline is not None:
            timeline = rebalance_timeline(
                args.group,
                since_s=args.timeline * 60,
                wakeup_topic=args.wakeup_topic,
                **settings,
            )
    except (CoordinationError, LookupError) as e:
        print(f"error: {_printable(str(e))}", file=sys.stderr)
        return 1
    if args.json:
        out = group.to_json()
        if timeline is not None:
            out["timeline"] = [dataclasses.asdict(r) for r in timeline]
        print(json.dumps(out, indent=2))
        return 0
    lines = [
        f"group {group.group_id}: {group.state}, protocol type {group.protocol_type!r}, "
        f"protocol {group.protocol!r}, {len(group.members)} member(s)"
    ]
    lines += [f"  {key}: {value}" for key, value in group.summary.items()]
    for member in group.members:
        static = f" (static {member.group_instance_id})" if member.group_instance_id else ""
        lines.append(f"- {member.member_id}{static} {member.client_id}@{member.client_host}")
        if member.decoded is None:
            lines.append(f"    metadata {member.metadata.hex()}")
            lines.append(f"    assignment {member.assignment.hex()}")
        else:
            lines += [f"    {key}: {value}" for key, value in member.decoded.items()]
    if timeline is not None:
        lines.append(f"rebalances recorded in the last {args.timeline:g} min: {len(timeline)}")
        lines += [timeline_line(r) for r in timeline]
    for line in lines:
        print(_printable(line))
    return 0


def timeline_line(r: RebalanceRecord) -> str:
    """One rebalance of the timeline as `describe --timeline` shows it."""
    when = time.strftime("%H:%M:%S", time.localtime(r.started_at))
    role = " leader" if r.is_leader else ""
    moved = f"; {r.moved}" if r.moved else ""
    failed = f", {r.failed_attempts} failed attempt(s)" if r.failed_attempts else ""
    return (
        f"  {when} gen {r.generation} {r.member_id}{role}: {r.duration_s * 1000:.0f} ms"
        f"{failed} ({r.reason}){moved}"
    )


def _printable(text: str) -> str:
    """``text`` with control characters escaped: what members and other writers put in a
    group's state or the timeline must not drive the operator's terminal (escape sequences)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _minutes(text: str) -> float:
    try:
        minutes = float(text)
    except ValueError:
        minutes = -1.0
    if not 0 <= minutes <= 10**9:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes (0 or more)")
    return minutes


def vars_of(listing: object) -> dict[str, object]:
    return {k: getattr(listing, k) for k in ("group_id", "protocol_type", "state", "group_type")}


if __name__ == "__main__":
    sys.exit(main())
