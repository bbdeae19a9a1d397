"""The lean fetcher's engine (``coordination._fetch``) in the simulator: its leader links,
Metadata, ListOffsets and OffsetForLeaderEpoch answered by the simulated cluster, on
simulated time.

The consumer recipes' hosts read through :class:`SimFetcher` (one round trip per poll); a
host that draws the lean fetcher reads through :func:`lean_fetcher` instead: the real
``FetchEngine`` (the one ``Consumer(fetcher="lean")`` runs), whose Fetch requests are
answered here as a leader answers them, so its positions, fetches in flight across polls,
stale answers, timeouts, reconnects and leader lookups run under the history's faults:

- the partitions' leader is the lowest-numbered broker that is up (a stopped broker's
  partitions move, with a new leader epoch); a Fetch to another broker is answered
  NOT_LEADER_OR_FOLLOWER, one to a stopped broker or from an isolated host never, nor one
  whose request or answer a network partition drops (the engine gives up on it after
  ``request_timeout_ms``, reconnects after a backoff and looks the leaders up again);
- the leader holds a Fetch until ``fetch_min_bytes`` are there (25 records of a partition
  here), at most ``fetch_max_wait_ms``, and answers with whole batches from the fetch
  offset;
- sessions are off (``enable_incremental_fetch_sessions=False``: every Fetch is full);
- a move's new leader is asked where the last fetched record's epoch ends (KIP-320) and
  answers the log's end: the simulated logs are never truncated, so the check always
  passes (its truncation branches are unit-tested, ``tests/unit/test_lean_fetcher.py``).

Record batches hold ten records each (the last records, not ten yet, one each), and each is
encoded once per process (a batch holds no partition), so the histories pay for decoding,
as the engine does, not for encoding.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kafka.record import MemoryRecordsBuilder

from coordination._fetch.cluster import EARLIEST, Metadata, Partition
from coordination._fetch.engine import FetchEngine
from coordination._fetch.settings import fetch_settings
from coordination._protocol import fetch_codec as codec
from coordination.testing.simulation import Scheduler, SimTransport
from coordination.transport import TransportError

# Kafka's error codes the simulated leader answers with.
_OFFSET_OUT_OF_RANGE = 1
_NOT_LEADER_OR_FOLLOWER = 6
# At most this many records per partition in one answer (max_partition_fetch_bytes).
_MAX_RECORDS = 25
REQUEST_TIMEOUT_MS = 5000

# A producer's batches: BATCH records from each multiple of BATCH, once all exist; the
# records after the last whole one, one to a batch.
BATCH = 10
_batches: dict[tuple[int, int], bytes] = {}


def _batch(offset: int, count: int) -> bytes:
    """A batch of ``count`` records from ``offset`` (made once per process)."""
    found = _batches.get((offset, count))
    if found is None:
        builder = MemoryRecordsBuilder(2, 0, 1 << 12, offset=offset)
        for _ in range(count):
            builder.append(0, None, b"v", [])
        builder.close()
        found = _batches[(offset, count)] = bytes(builder.buffer())
    return found


def _records(start: int, end: int) -> bytes:
    """The batches holding offsets ``start`` to ``end`` - 1 (the first may begin before
    ``start``, as a leader answers with whole batches)."""
    out = []
    offset = start
    while offset < end:
        base = offset - offset % BATCH
        if base + BATCH <= end:
            out.append(_batch(base, BATCH))
            offset = base + BATCH
        else:
            out.append(_batch(offset, 1))
            offset += 1
    return b"".join(out)


class SimLeaders:
    """The simulated cluster as the lean fetcher sees it: each topic's id and partitions
    (``topics()``: name -> (id, partition count, its SimTopic)), the partitions' leader,
    and the network between this host and the brokers."""

    def __init__(
        self,
        topics: Callable[[], Mapping[str, tuple[uuid.UUID, int, Any]]],
        transport: SimTransport,
        clock: Scheduler,
        rng: random.Random,
    ) -> None:
        self.topics = topics
        self._transport = transport
        self._cluster = transport.cluster
        self.clock = clock
        self._rng = rng
        self._leader: int | None = None
        self._epoch = 0
        # Set when an answer reaches this host, so that the engine's wait ends with it.
        self.arrived = clock.event()

    def by_id(self) -> dict[uuid.UUID, tuple[str, Any]]:
        """The topics by id: (name, SimTopic)."""
        return {topic_id: (name, topic) for name, (topic_id, _, topic) in self.topics().items()}

    def leader(self) -> tuple[int, int] | None:
        """(broker id, leader epoch) of every partition now; None if no broker is up."""
        up = [n for n, b in sorted(self._cluster.brokers.items()) if b.up]
        leader = up[0] if up else None
        if leader != self._leader:
            self._leader = leader
            self._epoch += 1
        return None if leader is None else (leader, self._epoch)

    def latency(self) -> float:
        extra = 0.0
        if self.clock.monotonic() < self._cluster.slow_until:
            extra = self._rng.uniform(0.0, self._cluster.slow_extra_s)
        return self._rng.uniform(0.0002, 0.002) + extra

    def passes(self, node: int, *, answer: bool) -> bool:
        """Whether a request to ``node`` (or its answer) gets through now."""
        now = self.clock.monotonic()
        broker = self._cluster.brokers.get(node)
        if broker is None or not broker.up or now < self._transport.isolated_until:
            return False
        return now >= (broker.drop_responses_until if answer else broker.drop_requests_until)

    def sleep(self, seconds: float) -> None:
        """The engine's wait: until an answer arrives, at most ``seconds``."""
        if not self.arrived.is_set():
            self.clock.sleep(seconds, self.arrived)
        self.arrived.clear()


