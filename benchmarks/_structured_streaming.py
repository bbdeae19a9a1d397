"""The benchmark's peer: the same pipeline as a Spark Structured Streaming job.

What a Spark user would write instead of the coordinated workers: one driver, the
Kafka source (``subscribe``, offsets tracked in a checkpoint), and the same parse
and per-batch windowed sum (``recipes.pipeline.parse_events`` / ``aggregate_events``)
in ``foreachBatch``, written idempotently per batch id: Parquet into
``<output>/batch=<id>`` (overwritten on a replay), or a Delta MERGE with Delta's
``txnAppId``/``txnVersion`` (the documented exactly-once idiom). Exactly-once for
both, since a restarted query replays a batch id with the same offsets.

    python -m benchmarks._structured_streaming --bootstrap-servers B --topic T \
        --checkpoint DIR --output DIR [--sink parquet|delta] [--available-now] [--wait-for-go]

Prints JSON lines: ``started`` (session up), ``batch`` (per completed micro-batch, from
Spark's progress reports: its id, when it was reported, its rows, the end offset per
partition), ``done`` (an available-now run finished).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipes.pipeline import (
    WINDOWED_SUM_KEYS,
    WINDOWED_SUM_TOTALS,
    aggregate_events,
    parse_events,
    spark_session,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_lock = threading.Lock()


def say(kind: str, **fields: Any) -> None:
    with _lock:
        print(json.dumps({"event": kind, "t": time.time(), **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--sink", choices=("parquet", "delta"), default="parquet")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--window-ms", type=int, default=10_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=0)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--wait-for-go", action="store_true")
    parser.add_argument(
        "--kafka-option", action="append", default=[], help="KEY=VALUE, a kafka.* source option"
    )
    args = parser.parse_args()

    spark = spark_session(args.master, app_name="structured-streaming-peer")
    say("started")
    if args.wait_for_go:
        for line in sys.stdin:
            if line.strip() == "go":
                break
    output = Path(args.output)
    table = str(output / "table")

    def write(batch: DataFrame, batch_id: int) -> None:
        results = aggregate_events(parse_events(batch), args.window_ms)
        if args.sink == "parquet":
            results.coalesce(1).write.mode("overwrite").parquet(str(output / f"batch={batch_id}"))
        else:
            from delta.tables import DeltaTable

            if not DeltaTable.isDeltaTable(spark, table):
                results.limit(0).write.format("delta").mode("append").save(table)
            keys = " AND ".join(f"t.{c} <=> b.{c}" for c in WINDOWED_SUM_KEYS)
            added: dict[str, Any] = {c: f"t.{c} + b.{c}" for c in WINDOWED_SUM_TOTALS}
            session = batch.sparkSession
            session.conf.set("spark.databricks.delta.write.txnAppId", "structured-streaming")
            session.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
            try:
                (
                    DeltaTable.forPath(session, table)
                    .alias("t")
                    .merge(results.alias("b"), keys)
                    .whenMatchedUpdate(set=added)
                    .whenNotMatchedInsertAll()
                    .execute()
                )
            finally:
                session.conf.unset("spark.databricks.delta.write.txnAppId")
                session.conf.unset("spark.databricks.delta.write.txnVersion")

    from pyspark.sql.streaming.listener import StreamingQueryListener

    class Progress(StreamingQueryListener):
        """Reports each completed micro-batch (no extra Spark job to find its offsets)."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if not progress.sources or progress.numInputRows == 0:
                return
            end = progress.sources[0].endOffset
            end = json.loads(end) if isinstance(end, str) else end
            say(
                "batch",
                batch=progress.batchId,
                rows=progress.numInputRows,
                ends={p: int(o) for p, o in end.get(args.topic, {}).items()},
            )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .options(**dict(option.split("=", 1) for option in args.kafka_option))
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    writer = (
        reader.load().writeStream.foreachBatch(write).option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if args.available_now else writer
    query = writer.start()
    query.awaitTermination()
    say("done")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
