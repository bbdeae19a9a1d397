"""The wake-up channel: members tell one another through a Kafka topic that their group is
changing, so that the others learn of a rebalance in milliseconds, not at their next heartbeat.

Kafka's classic protocol tells a member that a rebalance began only in the answer to its next
heartbeat, so every rebalance waits up to one heartbeat interval for each member to notice.
Here a member that joins, rejoins of its own accord, or leaves also appends a small record to
one partition of a shared topic; the members of its group long-poll that partition, and one
that reads another member's record sends a heartbeat at once (of the members sharing a
listener, one per generation asks, and its answer reaches the others). A heartbeat only asks the
broker whether a rebalance is under way, so a stray or late wake-up never causes one. A
departure, announced once the broker handled the LeaveGroup, names the generation left: a
member still in it rejoins without asking (the broker rebalances whenever a member leaves).
Where the coordinator leads the group's partition, the departure rides behind the LeaveGroup
on the coordinator's connection (the broker handles a connection's requests in order).
The members of one group in one process that connect alike share one listener (one
connection, one fetch per wake-up for all of them).

The topic (default ``coordination.wakeups``) is created on first use with
:data:`PARTITIONS` partitions and an hour's retention; a group uses partition
``crc32(group_id) % partitions``, so the groups of a cluster share a few partitions and
every member reads only its own group's. Where the topic cannot be created or used (ACLs, a
creation policy, an old broker), the member logs one warning and relies on heartbeats.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from .._protocol.error_codes import ErrorCode
from ..transport import TransportError
from .base import Wake
from .kafka import KafkaTransport

log = logging.getLogger("coordination.wakeups")

DEFAULT_TOPIC = "coordination.wakeups"
PARTITIONS = 16
# Wake-ups matter for seconds; an hour's retention in small segments keeps the topic tiny.
TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "retention.ms": "3600000",
    "segment.ms": "600000",
    "segment.bytes": "1048576",
}
# One produced batch holds at most this much (more records go in further requests).
_BATCH_BYTES = 64 * 1024
# A member's timeline records go out this long after the first of them (see _publish).
TIMELINE_DELAY_S = 2.0
# The broker holds an idle fetch this long: an idle member sends one request per interval.
LISTEN_WAIT_MS = 10_000
# A channel still failing after this long is reported (once) as not working.
_WARN_AFTER_S = 30.0
_BACKOFF_S = (0.1, 5.0)

# Errors no retry can fix: the channel is off for this member.
_UNUSABLE = {
    17: "INVALID_TOPIC_EXCEPTION",
    29: "TOPIC_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    35: "UNSUPPORTED_VERSION",
    37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR",
    40: "INVALID_CONFIG",
    44: "POLICY_VIOLATION",
}


class _Unusable(Exception):
    """The topic cannot be used by this member; retrying will not change that."""


class _Retry(Exception):
    """A failure worth retrying after a backoff (the partition's leader moved, ...)."""


class _OutOfRange(_Retry):
    """The position is gone from the partition (retention): read from its end again."""


@dataclass(frozen=True, slots=True)
class _Route:
    partition: int
    leader: int
    produce_node: Any
    fetch_node: Any


@dataclass(slots=True)
class WakeupStats:
    """What one member's channel did (for metrics and the benchmarks)."""

    sent: int = 0
    """Wake-ups published."""
    sent_with_leave: int = 0
    """Of those, departures that rode behind their LeaveGroup (see ``departure``)."""
    timeline_sent: int = 0
    """Timeline records published."""
    received: int = 0
    requests: int = 0
    working: bool = False


class _Announcement:
    def __init__(
        self,
        key: bytes,
        value: Mapping[str, Any],
        *,
        timeline: bool = False,
        flush_timeline: bool = False,
        due_only: bool = False,
        shared_by: _SharedListener | None = None,
        queued_at: float | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.timeline = timeline
        # Not a record: tells the publisher to send the pending timeline records now.
        self.flush_timeline = flush_timeline
        # Not a record: the listener's shared timeline batch is this publisher's to send,
        # TIMELINE_DELAY_S after this (see _SharedListener.add_timeline).
        self.due_only = due_only
        self.shared_by = shared_by
        self.queued_at = time.monotonic() if queued_at is None else queued_at
        self.done = threading.Event()

    @classmethod
    def batch_due(cls, listener: _SharedListener, since: float | None = None) -> _Announcement:
        """The marker that makes a publisher send ``listener``'s timeline batch, due
        TIMELINE_DELAY_S after ``since`` (its first record's time; default now)."""
        return cls(b"", {}, timeline=True, due_only=True, shared_by=listener, queued_at=since)


# Tells the publisher that the timeline's delay is over.
_SEND_TIMELINE = _Announcement(b"", {}, flush_timeline=True)


def timeline_key(group_id: str) -> bytes:
    """The key of a group's timeline records: listeners, which compare keys with the group
    id, skip them without decoding (a group id never holds a NUL)."""
    return group_id.encode("utf-8") + b"\x00timeline"


class KafkaWakeups:
    """One member's end of the wake-up channel: a publisher thread sending through the
    member's own transport, and a share of its group's listener in this process (see
    ``_SharedListener``), which reads on a connection of its own.
    """

    def __init__(
        self,
        transport: KafkaTransport,
        *,
        group_id: str,
        topic: str = DEFAULT_TOPIC,
        request_timeout_ms: int,
    ) -> None:
        self._transport = transport
        self._group_id = group_id
        self._key = group_id.encode("utf-8")
        self._topic = topic
        self._timeout_s = request_timeout_ms / 1000
        # Tells this member's own records apart (its member id changes; this does not).
        self._sender = uuid.uuid4().hex
        self._route: _Route | None = None
        self._timeline_route: _Route | None = None
        self._route_lock = threading.Lock()
        self._stop = threading.Event()
        self._off = False
        self._queue: queue.SimpleQueue[_Announcement | None] = queue.SimpleQueue()
        self._last: _Announcement | None = None
        self._departure: _Departure | None = None
        self._threads: list[threading.Thread] = []
        self._listener: _SharedListener | None = None
        self._wake: Wake | None = None
        self._sibling_found: Callable[[int], None] | None = None
        self._failing_since: float | None = None
        self._warned = False
        self.stats = WakeupStats()

    # -- what the engine calls -----------------------------------------------------

    def start(self, wake: Wake, sibling_found: Callable[[int], None]) -> None:
        """Start listening; ``wake(reason, left_generation, probed=...)`` runs on the listener
        thread per wake-up read (``left_generation``: the generation a departing member
        left; ``probed``: one set for all the members that the read wakes), and
        ``sibling_found(generation)`` when a member sharing the listener found the group
        rebalancing (see ``rebalancing``)."""
        self._wake = wake
        self._sibling_found = sibling_found
        publisher = threading.Thread(
            target=self._publish,
            name=f"coordination-wakeups-publisher|{self._group_id}",
            daemon=True,
        )
        self._threads.append(publisher)
        publisher.start()
        self._listener = _SharedListener.join(self)

    def rebalancing(self, generation: int) -> None:
        """This member's heartbeat found the group rebalancing away from ``generation``: the
        members sharing its listener that are still in it rejoin without asking."""
        listener = self._listener
        if listener is not None:
            listener.rebalancing(self, generation)

    def departure(self, member_id: str, generation: int) -> _Departure | None:
        """The departure's wake-up, ready to follow the LeaveGroup on the coordinator's
        connection when the coordinator also leads the group's partition (always on a
        single broker): the broker then appends it right after accepting the LeaveGroup."""
        route = self._route
        if self._off or self._stop.is_set() or route is None:
            return None
        self._departure = _Departure(
            self, route, self._announcement(member_id, "leave", generation)
        )
        return self._departure

    def announce(
        self,
        member_id: str,
        event: str,
        generation: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Publish a wake-up for the group's other members: on the publisher thread, or with
        ``timeout_s`` on the calling thread, at once, for at most that long (a departure:
        the others wait for it, and a thread switch or a timeline batch queued before it
        would hold it up). Without a route to the partition yet, it is queued all the same.
        A departure that already followed the LeaveGroup (see ``departure``) is not sent
        again."""
        if self._off or self._stop.is_set():
            return
        item = self._announcement(member_id, event, generation)
        sent_along = self._departure
        if sent_along is not None and sent_along.delivered and sent_along.item.value == item.value:
            # Tells the publisher to send the pending timeline now (see below).
            item = _Announcement(b"", {}, flush_timeline=True)
        elif timeout_s is not None and self._route is not None:
            if self._produce_retried([item], deadline=time.monotonic() + timeout_s):
                self.stats.sent += 1
            # Tells the publisher to send the pending timeline now: the connections close
            # next, and flush() waits for it.
            item = _Announcement(b"", {}, flush_timeline=True)
        self._last = item
        self._queue.put(item)

    def _announcement(self, member_id: str, event: str, generation: int | None) -> _Announcement:
        value: dict[str, Any] = {"member": member_id, "event": event}
        if generation is not None:
            value["generation"] = generation
        return _Announcement(self._key, value)

    def record_rebalance(self, entry: Mapping[str, Any]) -> None:
        """Publish one of this member's completed rebalances under the group's timeline key
        (wakes nobody; ``describe --timeline`` reads them back)."""
        if self._off or self._stop.is_set():
            return
        item = _Announcement(timeline_key(self._group_id), entry, timeline=True)
        listener = self._listener
        if listener is None:
            self._queue.put(item)
        elif listener.add_timeline(self, item):
            # This member's publisher sends the batch of all members sharing the listener.
            self._queue.put(_Announcement.batch_due(listener))

    def flush(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until the announcements made so far are sent (or given up):
        a leaving member's connections close next."""
        last = self._last
        if last is not None:
            last.done.wait(timeout_s)

    def close(self, timeout_s: float) -> None:
        """Stop both threads (the transport is closed, or about to be)."""
        self._stop.set()
        self._queue.put(None)
        deadline = time.monotonic() + timeout_s
        listener, self._listener = self._listener, None
        if listener is not None:
            # Records this member's publisher was to send (a close without a departure, which
            # would have sent them) go with another member's.
            listener.give_back_timeline(self, [])
            stopped = listener.leave(self)
            if stopped is not None:  # this member was its last
                self._threads.append(stopped)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _sharing_key(self) -> Hashable:
        """Members with equal keys may read their wake-ups through one listener: the same
        group, topic, client id and connection settings (credentials included)."""
        return (self._group_id, self._topic, self._transport.sharing_key)

    # -- the publisher thread ----------------------------------------------------------

    def _publish(self) -> None:
        # Timeline records wait until TIMELINE_DELAY_S after the first of them, then go out
        # together: a rebalance's requests need the CPU more (and a burst of rebalances
        # sends one batch).
        timeline: list[_Announcement] = []
        # The listener whose shared batch this publisher is to send (see add_timeline).
        shared: _SharedListener | None = None
        self._locate_early()
        while True:
            wait_s = None
            if timeline:
                wait_s = max(0.0, timeline[0].queued_at + TIMELINE_DELAY_S - time.monotonic())
            try:
                item = self._queue.get(timeout=wait_s)
            except queue.Empty:
                item = _SEND_TIMELINE
            if item is None or self._stop.is_set():
                return
            if item.timeline:
                timeline.append(item)
                shared = item.shared_by or shared
                continue
            if item.flush_timeline:
                batch, taken_from = self._timeline_batch(timeline, shared)
            else:
                # A departure queued (no route when it was announced) goes out before the
                # timeline, which nobody waits for; flush() (close) waits for both. The batch
                # is taken first: flush() waits for exactly what this thread sends after.
                leaving = item.value.get("event") == "leave"
                batch, taken_from = (
                    self._timeline_batch(timeline, shared) if leaving else ([], None)
                )
                if not self._produce_retried([item], done=not batch):
                    item.done.set()
                    if taken_from is not None:
                        taken_from.give_back_timeline(self, batch)
                    return
                self.stats.sent += 1
                if not leaving:
                    continue
            timeline, shared = [], None
            sent = not batch or self._produce_retried(batch)
            item.done.set()
            if not sent:
                if taken_from is not None:  # stopping: another member sends them
                    taken_from.give_back_timeline(self, batch)
                return
            self.stats.timeline_sent += len(batch)

    def _timeline_batch(
        self, timeline: list[_Announcement], shared: _SharedListener | None
    ) -> tuple[list[_Announcement], _SharedListener | None]:
        """This member's timeline records to send now, and the listener whose shared batch
        they include (this member's own listener, or the one that made it the batch's
        sender before the listener was this member's own)."""
        mine = [i for i in timeline if not i.due_only]
        listener = self._listener or shared
        if listener is None:
            return mine, None
        return mine + listener.take_timeline(self), listener

    def _locate_early(self) -> None:
        """Find the group's partition now, while the member looks for its coordinator, so
        that its first wake-up (its join) goes out without a metadata round trip before it.
        A failure is left to that first wake-up, which retries and reports it."""
        try:
            self._located()
        except (_Retry, _Unusable, TransportError) as e:
            log.debug("group %r: wake-up partition not found yet (%s)", self._group_id, e)
        except Exception:  # the publisher thread must live on: its wake-ups retry
            log.exception("group %r: looking up the wake-up partition failed", self._group_id)

    def _produce_retried(
        self, items: list[_Announcement], *, done: bool = True, deadline: float | None = None
    ) -> bool:
        """Send ``items`` (to one partition), with a few retries until ``deadline``
        (monotonic; None: no deadline); False once stopping or past the deadline.
        ``done``: mark them done (sent or given up) afterwards."""
        unsent = list(items)
        try:
            for attempt in range(3):
                left_s = None if deadline is None else deadline - time.monotonic()
                if left_s is not None and left_s <= 0:
                    return False
                try:
                    self._produce(self._located(timeline=items[0].timeline), unsent, left_s)
                    return True
                except (_Retry, TransportError) as e:
                    log.debug("group %r: wake-up not sent (%s)", self._group_id, e)
                    self._failing(str(e))
                    backoff_s = 0.05 * 2**attempt
                    if deadline is not None:
                        backoff_s = min(backoff_s, max(0.0, deadline - time.monotonic()))
                    if self._stop.wait(backoff_s):
                        return False
        except _Unusable as e:
            self._turn_off(str(e))
        except Exception:
            log.exception("group %r: wake-up publisher failed", self._group_id)
        finally:
            if done:
                for item in items:
                    item.done.set()
        return True

    # -- requests --------------------------------------------------------------------

    def _send(self, request: Any, node: Any, timeout_s: float | None = None) -> Any:
        self.stats.requests += 1
        return self._transport.send_kafka(
            request, node_id=node, timeout_s=timeout_s or self._timeout_s
        )

    def _located(self, *, timeline: bool = False) -> _Route:
        with self._route_lock:
            if timeline:
                if self._timeline_route is None:
                    self._timeline_route = self._locate(timeline=True)
                return self._timeline_route
            if self._route is None:
                self._route = self._locate()
            return self._route

    def _forget_route(self) -> None:
        with self._route_lock:
            self._route = None
            self._timeline_route = None

    def _locate(self, *, create: bool = True, timeline: bool = False) -> _Route:
        """Find the group's partition (or its timeline's) and its leader, creating the topic
        if it is missing.

        The timeline goes to the partition half the topic away from the group's wake-ups:
        a rebalance of N members publishes N timeline records, and on the wake-up partition
        each would end every member's long poll (N * N fetches, a tenth of a second of CPU
        per rebalance of 50 members in one process)."""
        response = self._send(self._metadata_request(), None)
        topic = response.topics[0]
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if not create:
                raise _Unusable(f"topic {self._topic!r} does not exist")
            self._create_topic()
            raise _Retry(f"topic {self._topic!r} created, waiting for its leaders")
        self._check(topic.error_code, f"metadata of topic {self._topic!r}")
        if not topic.partitions:
            raise _Retry(f"topic {self._topic!r} has no partitions yet")
        count = len(topic.partitions)
        partition = (zlib.crc32(self._key) + (count // 2 if timeline else 0)) % count
        leader = next((p.leader_id for p in topic.partitions if p.partition_index == partition), -1)
        broker = next((b for b in response.brokers if b.node_id == leader), None)
        if broker is None:
            raise _Retry(f"partition {partition} of {self._topic!r} has no leader")
        return _Route(
            partition=partition,
            leader=leader,
            # Short requests share the broker's regular connection (metadata, FindCoordinator);
            # never the coordinator's, where a JoinGroup may be parked.
            produce_node=leader
            if self._transport.knows_node(leader)
            else self._transport.dedicated_node("wakeups-out", leader, broker.host, broker.port),
            fetch_node=self._transport.dedicated_node(
                "wakeups-in", leader, broker.host, broker.port, single=True
            ),
        )

    def _metadata_request(self) -> Any:
        return MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=self._topic)],
            allow_auto_topic_creation=False,
            max_version=12,
        )

    def _create_topic(self) -> None:
        topic = CreateTopicsRequest.CreatableTopic(
            name=self._topic,
            num_partitions=PARTITIONS,
            replication_factor=-1,  # the broker's default.replication.factor
            assignments=[],
            configs=[
                CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                for k, v in TOPIC_CONFIGS.items()
            ],
        )
        request = CreateTopicsRequest(
            topics=[topic], timeout_ms=int(self._timeout_s * 1000), validate_only=False
        )
        result = self._send(request, None).topics[0]
        if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            self._check(result.error_code, f"creating topic {self._topic!r}")
        if result.error_code == ErrorCode.NONE:
            log.info("created the wake-up topic %r (%d partitions)", self._topic, PARTITIONS)

    def _end_offset(self, route: _Route, timestamp: int = -1) -> int:
        """The partition's end offset, or with a ``timestamp`` (ms) the first offset at or
        after it (the end if none is)."""
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=self._topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=route.partition,
                            current_leader_epoch=-1,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        answer = self._send(request, route.produce_node).topics[0].partitions[0]
        self._check(answer.error_code, "reading the partition's end", route)
        if answer.offset < 0:  # no record at or after the timestamp
            return self._end_offset(route)
        return int(answer.offset)

    def _fetch(
        self,
        route: _Route,
        position: int,
        *,
        max_wait_ms: int = LISTEN_WAIT_MS,
        key: bytes | None = None,
        received: Callable[[bytes | None], None],
    ) -> int:
        """Wait for records at ``position``; hand the value of each with ``key`` (default:
        the group's wake-ups) to ``received``."""
        key = self._key if key is None else key
        request = fetch_request(self._topic, route.partition, position, max_wait_ms)
        response = self._send(request, route.fetch_node, max_wait_ms / 1000 + self._timeout_s)
        answer = response.responses[0].partitions[0]
        self._check(answer.error_code, "fetching", route)
        if not answer.records:
            return position
        for batch in MemoryRecords(answer.records):
            for record in batch:
                if record.offset < position:
                    continue
                position = record.offset + 1
                if record.key == key:
                    received(record.value)
        return position

    # -- the timeline, read from outside the group --------------------------------------

    def read_timeline(self, since_ms: int) -> list[bytes]:
        """The values of the group's timeline records published since ``since_ms`` (epoch ms),
        in the topic's order, undecoded: anyone with WRITE on the topic may have written
        them (``coordination._inspection.decode_timeline_record`` checks them).

        Reads the group's partition from the first record at or after ``since_ms`` to its
        end, without joining or creating anything.

        Raises:
            TransportError: the cluster did not answer.
            LookupError: the topic is missing or cannot be read (the message says why).
        """
        try:
            route = self._locate(create=False, timeline=True)
            position = self._end_offset(route, since_ms)
            end = self._end_offset(route)
            entries: list[bytes] = []

            def keep(raw: bytes | None) -> None:
                entries.append(raw or b"")

            while position < end:
                moved_to = self._fetch(
                    route, position, max_wait_ms=0, key=timeline_key(self._group_id), received=keep
                )
                if moved_to == position:
                    break  # nothing more readable (aborted or compacted gap at the end)
                position = moved_to
            return entries
        except (_Unusable, _Retry) as e:
            raise LookupError(f"the wake-up topic {self._topic!r}: {e}") from None

    def _produce(
        self, route: _Route, items: list[_Announcement], timeout_s: float | None = None
    ) -> None:
        """Send ``items`` in as many requests as their batches need; each sent batch leaves
        ``items`` (a retry sends only the rest)."""
        while items:
            request, count = self._produce_request(route, items)
            self._produced(self._send(request, route.produce_node, timeout_s), route)
            del items[:count]

    def _produced(self, response: Any, route: _Route) -> None:
        answer = response.responses[0].partition_responses[0]
        self._check(answer.error_code, "publishing", route)

    def _produce_request(self, route: _Route, items: list[_Announcement]) -> tuple[Any, int]:
        """A request for the first of ``items`` that fit in one batch (at least one), and
        how many that is."""
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=_BATCH_BYTES)
        count = 0
        for item in items:
            value = dict(item.value, sender=self._sender)
            if builder.append(int(time.time() * 1000), item.key, json.dumps(value).encode()):
                count += 1
            else:
                break  # full (it always takes a first record)
        builder.close()
        request = ProduceRequest(
            transactional_id=None,
            acks=1,  # a wake-up is a hint: the leader's write is enough
            timeout_ms=int(self._timeout_s * 1000),
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=self._topic,
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=route.partition, records=builder.buffer()
                        )
                    ],
                )
            ],
            max_version=12,  # topics by name (v13 names them by id)
        )
        return request, count

    # -- outcomes --------------------------------------------------------------------

    def _deliver(self, wakeup: _Wakeup, probed: set[int]) -> None:
        if wakeup.sender == self._sender or self._wake is None:
            return
        self.stats.received += 1
        self._wake(f"member {wakeup.member} announced: {wakeup.event}", wakeup.left, probed=probed)

    def _check(self, code: int, what: str, route: _Route | None = None) -> None:
        if code == ErrorCode.NONE:
            return
        if code in _UNUSABLE:
            raise _Unusable(f"{what}: {_UNUSABLE[code]}")
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            raise _OutOfRange(f"{what}: OFFSET_OUT_OF_RANGE")
        if route is not None:
            self._forget_route()  # most partition errors mean its leader moved
        raise _Retry(f"{what}: error code {code}")

    def _working(self) -> None:
        self.stats.working = True
        if self._failing_since is not None and self._warned:
            log.info("group %r: the wake-up channel works again", self._group_id)
            self._warned = False
        self._failing_since = None

    def _failing(self, why: str) -> None:
        self.stats.working = False
        self._forget_route()
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        elif not self._warned and now - self._failing_since > _WARN_AFTER_S:
            self._warned = True
            log.warning(
                "group %r: the wake-up channel on topic %r has not worked for %.0fs (%s); "
                "members learn of rebalances at their next heartbeat until it does",
                self._group_id,
                self._topic,
                now - self._failing_since,
                why,
            )

    def _turn_off(self, why: str) -> None:
        if self._off:
            return
        self._off = True
        self.stats.working = False
        log.warning(
            "group %r: the wake-up channel is off for this member: %s. Members learn of "
            "rebalances at their next heartbeat (within heartbeat_interval_ms). To use it, let "
            "this principal create topic %r (or create it yourself) and DESCRIBE, READ and "
            "WRITE it; set wakeup_topic=None to turn it off without this warning.",
            self._group_id,
            why,
            self._topic,
        )