class SimMetadata:
    """The fetcher's :class:`~coordination._fetch.cluster.Cluster`: Metadata and ListOffsets
    answered after a round trip, or a TransportError after ``timeout_s`` when no broker can
    be reached."""

    def __init__(self, leaders: SimLeaders) -> None:
        self.metadata = Metadata()
        self._leaders = leaders

    def _round_trip(self, node: int | None, timeout_s: float, what: str) -> None:
        clock = self._leaders.clock
        if node is None or not self._leaders.passes(node, answer=False):
            clock.sleep(timeout_s, clock.event())
            raise TransportError(f"{what}: no answer in {timeout_s:.1f}s (simulated)")
        clock.sleep(2 * self._leaders.latency(), clock.event())

    def refresh(self, topics: Collection[str], timeout_s: float) -> None:
        leader = self._leaders.leader()
        self._round_trip(None if leader is None else leader[0], timeout_s, "Metadata")
        leader = self._leaders.leader()  # as the answer left the broker
        known = self._leaders.topics()
        m = self.metadata
        m.brokers = {n: (f"broker-{n}", 9092) for n in (1, 2, 3)}
        m.topic_ids = {name: topic_id for name, (topic_id, _, _) in known.items()}
        m.topic_names = {topic_id: name for name, topic_id in m.topic_ids.items()}
        m.leaders = {}
        if leader is not None:
            for name, (_, count, _) in known.items():
                for p in range(count):
                    m.leaders[(name, p)] = leader
        m.topic_errors = {t: 3 for t in topics if t not in known}  # UNKNOWN_TOPIC_OR_PARTITION

    def list_offsets(
        self,
        node: int,
        wanted: Mapping[Partition, tuple[int, int]],
        isolation_level: int,
        timeout_s: float,
    ) -> dict[Partition, tuple[int, int]]:
        self._round_trip(node, timeout_s, "ListOffsets")
        leader = self._leaders.leader()
        known = self._leaders.topics()
        now = self._leaders.clock.monotonic()
        found: dict[Partition, tuple[int, int]] = {}
        for (topic, partition), (timestamp, _) in wanted.items():
            if leader is None or leader[0] != node:
                found[(topic, partition)] = (_NOT_LEADER_OR_FOLLOWER, -1)
            else:
                end = known[topic][2].end(now)
                found[(topic, partition)] = (0, 0 if timestamp == EARLIEST else end)
        return found

    def epoch_ends(
        self, node: int, wanted: Mapping[Partition, tuple[int, int]], timeout_s: float
    ) -> dict[Partition, tuple[int, int, int]]:
        """The simulated logs are never truncated: every epoch asked of the leader ends at
        the log's end (or later), so a check after a move always finds the position good."""
        self._round_trip(node, timeout_s, "OffsetForLeaderEpoch")
        leader = self._leaders.leader()
        known = self._leaders.topics()
        now = self._leaders.clock.monotonic()
        found: dict[Partition, tuple[int, int, int]] = {}
        for (topic, partition), (epoch, _) in wanted.items():
            if leader is None or leader[0] != node:
                found[(topic, partition)] = (_NOT_LEADER_OR_FOLLOWER, -1, -1)
            else:
                found[(topic, partition)] = (0, epoch, known[topic][2].end(now))
        return found

    def close(self) -> None:
        pass


