"""One worker process of ``join_latency.py``'s ``ours-procs``: hosts some of a group's
members, as production runs members in processes of their own.

Commands on stdin, one per line; answers on stdout:

* ``start GROUP BOOTSTRAP INDEX...``: start members with these indices; answers ``started``.
* ``join GROUP BOOTSTRAP INDEX``: answers ``t0 <perf_counter>``, then starts that member.
* ``stop``: closes every member (in parallel); answers ``stopped``.

Each member prints ``assigned INDEX GENERATION <perf_counter>`` from ``on_join_complete``.
With ``JOIN_WORKER_LOG=PATH`` in the environment, each worker appends its members' logs
there (wall-clock times, one line per request), to see where a rebalance's time goes.
``time.perf_counter`` is the system's monotonic clock on Linux, the same in every process.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from join_latency import (
    CLOSE_TIMEOUT_S,
    HEARTBEAT_INTERVAL_MS,
    OURS_CLIENT_ID,
    REBALANCE_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    RangeCoordinator,
)

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Reporter:
    """What RangeCoordinator reports to: a line on stdout."""

    def record(self, member: int, generation: int, at: float) -> None:
        say(f"assigned {member} {generation} {at!r}")


def main() -> None:
    trace = os.environ.get("JOIN_WORKER_LOG")
    if trace:  # for finding where a rebalance's time goes: one log line per request, wall clock
        logging.basicConfig(
            filename=trace,
            level=logging.DEBUG,
            format=f"%(created).4f w{os.getpid()} %(threadName)s %(name)s %(message)s",
        )
    else:
        logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    members: list[RangeCoordinator] = []

    def start(group: str, bootstrap: str, index: int) -> None:
        member = RangeCoordinator(
            group,
            index,
            Reporter(),  # type: ignore[arg-type]
            bootstrap_servers=bootstrap,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            client_id=OURS_CLIENT_ID,
        )
        members.append(member)
        member.start()

    for line in sys.stdin:
        command, *words = line.split()
        if command == "start":
            group, bootstrap, *indices = words
            for index in indices:
                start(group, bootstrap, int(index))
            say("started")
        elif command == "join":
            group, bootstrap, index = words
            say(f"t0 {time.perf_counter()!r}")
            logging.getLogger("join_worker").debug("t0 member %s joins", index)
            start(group, bootstrap, int(index))
        elif command == "stop":
            closing = [
                threading.Thread(target=m.close, args=(CLOSE_TIMEOUT_S,), daemon=True)
                for m in members
            ]
            for t in closing:
                t.start()
            for t in closing:
                t.join(CLOSE_TIMEOUT_S + 5)
            members.clear()
            say("stopped")


if __name__ == "__main__":
    main()
