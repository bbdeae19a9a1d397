"""The Spark side on a local SparkSession: exact aggregates, and exactly-once output under failures.

The broker is played by :class:`CommitLog`: one partition's committed offset and
metadata, accepting a commit only from the current generation, as Kafka's group
coordinator does.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from coordination.errors import ConfigurationError
from recipes.pipeline import BATCH_COLUMN, Pipeline
from recipes.pipeline._output import (
    OffsetRange,
    PipelineOutput,
    PipelineOutputError,
    StagedBatch,
    StagedFilesError,
)
from recipes.pipeline._spark import (
    Batch,
    read_results,
    records_dataframe,
    spark_session,
    stage_batch,
    stage_many,
    warm_up_rows,
)
from recipes.pipeline._windowed_sum import (
    DEFAULT_WINDOW_MS,
    MAX_ABS_VALUE,
    aggregate_events,
    parse_events,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

Results = dict[tuple[str, int], tuple[int, Decimal]]
Record = tuple[int, bytes | None]
NINE_PLACES = Decimal("0.000000001")


def event(key: str, ts_ms: int, value: str, event_id: str = "e") -> bytes:
    # The value is spliced in as JSON text so that decimals stay exactly as written.
    fields = (
        f'"key": {json.dumps(key)}, "ts_ms": {ts_ms}, "value": {value}, "event_id": "{event_id}"'
    )
    return ("{" + fields + "}").encode()


def expected_results(records: Iterable[Record], window_ms: int = DEFAULT_WINDOW_MS) -> Results:
    """The aggregates computed in plain Python, for valid events as the tests generate them."""
    out: dict[tuple[str, int], tuple[int, Decimal]] = {}
    for _, raw in records:
        if raw is None:
            continue
        try:
            e = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
        except ValueError:
            continue
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            continue
        ts, value = e.get("ts_ms"), e.get("value")
        if not isinstance(ts, Decimal) or ts != ts.to_integral_value() or ts < 0:
            continue
        if not isinstance(value, Decimal) or abs(value) >= MAX_ABS_VALUE:
            continue
        window = int(ts) - int(ts) % window_ms
        count, total = out.get((e["key"], window), (0, Decimal(0)))
        out[(e["key"], window)] = (count + 1, total + value.quantize(NINE_PLACES, ROUND_HALF_UP))
    return out


def normalized(results: Results) -> dict[tuple[str, int], tuple[int, Decimal]]:
    # Decimal("0.3") == Decimal("0.300000000"); normalising only makes failures readable.
    return {k: (c, s.normalize()) for k, (c, s) in sorted(results.items())}


@dataclass
class CommitLog:
    """The broker's committed offset of one partition, fenced by generation."""

    offset: int | None = None
    metadata: str | None = None
    generation: int = 0

    def rebalance(self) -> int:
        self.generation += 1
        return self.generation

    def commit(self, generation: int, offset: int, metadata: str) -> bool:
        if generation != self.generation:
            return False  # ILLEGAL_GENERATION: the member lost the partition
        self.offset, self.metadata = offset, metadata
        return True


def batch_of(
    records: Sequence[Record], start: int, end: int, topic: str = "events", partition: int = 0
) -> Batch:
    return Batch(
        topic=topic,
        partition=partition,
        start_offset=start,
        end_offset=end,
        records=[r for r in records if start <= r[0] < end],
    )


def take_over(
    output: PipelineOutput, log: CommitLog, topic: str = "events", partition: int = 0
) -> tuple[int, int]:
    """What a new owner does on assignment; returns its generation and start offset."""
    generation = log.rebalance()
    output.recover(topic, partition, log.offset, log.metadata)
    cleanup(output, log, topic, partition)
    return generation, log.offset or 0


def cleanup(
    output: PipelineOutput, log: CommitLog, topic: str = "events", partition: int = 0
) -> list[str]:
    """The owner's orphan cleanup (its lease holds: these tests play no pauses)."""
    return output.cleanup_orphans(
        topic, partition, log.offset, log.metadata, still_owner=lambda: True
    )


