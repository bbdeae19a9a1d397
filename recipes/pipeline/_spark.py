"""The Spark side of the pipeline: parse events, aggregate per key and window, stage Parquet.

One :func:`spark_session` per worker process, reused for every batch;
:func:`stage_batch` turns the records of one offset range of one partition into
a staging directory of :class:`~recipes.pipeline._output.PipelineOutput`, and
:func:`read_results` combines everything published. PySpark is imported
lazily, so the rest of the package works without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pwd
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from coordination.errors import ConfigurationError

from ._definition import BATCH_COLUMN
from ._jvm import jvm_class
from ._local_fs import local_file_system_conf
from ._output import (
    OffsetRange,
    PipelineOutput,
    PipelineOutputError,
    StagedBatch,
    StagedFilesError,
)
from ._windowed_sum import DEFAULT_WINDOW_MS, VALUE_PRECISION, VALUE_SCALE, windowed_sum

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession
    from pyspark.sql.types import StructType

    from ._definition import Pipeline

__all__ = [
    "Batch",
    "kafka_rows",
    "published_dataframe",
    "read_results",
    "records_dataframe",
    "spark_packages",
    "spark_session",
    "stage_batch",
    "stage_many",
    "stage_rows",
]

_COMMITTER_KEY: Final = "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"
_COMMITTER_VERSION: Final = "1"
# The broker-side wait of the Kafka source's fetches (kafka_rows says why).
_SOURCE_FETCH_MAX_WAIT_MS: Final = 10

_DEFAULT_CONF: Final[Mapping[str, str]] = {
    # Small enough for a 2-core machine running a broker too; raise for real batches.
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    # A batch aggregates to a few thousand rows: 200 shuffle partitions (the
    # default) would be 200 tasks of scheduling overhead per batch.
    "spark.sql.shuffle.partitions": "4",
    # Version 1 of Hadoop's file output committer: a task's output reaches the
    # destination only through the job commit, from the one attempt per task
    # that Spark let commit. Version 2 moves files at task commit, so a task
    # whose executor is lost mid-commit, or a speculative duplicate, can leave a
    # second part file and a batch counted twice on a cluster. It is also set
    # on every write, so a session created elsewhere cannot change it.
    _COMMITTER_KEY: _COMMITTER_VERSION,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Delta rebuilds a table's state with 50 tasks by default: seconds per
    # batch for a table a micro-batch pipeline commits to every second.
    "spark.databricks.delta.snapshotPartitions": "2",
    # A batch's counts come from DataFrame observations, which Spark reads off the
    # executed plan. Adaptive execution replaces a part of the plan whose shuffle
    # came out empty (a range with only rejected records) by an empty relation,
    # observations included: the stage would then fail on every retry.
    "spark.sql.adaptive.optimizer.excludedRules": (
        "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"
    ),
    # PySpark records the Python call site of every DataFrame and Column call, for the
    # query context of an error: five JVM round trips and a walk of the stack per call.
    # A worker builds each job's plan in Python (over a hundred such calls): a job of three
    # ranges of 500 records took 0.49 s with it, 0.42 s without.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
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

    The session gets Spark's Kafka source and, when ``delta-spark`` is
    installed, Delta Lake (:func:`spark_packages`, added to any
    ``spark.jars.packages`` in ``conf``). Spark resolves them into its Ivy
    directory (``spark.jars.ivy``, default ``~/.ivy2.5.2``) when the JVM
    starts; until one start has succeeded with these packages there, starts
    take a lock file in that directory one at a time, because JVMs resolving
    into one empty cache at once read each other's half-written files and fail
    (several workers started together on a fresh machine). Once the cache is
    warm, starts run at once.

    Defaults: ``spark.driver.memory`` and ``spark.executor.memory`` 512m,
    ``spark.sql.shuffle.partitions`` 4, the web UI and the console progress bar
    off, session time zone UTC, Hadoop's file output committer version 1, PySpark's
    call-site capture for DataFrame errors off (``spark.python.sql.dataFrameDebugging
    .enabled``: it costs JVM round trips on every DataFrame call of every job), log
    level WARN. ``conf`` overrides any of them but the committer. On a ``local``
    master, a local file system that sets the permissions of what a job writes without
    starting a ``chmod`` process per file (``spark.hadoop.fs.file.impl`` and
    ``spark.hadoop.fs.AbstractFileSystem.file.impl``, compiled with the JDK's ``javac``
    on first use; docs/pipeline.md says when it is left out); ``conf`` naming either
    setting keeps its own.

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

    Raises:
        ConfigurationError: ``conf`` asks for another file output committer
            algorithm than version 1, which is not atomic per task.
    """
    settings = {**_DEFAULT_CONF, **(conf or {})}
    if str(settings[_COMMITTER_KEY]).strip() != _COMMITTER_VERSION:
        raise ConfigurationError(
            f"{_COMMITTER_KEY}={settings[_COMMITTER_KEY]!r}: the pipeline needs version 1 of "
            "Hadoop's file output committer (version 2 moves task output into place at task "
            "commit, so a lost or speculative task can leave a batch's rows twice); remove "
            "the setting"
        )
    from pyspark.sql import SparkSession

    packages = spark_packages()
    extra = str(settings.get("spark.jars.packages", "")).strip()
    settings["spark.jars.packages"] = ",".join(packages + ([extra] if extra else []))
    if any(p.startswith("io.delta:") for p in packages):
        settings.setdefault("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        settings.setdefault(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None:  # else only its SQL settings change
        gateway = SparkContext._gateway
        running = None if gateway is None else gateway.jvm
        settings.update(local_file_system_conf(master, settings, running))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = _get_or_create(builder, settings)
    spark.sparkContext.setLogLevel("WARN")
    # The worker gives Spark's Kafka source a fixed group id (so its consumers are reused);
    # the source warns about that on every read, which would be a line per batch.
    jvm = spark.sparkContext._jvm
    with contextlib.suppress(Exception):
        assert jvm is not None
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider",
            jvm.org.apache.logging.log4j.Level.ERROR,
        )
    return spark


