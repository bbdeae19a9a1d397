"""Where a :class:`~recipes.partitioning.Consumer` gets its records: the fetcher interface,
and the default fetcher (kafka-python's ``KafkaConsumer``, used for fetching only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .protocol import TopicPartition


class RecordFetcher(Protocol):
    """Reads records of the partitions it is assigned, each from its own position.

    The :class:`Consumer` decides what is fetched and from where (its group membership
    owns the partitions; it assigns and seeks the fetcher); a fetcher only reads. The
    default is kafka-python's ``KafkaConsumer`` made from the consumer's settings; a test
    or a simulation passes its own (``Consumer(..., fetcher=...)``).

    Records are objects with at least an ``offset`` attribute (kafka-python's
    ``ConsumerRecord`` by default). Calls come from the consumer's user thread and from
    its membership thread, never two at once (the consumer holds its lock).

    Optional: ``highwater(partition) -> int | None`` (the partition's end as the last fetch
    saw it), and ``wakeup()``, called from another thread while a poll may run, to end that
    poll's wait at once: a rebalance callback waiting for the consumer's lock then gets it
    without waiting for the slice (the lean fetcher has it; kafka-python's cannot).
    """

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Fetch exactly these partitions from now on; kept ones keep their positions."""
        ...

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read the (assigned) ``partition`` from ``offset`` on; drop what was fetched."""
        ...

    def position(self, partition: TopicPartition, timeout_ms: int) -> int | None:
        """The (assigned) partition's position; for one never sought, where the consumer's
        ``auto_offset_reset`` starts it. None if not found within ``timeout_ms``."""
        ...

    def poll(self, timeout_ms: int) -> Mapping[TopicPartition, Sequence[Any]]:
        """Records fetched for assigned partitions, in offset order per partition, waiting
        up to ``timeout_ms`` (on the consumer's clock) when there are none. Each returned
        record moves its partition's position past it."""
        ...

    def close(self) -> None:
        """Release the fetcher's connections."""
        ...


class KafkaRecordFetcher:
    """The default fetcher: kafka-python's ``KafkaConsumer``, with no group of its own."""

    def __init__(self, **config: Any) -> None:
        from kafka import KafkaConsumer

        self._consumer = KafkaConsumer(**config)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._consumer.assign([_kafka_tp(tp) for tp in partitions])

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(_kafka_tp(partition), offset)

    def position(self, partition: TopicPartition, timeout_ms: int) -> int | None:
        offset = self._consumer.position(_kafka_tp(partition), timeout_ms=timeout_ms)
        return None if offset is None else int(offset)

    def poll(self, timeout_ms: int) -> Mapping[TopicPartition, Sequence[Any]]:
        # kafka-python's TopicPartition is a named tuple equal to this library's.
        fetched: Mapping[TopicPartition, Sequence[Any]] = self._consumer.poll(timeout_ms=timeout_ms)
        return fetched

    def close(self) -> None:
        self._consumer.close()

    def end_offsets(
        self, partitions: Sequence[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int]:
        """The offset after each partition's last record (asks the brokers)."""
        ends = self._consumer.end_offsets([_kafka_tp(tp) for tp in partitions], timeout_ms)
        return {TopicPartition(tp.topic, tp.partition): int(o) for tp, o in ends.items()}

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end as of the last fetch response (no request); None if unknown."""
        end = self._consumer.highwater(_kafka_tp(partition))
        return None if end is None else int(end)


def _kafka_tp(tp: TopicPartition) -> Any:
    from kafka import TopicPartition as KafkaTopicPartition

    return KafkaTopicPartition(tp.topic, tp.partition)
