"""The Parquet compactor on a local Spark: segments hold exactly what was published.

Each case stages and publishes real batches (:func:`stage_batch`), compacts them with
:class:`ParquetCompactor`, and reads the results back as a reader does
(:func:`published_dataframe`), before and after the compactor's deletions.
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
from recipes.pipeline import ParquetCompactor, ParquetSink, PipelineOutput, PipelineOutputError
from recipes.pipeline._spark import published_dataframe

from .test_sinks import expected, stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def results(
    spark: SparkSession, output: PipelineOutput
) -> dict[tuple[str, int], tuple[int, Decimal]]:
    rows = published_dataframe(spark, output).collect()
    return {(r["key"], r["window_start_ms"]): (r["event_count"], r["value_sum"]) for r in rows}


def data_files(root: Path) -> int:
    """The data files a reader would read."""
    return len(PipelineOutput(root).published_files())


def test_a_cycle_copies_the_batches_into_one_segment_and_readers_see_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetSink(tmp_path, compaction_interval_ms=1000, retention_ms=0)
    output = sink.output(spark)
    ranges = [(0, 10), (10, 25), (25, 40)]
    for start, end in ranges:
        output.publish(stage(spark, output, start, end))
    before = [r.name for r in output.published()]
    assert results(spark, output) == expected(*ranges)
    assert data_files(tmp_path) == 3

    segment = ParquetCompactor(spark, sink, identity="w1", token=7).compact()
    assert segment is not None
    assert sorted(segment.batches) == before
    assert segment.rows == sum(len(expected((s, e))) for s, e in ranges)  # rows, not records
    assert data_files(tmp_path) == 1
    assert results(spark, output) == expected(*ranges)
    assert [r.name for r in output.published()] == before
    # The next cycle deletes the copied batches (no retention here); nothing changes.
    ParquetCompactor(spark, sink).compact()
    assert list(output.published_dir.iterdir()) == []
    assert results(spark, output) == expected(*ranges)
    assert sink.read(spark).count() == segment.rows


def test_segments_beyond_the_limit_are_merged_and_stay_exact(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetSink(tmp_path, compaction_interval_ms=1000, max_segments=2, retention_ms=0)
    output = sink.output(spark)
    compactor = ParquetCompactor(spark, sink)
    ranges = []
    for i in range(5):
        pair = [(i * 20, i * 20 + 10), (i * 20 + 10, i * 20 + 20)]
        for start, end in pair:
            output.publish(stage(spark, output, start, end))
        ranges += pair
        assert compactor.compact() is not None
        assert len(output.segments.view().segments) <= 2
        assert results(spark, output) == expected(*ranges)
    assert data_files(tmp_path) <= 2
    output.check_published({("t", 0): (0, 100)})


def test_a_deposed_compactor_commits_nothing_and_leaves_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetSink(tmp_path, compaction_interval_ms=1000)
    output = sink.output(spark)
    for start, end in [(0, 10), (10, 20)]:
        output.publish(stage(spark, output, start, end))
    assert ParquetCompactor(spark, sink).compact(still_leader=lambda: False) is None
    assert output.segments.view().segments == ()
    assert list(output.segments.compacting_dir.iterdir()) == []
    assert results(spark, output) == expected((0, 20))


def test_the_compactor_runs_while_it_leads_and_once_more_when_stopped(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetSink(tmp_path, compaction_interval_ms=200)
    output = sink.output(spark)
    output.publish(stage(spark, output, 0, 10))
    output.publish(stage(spark, output, 10, 20))
    stop = threading.Event()
    compactor = ParquetCompactor(spark, sink)
    thread = threading.Thread(target=compactor.run, args=(stop, lambda: True))
    thread.start()
    deadline = time.monotonic() + 60
    while compactor.cycles < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    output.publish(stage(spark, output, 20, 35))
    output.publish(stage(spark, output, 35, 40))
    stop.set()
    thread.join(120)
    assert not thread.is_alive()
    assert compactor.cycles == 2
    assert output._own_dirs(output.segments.view()) == []  # the last cycle took the last two
    assert results(spark, output) == expected((0, 40))


def test_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="compaction_interval_ms"):
        ParquetSink(tmp_path, compaction_interval_ms=0)
    with pytest.raises(ConfigurationError, match="max_segments"):
        ParquetSink(tmp_path, compaction_interval_ms=10, max_segments=1)
    with pytest.raises(ConfigurationError, match="no compaction_interval_ms"):
        ParquetCompactor(None, ParquetSink(tmp_path))
    with pytest.raises(ConfigurationError, match="give a Spark session"):
        ParquetCompactor(None, ParquetSink(tmp_path, compaction_interval_ms=10))


def test_a_copy_that_does_not_hold_its_batches_rows_is_not_committed(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetSink(tmp_path, compaction_interval_ms=1000)
    output = sink.output(spark)
    names = [output.publish(stage(spark, output, s, e)).name for s, e in [(0, 10), (10, 20)]]
    # A batch whose files hold a row fewer than its manifest says (a lost task's output).
    manifest_path = output.published_dir / names[1] / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["rows"] += 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(PipelineOutputError, match="the copy holds"):
        ParquetCompactor(spark, sink).compact()
    assert output.segments.view().segments == ()
    assert list(output.segments.compacting_dir.iterdir()) == []
    assert results(spark, output) == expected((0, 20))