log = logging.getLogger("recipes.pipeline")

# In the Ivy directory: held while a JVM resolves packages into a cold cache, and the mark
# that one start with a set of packages succeeded there (its name ends in their hash).
_RESOLVE_LOCK: Final = ".coordination-resolve.lock"
_RESOLVED_MARK: Final = ".coordination-resolved-"


def _get_or_create(builder: SparkSession.Builder, settings: Mapping[str, Any]) -> SparkSession:
    """``builder.getOrCreate()``, one process at a time while the packages are not cached.

    Ivy's cache is not safe for concurrent resolution: two JVMs downloading into
    an empty one at once read each other's half-written descriptors
    (``ivy-<version>.xml.original (No such file or directory)``) and report
    artifacts as not found. The first start under the lock fills the cache and
    marks it; processes that waited find the mark and start at once (at the
    same time as each other: resolution from a warm cache only reads it).
    """
    from pyspark import SparkContext

    packages = str(settings.get("spark.jars.packages", "")).strip()
    if not packages or SparkContext._active_spark_context is not None:
        return builder.getOrCreate()  # nothing to resolve, or the JVM runs already
    ivy = _ivy_dir(settings)
    mark = ivy / (_RESOLVED_MARK + hashlib.sha256(packages.encode()).hexdigest()[:16])
    if mark.exists():
        return builder.getOrCreate()
    ivy.mkdir(parents=True, exist_ok=True)
    with open(ivy / _RESOLVE_LOCK, "a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process resolving Spark's packages into %s", ivy)
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if not mark.exists():
            spark = builder.getOrCreate()
            mark.write_text(packages + "\n")
            return spark
    return builder.getOrCreate()


def _ivy_dir(settings: Mapping[str, Any]) -> Path:
    """The Ivy directory Spark resolves packages into: ``spark.jars.ivy`` or Spark's default."""
    configured = str(settings.get("spark.jars.ivy", "")).strip()
    if configured:
        return Path(configured).expanduser()
    # Spark's default is <user.home>/.ivy2.5.2. The JVM's user.home is the account's home
    # from the password database, not $HOME, unless the JVM options in the environment set
    # it (_JAVA_OPTIONS is applied last, so it wins; JAVA_TOOL_OPTIONS first).
    for variable in ("_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"):
        given = re.findall(r"-Duser\.home=(\S+)", os.environ.get(variable, ""))
        if given:
            return Path(given[-1]) / ".ivy2.5.2"
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = str(Path.home())
    return Path(home) / ".ivy2.5.2"


def records_dataframe(
    spark: SparkSession,
    records: Sequence[tuple[int, bytes | None]],
    *,
    topic: str = "",
    partition: int = 0,
) -> DataFrame:
    """Records already in the driver as a DataFrame with Kafka's columns (:func:`kafka_rows`).

    ``key``, ``timestamp`` and ``timestampType`` are null. Row verification is
    skipped (:class:`Batch` checked the offsets), which keeps building the
    DataFrame at about 1 microsecond per record.

    Args:
        spark: The session.
        records: ``(offset, value)`` pairs.
        topic: The topic of every row.
        partition: The partition of every row.

    Returns:
        The DataFrame, one row per record.
    """
    rows = [(None, value, topic, partition, offset, None, None) for offset, value in records]
    return spark.createDataFrame(rows, _kafka_schema(), verifySchema=False)


