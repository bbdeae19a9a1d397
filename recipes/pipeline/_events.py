"""What a pipeline worker tells its ``on_event`` observer: one frozen dataclass per kind.

Every event is a :class:`WorkerEvent` (``kind``, ``worker``, ``t``); its class says
which fields it has. :meth:`WorkerEvent.as_dict` gives the JSON object the worker's
command line prints (``{"event": kind, "worker": ..., "t": ..., ...}``) and
:meth:`WorkerEvent.from_dict` reads one back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "BatchAbandoned",
    "BatchFailed",
    "BatchPublished",
    "PartitionRecovered",
    "PartitionsAssigned",
    "PartitionsReleased",
    "RebalanceBegan",
    "WorkerClosed",
    "WorkerEvent",
    "WorkerEventKind",
    "WorkerStarted",
]

WorkerEventKind: TypeAlias = Literal[
    "started",
    "rebalance",
    "assigned",
    "revoked",
    "lost",
    "recovered",
    "batch",
    "abandoned",
    "failed",
    "closed",
]
"""The kinds of :class:`WorkerEvent`, as the worker's JSON events name them (``"event"``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerEvent:
    """One observation of a pipeline worker; the subclass for its ``kind`` has the rest.

    Example:
        def on_event(event: WorkerEvent) -> None:
            if isinstance(event, BatchPublished):
                print(f"{event.topic}/{event.partition}: [{event.start}, {event.end}) "
                      f"in {event.ms} ms")

        worker = PipelineWorker("agg-workers", pipeline, on_event=on_event, ...)

    Kinds (and their classes): ``started`` (:class:`WorkerStarted`), ``rebalance``
    (:class:`RebalanceBegan`), ``assigned`` (:class:`PartitionsAssigned`), ``revoked``
    and ``lost`` (:class:`PartitionsReleased`), ``recovered``
    (:class:`PartitionRecovered`), ``batch`` (:class:`BatchPublished`), ``abandoned``
    (:class:`BatchAbandoned`), ``failed`` (:class:`BatchFailed`), ``closed``
    (:class:`WorkerClosed`). Later versions may add fields (read them by name) and kinds.
    """

    kind: WorkerEventKind
    """Which event this is (the JSON events' ``"event"``)."""
    worker: str
    """The worker's name (``PipelineWorker(name=...)``)."""
    t: float
    """When, in wall-clock seconds since the epoch (so that the events of several
    processes on one machine merge into one timeline)."""

    def as_dict(self) -> dict[str, Any]:
        """The event as the worker's command line prints it: a JSON-ready object with the
        kind under ``"event"``, then ``worker``, ``t`` and the kind's fields (tuples as lists).
        """
        out: dict[str, Any] = {"event": self.kind}
        for field in dataclasses.fields(self):
            if field.name != "kind":
                value = getattr(self, field.name)
                out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> WorkerEvent:
        """The event of :meth:`as_dict`'s object ``data`` (e.g. a line the worker printed).

        Fields this version does not know of are ignored.

        Raises:
            ValueError: ``data`` is no worker event: an unknown kind or a missing field.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"not a worker event: {data!r}")
        kind = data.get("event")
        cls = _CLASSES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"not a worker event: unknown kind {kind!r}")
        values: dict[str, Any] = {"kind": kind}
        for field in dataclasses.fields(cls):
            if field.name in data and field.name != "kind":
                value = data[field.name]
                values[field.name] = tuple(value) if isinstance(value, list) else value
        try:
            return cls(**values)
        except TypeError as e:
            raise ValueError(f"not a {kind!r} worker event: {e}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStarted(WorkerEvent):
    """``started``: Spark is up and warmed; the worker joins its group next."""

    kind: Literal["started"] = "started"
    spark_start_ms: int
    """How long the Spark session took to start."""
    warm_up_ms: int
    """How long the warm-up batches took."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceBegan(WorkerEvent):
    """``rebalance``: the worker's group member began a rebalance (its first JoinGroup).

    Reported by the member's public hook (:meth:`CoordinationHooks.on_rebalance_started
    <coordination.hooks.CoordinationHooks.on_rebalance_started>`).
    """

    kind: Literal["rebalance"] = "rebalance"
    generation: int
    """The generation the member held as it began (-1 after its membership was lost)."""
    reason: str = ""
    """Why it began (the reason the member sends with its JoinGroup)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsAssigned(WorkerEvent):
    """``assigned``: partitions became this worker's (possibly none: after every rebalance)."""

    kind: Literal["assigned"] = "assigned"
    partitions: tuple[int, ...]
    """The partitions added (their numbers, sorted)."""
    owned: tuple[int, ...]
    """Every partition the worker owns now."""
    generation: int
    """The generation they were assigned in."""
    rebalance_ms: int | None
    """Milliseconds since the rebalance began (None if the worker saw no beginning)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsReleased(WorkerEvent):
    """``revoked`` or ``lost``: partitions were handed over (their batches in flight ended
    first), or lost with the membership (nothing of theirs may be committed any more)."""

    kind: Literal["revoked", "lost"]
    partitions: tuple[int, ...]
    """The partitions released (their numbers, sorted)."""
    generation: int
    """The member's generation then (-1 when the membership was lost)."""
    waited_ms: int
    """How long the hand-over waited for their batches in flight."""
    rebalance_ms: int | None
    """Milliseconds since the rebalance began; None outside one (a loss noticed before
    rejoining, a close)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecovered(WorkerEvent):
    """``recovered``: an assigned partition is ready for its first batch."""

    kind: Literal["recovered"] = "recovered"
    partition: int
    committed: int
    """Its committed offset (or, with none, where the log starts): its next batch's start."""
    published: str | None
    """The predecessor's committed but unpublished batch that recovery published, if any."""
    orphans: int
    """Orphaned staging directories deleted."""
    topic: str = ""
    """The partition's topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPublished(WorkerEvent):
    """``batch``: a batch's offsets were committed and its results published."""

    kind: Literal["batch"] = "batch"
    topic: str
    partition: int
    start: int
    """The batch's first offset."""
    end: int
    """The offset after its last: the committed offset now."""
    records: int
    """Records read."""
    rejected: int
    """Of those, records the pipeline's parse rejected."""
    stage_ms: int
    """Milliseconds the Spark job took (for all the batches it staged)."""
    ms: int
    """Milliseconds from the job's start to this batch's publication."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchAbandoned(WorkerEvent):
    """``abandoned``: a batch's commit failed and did not land; the staged batch is left (for
    a later recovery or fenced cleanup) and the partition is processed again."""

    kind: Literal["abandoned"] = "abandoned"
    topic: str
    partition: int
    start: int
    end: int
    reason: str
    """Why the commit failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchFailed(WorkerEvent):
    """``failed``: Spark or the sink failed on a batch; its range is processed again from
    the committed offset, after a backoff."""

    kind: Literal["failed"] = "failed"
    topic: str
    partition: int
    error: str
    """The error, as ``repr``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerClosed(WorkerEvent):
    """``closed``: the worker left its group and stopped Spark."""

    kind: Literal["closed"] = "closed"
    records: int
    """Records the worker processed, in all."""
    batches: int
    """Batches it published, in all."""


_CLASSES: dict[str, type[WorkerEvent]] = {
    "started": WorkerStarted,
    "rebalance": RebalanceBegan,
    "assigned": PartitionsAssigned,
    "revoked": PartitionsReleased,
    "lost": PartitionsReleased,
    "recovered": PartitionRecovered,
    "batch": BatchPublished,
    "abandoned": BatchAbandoned,
    "failed": BatchFailed,
    "closed": WorkerClosed,
}