class _Departure:
    """A departure's wake-up riding behind the LeaveGroup (see ``KafkaWakeups.departure``)."""

    def __init__(self, wakeups: KafkaWakeups, route: _Route, item: _Announcement) -> None:
        self.broker_id = route.leader
        self.leads = False
        self.item = item
        self.delivered = False
        self._wakeups = wakeups
        self._route = route

    def request(self) -> Any:
        self._wakeups.stats.requests += 1
        return self._wakeups._produce_request(self._route, [self.item])[0]

    def answered(self, response: Any) -> None:
        try:
            if isinstance(response, TransportError):
                raise response
            self._wakeups._produced(response, self._route)
        except (_Retry, _Unusable, TransportError) as e:
            # announce() sends it the usual way (and turns the channel off if it must).
            log.debug("group %r: departure not sent along (%s)", self._wakeups._group_id, e)
            return
        self.delivered = True
        self._wakeups.stats.sent += 1
        self._wakeups.stats.sent_with_leave += 1


@dataclass(frozen=True, slots=True)
class _Wakeup:
    sender: str
    member: str
    event: str
    left: int | None


def _parse(raw: bytes | None, group_id: str) -> _Wakeup | None:
    """A wake-up record's value, or None for one that is not what a member writes.

    Anyone who may write to the topic can put anything under a group's key: such a record
    is skipped, whatever its bytes (nesting deep enough for RecursionError included), and
    what reaches the logs is cut short."""
    try:
        value = json.loads(raw or b"")
        sender, member, event = value["sender"], value["member"], value["event"]
        if not all(isinstance(v, str) for v in (sender, member, event)):
            raise TypeError("not text")
    except (ValueError, KeyError, TypeError, RecursionError):
        log.debug("group %r: ignoring an unreadable wake-up %.100r", group_id, raw)
        return None
    # Only a departure's generation means something to the receiver (see wake()); a record
    # of another version without one, or with a non-integer, is a plain wake-up.
    left = value.get("generation") if event == "leave" else None
    if not isinstance(left, int) or isinstance(left, bool):
        left = None
    return _Wakeup(sender, _printable(member), _printable(event), left)


