"""Consumer partitioning over Kafka's own ``consumer`` protocol.

:class:`Consumer` is a Kafka consumer whose group membership is this library's: it can
share a group with Kafka's Java consumer and librdkafka-based consumers. Underneath,
:class:`ConsumerPartitioning` is the group side alone (ownership of partitions, with a
:class:`RebalanceListener`), for services that read partitions their own way. The
assignors are in :mod:`recipes.partitioning.assignors`, the wire formats in
:mod:`recipes.partitioning.protocol`. A member learns topics and partition counts from a
:class:`TopicMetadata` (the cluster by default; :class:`InMemoryTopicMetadata` for tests);
a consumer reads records through a :class:`RecordFetcher` (kafka-python by default).
"""

from ._aio import AsyncConsumer as AsyncConsumer
from ._aio import AsyncRebalanceListener as AsyncRebalanceListener
from ._broker_assigned import BrokerAssignedPartitioning as BrokerAssignedPartitioning
from ._consumer import FETCH_SETTINGS as FETCH_SETTINGS
from ._consumer import Consumer as Consumer
from ._consumer import ConsumerMetrics as ConsumerMetrics
from ._consumer import PartitionsNotOwnedError as PartitionsNotOwnedError
from ._fetcher import RecordFetcher as RecordFetcher
from ._listener import RebalanceListener as RebalanceListener
from ._metadata import InMemoryTopicMetadata as InMemoryTopicMetadata
from ._metadata import TopicMetadata as TopicMetadata
from ._partitioning import ConsumerPartitioning as ConsumerPartitioning
from .assignors import CooperativeStickyAssignor as CooperativeStickyAssignor
from .assignors import PartitionAssignor as PartitionAssignor
from .assignors import RangeAssignor as RangeAssignor
from .assignors import RoundRobinAssignor as RoundRobinAssignor
from .assignors import StickyAssignor as StickyAssignor
from .protocol import RebalanceProtocol as RebalanceProtocol
from .protocol import TopicPartition as TopicPartition

__all__ = [
    "FETCH_SETTINGS",
    "AsyncConsumer",
    "AsyncRebalanceListener",
    "BrokerAssignedPartitioning",
    "Consumer",
    "ConsumerMetrics",
    "ConsumerPartitioning",
    "CooperativeStickyAssignor",
    "InMemoryTopicMetadata",
    "PartitionAssignor",
    "PartitionsNotOwnedError",
    "RangeAssignor",
    "RebalanceListener",
    "RebalanceProtocol",
    "RecordFetcher",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicMetadata",
    "TopicPartition",
]
