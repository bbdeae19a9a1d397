"""One election member in its own process, for ``election_failover.py``.

Either a ``recipes.election.LeaderElection`` member (``kafka``) or a kazoo
``Election`` contender (``kazoo``). It prints JSON lines with a wall-clock time ``t``
(``time.time()``, comparable across processes on one host):

* ``{"event": "elected"}`` the moment it becomes leader: from ``on_elected`` (ours) or the
  first line of the leadership function (kazoo); ``{"event": "deposed"}`` (ours) when it
  stops;
* ``{"event": "view", "leader": identity, "members": n}`` whenever its view of the
  election changes (ours only; kazoo contenders are counted by the benchmark itself).

It closes gracefully when it reads ``close`` on stdin: ours calls ``close()`` (LeaveGroup);
a kazoo leader returns from its leadership function, which releases the election lock,
then stops its client.

With ``FAILOVER_MEMBER_LOG=PATH`` in the environment, each member appends its log there
(wall-clock times, one line per step and per request), to see where a handoff's time goes.

    python benchmarks/_failover_member.py kafka BOOTSTRAP GROUP IDENTITY [options]
    python benchmarks/_failover_member.py kazoo HOSTS PATH IDENTITY [options]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_print_lock = threading.Lock()


def emit(**event: Any) -> None:
    event.setdefault("t", time.time())
    with _print_lock:
        print(json.dumps(event), flush=True)


def wait_for_close(closing: threading.Event) -> None:
    """Block until ``close`` arrives on stdin (or stdin ends: the benchmark went away)."""
    for line in sys.stdin:
        if line.strip() == "close":
            break
    closing.set()


def run_kafka(args: argparse.Namespace) -> None:
    from recipes.election import LeaderElection, Leadership

    def on_elected(leadership: Leadership) -> None:
        emit(event="elected", token=leadership.token)

    def on_deposed(leadership: Leadership) -> None:
        emit(event="deposed", token=leadership.token, reason=leadership.reason)

    election = LeaderElection(
        args.group,
        identity=args.identity,
        on_elected=on_elected,
        on_deposed=on_deposed,
        bootstrap_servers=args.connect,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
    )
    closing = threading.Event()
    threading.Thread(target=wait_for_close, args=(closing,), daemon=True).start()
    election.start()
    # Polled rather than taken from on_leader_change: that fires only when the leader
    # changes, and the benchmark also needs to see a new member counted by everyone.
    view: tuple[str | None, int] | None = None
    while not closing.wait(0.02):
        info = election.leader()
        now = (info.identity if info else None, len(election.members()))
        if now != view:
            view = now
            emit(event="view", leader=now[0], members=now[1])
    election.close()
    emit(event="closed")


def run_kazoo(args: argparse.Namespace) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=args.connect, timeout=args.session_timeout_ms / 1000)
    client.start(timeout=30)
    election = client.Election(args.group, args.identity)
    closing = threading.Event()

    def lead() -> None:
        emit(event="elected")
        closing.wait()

    contender = threading.Thread(target=election.run, args=(lead,), daemon=True)
    contender.start()
    wait_for_close(closing)
    # A leader's lead() returns now and run() deletes its lock node; a follower still
    # waiting to be elected withdraws.
    election.cancel()
    contender.join(10)
    client.stop()
    client.close()
    emit(event="closed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("kafka", "kazoo"))
    parser.add_argument("connect", help="Kafka bootstrap servers, or ZooKeeper hosts")
    parser.add_argument("group", help="the Kafka group, or the ZooKeeper election path")
    parser.add_argument("identity")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    args = parser.parse_args()
    trace = os.environ.get("FAILOVER_MEMBER_LOG")
    if trace:  # for finding where a handoff's time goes: one log line per step, wall clock
        import logging

        logging.basicConfig(
            filename=trace,
            level=logging.DEBUG,
            format=f"%(created).4f {args.identity} %(threadName)s %(name)s %(message)s",
        )
        logging.getLogger("kafka").setLevel(logging.WARNING)
        logging.getLogger("kafka.net.connection").setLevel(logging.DEBUG)
    if args.kind == "kafka":
        run_kafka(args)
    else:
        run_kazoo(args)


if __name__ == "__main__":
    main()
