"""The errors a share consumer reports about its acknowledgements.

An acknowledgement that did not take effect is never counted as one: :meth:`ShareConsumer.commit`
returns one of these for its partition, and the ``on_acknowledged`` callback hears of it
(acknowledgements sent with a poll included).
"""

from __future__ import annotations

from coordination import ErrorCode
from coordination.errors import CoordinationError


class AcknowledgementError(CoordinationError):
    """Acknowledgements of some of a partition's records did not take effect: those records
    are not acknowledged, and the broker delivers them again (to any member) once their
    acquisition lock runs out, unless it already has.

    Attributes:
        topic, partition: the partition.
        offsets: the records' offsets, ascending.
        code: Kafka's error code for it (``coordination.ErrorCode``).
    """

    def __init__(self, topic: str, partition: int, offsets: tuple[int, ...], code: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets = offsets
        self.code = code
        super().__init__(
            f"{topic}[{partition}] offsets {_ranges(offsets)}: acknowledgement failed with "
            f"{_name(code)}: {self.what_happened()}"
        )

    def what_happened(self) -> str:
        return (
            "the broker refused it; the records are not acknowledged and will be delivered "
            "again once their acquisition lock runs out"
        )


class AcquisitionLockExpiredError(AcknowledgementError):
    """The records' acquisition lock had run out (or they were acknowledged already): the
    broker no longer held them for this member (INVALID_RECORD_STATE), and may have
    delivered them to another member. Processing them took longer than the group's
    ``share.record.lock.duration.ms``: acknowledge RENEW while working on a record, or raise
    the lock duration."""

    def what_happened(self) -> str:
        return (
            "the acquisition lock had run out, the records may have gone to another member; "
            "acknowledge RENEW during long work, or raise share.record.lock.duration.ms"
        )


class AcknowledgementUncertainError(AcknowledgementError):
    """The request carrying the acknowledgements got no answer (the connection failed or
    timed out): the broker may or may not have applied them. If it did not, the records
    are delivered again after their lock runs out; treat them as possibly redelivered."""

    def what_happened(self) -> str:
        return "the request got no answer: the broker may or may not have applied it"


class HandlerCancelledError(CoordinationError):
    """An :class:`AsyncShareWorker` handler's coroutine ended cancelled while the worker
    ran, and not by the worker's own close (a watchdog's ``task.cancel()``, ``asyncio.run``
    cancelling every task as it ends): the failure of that record, always retryable
    whatever ``retry_on`` says (a cancellation says nothing about the record). The worker
    handles it as any retryable failure, and goes on."""


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def _ranges(offsets: tuple[int, ...]) -> str:
    if not offsets:
        return "none"
    runs: list[list[int]] = [[offsets[0], offsets[0]]]
    for offset in offsets[1:]:
        if offset == runs[-1][1] + 1:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