def warm_up_rows(spark: SparkSession, offsets: OffsetRange) -> DataFrame:
    """Rows with Kafka's columns for ``offsets``, made in the JVM: every tenth value is not
    JSON, the others are ``{"key": "warm-up", "ts_ms": <offset>, "value": "1.5"}``. For a
    worker's warm-up, which then runs the job's code as a real batch does; rows from Python
    (:func:`records_dataframe`) would start PySpark's Python workers, which real batches
    (:func:`kafka_rows`) never use."""
    from pyspark.sql import functions as F

    offset = F.col("id")
    json = F.concat(
        F.lit('{"key": "warm-up", "ts_ms": '), offset.cast("string"), F.lit(', "value": "1.5"}')
    )
    # No otherwise(): a nullable column, as Kafka's values are (tombstones); never null here.
    value = F.when(offset % 10 == 0, F.lit("not json")).when(offset >= 0, json).cast("binary")
    ids = spark.range(offsets.start_offset, offsets.end_offset, 1, numPartitions=1)
    return ids.select(
        F.lit(None).cast("binary").alias("key"),
        value.alias("value"),
        F.lit(offsets.topic).alias("topic"),
        F.lit(offsets.partition).cast("int").alias("partition"),
        offset.alias("offset"),
        F.lit(None).cast("timestamp").alias("timestamp"),
        F.lit(None).cast("int").alias("timestampType"),
    )


def kafka_rows(
    spark: SparkSession,
    offsets: OffsetRange | Sequence[OffsetRange],
    kafka_options: Mapping[str, str],
    *,
    topic: str | None = None,
) -> DataFrame:
    """The records of ``offsets``, read by Spark's Kafka batch source on the executors.

    ``spark.read.format("kafka")`` with ``assign`` and exact ``startingOffsets``
    / ``endingOffsets``, reading ``read_committed`` (aborted transactions are
    skipped): the records never pass through the Python driver. A range whose
    records were deleted by retention fails the read (``failOnDataLoss``)
    rather than silently producing a partial batch. The consumers' broker-side
    fetch wait is 10 ms (``kafka.fetch.max.wait.ms``; Kafka's default is 500):
    a job's read then never waits for a fetch a previous job left at the log's
    end (``kafka_options`` may set it otherwise).

    Args:
        spark: The session; it needs the ``spark-sql-kafka-0-10`` package
            (:func:`spark_session` adds it).
        offsets: One range, or several (of different partitions).
        kafka_options: At least ``kafka.bootstrap.servers``; any ``kafka.*``
            setting of Kafka's Java consumer (security, ...) passes through.
        topic: The real topic name, when ``offsets`` holds a shortened one
            (:func:`~recipes.pipeline._output.dir_topic` of a very long name).

    Returns:
        ``(key, value, topic, partition, offset, timestamp, timestampType)``.
    """
    import json

    ranges = [offsets] if isinstance(offsets, OffsetRange) else list(offsets)
    assign: dict[str, list[int]] = {}
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for r in ranges:
        name = topic or r.topic
        assign.setdefault(name, []).append(r.partition)
        start.setdefault(name, {})[str(r.partition)] = r.start_offset
        end.setdefault(name, {})[str(r.partition)] = r.end_offset
    options = {
        "kafka.isolation.level": "read_committed",
        # Spark keeps a consumer per group id and partition between jobs (the worker gives
        # a fixed group id), and a consumer that read up to the log's end has a fetch left
        # waiting there; the next job's read of that partition waits for it to come back:
        # when a record arrives, or after fetch.max.wait.ms (Kafka's default 500 ms). Its
        # tasks' median read was 180 ms of which 13 ms of CPU under the benchmark's steady
        # stream, 54 ms with this. A read of a bounded range never waits on the broker for
        # records (they exist), so a short wait costs nothing.
        "kafka.fetch.max.wait.ms": str(_SOURCE_FETCH_MAX_WAIT_MS),
        **kafka_options,
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(start),
        "endingOffsets": json.dumps(end),
        "failOnDataLoss": "true",
    }
    if "kafka.bootstrap.servers" not in options:
        raise ConfigurationError("kafka_rows needs kafka_options['kafka.bootstrap.servers']")
    return spark.read.format("kafka").options(**options).load()


