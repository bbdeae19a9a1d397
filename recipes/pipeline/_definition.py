"""What a pipeline computes: its topics, how records become rows, the transform, the sink.

A :class:`Pipeline` is the user's part; the workers decide who processes which
offset range (:class:`~recipes.pipeline.PipelineWorker`), Spark reads each range
from Kafka and runs the pipeline's parse and transform on it, and the sink
makes a batch's results visible once, after its offsets are committed.
:func:`windowed_sum` (count and sum per key and tumbling window) is one
pipeline, the demo's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordination.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from ._sinks import Sink

__all__ = [
    "BATCH_COLUMN",
    "KAFKA_COLUMNS",
    "Pipeline",
]

KAFKA_COLUMNS: tuple[str, ...] = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
)
"""The columns of the rows Spark reads from Kafka, as Spark's Kafka source names them."""

BATCH_COLUMN: str = "_coordination_batch"
"""Which batch a row belongs to, for a pipeline with ``batches_together``.

An integer that tells the batches of one Spark job apart (0 for a batch
staged alone); it means nothing outside that job and is never written."""


def _unchanged(frame: DataFrame) -> DataFrame:
    return frame


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A pipeline: which topics, how each record becomes a row, the transform, the sink.

    Example:
        Pipeline(
            topics=["clicks", "views"],
            schema="user STRING, page STRING, ts_ms BIGINT",
            transform=lambda rows: rows.groupBy("page").count(),
            sink=ParquetSink("/data/page-counts"),
        )

    Each batch is one offset range of one partition. Spark reads it from Kafka
    (columns :data:`KAFKA_COLUMNS`); ``schema`` or ``parse`` turns those rows
    into the rows ``transform`` receives, and what ``transform`` returns is the
    batch's result, written by ``sink``. The transform runs once per batch, on
    that batch's rows only: an aggregation yields partial results per batch,
    which a sink that merges (:class:`~recipes.pipeline.DeltaSink` with
    ``key_columns``) combines into final ones.

    Rejected records: if the parsed rows have a boolean column ``valid``, the
    offsets of rows where it is false are counted and listed in the batch's
    manifest (the transform decides what to do with them; :func:`windowed_sum`
    drops them). Validity must depend on the record alone, so every owner of a
    partition rejects the same records.

    Several batches at once: with ``batches_together=True`` the transform
    promises to keep batches apart itself, and the worker runs all the batches
    of one Spark job through one Kafka scan, one parse and one transform
    instead of one each (a job about 1.5x faster on small batches; see
    docs/pipeline.md). The transform's input then has the column
    :data:`BATCH_COLUMN` (an integer naming each row's batch, also when it gets
    one batch), and its output must keep that column and combine rows of one
    batch only: an aggregation groups by it beside its own keys, a row-wise
    transform keeps it by keeping its input's columns. A ``parse`` function
    must keep the column too (``schema`` does). The column is not written: each
    batch's results still go to the sink on their own, as without the option.
    A transform that mixes batches gives wrong results; one that drops the
    column, or returns rows whose column names no batch, fails the batch
    with a ``ConfigurationError`` (a worker does not start with such a
    pipeline: its warm-up batch fails so).

    Attributes:
        topics: The input topics.
        sink: Where results go (:class:`~recipes.pipeline.ParquetSink` or
            :class:`~recipes.pipeline.DeltaSink`).
        transform: ``DataFrame -> DataFrame`` applied to each batch's parsed rows;
            default: the parsed rows unchanged.
        schema: The records' values are JSON of this schema (a ``StructType`` or
            a DDL string): its fields become columns, beside ``topic``,
            ``partition``, ``offset`` and ``timestamp``. A value that is not such
            JSON gives nulls. Exclusive with ``parse``.
        parse: ``DataFrame -> DataFrame`` from Kafka's rows to the transform's
            input; exclusive with ``schema``. Neither: the transform gets Kafka's rows.
        name: A name for logs and the batches' manifests.
        window_ms: Recorded in each batch's manifest when the results are
            per time window (results of different sizes do not combine); None otherwise.
        batches_together: The transform (and ``parse``) keep :data:`BATCH_COLUMN`
            and never combine rows of two batches (see above).

    Raises:
        ConfigurationError: No topic, or both ``schema`` and ``parse``.
    """

    topics: Sequence[str]
    sink: Sink
    transform: Callable[[DataFrame], DataFrame] = _unchanged
    schema: StructType | str | None = None
    parse: Callable[[DataFrame], DataFrame] | None = None
    name: str = "pipeline"
    window_ms: int | None = None
    batches_together: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", (self.topics,))
        object.__setattr__(self, "topics", tuple(self.topics))
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise ConfigurationError(
                f"pipeline {self.name!r}: topics must be one or more topic names, got "
                f"{self.topics!r}"
            )
        if self.schema is not None and self.parse is not None:
            raise ConfigurationError(
                f"pipeline {self.name!r}: give schema (the values are JSON of it) or parse "
                "(your own function of Kafka's rows), not both"
            )
        if self.window_ms is not None and self.window_ms <= 0:
            raise ConfigurationError(
                f"pipeline {self.name!r}: window_ms must be > 0, got {self.window_ms}"
            )

    def rows(self, kafka_rows: DataFrame) -> DataFrame:
        """The transform's input: Kafka's rows parsed by ``schema`` or ``parse``."""
        if self.parse is not None:
            return self.parse(kafka_rows)
        if self.schema is None:
            return kafka_rows
        from pyspark.sql import functions as F

        value = F.from_json(F.col("value").cast("string"), self.schema)
        kept = ["topic", "partition", "offset", "timestamp"]
        if BATCH_COLUMN in kafka_rows.columns:
            kept.append(BATCH_COLUMN)
        rows = kafka_rows.select(*kept, value.alias("_value")).select(*kept, "_value.*")
        if [c.lower() for c in rows.columns].count(BATCH_COLUMN.lower()) > 1:
            # Spark matches column names case-insensitively: the field would hide the column.
            raise ConfigurationError(
                f"pipeline {self.name!r}: its schema has a field named {BATCH_COLUMN!r}, the "
                "column that tells batches apart with batches_together=True; rename the field "
                "(parse it yourself with parse=) or set batches_together=False"
            )
        return rows
