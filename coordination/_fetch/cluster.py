"""Where each partition's leader is, and its offsets: Metadata, ListOffsets and
OffsetForLeaderEpoch.

kafka-python's message classes encode and decode them; they travel on the fetcher's own
direct connections (no I/O thread, as everywhere in the lean fetcher). All are rare: at
assignment, after a leader moved, and when a position is reset or checked.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from .._transport.link import DirectConnection, DirectSettings
from ..transport import TransportError

log = logging.getLogger("coordination.fetching")

Partition = tuple[str, int]
# ListOffsets timestamps: the log's start and its end (Kafka's EARLIEST and LATEST).
EARLIEST = -2
LATEST = -1
_METADATA_MAX_VERSION = 12  # the first with topic ids in every answer (Kafka 3.1+)


@dataclass(slots=True)
class Metadata:
    """What the last Metadata answers said: brokers, topic ids, each partition's leader."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    # (topic, partition) -> (leader id, leader epoch); absent: no leader known.
    leaders: dict[Partition, tuple[int, int]] = field(default_factory=dict)
    # Topics whose lookup failed, with Kafka's code (e.g. 3, 29).
    topic_errors: dict[str, int] = field(default_factory=dict)


class Cluster(Protocol):
    """The fetcher's view of the cluster (a fake one in unit tests)."""

    metadata: Metadata

    def refresh(self, topics: Collection[str], timeout_s: float) -> None:
        """Look up ``topics`` (their ids, partitions' leaders and epochs) into ``metadata``.

        Raises:
            TransportError: no broker answered within ``timeout_s``.
        """
        ...

    def list_offsets(
        self,
        node: int,
        wanted: Mapping[Partition, tuple[int, int]],
        isolation_level: int,
        timeout_s: float,
    ) -> dict[Partition, tuple[int, int]]:
        """Each partition's (error code, offset) at its timestamp (EARLIEST, LATEST), asked
        of its leader ``node``; ``wanted`` maps each to (timestamp, current leader epoch).

        Raises:
            TransportError: the leader did not answer within ``timeout_s``.
        """
        ...

    def epoch_ends(
        self,
        node: int,
        wanted: Mapping[Partition, tuple[int, int]],
        timeout_s: float,
    ) -> dict[Partition, tuple[int, int, int]]:
        """KIP-320's OffsetForLeaderEpoch: each partition's (error code, epoch, end offset)
        for the leader epoch it names, asked of its leader ``node``; ``wanted`` maps each to
        (leader epoch of its last record fetched, current leader epoch). The end offset is
        where that epoch's records end in the leader's log (the next epoch's first offset):
        one below an offset this side fetched under that epoch means the log was truncated
        there (an unclean leader election). -1 and -1 if the leader knows no such epoch.

        Raises:
            TransportError: the leader did not answer within ``timeout_s``.
        """
        ...

    def close(self) -> None: ...


