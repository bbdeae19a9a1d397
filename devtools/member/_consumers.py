"""The ``consumer`` and ``consumer-async`` recipes: the interoperability peers' protocol."""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._io import Output, Stopping, group_settings

if TYPE_CHECKING:
    from recipes.partitioning import PartitionAssignor, TopicPartition


def _partition_list(partitions: frozenset[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def _assignors(names: str, emit: Output) -> list[PartitionAssignor]:
    """The assignors named (a preference list), each printing ``led`` when it runs: an
    assignor runs only on the group's leader."""
    from recipes.partitioning import (
        CooperativeStickyAssignor,
        RangeAssignor,
        RoundRobinAssignor,
        StickyAssignor,
    )
    from recipes.partitioning.protocol import Assignment, Subscription

    kinds: dict[str, Callable[[], PartitionAssignor]] = {
        "range": RangeAssignor,
        "roundrobin": RoundRobinAssignor,
        "sticky": StickyAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }

    def reporting(assignor: PartitionAssignor) -> PartitionAssignor:
        original = assignor.assign

        def assign(
            partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> dict[str, Assignment]:
            emit("led", members=len(subscriptions), assignor=assignor.name)
            return original(partitions_per_topic, subscriptions)

        assignor.assign = assign  # type: ignore[method-assign]
        return assignor

    return [reporting(kinds[name.strip()]()) for name in names.split(",")]


class _Membership:
    """What a rebalance event reports of the member: its generation and member id."""

    def __init__(self, emit: Output) -> None:
        self.emit = emit
        self.group: Callable[[], Any] | None = None  # the consumer's group, once made

    def report(self, kind: str, partitions: frozenset[TopicPartition]) -> None:
        assert self.group is not None
        g = self.group().generation()
        self.emit(
            kind,
            partitions=_partition_list(partitions),
            generation=g.generation_id,
            member_id=g.member_id,
        )


def _consumer_options(args: argparse.Namespace, emit: Output) -> dict[str, Any]:
    protocol: dict[str, Any] = (
        {"group_protocol": "consumer", "group_remote_assignor": "uniform"}
        if args.group_protocol == "consumer"
        else {"assignors": _assignors(args.assignor, emit)}
    )
    fetcher: dict[str, Any] = {} if args.fetcher == "default" else {"fetcher": args.fetcher}
    return {
        "topics": args.topics.split(","),
        "bootstrap_servers": args.bootstrap,
        "max_poll_records": args.max_poll_records,
        **protocol,
        **fetcher,
        **group_settings(args),
    }


def _report_batch(batch: Mapping[Any, Sequence[Any]], emit: Output) -> dict[Any, list[int]]:
    """Print a ``records`` event; returns ``partition -> [first, last, count]``."""
    ranges = {
        tp: [records[0].offset, records[-1].offset, len(records)] for tp, records in batch.items()
    }
    emit("records", partitions=[[t, p, *r] for (t, p), r in sorted(ranges.items())])
    return ranges


def run_consumer(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from coordination import errors
    from recipes.partitioning import Consumer, RebalanceListener

    membership = _Membership(emit)

    class Reporter(RebalanceListener):
        def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("assigned", partitions)

        def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            # Each batch was committed right after it was processed: nothing to commit here.
            membership.report("revoked", partitions)

        def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("lost", partitions)

    consumer = Consumer(args.group, listener=Reporter(), **_consumer_options(args, emit))
    membership.group = lambda: consumer._group  # classic or KIP-848: both have generation()
    consumer.start()
    emit("started", topics=args.topics.split(","))
    try:
        while not stopping.is_set():
            batch = consumer.poll(timeout_ms=args.poll_ms)
            if not batch:
                continue
            ranges = _report_batch(batch, emit)
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


async def _consume_async(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from coordination import errors
    from recipes.partitioning import AsyncConsumer, AsyncRebalanceListener, TopicPartition

    rng = random.Random()
    membership = _Membership(emit)

    class Reporter(AsyncRebalanceListener):
        async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("assigned", partitions)

        async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
            # What was handed out was committed right after: nothing to commit here.
            membership.report("revoked", partitions)

        async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            membership.report("lost", partitions)

    consumer = AsyncConsumer(args.group, listener=Reporter(), **_consumer_options(args, emit))
    membership.group = lambda: consumer.consumer._group
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.event.set)
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
            ranges = _report_batch(batch, emit)
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


def run_consumer_async(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    asyncio.run(_consume_async(args, emit, stopping))
