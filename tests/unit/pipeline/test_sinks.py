"""The sinks on a local Spark: a Delta table receives every committed batch exactly once.

Each case stages real batches with Spark (:func:`stage_batch`) and publishes them the
way the worker and a new owner's recovery do, including the crash windows of the
protocol, then reads the table back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from coordination.errors import ConfigurationError
from coordination.testing import ManualClock
from recipes.pipeline import (
    Batch,
    DeltaCompactor,
    DeltaSink,
    ParquetSink,
    Pipeline,
    PipelineOutput,
    PipelineOutputError,
    StagedBatch,
    _delta_log,
    _sinks,
    stage_batch,
    windowed_sum,
)
from recipes.pipeline._delta_totals import (
    BATCH_ID_COLUMNS,
    COMPACTOR_APP_ID,
    _state,
    _version,
    plan_cycle,
)
from recipes.pipeline._sinks import (
    _TXN_APP_ID,
    _TXN_VERSION,
    _session_lock,
    create_delta_table_unless_exists,
    delta_app_id,
    delta_commit_lock,
    delta_commit_lock_path,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

KEYS = ["key", "window_start_ms"]
ADDED = ["event_count", "value_sum"]


def events(start: int, end: int, *, key: str = "k") -> list[tuple[int, bytes | None]]:
    return [
        (o, json.dumps({"key": f"{key}{o % 3}", "ts_ms": o * 1000, "value": o}).encode())
        for o in range(start, end)
    ]


def delta_sink(tmp_path: Path, *, compaction_interval_ms: int | None = 2000) -> DeltaSink:
    return DeltaSink(
        str(tmp_path / "table"),
        staging=tmp_path / "staging",
        key_columns=KEYS,
        add_columns=ADDED,
        compaction_interval_ms=compaction_interval_ms,
    )


def merging_sink(tmp_path: Path) -> DeltaSink:
    """Each batch merged into the totals by its own transaction (no compactor)."""
    return delta_sink(tmp_path, compaction_interval_ms=None)


def table_totals(
    spark: SparkSession, sink: DeltaSink
) -> dict[tuple[str, int], tuple[int, Decimal]]:
    """What the totals table itself holds (readers of the table, not of the sink)."""
    rows = spark.read.format("delta").load(sink.table).collect()
    assert len(rows) == len({(r["key"], r["window_start_ms"]) for r in rows}), "a key twice"
    return {(r["key"], r["window_start_ms"]): (r["event_count"], r["value_sum"]) for r in rows}


@contextlib.contextmanager
def holding_commit_lock(table: str) -> Iterator[None]:
    """``table``'s Delta commit lock, held by another process for the block."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from recipes.pipeline._sinks import delta_commit_lock\n"
            f"with delta_commit_lock({table!r}):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate(timeout=30)  # the holder reads the end of its input, lets go


def wait_for_a_waiter(lock_file: Path, waiter: threading.Thread, timeout_s: float = 120) -> None:
    """Return once a process waits for ``lock_file``'s flock (a blocked request shows in
    /proc/locks with ``->`` and the file's inode), while ``waiter`` still runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lock_file.exists():
            inode = f":{lock_file.stat().st_ino} "
            locks = Path("/proc/locks").read_text().splitlines()
            if any("->" in line and inode in line for line in locks):
                return
        assert waiter.is_alive(), f"the waiter ended without waiting for {lock_file}"
        time.sleep(0.05)
    raise AssertionError(f"nothing waited for {lock_file} within {timeout_s} s")


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


def scratch_partials(spark: SparkSession, tmp_path: Path) -> DataFrame:
    """The rows of a scratch sink's partials table (under ``tmp_path / "scratch"``) after one
    published batch: the shape a worker's warm-up gives ``create_partials``."""
    scratch = delta_sink(tmp_path / "scratch")
    output = scratch.output(spark)
    output.publish(stage(spark, output, 0, 10))
    return spark.read.format("delta").load(scratch.partials)


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


BOTH_MODES = pytest.mark.parametrize("interval", [2000, None], ids=["compacted", "per-batch"])


