"""One election member in its own process, for the kill and freeze tests.

Prints every event as a JSON line with a wall-clock time ``t`` (seconds), so that a test can
compare the beliefs of several processes on one host. While it leads, it writes
``{"token", "identity", "seq", "t"}`` records to a topic through the election's
transactional producer, checking its leadership before each commit. With ``--zombie``, once
a check fails it still tries one write, to show that the broker rejects it.

    python -m tests.integration.election_member BOOTSTRAP GROUP IDENTITY [options]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from typing import Any

from recipes.election import LeaderElection, Leadership, NotLeaderError

from .members import FAST

_print_lock = threading.Lock()


def emit(**event: Any) -> None:
    event.setdefault("t", time.time())
    with _print_lock:
        print(json.dumps(event), flush=True)


def write_while_leading(leadership: Leadership, topic: str, zombie: bool, interval: float) -> None:
    try:
        producer = leadership.transactional_producer()
    except Exception as e:  # deposed while the producer was being made ready
        emit(event="producer_failed", token=leadership.token, error=repr(e))
        return
    emit(event="producer_ready", token=leadership.token)
    seq = 0
    while True:
        try:
            producer.begin_transaction()
            now = time.time()
            record = {"token": leadership.token, "identity": leadership.identity, "seq": seq}
            producer.send(topic, json.dumps({**record, "t": now}).encode())
            leadership.check()
            producer.commit_transaction()
            emit(event="wrote", token=leadership.token, seq=seq, checked_at=now)
            seq += 1
        except NotLeaderError as e:
            emit(event="check_failed", token=leadership.token, reason=str(e))
            if zombie:
                zombie_write(producer, topic, leadership)
            else:
                _abort(producer)
            return
        except Exception as e:
            emit(event="write_rejected", token=leadership.token, error=type(e).__name__)
            return
        if leadership.lost.wait(interval):
            # Deposed between writes; the next round's check() reports it.
            continue


def zombie_write(producer: Any, topic: str, leadership: Leadership) -> None:
    """Write as if still leader, ignoring the check: the broker must refuse it."""
    try:
        with contextlib.suppress(Exception):  # still inside the transaction the check stopped
            producer.begin_transaction()
        producer.send(topic, json.dumps({"token": leadership.token, "zombie": True}).encode())
        producer.commit_transaction()
        emit(event="zombie_write_accepted", token=leadership.token)
    except Exception as e:
        emit(event="write_rejected", token=leadership.token, error=type(e).__name__)


def _abort(producer: Any) -> None:
    with contextlib.suppress(Exception):
        producer.abort_transaction()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("identity")
    parser.add_argument("--ineligible", action="store_true")
    parser.add_argument("--priority", type=int, default=0)
    parser.add_argument("--topic", help="write records here while leading")
    parser.add_argument("--zombie", action="store_true")
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--session-timeout-ms", type=int, default=FAST["session_timeout_ms"])
    args = parser.parse_args()

    writers: list[threading.Thread] = []

    def on_elected(leadership: Leadership) -> None:
        emit(event="elected", token=leadership.token)
        if args.topic:
            w = threading.Thread(
                target=write_while_leading,
                args=(leadership, args.topic, args.zombie, args.interval),
                daemon=True,
            )
            writers.append(w)
            w.start()

    def on_deposed(leadership: Leadership) -> None:
        emit(event="deposed", token=leadership.token, reason=leadership.reason)

    def on_leader_change(info: Any) -> None:
        emit(
            event="leader",
            identity=info.identity if info else None,
            token=info.token if info else None,
        )

    settings = {**FAST, "session_timeout_ms": args.session_timeout_ms}
    election = LeaderElection(
        args.group,
        identity=args.identity,
        eligible=not args.ineligible,
        priority=args.priority,
        on_elected=on_elected,
        on_deposed=on_deposed,
        on_leader_change=on_leader_change,
        bootstrap_servers=args.bootstrap,
        **settings,
    )
    election.start()
    emit(event="started", pid_identity=args.identity)
    try:
        for line in sys.stdin:
            if line.strip() == "close":
                break
    finally:
        election.close()
        for w in writers:
            w.join(5)
        emit(event="closed")


if __name__ == "__main__":
    main()
