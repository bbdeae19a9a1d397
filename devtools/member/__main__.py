"""``python -m devtools.member``: the command line (see the package's docstring)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from devtools.orphans import exit_when_orphaned

from ._consumers import run_consumer, run_consumer_async
from ._election import run_election, run_kazoo_election
from ._io import CLOCKS, Output, Stopping
from ._listing import run_listing
from ._queues import run_share
from ._shares import run_shares
from ._tasks import run_tasks

_RUN: Final[dict[str, Callable[[argparse.Namespace, Output, Stopping], None]]] = {
    "listing": run_listing,
    "election": run_election,
    "tasks": run_tasks,
    "consumer": run_consumer,
    "consumer-async": run_consumer_async,
    "kazoo-election": run_kazoo_election,
    "shares": run_shares,
    "share": run_share,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devtools.member",
        description="One group member in a process of its own, reporting JSON lines.",
    )
    p.add_argument("--recipe", required=True, choices=list(_RUN))
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (ZooKeeper hosts)")
    p.add_argument("--group", help="the group id (the ZooKeeper election path); not for shares")
    p.add_argument("--name", help="election identity; task worker id (unless static)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="what t is read from")
    p.add_argument("--no-stdin", action="store_true", help="stop on SIGTERM/SIGINT only")
    p.add_argument("--log", metavar="PATH", help="append a debug log there")
    g = p.add_argument_group("group settings (passed through when given)")
    g.add_argument("--session-timeout-ms", type=int)
    g.add_argument("--heartbeat-interval-ms", type=int)
    g.add_argument("--rebalance-timeout-ms", "--max-poll-interval-ms", type=int)
    g.add_argument("--retry-backoff-ms", type=int)
    g.add_argument("--group-instance-id")
    g.add_argument("--client-id")
    g.add_argument("--views", action="store_true", help="election, tasks: report view changes")
    e = p.add_argument_group("election")
    e.add_argument("--ineligible", action="store_true")
    e.add_argument("--priority", type=int, default=0)
    e.add_argument("--topic", help="write records here while leading (shares: of this topic)")
    e.add_argument("--interval", type=float, default=0.1, help="seconds between writes")
    e.add_argument("--on-write-error", choices=("stop", "zombie", "retry"), default="stop")
    t = p.add_argument_group("tasks (the task set: --tasks, --task-count or --task-topic)")
    t.add_argument("--tasks", help="a JSON object: task id -> weight")
    t.add_argument("--task-count", type=int, help="tasks task-00, task-01, ... of weight 1")
    t.add_argument("--task-topic", help="read the task set from this compacted topic")
    t.add_argument("--tick", type=float, default=0.1, help="seconds between units of work")
    t.add_argument("--stop-timeout-ms", type=int)
    t.add_argument("--max-delay-ms", type=int)
    s = p.add_argument_group("shares")
    s.add_argument("--partitions", type=int, help="how many partitions the members share")
    c = p.add_argument_group("consumer, consumer-async")
    c.add_argument("--topics", default="")
    c.add_argument("--assignor", default="cooperative-sticky", help="a preference list")
    c.add_argument(
        "--group-protocol",
        choices=("classic", "consumer"),
        default="classic",
        help="consumer: KIP-848 (the broker assigns, with its uniform assignor)",
    )
    c.add_argument(
        "--fetcher",
        choices=("default", "lean", "kafka-python"),
        default="default",
        help="Consumer(fetcher=...): default, the library's (lean with the consumer protocol)",
    )
    c.add_argument("--poll-ms", type=int, default=100)
    c.add_argument("--max-poll-records", type=int, default=500)
    q = p.add_argument_group("share (also --topics, --poll-ms, --max-poll-records)")
    q.add_argument("--release-every", type=int, default=0, help="release offset %% N == 1 once")
    q.add_argument("--reject-every", type=int, default=0, help="reject offset %% N == N-1")
    q.add_argument("--bounce-every", type=int, default=0, help="release offset %% N == 2 always")
    q.add_argument("--stall-chance", type=float, default=0.0, help="stall before acknowledging")
    q.add_argument("--fetch-ahead", action="store_true", help="ShareConsumer(fetch_ahead=True)")
    q.add_argument("--stall-ms", type=int, default=0, help="how long a stall lasts")
    return p


def _log_to(path: str, name: str) -> None:
    logging.basicConfig(
        filename=path,
        level=logging.DEBUG,
        format=f"%(created).4f {name} %(threadName)s %(name)s %(message)s",
    )
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("kafka.net.connection").setLevel(logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if not args.group and args.recipe != "shares":
        cli.error(f"--recipe {args.recipe} needs --group")
    if args.log:
        _log_to(args.log, args.name or f"pid{os.getpid()}")
    exit_when_orphaned()
    stopping = Stopping()
    stopping.listen(stdin=not args.no_stdin)
    _RUN[args.recipe](args, Output(CLOCKS[args.clock]), stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
