"""Where a pipeline's results go: Parquet directories, or a Delta Lake table written once per batch.

Both sinks stage each batch in a :class:`~recipes.pipeline.PipelineOutput`
(Parquet files in a staging directory named by the offset commit) and publish
it only after the commit succeeded. :class:`ParquetSink` publishes by renaming
the directory; :class:`DeltaSink` also writes the batch to Delta, as an
idempotent Delta transaction keyed by topic, partition and end offset, so a
batch published twice (a retry, a new owner's recovery, a paused former owner)
changes the table once: appended to the table, appended to a partials table
that an elected compactor merges into the totals (``_compactor.py``), or
merged into the totals by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from coordination.errors import ConfigurationError

from ._delta_log import recorded_versions
from ._delta_totals import BATCH_ID_COLUMNS, current_totals
from ._jvm import jvm_class
from ._output import (
    MANIFEST_NAME,
    OffsetRange,
    PipelineOutput,
    PipelineOutputError,
    decode_manifest,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DeltaSink", "ParquetSink", "Sink", "delta_app_id"]

log = logging.getLogger("recipes.pipeline")

# Delta's session settings that make the next write (MERGE included) idempotent.
_TXN_APP_ID: Final = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION: Final = "spark.databricks.delta.write.txnVersion"
# One lock per session, held by each Delta write of the sink: a worker's batch threads
# share its session (and its settings); separate sessions have their own settings.
_SESSION_LOCKS: dict[int, threading.Lock] = {}
_CHANGE_DATA_FEED: Final = "delta.enableChangeDataFeed"
# Column statistics Delta collects on every write (for data skipping): the partials table
# is only ever read by version (the compactor's change data feed), never filtered, so its
# appends skip them, which halves an append's time.
_INDEXED_COLUMNS: Final = "delta.dataSkippingNumIndexedCols"

_SESSION_LOCKS_GUARD = threading.Lock()


def _session_lock(spark: SparkSession) -> threading.Lock:
    with _SESSION_LOCKS_GUARD:
        return _SESSION_LOCKS.setdefault(id(spark), threading.Lock())


@contextlib.contextmanager
def delta_commit_lock(table: str) -> Iterator[None]:
    """Held around every commit this library makes to the Delta table at ``table`` when it
    is on a local or mounted POSIX file system: one process (or thread) at a time.

    Delta writes a commit's log file there by checking that it does not exist, then
    renaming onto it, and a POSIX rename replaces an existing file: two JVMs committing
    the same version at once can both pass the check, and the second rename silently
    replaces the first commit, whose writer believes it landed (Delta serializes this
    within one JVM only). Pipeline workers are one JVM each, so their commits take this
    lock, an exclusive ``flock`` on ``.<table name>.delta-commit.lock`` beside the table.
    Other schemes (``s3a://``, ``gs://``, ``abfss://``, ``hdfs://``) are their LogStore's
    to serialize and take no lock.

    Raises:
        ConfigurationError: the lock file cannot be made beside the table (no write
            access there, or a file where the table's directory should be).
    """
    path = delta_commit_lock_path(table)
    if path is None:
        yield
        return
    local = path.parent
    try:
        local.mkdir(parents=True, exist_ok=True)
        # Opened per call: flock locks belong to the open file, so two threads of one
        # process exclude each other as two processes do.
        opened = path.open("a")
    except OSError as e:
        raise ConfigurationError(
            f"DeltaSink: the commit lock of the Delta table {table} cannot be opened at "
            f"{path} ({e.strerror or e}): the pipeline writes it beside the table; give "
            f"this process write access to {local} or choose a table path it can "
            "write to"
        ) from e
    with opened as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def delta_commit_lock_path(table: str) -> Path | None:
    """The file :func:`delta_commit_lock` locks for ``table`` (None: no lock, not local)."""
    local = _local_path(table)
    return None if local is None else local.parent / f".{local.name}.delta-commit.lock"


def create_delta_table_unless_exists(
    spark: SparkSession,
    table: str,
    create: Callable[[], None],
    *,
    holding: contextlib.AbstractContextManager[Any] | None = None,
) -> None:
    """Run ``create`` (a write that makes the Delta table at ``table``) unless the table
    exists. Workers and compactors starting at once may all try: the check is made again
    under the table's commit lock, so that a creator that waited for it finds the table
    made and writes nothing (its write, an append, would add an empty version); where
    there is no lock (object stores), Delta's conflict check ends the race and the loser's
    conflict is not an error (the winner's log may not show it yet). ``holding`` (a lock
    taken before the commit lock) is held too, only when the table is to be made: a
    table that exists is seen without waiting for it."""
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, table):
        return
    with holding or contextlib.nullcontext(), delta_commit_lock(table):
        if DeltaTable.isDeltaTable(spark, table):
            return  # made by another process while this one waited for the lock
        try:
            create()
        except Exception as e:
            if not _conflict(e):
                raise


def _local_path(table: str) -> Path | None:
    """``table``'s path if it is on the local file system (no scheme, or ``file:``)."""
    if table.startswith("file:"):
        return Path("/" + table.removeprefix("file:").lstrip("/"))
    if "://" in table:
        return None
    return Path(table).absolute()


class Sink(Protocol):
    """A pipeline's sink: where batches are staged and how a committed one is published."""

    def output(self, spark: SparkSession) -> PipelineOutput:
        """The staging area of this sink, publishing through ``spark`` where needed."""
        ...

    def read(self, spark: SparkSession) -> DataFrame:
        """Everything published so far, as readers see it."""
        ...


@dataclass(frozen=True)
class ParquetSink:
    """Each batch's results as a Parquet directory, published by an atomic rename.

    Example:
        ParquetSink("/data/agg", compaction_interval_ms=10_000)

    The directory layout and its protocol are :class:`~recipes.pipeline.PipelineOutput`'s.
    Each published directory holds one batch's results: for an aggregation,
    partial aggregates that readers combine (``read_results`` does for
    :func:`~recipes.pipeline.windowed_sum`).

    With ``compaction_interval_ms``, the workers elect a compactor
    (:class:`~recipes.pipeline.ParquetCompactor`) that copies the published batches into
    compacted segments every interval, and merges the smallest segments so that at most
    ``max_segments`` are live: the file count stays bounded. Readers see every batch
    once at every instant, from its segment or its own directory; what a segment holds
    is deleted ``retention_ms`` after it was committed, so a reader that listed the
    files just before has that long to read them.

    Attributes:
        root: A local directory or POSIX mount shared by the Spark driver and executors.
        compaction_interval_ms: How often the elected compactor runs; None (the
            default) never compacts.
        max_segments: At most this many live segments (>= 2).
        retention_ms: How long what a segment replaced stays readable.
        rows_per_file: About how many rows a segment's data file holds.
    """

    root: str | os.PathLike[str]
    _: KW_ONLY
    compaction_interval_ms: int | None = None
    max_segments: int = 8
    retention_ms: int = 60_000
    rows_per_file: int = 1_000_000

    def __post_init__(self) -> None:
        if self.compaction_interval_ms is not None and self.compaction_interval_ms <= 0:
            raise ConfigurationError(
                "ParquetSink: compaction_interval_ms must be > 0, or None not to compact"
            )
        if self.max_segments < 2:
            raise ConfigurationError("ParquetSink: max_segments must be >= 2")
        if self.retention_ms < 0:
            raise ConfigurationError("ParquetSink: retention_ms must be >= 0")
        if self.rows_per_file <= 0:
            raise ConfigurationError("ParquetSink: rows_per_file must be > 0")

    @property
    def compacts(self) -> bool:
        """Whether an elected compactor merges the published batches into segments."""
        return self.compaction_interval_ms is not None

    def output(self, spark: SparkSession) -> PipelineOutput:
        return PipelineOutput(self.root)

    def read(self, spark: SparkSession) -> DataFrame:
        """The rows of every published batch, from one consistent listing (only the
        files each manifest lists)."""
        files = [str(p) for p in PipelineOutput(self.root).published_files()]
        if not files:
            raise PipelineOutputError(f"{self.root}: nothing is published yet")
        return spark.read.parquet(*files)


def delta_app_id(topic: str, partition: int) -> str:
    """The Delta transaction id of a partition's batches (their version is the end offset)."""
    return f"coordination-pipeline:{topic}:{partition}"


@dataclass(frozen=True)
class DeltaSink:
    """A Delta Lake table that receives each committed batch exactly once.

    Example:
        DeltaSink("/data/totals", staging="/data/staging",
                  key_columns=["key", "window_start_ms"],
                  add_columns=["event_count", "value_sum"])

    A batch is staged as Parquet in ``staging`` (a POSIX directory, as for
    :class:`ParquetSink`), its offsets committed, then written to Delta in one
    transaction carrying Delta's idempotent-write id (``txnAppId`` =
    :func:`delta_app_id` of its partition, ``txnVersion`` = its end offset):
    Delta skips a transaction whose version is not above the last one recorded
    for its id, so a batch published again (by the same worker after an unknown
    outcome, by a new owner recovering it, by a former owner resuming from a
    pause) is written once. Batches of a partition are published in offset
    order (a new owner publishes its predecessor's committed batch before its
    own first one), so no batch is skipped wrongly.

    Without ``key_columns`` each batch's rows are appended to ``table``. With
    them the table holds final totals: a row whose keys match a table row adds
    its ``add_columns`` to that row's, other rows are inserted. By default
    (``compaction_interval_ms`` set) a batch is appended, with its batch id in
    :data:`BATCH_ID_COLUMNS`, to the ``partials`` table (blind appends, which
    never conflict), and the worker elected compactor merges the partials into
    ``table`` every interval, in one transaction per cycle
    (:class:`~recipes.pipeline.DeltaCompactor`); ``table`` then lags the
    published batches by up to one cycle, and :meth:`read` is exact up to the
    last published batch. With ``compaction_interval_ms=None`` each batch is
    merged into ``table`` by its own transaction: no lag, but workers' merges
    conflict under Delta's optimistic concurrency and are retried
    (``max_conflict_retries``); fine for one worker.

    Requires the ``delta-spark`` package (the ``spark`` extra); the session is
    configured for it by :func:`~recipes.pipeline.spark_session`. The tables may
    be on an object store (Delta commits atomically there); the staging
    directory may not.

    Attributes:
        table: The table's path or URI.
        staging: The staging directory (a :class:`~recipes.pipeline.PipelineOutput` root).
        key_columns: Merge on these columns; None appends.
        add_columns: With ``key_columns``: the numeric columns added on a match.
        compaction_interval_ms: With ``key_columns``: how often the elected compactor
            merges the partials into ``table`` (default 2000); None merges each batch
            on its own.
        partials_table: The partials table's path or URI; default ``<table>_partials``.
        max_conflict_retries: Conflicting Delta transactions retried this many times.
    """

    table: str
    _: KW_ONLY
    staging: str | os.PathLike[str]
    key_columns: Sequence[str] | None = None
    add_columns: Sequence[str] = ()
    compaction_interval_ms: int | None = 2000
    partials_table: str | None = None
    max_conflict_retries: int = 50

    def __post_init__(self) -> None:
        if self.key_columns is not None:
            object.__setattr__(self, "key_columns", tuple(self.key_columns))
            if not self.key_columns:
                raise ConfigurationError("DeltaSink: key_columns is empty; give None to append")
        object.__setattr__(self, "add_columns", tuple(self.add_columns))
        if self.add_columns and self.key_columns is None:
            raise ConfigurationError(
                "DeltaSink: add_columns needs key_columns (what a row is merged on)"
            )
        if self.max_conflict_retries < 0:
            raise ConfigurationError("DeltaSink: max_conflict_retries must be >= 0")
        if self.compaction_interval_ms is not None and self.compaction_interval_ms <= 0:
            raise ConfigurationError(
                "DeltaSink: compaction_interval_ms must be > 0, or None to merge each batch"
            )
        if self.partials_table is not None and self.partials_table == self.table:
            raise ConfigurationError("DeltaSink: partials_table must differ from table")

    @property
    def compacts(self) -> bool:
        """Whether batches go to the partials table, merged into the totals by a compactor."""
        return self.key_columns is not None and self.compaction_interval_ms is not None

    @property
    def partials(self) -> str:
        """The partials table's path or URI."""
        if self.partials_table is not None:
            return self.partials_table
        return self.table.rstrip("/") + "_partials"

    def output(self, spark: SparkSession) -> PipelineOutput:
        def apply(path: Path, offsets: OffsetRange, files: Sequence[str]) -> None:
            self._apply(spark, path, offsets, files)

        def apply_all(batches: Sequence[tuple[Path, OffsetRange, Sequence[str]]]) -> None:
            self._apply_all(spark, batches)

        if self.compacts:
            return PipelineOutput(self.staging, before_publish_all=apply_all)
        return PipelineOutput(self.staging, before_publish=apply)

    def read(self, spark: SparkSession) -> DataFrame:
        """What the published batches add up to: with compaction, the totals table and the
        partials not merged yet (one consistent pair of versions), else the table."""
        return current_totals(spark, self)

    def _apply(
        self, spark: SparkSession, path: Path, offsets: OffsetRange, files: Sequence[str]
    ) -> None:
        """Apply one staged batch to the table, once whatever the number of calls."""
        if self.compacts:
            self._apply_all(spark, [(path, offsets, files)])
            return
        if not files:
            return  # no rows: nothing to apply (and nothing for a later call to repeat)
        rows = _staged_rows(spark, path, files)
        app_id = delta_app_id(offsets.topic, offsets.partition)
        self._retried(lambda: self._write(spark, rows, app_id, offsets.end_offset), offsets.name)

    def _apply_all(
        self, spark: SparkSession, batches: Sequence[tuple[Path, OffsetRange, Sequence[str]]]
    ) -> None:
        """Append staged batches to the partials table in one Delta transaction, each
        batch once whatever the number of calls."""
        with_rows = [(path, offsets, files) for path, offsets, files in batches if files]
        if with_rows:
            names = ", ".join(offsets.name for _, offsets, _ in with_rows)
            self._retried(lambda: self._append_partials(spark, with_rows), names)

    def _retried(self, write: Callable[[], None], what: str) -> None:
        """``write``, again after a Delta optimistic-concurrency conflict."""
        for attempt in range(self.max_conflict_retries + 1):
            try:
                write()
                return
            except Exception as e:
                if not _conflict(e) or attempt == self.max_conflict_retries:
                    raise
                log.info("%s: Delta transaction conflict, retrying: %s", what, e)
                time.sleep(min(0.05 * (attempt + 1), 1.0))

    def _append_partials(
        self, spark: SparkSession, batches: Sequence[tuple[Path, OffsetRange, Sequence[str]]]
    ) -> None:
        """A blind append of the batches' rows to the partials table, in one transaction
        that records each batch's partition and end offset as that partition's
        idempotent-write id and version (Delta's writer takes one id per transaction; its
        log takes any number). A batch whose partition has that version or a later one
        recorded is left out; all left out, nothing is committed. Two workers' appends
        never conflict (disjoint partitions); two publishers of one batch do, and the
        retry leaves it out.

        The recorded versions are read from the partials' commits since the process's
        last read (:func:`recorded_versions`), not from the snapshot's state
        (:mod:`._delta_log`: 0.6 s of an append's 0.8-0.9 s on ``local[1]``); each id is
        still registered as read by the transaction, which is what makes Delta fail it
        when a concurrent commit records the same id."""

        partials = [
            self._partial_rows(spark, path, offsets, files) for path, offsets, files in batches
        ]
        self.create_partials(spark, partials[0])
        jvm = _DeltaJvm(spark)
        txn = jvm.delta_log.forTable(spark._jsparkSession, self.partials).startTransaction()
        versions = recorded_versions(self.partials).at(spark, txn.snapshot())
        fresh = []
        for (_, offsets, _), rows in zip(batches, partials, strict=True):
            app_id = delta_app_id(offsets.topic, offsets.partition)
            jvm.read_transaction_id(txn, app_id)
            if versions.get(app_id, -1) < offsets.end_offset:
                fresh.append((offsets, rows))
        if not fresh:
            return
        names = ", ".join(offsets.name for offsets, _ in fresh)
        rows = functools.reduce(lambda a, b: a.unionByName(b), (r for _, r in fresh))
        # Delta's writer checks the schema; its transaction API does not.
        table_schema = txn.metadata().schema().simpleString()
        if rows.schema.simpleString() != table_schema:
            raise PipelineOutputError(
                f"the rows of {names} do not fit the partials table {self.partials}: "
                f"{rows.schema.simpleString()} where the table has {table_schema}; a "
                "pipeline whose results change shape needs a new table"
            )
        # One task and one file for all the batches (their rows are small results, each
        # staged as one file): a file per batch took twice the time to write (0.4-0.6 s
        # against 0.2 s for six, on local[1]), and each cycle reads every file it merges.
        actions = jvm.java_list(txn.writeFiles(rows.coalesce(1)._jdf))
        now_ms = int(time.time() * 1000)
        for offsets, _ in fresh:
            app_id = delta_app_id(offsets.topic, offsets.partition)
            actions.add(jvm.set_transaction(app_id, offsets.end_offset, now_ms))
        # The userMetadata is the operation's: a concurrent compactor cycle's, set in the
        # session, is not taken.
        with delta_commit_lock(self.partials):
            txn.commit(jvm.scala_list(actions), jvm.append_operation(names))

    def create_partials(self, spark: SparkSession, like: DataFrame) -> None:
        """Create the partials table with the columns of ``like`` (partial rows, with the
        batch-id columns), unless it exists (:func:`create_delta_table_unless_exists`)."""

        def create() -> None:
            # The compactor reads what each version added: the change data feed must be on
            # from the table's first version.
            (
                like.limit(0)
                .write.format("delta")
                .mode("append")
                .option(_CHANGE_DATA_FEED, "true")
                .option(_INDEXED_COLUMNS, "0")
                .save(self.partials)
            )

        # Under the session lock: this write names no id, so it would take one a merge of
        # this session had set. Taken only to create: every append comes here first, and
        # a compactor's MERGE holds this session's lock for its whole run.
        create_delta_table_unless_exists(spark, self.partials, create, holding=_session_lock(spark))

    @staticmethod
    def _partial_rows(
        spark: SparkSession, path: Path, offsets: OffsetRange, files: Sequence[str]
    ) -> DataFrame:
        """The batch's rows, with its id in the three batch-id columns."""
        from pyspark.sql import functions as F

        return _staged_rows(spark, path, files).select(
            "*",
            F.lit(offsets.topic).alias(BATCH_ID_COLUMNS[0]),
            F.lit(offsets.partition).alias(BATCH_ID_COLUMNS[1]),
            F.lit(offsets.end_offset).cast("bigint").alias(BATCH_ID_COLUMNS[2]),
        )

    def _write(self, spark: SparkSession, rows: DataFrame, app_id: str, version: int) -> None:
        from delta.tables import DeltaTable

        # The idempotency settings of a merge are the session's: while one batch
        # thread merges with its batch's id set, no other Delta write of this session
        # may run, or it would commit under that id and Delta would then skip the batch.
        with _session_lock(spark), delta_commit_lock(self.table):
            if self.key_columns is None:
                (
                    rows.write.format("delta")
                    .mode("append")
                    .option("txnAppId", app_id)
                    .option("txnVersion", version)
                    .save(self.table)
                )
                return
            if not DeltaTable.isDeltaTable(spark, self.table):
                # An empty append creates the table; two workers doing it at once
                # conflict, and the retry finds the table.
                rows.limit(0).write.format("delta").mode("append").save(self.table)
            self._merge(spark, rows, app_id, version)

    def _merge(self, spark: SparkSession, rows: DataFrame, app_id: str, version: int) -> None:
        from delta.tables import DeltaTable

        assert self.key_columns is not None
        keys = " AND ".join(f"t.`{c}` <=> b.`{c}`" for c in self.key_columns)
        added: dict[str, str | Column] = {f"`{c}`": f"t.`{c}` + b.`{c}`" for c in self.add_columns}
        spark.conf.set(_TXN_APP_ID, app_id)
        spark.conf.set(_TXN_VERSION, str(version))
        try:
            merge = DeltaTable.forPath(spark, self.table).alias("t").merge(rows.alias("b"), keys)
            if added:
                merge = merge.whenMatchedUpdate(set=added)
            merge.whenNotMatchedInsertAll().execute()
        finally:
            spark.conf.unset(_TXN_APP_ID)
            spark.conf.unset(_TXN_VERSION)


def _staged_rows(spark: SparkSession, path: Path, files: Sequence[str]) -> DataFrame:
    """A staged batch's rows, read with the schema its stager wrote in the manifest where
    there is one: inferring it from the files is a Spark job (0.25 s of an append alone,
    0.7-2.5 s beside the worker's next job, measured)."""
    from pyspark.sql.types import StructType

    reader = spark.read
    schema = decode_manifest((path / MANIFEST_NAME).read_bytes()).get("schema")
    if isinstance(schema, str):
        reader = reader.schema(StructType.fromJson(json.loads(schema)))
    return reader.parquet(*(str(path / f) for f in files))


def _conflict(error: BaseException) -> bool:
    """Whether ``error`` is a Delta optimistic-concurrency conflict (worth a retry)."""
    from delta import exceptions as delta_errors

    kinds = (
        delta_errors.DeltaConcurrentModificationException,
        delta_errors.ConcurrentWriteException,
        delta_errors.MetadataChangedException,
        delta_errors.ProtocolChangedException,
        delta_errors.ConcurrentAppendException,
        delta_errors.ConcurrentDeleteReadException,
        delta_errors.ConcurrentDeleteDeleteException,
        delta_errors.ConcurrentTransactionException,
    )
    if isinstance(error, kinds):
        return True
    # Creating the table at the same time as another worker.
    text = str(error)
    return "DELTA_CONCURRENT" in text or "FileAlreadyExistsException" in text


class _DeltaJvm:
    """What a multi-partition append needs of Delta's JVM API, through py4j (Delta's
    Python writer records one idempotent-write id per transaction)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._session: Any = spark._jsparkSession
        self.delta_log: Any = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog")
        self._converters: Any = jvm_class(spark, "scala.jdk.javaapi.CollectionConverters")
        self._array_list: Any = jvm_class(spark, "java.util.ArrayList")
        self._option: Any = jvm_class(spark, "scala.Option")
        self._set_transaction: Any = jvm_class(
            spark, "org.apache.spark.sql.delta.actions.SetTransaction"
        )

    def java_list(self, scala_seq: Any) -> Any:
        return self._array_list(self._converters.asJava(scala_seq))

    def scala_list(self, java_list: Any) -> Any:
        return self._converters.asScala(java_list).toList()

    def files_at(self, table: str, version: int) -> Any:
        """The data files (``AddFile``) of ``table``'s snapshot at ``version`` (a Java list)."""
        log = self.delta_log.forTable(self._session, table)
        defaults = (getattr(log, f"getSnapshotAt$default${i}")() for i in (2, 3, 4))
        return log.getSnapshotAt(version, *defaults).allFiles().collectAsList()

    def removals(self, table: str, files: Any) -> tuple[Any, Any]:
        """A transaction on ``table``, and the removal (at this time, a change of data) of
        each of ``files`` (from :meth:`files_at`) that its snapshot still holds."""
        txn = self.delta_log.forTable(self._session, table).startTransaction()
        # The transaction's snapshot, not a read through it: it records no read.
        current = {str(f.path()) for f in txn.snapshot().allFiles().collectAsList()}
        now_ms = int(time.time() * 1000)
        removals = self._array_list()
        for added in files:
            if str(added.path()) in current:
                removals.add(added.removeWithTimestamp(now_ms, True))
        return txn, removals

    def manual_update(self) -> Any:
        """Delta's ``Manual Update`` operation: a commit of actions made by hand (its
        ``DELETE`` would want the metrics of a scan that a removal of named files has not)."""
        return self._object("org.apache.spark.sql.delta.DeltaOperations$ManualUpdate$")

    def read_transaction_id(self, txn: Any, app_id: str) -> None:
        """Register ``app_id`` as read by ``txn``, as its ``txnVersion(app_id)`` does, so
        that Delta fails ``txn`` if a commit since its snapshot recorded that id; without
        asking the snapshot's state for the id's version (a reconstruction), which the
        caller read from the log (:func:`recorded_versions`)."""
        txn.readTxn().addOne(app_id)

    def set_transaction(self, app_id: str, version: int, now_ms: int) -> Any:
        return self._set_transaction.apply(app_id, version, self._option.apply(now_ms))

    def append_operation(self, user_metadata: str) -> Any:
        """Delta's ``WRITE`` operation in append mode: its defaults, but the metadata."""
        write = self._object("org.apache.spark.sql.delta.DeltaOperations$Write$")
        arguments = [getattr(write, f"apply$default${i}")() for i in range(2, 10)]
        arguments[2] = self._option.apply(user_metadata)  # the 4th: userMetadata
        append = jvm_class(self._spark, "org.apache.spark.sql.SaveMode").Append
        return write.apply(append, *arguments)

    def _object(self, name: str) -> Any:
        """The Scala object whose class is ``name`` (``...$``)."""
        return getattr(jvm_class(self._spark, name), "MODULE$")