def spark_packages() -> list[str]:
    """The Maven packages a pipeline's session needs, matching the installed PySpark.

    Spark's Kafka source (``spark-sql-kafka-0-10``) always, and Delta Lake
    (``delta-spark``) when the ``delta-spark`` Python package is installed.
    Spark resolves them from Maven Central on the first start and caches them
    (``~/.ivy2.5.2``; :func:`spark_session` lets one process at a time resolve
    into a cold cache); on a cluster the driver ships them to the executors.
    """
    import importlib.metadata

    import pyspark

    version = pyspark.__version__
    packages = [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"]
    try:
        delta = importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError:
        return packages
    major_minor = ".".join(version.split(".")[:2])
    packages.append(f"io.delta:delta-spark_{major_minor}_2.13:{delta}")
    return packages


def stage_batch(
    spark: SparkSession,
    output: PipelineOutput,
    batch: Batch,
    *,
    window_ms: int = DEFAULT_WINDOW_MS,
    pipeline: Pipeline | None = None,
) -> StagedBatch:
    """Process the records of ``batch`` (already in the driver) into a new staging directory.

    :func:`stage_rows` on :func:`records_dataframe` of the batch; the worker reads
    its ranges from Kafka in Spark instead (:func:`kafka_rows`). For tests and
    for records that come from elsewhere.

    Args:
        spark: The session (see :func:`spark_session`).
        output: Where to stage.
        batch: The records.
        window_ms: The window of the default pipeline (:func:`windowed_sum`).
        pipeline: What to compute; default :func:`windowed_sum` with ``window_ms``.

    Returns:
        The staged batch.
    """
    if pipeline is None:
        from ._sinks import ParquetSink

        pipeline = windowed_sum(batch.topic, ParquetSink(output.root), window_ms=window_ms)
    rows = records_dataframe(spark, batch.records, topic=batch.topic, partition=batch.partition)
    return stage_rows(spark, output, batch.range, rows, pipeline, records=len(batch.records))


def stage_rows(
    spark: SparkSession,
    output: PipelineOutput,
    offsets: OffsetRange,
    kafka_rows: DataFrame,
    pipeline: Pipeline,
    *,
    records: int | None = None,
) -> StagedBatch:
    """Run ``pipeline`` on the Kafka rows of one offset range, into a new staging directory.

    One Spark job: read (or take) the rows, parse, transform, write one Parquet
    file with Hadoop's version 1 committer. The count of records, of rejected
    records and of result rows are gathered by the same job (DataFrame
    observations), not by a second pass. Then the written files are checked:
    their rows (from their footers) must add up to the rows the job produced, so a
    duplicate part file left by a lost or speculative task fails the stage
    instead of counting a batch twice. The manifest, written last, lists the
    files and their rows; readers read only those
    (:meth:`~recipes.pipeline._output.PipelineOutput.published_files`).

    Next, commit ``offsets.end_offset`` with ``staged.commit_metadata`` and call
    ``output.publish(staged)`` once the commit succeeded. If it failed or its
    outcome is unknown, leave the staging directory: the commit may have
    landed (``recover`` then publishes it), and ``cleanup_orphans`` removes it
    once no commit can name it.

    Args:
        spark: The session.
        output: Where to stage.
        offsets: The range the rows are.
        kafka_rows: Its records, with Kafka's columns (:func:`kafka_rows`).
        pipeline: What to compute.
        records: How many rows ``kafka_rows`` has, if known (rows in memory); None:
            counted by the job. Spark folds a plan over rows in memory into a
            constant and would not report the job's counts.

    Returns:
        The staged batch.

    Raises:
        StagedFilesError: The written files do not hold the rows the job
            produced; the staging directory is removed before the error propagates.
        pyspark.errors.PySparkException: Spark failed; the staging directory
            is removed before the error propagates.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observe = records is None or records > 0
    read: Observation | None = None
    written: Observation | None = None
    if records is None:
        read = Observation("read")
        kafka_rows = kafka_rows.observe(read, F.count(F.lit(1)).alias("records"))
    if pipeline.batches_together:
        kafka_rows = kafka_rows.withColumn(BATCH_COLUMN, F.lit(0))
    parsed = _batch_kept(pipeline, pipeline.rows(kafka_rows), "parse")
    checked: Observation | None = None
    if observe and _has_rejections(parsed):
        checked = Observation("checked")
        parsed = parsed.observe(
            checked,
            F.collect_list(F.when(~F.col("valid"), F.col("offset"))).alias("rejected_offsets"),
        )
    results = _batch_kept(pipeline, pipeline.transform(parsed), "transform")
    if observe:
        # Counted in the write's own (result) stage, whose metrics Spark takes
        # from one successful attempt per task.
        written = Observation("written")
        counted = [F.count(F.lit(1)).alias("rows")]
        if pipeline.batches_together:
            counted.append(_stray_rows(1))
        results = results.observe(written, *counted)
    if pipeline.batches_together:
        results = results.drop(BATCH_COLUMN)
    path = output.new_staging_path(offsets)
    writing = True
    try:
        # coalesce(1): a batch's results are small, and one file per batch
        # keeps the published tree (and later reads) from filling with empty parts.
        (
            results.coalesce(1)
            .write.mode("errorifexists")
            .option(_COMMITTER_KEY.removeprefix("spark.hadoop."), _COMMITTER_VERSION)
            .parquet(str(path))
        )
        writing = False
        rows = int(written.get["rows"]) if written is not None else 0
        if written is not None:
            _no_stray_rows(pipeline, written)
        (files,) = _checked_job_files(spark, [path], [rows])
        rejected: list[int] = []
        if checked is not None:
            rejected = _distinct_offsets(checked.get["rejected_offsets"])
        return output.finish_stage(
            path,
            offsets,
            records=int(read.get["records"]) if read is not None else records or 0,
            rejected_offsets=rejected,
            window_ms=pipeline.window_ms,
            files=files,
            schema=results.schema.json(),
        )
    except BaseException as exc:
        # A failed attempt leaves no partial directory behind (a crash here
        # leaves one; a later cleanup_orphans removes it). But not while Spark may
        # still write there: see _write_over.
        if not _write_over(writing, exc):
            raise
        shutil.rmtree(path, ignore_errors=True)
        raise


def _write_over(writing: bool, exc: BaseException) -> bool:
    """Whether a write interrupted by ``exc`` has stopped writing its files.

    A Spark error (an Exception) comes back once the JVM's job has ended. An
    interruption of the Python call (KeyboardInterrupt, a timeout's signal: not
    an Exception) does not stop the job, which goes on writing and committing
    in the JVM: deleting its directory then breaks the live job (Hadoop's
    committer finds its ``_temporary`` directory gone) and leaves a partial
    tree it recreates. Such a directory is left for cleanup_orphans (staging)
    or remove_dead_jobs (a job directory).
    """
    return not writing or isinstance(exc, Exception)


_RANGE_COLUMN: Final = "_coordination_range"


def stage_many(
    spark: SparkSession,
    output: PipelineOutput,
    ranges: Sequence[OffsetRange],
    kafka_options: Mapping[str, str],
    pipeline: Pipeline,
    *,
    owner: str,
    read: Callable[[OffsetRange], DataFrame] | None = None,
) -> list[StagedBatch]:
    """Run ``pipeline`` on several offset ranges (of different partitions) in one Spark job.

    The transform never mixes two ranges' records: each range is committed
    and published on its own. Without ``pipeline.batches_together`` each
    range is read by its own Kafka scan and parsed and transformed on its own;
    with it, one Kafka scan reads every range, a column
    (:data:`~recipes.pipeline.BATCH_COLUMN`) says each row's range, and one
    parse and one transform (one shuffle for an aggregation) run on all of
    them, the transform keeping ranges apart by that column. Either way the
    results of all ranges are written by one job, each range's into its own
    directory of a job directory
    (:meth:`~recipes.pipeline.PipelineOutput.new_job_path`). The rows in
    the files' footers are checked against every range's rows, as
    :func:`stage_rows` does; then each range's directory is renamed into ``staging/`` and gets
    its manifest. One job instead of one per range: Spark's fixed cost per job
    (planning, scheduling, committing files) is paid once for all the
    partitions a worker has data for.

    Next, as for :func:`stage_rows`: commit each range's end offset with its
    ``commit_metadata`` (one OffsetCommit for all), and publish each range
    whose commit succeeded.

    Args:
        spark: The session.
        output: Where to stage.
        ranges: Ranges of distinct partitions.
        kafka_options: As for :func:`kafka_rows`.
        pipeline: What to compute.
        owner: The staging process's name (its job directories are its own).
        read: A range's Kafka rows; default :func:`kafka_rows` with ``kafka_options``
            (tests give rows from elsewhere).

    Returns:
        The staged batches, in the order of ``ranges``.

    Raises:
        StagedFilesError: A range's written files do not hold the rows the job
            produced for it; nothing is staged.
        ConfigurationError: ``pipeline.batches_together`` and its parse or
            transform dropped :data:`~recipes.pipeline.BATCH_COLUMN`.
        pyspark.errors.PySparkException: Spark failed; nothing is staged.
    """
    if len({(r.topic, r.partition) for r in ranges}) != len(ranges):
        raise PipelineOutputError(f"ranges of one partition in one job: {list(ranges)}")
    if not ranges:
        return []
    if pipeline.batches_together:
        results, counts = _together(spark, ranges, kafka_options, pipeline, read)
    else:
        results, counts = _one_by_one(spark, ranges, kafka_options, pipeline, read)
    job = output.new_job_path(owner)
    staged_paths: list[Path] = []
    writing = True
    live = False  # the write was interrupted while Spark may still write the job
    try:
        # One task writes every range's (small) results: one file per range.
        (
            results.coalesce(1)
            .write.mode("errorifexists")
            .option(_COMMITTER_KEY.removeprefix("spark.hadoop."), _COMMITTER_VERSION)
            .partitionBy(_RANGE_COLUMN)
            .parquet(str(job))
        )
        writing = False
        dirs = [job / f"{_RANGE_COLUMN}={i}" for i in range(len(ranges))]
        # The files' schema: the results' without the column their directories name (from
        # the plan already analysed: a new DataFrame would be analysed again).
        schema = _without(results.schema, _RANGE_COLUMN).json()
        if pipeline.batches_together:
            counts.no_stray_rows(pipeline)
        files = _checked_job_files(spark, dirs, counts.rows())
        staged: list[StagedBatch] = []
        for i, (offsets, written_dir, range_files) in enumerate(
            zip(ranges, dirs, files, strict=True)
        ):
            path = output.new_staging_path(offsets)
            if written_dir.is_dir():
                os.rename(written_dir, path)
            else:
                path.mkdir()  # no result rows
            staged_paths.append(path)
            staged.append(
                output.finish_stage(
                    path,
                    offsets,
                    records=counts.records(i),
                    rejected_offsets=counts.rejected(i),
                    window_ms=pipeline.window_ms,
                    files=range_files,
                    schema=schema,
                )
            )
        return staged
    except BaseException as exc:
        for path in staged_paths:
            shutil.rmtree(path, ignore_errors=True)
        live = not _write_over(writing, exc)
        raise
    finally:
        if not live:
            shutil.rmtree(job, ignore_errors=True)


class _RangeCounts:
    """Each range's records, rejected offsets and result rows, from a job's observations.

    Each of ``read``, ``checked`` and ``written`` is one Observation per range
    or one for all ranges; either way range ``i``'s field is ``records_i``,
    ``rejected_offsets_i`` or ``rows_i``. ``checked`` is empty if the parsed rows
    have no ``valid`` column. Read only once the job ran.
    """

    def __init__(
        self,
        ranges: int,
        read: Sequence[Observation],
        checked: Sequence[Observation],
        written: Sequence[Observation],
    ) -> None:
        self._ranges = ranges
        self._read = read
        self._checked = checked
        self._written = written
        self._values: dict[int, dict[str, Any]] = {}

    def _get(self, observations: Sequence[Observation], field: str, i: int) -> Any:
        observation = observations[0] if len(observations) == 1 else observations[i]
        # Observation.get asks the JVM each time: once per observation.
        values = self._values.get(id(observation))
        if values is None:
            values = self._values[id(observation)] = observation.get
        return values[f"{field}_{i}"]

    def records(self, i: int) -> int:
        return int(self._get(self._read, "records", i))

    def rejected(self, i: int) -> list[int]:
        if not self._checked:
            return []
        return _distinct_offsets(self._get(self._checked, "rejected_offsets", i))

    def rows(self) -> list[int]:
        return [int(self._get(self._written, "rows", i)) for i in range(self._ranges)]

    def no_stray_rows(self, pipeline: Pipeline) -> None:
        """Fail if the rows written for all ranges at once include rows of none."""
        _no_stray_rows(pipeline, self._written[0])


def _one_by_one(
    spark: SparkSession,
    ranges: Sequence[OffsetRange],
    kafka_options: Mapping[str, str],
    pipeline: Pipeline,
    read: Callable[[OffsetRange], DataFrame] | None,
) -> tuple[DataFrame, _RangeCounts]:
    """Every range read, parsed and transformed on its own; the results in one frame."""
    import functools

    from pyspark.sql import DataFrame, Observation
    from pyspark.sql import functions as F

    reads: list[Observation] = []
    checks: list[Observation] = []
    writes: list[Observation] = []
    branches: list[DataFrame] = []
    for i, offsets in enumerate(ranges):
        counted = Observation(f"read-{i}")
        source = kafka_rows(spark, offsets, kafka_options) if read is None else read(offsets)
        rows = source.observe(counted, F.count(F.lit(1)).alias(f"records_{i}"))
        parsed = pipeline.rows(rows)
        if _has_rejections(parsed):
            checked = Observation(f"checked-{i}")
            rejected = F.collect_list(F.when(~F.col("valid"), F.col("offset")))
            parsed = parsed.observe(checked, rejected.alias(f"rejected_offsets_{i}"))
            checks.append(checked)
        written = Observation(f"written-{i}")
        results = pipeline.transform(parsed).observe(written, F.count(F.lit(1)).alias(f"rows_{i}"))
        reads.append(counted)
        writes.append(written)
        branches.append(results.withColumn(_RANGE_COLUMN, F.lit(i)))
    counts = _RangeCounts(len(ranges), reads, checks, writes)
    return functools.reduce(DataFrame.unionByName, branches), counts


def _together(
    spark: SparkSession,
    ranges: Sequence[OffsetRange],
    kafka_options: Mapping[str, str],
    pipeline: Pipeline,
    read: Callable[[OffsetRange], DataFrame] | None,
) -> tuple[DataFrame, _RangeCounts]:
    """All ranges read by one scan, parsed and transformed once, kept apart by BATCH_COLUMN."""
    import functools

    from pyspark.sql import DataFrame, Observation
    from pyspark.sql import functions as F

    # The expressions of this function are SQL text, one JVM call each: built from
    # Column objects, every function, literal and operator is a call of its own (450 of
    # the 740 calls that planned a job of six ranges; 0.07 s a job on a quiet machine).
    if read is None:
        raw = kafka_rows(spark, ranges, kafka_options)
        cases = " ".join(
            f"WHEN `topic` = {_sql_string(r.topic)} AND `partition` = {r.partition} THEN {i}"
            for i, r in enumerate(ranges)
        )
        raw = raw.withColumn(BATCH_COLUMN, F.expr(f"CASE {cases} END"))
    else:
        raw = functools.reduce(
            DataFrame.unionByName,
            [read(r).withColumn(BATCH_COLUMN, F.lit(i)) for i, r in enumerate(ranges)],
        )

    def per_range(field: str, aggregate: str) -> list[Column]:
        """``aggregate`` (SQL with ``{mine}``, the condition of a row of range i) per range."""
        return [
            F.expr(f"{aggregate.format(mine=f'`{BATCH_COLUMN}` = {i}')} AS `{field}_{i}`")
            for i in range(len(ranges))
        ]

    counted = Observation("read")
    raw = raw.observe(counted, *per_range("records", "count(CASE WHEN {mine} THEN 1 END)"))
    parsed = _batch_kept(pipeline, pipeline.rows(raw), "parse")
    checked: Observation | None = None
    if _has_rejections(parsed):
        checked = Observation("checked")
        rejected = "collect_list(CASE WHEN {mine} AND NOT `valid` THEN `offset` END)"
        parsed = parsed.observe(checked, *per_range("rejected_offsets", rejected))
    results = _batch_kept(pipeline, pipeline.transform(parsed), "transform")
    written = Observation("written")
    per_range_rows = per_range("rows", "count(CASE WHEN {mine} THEN 1 END)")
    results = results.observe(written, *per_range_rows, _stray_rows(len(ranges)))
    counts = _RangeCounts(len(ranges), [counted], [checked] if checked else [], [written])
    return results.withColumnRenamed(BATCH_COLUMN, _RANGE_COLUMN), counts


def _without(schema: StructType, column: str) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([field for field in schema.fields if field.name != column])


def _has_rejections(parsed: DataFrame) -> bool:
    return "valid" in parsed.columns and "offset" in parsed.columns


def _distinct_offsets(offsets: Sequence[Any]) -> list[int]:
    # A set: a re-run map task must not list (and count) an offset twice.
    return sorted({int(o) for o in offsets})


def _stray_rows(ranges: int) -> Column:
    """An observed count of result rows whose BATCH_COLUMN names none of ``ranges`` batches.

    Only a transform of several batches at once can return such rows (null,
    or a number it computed); they belong to no range, so no range would
    count them, and they would be lost with the job directory.
    """
    from pyspark.sql import functions as F

    batch = f"`{BATCH_COLUMN}`"
    outside = f"{batch} IS NULL OR NOT ({batch} BETWEEN 0 AND {ranges - 1})"
    return F.expr(f"count(CASE WHEN {outside} THEN 1 END) AS stray")


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _no_stray_rows(pipeline: Pipeline, written: Observation) -> None:
    """Fail if the write's observation (with :func:`_stray_rows`) counted stray rows."""
    stray = int(written.get.get("stray", 0))
    if stray:
        raise ConfigurationError(
            f"pipeline {pipeline.name!r}: its transform returned {stray} rows whose "
            f"{BATCH_COLUMN!r} names no batch of the job (null, or a number it computed); keep "
            "the column as the transform received it: group by it, never compute it"
        )


def _batch_kept(pipeline: Pipeline, frame: DataFrame, step: str) -> DataFrame:
    """``frame``, checked to have BATCH_COLUMN if the pipeline promised to keep it."""
    if pipeline.batches_together and BATCH_COLUMN not in frame.columns:
        raise ConfigurationError(
            f"pipeline {pipeline.name!r} has batches_together=True, but its {step} dropped the "
            f"column {BATCH_COLUMN!r} (columns: {frame.columns}); keep it in the {step}'s "
            "output (group by it beside your keys), or set batches_together=False"
        )
    return frame


def _checked_job_files(
    spark: SparkSession, dirs: Sequence[Path], rows: Sequence[int]
) -> list[dict[str, int]]:
    """Each range directory's data files and their rows, checked against the rows written.

    The rows of each file come from its Parquet footer (see :func:`_parquet_rows`).

    Raises:
        StagedFilesError: A range's files hold another number of rows than the
            write produced for it (a duplicate or missing part file).
    """
    out: list[dict[str, int]] = []
    for d, expected in zip(dirs, rows, strict=True):
        names = sorted(
            e.name for e in _entries(d) if e.is_file() and not e.name.startswith(("_", "."))
        )
        files = dict(zip(names, _parquet_rows(spark, [d / n for n in names]), strict=True))
        if sum(files.values()) != expected:
            raise StagedFilesError(
                f"{d}: the write produced {expected} rows but its data files hold "
                f"{sum(files.values())} ({files}): a task's output is duplicated or missing; "
                "the batch is staged again"
            )
        out.append(files)
    return out


def _parquet_rows(spark: SparkSession, files: Sequence[Path]) -> list[int]:
    """Each Parquet file's rows, from its footer, read by the driver's JVM.

    No Spark job: one that read the files back took 26% of the CPU of a
    batch job of six small ranges (its planning, code generation and scheduling). A footer is
    the file's last bytes and only a complete file has one; its row count is
    what a reader of the file gets.

    Raises:
        StagedFilesError: A file has no readable footer.
    """
    from py4j.protocol import Py4JJavaError

    conf = spark._jsc.hadoopConfiguration()
    input_file = jvm_class(spark, "org.apache.parquet.hadoop.util.HadoopInputFile")
    hadoop_path = jvm_class(spark, "org.apache.hadoop.fs.Path")
    java_file = jvm_class(spark, "java.io.File")
    file_reader = jvm_class(spark, "org.apache.parquet.hadoop.ParquetFileReader")
    # The read options from the session's configuration, once: without them each open
    # made a new Hadoop Configuration, parsing its default XML resources from the jars
    # (6% of a worker driver's CPU under a steady stream, JFR).
    options = jvm_class(spark, "org.apache.parquet.HadoopReadOptions").builder(conf).build()
    counts = []
    for file in files:
        try:
            source = input_file.fromPath(hadoop_path(java_file(str(file)).toURI()), conf)
            reader = file_reader.open(source, options)
            try:
                counts.append(int(reader.getRecordCount()))
            finally:
                reader.close()
        except Py4JJavaError as e:  # not a JVM that is gone: that is no file's fault
            raise StagedFilesError(
                f"{file}: not a readable Parquet file ({e}); the batch is staged again"
            ) from e
    return counts


def _entries(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def published_dataframe(spark: SparkSession, output: PipelineOutput) -> DataFrame:
    """The combined results of every published batch, as a DataFrame.

    Each published batch holds partial aggregates of its own records; this sums
    them per key and window. Only the data files each batch's manifest lists
    are read; staging directories never are.

    Args:
        spark: The session.
        output: The output to read.

    Returns:
        ``(key, window_start_ms, event_count, value_sum)``, one row per key and window.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    paths = [str(p) for p in output.published_files()]
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


def _kafka_schema() -> StructType:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
            StructField("timestamp", TimestampType(), True),
            StructField("timestampType", IntegerType(), True),
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