def generate(n: int, seed: int, *, invalid_every: int = 0, skip_every: int = 0) -> list[Record]:
    """``n`` offsets of a partition: events over 5 keys and 10 windows; some invalid or skipped."""
    rng = random.Random(seed)
    records: list[Record] = []
    for offset in range(n):
        if skip_every and offset % skip_every == skip_every - 1:
            continue  # a transaction marker or compacted record: the offset has no record
        if invalid_every and offset % invalid_every == 0:
            records.append((offset, rng.choice([b"not json", None, b'{"key": "k"}', b"[1]"])))
            continue
        key = f"k{rng.randrange(5)}"
        ts = 1_700_000_000_000 + rng.randrange(600_000)
        value = Decimal(rng.randrange(-10_000_000, 10_000_000)) / 1000
        records.append((offset, event(key, ts, str(value), f"{offset}")))
    return records


class TestAggregation:
    def test_known_input_gives_exact_counts_and_sums(self, spark: SparkSession, output):
        records: list[Record] = [
            (0, event("a", 0, "0.1")),
            (1, event("a", 59_999, "0.2")),  # last millisecond of window 0
            (2, event("a", 60_000, "5")),  # first millisecond of window 1
            (3, event("b", 30_000, "-1.5")),
            (4, event("b", 30_001, '"2.5"')),  # a number in a string is accepted
            (5, event("a", 119_999, "1.0000000005")),  # rounded half-up to 9 places
            (6, event("a", 0, "1e3")),
        ]
        staged = stage_batch(spark, output, batch_of(records, 0, 7))
        output.publish(staged)
        assert read_results(spark, output) == {
            ("a", 0): (3, Decimal("1000.3")),
            ("a", 60_000): (2, Decimal("6.000000001")),
            ("b", 0): (2, Decimal("1")),
        }
        assert (staged.records, staged.rejected) == (7, 0)

    def test_window_size_is_configurable(self, spark: SparkSession, output):
        records: list[Record] = [(i, event("k", i * 400, "1")) for i in range(10)]
        output.publish(stage_batch(spark, output, batch_of(records, 0, 10), window_ms=1_000))
        assert read_results(spark, output) == {
            ("k", 0): (3, Decimal(3)),  # 0, 400, 800
            ("k", 1_000): (2, Decimal(2)),  # 1200, 1600
            ("k", 2_000): (3, Decimal(3)),  # 2000, 2400, 2800
            ("k", 3_000): (2, Decimal(2)),  # 3200, 3600
        }

    def test_a_workers_warm_up_rows_are_kafkas_rows_made_without_python(self, spark: SparkSession):
        # The rows a worker warms up on: as if these records had been read from Kafka
        # (same columns, types and values), made by a plan with no Python in it.
        offsets = OffsetRange(topic="warm-up", partition=0, start_offset=100, end_offset=200)
        made = warm_up_rows(spark, offsets)
        records: list[Record] = [
            (
                i,
                b"not json"
                if i % 10 == 0
                else b'{"key": "warm-up", "ts_ms": %d, "value": "1.5"}' % i,
            )
            for i in range(100, 200)
        ]
        expected = records_dataframe(spark, records, topic="warm-up", partition=0)
        assert made.schema == expected.schema
        assert sorted(made.collect()) == sorted(expected.collect())
        plan = made._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "Range" in plan, plan

    def test_window_size_must_be_positive(self, spark: SparkSession):
        events = parse_events(records_dataframe(spark, []))
        with pytest.raises(PipelineOutputError, match="window_ms"):
            aggregate_events(events, 0)

    def test_invalid_records_are_rejected_and_listed(self, spark: SparkSession, output):
        records: list[Record] = [
            (10, b"not json"),
            (11, None),  # tombstone
            (12, b"\xff\xfe"),  # not UTF-8
            (13, b"[1, 2]"),
            (14, b'{"key": "a", "ts_ms": 5}'),  # no value
            (15, b'{"key": "a", "ts_ms": 5.5, "value": 1}'),  # fractional timestamp
            (16, b'{"key": "a", "ts_ms": -1, "value": 1}'),  # before the epoch
            (17, b'{"key": "a", "ts_ms": 5, "value": 1e18}'),  # too large to sum safely
            (18, b'{"key": "a", "ts_ms": 5, "value": true}'),
            (19, b'{"ts_ms": 5, "value": 1}'),  # no key
            (20, event("a", 5, "-999999999999999999.999999999")),  # the largest accepted
        ]
        staged = stage_batch(spark, output, batch_of(records, 10, 21))
        assert staged.rejected == 10
        assert staged.rejected_offsets == tuple(range(10, 20))
        manifest = output.read_manifest(output.publish(staged))
        assert manifest["rejected_offsets"] == list(range(10, 20))
        assert read_results(spark, output) == {
            ("a", 0): (1, Decimal("-999999999999999999.999999999"))
        }

    def test_an_empty_range_is_published_to_keep_ranges_contiguous(
        self, spark: SparkSession, output
    ):
        output.publish(stage_batch(spark, output, batch_of([], 0, 5)))  # only transaction markers
        output.publish(stage_batch(spark, output, batch_of([(5, event("a", 1, "2"))], 5, 6)))
        assert output.check_published({("events", 0): (0, 6)})
        assert read_results(spark, output) == {("a", 0): (1, Decimal(2))}

    def test_results_of_partitions_and_batches_combine(self, spark: SparkSession, output):
        records = generate(600, seed=1)
        for partition in (0, 1):
            for start in range(0, 600, 200):
                batch = batch_of(records, start, start + 200, partition=partition)
                output.publish(stage_batch(spark, output, batch))
        single = expected_results(records)
        doubled = {k: (2 * c, 2 * s) for k, (c, s) in single.items()}
        assert normalized(read_results(spark, output)) == normalized(doubled)

    def test_nothing_published_reads_as_empty(self, spark: SparkSession, output):
        stage_batch(spark, output, batch_of([(0, event("a", 1, "1"))], 0, 1))  # staged only
        assert read_results(spark, output) == {}


