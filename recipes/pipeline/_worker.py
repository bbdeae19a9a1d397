"""The pipeline worker: owns a share of the input partitions and runs their micro-batches.

A :class:`PipelineWorker` is built on a :class:`~recipes.partitioning.Consumer`
(the classic group protocol with cooperative-sticky assignment, or Kafka's consumer
group protocol, KIP-848, where the broker assigns): it learns which partitions it
owns, turns each partition's offsets into micro-batches processed by Spark
(:func:`~recipes.pipeline._spark.stage_many`), commits each batch's end offset
fenced by its generation (member epoch) and only then publishes the batch's
results. See ``docs/pipeline.md`` for the protocol and its failure
cases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from coordination import ErrorCode, OffsetAndMetadata
from coordination.clock import Event, Thread
from coordination.errors import (
    CommitFailedError,
    ConfigurationError,
    CoordinationError,
    FatalBrokerError,
)
from coordination.hooks import CoordinationHooks, RebalanceStarted
from coordination.lease import LeaseGuard
from recipes.partitioning import (
    FETCH_SETTINGS,
    BrokerAssignedPartitioning,
    Consumer,
    ConsumerPartitioning,
    CooperativeStickyAssignor,
    RebalanceListener,
    TopicPartition,
)

from ._compactor import CompactionCopy, CompactorRole, DeltaCompactor
from ._definition import Pipeline
from ._delta_log import latest_snapshot, recorded_versions
from ._events import (
    BatchAbandoned,
    BatchFailed,
    BatchPublished,
    PartitionRecovered,
    PartitionsAssigned,
    PartitionsReleased,
    RebalanceBegan,
    WorkerClosed,
    WorkerEvent,
    WorkerStarted,
)
from ._kafka_options import spark_kafka_options
from ._output import OffsetRange, PipelineOutput, PipelineOutputError, StagedBatch, StagedFilesError
from ._sinks import DeltaSink, ParquetSink
from ._spark import spark_session, stage_many, warm_up_rows
from ._windowed_sum import DEFAULT_WINDOW_MS, windowed_sum

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordination.transport import Transport

__all__ = ["PipelineWorker"]

log = logging.getLogger("recipes.pipeline")

# The Consumer's fetch settings (kafka-python's, for its default fetcher): Spark reads the
# records, so the worker refuses them. The worker sets two itself (auto_offset_reset,
# isolation_level).
_FETCH_SETTINGS: Final = FETCH_SETTINGS

# What a commit refused with these did not apply, and one in the member's next generation or
# epoch may (see PipelineWorker._commit).
_RETRIED_COMMITS: Final = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.STALE_MEMBER_EPOCH})

# What stages a job's ranges in place of Spark: (output, ranges, owner) -> one StagedBatch per
# range, in order, as stage_many returns them.
BatchStage = Callable[[PipelineOutput, Sequence[OffsetRange], str], Sequence[StagedBatch]]


@dataclass(eq=False)
class _Partition:
    """An owned partition, from its assignment until it is revoked or lost.

    A new object is made at every assignment, so a batch cut for an ownership
    that ended is recognised.
    """

    tp: TopicPartition
    assigned_at: float
    ready: bool = False  # recovered and cleaned up, ``start`` known
    start: int = 0  # the committed offset: where the next batch starts
    end: int = 0  # the partition's last known end (its last stable offset)
    # When records past ``start`` (past ``cut_to`` while a batch is in flight) were
    # first seen (None: none waiting): the oldest waiting data is served first, and a
    # batch is cut at the latest when this is max_batch_delay_ms old. Records that
    # arrive during a job have waited since they were seen, not since it ended.
    pending_since: float | None = None
    cut_to: int | None = None  # the end of the batch in flight, if one is
    # After a failed batch: no new batch before this time (backing off), and how many
    # batches in a row failed.
    retry_at: float = 0.0
    failures: int = 0

    # What waits, and since when, changes at four moments, each below (under the worker's
    # lock): recovery, a poll seeing the end, a batch cut, a batch published.

    def recovered(self, offset: int) -> None:
        """Ready to process from ``offset`` (the committed offset), nothing in flight."""
        self.start = offset
        self.pending_since = None
        self.cut_to = None
        self.ready = True

    def saw_end(self, end: int, now: float) -> None:
        """A poll found the partition's end at ``end``; records past what the batches took
        wait from ``now`` on, unless older ones wait already."""
        self.end = end
        taken = self.start if self.cut_to is None else self.cut_to
        if end > taken and self.pending_since is None:
            self.pending_since = now

    def cut(self, end_offset: int) -> None:
        """A batch up to ``end_offset`` is in flight."""
        self.cut_to = end_offset
        if self.end <= end_offset:
            self.pending_since = None  # what arrives from now on waits anew

    def published(self, end_offset: int, now: float) -> None:
        """The batch in flight, up to ``end_offset``, is committed and published: the next
        one starts there. Records it did not take (a capped batch) go on waiting since they
        were seen."""
        self.start, self.cut_to = end_offset, None
        if self.end <= self.start:
            self.pending_since = None
        elif self.pending_since is None:
            self.pending_since = now


class _Handover(RebalanceListener):
    """The consumer's listener: hands each ownership change to the worker (on the
    membership thread)."""

    def __init__(self, worker: PipelineWorker) -> None:
        self._worker = worker

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._worker._take(partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._worker._give_up(partitions, lost=False)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._worker._give_up(partitions, lost=True)


class _RebalanceClock(CoordinationHooks):
    """A hook of the worker's group member: a rebalance began (its first JoinGroup; on the
    consumer protocol, its joining heartbeat or an answer with a new assignment), from
    which the worker times the ownership changes that follow."""

    def __init__(self, worker: PipelineWorker) -> None:
        self._worker = worker

    def on_rebalance_started(self, event: RebalanceStarted) -> None:
        self._worker._rebalance_started(event.reason)


# The warm-up's jobs: (ranges, records per range).
_WARM_UP_JOBS: Final = ((1, 100), (3, 5_000))


class PipelineWorker:
    """One worker of a pipeline: a group member that has Spark process its partitions' ranges.

    Example:
        pipeline = windowed_sum("events", ParquetSink("/data/agg"), window_ms=60_000)
        worker = PipelineWorker("agg-workers", pipeline,
                                bootstrap_servers="localhost:9092", name="w1")
        worker.start()                  # starts Spark, joins the group
        try:
            worker.run(stop)            # processes batches until stop (an Event) is set
        finally:
            worker.close()              # hands its partitions over cleanly

    The group decides which worker owns which partitions; the worker decides
    each batch's offset range; Spark reads the range from Kafka on its
    executors (:func:`~recipes.pipeline.kafka_rows`): no record passes through
    the worker's Python process. A partition's batch starts at its committed
    offset and ends at its last stable offset (the end ``read_committed``
    consumers see), at most ``max_batch_records`` further, once that many are
    waiting or the oldest has waited ``max_batch_delay_ms``. Per batch: stage
    with Spark (the pipeline's parse and transform), commit the end offset with
    the staged name as metadata (fenced by the generation, or the member epoch
    on the consumer protocol), publish through the sink. A commit that fails
    or whose outcome is unknown (refused, timed out, any error) never deletes
    the staged batch, since a commit whose response was lost may have landed:
    the worker asks the broker
    (OffsetFetch) whether the committed metadata names the batch and then
    publishes it; otherwise it leaves it (for a later, fenced orphan cleanup)
    and processes the partition again from its committed offset if it still owns it.

    File deletions are fenced: orphaned staging directories are removed only
    while the worker's membership lease (``Coordinator.membership_lease()``)
    exceeds ``lease_margin_ms``, checked right before each deletion, and only
    those ending at or below the committed offset that the commit does not
    name (see :meth:`PipelineOutput.cleanup_orphans`), so a worker resuming
    from a pause past its session cannot delete its successor's batches.

    Built on Consumer:
        :attr:`consumer` (a plain :class:`~recipes.partitioning.Consumer`) holds
        the group membership, answers each partition's committed offset and end,
        and commits fenced by ownership and generation (member epoch);
        :attr:`group` is its group member (a
        :class:`~recipes.partitioning.ConsumerPartitioning`, or with
        ``group_protocol="consumer"`` a
        :class:`~recipes.partitioning.BrokerAssignedPartitioning`). Its
        partitions stay paused: it never fetches records. The worker sees
        ownership changes through the consumer's
        :class:`~recipes.partitioning.RebalanceListener` and the start of each
        rebalance through a :class:`~coordination.hooks.CoordinationHooks` it adds
        to the member's ``hooks`` (a ``hooks`` setting of yours is kept).

    Ownership changes (on the group's membership thread):
        assigned: the partition is recovered (the previous owner's committed but
            unpublished batch is published, its orphans deleted) before its
            first batch, on the worker's thread.
        revoked / lost: the callback waits for the batch in flight on those
            partitions to finish (commit and publish, or leave the staged batch
            if the commit fails), so the next owner starts from a committed
            offset whose results are published. Other partitions keep going:
            with cooperative rebalancing (and on the consumer protocol, where
            every rebalance is incremental) a worker whose partitions do not
            move is never interrupted.

    Threads:
        :meth:`run`'s thread cuts batches and prepares partitions. The batches
        of all the partitions with records waiting are staged by one Spark job
        and committed by one request; up to ``parallel_batches`` such jobs run
        at once on threads of their own (Spark runs them concurrently), with
        one batch per partition at most. The rebalance callbacks run on the membership
        thread and wait for the batches of the partitions they hand over;
        :meth:`close` must not be called from them. With a compacting sink, a
        thread of its own stands in the election ``<group_id>.compactor`` and,
        while this worker leads it, compacts in the worker's Spark session: a
        :class:`~recipes.pipeline.DeltaSink`'s partials into its totals
        (:class:`~recipes.pipeline.DeltaCompactor`), a
        :class:`~recipes.pipeline.ParquetSink`'s published batches into segments
        (:class:`~recipes.pipeline.ParquetCompactor`). Every lock,
        wait and reading of the time that guards the group's work comes from
        the group member's clock (``clock=``).

    Events:
        ``on_event`` receives a frozen :class:`~recipes.pipeline.WorkerEvent`,
        of the subclass for its ``kind``: ``started`` (Spark up), ``rebalance``
        (a rebalance began), ``assigned`` / ``revoked`` / ``lost`` (with
        ``partitions``, ``generation``, and ``rebalance_ms`` since the
        rebalance began), ``recovered`` (a partition is ready: its committed
        offset, what recover published, the orphans removed), ``batch``
        (topic, partition, offsets, records, rejected, milliseconds),
        ``abandoned`` (a commit failed and did not land; the staged batch is
        left), ``failed`` (Spark or the sink failed; the range is processed
        again), ``closed``. It runs on the worker's threads (several at once:
        the batch threads, the membership thread) and must be fast. An
        exception it raises is logged with the event and the worker carries on.
    """

    def __init__(
        self,
        group_id: str,
        pipeline: Pipeline | None = None,
        *,
        topic: str | None = None,
        output: PipelineOutput | str | Path | None = None,
        window_ms: int = DEFAULT_WINDOW_MS,
        name: str | None = None,
        master: str = "local[1]",
        spark_conf: Mapping[str, str] | None = None,
        kafka_options: Mapping[str, str] | None = None,
        max_batch_records: int = 100_000,
        max_batch_delay_ms: int = 1000,
        poll_interval_ms: int = 100,
        parallel_batches: int = 2,
        max_partitions_per_batch: int = 64,
        lease_margin_ms: int | None = None,
        on_event: Callable[[WorkerEvent], None] | None = None,
        stage: BatchStage | None = None,
        compaction_copy: CompactionCopy | None = None,
        compactor_transport: Transport | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing starts until :meth:`start`.

        Args:
            group_id: The consumer group of the workers (Kafka ``group.id``).
            pipeline: What to compute (topics, parse, transform, sink).
            topic: Without ``pipeline``: the input topic of the default
                pipeline, :func:`~recipes.pipeline.windowed_sum` into a
                :class:`~recipes.pipeline.ParquetSink` at ``output``.
            output: Without ``pipeline``: the default pipeline's output directory.
            window_ms: Without ``pipeline``: the default pipeline's window.
            name: This worker's name in logs, events and its job directories
                (:meth:`~recipes.pipeline.PipelineOutput.new_job_path`); default
                ``worker-<host>-<pid>``. Safety does not depend on it: each
                worker stages in a run of its own, and a starting worker deletes
                only the job directories of runs whose process is gone
                (:meth:`~recipes.pipeline.PipelineOutput.remove_dead_jobs`).
            master: ``spark.master``; default ``local[1]``, one core per worker.
            spark_conf: Further Spark settings (see :func:`spark_session`).
            kafka_options: Settings of Spark's Kafka source (``kafka.*``, e.g.
                ``kafka.fetch.max.bytes``), over those derived from the group's
                connection settings: ``kafka.bootstrap.servers``, and for TLS and
                PLAIN/SCRAM logins the security options (see
                :func:`~recipes.pipeline.spark_kafka_options`). Given
                ``kafka.security.protocol``, no security option is derived.
            max_batch_records: Most offsets in one batch.
            max_batch_delay_ms: Longest time a record waits before its batch is cut.
            poll_interval_ms: How often an idle worker asks the partitions' ends.
            parallel_batches: Spark jobs (each staging batches of several
                partitions) run at once; 1 runs them one after another on
                :meth:`run`'s thread.
            max_partitions_per_batch: Most partitions staged by one Spark job.
            lease_margin_ms: Orphaned staging directories are deleted only while
                the membership lease exceeds this; default ``heartbeat_interval_ms``.
                Must be below ``min(session_timeout_ms, rebalance_timeout_ms)``.
            on_event: Observer of the worker's events (see the class docstring).
            stage: Stages a job's ranges instead of Spark: called with the
                output, the ranges and the worker's name, it returns one
                complete :class:`~recipes.pipeline.StagedBatch` per range, in
                order (what :func:`~recipes.pipeline.stage_many` returns). With
                it no Spark session is started (nor warmed up). For a stand-in
                of Spark in tests and the deterministic simulator
                (``devtools/simulation/pipeline.py``); default: Spark.
            compaction_copy: With ``stage`` and a compacting ParquetSink: copies the
                batches' rows into a segment instead of Spark (see
                :class:`~recipes.pipeline.ParquetCompactor`); without it, such a
                worker does not compact.
            compactor_transport: Where the compactor election's requests go (default:
                connections of its own, from the worker's connection settings); the
                simulator gives it a transport of its own.
            group_protocol: Kafka's ``group.protocol``: ``"classic"`` (default;
                JoinGroup and SyncGroup, the cooperative-sticky assignor, commits
                fenced by the generation) or ``"consumer"`` (KIP-848, Kafka 4.0+:
                the broker assigns, each worker moves on its own, commits fenced by
                the member epoch). The output's guarantees are the same on both
                (docs/pipeline.md, Guarantees); a broker without the consumer
                protocol stops the worker with
                :class:`~coordination.errors.UnsupportedVersionError`.
            group_remote_assignor: With ``group_protocol="consumer"``, the
                broker's assignor (Kafka ``group.remote.assignor``: ``"uniform"``,
                ``"range"``; None: the broker's default).
            **settings: Group and connection settings of
                :class:`~recipes.partitioning.ConsumerPartitioning`
                (``bootstrap_servers`` (required), ``session_timeout_ms``, ...,
                ``hooks``, ``transport`` and ``clock``), and the consumer's
                ``fetcher`` (a :class:`~recipes.partitioning.RecordFetcher` with
                ``end_offsets``, which must end each partition at its last
                stable offset: the worker asks it for the partitions' ends and
                starts, never for records; default: kafka-python's, reading
                ``read_committed``).

        Raises:
            ConfigurationError: A setting is invalid.
        """
        if (
            max_batch_records <= 0
            or max_batch_delay_ms < 0
            or poll_interval_ms <= 0
            or parallel_batches <= 0
            or max_partitions_per_batch <= 0
        ):
            raise ConfigurationError(
                "max_batch_records, poll_interval_ms, parallel_batches and "
                "max_partitions_per_batch must be > 0 and max_batch_delay_ms >= 0, got "
                f"{max_batch_records}, {poll_interval_ms}, {parallel_batches}, "
                f"{max_partitions_per_batch} and {max_batch_delay_ms}"
            )
        if pipeline is None:
            if topic is None or output is None:
                raise ConfigurationError(
                    "PipelineWorker needs a pipeline, or topic and output for the default one "
                    "(windowed_sum into a ParquetSink)"
                )
            if isinstance(output, PipelineOutput):
                output = output.root
            pipeline = windowed_sum(topic, ParquetSink(output), window_ms=window_ms)
        elif topic is not None or output is not None:
            raise ConfigurationError(
                "PipelineWorker: topic and output describe the default pipeline; with a "
                "pipeline, set them in it"
            )
        self.pipeline = pipeline
        self.name = name if name is not None else f"worker-{socket.gethostname()}-{os.getpid()}"
        self.max_batch_records = max_batch_records
        self.max_batch_delay_s = max_batch_delay_ms / 1000
        self.poll_interval_s = poll_interval_ms / 1000
        self.parallel = parallel_batches
        self.max_partitions_per_batch = max_partitions_per_batch
        self._jobs = 0  # Spark jobs under way (guarded by _lock and _changed)
        self._master = master
        self._spark_conf = dict(spark_conf or {})
        self._on_event = on_event
        self._stage_with = stage
        self._compaction_copy = compaction_copy
        self._compactor_transport = compactor_transport
        refused = sorted(k for k in settings if k in _FETCH_SETTINGS)
        if refused:
            raise ConfigurationError(
                f"PipelineWorker: Spark reads the records (kafka_options configure its Kafka "
                f"source), so the consumer settings {', '.join(refused)} cannot be set"
            )
        for setting in ("assignors", "partition_assignment_strategy"):
            if setting in settings:
                raise ConfigurationError(
                    f"PipelineWorker: {setting} cannot be set: on the classic protocol the "
                    "workers share the partitions with cooperative-sticky (a revoked "
                    "partition's batch ends before its next owner gets it); on "
                    "group_protocol='consumer' the broker assigns (group_remote_assignor)"
                )
        self.kafka_options = spark_kafka_options(settings, kafka_options)
        self._group_id = group_id
        self._group_protocol = group_protocol
        # A fixed group id for Spark's Kafka consumers (which only read, assigned, and never
        # join it): Spark caches a consumer per group id and partition, so every batch of a
        # partition reuses one instead of each batch creating (and caching) its own.
        self.kafka_options.setdefault("kafka.group.id", f"{group_id}.spark-reader")
        settings["hooks"] = _with_hook(settings.get("hooks"), _RebalanceClock(self))
        if "fetcher" not in settings:
            # Batches end at the last stable offset: aborted records are never read. A
            # fetcher of the caller's takes no fetch settings: it promises the same itself.
            settings["isolation_level"] = "read_committed"
        if group_protocol == "classic":
            # Only what moves is revoked, and its next owner gets it a generation later.
            settings["assignors"] = [CooperativeStickyAssignor()]
        self.consumer = Consumer(
            group_id,
            topics=list(pipeline.topics),
            listener=_Handover(self),
            auto_offset_reset="earliest",
            group_protocol=group_protocol,
            group_remote_assignor=group_remote_assignor,
            **settings,
        )
        self._clock = self.group.clock
        # Reads self.group at each check: the member it is then.
        self._lease = LeaseGuard(
            lambda: self.group.membership_lease(),
            self.group.config,
            lease_margin_ms,
            why=": no deletion could ever be fenced",
        )
        self._spark: SparkSession | None = None
        self._output: PipelineOutput | None = None
        self._compactor: CompactorRole | None = None
        self._started = False
        # Set when partitions are assigned, to end an idle wait of the worker's thread.
        self._assigned = self._clock.event()
        # Guards the fields below; _changed is notified whenever _in_flight shrinks.
        self._lock = self._clock.lock()
        # One offset commit or fetch at a time from the batch threads.
        self._commit_lock = self._clock.lock()
        self._changed = self._clock.condition(self._lock)
        self._parts: dict[TopicPartition, _Partition] = {}
        self._revoking: set[TopicPartition] = set()
        # Partitions with a batch (or a preparation) under way: at most one each.
        self._in_flight: set[TopicPartition] = set()
        self._batch_threads: list[Thread] = []
        # Set when no batch can run any more (Spark gone, the output broken): run() raises it.
        self._fatal: BaseException | None = None
        self._rebalance_t0: float | None = None
        self._closed = False
        self.records_processed = 0
        self.batches = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def group(self) -> ConsumerPartitioning | BrokerAssignedPartitioning:
        """The group member underneath (generation or member epoch, membership lease,
        metrics, ...): the consumer's, :attr:`Consumer.group
        <recipes.partitioning.Consumer.group>` on the classic protocol,
        :attr:`Consumer.broker_assigned <recipes.partitioning.Consumer.broker_assigned>` on
        ``group_protocol="consumer"``."""
        if self._group_protocol == "consumer":
            return self.consumer.broker_assigned
        return self.consumer.group

    @property
    def output(self) -> PipelineOutput:
        """Where batches are staged and published: the pipeline's sink's staging area."""
        if self._output is None:
            self._output = self.pipeline.sink.output(self._spark)  # type: ignore[arg-type]
        return self._output

    def start(self) -> None:
        """Start Spark (seconds: a JVM starts; not with ``stage=``), then the consumer: it
        joins the group in the background.

        Raises:
            pyspark.errors.PySparkException: Spark could not start.
            ConfigurationError: The pipeline fails on a warm-up batch in a way every
                batch would (its parse or transform drops ``BATCH_COLUMN`` although it
                has ``batches_together``).
            ConnectionFailedError: the bootstrap servers could not be reached.
        """
        if self._spark is None and self._stage_with is None:
            t0 = self._clock.monotonic()
            self._spark = spark_session(
                self._master,
                app_name=f"coordination-pipeline-{self.name}",
                # The driver holds the local executor, Spark's Kafka consumers and Delta's
                # table state: 512 MB ran out of heap under a steady stream of small batches.
                conf={"spark.driver.memory": "1g", **self._spark_conf},
            )
            started_ms = self._ms_since(t0)
            t0 = self._clock.monotonic()
            self._warm_up()
            self._emit(
                WorkerStarted(
                    worker=self.name,
                    t=time.time(),
                    spark_start_ms=started_ms,
                    warm_up_ms=self._ms_since(t0),
                )
            )
        # What crashed workers left mid-job (nothing there was committed); never a live
        # worker's, whatever its name.
        self.output.remove_dead_jobs()
        self.consumer.start()
        sink = self.pipeline.sink
        copying = self._compaction_copy is not None and isinstance(sink, ParquetSink)
        compacting = isinstance(sink, (DeltaSink, ParquetSink)) and sink.compacts
        if compacting and (self._spark is not None or copying):
            assert isinstance(sink, (DeltaSink, ParquetSink))
            self._compactor = CompactorRole(
                self._spark,
                sink,
                group_id=self._group_id,
                # Unique across the worker's restarts; drawn from the worker's clock, as
                # the simulator replays it.
                identity=f"{self.name}-{self._clock.random().getrandbits(32):08x}",
                config=self.group.config,
                clock=self._clock,
                transport=self._compactor_transport,
                copy=self._compaction_copy,
            )
            self._compactor.start()
        self._started = True

    def _warm_up(self) -> None:
        """Run two jobs of batches into a scratch directory before joining the group.

        A fresh JVM's first Spark job loads and compiles much of Spark and took
        over 20 s on a busy 2-core machine (later ones: about 1 s). Paying that
        before joining keeps it out of the partitions' processing: a worker that
        takes over a killed worker's partitions is ready to process them at once.
        The jobs run the pipeline as real jobs do (:func:`stage_many`, then
        ``publish_all``) on rows made in the JVM (rows from Python would start
        PySpark's Python workers, which real batches never use): one range of 100
        records, then three of 5,000, so that what a job runs per record is compiled
        before the first real one (a job of three ranges of 5,000 right after took
        1.4 s instead of 1.9 s alone; in the throughput benchmark each worker's first
        job took 5.6-6.2 s instead of 6.3-8.4 s; the warm-up takes about 2 s more).
        Then an empty range of an input partition is read by Spark's Kafka source
        (loading its classes).
        With a Delta sink they are published through a copy of it on scratch tables,
        and compacted once: a JVM's first Delta transaction took 10 s under load.
        """
        assert self._spark is not None
        with tempfile.TemporaryDirectory(prefix="pipeline-warm-up-") as scratch:
            sink = self.pipeline.sink
            scratch_sink = None
            if isinstance(sink, DeltaSink):
                scratch_sink = dataclasses.replace(
                    sink,
                    table=f"{scratch}/table",
                    staging=f"{scratch}/staging",
                    partials_table=None,
                    max_conflict_retries=0,
                )
            output = (
                PipelineOutput(scratch)
                if scratch_sink is None
                else scratch_sink.output(self._spark)
            )
            spark = self._spark
            for n, (ranges, records) in enumerate(_WARM_UP_JOBS):
                batches = [
                    OffsetRange(
                        topic="warm-up",
                        partition=p,
                        start_offset=n * 10_000,
                        end_offset=n * 10_000 + records,
                    )
                    for p in range(ranges)
                ]
                staged = stage_many(
                    spark,
                    output,
                    batches,
                    self.kafka_options,
                    self.pipeline,
                    owner="warm-up",
                    read=lambda offsets: warm_up_rows(spark, offsets),
                )
                output.publish_all(staged)
            empty = OffsetRange(
                topic=self.pipeline.topics[0], partition=0, start_offset=0, end_offset=0
            )
            with contextlib.suppress(Exception):  # a warm-up only: real reads report errors
                stage_many(
                    self._spark, output, [empty], self.kafka_options, self.pipeline, owner="warm-up"
                )
            if scratch_sink is not None and scratch_sink.compacts:
                DeltaCompactor(self._spark, scratch_sink).compact()
                # The partials and totals tables of the results' shape, before any
                # batch: the workers' first appends would conflict creating the one, and
                # the compactor's first cycle would wait on creating the other.
                from delta.tables import DeltaTable

                assert isinstance(sink, DeltaSink)
                if DeltaTable.isDeltaTable(self._spark, scratch_sink.partials):  # had rows
                    like = self._spark.read.format("delta").load(scratch_sink.partials)
                    sink.create_partials(self._spark, like)
                    DeltaCompactor(self._spark, sink).create_totals()
                    # The ids the partials record, read from the state once here (a
                    # reconstruction, 0.5-1 s of a core) and then by each append from the
                    # commits since: the first append need not pay it.
                    recorded_versions(sink.partials).at(
                        self._spark, latest_snapshot(self._spark, sink.partials)
                    )
            output.close()  # its job run's lock file goes with the scratch directory

    def run(self, stop: Event) -> None:
        """Fetch and process batches until ``stop`` is set (call :meth:`start` first).

        Args:
            stop: Set it (from any thread) to make this method return after the
                batch in progress.

        Raises:
            FatalBrokerError: The group member stopped on an error a person must
                fix, e.g. :class:`~coordination.errors.UnsupportedVersionError`
                (``group_protocol="consumer"`` on a broker older than Kafka 4.0).
            CoordinationError: The worker was closed or not started, or the
                output is in a state the protocol does not allow (e.g. a
                committed batch's results were deleted); the worker stops.
        """
        if not self._started or self._closed:
            raise CoordinationError("PipelineWorker.run: call start() first")
        try:
            while not stop.is_set():
                if isinstance(self._fatal, FatalBrokerError):
                    raise self._fatal  # the group member's own error, as its consumer's
                if self._fatal is not None:
                    raise CoordinationError(
                        f"PipelineWorker {self.name!r} stops: {self._fatal!r}"
                    ) from self._fatal
                self._step()
        finally:
            # Batches under way finish (commit and publish) before Spark may be stopped.
            for thread in self._batch_threads:
                thread.join()
            self._batch_threads.clear()

    def close(self, timeout: float = 30.0) -> None:
        """Leave the group (revoking its partitions cleanly), close the consumer, stop Spark.

        Call after :meth:`run` returned, not from a rebalance callback.

        Args:
            timeout: Seconds to wait for the group to be left.
        """
        if self._closed:
            return
        self._closed = True
        self.consumer.close(timeout)
        if self._compactor is not None:
            # After the hand-over published this worker's last batches: a leading
            # compactor's last cycle merges them.
            self._compactor.close(timeout)
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
        if self._output is not None:
            self._output.close()  # no job runs any more: its run's directory goes
        self._emit(
            WorkerClosed(
                worker=self.name,
                t=time.time(),
                records=self.records_processed,
                batches=self.batches,
            )
        )

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions this worker owns now."""
        with self._lock:
            return frozenset(self._parts)

    # ------------------------------------------------------------------ the worker's thread

    def _step(self) -> None:
        with self._lock:
            parts = dict(self._parts)
        for part in parts.values():
            if not part.ready:
                self._prepare(part)
        if not parts:
            self._clock.sleep(self.poll_interval_s, self._assigned)
            self._assigned.clear()
            self._check_member()
            return
        ready = [tp for tp, part in parts.items() if part.ready]
        ends = self._ends(ready) if ready else {}
        now = self._clock.monotonic()
        with self._lock:
            for tp, end in ends.items():
                current = self._parts.get(tp)
                # Asked for an ownership that ended, or that began since the snapshot.
                if current is None or current is not parts.get(tp) or not current.ready:
                    continue
                current.saw_end(end, now)
            batches = self._next_batches(now) if self._jobs < self.parallel else []
            if batches:
                self._jobs += 1
        if not batches:
            with self._changed:
                # Until a batch finishes (room for the next) or the poll interval passed.
                self._changed.wait(self.poll_interval_s)
        elif self.parallel == 1:
            self._process(batches)
        else:
            # Spark runs the jobs of several threads at once: one job's driver-side work
            # (planning, committing files, the offset commit) overlaps another's tasks.
            thread = self._clock.thread(lambda: self._process(batches), f"{self.name}-batch")
            self._batch_threads = [t for t in self._batch_threads if t.is_alive()] + [thread]
            thread.start()

    def _check_member(self) -> None:
        """Keep the error the group member stopped on, for run() to raise: one a person must
        fix (a broker without the consumer protocol, a fenced static member, a refused
        authorization). The member owns nothing then, and the worker would otherwise wait
        for partitions that never come."""
        try:
            self.group.ensure_active_group(timeout=0)  # raises that error first, never waits
        except FatalBrokerError as e:
            self._fatal = e
        except CoordinationError:
            pass  # not in the group yet, or between assignments: it keeps trying

    def _ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's last stable offset (one ListOffsets per leader); {} on failure."""
        try:
            return self.consumer.end_offsets(
                partitions, timeout=self.group.config.request_timeout_ms / 1000
            )
        except Exception as e:
            # Asked again at the next step: a leader moving, a broker restarting.
            log.warning("%s: cannot fetch the partitions' ends: %s", self.name, e)
            return {}

    def _next_batches(self, now: float) -> list[tuple[_Partition, OffsetRange]]:
        """Cut the next job's batches (holding the lock); their partitions are then in flight.

        Once one partition is due (``max_batch_records`` waiting, or its oldest
        record ``max_batch_delay_ms`` old), every partition with records waiting
        gets a batch in the same job: Spark's cost per job is paid once.
        """
        waiting = [
            p
            for p in self._parts.values()
            if p.ready
            and p.pending_since is not None
            and p.tp not in self._revoking
            and p.tp not in self._in_flight
            and p.retry_at <= now
        ]
        if not any(
            p.end - p.start >= self.max_batch_records
            or (p.pending_since is not None and now - p.pending_since >= self.max_batch_delay_s)
            for p in waiting
        ):
            return []
        # The partitions whose data has waited longest first: this bounds every
        # partition's lag, and serves a backlog taken over from a failed worker
        # before partitions that were processed a moment ago.
        waiting.sort(key=lambda p: (p.pending_since or 0.0, p.tp))
        # The waiting partitions are shared among the jobs that may start now, so
        # that up to parallel_batches jobs overlap (one's driver work, another's tasks).
        share = -(-len(waiting) // max(1, self.parallel - self._jobs))
        batches = []
        for part in waiting[: min(share, self.max_partitions_per_batch)]:
            self._in_flight.add(part.tp)
            batch = OffsetRange(
                topic=part.tp.topic,
                partition=part.tp.partition,
                start_offset=part.start,
                end_offset=min(part.end, part.start + self.max_batch_records),
            )
            part.cut(batch.end_offset)
            batches.append((part, batch))
        return batches

    def _prepare(self, part: _Partition) -> None:
        """Recover a newly assigned partition and position the consumer at its committed offset.

        Runs as the partition's work in flight: a revocation waits for it, since
        cleanup_orphans by a worker that no longer owns the partition could
        delete its new owner's staging directory.
        """
        tp = part.tp
        with self._lock:
            if self._parts.get(tp) is not part or tp in self._revoking:
                return
            self._in_flight.add(tp)
        try:
            try:
                committed = self.group.committed_offsets([(tp.topic, tp.partition)])[
                    (tp.topic, tp.partition)
                ]
            except CoordinationError as e:
                log.warning("%s: %s: cannot fetch the committed offset yet: %s", self.name, tp, e)
                return
            offset = committed.offset if committed is not None else None
            metadata = committed.metadata if committed is not None else None
            # Whether recover finishes a predecessor's commit (for the timeline).
            unpublished = bool(metadata) and metadata in self.output.staged(tp.topic, tp.partition)
            try:
                recovered = self.output.recover(tp.topic, tp.partition, offset, metadata)
            except PipelineOutputError as e:
                self._fatal = e
                raise
            except Exception as e:
                if self._stopped_by(e):
                    return
                # The sink failed to publish the predecessor's committed batch: it stays
                # staged and the next step prepares the partition again, as after a failed
                # publish of the worker's own batch (not a reason to stop the worker).
                log.exception("%s: %s: recovering %s failed", self.name, tp, metadata)
                self._failed(part, e)
                return
            orphans = self.output.cleanup_orphans(
                tp.topic, tp.partition, offset, metadata, still_owner=self._lease.holds
            )
            if offset is None:
                # Nothing committed: where the consumer started it (the log's start, as
                # auto_offset_reset says).
                offset = self.consumer.position(tp)
                if offset is None:
                    log.warning("%s: %s: no start position yet", self.name, tp)
                    return
            with self._lock:
                part.recovered(offset)
            self._emit(
                PartitionRecovered(
                    worker=self.name,
                    t=time.time(),
                    topic=tp.topic,
                    partition=tp.partition,
                    committed=offset,
                    published=recovered.name if recovered is not None and unpublished else None,
                    orphans=len(orphans),
                )
            )
        finally:
            self._done(tp)

    def _process(self, batches: list[tuple[_Partition, OffsetRange]]) -> None:
        """Stage the batches in one Spark job, commit them in one request, publish each
        whose commit landed (the others stay in staging); their partitions are in flight.
        """
        t0 = self._clock.monotonic()
        try:
            try:
                staged = self._stage([batch for _, batch in batches])
            except PipelineOutputError as e:
                if not isinstance(e, StagedFilesError):
                    self._fatal = e
                    raise
                log.warning("%s: %s", self.name, e)
                for part, _ in batches:
                    self._failed(part, e)
                return
            except Exception as e:
                if self._stopped_by(e):
                    return
                # Spark failed (or the output could not be written): nothing was
                # committed, so process the partitions again from their committed offsets.
                log.exception(
                    "%s: batches %s failed", self.name, ", ".join(b.name for _, b in batches)
                )
                for part, _ in batches:
                    self._failed(part, e)
                return
            staged_ms = self._ms_since(t0)
            commit = {
                (b.topic, b.partition): OffsetAndMetadata(b.end_offset, s.commit_metadata)
                for (_, b), s in zip(batches, staged, strict=True)
            }
            try:
                self._commit(commit)
                landed = set(commit)
            except Exception as e:
                # Refused, timed out, or anything else: the request may have landed
                # (a response lost, then a retry refused for a generation that moved
                # on). Never delete a staged batch here; ask the broker.
                landed = self._landed(commit)
                if landed:
                    log.info("%s: the commit that reported %r had landed", self.name, e)
                for part, batch in batches:
                    if (batch.topic, batch.partition) not in landed:
                        self._abandon(part, batch, e)
            publishing = [
                (part, batch, one)
                for (part, batch), one in zip(batches, staged, strict=True)
                if (batch.topic, batch.partition) in landed
            ]
            self._publish_all(publishing, staged_ms, t0)
        finally:
            with self._changed:
                for part, _ in batches:
                    self._in_flight.discard(part.tp)
                self._jobs -= 1
                self._changed.notify_all()

    def _publish_all(
        self,
        publishing: list[tuple[_Partition, OffsetRange, StagedBatch]],
        staged_ms: int,
        t0: float,
    ) -> None:
        """Publish a job's committed batches together (a Delta sink appends them in one
        transaction: one per batch made a job's partitions wait on each other's commits,
        docs/pipeline.md), then move each partition on."""
        if not publishing:
            return
        try:
            self.output.publish_all([one for _, _, one in publishing])
        except Exception as e:
            # The sink failed: the batches are committed, so preparing their partitions
            # again publishes them (recover) before their next batches.
            what = "publishing " + ", ".join(one.name for _, _, one in publishing)
            self._output_failed(e, [part for part, _, _ in publishing], what)
            return
        for part, batch, one in publishing:
            self._published(part, batch, one, staged_ms, t0)

    def _abandon(self, part: _Partition, batch: OffsetRange, error: BaseException) -> None:
        """A batch whose commit failed and did not land: left in staging, its partition
        processed again from its committed offset."""
        self._emit(
            BatchAbandoned(
                worker=self.name,
                t=time.time(),
                topic=batch.topic,
                partition=batch.partition,
                start=batch.start_offset,
                end=batch.end_offset,
                reason=str(error),
            )
        )
        log.warning(
            "%s: %s: commit of [%d, %d) failed or unknown (%s); batch left in "
            "staging, partition processed again from its committed offset",
            self.name,
            part.tp,
            batch.start_offset,
            batch.end_offset,
            error,
        )
        self._reread(part)

    def _published(
        self, part: _Partition, batch: OffsetRange, staged: StagedBatch, staged_ms: int, t0: float
    ) -> None:
        """Clean up after a published batch and move its partition on."""
        try:
            self.output.cleanup_orphans(
                batch.topic,
                batch.partition,
                batch.end_offset,
                staged.commit_metadata,
                still_owner=self._lease.holds,
            )
        except Exception as e:
            # Published: the next batch's cleanup deletes what this one left.
            self._output_failed(e, [part], f"{part.tp}: cleaning up after {staged.name}")
            return
        with self._lock:
            part.published(batch.end_offset, self._clock.monotonic())
            part.failures = 0
            self.records_processed += staged.records
            self.batches += 1
        self._emit(
            BatchPublished(
                worker=self.name,
                t=time.time(),
                topic=batch.topic,
                partition=batch.partition,
                start=batch.start_offset,
                end=batch.end_offset,
                records=staged.records,
                rejected=staged.rejected,
                stage_ms=staged_ms,
                ms=self._ms_since(t0),
            )
        )

    def _output_failed(self, error: Exception, parts: list[_Partition], what: str) -> None:
        """After the output failed ``what``: a PipelineOutputError stops the worker (run()
        raises it), as does a Spark that is gone; anything else has the partitions
        prepared and processed again."""
        if isinstance(error, PipelineOutputError):
            self._fatal = error
            return
        if self._stopped_by(error):
            return
        log.exception("%s: %s failed", self.name, what)
        for part in parts:
            self._failed(part, error)

    def _stopped_by(self, error: BaseException) -> bool:
        """Whether ``error`` says the Spark JVM is gone (killed, out of memory); then no
        batch can run here any more: the worker stops and the group moves its partitions."""
        if self._spark is None or not _spark_gone(error):
            return False
        self._fatal = error
        log.error("%s: Spark is gone: %s", self.name, error)
        return True

    def _failed(self, part: _Partition, error: BaseException) -> None:
        self._emit(
            BatchFailed(
                worker=self.name,
                t=time.time(),
                topic=part.tp.topic,
                partition=part.tp.partition,
                error=repr(error),
            )
        )
        self._reread(part, failed=True)

    def _stage(self, batches: list[OffsetRange]) -> list[StagedBatch]:
        """Spark reads the batches from Kafka and runs the pipeline on them, into staging."""
        if self._stage_with is not None:
            return list(self._stage_with(self.output, batches, self.name))
        assert self._spark is not None
        return stage_many(
            self._spark, self.output, batches, self.kafka_options, self.pipeline, owner=self.name
        )

    def _commit(self, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        """Commit in the current generation (member epoch), retrying while the group
        completes a rebalance.

        The current generation, not the one the batch started in: a cooperative
        rebalance that leaves the partition here moves the generation on, and the
        batch is still this worker's to commit. The partition cannot have a new
        owner meanwhile: its revocation waits for this batch (on the consumer
        protocol too: the broker gives a partition to another member only once
        this one reported it released, or removed this one, whose commits it then
        refuses). The broker refuses commits with REBALANCE_IN_PROGRESS only
        between JoinGroup and SyncGroup (the group's CompletingRebalance state),
        and with STALE_MEMBER_EPOCH (consumer protocol) a commit sent before the
        answer that moved the member's epoch on arrived; neither applied it, so a
        retry in the new generation or epoch commits the batch instead of
        throwing away its work.
        """
        clock = self._clock
        deadline = clock.monotonic() + self.group.config.rebalance_timeout_ms / 1000
        while True:
            try:
                # The consumer commits in the current generation, and only partitions it
                # owns (PartitionsNotOwnedError otherwise, nothing sent).
                with self._commit_lock:
                    self.consumer.commit(
                        {TopicPartition(t, p): om for (t, p), om in offsets.items()}
                    )
                return
            except CommitFailedError as e:
                if e.code not in _RETRIED_COMMITS or clock.monotonic() >= deadline:
                    raise
                log.info("%s: commit refused with %s; retrying", self.name, e.code)
                clock.sleep(0.2, clock.event())

    def _landed(self, sent: Mapping[tuple[str, int], OffsetAndMetadata]) -> set[tuple[str, int]]:
        """The partitions of ``sent`` whose committed offset and metadata are what was sent.

        None of them when the broker cannot tell now: the batches then stay in
        staging, where the next owner's recover publishes those that were committed.
        """
        try:
            with self._commit_lock:
                committed = self.group.committed_offsets(list(sent))
        except Exception as e:
            log.warning("%s: cannot fetch the committed offsets: %s", self.name, e)
            return set()
        return {tp for tp, om in sent.items() if committed.get(tp) == om}

    def _reread(self, part: _Partition, *, failed: bool = False) -> None:
        """Process ``part`` again from the start of the batch that failed (its committed
        offset, unless the commit landed after all: preparing it again asks the group).

        After a batch that failed in Spark or the sink, the partition waits before its
        next batch, 0.5 s doubling to 30 s, so a failure that repeats (a broker down, a
        full disk) does not spin.
        """
        with self._lock:
            part.ready = False
            if failed:
                part.failures += 1
                delay = min(30.0, 0.5 * 2 ** (part.failures - 1))
                part.retry_at = self._clock.monotonic() + delay

    def _done(self, tp: TopicPartition) -> None:
        with self._changed:
            self._in_flight.discard(tp)
            self._changed.notify_all()

    # ------------------------------------------------------------------ membership thread

    def _rebalance_started(self, reason: str) -> None:
        """The group member began a rebalance (its hook, on the membership thread)."""
        with self._lock:
            self._rebalance_t0 = self._clock.monotonic()
        self._emit(
            RebalanceBegan(
                worker=self.name,
                t=time.time(),
                # The generation it rejoins from: the one it held (-1 if it was lost).
                generation=self.group.generation().generation_id,
                reason=reason,
            )
        )

    def _rebalance_ms(self) -> int | None:
        with self._lock:
            t0 = self._rebalance_t0
        return None if t0 is None else self._ms_since(t0)

    def _ms_since(self, t0: float) -> int:
        return round((self._clock.monotonic() - t0) * 1000)

    def _give_up(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None:
        """Wait for the batch in flight on ``partitions``, then forget them.

        Walkthrough of the race this closes (cooperative rebalance, p moves to B):
        1. the worker thread cut a batch of p and is staging it;
        2. the group revokes p: this callback marks p revoking (no new batch of p
           starts) and waits;
        3. the worker thread commits the batch (the generation is current, p is still
           this member's until the callback returns) and publishes it, or leaves
           it in staging if the commit failed;
        4. the callback drops p; only then does the member rejoin and B get p, at the
           committed offset, with its results published.
        For lost partitions the same wait ends in a refused commit, the batch left.
        """
        t0 = self._clock.monotonic()
        with self._changed:
            self._revoking |= partitions
            while self._in_flight & partitions:
                if not self._changed.wait(10.0):
                    log.warning(
                        "%s: still waiting for the batches of %s before handing them over",
                        self.name,
                        sorted(self._in_flight & partitions),
                    )
            for tp in partitions:
                self._parts.pop(tp, None)
            self._revoking -= partitions
        self._emit(
            PartitionsReleased(
                kind="lost" if lost else "revoked",
                worker=self.name,
                t=time.time(),
                partitions=_numbers(partitions),
                generation=self.group.generation().generation_id,
                waited_ms=self._ms_since(t0),
                rebalance_ms=self._rebalance_ms(),
            )
        )

    def _take(self, partitions: frozenset[TopicPartition]) -> None:
        """Own ``partitions``: paused in the consumer until the worker's thread prepared them.

        The consumer returns none of their records before this returns, so the pause
        comes first. It is made under the lock, so that _flow_control, which resumes a
        partition once it is prepared, never sees the partition before it is paused.
        """
        now = self._clock.monotonic()
        with self._lock:
            for tp in partitions:
                self._parts[tp] = _Partition(tp=tp, assigned_at=now)
            # Spark reads the records; the consumer never fetches any.
            self.consumer.pause(*partitions)
            owned = frozenset(self._parts)
        self._assigned.set()
        rebalance_ms = self._rebalance_ms()
        with self._lock:
            self._rebalance_t0 = None
        self._emit(
            PartitionsAssigned(
                worker=self.name,
                t=time.time(),
                partitions=_numbers(partitions),
                owned=_numbers(owned),
                generation=self.group.generation().generation_id,
                rebalance_ms=rebalance_ms,
            )
        )

    def _emit(self, event: WorkerEvent) -> None:
        """Hand ``event`` to ``on_event``; what it raises is logged, never the worker's
        problem (it runs on the batch threads and the membership thread)."""
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("%s: on_event raised for %r; the worker carries on", self.name, event)


def _numbers(partitions: frozenset[TopicPartition]) -> tuple[int, ...]:
    return tuple(sorted(tp.partition for tp in partitions))


def _with_hook(given: Any, hook: CoordinationHooks) -> Any:
    """The ``hooks`` setting ``given`` (None: none) with ``hook`` first. A setting that is
    not a list of hooks is left as it is, for the group member to refuse with its message."""
    if given is None:
        return [hook]
    if isinstance(given, CoordinationHooks | str | bytes):
        return given
    try:
        return [hook, *given]
    except TypeError:
        return given


def _spark_gone(error: BaseException) -> bool:
    """Whether ``error`` says this process's Spark JVM is gone (py4j lost its connection)."""
    from py4j.protocol import Py4JNetworkError

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, Py4JNetworkError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