class TestDeltaSink:
    @BOTH_MODES
    def test_batches_are_merged_into_final_totals(self, spark, tmp_path, interval):
        sink = delta_sink(tmp_path, compaction_interval_ms=interval)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 25))
        output.publish(stage(spark, output, 25, 60))
        output.publish(stage(spark, output, 0, 40, partition=1))
        want = _add(expected((0, 25), (25, 60)), expected((0, 40)))
        assert totals(spark, sink) == want
        if interval is not None:
            DeltaCompactor(spark, sink).compact()
        assert table_totals(spark, sink) == want

    @BOTH_MODES
    def test_a_batch_applied_before_a_crash_is_not_applied_again_by_recover(
        self, spark, tmp_path, interval
    ):
        # The committing owner applied the batch to the table and crashed before the
        # rename; the next owner's recover publishes the same staging directory again.
        sink = delta_sink(tmp_path, compaction_interval_ms=interval)
        output = sink.output(spark)
        staged = stage(spark, output, 0, 30)
        files = sorted(output.read_manifest(staged.path)["files"])
        sink._apply(spark, staged.path, staged.range, files)
        assert totals(spark, sink) == expected((0, 30))
        successor = sink.output(spark)
        assert successor.recover("t", 0, 30, staged.commit_metadata) is not None
        assert totals(spark, sink) == expected((0, 30))
        assert output.published() == [staged.range]

    @BOTH_MODES
    def test_an_older_batch_of_a_partition_is_never_applied_after_a_newer_one(
        self, spark, tmp_path, interval
    ):
        sink = delta_sink(tmp_path, compaction_interval_ms=interval)
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

        sink = merging_sink(tmp_path)
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
        sink = merging_sink(tmp_path)
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
        sink = merging_sink(tmp_path)
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
        with pytest.raises(ConfigurationError, match="compaction_interval_ms"):
            DeltaSink("t", staging=tmp_path, key_columns=["k"], compaction_interval_ms=0)
        with pytest.raises(ConfigurationError, match="partials_table"):
            DeltaSink("t", staging=tmp_path, key_columns=["k"], partials_table="t")
        assert DeltaSink("s3a://b/t/", staging=tmp_path, key_columns=["k"]).partials == (
            "s3a://b/t_partials"
        )
        assert not DeltaSink(
            "t", staging=tmp_path, key_columns=["k"], compaction_interval_ms=None
        ).compacts
        assert not DeltaSink("t", staging=tmp_path).compacts