class _SharedListener:
    """The long-polling reader of one group's wake-ups, shared by the members of this
    process that have the same group, topic and connection settings: a process running 50
    members of a group reads each wake-up once (one connection, one fetch, one thread),
    not 50 times, and wakes them all from that one read. It also gathers their timeline
    records, which one member's publisher sends as one batch (see ``add_timeline``).

    It fetches through a member's transport (the first one still open): when that member
    closes, the fetch fails and the next member's transport takes over from the same
    position. The last member to leave stops it.
    """

    _registry: ClassVar[dict[Hashable, _SharedListener]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: Hashable, group_id: str) -> None:
        self._key = key
        self._group_id = group_id
        self._members: list[KafkaWakeups] = []
        self._stop = threading.Event()
        self._working = False
        # The members' timeline records, sent together (see add_timeline).
        self._timeline_lock = threading.Lock()
        self._timeline: list[_Announcement] = []
        self._timeline_sender: KafkaWakeups | None = None
        self._thread = threading.Thread(
            target=self._listen, name=f"coordination-wakeups-listener|{group_id}", daemon=True
        )

    @classmethod
    def join(cls, member: KafkaWakeups) -> _SharedListener:
        """The listener for ``member``, started if it is the first."""
        key = member._sharing_key()
        with cls._registry_lock:
            listener = cls._registry.get(key)
            first = listener is None
            if listener is None:
                listener = cls._registry[key] = _SharedListener(key, member._group_id)
            listener._members.append(member)
            if listener._working:
                member._working()
        if first:
            listener._thread.start()
        return listener

    def leave(self, member: KafkaWakeups) -> threading.Thread | None:
        """Stop reading for ``member``; the listener's thread (to join) if it was the last."""
        with self._registry_lock:
            if member in self._members:
                self._members.remove(member)
            if self._members:
                return None
            self._unregister_locked()
        self._stop.set()
        return self._thread

    def add_timeline(self, member: KafkaWakeups, item: _Announcement) -> bool:
        """Add one of ``member``'s timeline records to the batch the members share (a
        rebalance of 50 members in one process: one Produce, not 50). True if ``member``'s
        publisher is to send the batch: no other member's is due to."""
        with self._timeline_lock:
            self._timeline.append(item)
            sender = self._timeline_sender
            if sender is None or not _can_send(sender):
                self._timeline_sender = member
                return True
            return False

    def take_timeline(self, member: KafkaWakeups) -> list[_Announcement]:
        """The batch, for ``member``'s publisher to send now."""
        with self._timeline_lock:
            batch, self._timeline = self._timeline, []
            if self._timeline_sender is member:
                self._timeline_sender = None
            return batch

    def give_back_timeline(self, member: KafkaWakeups, batch: list[_Announcement]) -> None:
        """``member`` stops before it sent ``batch`` (taken from here) or the batch it was
        to send: another member's publisher sends them, when they are due."""
        with self._timeline_lock:
            self._timeline[:0] = batch
            sender = self._timeline_sender
            if sender is not None and sender is not member and _can_send(sender):
                return  # already due to go out with that member's
            self._timeline_sender = None
            if not self._timeline:
                return
            heir = next((m for m in self._members_now() if m is not member and _can_send(m)), None)
            if heir is None:
                return  # the last member: its flush (if it leaves) or nobody sends them
            self._timeline_sender = heir
            first = self._timeline[0]
        heir._queue.put(_Announcement.batch_due(self, since=first.queued_at))

    def _unregister_locked(self) -> None:
        """Take this listener out of the registry (a member started later starts another);
        the caller holds ``_registry_lock``."""
        if self._registry.get(self._key) is self:
            del self._registry[self._key]

    def _members_now(self) -> list[KafkaWakeups]:
        with self._registry_lock:
            return list(self._members)

    def _host(self) -> KafkaWakeups | None:
        """The member whose transport reads: the first one still open."""
        return next((m for m in self._members_now() if not m._transport.closed), None)

    def _received(self, raw: bytes | None) -> None:
        wakeup = _parse(raw, self._group_id)
        if wakeup is not None:
            probed: set[int] = set()  # one heartbeat per generation asks for all
            for member in self._members_now():
                member._deliver(wakeup, probed)

    def rebalancing(self, finder: KafkaWakeups, generation: int) -> None:
        """``finder``'s heartbeat found the group rebalancing away from ``generation``."""
        for member in self._members_now():
            if member is not finder and member._sibling_found is not None:
                member._sibling_found(generation)

    def _set_working(self) -> None:
        with self._registry_lock:
            self._working = True
        for member in self._members_now():
            member._working()

    def _listen(self) -> None:
        position: int | None = None
        delay = _BACKOFF_S[0]
        while not self._stop.is_set():
            host = self._host()
            if host is None:  # every member is closing
                self._stop.wait(_BACKOFF_S[0])
                continue
            try:
                route = host._located()
                if position is None:
                    position = host._end_offset(route)
                    self._set_working()  # listening from here on
                position = host._fetch(route, position, received=self._received)
                self._set_working()
                delay = _BACKOFF_S[0]
            except _Unusable as e:
                with self._registry_lock:
                    self._unregister_locked()  # a member started later tries again
                for member in self._members_now():
                    member._turn_off(str(e))
                return
            except (_Retry, TransportError) as e:
                if self._stop.is_set():
                    return
                if host._transport.closed:
                    continue  # its member is closing: the next one's transport reads on
                if isinstance(e, _OutOfRange):
                    position = None
                with self._registry_lock:
                    self._working = False
                for member in self._members_now():
                    member._failing(str(e))
                self._stop.wait(delay)
                delay = min(delay * 2, _BACKOFF_S[1])
            except Exception:  # never let the channel take the members down
                if self._stop.is_set() or host._transport.closed:
                    continue  # closed under the read: the next member's transport reads on
                log.exception("group %r: wake-up listener failed; retrying", self._group_id)
                self._stop.wait(_BACKOFF_S[1])


def fetch_request(topic: str, partition: int, position: int, max_wait_ms: int) -> Any:
    """A Fetch of one partition from ``position`` (up to 1 MiB), waiting up to
    ``max_wait_ms`` for a first record."""
    fetch_partition = FetchRequest.FetchTopic.FetchPartition(
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=position,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fetch_partition])],
        forgotten_topics_data=[],
        rack_id="",
        max_version=12,  # topics by name (v13 names them by id)
    )


def _can_send(member: KafkaWakeups) -> bool:
    """Whether ``member``'s publisher can still send a shared timeline batch."""
    return not member._stop.is_set() and not member._transport.closed


def _forget_listeners_after_fork() -> None:
    # A forked child has none of its parent's threads: its members must start their own.
    _SharedListener._registry = {}
    _SharedListener._registry_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_listeners_after_fork)


def _printable(text: str, limit: int = 200) -> str:
    """``text`` for a log line: at most ``limit`` characters, control characters escaped."""
    cut = text[:limit]
    shown = cut if cut.isprintable() else cut.encode("unicode_escape").decode("ascii")
    return shown + ("..." if len(text) > limit else "")