class TestExactlyOnce:
    def test_retried_batch_is_counted_once(self, spark: SparkSession, output):
        records = generate(300, seed=2)
        log = CommitLog()
        generation, start = take_over(output, log)
        # Attempt 1 is written, but its commit times out on the client side
        # (the request never reached the broker); the worker retries the batch,
        # leaving attempt 1 in staging since it cannot know it did not land.
        first = stage_batch(spark, output, batch_of(records, start, 300))
        second = stage_batch(spark, output, batch_of(records, start, 300))
        assert log.commit(generation, 300, second.commit_metadata)
        output.publish(second)
        assert cleanup(output, log) == [first.name]
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))
        assert output.staged() == []

    def test_two_copies_of_a_range_publish_once(self, spark: SparkSession, output):
        records = generate(100, seed=3)
        copies = [stage_batch(spark, output, batch_of(records, 0, 100)) for _ in range(2)]
        for staged in copies + copies:
            output.publish(staged)
        assert len(output.published()) == 1
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))

    def test_crash_between_commit_and_publish_is_recovered_by_next_owner(
        self, spark: SparkSession, output, tmp_path: Path
    ):
        records = generate(200, seed=4)
        log = CommitLog()
        generation, _ = take_over(output, log)
        staged = stage_batch(spark, output, batch_of(records, 0, 120))
        assert log.commit(generation, 120, staged.commit_metadata)
        # The owner dies here. The next owner, another process with its own
        # view of the directory, takes over from the commit.
        other = PipelineOutput(tmp_path / "out")
        generation, start = take_over(other, log)
        assert start == 120
        assert other.published() == [staged.range]
        staged = stage_batch(spark, other, batch_of(records, start, 200))
        assert log.commit(generation, 200, staged.commit_metadata)
        other.publish(staged)
        assert other.check_published({("events", 0): (0, 200)})
        assert normalized(read_results(spark, other)) == normalized(expected_results(records))

    def test_crash_after_write_before_commit_leaves_an_orphan_that_is_removed(
        self, spark: SparkSession, output
    ):
        records = generate(200, seed=5)
        log = CommitLog()
        generation, _ = take_over(output, log)
        orphan = stage_batch(spark, output, batch_of(records, 0, 150))
        # Died before the commit: the offset stays at None (start of the partition).
        generation, start = take_over(output, log)
        assert start == 0
        staged = stage_batch(spark, output, batch_of(records, start, 200))
        assert log.commit(generation, 200, staged.commit_metadata)
        output.publish(staged)
        # Kept until the partition's commits passed its range, then removed.
        assert cleanup(output, log) == [orphan.name]
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))

    def test_zombie_whose_commit_is_rejected_leaves_an_orphan(self, spark: SparkSession, output):
        records = generate(300, seed=6)
        log = CommitLog()
        zombie_generation, _ = take_over(output, log)
        # A long GC pause: the group moved the partition to another member,
        # which processes [0, 300) while the zombie is still on [0, 200).
        owner_generation, start = take_over(output, log)
        zombie = stage_batch(spark, output, batch_of(records, 0, 200))
        owner = stage_batch(spark, output, batch_of(records, start, 300))
        assert log.commit(owner_generation, 300, owner.commit_metadata)
        output.publish(owner)
        assert not log.commit(zombie_generation, 200, zombie.commit_metadata)
        # The zombie deletes nothing; the owner's next (fenced) cleanup does.
        assert output.staged() == [zombie.name]
        assert cleanup(output, log) == [zombie.name]
        assert output.check_published({("events", 0): (0, 300)})
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))

    def test_failed_write_leaves_no_staging_directory(
        self, spark: SparkSession, output, monkeypatch
    ):
        def fail(*args: object, **kwargs: object) -> StagedBatch:
            raise OSError("disk full")

        monkeypatch.setattr(output, "finish_stage", fail)
        with pytest.raises(OSError, match="disk full"):
            stage_batch(spark, output, batch_of([(0, event("a", 1, "1"))], 0, 1))
        assert output.staged() == []

    def test_an_interrupted_write_leaves_its_directory_to_the_job_still_writing(
        self, spark: SparkSession, output, monkeypatch
    ):
        # Ctrl-C or a timeout's signal stops the Python call, not Spark's job, which
        # goes on writing in the JVM: deleting its directory broke its commit
        # ("_temporary/0 does not exist"). cleanup_orphans removes it later.
        interrupt_writes(monkeypatch)
        with pytest.raises(Interrupted):
            stage_batch(spark, output, batch_of([(0, event("a", 1, "1"))], 0, 1))
        [left] = output.staged()
        assert (output.staging_dir / left / "_temporary" / "0").is_dir()

    @pytest.mark.parametrize("seed", [7, 8])
    def test_handovers_with_different_batch_boundaries_give_exact_totals(
        self, spark: SparkSession, output, seed
    ):
        """Owners cut the partition differently and fail at every step of the protocol."""
        n = 2_000
        records = generate(n, seed=seed, invalid_every=37, skip_every=11)
        rng = random.Random(seed)
        log = CommitLog()
        generation, start = take_over(output, log)
        zombies: list[tuple[int, StagedBatch]] = []
        steps = 0
        while start < n:
            steps += 1
            end = min(n, start + rng.randrange(50, 400))
            staged = stage_batch(spark, output, batch_of(records, start, end))
            fate = rng.choice(["ok", "ok", "crash_after_write", "crash_after_commit", "zombie"])
            if fate == "zombie":
                # Another member took the partition before this commit arrived.
                zombies.append((generation, staged))
                generation, start = take_over(output, log)
                continue
            if fate == "crash_after_write":
                generation, start = take_over(output, log)
                continue
            assert log.commit(generation, end, staged.commit_metadata)
            if fate == "crash_after_commit":
                generation, start = take_over(output, log)
                continue
            output.publish(staged)
            start = end
        for zombie_generation, staged in zombies:
            assert not log.commit(
                zombie_generation, staged.range.end_offset, staged.commit_metadata
            )
        cleanup(output, log)
        assert output.staged() == []
        assert steps > 8
        assert output.check_published({("events", 0): (0, n)})
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))


