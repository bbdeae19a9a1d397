"""The demo's pipeline, :func:`windowed_sum`: count and sum JSON events per key and window.

Its two steps, :func:`parse_events` and :func:`aggregate_events`, are public so that other
jobs (a Structured Streaming comparison, a test) compute exactly what the workers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from coordination.errors import ConfigurationError

from ._definition import BATCH_COLUMN, Pipeline
from ._output import PipelineOutputError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from ._sinks import Sink

__all__ = [
    "DEFAULT_WINDOW_MS",
    "MAX_ABS_VALUE",
    "VALUE_PRECISION",
    "VALUE_SCALE",
    "WINDOWED_SUM_KEYS",
    "WINDOWED_SUM_TOTALS",
    "aggregate_events",
    "parse_events",
    "windowed_sum",
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

WINDOWED_SUM_KEYS: tuple[str, ...] = ("key", "window_start_ms")
"""The columns that identify a row of :func:`windowed_sum`'s results (merged on by a DeltaSink)."""

WINDOWED_SUM_TOTALS: tuple[str, ...] = ("event_count", "value_sum")
"""The columns of :func:`windowed_sum`'s results that add up (a DeltaSink adds them)."""


def windowed_sum(topics: str | Sequence[str], sink: Sink, *, window_ms: int = 60_000) -> Pipeline:
    """Count and sum JSON events ``{"key", "ts_ms", "value"}`` per key and tumbling window.

    The demo's pipeline. Valid events, rejected ones, the exact decimal sums
    and the window arithmetic are described at :func:`~recipes.pipeline.parse_events`
    and :func:`~recipes.pipeline.aggregate_events`. With a
    :class:`~recipes.pipeline.DeltaSink` the results are merged on
    ``(key, window_start_ms)``, adding ``event_count`` and ``value_sum``, so the
    table holds final totals. It takes several batches at once
    (``batches_together``): both its steps carry :data:`BATCH_COLUMN` and the
    sums group by it.

    Example:
        windowed_sum("events", DeltaSink("/data/totals", staging="/data/staging",
                                         key_columns=WINDOWED_SUM_KEYS,
                                         add_columns=WINDOWED_SUM_TOTALS),
                     window_ms=10_000)

    Args:
        topics: The input topic or topics.
        sink: Where results go.
        window_ms: The tumbling window in milliseconds; fixed for the life of the sink.
    """
    if window_ms <= 0:
        raise ConfigurationError(f"window_ms must be > 0, got {window_ms}")
    return Pipeline(
        topics=(topics,) if isinstance(topics, str) else tuple(topics),
        sink=sink,
        parse=parse_events,
        transform=lambda events: aggregate_events(events, window_ms),
        name=f"windowed-sum-{window_ms}ms",
        window_ms=window_ms,
        batches_together=True,
    )


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
        raw: Kafka's rows (:func:`kafka_rows`, :func:`records_dataframe`).

    Returns:
        ``(offset, key, ts_ms, value DECIMAL(38, 9), valid BOOLEAN)``, and
        :data:`~recipes.pipeline.BATCH_COLUMN` after ``offset`` if ``raw`` has it.
    """
    from pyspark.sql import functions as F

    event = F.from_json(F.col("value").cast("string"), _event_schema())
    parsed = raw.select(
        "offset",
        *([BATCH_COLUMN] if BATCH_COLUMN in raw.columns else []),
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
        value_sum DECIMAL(38, 9))``, one row per key and window; if ``events``
        has :data:`~recipes.pipeline.BATCH_COLUMN`, one row per batch, key and
        window, with that column first.

    Raises:
        PipelineOutputError: ``window_ms`` is not positive.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    if window_ms <= 0:
        raise PipelineOutputError(f"window_ms must be > 0, got {window_ms}")
    ts = F.col("ts_ms")
    batch = [F.col(BATCH_COLUMN)] if BATCH_COLUMN in events.columns else []
    return (
        events.where(F.col("valid"))
        .groupBy(*batch, F.col("key"), (ts - ts % F.lit(window_ms)).alias("window_start_ms"))
        .agg(
            F.count(F.lit(1)).alias("event_count"),
            F.sum("value").cast(DecimalType(VALUE_PRECISION, VALUE_SCALE)).alias("value_sum"),
        )
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
