"""Where a member learns the topics and their partition counts: the cluster, or a table.

:class:`ConsumerPartitioning` asks a :class:`TopicMetadata` for partition counts when it
leads an assignment, and for topic names when it subscribes to a pattern; its metadata
watcher asks both every ``metadata_max_age_ms`` to notice changes. By default the answers
come from the cluster (:class:`KafkaTopicMetadata`); a test or a simulation gives an
:class:`InMemoryTopicMetadata` and changes it as it likes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any, Protocol

from coordination.clock import Clock
from coordination.parts import check_int
from coordination.transport import open_admin_client

log = logging.getLogger("recipes.partitioning")


class TopicMetadata(Protocol):
    """The source of a member's topic metadata: Kafka's Metadata API, or a stand-in.

    Called from the membership thread (a leader's assignment, a pattern's subscription)
    and from the metadata watcher's thread, so an implementation must be thread-safe. It
    may block on I/O; an exception it raises fails that assignment (the engine retries
    the rebalance) or that check (the watcher tries again at its next look).
    """

    def partition_counts(self, topics: Iterable[str]) -> Mapping[str, int]:
        """The partition count of each of ``topics`` that exists; missing ones are left out."""
        ...

    def topic_names(self) -> Set[str]:
        """Every topic that exists, Kafka's internal ones (``__``-prefixed) excluded."""
        ...

    # Optional: ``partition_racks(topics) -> Mapping[str, Sequence[frozenset[str]]]``, the
    # racks of each partition's replicas (KIP-881). A source without it means no racks.


class InMemoryTopicMetadata:
    """Topic metadata from a table the caller keeps: for tests and simulations.

    Example:
        topics = InMemoryTopicMetadata({"orders": 6})
        member = ConsumerPartitioning("g", topics=["orders"], topic_metadata=topics,
                                      transport=transport, clock=clock, bootstrap_servers="x:1")
        ...
        topics.set_partitions("orders", 8)   # the leader rejoins at its next metadata check

    Thread-safe without a lock: every change replaces the whole table at once.
    """

    def __init__(self, partitions: Mapping[str, int] | None = None) -> None:
        """Start with ``partitions``: the partition count of each topic (default none)."""
        self._counts: dict[str, int] = {}
        self._racks: dict[str, tuple[frozenset[str], ...]] = {}
        for topic, count in (partitions or {}).items():
            self.set_partitions(topic, count)

    def set_racks(self, topic: str, racks: Sequence[Iterable[str]]) -> None:
        """Say on which racks each partition of ``topic`` has replicas (KIP-881), by
        partition number; racks of partitions beyond the list are unknown."""
        self._racks = {**self._racks, topic: tuple(frozenset(r) for r in racks)}

    def partition_racks(self, topics: Iterable[str]) -> dict[str, tuple[frozenset[str], ...]]:
        racks = self._racks
        return {t: racks[t] for t in set(topics) if t in racks}

    def set_partitions(self, topic: str, count: int) -> None:
        """Create ``topic`` with ``count`` partitions, or change its count.

        Raises:
            ValueError: ``topic`` is empty or ``count`` is not a positive int.
        """
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"a topic needs a non-empty name, got {topic!r}")
        check_int(
            f"topic {topic!r}: count", count, minimum=1, rule="a positive int", error=ValueError
        )
        self._counts = {**self._counts, topic: count}

    def delete_topic(self, topic: str) -> None:
        """Remove ``topic`` (nothing happens if it does not exist)."""
        self._counts = {t: n for t, n in self._counts.items() if t != topic}

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = self._counts
        return {t: counts[t] for t in set(topics) if t in counts}

    def topic_names(self) -> set[str]:
        return {t for t in self._counts if not t.startswith("__")}


class KafkaTopicMetadata:
    """Partition counts and topic names from the cluster, through one kafka-python admin client.

    The default :class:`TopicMetadata`: made by the member from its connection settings,
    connected at the first question, closed with the member.
    """

    def __init__(self, client_settings: Mapping[str, Any], clock: Clock) -> None:
        self._config = dict(client_settings)
        # Serializes use of the one admin client (not thread-safe itself).
        self._lock = clock.lock()
        self._admin: Any = None

    def _client(self) -> Any:
        if self._admin is None:
            self._admin = open_admin_client(self._config)
        return self._admin

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        with self._lock:
            described = self._client().describe_topics(wanted)
        counts: dict[str, int] = {}
        for t in described:
            name = t.get("topic") or t.get("name")
            if t.get("error_code", 0) == 0 and name and t.get("partitions"):
                counts[name] = len(t["partitions"])
        return counts

    def partition_racks(self, topics: Iterable[str]) -> dict[str, list[frozenset[str]]]:
        """The racks of each partition's replicas (brokers' ``broker.rack``), per topic;
        topics whose brokers have no rack are left out."""
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        with self._lock:
            brokers = self._client().describe_cluster()["brokers"]
            rack_of = {b["broker_id"]: b["rack"] for b in brokers if b.get("rack")}
            if not rack_of:
                return {}
            described = self._client().describe_topics(wanted)
        racks: dict[str, list[frozenset[str]]] = {}
        for t in described:
            name = t.get("topic") or t.get("name")
            if t.get("error_code", 0) or not name:
                continue
            by_partition = {
                p["partition_index"]: frozenset(
                    rack_of[n] for n in p.get("replica_nodes", ()) if n in rack_of
                )
                for p in t.get("partitions", ())
            }
            racks[name] = [by_partition.get(i, frozenset()) for i in range(len(by_partition))]
        return racks

    def topic_names(self) -> set[str]:
        with self._lock:
            names = self._client().list_topics()
        return {n for n in names if not n.startswith("__")}

    def close(self) -> None:
        """Close the admin client, if it was connected (idempotent)."""
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