class TestCommitter:
    def test_the_session_uses_the_version_1_file_output_committer(self, spark: SparkSession):
        key = "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"
        assert spark.sparkContext.getConf().get(key) == "1"

    @pytest.mark.parametrize("version", ["2", " 2", "0"])
    def test_another_committer_algorithm_is_refused(self, spark: SparkSession, version):
        key = "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"
        with pytest.raises(ConfigurationError, match=r"algorithm\.version"):
            spark_session("local[2]", conf={key: version})

    def test_a_duplicate_part_file_fails_the_stage(self, spark: SparkSession, output, monkeypatch):
        # What version 2 of the committer can leave on a cluster: a task whose
        # executor was lost mid-commit, retried, leaves its part file twice.
        from pyspark.sql.readwriter import DataFrameWriter

        write = DataFrameWriter.parquet

        def write_twice(self: DataFrameWriter, path: str, *args: object, **kwargs: object) -> None:
            write(self, path, *args, **kwargs)  # type: ignore[arg-type]
            part = next(p for p in Path(path).iterdir() if p.name.startswith("part-"))
            shutil.copy(part, part.with_name("part-00000-retry" + part.name[10:]))

        monkeypatch.setattr(DataFrameWriter, "parquet", write_twice)
        records = generate(50, seed=11)
        with pytest.raises(StagedFilesError, match="duplicated or missing"):
            stage_batch(spark, output, batch_of(records, 0, 50))
        assert output.staged() == []

    @pytest.mark.parametrize(
        ("damage", "message"),
        [
            (lambda part: part.unlink(), "duplicated or missing"),
            (lambda part: part.write_bytes(part.read_bytes()[:-20]), "not a readable Parquet"),
        ],
        ids=["missing", "truncated"],
    )
    def test_a_missing_or_truncated_part_file_fails_the_stage(
        self, spark: SparkSession, output, monkeypatch, damage, message
    ):
        # The rows are counted from each file's footer: a file cut short has none.
        from pyspark.sql.readwriter import DataFrameWriter

        write = DataFrameWriter.parquet

        def write_damaged(self: DataFrameWriter, path: str, *args: object, **kwargs: object):
            write(self, path, *args, **kwargs)  # type: ignore[arg-type]
            damage(next(p for p in Path(path).iterdir() if p.name.startswith("part-")))

        monkeypatch.setattr(DataFrameWriter, "parquet", write_damaged)
        records = generate(50, seed=13)
        with pytest.raises(StagedFilesError, match=message):
            stage_batch(spark, output, batch_of(records, 0, 50))
        assert output.staged() == []

    def test_readers_read_only_the_files_the_manifest_lists(self, spark: SparkSession, output):
        records = generate(80, seed=12)
        staged = stage_batch(spark, output, batch_of(records, 0, 80))
        published = output.publish(staged)
        # A stray copy appearing later (a late task attempt) is not read.
        (part,) = published.glob("part-*")
        shutil.copy(part, published / "part-99999-stray.snappy.parquet")
        assert normalized(read_results(spark, output)) == normalized(expected_results(records))
        manifest = output.read_manifest(published)
        assert list(manifest["files"]) == [part.name]
        assert manifest["files"][part.name] == manifest["rows"] > 0

    def test_the_manifest_gives_the_files_schema(self, spark: SparkSession, output):
        staged = stage_batch(spark, output, batch_of(generate(80, seed=14), 0, 80))
        assert_manifest_names_the_files_schema(spark, output, staged)


