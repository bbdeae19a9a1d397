"""An interoperability peer: a librdkafka consumer (confluent-kafka) reporting as JSON lines.

The twin of ``tests/interop/java/PeerConsumer.java``, with the same arguments and the same
events (see that file's header; "revoked" and "lost" are timed when the unassign call
begins, the last moment before librdkafka may release the partition), driven by
``tests/interop/peers.py``. It joins a group with
the classic protocol, consumes, commits synchronously after each batch and closes cleanly
on SIGTERM. It exits 3 at once when the process that started it is gone (``devtools.orphans``).

Leadership: librdkafka has no API that says a member led a rebalance, so the peer turns on
its ``cgrp`` debug context and watches the log for the line the group leader writes after
running the assignor (``Group "g": "range" assignor run for 3 member(s)``, in
``rd_kafka_cgrp_assignor_run``), the moment that matches the Java peer's assignor hook.

Usage:
    python -m tests.interop.rdkafka_peer --bootstrap HOST:PORT --group G --topics T1,T2
        [--assignor cooperative-sticky|range|roundrobin] [--client-id ID]
        [--session-timeout-ms 6000] [--heartbeat-interval-ms 500]
        [--max-poll-interval-ms 30000] [--group-instance-id ID] [--poll-ms 100]
        [--max-poll-records 500]

librdkafka refuses to mix eager and cooperative assignors in one consumer, so unlike the
Java peer it cannot take part in the two-step rolling upgrade (``range,cooperative-sticky``):
such a list makes it print an ``error`` event and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from devtools.orphans import exit_when_orphaned

# The leader's line after running the assignor; member count as a group.
_ASSIGNOR_RUN = re.compile(
    r'Group "(?P<group>[^"]*)": "(?P<assignor>[^"]+)" assignor run for '
    r"(?P<members>\d+) member\(s\)"
)
_GENERATION = re.compile(r"JoinGroup response: GenerationId (?P<generation>-?\d+)")
# The consumer group protocol (KIP-848): the member epoch stands for the generation.
_MEMBER_EPOCH = re.compile(
    r'ConsumerGroupHeartbeat response received for member id "[^"]*" with epoch '
    r"(?P<generation>\d+)"
)
# KIP-848: what the member tells the broker it owns ("NULL": unchanged since the last one).
# The broker frees a partition it is taking from the member once a heartbeat leaves it out.
_REPORTED = re.compile(
    r'ConsumerGroupHeartbeat of member id "[^"]*", group id "[^"]*", '
    r'generation id (?P<generation>-?\d+), .*current assignment "(?P<owned>[^"]*)"'
)
_OWNED_PARTITION = re.compile(r"(?P<topic>[^,\s(]+)\([^)]*\)\[(?P<partition>\d+)\]")
_COOPERATIVE = frozenset({"cooperative-sticky"})


def emit(event: str, t: float | None = None, **fields: Any) -> None:
    """Print one event as a JSON line; ``t`` defaults to now (epoch milliseconds)."""
    line = {"event": event, **fields, "t": time.time() * 1000 if t is None else t}
    print(json.dumps(line), flush=True)


def partition_list(partitions: Sequence[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def reported_owned(message: str) -> tuple[int, list[list[Any]]] | None:
    """The member epoch and the partitions a KIP-848 heartbeat in ``message`` tells the
    broker the member owns, or None if it is no such line or leaves them unchanged."""
    found = _REPORTED.search(message)
    if found is None or found["owned"] == "NULL":
        return None
    owned = [[m["topic"], int(m["partition"])] for m in _OWNED_PARTITION.finditer(found["owned"])]
    return int(found["generation"]), sorted(owned)


class _LeaderWatch(logging.Handler):
    """Reads librdkafka's log: reports leadership and each owned set a KIP-848 heartbeat
    reports ("reported", which the campaign's checker weighs), and remembers the generation.

    confluent-kafka hands each log line to this handler from inside ``consume()``, on the
    thread that polls, so no locking is needed. Every line also goes to stderr, which the
    harness keeps in a file for debugging.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.generation = -1

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        print(message, file=sys.stderr, flush=True)
        reported = reported_owned(message)
        if reported is not None:
            # Timed when the line is handed here, in consume(): after it was sent.
            emit("reported", generation=reported[0], partitions=reported[1])
            return
        found = _GENERATION.search(message) or _MEMBER_EPOCH.search(message)
        if found is not None:
            self.generation = int(found["generation"])
        elif (found := _ASSIGNOR_RUN.search(message)) is not None:
            emit(
                "led",
                members=int(found["members"]),
                assignor=found["assignor"],
                generation=self.generation,
            )


class Peer:
    """One consumer and its loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.topics: list[str] = args.topics.split(",")
        self.poll_s = args.poll_ms / 1000
        self.batch = args.max_poll_records
        assignors = [a.strip() for a in args.assignor.split(",")]
        # The consumer group protocol (KIP-848) is always incremental, whatever the assignor.
        self.cooperative = (
            bool(_COOPERATIVE.intersection(assignors)) or args.group_protocol == "consumer"
        )
        self.stopping = False
        self.watch = _LeaderWatch()
        logger = logging.getLogger(f"rdkafka-peer.{args.client_id}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self.watch)
        config: dict[str, Any] = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": args.client_id,
            "group.protocol": args.group_protocol,
            "max.poll.interval.ms": args.max_poll_interval_ms,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "debug": "cgrp",
            "error_cb": self._on_error,
            "logger": logger,
        }
        if args.group_protocol == "consumer":
            # KIP-848: the broker assigns and sets the session and heartbeat.
            config["group.remote.assignor"] = "uniform"
        else:
            config["partition.assignment.strategy"] = ",".join(assignors)
            config["session.timeout.ms"] = args.session_timeout_ms
            config["heartbeat.interval.ms"] = args.heartbeat_interval_ms
        if args.group_instance_id:
            config["group.instance.id"] = args.group_instance_id
        self.consumer = Consumer(config)

    def _membership(self) -> dict[str, Any]:
        return {"generation": self.watch.generation, "member_id": self.consumer.memberid()}

    # -- rebalance callbacks: run inside consume() / close(), on the polling thread ------
    #
    # Whoever gives on_assign/on_revoke must apply the change itself: librdkafka waits for
    # the application's (incremental_)assign/unassign call before it goes on. With the
    # cooperative protocol the lists are the increments and must be applied with
    # incremental_assign / incremental_unassign; with the eager protocol on_assign gets the
    # whole new assignment and on_revoke the whole old one (assign / unassign).

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Ownership begins when the callback begins (see PeerConsumer.java's header).
        t = time.time() * 1000
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        emit("assigned", t, partitions=partition_list(partitions), **self._membership())

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Each batch was committed right after it was processed: nothing to commit here.
        # Ownership ends when the unassign call begins, not when the callback ends (as in
        # the Java peer): with KIP-848 librdkafka acknowledges the revocation from its own
        # thread as soon as the unassign is applied, so the broker may hand the partition
        # on, and the next owner start, before this callback returns. The epoch is read
        # then too: the one the partition was owned in, not the one the ack brings.
        t, membership = time.time() * 1000, self._membership()
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        emit("revoked", t, partitions=partition_list(partitions), **membership)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        t, membership = time.time() * 1000, self._membership()
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        emit("lost", t, partitions=partition_list(partitions), **membership)

    def _on_error(self, error: KafkaError) -> None:
        emit("error", error=str(error), fatal=error.fatal())

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        self.consumer.subscribe(
            self.topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        emit("started", topics=self.topics)
        while not self.stopping:
            messages = self.consumer.consume(self.batch, self.poll_s)
            ranges: dict[tuple[str, int], list[int]] = {}
            for m in messages:
                if m.error() is not None:
                    # Partition EOF is off by default; anything here is worth seeing.
                    emit("error", error=str(m.error()))
                    continue
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                assert topic is not None and partition is not None and offset is not None
                seen = ranges.setdefault((topic, partition), [offset, offset, 0])
                seen[1] = offset
                seen[2] += 1
            if ranges:
                emit("records", partitions=[[t, p, *r] for (t, p), r in sorted(ranges.items())])
                self._commit(ranges)

    def _commit(self, ranges: dict[tuple[str, int], list[int]]) -> None:
        """Commit the positions after this batch: the offset of its last record + 1."""
        offsets = [TopicPartition(t, p, r[1] + 1) for (t, p), r in sorted(ranges.items())]
        try:
            done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID: a rebalance got
            # in the way; the next owner consumes these records again (at least once).
            emit("commit_failed", error=str(e.args[0] if e.args else e))
            return
        failed = [tp for tp in done if tp.error is not None]
        if failed:
            emit("commit_failed", error="; ".join(f"{tp}: {tp.error}" for tp in failed))
        committed = [[tp.topic, tp.partition, tp.offset] for tp in done if tp.error is None]
        if committed:
            emit("committed", offsets=committed)

    def close(self) -> None:
        try:
            # Runs the revocation callback and sends LeaveGroup (unless static membership).
            self.consumer.close()
        except (KafkaException, RuntimeError) as e:
            emit("error", error=str(e))
        emit("closed")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--assignor", default="cooperative-sticky")
    parser.add_argument("--client-id", default="rdkafka-peer")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--group-instance-id")
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--max-poll-records", type=int, default=500)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    exit_when_orphaned()
    try:
        peer = Peer(args)
    except (KafkaException, ValueError, TypeError) as e:
        emit("error", error=str(e))
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        # consume() returns within poll_ms; the loop then ends and close() runs.
        peer.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        peer.run()
    finally:
        peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
