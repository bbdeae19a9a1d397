"""An interoperability peer: this library's ``Consumer``, reporting as JSON lines.

The same arguments and events as ``rdkafka_peer.py`` and ``java/PeerConsumer.java``, so the
harness in ``peers.py`` drives all three kinds alike. Leadership is reported by wrapping the
assignors: ``assign`` only runs on the group's leader.

    python -m tests.interop.ours_peer --bootstrap HOST:PORT --group G --topics T1,T2
        [--assignor cooperative-sticky|range|sticky|roundrobin|range,cooperative-sticky]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

from coordination import errors
from recipes.partitioning import (
    Consumer,
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RebalanceListener,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
)
from recipes.partitioning.protocol import Assignment, Subscription

_print_lock = threading.Lock()
_ASSIGNORS: dict[str, Callable[[], PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def emit(event: str, t: float | None = None, **fields: Any) -> None:
    line = {"event": event, **fields, "t": time.time() * 1000 if t is None else t}
    with _print_lock:
        print(json.dumps(line), flush=True)


def partition_list(partitions: frozenset[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def reporting(assignor: PartitionAssignor) -> PartitionAssignor:
    """The same assignor (same name), printing ``led`` when it runs."""
    original = assignor.assign

    def assign(
        partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        emit("led", members=len(subscriptions), assignor=assignor.name)
        return original(partitions_per_topic, subscriptions)

    assignor.assign = assign  # type: ignore[method-assign]
    return assignor


class Reporter(RebalanceListener):
    def __init__(self) -> None:
        self.consumer: Consumer | None = None

    def _membership(self) -> dict[str, Any]:
        assert self.consumer is not None
        g = self.consumer.group.generation()
        return {"generation": g.generation_id, "member_id": g.member_id}

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        emit("assigned", partitions=partition_list(partitions), **self._membership())

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        # Each batch was committed right after it was processed: nothing to commit here.
        emit("revoked", partitions=partition_list(partitions), **self._membership())

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        emit("lost", partitions=partition_list(partitions), **self._membership())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--assignor", default="cooperative-sticky")
    parser.add_argument("--client-id", default="ours-peer")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--group-instance-id")
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--max-poll-records", type=int, default=500)
    args = parser.parse_args(argv)

    names = [a.strip() for a in args.assignor.split(",")]
    listener = Reporter()
    consumer = Consumer(
        args.group,
        topics=args.topics.split(","),
        assignors=[reporting(_ASSIGNORS[n]()) for n in names],
        listener=listener,
        bootstrap_servers=args.bootstrap,
        client_id=args.client_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        rebalance_timeout_ms=args.max_poll_interval_ms,
        group_instance_id=args.group_instance_id,
        max_poll_records=args.max_poll_records,
    )
    listener.consumer = consumer
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer.start()
    emit("started", topics=args.topics.split(","))
    try:
        while not stopping.is_set():
            batch = consumer.poll(timeout_ms=args.poll_ms)
            if not batch:
                continue
            ranges = {
                tp: [records[0].offset, records[-1].offset, len(records)]
                for tp, records in batch.items()
            }
            emit("records", partitions=[[t, p, *r] for (t, p), r in sorted(ranges.items())])
            offsets = {tp: r[1] + 1 for tp, r in ranges.items()}
            try:
                consumer.commit(offsets)
            except (errors.CommitFailedError, errors.CoordinationError) as e:
                emit("commit_failed", error=str(e))
                continue
            emit("committed", offsets=[[t, p, o] for (t, p), o in sorted(offsets.items())])
    finally:
        consumer.close()
        emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