def assert_manifest_names_the_files_schema(
    spark: SparkSession, output: PipelineOutput, staged: StagedBatch
) -> None:
    """The schema a batch's manifest gives (what a Delta sink reads its files with, instead
    of inferring it) reads its files as inferring does: same columns, types, rows."""
    from pyspark.sql.types import StructType

    manifest = output.read_manifest(staged.path)
    files = [str(staged.path / f) for f in manifest["files"]]
    inferred = spark.read.parquet(*files)
    given = spark.read.schema(StructType.fromJson(json.loads(manifest["schema"]))).parquet(*files)
    assert given.schema == inferred.schema
    assert sorted(given.collect()) == sorted(inferred.collect())


class Interrupted(BaseException):
    """Like KeyboardInterrupt or pytest-timeout's failure: not an Exception."""


def interrupt_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupt the Python call of each staging write once Spark's job has set up its output."""
    from pyspark.sql.readwriter import DataFrameWriter

    write = DataFrameWriter.parquet

    def interrupted(self: DataFrameWriter, path: str, *args: object, **kwargs: object) -> None:
        if "staging" not in Path(path).parts and "jobs" not in Path(path).parts:
            write(self, path, *args, **kwargs)  # type: ignore[arg-type]
            return  # the test's own input files
        (Path(path) / "_temporary" / "0").mkdir(parents=True)  # as the job's setup does
        raise Interrupted

    monkeypatch.setattr(DataFrameWriter, "parquet", interrupted)


