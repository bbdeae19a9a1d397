"""Kafka queues: a share group's consumer (KIP-932), records shared among its members.

See :class:`ShareConsumer` (Kafka's ``KafkaShareConsumer`` API: ``poll``, ``acknowledge``,
``commit``, ``close``) and docs/queues.md. Every member of a share group may fetch from
every partition; the broker hands each record to one member at a time, under an
acquisition lock, and delivers it again if it is released or its lock runs out, up to the
group's delivery limit. Needs Kafka 4.2 or newer with share groups enabled
(``share.version``). :class:`ShareWorker` runs handlers over a share consumer and
acknowledges each record by its handler's outcome (retries, dead letters, graceful drain).
"""

from __future__ import annotations

from coordination.errors import ShareGroupsUnsupportedError as ShareGroupsUnsupportedError
from coordination.share_group import AcknowledgeType as AcknowledgeType

from ._aio import AsyncShareConsumer as AsyncShareConsumer
from ._aio_worker import AsyncShareWorker as AsyncShareWorker
from ._consumer import OnAcknowledged as OnAcknowledged
from ._consumer import ShareConsumer as ShareConsumer
from ._consumer import ShareMetrics as ShareMetrics
from ._consumer import ShareRecord as ShareRecord
from ._consumer import TopicPartition as TopicPartition
from ._errors import AcknowledgementError as AcknowledgementError
from ._errors import AcknowledgementUncertainError as AcknowledgementUncertainError
from ._errors import AcquisitionLockExpiredError as AcquisitionLockExpiredError
from ._errors import HandlerCancelledError as HandlerCancelledError
from ._worker import DEAD_LETTER_HEADERS as DEAD_LETTER_HEADERS
from ._worker import ShareWorker as ShareWorker
from ._worker import WorkerMetrics as WorkerMetrics

__all__ = [
    "DEAD_LETTER_HEADERS",
    "AcknowledgeType",
    "AcknowledgementError",
    "AcknowledgementUncertainError",
    "AcquisitionLockExpiredError",
    "AsyncShareConsumer",
    "AsyncShareWorker",
    "HandlerCancelledError",
    "OnAcknowledged",
    "ShareConsumer",
    "ShareGroupsUnsupportedError",
    "ShareMetrics",
    "ShareRecord",
    "ShareWorker",
    "TopicPartition",
    "WorkerMetrics",
]
