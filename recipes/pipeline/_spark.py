"""The Spark side of the pipeline: parse events, aggregate per key and window, stage Parquet.

One :func:`spark_session` per worker process, reused for every batch;
:func:`stage_batch` turns the records of one offset range of one partition into
a staging directory of :class:`~recipes.pipeline._output.PipelineOutput`, and
:func:`read_results` combines everything published. PySpark is imported
lazily, so the rest of the package works without it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from ._output import OffsetRange, PipelineOutput, PipelineOutputError, StagedBatch

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_WINDOW_MS",
    "MAX_ABS_VALUE",
    "VALUE_PRECISION",
    "VALUE_SCALE",
    "Batch",
    "aggregate_events",
    "parse_events",
    "published_dataframe",
    "read_results",
    "records_dataframe",
    "spark_session",
    "stage_batch",
]

DEFAULT_WINDOW_MS: Final = 60_000
"""Tumbling window size when none is given: 60 seconds."""

VALUE_PRECISION: Final = 38
VALUE_SCALE: Final = 9
"""Event values are read as ``DECIMAL(38, 9)``: sums are exact whatever the batch boundaries.

A binary float sum depends on the order of additions, so two owners that cut a
partition into different batches would publish totals differing in the last
bits. Decimal addition is exact; a value with more than 9 fractional digits is
rounded half-up once, when parsed, which is the same for every owner.
"""

MAX_ABS_VALUE: Final = Decimal(10) ** 18
"""Values with ``abs(value) >= 10**18`` are rejected.

This leaves 20 of the 29 integer digits of ``DECIMAL(38, 9)`` as headroom, so
no sum of fewer than ``10**11`` values can overflow: Spark's ANSI mode would
otherwise fail the batch on every retry and stall the partition.
"""

_DEFAULT_CONF: Final[Mapping[str, str]] = {
    # Small enough for a 2-core machine running a broker too; raise for real batches.
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    # A batch aggregates to a few thousand rows: 200 shuffle partitions (the
    # default) would be 200 tasks of scheduling overhead per batch.
    "spark.sql.shuffle.partitions": "4",
    # Version 2 of Hadoop's committer moves task output into place at task
    # commit, saving a rename pass per batch (measured ~20% of a 1k-record
    # batch). Its weakness, a visible half-written output after a failed job,
    # does not matter here: the staging directory is private to one attempt and
    # only the manifest, written last, marks it complete.
    "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The records of one offset range of one partition, as polled from Kafka.

    Example:
        Batch(topic="events", partition=3, start_offset=100, end_offset=250,
              records=[(r.offset, r.value) for r in polled])

    ``start_offset`` is the partition's committed offset when the batch was cut
    and ``end_offset`` the offset the batch will commit (one past its last
    record, or further if the poll skipped offsets: transaction markers,
    compaction). Records must lie in ``[start_offset, end_offset)`` in strictly
    increasing offset order, which is the order Kafka returns them in.

    Attributes:
        topic: The Kafka topic.
        partition: The partition.
        start_offset: First offset of the range.
        end_offset: One past the last offset of the range.
        records: ``(offset, value)`` pairs; ``value`` is the record's value bytes
            (None for a tombstone, which is rejected).

    Raises:
        PipelineOutputError: The offsets break the rules above.
    """

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    records: Sequence[tuple[int, bytes | None]]

    def __post_init__(self) -> None:
        offsets = self.range  # validates topic, partition and the range itself
        previous = offsets.start_offset - 1
        # One pass in Python costs ~5 ms per 100k records and guards against
        # double counting: Spark is told not to verify rows (that check is slower).
        for offset, _ in self.records:
            if not previous < offset < offsets.end_offset:
                raise PipelineOutputError(
                    f"record offset {offset} after {previous} is not increasing within "
                    f"[{offsets.start_offset}, {offsets.end_offset})"
                )
            previous = offset

    @property
    def range(self) -> OffsetRange:
        """The batch's offset range."""
        return OffsetRange(
            topic=self.topic,
            partition=self.partition,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
        )


