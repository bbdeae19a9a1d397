"""The sinks on a local Spark: a Delta table receives every committed batch exactly once.

Each case stages real batches with Spark (:func:`stage_batch`) and publishes them the
way the worker and a new owner's recovery do, including the crash windows of the
protocol, then reads the table back.
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from coordination.errors import ConfigurationError
from recipes.pipeline import (
    Batch,
    DeltaSink,
    ParquetSink,
    Pipeline,
    PipelineOutput,
    StagedBatch,
    stage_batch,
    windowed_sum,
)
from recipes.pipeline._sinks import _TXN_APP_ID, _TXN_VERSION, _session_lock, delta_app_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

KEYS = ["key", "window_start_ms"]
ADDED = ["event_count", "value_sum"]


def events(start: int, end: int, *, key: str = "k") -> list[tuple[int, bytes | None]]:
    return [
        (o, json.dumps({"key": f"{key}{o % 3}", "ts_ms": o * 1000, "value": o}).encode())
        for o in range(start, end)
    ]


def delta_sink(tmp_path: Path) -> DeltaSink:
    return DeltaSink(
        str(tmp_path / "table"), staging=tmp_path / "staging", key_columns=KEYS, add_columns=ADDED
    )


def stage(
    spark: SparkSession, output: PipelineOutput, start: int, end: int, partition: int = 0
) -> StagedBatch:
    batch = Batch(
        topic="t",
        partition=partition,
        start_offset=start,
        end_offset=end,
        records=events(start, end),
    )
    return stage_batch(spark, output, batch, window_ms=10_000)


def totals(spark: SparkSession, sink: DeltaSink) -> dict[tuple[str, int], tuple[int, Decimal]]:
    rows = sink.read(spark).collect()
    assert len(rows) == len({(r["key"], r["window_start_ms"]) for r in rows}), "a key twice"
    return {(r["key"], r["window_start_ms"]): (r["event_count"], r["value_sum"]) for r in rows}


def expected(*ranges: tuple[int, int]) -> dict[tuple[str, int], tuple[int, Decimal]]:
    out: dict[tuple[str, int], tuple[int, Decimal]] = {}
    for start, end in ranges:
        for o in range(start, end):
            k = (f"k{o % 3}", (o * 1000) // 10_000 * 10_000)
            count, total = out.get(k, (0, Decimal(0)))
            out[k] = (count + 1, total + o)
    return out


class TestDeltaSink:
    def test_batches_are_merged_into_final_totals(self, spark, tmp_path):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 25))
        output.publish(stage(spark, output, 25, 60))
        output.publish(stage(spark, output, 0, 40, partition=1))
        assert totals(spark, sink) == _add(expected((0, 25), (25, 60)), expected((0, 40)))

    def test_a_batch_applied_before_a_crash_is_not_applied_again_by_recover(self, spark, tmp_path):
        # The committing owner applied the batch to the table and crashed before the
        # rename; the next owner's recover publishes the same staging directory again.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        staged = stage(spark, output, 0, 30)
        files = sorted(output.read_manifest(staged.path)["files"])
        sink._apply(spark, staged.path, staged.range, files)
        assert totals(spark, sink) == expected((0, 30))
        successor = sink.output(spark)
        assert successor.recover("t", 0, 30, staged.commit_metadata) is not None
        assert totals(spark, sink) == expected((0, 30))
        assert output.published() == [staged.range]

    def test_an_older_batch_of_a_partition_is_never_applied_after_a_newer_one(
        self, spark, tmp_path
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        old = stage(spark, output, 0, 10)
        output.publish(stage(spark, output, 0, 20))
        files = sorted(output.read_manifest(old.path)["files"])
        sink._apply(spark, old.path, old.range, files)  # a late duplicate: skipped
        assert totals(spark, sink) == expected((0, 20))

    def test_the_transaction_id_is_the_partition_and_the_version_its_end_offset(
        self, spark, tmp_path
    ):
        from delta.tables import DeltaTable

        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10, partition=4))
        txns = [
            json.loads(line)["txn"]
            for log in sorted((tmp_path / "table" / "_delta_log").glob("*.json"))
            for line in log.read_text().splitlines()
            if '"txn"' in line
        ]
        assert [(t["appId"], t["version"]) for t in txns] == [("coordination-pipeline:t:4", 10)]
        assert delta_app_id("t", 4) == "coordination-pipeline:t:4"
        # Another attempt at the same range (a new owner's) changes nothing.
        history = DeltaTable.forPath(spark, sink.table).history().count()
        output.publish(stage(spark, output, 0, 10, partition=4))
        assert DeltaTable.forPath(spark, sink.table).history().count() == history

    def test_concurrent_workers_conflict_and_retry_without_losing_or_doubling(
        self, spark, tmp_path
    ):
        # Two sessions (separate settings, as two workers have) merge at once into
        # one table: Delta's optimistic concurrency makes some conflict and retry.
        sink = delta_sink(tmp_path)
        errors: list[BaseException] = []

        def worker(session: SparkSession, partition: int) -> None:
            try:
                output = sink.output(session)
                for start in range(0, 60, 15):
                    output.publish(stage(session, output, start, start + 15, partition))
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(spark.newSession(), p)) for p in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert errors == []
        assert totals(spark, sink) == _add(expected((0, 60)), expected((0, 60)))

    def test_a_batch_thread_never_writes_under_another_batchs_transaction_id(self, spark, tmp_path):
        # A worker's batch threads share one session. While one merges (its batch's
        # transaction id set in the session), another that finds no table yet must
        # not create it: that commit would carry the first batch's id, and Delta
        # would then skip the first batch as already applied.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        first = stage(spark, output, 0, 30, partition=0)
        second = stage(spark, output, 0, 20, partition=1)
        created = tmp_path / "table" / "_delta_log" / f"{0:020d}.json"
        with _session_lock(spark):  # the first batch's merge is under way
            spark.conf.set(_TXN_APP_ID, delta_app_id("t", 0))
            spark.conf.set(_TXN_VERSION, "30")
            thread = threading.Thread(target=output.publish, args=(second,))
            thread.start()
            deadline = time.monotonic() + 8
            while not created.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            spark.conf.unset(_TXN_APP_ID)
            spark.conf.unset(_TXN_VERSION)
        thread.join(120)
        output.publish(first)
        assert totals(spark, sink) == _add(expected((0, 30)), expected((0, 20)))

    def test_without_key_columns_batches_are_appended_once(self, spark, tmp_path):
        sink = DeltaSink(str(tmp_path / "table"), staging=tmp_path / "staging")
        output = sink.output(spark)
        staged = stage(spark, output, 0, 30)
        files = sorted(output.read_manifest(staged.path)["files"])
        sink._apply(spark, staged.path, staged.range, files)
        output.publish(staged)  # applies again: skipped
        assert sink.read(spark).count() == len(expected((0, 30)))

    def test_settings_are_checked(self, tmp_path):
        with pytest.raises(ConfigurationError, match="key_columns"):
            DeltaSink("t", staging=tmp_path, add_columns=["n"])
        with pytest.raises(ConfigurationError, match="empty"):
            DeltaSink("t", staging=tmp_path, key_columns=[])


class TestPipeline:
    def test_a_schema_turns_json_values_into_columns(self, spark, tmp_path):
        output = PipelineOutput(tmp_path / "out")
        pipeline = Pipeline(
            topics=["t"],
            schema="key STRING, value BIGINT",
            transform=lambda rows: rows.groupBy("key").sum("value"),
            sink=ParquetSink(output.root),
        )
        records = events(0, 30)
        batch = Batch(topic="t", partition=0, start_offset=0, end_offset=30, records=records)
        staged = stage_batch(spark, output, batch, pipeline=pipeline)
        output.publish(staged)
        got = {r["key"]: r["sum(value)"] for r in ParquetSink(output.root).read(spark).collect()}
        assert got == {f"k{m}": sum(o for o in range(30) if o % 3 == m) for m in range(3)}
        assert staged.records == 30 and staged.window_ms is None

    def test_a_pipeline_needs_topics_and_one_way_to_parse(self, tmp_path):
        sink = ParquetSink(tmp_path)
        with pytest.raises(ConfigurationError, match="topics"):
            Pipeline(topics=[], sink=sink)
        with pytest.raises(ConfigurationError, match="not both"):
            Pipeline(topics=["t"], sink=sink, schema="a INT", parse=lambda df: df)
        assert Pipeline(topics="t", sink=sink).topics == ("t",)
        assert windowed_sum(["a", "b"], sink, window_ms=5).window_ms == 5


def _add(
    a: dict[tuple[str, int], tuple[int, Decimal]], b: dict[tuple[str, int], tuple[int, Decimal]]
) -> dict[tuple[str, int], tuple[int, Decimal]]:
    out = dict(a)
    for k, (count, total) in b.items():
        c0, t0 = out.get(k, (0, Decimal(0)))
        out[k] = (c0 + count, t0 + total)
    return out