class TestDeltaCompactor:
    """Workers' blind appends to the partials table, and the compactor's cycles."""

    def test_a_batch_is_appended_to_the_partials_under_its_partitions_transaction_id(
        self, spark, tmp_path
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10, partition=4))
        assert txns(Path(sink.partials)) == [("coordination-pipeline:t:4", 10)]
        batches = {
            tuple(r)
            for r in spark.read.format("delta")
            .load(sink.partials)
            .select(*BATCH_ID_COLUMNS)
            .collect()
        }
        assert batches == {("t", 4, 10)}
        # Another attempt at the same range (a new owner's) changes nothing.
        versions = len(list((Path(sink.partials) / "_delta_log").glob("*.json")))
        output.publish(stage(spark, output, 0, 10, partition=4))
        assert len(list((Path(sink.partials) / "_delta_log").glob("*.json"))) == versions
        assert not Path(sink.table).exists()  # the compactor creates the totals

    def test_a_jobs_batches_are_appended_in_one_transaction_with_every_partitions_id(
        self, spark, tmp_path
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        first = output.publish(stage(spark, output, 0, 5, partition=3))  # creates the table
        versions = len(list((Path(sink.partials) / "_delta_log").glob("*.json")))
        job = [stage(spark, output, 0, 10, partition=p) for p in (0, 1, 2)]
        output.publish_all(job)
        assert len(list((Path(sink.partials) / "_delta_log").glob("*.json"))) == versions + 1
        assert txns(Path(sink.partials))[-3:] == [
            ("coordination-pipeline:t:0", 10),
            ("coordination-pipeline:t:1", 10),
            ("coordination-pipeline:t:2", 10),
        ]
        assert last_commit(Path(sink.partials))["userMetadata"] == ", ".join(
            b.range.name for b in job
        )
        assert len(output.published()) == 4 and first.is_dir()
        want = functools.reduce(_add, [expected((0, 10))] * 3, expected((0, 5)))
        assert totals(spark, sink) == want

    def test_a_jobs_append_leaves_out_the_batches_already_applied(self, spark, tmp_path):
        # The committing owner appended partition 0's batch and crashed before the rename;
        # the next owner's job publishes it (recover) with a new batch of partition 1.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        applied = stage(spark, output, 0, 30)
        sink._apply(
            spark, applied.path, applied.range, sorted(output.read_manifest(applied.path)["files"])
        )
        fresh = stage(spark, output, 0, 20, partition=1)
        sink.output(spark).publish_all([applied, fresh])
        assert txns(Path(sink.partials))[-1:] == [("coordination-pipeline:t:1", 20)]
        assert last_commit(Path(sink.partials))["userMetadata"] == fresh.range.name
        assert totals(spark, sink) == _add(expected((0, 30)), expected((0, 20)))
        # All of them applied already: no transaction at all.
        versions = len(list((Path(sink.partials) / "_delta_log").glob("*.json")))
        again = [stage(spark, output, 0, 30), stage(spark, output, 0, 20, partition=1)]
        sink.output(spark).publish_all(again)
        assert len(list((Path(sink.partials) / "_delta_log").glob("*.json"))) == versions
        assert totals(spark, sink) == _add(expected((0, 30)), expected((0, 20)))

    def test_two_publishers_of_one_batch_at_once_append_it_once(
        self, spark, tmp_path, monkeypatch, caplog
    ):
        # A former owner and the new owner publish one committed batch at the same time:
        # both find its partition's version not recorded yet. The one that commits second
        # conflicts (Delta checks the ids its transaction read) and its retry leaves the
        # batch out. The versions come from the log, not from Delta's txnVersion: the id
        # must still be registered as read, or both appends land.
        sink = delta_sink(tmp_path)
        late, other = sink.output(spark), sink.output(spark.newSession())
        late.publish(stage(spark, late, 0, 10))  # creates the table
        late_batch, other_batch = stage(spark, late, 10, 20), stage(spark, other, 10, 20)
        real_lock = _sinks.delta_commit_lock
        raced: list[int] = []

        @contextlib.contextmanager
        def other_commits_first(table: str) -> Iterator[None]:
            if not raced:
                raced.append(1)
                other.publish(other_batch)
            with real_lock(table):
                yield

        monkeypatch.setattr(_sinks, "delta_commit_lock", other_commits_first)
        with caplog.at_level(logging.INFO, logger="recipes.pipeline"):
            late.publish(late_batch)
        assert raced and "Delta transaction conflict, retrying" in caplog.text
        assert txns(Path(sink.partials)) == [
            ("coordination-pipeline:t:0", 10),
            ("coordination-pipeline:t:0", 20),
        ]
        assert totals(spark, sink) == expected((0, 20))

    def test_appends_read_the_recorded_versions_from_the_commits_and_they_equal_the_tables(
        self, spark, tmp_path, monkeypatch
    ):
        # A process reads the partials' state once, then only the commits since: through
        # two outputs' appends, a compactor's cycles and prunes, and a batch left out, what
        # it reads equals the table's state.
        sink = delta_sink(tmp_path)
        a, b = sink.output(spark), sink.output(spark.newSession())
        a.publish(stage(spark, a, 0, 10, partition=0))
        b.publish(stage(spark, b, 0, 10, partition=1))
        compactor = DeltaCompactor(spark, sink, prune_interval_ms=0)
        assert compactor.compact() is not None
        with monkeypatch.context() as no_state:
            no_state.setattr(
                _delta_log,
                "versions_in_state",
                lambda snapshot: pytest.fail("the snapshot's state was read"),
            )
            for end in (20, 30):
                a.publish(stage(spark, a, end - 10, end, partition=0))
                b.publish(stage(spark, b, end - 10, end, partition=1))
                assert compactor.compact() is not None
            a.publish(stage(spark, a, 20, 30, partition=1))  # b's batch: left out
            latest = _delta_log.latest_snapshot(spark, sink.partials)
            read = _delta_log.recorded_versions(sink.partials).at(spark, latest)
        assert prunes(Path(sink.partials))
        assert read == _delta_log.versions_in_state(latest)
        assert read == {"coordination-pipeline:t:0": 30, "coordination-pipeline:t:1": 30}
        assert totals(spark, sink) == _add(expected((0, 30)), expected((0, 30)))

    def test_workers_creating_the_partials_table_at_once_all_succeed(self, spark, tmp_path):
        # Each worker creates it at start, from its warm-up's rows; one wins, the others
        # find it made. Its change data feed is on from its first version.
        sink = delta_sink(tmp_path)
        like = scratch_partials(spark, tmp_path)
        errors: list[BaseException] = []

        def create(session: SparkSession) -> None:
            try:
                sink.create_partials(session, like)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=create, args=(spark.newSession(),)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert errors == []
        assert spark.read.format("delta").load(sink.partials).count() == 0
        first = [
            json.loads(line)
            for line in (Path(sink.partials) / "_delta_log" / "00000000000000000000.json")
            .read_text()
            .splitlines()
        ]
        metadata = next(a["metaData"] for a in first if "metaData" in a)
        assert metadata["configuration"]["delta.enableChangeDataFeed"] == "true"
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10))
        assert totals(spark, sink) == expected((0, 10))

    def test_a_creator_that_waited_for_the_commit_lock_finds_the_table_made_and_writes_nothing(
        self, spark, tmp_path
    ):
        # Workers and compactors create the partials and totals tables at start. One that
        # found no table and then waited for the commit lock while another made it must
        # not write its own creation (an append: an empty version, or a conflict).
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10))  # the partials, whose columns it takes
        like = spark.read.format("delta").load(sink.partials).drop(*BATCH_ID_COLUMNS).limit(0)
        written: list[str] = []
        errors: list[BaseException] = []

        def create() -> None:
            written.append(sink.table)
            like.write.format("delta").mode("append").save(sink.table)

        def creator() -> None:
            try:
                create_delta_table_unless_exists(spark.newSession(), sink.table, create)
            except BaseException as e:
                errors.append(e)

        lock_file = delta_commit_lock_path(sink.table)
        assert lock_file is not None
        with delta_commit_lock(sink.table):  # another creator, making the table
            creating = threading.Thread(target=creator, daemon=True)
            creating.start()
            wait_for_a_waiter(lock_file, creating)
            like.write.format("delta").save(sink.table)
        creating.join(120)
        assert not creating.is_alive() and errors == []
        assert written == [], "the table was created again after waiting for the lock"
        log_dir = Path(sink.table) / "_delta_log"
        assert sorted(p.name for p in log_dir.glob("*.json")) == ["00000000000000000000.json"]
        # Where the table does not exist, the creator makes it.
        other = str(tmp_path / "other")
        create_delta_table_unless_exists(
            spark, other, lambda: like.write.format("delta").save(other)
        )
        assert (Path(other) / "_delta_log").is_dir()

    def test_an_append_does_not_wait_for_its_sessions_lock_once_the_table_exists(
        self, spark, tmp_path
    ):
        # A compactor's MERGE holds its worker's session lock for its whole run; the
        # worker's appends to the partials table must not queue behind it.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10))  # creates the table
        staged = stage(spark, output, 10, 20)
        with _session_lock(spark):  # a compactor's MERGE under way
            publishing = threading.Thread(target=lambda: output.publish(staged), daemon=True)
            publishing.start()
            publishing.join(60)
            assert not publishing.is_alive(), "an append waited for its session's lock"
        assert txns(Path(sink.partials))[-1] == ("coordination-pipeline:t:0", 20)

    def test_rows_that_do_not_fit_the_partials_table_are_refused_by_name(self, spark, tmp_path):
        # Delta's transaction API writes whatever it is given; the sink checks the shape.
        from pyspark.sql import functions as F

        sink = delta_sink(tmp_path)
        like = scratch_partials(spark, tmp_path)
        sink.create_partials(spark, like.withColumn("region", F.lit("eu")))
        output = sink.output(spark)
        staged = stage(spark, output, 0, 10)
        with pytest.raises(PipelineOutputError, match="do not fit the partials table"):
            output.publish(staged)
        assert output.published() == [] and output.staged() != []

    def test_a_batch_never_appends_under_the_compactors_transaction_id(self, spark, tmp_path):
        # The compactor's merge sets its id in the session; a worker's append of the same
        # session names its own id in the writer's options, which Delta takes first.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 5, partition=1))  # creates the table
        staged = stage(spark, output, 0, 10)
        spark.conf.set(_TXN_APP_ID, COMPACTOR_APP_ID)
        spark.conf.set(_TXN_VERSION, "99")
        try:
            output.publish(staged)
        finally:
            spark.conf.unset(_TXN_APP_ID)
            spark.conf.unset(_TXN_VERSION)
        assert txns(Path(sink.partials)) == [
            ("coordination-pipeline:t:1", 5),
            ("coordination-pipeline:t:0", 10),
        ]

    def test_two_workers_append_at_once_and_neither_prunes_nor_the_other_fail_them(
        self, spark, tmp_path
    ):
        # No retries allowed: a conflict would fail the publish. The compactor's cycles and
        # their prunes run meanwhile (a prune that an append overtook is made again).
        sink = dataclasses.replace(delta_sink(tmp_path), max_conflict_retries=0)
        first = sink.output(spark)
        first.publish(stage(spark, first, 0, 5, partition=2))  # creates the partials table
        errors: list[BaseException] = []
        done = threading.Event()

        def worker(session: SparkSession, partition: int) -> None:
            try:
                output = sink.output(session)
                for start in range(0, 60, 15):
                    output.publish(stage(session, output, start, start + 15, partition))
            except BaseException as e:
                errors.append(e)

        compactor = DeltaCompactor(spark.newSession(), sink, prune_interval_ms=0)

        def compact() -> None:
            while not done.is_set():
                compactor.compact()

        threads = [threading.Thread(target=worker, args=(spark.newSession(), p)) for p in (0, 1)]
        cycles = threading.Thread(target=compact)
        for t in [*threads, cycles]:
            t.start()
        for t in threads:
            t.join(300)
        done.set()
        cycles.join(300)
        assert errors == []
        assert prunes(Path(sink.partials)), "no prune ran while the workers appended"
        want = _add(_add(expected((0, 60)), expected((0, 60))), expected((0, 5)))
        assert totals(spark, sink) == want
        compactor.compact()
        assert table_totals(spark, sink) == want
        assert partial_batches(spark, sink) == set()

    def test_a_cycle_merges_every_partial_once_and_records_how_far_in_its_commit(
        self, spark, tmp_path
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        compactor = DeltaCompactor(spark, sink, identity="c1", token=7, prune_interval_ms=0)
        first = compactor.compact()
        assert first is not None and first.first_version == 1
        output.publish(stage(spark, output, 20, 50))
        output.publish(stage(spark, output, 0, 30, partition=1))
        second = compactor.compact()
        # The version after the first cycle's is its prune (no rows): nothing to merge.
        assert second is not None and second.first_version == first.last_version + 2
        assert compactor.compact() is None  # nothing new, its own prune included
        assert table_totals(spark, sink) == _add(expected((0, 50)), expected((0, 30)))
        assert txns(Path(sink.table))[-1] == (COMPACTOR_APP_ID, second.last_version)
        audit = json.loads(last_commit(Path(sink.table))["userMetadata"])
        assert audit["compactor"] == "c1" and audit["token"] == 7
        assert audit["partials_versions"] == [second.first_version, second.last_version]

    def test_a_compactor_failing_before_its_commit_leaves_nothing_and_the_next_resumes(
        self, spark, tmp_path, monkeypatch
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        DeltaCompactor(spark, sink).compact()
        output.publish(stage(spark, output, 20, 40))
        crashing = DeltaCompactor(spark, sink)

        def crash(*args: object) -> None:
            raise RuntimeError("killed before the commit")

        monkeypatch.setattr(crashing, "_merge", crash)
        with pytest.raises(RuntimeError):
            crashing.compact()
        assert table_totals(spark, sink) == expected((0, 20))  # nothing of the cycle
        assert DeltaCompactor(spark, sink).compact() is not None
        assert table_totals(spark, sink) == expected((0, 40))

    def test_a_cycle_committed_before_a_crash_is_never_merged_again(self, spark, tmp_path):
        # The compactor committed and died before it knew: the next one (or the same one
        # retrying the same cycle) finds the partials already merged.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        output.publish(stage(spark, output, 0, 10, partition=1))
        compactor = DeltaCompactor(spark, sink, prune_interval_ms=0)
        cycle = compactor.compact()
        assert cycle is not None
        compactor._merge(compactor._new_totals(cycle), cycle)  # the same cycle again: skipped
        assert table_totals(spark, sink) == _add(expected((0, 20)), expected((0, 10)))
        # A new compactor finds nothing to merge but the first one's prune (which adds no
        # rows; it does not know it was the first one's, so it runs a cycle over it).
        after = DeltaCompactor(spark, sink)
        empty = after.compact()
        assert empty is not None
        assert empty.first_version == empty.last_version == cycle.last_version + 1
        assert after.compact() is None
        assert table_totals(spark, sink) == _add(expected((0, 20)), expected((0, 10)))

    def test_a_deposed_compactors_cycle_does_not_land(self, spark, tmp_path):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        deposed = DeltaCompactor(spark, sink, identity="old", token=1)
        deposed.compact()
        output.publish(stage(spark, output, 20, 30))
        # The old leader plans a cycle, then pauses past its lease ...
        partials = _version(spark, sink.partials)
        base, merged = _state(spark, sink.table)
        stale = plan_cycle(base, merged, partials)
        assert stale is not None
        stale_totals = deposed._new_totals(stale)
        # ... a new leader takes over and merges further ...
        output.publish(stage(spark, output, 30, 45))
        assert DeltaCompactor(spark, sink, identity="new", token=2).compact() is not None
        commits = len(list((Path(sink.table) / "_delta_log").glob("*.json")))
        # ... and the old one resumes: Delta skips its transaction (its version is behind).
        deposed._merge(stale_totals, stale)
        assert len(list((Path(sink.table) / "_delta_log").glob("*.json"))) == commits
        assert table_totals(spark, sink) == expected((0, 45))
        # A compactor that knows it lost leadership does not even try.
        output.publish(stage(spark, output, 45, 50))
        assert deposed.compact(still_leader=lambda: False) is None
        assert table_totals(spark, sink) == expected((0, 45))

    def test_two_compactors_interleaved_still_leave_exact_totals(self, spark, tmp_path):
        # Both read the same totals; the one behind commits first, then the one ahead:
        # the second sets every key it touches from its own snapshot, so the first
        # cycle's partials are not counted twice.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        a, b = DeltaCompactor(spark, sink, token=1), DeltaCompactor(spark, sink, token=2)
        a.compact()
        output.publish(stage(spark, output, 20, 30))
        base, merged = _state(spark, sink.table)
        behind = plan_cycle(base, merged, _version(spark, sink.partials))
        output.publish(stage(spark, output, 30, 40))
        output.publish(stage(spark, output, 0, 10, partition=1))
        ahead = plan_cycle(base, merged, _version(spark, sink.partials))
        assert behind is not None and ahead is not None
        assert behind.last_version < ahead.last_version
        a._merge(a._new_totals(behind), behind)
        assert table_totals(spark, sink) == expected((0, 30))
        b._merge(b._new_totals(ahead), ahead)
        assert table_totals(spark, sink) == _add(expected((0, 40)), expected((0, 10)))
        assert a.compact() is None

    def test_the_mark_is_read_from_the_commits_since_the_last_read_and_equals_the_tables(
        self, spark, tmp_path, monkeypatch
    ):
        # A compactor reads its mark from the commits since its last read (a few small
        # files) instead of the snapshot's state; through its own cycles, another
        # compactor's, prunes and appends, it reads what the table's state says.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        a = DeltaCompactor(spark, sink, token=1, prune_interval_ms=0)
        b = DeltaCompactor(spark, sink, token=2, prune_interval_ms=None)
        assert a.compact() is not None  # a reads the state once
        states: list[tuple[int, int | None]] = []
        monkeypatch.setattr(
            "recipes.pipeline._delta_log.versions_in_state",
            lambda snapshot: pytest.fail("the snapshot's state was read"),
        )
        for end in (30, 40):
            output.publish(stage(spark, output, end - 10, end))
            assert a.compact() is not None
            states.append(a._totals_state())
            assert states[-1] == _state(spark, sink.table)
        output.publish(stage(spark, output, 40, 50))
        monkeypatch.undo()
        assert b.compact() is not None  # another compactor's cycle: a reads its mark
        assert a._totals_state() == _state(spark, sink.table) != states[-1]
        assert a.compact() is None
        assert table_totals(spark, sink) == expected((0, 50))

    def test_a_compactor_reads_a_cleaned_up_or_recreated_tables_mark_from_its_state(
        self, spark, tmp_path
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        compactor = DeltaCompactor(spark, sink, prune_interval_ms=None)
        assert compactor.compact() is not None
        compactor._totals_state()  # its cycle's commit
        earlier = compactor._totals_versions._read
        assert earlier is not None
        _, version, _ = earlier
        output.publish(stage(spark, output, 20, 30))
        assert compactor.compact() is not None  # version + 1, with the last mark
        spark.sql(f"ALTER TABLE delta.`{sink.table}` SET TBLPROPERTIES ('team' = 'ops')")
        # Delta's log cleanup removed that cycle's commit (a checkpoint after it): the
        # mark comes from the state, not from the commits left (which have none).
        delta_log: Any = spark._jvm.org.apache.spark.sql.delta.DeltaLog
        delta_log.forTable(spark._jsparkSession, sink.table).checkpoint()
        (Path(sink.table) / "_delta_log" / f"{version + 1:020d}.json").unlink()
        compactor._totals_versions._read = earlier
        assert compactor._totals_state() == _state(spark, sink.table)
        assert compactor._totals_state()[1] == _version(spark, sink.partials)
        # Another table at the path (dropped and made again, with as many versions as
        # the old one): its mark is its own (none yet), not the old table's.
        newest = compactor._totals_versions._read[1]
        shutil.rmtree(sink.table)
        delta_log.clearCache()
        for _ in range(newest + 1):
            spark.range(1).write.format("delta").mode("append").save(sink.table)
        assert compactor._totals_state() == (newest, None)

    @pytest.mark.parametrize("name", ["prune_interval_ms", "vacuum_interval_ms"])
    def test_a_negative_interval_is_refused_by_name(self, spark, tmp_path, name):
        intervals: dict[str, Any] = {name: -1}
        with pytest.raises(ConfigurationError, match=f"{name} must be >= 0"):
            DeltaCompactor(spark, delta_sink(tmp_path), **intervals)

    def test_cycles_prune_at_most_every_prune_interval(self, spark, tmp_path):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        clock = ManualClock()
        compactor = DeltaCompactor(spark, sink, prune_interval_ms=60_000, clock=clock)
        for start in (0, 10, 20):  # within the first interval: no prune
            output.publish(stage(spark, output, start, start + 10))
            assert compactor.compact() is not None
            clock.advance(19.0)
        assert not prunes(Path(sink.partials)) and len(partial_batches(spark, sink)) == 3
        clock.advance(3.0)
        output.publish(stage(spark, output, 30, 40))
        assert compactor.compact() is not None  # due: it prunes what every cycle merged
        assert len(prunes(Path(sink.partials))) == 1 and partial_batches(spark, sink) == set()
        clock.advance(59.0)
        output.publish(stage(spark, output, 0, 5, partition=1))
        assert compactor.compact() is not None  # not due again yet
        assert len(prunes(Path(sink.partials))) == 1
        assert partial_batches(spark, sink) == {("t", 1, 5)}
        assert totals(spark, sink) == _add(expected((0, 40)), expected((0, 5)))
        never = DeltaCompactor(spark, sink, prune_interval_ms=None, clock=clock)
        clock.advance(3600.0)
        output.publish(stage(spark, output, 5, 10, partition=1))
        assert never.compact() is not None
        assert len(prunes(Path(sink.partials))) == 1

    def test_no_append_commits_while_another_process_holds_the_tables_commit_lock(
        self, spark, tmp_path
    ):
        # Two worker JVMs committing one version of a local table at once would both pass
        # Delta's exists-check and the second rename would replace the first commit: the
        # commits are serialized across processes by a lock beside the table.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10))  # creates the table
        started = time.monotonic()
        output.publish(stage(spark, output, 10, 20))
        one_publish_s = time.monotonic() - started
        log_dir = Path(sink.partials) / "_delta_log"
        versions = len(list(log_dir.glob("*.json")))
        with holding_commit_lock(sink.partials):
            publishing = threading.Thread(
                target=lambda: output.publish(stage(spark, output, 20, 30)), daemon=True
            )
            publishing.start()
            publishing.join(max(5.0, 3 * one_publish_s))
            assert publishing.is_alive(), "an append committed under another process's lock"
            assert len(list(log_dir.glob("*.json"))) == versions
        publishing.join(120)
        assert not publishing.is_alive()
        assert len(list(log_dir.glob("*.json"))) == versions + 1
        assert txns(Path(sink.partials))[-1] == ("coordination-pipeline:t:0", 30)

    def test_a_failed_vacuum_is_logged_as_such_prunes_anyway_and_is_retried(
        self, spark, tmp_path, monkeypatch, caplog
    ):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        compactor = DeltaCompactor(spark, sink, prune_interval_ms=0, vacuum_interval_ms=0)
        tried: list[int] = []

        def vacuum() -> None:
            tried.append(len(tried))
            if len(tried) == 1:
                raise RuntimeError("listing failed")

        monkeypatch.setattr(compactor, "_vacuum", vacuum)
        output.publish(stage(spark, output, 0, 10))
        with caplog.at_level(logging.WARNING, logger="recipes.pipeline"):
            assert compactor.compact() is not None
        assert "VACUUM of" in caplog.text and "listing failed" in caplog.text
        assert "pruning" not in caplog.text
        assert len(prunes(Path(sink.partials))) == 1  # the prune ran all the same
        output.publish(stage(spark, output, 10, 20))
        assert compactor.compact() is not None
        assert tried == [0, 1]  # still due after the failure: tried at the next cycle

    def test_a_cycle_deletes_the_partials_it_merged_and_nothing_else(self, spark, tmp_path):
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        output.publish(stage(spark, output, 0, 10, partition=1))
        compactor = DeltaCompactor(spark, sink, identity="c1", token=3, prune_interval_ms=0)
        cycle = compactor.compact()
        assert cycle is not None
        assert partial_batches(spark, sink) == set()  # all merged: all deleted
        audit = json.loads(last_commit(Path(sink.partials))["userMetadata"])
        assert audit == {"compactor": "c1", "token": 3, "pruned_through": cycle.last_version}
        # A batch appended after the totals' mark stays, whoever prunes.
        output.publish(stage(spark, output, 20, 35))
        assert DeltaCompactor(spark, sink).prune() == cycle.last_version
        assert partial_batches(spark, sink) == {("t", 0, 35)}
        assert totals(spark, sink) == _add(expected((0, 35)), expected((0, 10)))
        assert compactor.compact() is not None
        assert partial_batches(spark, sink) == set()
        assert table_totals(spark, sink) == _add(expected((0, 35)), expected((0, 10)))
        assert compactor.compact() is None

    def test_vacuumed_partials_leave_the_totals_and_readers_exact(self, spark, tmp_path):
        # With no retention at all, a cycle's VACUUM removes every file deleted before it,
        # right away: what cycles and readers read after it must not need one.
        sink = delta_sink(tmp_path)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 10))  # creates the partials table
        spark.sql(
            f"ALTER TABLE delta.`{sink.partials}` SET TBLPROPERTIES "
            "('delta.deletedFileRetentionDuration' = 'interval 0 seconds')"
        )
        # Delta refuses a VACUUM and a time travel (the change data feed's versions) past
        # so short a retention; both checks off, as a test of what VACUUM removes.
        checks = (
            "spark.databricks.delta.retentionDurationCheck.enabled",
            "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration",
        )
        for check in checks:
            spark.conf.set(check, "false")
        try:
            compactor = DeltaCompactor(spark, sink, prune_interval_ms=0, vacuum_interval_ms=0)
            want = expected((0, 10))
            for start in (10, 20):
                output.publish(stage(spark, output, start, start + 10))
                assert compactor.compact() is not None  # VACUUM, then the prune
                # Appended after the cycle, then pruned by another compactor (as after a
                # change of leader); read before and after the next cycle's VACUUM.
                output.publish(stage(spark, output, 0, start, partition=start // 10))
                DeltaCompactor(spark, sink).prune()
                want = _add(_add(want, expected((start, start + 10))), expected((0, start)))
                assert totals(spark, sink) == want
            assert compactor.compact() is not None
            assert totals(spark, sink) == want
            assert table_totals(spark, sink) == want
        finally:
            for check in checks:
                spark.conf.unset(check)
        # The files of the batches merged before the last cycle are gone.
        data_files = sorted(f.name for f in Path(sink.partials).glob("*.parquet"))
        assert len(data_files) <= 2, data_files

    def test_the_compactor_runs_while_it_leads_and_once_more_when_stopped(self, spark, tmp_path):
        sink = delta_sink(tmp_path, compaction_interval_ms=200)
        output = sink.output(spark)
        output.publish(stage(spark, output, 0, 20))
        stop = threading.Event()
        compactor = DeltaCompactor(spark, sink)
        thread = threading.Thread(target=compactor.run, args=(stop, lambda: True))
        thread.start()
        deadline = time.monotonic() + 60
        while compactor.cycles < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        output.publish(stage(spark, output, 20, 35))
        stop.set()
        thread.join(120)
        assert table_totals(spark, sink) == expected((0, 35))


def partial_batches(spark: SparkSession, sink: DeltaSink) -> set[tuple[str, int, int]]:
    """The batch ids of the rows in the partials table's latest snapshot."""
    rows = spark.read.format("delta").load(sink.partials).select(*BATCH_ID_COLUMNS)
    return {(r[0], r[1], r[2]) for r in rows.distinct().collect()}


def txns(table: Path) -> list[tuple[str, int]]:
    """The idempotent-write ids in a table's Delta log, oldest first."""
    return [
        (t["appId"], t["version"])
        for log in sorted((table / "_delta_log").glob("*.json"))
        for line in log.read_text().splitlines()
        if '"txn"' in line
        for t in [json.loads(line)["txn"]]
    ]


def commits(table: Path) -> list[dict[str, Any]]:
    """The commitInfo of each version of a table, oldest first."""
    return [
        dict(json.loads(line)["commitInfo"])
        for log in sorted((table / "_delta_log").glob("*.json"))
        for line in log.read_text().splitlines()
        if '"commitInfo"' in line
    ]


def prunes(partials: Path) -> list[dict[str, Any]]:
    """The commitInfo of each prune of a partials table, oldest first."""
    return [c for c in commits(partials) if c["operation"] == "Manual Update"]


def last_commit(table: Path) -> dict[str, Any]:
    log = sorted((table / "_delta_log").glob("*.json"))[-1]
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return dict(action["commitInfo"])
    raise AssertionError(f"{log} has no commitInfo")


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


def test_the_commit_lock_excludes_other_processes_and_threads(tmp_path: Path) -> None:
    table = str(tmp_path / "deep" / "table")  # its directory made if missing
    got: list[float] = []

    def take() -> None:
        with delta_commit_lock(table):
            got.append(time.monotonic())

    with holding_commit_lock(table):
        taker = threading.Thread(target=take)
        taker.start()
        taker.join(1.0)
        assert taker.is_alive() and not got
        released = time.monotonic()
    taker.join(10)
    assert got and got[0] >= released
    # Two threads of one process exclude each other too.
    with delta_commit_lock(f"file://{table}"):
        taker = threading.Thread(target=take)
        taker.start()
        taker.join(0.5)
        assert taker.is_alive()
    taker.join(10)
    assert len(got) == 2


def test_a_lock_that_cannot_be_made_beside_the_table_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    table = tmp_path / "a-file" / "table"  # its directory would be inside a file
    lock = delta_commit_lock(str(table))
    with pytest.raises(ConfigurationError, match=r"commit lock .*a-file.*write access"):
        lock.__enter__()


def test_tables_on_other_file_systems_take_no_lock(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for table in ("s3a://bucket/table", "gs://bucket/table", "hdfs://nn/table"):
        with delta_commit_lock(table), delta_commit_lock(table):  # nested: no lock to wait on
            pass
    assert list(tmp_path.iterdir()) == []