def spark_session(
    master: str = "local[2]",
    app_name: str = "coordination-pipeline",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession, configured for small micro-batches.

    Create it once per worker process and reuse it for every batch: starting
    the JVM takes seconds, a batch takes a fraction of one.

    Defaults: ``spark.driver.memory`` and ``spark.executor.memory`` 512m,
    ``spark.sql.shuffle.partitions`` 4, the web UI and the console progress bar
    off, session time zone UTC, Hadoop's file output committer version 2, log
    level WARN. ``conf`` overrides any of them.

    Args:
        master: ``spark.master``: ``local[2]`` for two local cores, or a cluster
            URL (``spark://host:7077``, ``yarn``, ``k8s://...``) to run the same
            code on a cluster.
        app_name: ``spark.app.name``.
        conf: Further Spark settings, applied after the defaults.

    Returns:
        The session. If one is already active in this process it is returned
        and only its runtime SQL settings are changed: JVM settings such as
        memory take effect at the first creation only.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**_DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def records_dataframe(
    spark: SparkSession, records: Sequence[tuple[int, bytes | None]]
) -> DataFrame:
    """A DataFrame ``(offset BIGINT, raw BINARY)`` of the polled records.

    The value bytes go to the JVM undecoded and unparsed: JSON parsing runs in
    Spark (:func:`parse_events`), and row verification is skipped because
    :class:`Batch` already checked the offsets, which keeps building the
    DataFrame at about 1 microsecond per record.

    Args:
        spark: The session.
        records: ``(offset, value)`` pairs.

    Returns:
        The DataFrame, one row per record.
    """
    return spark.createDataFrame(list(records), _raw_schema(), verifySchema=False)


def parse_events(raw: DataFrame) -> DataFrame:
    """Parse the JSON events of ``raw`` and mark which are valid.

    A record is valid when its value is a JSON object with ``key`` (a string;
    a JSON number or boolean is taken as its text), ``ts_ms`` (an integer
    number of milliseconds since the epoch, >= 0) and ``value`` (a number, or
    a string holding one, with ``abs(value) < 10**18``). ``event_id`` and other
    fields are ignored. Anything else (not JSON, not UTF-8, a tombstone, a
    missing or mistyped field) is invalid. Validity depends on the record
    alone, so every owner rejects the same records.

    Args:
        raw: ``(offset, raw)`` as built by :func:`records_dataframe`.

    Returns:
        ``(offset, key, ts_ms, value DECIMAL(38, 9), valid BOOLEAN)``.
    """
    from pyspark.sql import functions as F

    event = F.from_json(F.col("raw").cast("string"), _event_schema())
    parsed = raw.select(
        "offset",
        event["key"].alias("key"),
        event["ts_ms"].alias("ts_ms"),
        event["value"].alias("value"),
    )
    valid: Column = (
        F.col("key").isNotNull()
        & F.col("ts_ms").isNotNull()
        & (F.col("ts_ms") >= 0)
        & F.col("value").isNotNull()
        & (F.abs(F.col("value")) < F.lit(MAX_ABS_VALUE))
    )
    # coalesce: a comparison with NULL is NULL, and "valid" must be a plain boolean.
    return parsed.withColumn("valid", F.coalesce(valid, F.lit(False)))


def aggregate_events(events: DataFrame, window_ms: int = DEFAULT_WINDOW_MS) -> DataFrame:
    """Count and sum the valid events per key and tumbling window.

    Windows are ``[k * window_ms, (k + 1) * window_ms)`` in event time,
    computed in integer milliseconds (no timestamp conversion, so no time zone
    or precision question).

    Args:
        events: The output of :func:`parse_events`.
        window_ms: The window size in milliseconds.

    Returns:
        ``(key STRING, window_start_ms BIGINT, event_count BIGINT,
        value_sum DECIMAL(38, 9))``, one row per key and window.

    Raises:
        PipelineOutputError: ``window_ms`` is not positive.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    if window_ms <= 0:
        raise PipelineOutputError(f"window_ms must be > 0, got {window_ms}")
    ts = F.col("ts_ms")
    return (
        events.where(F.col("valid"))
        .groupBy(F.col("key"), (ts - ts % F.lit(window_ms)).alias("window_start_ms"))
        .agg(
            F.count(F.lit(1)).alias("event_count"),
            F.sum("value").cast(DecimalType(VALUE_PRECISION, VALUE_SCALE)).alias("value_sum"),
        )
    )


def stage_batch(
    spark: SparkSession,
    output: PipelineOutput,
    batch: Batch,
    *,
    window_ms: int = DEFAULT_WINDOW_MS,
) -> StagedBatch:
    """Process one batch and write its results to a new staging directory.

    One Spark job: parse, aggregate, write one Parquet file. The count of
    rejected records is gathered by the same job (a DataFrame observation),
    not by a second pass. Then the manifest marks the stage complete.

    Next, commit ``batch.end_offset`` with ``staged.commit_metadata`` and call
    ``output.publish(staged)``, or ``output.abandon(staged)`` if the commit is
    rejected.

    Args:
        spark: The session (see :func:`spark_session`).
        output: Where to stage.
        batch: The records.
        window_ms: The tumbling window size in milliseconds; keep it fixed for
            the life of an output, since results of different sizes do not combine.

    Returns:
        The staged batch.

    Raises:
        PipelineOutputError: ``window_ms`` is not positive.
        pyspark.errors.PySparkException: Spark failed; the staging directory
            is removed before the error propagates.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    offsets = batch.range
    events = parse_events(records_dataframe(spark, batch.records))
    observation: Observation | None = None
    if batch.records:
        # Not for an empty batch: Spark optimises its plan to an empty relation,
        # the metrics are never reported, and Observation.get waits, then fails.
        observation = Observation("batch")
        events = events.observe(
            observation,
            F.collect_list(F.when(~F.col("valid"), F.col("offset"))).alias("rejected_offsets"),
        )
    results = aggregate_events(events, window_ms)
    path = output.new_staging_path(offsets)
    try:
        # coalesce(1): a batch's results are small, and one file per batch
        # keeps the published tree (and later reads) from filling with empty parts.
        results.coalesce(1).write.mode("errorifexists").parquet(str(path))
        rejected: list[int] = []
        if observation is not None:
            rejected = [int(o) for o in observation.get["rejected_offsets"]]
        return output.finish_stage(
            path,
            offsets,
            records=len(batch.records),
            rejected_offsets=rejected,
            window_ms=window_ms,
        )
    except BaseException:
        # A failed attempt leaves no partial directory behind (a crash here
        # leaves one; cleanup_orphans removes it on the next assignment).
        shutil.rmtree(path, ignore_errors=True)
        raise


def published_dataframe(spark: SparkSession, output: PipelineOutput) -> DataFrame:
    """The combined results of every published batch, as a DataFrame.

    Each published batch holds partial aggregates of its own records; this sums
    them per key and window. Staging directories are never read.

    Args:
        spark: The session.
        output: The output to read.

    Returns:
        ``(key, window_start_ms, event_count, value_sum)``, one row per key and window.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    paths = [str(p) for p in output.published_paths()]
    if paths:
        parts = spark.read.schema(_result_schema()).parquet(*paths)
    else:
        parts = spark.createDataFrame([], _result_schema())
    return parts.groupBy("key", "window_start_ms").agg(
        F.sum("event_count").alias("event_count"),
        F.sum("value_sum").cast(DecimalType(VALUE_PRECISION, VALUE_SCALE)).alias("value_sum"),
    )


def read_results(
    spark: SparkSession, output: PipelineOutput
) -> dict[tuple[str, int], tuple[int, Decimal]]:
    """The combined results of every published batch, collected to the driver.

    Meant for tests and small outputs; use :func:`published_dataframe` for large ones.

    Args:
        spark: The session.
        output: The output to read.

    Returns:
        ``{(key, window_start_ms): (count, sum)}``.
    """
    return {
        (row["key"], row["window_start_ms"]): (row["event_count"], row["value_sum"])
        for row in published_dataframe(spark, output).collect()
    }


def _raw_schema() -> StructType:
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    return StructType(
        [StructField("offset", LongType(), False), StructField("raw", BinaryType(), True)]
    )


def _event_schema() -> StructType:
    from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("key", StringType()),
            StructField("ts_ms", LongType()),
            StructField("value", DecimalType(VALUE_PRECISION, VALUE_SCALE)),
        ]
    )


def _result_schema() -> StructType:
    from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("key", StringType()),
            StructField("window_start_ms", LongType()),
            StructField("event_count", LongType()),
            StructField("value_sum", DecimalType(VALUE_PRECISION, VALUE_SCALE)),
        ]
    )