class BrokerCluster:
    """:class:`Cluster` on direct connections: the bootstrap servers until a Metadata answer
    names the brokers, then any broker for Metadata and each leader for ListOffsets."""

    def __init__(
        self,
        servers: Sequence[tuple[str, int]],
        settings: DirectSettings,
        connect: Callable[[str, str, int, DirectSettings], DirectConnection] = DirectConnection,
    ) -> None:
        self.metadata = Metadata()
        self._servers = list(servers)
        self._settings = settings
        self._connect = connect
        self._lookup: DirectConnection | None = None  # the connection Metadata goes on
        self._offsets: dict[int, DirectConnection] = {}

    def refresh(self, topics: Collection[str], timeout_s: float) -> None:
        request_topics = [MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(topics)]
        failures = []
        for host, port in self._candidates():
            conn = self._lookup
            if conn is None or (conn.host, conn.port) != (host, port):
                if conn is not None:
                    conn.close()
                conn = self._lookup = self._connect("fetcher metadata", host, port, self._settings)
            request = MetadataRequest(
                topics=request_topics,
                allow_auto_topic_creation=False,
                max_version=_METADATA_MAX_VERSION,
            )
            try:
                response = conn.exchange(request, timeout_s)
            except TransportError as e:
                failures.append(str(e))
                conn.close()
                self._lookup = None
                continue
            self._absorb(response, topics)
            return
        raise TransportError("no broker answered Metadata: " + "; ".join(failures))

    def _candidates(self) -> list[tuple[str, int]]:
        """The connection in use first, then the known brokers, then the bootstrap servers."""
        order: list[tuple[str, int]] = []
        if self._lookup is not None:
            order.append((self._lookup.host, self._lookup.port))
        order += sorted(self.metadata.brokers.values()) + self._servers
        return list(dict.fromkeys(order))

    def _absorb(self, response: Any, topics: Collection[str]) -> None:
        meta = self.metadata
        meta.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        asked = set(topics)
        for tp in [tp for tp in meta.leaders if tp[0] in asked]:
            del meta.leaders[tp]
        for t in response.topics:
            meta.topic_errors.pop(t.name, None)
            if t.error_code:
                meta.topic_errors[t.name] = t.error_code
                continue
            topic_id = uuid.UUID(str(t.topic_id))
            old = meta.topic_ids.get(t.name)
            if old is not None and old != topic_id:
                meta.topic_names.pop(old, None)  # deleted and created again
            meta.topic_ids[t.name] = topic_id
            meta.topic_names[topic_id] = t.name
            for p in t.partitions:
                if p.leader_id >= 0 and p.leader_id in meta.brokers:
                    meta.leaders[(t.name, p.partition_index)] = (p.leader_id, p.leader_epoch)

    def _leader_connection(self, node: int) -> DirectConnection:
        """The connection to broker ``node`` that offsets are asked on."""
        conn = self._offsets.get(node)
        address = self.metadata.brokers.get(node)
        if address is None:
            raise TransportError(f"broker {node} is not in the cluster's metadata")
        if conn is None or (conn.host, conn.port) != address:
            if conn is not None:
                conn.close()
            conn = self._offsets[node] = self._connect(
                f"fetcher offsets {node}", address[0], address[1], self._settings
            )
        return conn

    def _ask_leader(self, node: int, request: Any, timeout_s: float) -> Any:
        conn = self._leader_connection(node)
        try:
            return conn.exchange(request, timeout_s)
        except TransportError:
            conn.close()
            del self._offsets[node]
            raise

    def epoch_ends(
        self,
        node: int,
        wanted: Mapping[Partition, tuple[int, int]],
        timeout_s: float,
    ) -> dict[Partition, tuple[int, int, int]]:
        by_topic = _by_topic(
            wanted,
            lambda index, asked: (
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=index, current_leader_epoch=asked[1], leader_epoch=asked[0]
                )
            ),
        )
        request = OffsetForLeaderEpochRequest(
            replica_id=-1,  # a consumer's (the version 3+ field; -2 would be a debugger)
            topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        response = self._ask_leader(node, request, timeout_s)
        return {
            (t.topic, p.partition): (p.error_code, int(p.leader_epoch), int(p.end_offset))
            for t in response.topics
            for p in t.partitions
        }

    def list_offsets(
        self,
        node: int,
        wanted: Mapping[Partition, tuple[int, int]],
        isolation_level: int,
        timeout_s: float,
    ) -> dict[Partition, tuple[int, int]]:
        by_topic = _by_topic(
            wanted,
            lambda index, asked: ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=index, current_leader_epoch=asked[1], timestamp=asked[0]
            ),
        )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation_level,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        response = self._ask_leader(node, request, timeout_s)
        found: dict[Partition, tuple[int, int]] = {}
        for t in response.topics:
            for p in t.partitions:
                found[(t.name, p.partition_index)] = (p.error_code, int(p.offset))
        return found

    def close(self) -> None:
        for conn in [self._lookup, *self._offsets.values()]:
            if conn is not None:
                conn.close()
        self._lookup = None
        self._offsets.clear()


def _by_topic(
    wanted: Mapping[Partition, tuple[int, int]], entry: Callable[[int, tuple[int, int]], Any]
) -> dict[str, list[Any]]:
    """A leader request's partitions, grouped by topic in order: ``entry`` makes each from
    its index and what ``wanted`` asks of it."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), asked in sorted(wanted.items()):
        by_topic.setdefault(topic, []).append(entry(index, asked))
    return by_topic
