"""The ``share`` recipe: a share group's consumer (explicit acknowledgement) that accepts
every record but for three kinds chosen by offset, so that a checker knows what to expect:
every ``--release-every``-th record is released at its first delivery (it comes back),
every ``--bounce-every``-th at every delivery (it reaches the delivery limit and is
archived), every ``--reject-every``-th is rejected as poison (it never comes back). With
``--stall-chance`` a batch is acknowledged only after ``--stall-ms`` (a slow handler: past
the lock, its acknowledgements fail and its records come back). ``--fetch-ahead``: the
consumer fetches ahead (``fetch_ahead=True``). Records it acquired but never handed out
(their lock ran out before a poll, or fetched ahead and released by its close: the hook
``on_records_unpolled``) are reported as ``unseen``, each with its delivery count: a
delivery nobody acknowledged, which may have been a record's last before the limit."""

from __future__ import annotations

import argparse
import random
from typing import TYPE_CHECKING

from ._io import Output, Stopping, required

if TYPE_CHECKING:
    from recipes.queues import AcknowledgementError, AcknowledgeType, ShareRecord


def chosen_ack(record: ShareRecord, args: argparse.Namespace) -> AcknowledgeType:
    """What the member does with ``record``: REJECT a poison one, RELEASE one released at
    every delivery, or at its first, ACCEPT any other (in that order of precedence)."""
    from recipes.queues import AcknowledgeType

    if args.reject_every and record.offset % args.reject_every == args.reject_every - 1:
        return AcknowledgeType.REJECT
    if args.bounce_every and record.offset % args.bounce_every == 2:
        return AcknowledgeType.RELEASE
    first = record.delivery_count == 1
    if args.release_every and first and record.offset % args.release_every == 1:
        return AcknowledgeType.RELEASE
    return AcknowledgeType.ACCEPT


def run_share(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from coordination import errors
    from coordination.hooks import CoordinationHooks, RecordsAcquired, RecordsUnpolled
    from recipes.queues import ShareConsumer

    topic = required(args, "topics")
    rng = random.Random()
    # What this process asked of each record it holds, until the broker answers: the
    # outcome callback names offsets only.
    asked: dict[tuple[str, int, int], str] = {}

    def on_acknowledged(
        partition: tuple[str, int], offsets: tuple[int, ...], error: AcknowledgementError | None
    ) -> None:
        kinds = [asked.pop((*partition, o), "?") for o in offsets]
        if error is None:
            emit(
                "acknowledged",
                topic=partition[0],
                partition=partition[1],
                acks=[[o, k] for o, k in zip(offsets, kinds, strict=True)],
            )
        else:
            emit(
                "ack_failed",
                topic=partition[0],
                partition=partition[1],
                acks=[[o, k] for o, k in zip(offsets, kinds, strict=True)],
                error=type(error).__name__,
            )

    # When the ShareFetch that acquired a poll's records was sent, on ``emit``'s clock: the
    # broker acquired them after it.
    fetched_at = [emit.clock()]

    def on_emit_clock(consumer_time: float) -> float:
        """``consumer_time`` (the consumer's clock) on ``emit``'s clock, no later: emit's
        clock is read first."""
        now = emit.clock()
        return now - (consumer.member.clock.monotonic() - consumer_time)

    class Reports(CoordinationHooks):
        def on_records_acquired(self, event: RecordsAcquired) -> None:
            fetched_at[0] = on_emit_clock(event.fetched_at)

        def on_records_unpolled(self, event: RecordsUnpolled) -> None:
            emit(
                "unseen",
                topic=event.topic,
                partition=event.partition,
                records=[list(r) for r in zip(event.offsets, event.delivery_counts, strict=True)],
                reason=event.reason,
                polled_at=on_emit_clock(event.fetched_at),
            )

    consumer = ShareConsumer(
        args.group,
        topics=topic.split(","),
        bootstrap_servers=args.bootstrap,
        max_poll_records=args.max_poll_records,
        on_acknowledged=on_acknowledged,
        fetch_ahead=args.fetch_ahead,
        hooks=[Reports()],
        **({"retry_backoff_ms": args.retry_backoff_ms} if args.retry_backoff_ms else {}),
        **({"client_id": args.client_id} if args.client_id else {}),
    )
    emit("started", topics=topic.split(","))
    try:
        while not stopping.is_set():
            try:
                records = consumer.poll(timeout_ms=args.poll_ms)
            except errors.CoordinationError as e:
                emit("failed", error=type(e).__name__, detail=str(e)[:300])
                stopping.wait(0.5)
                continue
            polled_at = fetched_at[0]  # (the hook told it before poll returned)
            for r in records:
                # ``polled_at`` and ``t`` bound when the broker acquired it.
                emit(
                    "acquired",
                    topic=r.topic,
                    partition=r.partition,
                    offset=r.offset,
                    delivery_count=r.delivery_count,
                    value=(r.value or b"").decode(errors="replace"),
                    polled_at=polled_at,
                )
            if records and rng.random() < args.stall_chance:
                emit("stalling", seconds=args.stall_ms / 1000)
                stopping.wait(args.stall_ms / 1000)
            for r in records:
                kind = chosen_ack(r, args)
                asked[(r.topic, r.partition, r.offset)] = kind.name
                # Read before acknowledge(): the broker takes it later, the record still held.
                emit(
                    "acknowledging",
                    topic=r.topic,
                    partition=r.partition,
                    offset=r.offset,
                    delivery_count=r.delivery_count,
                    kind=kind.name,
                )
                consumer.acknowledge(r, kind)
            # Half the time the next poll carries the acknowledgements, as it may.
            if records and rng.random() < 0.5:
                try:
                    consumer.commit()
                except errors.CoordinationError as e:
                    emit("failed", error=type(e).__name__, detail=str(e)[:300])
    finally:
        try:
            consumer.close(timeout=10)
        finally:
            emit("closed")
