"""A campaign consumer on :class:`recipes.partitioning.AsyncConsumer`: the command line and
the events of the other consumer peers (``tests/interop/ours_peer.py``), read the way
docs/partitioning.md's asyncio loop reads: ``getone``, ``getmany`` with and without
``max_records``, some of them cancelled by a short ``asyncio.wait_for`` (their records are
given back, not lost), and a commit of the positions (what was handed out) after each.

    python -m devtools.campaign._async_consumer --bootstrap HOST:PORT
        --group G --topics T [--group-instance-id I] [--client-id C]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordination import errors
from recipes.partitioning import (
    AsyncConsumer,
    AsyncRebalanceListener,
    CooperativeStickyAssignor,
    RangeAssignor,
    TopicPartition,
)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields, "t": time.time() * 1000}), flush=True)


def partition_list(partitions: frozenset[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


class Reporter(AsyncRebalanceListener):
    def __init__(self) -> None:
        self.consumer: AsyncConsumer | None = None

    def _membership(self) -> dict[str, Any]:
        assert self.consumer is not None
        g = self.consumer.consumer.group.generation()
        return {"generation": g.generation_id, "member_id": g.member_id}

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        emit("assigned", partitions=partition_list(partitions), **self._membership())

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        # What was handed out was committed right after: nothing to commit here.
        emit("revoked", partitions=partition_list(partitions), **self._membership())

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        emit("lost", partitions=partition_list(partitions), **self._membership())


async def consume(args: argparse.Namespace) -> None:
    rng = random.Random()
    listener = Reporter()
    assignors: list[Any] = (
        [RangeAssignor()] if args.assignor == "range" else [CooperativeStickyAssignor()]
    )
    consumer = AsyncConsumer(
        args.group,
        topics=args.topics.split(","),
        assignors=assignors,
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
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    await consumer.start()
    emit("started", topics=args.topics.split(","))
    wait_s = args.poll_ms / 1000
    try:
        while not stopping.is_set():
            draw = rng.random()
            try:
                if draw < 0.4:
                    record = await asyncio.wait_for(consumer.getone(), wait_s)
                    batch = {TopicPartition(record.topic, record.partition): [record]}
                elif draw < 0.6:  # often cancelled while its fetch runs
                    batch = await asyncio.wait_for(
                        consumer.getmany(timeout_ms=args.poll_ms, max_records=rng.randint(1, 20)),
                        wait_s * rng.uniform(0.2, 1.0),
                    )
                else:
                    batch = await consumer.getmany(timeout_ms=args.poll_ms)
            except TimeoutError:
                continue  # cancelled: its records come again
            if not batch:
                continue
            ranges = {
                tp: [records[0].offset, records[-1].offset, len(records)]
                for tp, records in batch.items()
            }
            emit("records", partitions=[[t, p, *r] for (t, p), r in sorted(ranges.items())])
            # The positions: past what was handed out, nothing more. Named explicitly so
            # that what is reported is what was committed (a revoked one fails the call).
            offsets = {tp: consumer.position(tp) for tp in ranges}
            wanted = {tp: o for tp, o in offsets.items() if o is not None}
            try:
                await consumer.commit(wanted)
            except errors.CoordinationError as e:
                emit("commit_failed", error=str(e))
                continue
            emit("committed", offsets=[[t, p, o] for (t, p), o in sorted(wanted.items())])
    finally:
        await consumer.close()
        emit("closed")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--assignor", default="cooperative-sticky")
    parser.add_argument("--client-id", default="ours-async-peer")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--group-instance-id")
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--max-poll-records", type=int, default=500)
    asyncio.run(consume(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