def stage_in_one_job(
    spark: SparkSession,
    output: PipelineOutput,
    batches: Sequence[Batch],
    pipeline: Pipeline | None = None,
    *,
    batches_together: bool,
) -> list[StagedBatch]:
    """stage_many on ``batches``, their records read from files as they would be from Kafka."""
    from recipes.pipeline import ParquetSink, windowed_sum

    by_range = {b.range: b for b in batches}

    def read(offsets: OffsetRange) -> DataFrame:
        # Read from files, as from Kafka: Spark folds a plan over rows in memory
        # into constants and would drop the job's observations.
        b = by_range[offsets]
        rows = records_dataframe(spark, b.records, topic=b.topic, partition=b.partition)
        path = output.root.parent / "kafka" / offsets.name
        rows.write.mode("overwrite").parquet(str(path))
        return spark.read.parquet(str(path))

    if pipeline is None:
        pipeline = windowed_sum("events", ParquetSink(output.root), window_ms=DEFAULT_WINDOW_MS)
    pipeline = dataclasses.replace(pipeline, batches_together=batches_together)
    return stage_many(spark, output, list(by_range), {}, pipeline, owner="w1", read=read)


class TestSeveralPartitionsInOneJob:
    """stage_many: the ranges of several partitions staged by one Spark job.

    Each test runs both ways: every range read and transformed on its own, and
    all ranges read by one scan and transformed together (``batches_together``,
    windowed_sum's default).
    """

    @pytest.fixture(autouse=True, params=[True, False], ids=["together", "one-by-one"])
    def together(self, request: pytest.FixtureRequest) -> None:
        self.batches_together: bool = request.param

    def stage(
        self,
        spark: SparkSession,
        output: PipelineOutput,
        batches: Sequence[Batch],
        pipeline: Pipeline | None = None,
    ) -> list[StagedBatch]:
        return stage_in_one_job(
            spark, output, batches, pipeline, batches_together=self.batches_together
        )

    def test_each_range_gets_exactly_its_own_results(self, spark: SparkSession, output):
        # Ranges of different lengths and offsets, each with its own invalid records.
        every = [7, 5, 11]
        bounds = [(0, 300), (40, 390), (15, 200)]
        records = [
            [
                r
                for r in generate(bounds[p][1], seed=20 + p, invalid_every=every[p])
                if r[0] >= bounds[p][0]
            ]
            for p in range(3)
        ]
        batches = [batch_of(records[p], *bounds[p], partition=p) for p in range(3)]
        staged = self.stage(spark, output, batches)
        assert [s.range for s in staged] == [b.range for b in batches]
        for p, one in enumerate(staged):
            assert one.records == len(records[p])
            rejected = [o for o, _ in records[p] if o % every[p] == 0]
            assert one.rejected == len(rejected)
            assert output.read_manifest(one.path)["rejected_offsets"] == rejected
            # Each partition's directory alone holds its records' results.
            alone = PipelineOutput(output.root / f"alone-{p}")
            alone.publish(stage_batch(spark, alone, batches[p]))
            published = PipelineOutput(output.root / f"many-{p}")
            output.publish(one)
            shutil.move(str(output.published_paths()[-1]), published.published_dir)
            assert normalized(read_results(spark, published)) == normalized(
                read_results(spark, alone)
            )
            assert normalized(read_results(spark, published)) == normalized(
                expected_results(records[p])
            )
        # The run (its lock file and directory) lives until the output is closed; its jobs do not.
        assert not any((output.root / "jobs" / "w1").glob("*/*"))

    def test_an_interrupted_write_leaves_the_job_still_writing_its_directory(
        self, spark: SparkSession, output, monkeypatch
    ):
        interrupt_writes(monkeypatch)
        records = generate(40, seed=33)
        with pytest.raises(Interrupted):
            self.stage(
                spark,
                output,
                [batch_of(records, 0, 40, partition=0), batch_of(records, 0, 40, partition=1)],
            )
        assert output.staged() == []
        [job] = (output.root / "jobs" / "w1").glob("*/*")
        assert (job / "_temporary" / "0").is_dir()
        output.close()  # the job is over: its run goes
        assert not job.exists()

    def test_each_ranges_manifest_gives_its_files_schema(self, spark: SparkSession, output):
        batches = [batch_of(generate(90, seed=30 + p), 0, 90, partition=p) for p in range(2)]
        for one in self.stage(spark, output, batches):
            assert_manifest_names_the_files_schema(spark, output, one)

    def test_a_range_without_results_is_staged_empty(self, spark: SparkSession, output):
        valid = generate(50, seed=30)
        invalid: list[Record] = [(o, b"not json") for o in range(20)]
        staged = self.stage(
            spark,
            output,
            [batch_of(valid, 0, 50, partition=0), batch_of(invalid, 0, 20, partition=1)],
        )
        empty = staged[1]
        assert (empty.records, empty.rejected) == (20, 20)
        assert output.read_manifest(empty.path)["files"] == {}
        output.publish(staged[0])
        output.publish(empty)
        assert normalized(read_results(spark, output)) == normalized(expected_results(valid))

    def test_a_row_wise_transform_keeps_each_ranges_rows_apart(self, spark: SparkSession, output):
        from pyspark.sql import functions as F

        from recipes.pipeline import ParquetSink

        records = [
            [(o, b'{"ts_ms": 1}' if o % 5 == 0 else v) for o, v in generate(60, seed=40 + p)]
            for p in range(3)
        ]
        pipeline = Pipeline(
            topics=["events"],
            sink=ParquetSink(output.root),
            schema="key STRING, ts_ms BIGINT",
            transform=lambda rows: rows.where(F.col("key").isNotNull()),
        )
        batches = [batch_of(records[p], 0, 60, partition=p) for p in range(3)]
        staged = self.stage(spark, output, batches, pipeline)
        for p, one in enumerate(staged):
            files = [str(one.path / name) for name in output.read_manifest(one.path)["files"]]
            rows = spark.read.parquet(*files)
            # The batch column is the worker's: it never reaches a batch's files.
            assert BATCH_COLUMN not in rows.columns
            assert rows.columns == ["topic", "partition", "offset", "timestamp", "key", "ts_ms"]
            got = sorted((r["partition"], r["offset"]) for r in rows.collect())
            assert got == [(p, o) for o, _ in records[p] if o % 5 != 0]

    def test_a_transform_that_drops_the_batch_column_is_refused_if_it_promised_to_keep_it(
        self, spark: SparkSession, output
    ):
        from recipes.pipeline import ParquetSink

        pipeline = Pipeline(
            topics=["events"],
            sink=ParquetSink(output.root),
            schema="key STRING, ts_ms BIGINT",
            transform=lambda rows: rows.groupBy("key").count(),  # mixes the batches
            name="counts",
        )
        batches = [batch_of(generate(10, seed=50 + p), 0, 10, partition=p) for p in range(2)]
        if not self.batches_together:
            # Per range, the same transform is fine: it never sees two batches.
            staged = self.stage(spark, output, batches, pipeline)
            keys = [len({json.loads(v or b"")["key"] for _, v in b.records}) for b in batches]
            assert [output.read_manifest(s.path)["rows"] for s in staged] == keys
            return
        with pytest.raises(ConfigurationError, match=r"'counts'.*transform dropped the column"):
            self.stage(spark, output, batches, pipeline)
        assert output.staged() == []

    def test_two_ranges_of_one_partition_are_refused(self, spark: SparkSession, output):
        records = generate(20, seed=31)
        with pytest.raises(PipelineOutputError, match="one partition"):
            self.stage(spark, output, [batch_of(records, 0, 10), batch_of(records, 10, 20)])

    def test_a_duplicate_part_file_fails_every_range(
        self, spark: SparkSession, output, monkeypatch
    ):
        from pyspark.sql.readwriter import DataFrameWriter

        write = DataFrameWriter.parquet

        def write_twice(self: DataFrameWriter, path: str, *args: object, **kwargs: object) -> None:
            write(self, path, *args, **kwargs)  # type: ignore[arg-type]
            if "jobs" not in Path(path).parts:
                return  # the test's own input files
            part = next(Path(path).glob("*=1/part-*"))
            shutil.copy(part, part.with_name("part-00000-retry" + part.name[10:]))

        monkeypatch.setattr(DataFrameWriter, "parquet", write_twice)
        records = generate(40, seed=32)
        with pytest.raises(StagedFilesError, match="duplicated or missing"):
            self.stage(
                spark,
                output,
                [batch_of(records, 0, 40, partition=0), batch_of(records, 0, 40, partition=1)],
            )
        assert output.staged() == []
        assert not any((output.root / "jobs" / "w1").glob("*/*"))  # no job left in its run