class SimLink:
    """A leader link: a Fetch is answered at the time a leader would answer it, or never."""

    def __init__(self, leaders: SimLeaders, node: int) -> None:
        self._leaders = leaders
        self._node = node
        self._request: codec.FetchRequest | None = None
        self._answered_at = 0.0  # when the leader answers (its records as of then)
        self._sent = 0  # which request is in flight (an earlier one's arrival is ignored)
        self._delivered = False
        self.sent_at: float | None = None

    @property
    def in_flight(self) -> bool:
        return self._request is not None

    def begin(self, request: codec.FetchRequest, timeout_s: float) -> None:
        leaders = self._leaders
        clock = leaders.clock
        now = clock.monotonic()
        self._request, self.sent_at = request, now
        self._sent += 1
        self._delivered = False
        arrives = now + leaders.latency()
        # Held until min_bytes are there (a record each, with fetch_min_bytes=1; a whole
        # answer's worth of some partition, with more), at most max_wait.
        held_until = arrives + request.max_wait_ms / 1000
        by_id = leaders.by_id()
        for t in request.topics:
            if t.topic_id not in by_id:
                continue
            _, topic = by_id[t.topic_id]
            for p in t.partitions:
                wanted = p.fetch_offset + (0 if request.min_bytes <= 1 else _MAX_RECORDS - 1)
                held_until = min(held_until, max(arrives, topic.time_of(wanted)))
        self._answered_at = held_until
        if leaders.passes(self._node, answer=False):
            sent = self._sent
            clock.call_at(held_until + leaders.latency(), lambda: self._arrive(sent))

    def _arrive(self, sent: int) -> None:
        if self._request is None or sent != self._sent:
            return  # abandoned, or another request is in flight now
        if self._leaders.passes(self._node, answer=True):  # else dropped on the way back
            self._delivered = True
            self._leaders.arrived.set()

    def fileno(self) -> int | None:
        return None

    def answer_buffered(self) -> bool:
        return self._request is not None and self._delivered

    def finish(self, timeout_s: float) -> codec.FetchResponse:
        request = self._request
        assert request is not None and self.answer_buffered()
        self._request, self.sent_at = None, None
        leaders = self._leaders
        leader = leaders.leader()
        by_id = leaders.by_id()
        topics = []
        for t in request.topics:
            name, topic = by_id.get(t.topic_id, (None, None))
            parts = []
            for p in t.partitions:
                if topic is None:
                    continue
                if leader is None or leader[0] != self._node:
                    data = codec.FetchPartitionData(p.partition, _NOT_LEADER_OR_FOLLOWER, -1)
                else:
                    end = topic.end(self._answered_at)
                    if p.fetch_offset > end:
                        data = codec.FetchPartitionData(p.partition, _OFFSET_OUT_OF_RANGE, end)
                    else:
                        last = min(end, p.fetch_offset + _MAX_RECORDS)
                        records = _records(p.fetch_offset, last)
                        data = codec.FetchPartitionData(
                            p.partition, 0, end, end, 0, records=records or None
                        )
                parts.append(data)
            if name is not None:
                topics.append(codec.FetchTopicResponse(None, t.topic_id, tuple(parts)))
        return codec.FetchResponse(0, 0, 0, tuple(topics))

    def abandon(self) -> None:
        self._request, self.sent_at = None, None
        self._delivered = False

    def close(self) -> None:
        self.abandon()


def lean_fetcher(
    topics: Callable[[], Mapping[str, tuple[uuid.UUID, int, Any]]],
    transport: SimTransport,
    clock: Scheduler,
    rng: random.Random,
) -> FetchEngine[Any]:
    """The lean fetcher's engine over the simulated cluster, for ``Consumer(fetcher=...)``
    (``rng``: its latencies)."""
    leaders = SimLeaders(topics, transport, clock, rng)
    settings = fetch_settings(
        {
            "bootstrap_servers": "broker-1:9092",
            "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": 100,
            # Answers every fetch_max_wait_ms once caught up, as SimFetcher's polls come,
            # rather than one per record (half the histories' CPU again).
            "fetch_min_bytes": 1024,
            "enable_incremental_fetch_sessions": False,
            "check_crcs": False,
            "request_timeout_ms": REQUEST_TIMEOUT_MS,
        },
        connect=False,
    )
    return FetchEngine(
        settings,
        SimMetadata(leaders),
        lambda node, host, port: SimLink(leaders, node),
        clock=clock.monotonic,
        sleep=leaders.sleep,
    )
