"""A Kafka consumer on this library's group membership: fetch owned partitions, commit fenced."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from typing_extensions import Self

from coordination import Generation, OffsetAndMetadata
from coordination.errors import ConfigurationError, CoordinationError, CoordinatorStateError

from ._listener import RebalanceListener
from ._partitioning import ConsumerPartitioning
from .assignors import PartitionAssignor
from .protocol import TopicPartition

log = logging.getLogger("recipes.partitioning")

# kafka-python KafkaConsumer settings that shape fetching (not group membership).
FETCH_SETTINGS = frozenset(
    {
        "auto_offset_reset",
        "fetch_min_bytes",
        "fetch_max_wait_ms",
        "fetch_max_bytes",
        "max_partition_fetch_bytes",
        "max_poll_records",
        "isolation_level",
        "check_crcs",
        "key_deserializer",
        "value_deserializer",
        "receive_buffer_bytes",
        "send_buffer_bytes",
    }
)
_POLL_SLICE_MS = 100  # the fetch lock is released this often so rebalances are not held up


class PartitionsNotOwnedError(CoordinationError):
    """Offsets were to be committed for partitions this consumer does not own (any more).

    They were revoked or lost in a rebalance and may belong to another member now; their
    offsets were not committed (the others in the same call were not either)."""


class Consumer:
    """A Kafka consumer whose group membership is this library's: subscribe, poll, commit.

    Example:
        with Consumer("orders-workers", topics=["orders"],
                      bootstrap_servers="localhost:9092") as consumer:
            while True:
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    for record in records:
                        handle(record)
                consumer.commit()        # the positions of the records returned so far

    It joins the group with Kafka's ``consumer`` protocol (so Java and librdkafka consumers
    can share the group), fetches the records of the partitions it owns with kafka-python,
    and commits offsets with its member id and generation: a consumer that lost its
    partitions in a rebalance cannot commit over their new owner (the broker refuses with
    ``CommitFailedError``; a partition it no longer owns raises
    :class:`PartitionsNotOwnedError` before anything is sent).

    Threads:
        Rebalances happen on the group's membership thread, not inside :meth:`poll`; the
        listener runs there (see :class:`RebalanceListener`). Records a :meth:`poll`
        returns belong to partitions owned at that moment; :meth:`poll`, :meth:`commit`,
        :meth:`pause` and :meth:`resume` may be called from one user thread and from the
        listener's callbacks.

    Pause and resume:
        Paused partitions return no records. As in Java, the EAGER protocol forgets all
        paused state at each rebalance (everything is revoked), COOPERATIVE only that of the
        revoked partitions.
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        assignors: Sequence[PartitionAssignor] | None = None,
        listener: RebalanceListener | None = None,
        auto_offset_reset: str = "earliest",
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start` (or ``with``).

        Args:
            group_id, topics, pattern, assignors: as for :class:`ConsumerPartitioning`.
            listener: told of revoked, assigned and lost partitions.
            auto_offset_reset: where to start in a partition without a committed offset:
                ``"earliest"`` or ``"latest"`` (Kafka ``auto.offset.reset``).
            **settings: group settings (see :class:`coordination.Coordinator`) and
                kafka-python fetch settings (``max_poll_records``, ``fetch_max_wait_ms``,
                ``isolation_level``, ``value_deserializer``, ...).
        """
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigurationError(
                f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}"
            )
        fetch = {k: settings.pop(k) for k in list(settings) if k in FETCH_SETTINGS}
        self._user_listener = listener or RebalanceListener()
        self._group = ConsumerPartitioning(
            group_id,
            topics=topics,
            pattern=pattern,
            assignors=assignors,
            listener=_Handover(self),
            **settings,
        )
        self._fetch_config = {
            **self._group.config.client_settings(),
            **fetch,
            "auto_offset_reset": auto_offset_reset,
            "enable_auto_commit": False,
            "client_id": self._group.config.client_id,
        }
        self._lock = threading.RLock()
        self._fetcher: Any = None
        self._positions: dict[TopicPartition, int] = {}  # next offset to hand to the user
        self._paused: set[TopicPartition] = set()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def group(self) -> ConsumerPartitioning:
        """The group member underneath (generation, metrics, is_leader, ...)."""
        return self._group

    def start(self) -> None:
        """Join the group in the background; returns at once (idempotent).

        Raises:
            CoordinatorStateError: the consumer was closed.
        """
        from kafka import KafkaConsumer

        with self._lock:
            if self._closed:
                raise CoordinatorStateError(f"consumer of group {self._group.group_id!r} is closed")
            if self._fetcher is None:
                self._fetcher = KafkaConsumer(**self._fetch_config)
        self._group.start()

    def close(self, timeout: float = 30.0) -> None:
        """Revoke (listener first), leave the group, close the fetcher (idempotent)."""
        self._group.close(timeout)
        with self._lock:
            self._closed = True
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ records

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer owns now."""
        return self._group.owned()

    def poll(self, timeout_ms: int = 1000) -> dict[TopicPartition, list[Any]]:
        """Records of owned, unpaused partitions, fetched within ``timeout_ms``.

        Returns:
            kafka-python ``ConsumerRecord`` lists by partition, possibly empty.

        Raises:
            CoordinatorStateError: the consumer was closed.
        """
        if self._fetcher is None:
            self.start()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            with self._lock:
                if self._closed:
                    raise CoordinatorStateError(
                        f"consumer of group {self._group.group_id!r} is closed"
                    )
                fetched = self._fetcher.poll(
                    timeout_ms=max(
                        0, min(_POLL_SLICE_MS, int((deadline - time.monotonic()) * 1000))
                    )
                )
                owned = self._group.owned()
                result: dict[TopicPartition, list[Any]] = {}
                for ktp, records in fetched.items():
                    tp = TopicPartition(ktp.topic, ktp.partition)
                    if tp not in owned or tp in self._paused or not records:
                        continue  # revoked while the fetch was in flight
                    result[tp] = records
                    self._positions[tp] = records[-1].offset + 1
            if result or time.monotonic() >= deadline:
                return result

    def __iter__(self) -> Iterator[Any]:
        """Records one by one, forever (until :meth:`close`)."""
        while not self._closed:
            for records in self.poll().values():
                yield from records

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """Commit offsets, fenced by this member's generation.

        Args:
            offsets: next offset to read by partition; default: the position after the last
                record :meth:`poll` returned, for every owned partition.

        Raises:
            PartitionsNotOwnedError: some partitions are not owned (nothing was committed).
            CommitFailedError: the broker refused: the member lost its generation (a
                rebalance or an expired session); nothing was committed.
        """
        with self._lock:
            owned = self._group.owned()
            generation: Generation = self._group.generation()
            if offsets is None:
                wanted = {
                    tp: OffsetAndMetadata(o) for tp, o in self._positions.items() if tp in owned
                }
            else:
                wanted = {
                    TopicPartition(*tp): o
                    if isinstance(o, OffsetAndMetadata)
                    else OffsetAndMetadata(o)
                    for tp, o in offsets.items()
                }
                foreign = sorted(tp for tp in wanted if tp not in owned)
                if foreign:
                    raise PartitionsNotOwnedError(
                        f"group {self._group.group_id!r}: not committing: this consumer does "
                        f"not own {', '.join(f'{t}-{p}' for t, p in foreign)} (revoked or lost "
                        "in a rebalance)"
                    )
            # Committed under the lock, so ownership cannot change between check and commit.
            self._group.commit_offsets(
                {(tp.topic, tp.partition): om for tp, om in wanted.items()},
                generation=generation,
                timeout=timeout,
            )

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions``."""
        found = self._group.committed_offsets([(t, p) for t, p in partitions])
        return {TopicPartition(*k): (v.offset if v else None) for k, v in found.items()}

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of these (owned) partitions until :meth:`resume`."""
        with self._lock:
            self._paused |= {TopicPartition(*tp) for tp in partitions} & self._group.owned()

    def resume(self, *partitions: TopicPartition) -> None:
        with self._lock:
            self._paused -= {TopicPartition(*tp) for tp in partitions}

    def paused(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._paused)

    # ------------------------------------------------------------------ ownership changes

    # The user's listener runs without self._lock: it may wait for another thread that
    # polls or commits (the partitions are still owned meanwhile, so those still work).

    def _revoked(self, partitions: frozenset[TopicPartition], lost: bool) -> None:
        try:
            if lost:
                self._user_listener.on_partitions_lost(partitions)
            else:
                self._user_listener.on_partitions_revoked(partitions)
        finally:
            with self._lock:
                self._paused -= partitions
                for tp in partitions:
                    self._positions.pop(tp, None)
                self._reassign_fetcher(self._group.owned() - partitions)

    def _assigned(self, partitions: frozenset[TopicPartition]) -> None:
        committed = (
            self._group.committed_offsets([(tp.topic, tp.partition) for tp in partitions])
            if partitions
            else {}
        )
        with self._lock:
            self._reassign_fetcher(self._group.owned())
            for (topic, partition), om in committed.items():
                tp = TopicPartition(topic, partition)
                if om is not None and self._fetcher is not None:
                    self._fetcher.seek(_kafka_tp(tp), om.offset)
                    self._positions[tp] = om.offset
        self._user_listener.on_partitions_assigned(partitions)

    def _reassign_fetcher(self, partitions: frozenset[TopicPartition]) -> None:
        if self._fetcher is not None and not self._closed:
            self._fetcher.assign([_kafka_tp(tp) for tp in sorted(partitions)])


class _Handover(RebalanceListener):
    """Applies ownership changes to the consumer's fetcher around the user's listener."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._consumer._revoked(partitions, lost=False)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._consumer._revoked(partitions, lost=True)

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._consumer._assigned(partitions)


def _kafka_tp(tp: TopicPartition) -> Any:
    from kafka import TopicPartition as KafkaTopicPartition

    return KafkaTopicPartition(tp.topic, tp.partition)