def test_session_is_configured_for_small_batches(spark: SparkSession):
    conf = spark.sparkContext.getConf()
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.master") == "local[2]"
    # No call-site capture on every DataFrame call of a job built in Python.
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"


def test_a_worker_whose_transform_drops_the_batch_column_does_not_start(
    spark: SparkSession, tmp_path: Path
):
    from coordination.testing import ManualClock, ScriptedTransport
    from recipes.pipeline import ParquetSink, PipelineWorker

    pipeline = Pipeline(
        topics=["events"],
        sink=ParquetSink(tmp_path / "out"),
        schema="key STRING",
        transform=lambda rows: rows.select("key"),
        batches_together=True,
        name="keys",
    )
    worker = PipelineWorker(
        "g",
        pipeline,
        bootstrap_servers="localhost:1",
        transport=ScriptedTransport(),
        clock=ManualClock(),
    )
    try:
        with pytest.raises(ConfigurationError, match=r"'keys'.*transform dropped the column"):
            worker.start()
        assert not worker._started  # the consumer never joined
    finally:
        worker.group.close()


class TestTheBatchColumnContract:
    """batches_together: rows moved out of every batch; a field that hides the column."""

    # One batch up or down: the bounds of the check themselves (a batch numbered past the
    # job's last, or below its first, is stray even one away).
    @pytest.mark.parametrize("moved", [1, -1, None], ids=["one-up", "one-down", "null"])
    def test_rows_whose_batch_column_names_no_batch_fail_the_job(
        self, spark: SparkSession, output: PipelineOutput, moved: int | None
    ):
        from pyspark.sql import functions as F

        from recipes.pipeline import ParquetSink

        def transform(rows: DataFrame) -> DataFrame:
            counted = rows.groupBy(BATCH_COLUMN, "key").count()
            if moved is None:
                return counted.withColumn(BATCH_COLUMN, F.lit(None).cast("int"))
            return counted.withColumn(BATCH_COLUMN, F.col(BATCH_COLUMN) + moved)

        pipeline = Pipeline(
            topics=["events"],
            sink=ParquetSink(output.root),
            schema="key STRING",
            transform=transform,
            batches_together=True,
            name="moved",
        )
        batches = [batch_of(generate(10, seed=60 + p), 0, 10, partition=p) for p in range(2)]
        with pytest.raises(ConfigurationError, match=r"'moved'.*names no batch of the job"):
            stage_in_one_job(spark, output, batches, pipeline, batches_together=True)
        with pytest.raises(ConfigurationError, match=r"'moved'.*names no batch of the job"):
            stage_batch(spark, output, batches[0], pipeline=pipeline)
        assert output.staged() == []
        assert not any((output.root / "jobs" / "w1").glob("*/*"))  # no job left in its run

    @pytest.mark.parametrize("field", [BATCH_COLUMN, BATCH_COLUMN.upper()])
    def test_a_schema_field_named_like_the_batch_column_is_refused(
        self, spark: SparkSession, output: PipelineOutput, field: str
    ):
        from recipes.pipeline import ParquetSink

        pipeline = Pipeline(
            topics=["events"],
            sink=ParquetSink(output.root),
            schema=f"{field} INT, key STRING",
            transform=lambda rows: rows,
            batches_together=True,
            name="clash",
        )
        batches = [batch_of(generate(10, seed=70), 0, 10)]
        with pytest.raises(ConfigurationError, match=r"'clash'.*schema has a field named"):
            stage_in_one_job(spark, output, batches, pipeline, batches_together=True)
        with pytest.raises(ConfigurationError, match=r"'clash'.*schema has a field named"):
            stage_batch(spark, output, batches[0], pipeline=pipeline)
        # Without the option the field is the user's own, like any other.
        alone = dataclasses.replace(pipeline, batches_together=False)
        staged = stage_batch(spark, output, batches[0], pipeline=alone)
        assert staged.records == 10
