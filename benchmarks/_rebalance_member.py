"""A process hosting members of a rebalance_cost.py group, driven over stdin/stdout.

benchmarks/rebalance_cost.py runs our consumers in processes of their own, as a deployment
does (one process per consumer, or a few packed together), so that N poll loops do not
share one GIL; this is the program of such a process, the counterpart of
benchmarks/java/RebalanceCost.java.

Usage: python benchmarks/_rebalance_member.py BOOTSTRAP GROUP TOPIC PROTOCOL [LOG_FILE]

Commands on stdin, one per line:
  add INDEX      member INDEX starts   -> {"added":INDEX,"t0":MS}, read just before its
                                          Consumer is built
  leave INDEX    member INDEX stops polling and closes
                                       -> {"left":INDEX,"t0":MS}, read just before close()
  stop           every member closes   -> {"stopped":true}, then the process exits
The process says {"ready":true} once its imports are done, and streams its members'
records as they happen, the same record OursMember kept in the benchmark's own process:
  {"changed":[MS,INDEX,KIND,[P,...]]}     KIND: assigned | revoked | lost
  {"consumed":[MS,INDEX,[[P,TS],...]]}    each poll's newest record timestamp per partition
  {"error":"..."}                         a member failed
MS are epoch milliseconds (time.time(), comparable across processes and with the JVM's);
TS are the records' own timestamps.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.partitioning import (
    Consumer,
    CooperativeStickyAssignor,
    RebalanceListener,
    TopicPartition,
)

SESSION_TIMEOUT_MS = 6_000  # the test broker's group.consumer.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 500  # the test broker's group.consumer.heartbeat.interval.ms
REBALANCE_TIMEOUT_MS = 30_000
POLL_TIMEOUT_MS = 100
CLOSE_TIMEOUT_S = 60.0


def now_ms() -> float:
    """Epoch milliseconds: the records' timestamps are on this clock too."""
    return time.time() * 1000


def protocol_settings(protocol: str) -> dict[str, Any]:
    """Our Consumer's group settings for ``protocol``: "consumer" (the consumer protocol,
    fetching with kafka-python's fetcher) or "classic", or "lean" (the consumer protocol with
    the lean fetcher, its default)."""
    # With the consumer protocol the broker's interval rules; ours is set alike anyway,
    # so that the session check of the settings sees the same numbers.
    common = {
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
    }
    if protocol in ("consumer", "lean"):
        lean = {"fetcher": "lean" if protocol == "lean" else "kafka-python"}
        return {
            **common,
            "group_protocol": "consumer",
            "group_remote_assignor": "uniform",
            **lean,
        }
    return {**common, "assignors": [CooperativeStickyAssignor()]}


Emit = Callable[[dict[str, Any]], None]


class _Recorder(RebalanceListener):
    def __init__(self, index: int, emit: Emit) -> None:
        self._index = index
        self._emit = emit

    def _changed(self, kind: str, partitions: frozenset[TopicPartition]) -> None:
        t = now_ms()
        numbers = sorted(tp.partition for tp in partitions)
        self._emit({"changed": [t, self._index, kind, numbers]})

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._changed("assigned", partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._changed("revoked", partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._changed("lost", partitions)


class Member:
    """One Consumer and its poll thread, which reports what each poll returned."""

    def __init__(
        self,
        index: int,
        emit: Emit,
        group_id: str,
        topic: str,
        bootstrap_servers: str,
        protocol: str,
    ) -> None:
        self.index = index
        self._emit = emit
        self._settings: dict[str, Any] = {
            "topics": [topic],
            "bootstrap_servers": bootstrap_servers,
            "auto_offset_reset": "latest",
            **protocol_settings(protocol),
        }
        self._group_id = group_id
        self._stopping = threading.Event()
        self._leaving = False
        self.thread = threading.Thread(target=self._run, name=f"member-{index}", daemon=True)

    def leave(self) -> None:
        """Stop polling and close; the poll thread says when close() was called."""
        self._leaving = True
        self._stopping.set()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        consumer: Consumer | None = None
        try:
            # Built here, as the Java driver does on its member thread: the join's time
            # includes building the client for every implementation.
            consumer = Consumer(
                self._group_id, listener=_Recorder(self.index, self._emit), **self._settings
            )
            consumer.start()
            while not self._stopping.is_set():
                batches = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                if batches:
                    t = now_ms()
                    newest = [
                        [tp.partition, max(r.timestamp for r in records)]
                        for tp, records in batches.items()
                    ]
                    self._emit({"consumed": [t, self.index, newest]})
        except Exception as e:
            if not self._stopping.is_set():
                self._emit({"error": f"member {self.index} failed: {e!r}"})
        finally:
            if self._leaving:
                self._emit({"left": self.index, "t0": now_ms()})
            if consumer is not None:
                consumer.close(CLOSE_TIMEOUT_S)


def serve(bootstrap_servers: str, group_id: str, topic: str, protocol: str) -> None:
    """Read commands from stdin until ``stop`` (or its end), answering on stdout."""
    out = threading.Lock()

    def emit(message: dict[str, Any]) -> None:
        # Listeners and poll threads report concurrently; a line must never interleave.
        line = json.dumps(message, separators=(",", ":"))
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    members: dict[int, Member] = {}
    emit({"ready": True})
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "add":
            t0 = now_ms()
            member = Member(int(words[1]), emit, group_id, topic, bootstrap_servers, protocol)
            members[member.index] = member
            member.thread.start()
            emit({"added": member.index, "t0": t0})
        elif words[0] == "leave":
            members[int(words[1])].leave()
        elif words[0] == "stop":
            break
        else:
            emit({"error": f"unknown command {line.strip()!r}"})
    # All at once: one by one, each leave would rebalance the members still there.
    for m in members.values():
        m.stop()
    for m in members.values():
        m.thread.join(CLOSE_TIMEOUT_S + 5)
    emit({"stopped": True})


def main(argv: list[str]) -> int:
    bootstrap_servers, group_id, topic, protocol = argv[:4]
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s [{group_id} pid %(process)d] %(levelname)s %(name)s: %(message)s",
    )
    # kafka-python logs cancelled requests on close as errors; a member that really fails
    # says so on stdout.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if len(argv) > 4:
        # Every process of the run appends to the one file (the benchmark's --log).
        handler = logging.FileHandler(argv[4])
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s pid %(process)d %(threadName)s %(name)s %(levelname)s: %(message)s"
            )
        )
        for logger in ("coordination", "recipes"):
            logging.getLogger(logger).addHandler(handler)
            logging.getLogger(logger).setLevel(logging.DEBUG)
            logging.getLogger(logger).propagate = False  # to the file only
    serve(bootstrap_servers, group_id, topic, protocol)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
