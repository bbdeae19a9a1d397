"""The file side of the exactly-once protocol, without Spark: names, publish, recover, cleanup."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordination.errors import ConfigurationError
from recipes.pipeline import _output
from recipes.pipeline._output import (
    MANIFEST_NAME,
    OffsetRange,
    PipelineOutput,
    PipelineOutputError,
    PublishedRangeError,
    StagedBatch,
    dir_topic,
)
from recipes.pipeline._spark import Batch


def fake_stage(
    output: PipelineOutput, topic: str, partition: int, start: int, end: int
) -> StagedBatch:
    """What stage_batch leaves behind, with a stand-in for Spark's Parquet file."""
    offsets = OffsetRange(topic=topic, partition=partition, start_offset=start, end_offset=end)
    path = output.new_staging_path(offsets)
    path.mkdir()
    (path / "part-00000.parquet").write_bytes(b"PAR1 stand-in")
    return output.finish_stage(
        path, offsets, records=end - start, rejected_offsets=[], window_ms=60_000
    )


class TestNames:
    def test_published_name_pads_offsets_to_twenty_digits(self):
        r = OffsetRange(topic="events", partition=3, start_offset=100, end_offset=250)
        assert r.name == "events-3-00000000000000000100-00000000000000000250"

    @pytest.mark.parametrize("topic", ["events", "a-1", "a-1-2", "my.topic_v2", "_private", "7"])
    def test_names_parse_back_whatever_the_topic(self, topic):
        r = OffsetRange(topic=topic, partition=12, start_offset=0, end_offset=2**63 - 1)
        assert OffsetRange.parse(r.name) == r
        assert OffsetRange.parse(r.name + "-" + "ab" * 16) == r

    @pytest.mark.parametrize(
        "name",
        [
            "",
            "events",
            "events-3-100-250",
            "events-3-00000000000000000100-00000000000000000250-notahexsuffix",
            "events-3-00000000000000000250-00000000000000000100",  # start > end
            # Found by the long fuzzing run: int() of 5,000 digits raised ValueError.
            "t-" + "9" * 5000 + "-00000000000000000000-00000000000000000001",
            "t-99999999999-00000000000000000000-00000000000000000001",
        ],
        ids=lambda name: name[:60],
    )
    def test_foreign_names_do_not_parse(self, name):
        assert OffsetRange.parse(name) is None

    @pytest.mark.parametrize(
        ("topic", "partition", "start", "end"),
        [
            ("", 0, 0, 1),
            ("a/b", 0, 0, 1),
            ("..", 0, 0, 1),
            ("t", -1, 0, 1),
            ("t", 0, 5, 4),
            ("t", 0, -1, 4),
        ],
    )
    def test_invalid_ranges_are_refused(self, topic, partition, start, end):
        with pytest.raises(PipelineOutputError):
            OffsetRange(topic=topic, partition=partition, start_offset=start, end_offset=end)

    def test_commit_metadata_is_the_staging_name(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        assert staged.commit_metadata == staged.path.name

    def test_long_topics_are_shortened_to_fit_a_directory_name(self, output):
        topic = "t" * 249  # Kafka's longest topic name
        other = "t" * 248 + "u"
        staged = fake_stage(output, topic, 2**31 - 1, 0, 2**63 - 1)
        fake_stage(output, other, 2**31 - 1, 0, 2**63 - 1)
        assert len(staged.commit_metadata.encode()) <= 255  # NAME_MAX
        assert dir_topic(topic) != dir_topic(other)
        assert OffsetRange.parse(staged.name) == OffsetRange(
            topic=dir_topic(topic), partition=2**31 - 1, start_offset=0, end_offset=2**63 - 1
        )
        assert output.staged(topic) == [staged.name]
        assert output.recover(topic, 2**31 - 1, 2**63 - 1, staged.commit_metadata) is not None
        assert output.check_published({(topic, 2**31 - 1): (0, 2**63 - 1)})


class TestBatch:
    def test_records_must_increase_within_the_range(self):
        Batch(
            topic="t", partition=0, start_offset=10, end_offset=20, records=[(10, b""), (19, b"")]
        )
        for records in ([(9, b"")], [(20, b"")], [(12, b""), (12, b"")], [(13, b""), (12, b"")]):
            with pytest.raises(PipelineOutputError):
                Batch(topic="t", partition=0, start_offset=10, end_offset=20, records=records)


class TestPublish:
    def test_publish_renames_staging_into_published(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        path = output.publish(staged)
        assert path == output.published_dir / "t-0-00000000000000000000-00000000000000000010"
        assert (path / MANIFEST_NAME).is_file()
        assert output.staged() == []
        assert output.published() == [staged.range]

    def test_published_files_are_those_the_manifest_lists_inside_the_directory(self, output):
        path = output.publish(fake_stage(output, "t", 0, 0, 10))
        manifest = json.loads((path / MANIFEST_NAME).read_text())
        manifest["files"] = {"part-00000.parquet": 10}
        (path / MANIFEST_NAME).write_text(json.dumps(manifest))
        assert output.published_files() == [path / "part-00000.parquet"]
        # A manifest naming the directory's parent (or itself, or a path) lists nothing
        # outside it: readers of the published files must not read other batches twice.
        manifest["files"].update({"..": 1, ".": 1, "../x": 1, "": 1, "a\0b": 1})
        (path / MANIFEST_NAME).write_text(json.dumps(manifest))
        assert output.published_files() == [path / "part-00000.parquet"]

    def test_an_unreadable_manifest_is_the_pipelines_error(self, output):
        path = output.publish(fake_stage(output, "t", 0, 0, 10))
        for text in (b"", b"\xff", b"[1]", b"[" * 100_000, b'{"files":'):
            (path / MANIFEST_NAME).write_bytes(text)
            with pytest.raises(PipelineOutputError, match=MANIFEST_NAME):
                output.published_files()

    def test_publishing_again_is_a_no_op(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        first = output.publish(staged)
        assert output.publish(staged) == first
        assert output.publish(staged.commit_metadata) == first

    def test_a_second_copy_of_a_published_range_is_dropped(self, output):
        first = fake_stage(output, "t", 0, 0, 10)
        second = fake_stage(output, "t", 0, 0, 10)
        output.publish(first)
        output.publish(second)
        assert output.staged() == []
        assert output.published() == [first.range]

    def test_concurrent_publishers_of_one_batch_both_succeed(self, output):
        # The old owner's publish() racing the new owner's recover().
        errors: list[BaseException] = []
        for i in range(20):
            staged = fake_stage(output, "t", 0, i, i + 1)

            def publish(s: StagedBatch = staged) -> None:
                try:
                    output.publish(s)
                except BaseException as exc:  # pragma: no cover - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=publish) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert errors == []
        assert len(output.published()) == 20
        assert output.staged() == []

    def test_an_unfinished_stage_is_not_published(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        (staged.path / MANIFEST_NAME).unlink()  # as if Spark's write were still running
        with pytest.raises(PipelineOutputError, match="did not finish"):
            output.publish(staged)
        assert output.published() == []

    def test_a_lost_committed_batch_is_an_error(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        output.abandon(staged)
        with pytest.raises(PipelineOutputError, match="deleted"):
            output.publish(staged)

    @pytest.mark.parametrize("name", ["t-0-00000000000000000000-00000000000000000010", "../x", "x"])
    def test_only_staging_names_are_accepted(self, output, name):
        with pytest.raises(PipelineOutputError, match="not a staging directory name"):
            output.publish(name)
        with pytest.raises(PipelineOutputError):
            output.abandon(name)


class TestAbandon:
    def test_abandon_deletes_the_stage_and_is_idempotent(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        output.abandon(staged)
        output.abandon(staged)
        assert not staged.path.exists()
        assert output.staged() == output.published() == []


class TestRecover:
    def test_nothing_to_recover_without_a_commit(self, output):
        assert output.recover("t", 0, None, None) is None
        assert output.recover("t", 0, 42, "") is None

    def test_metadata_from_elsewhere_is_ignored(self, output):
        assert output.recover("t", 0, 42, "written by another tool") is None

    def test_committed_but_unpublished_batch_is_published(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        # The old owner committed offset 10 with this metadata, then crashed.
        path = output.recover("t", 0, 10, staged.commit_metadata)
        assert path == output.published_dir / staged.range.name
        assert output.staged() == []

    def test_recover_after_publish_returns_the_published_dir(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        published = output.publish(staged)
        assert output.recover("t", 0, 10, staged.commit_metadata) == published

    def test_a_moved_offset_does_not_publish_the_named_batch(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        # An offset reset to 5 that kept the old metadata.
        assert output.recover("t", 0, 5, staged.commit_metadata) is None
        assert output.published() == []

    def test_metadata_of_another_partition_is_refused(self, output):
        staged = fake_stage(output, "t", 1, 0, 10)
        with pytest.raises(PipelineOutputError, match="another partition"):
            output.recover("t", 0, 10, staged.commit_metadata)

    def test_a_committed_batch_already_published_is_done_whatever_staging_holds(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        published = output.publish(staged)
        # A late task of the same attempt recreated part of its staging tree.
        (staged.path / "_temporary").mkdir(parents=True)
        assert output.recover("t", 0, 10, staged.commit_metadata) == published
        assert output.publish(staged) == published
        assert output.published() == [staged.range]

    def test_a_committed_batch_that_vanished_is_an_error(self, output):
        staged = fake_stage(output, "t", 0, 0, 10)
        output.abandon(staged)
        with pytest.raises(PipelineOutputError):
            output.recover("t", 0, 10, staged.commit_metadata)


def owner() -> bool:
    return True


class TestCleanupOrphans:
    def test_removes_uncommitted_stages_below_the_commit_of_the_partition_only(self, output):
        committed = fake_stage(output, "t", 0, 0, 10)
        rejected_zombie = fake_stage(output, "t", 0, 0, 7)
        crashed_before_commit = fake_stage(output, "t", 0, 10, 30)  # may still be in flight
        other_partition = fake_stage(output, "t", 1, 0, 7)
        other_topic = fake_stage(output, "t-0", 0, 0, 7)

        removed = output.cleanup_orphans("t", 0, 10, committed.commit_metadata, still_owner=owner)

        assert removed == [rejected_zombie.name]
        assert output.staged() == sorted(
            [committed.name, crashed_before_commit.name, other_partition.name, other_topic.name]
        )
        # Once the partition's commits pass it, the crashed attempt goes too.
        later = fake_stage(output, "t", 0, 10, 40)
        removed = output.cleanup_orphans("t", 0, 40, later.commit_metadata, still_owner=owner)
        assert removed == sorted([committed.name, crashed_before_commit.name])

    def test_without_metadata_stages_ending_at_the_commit_are_kept(self, output):
        maybe_committed = fake_stage(output, "t", 0, 0, 10)
        orphan = fake_stage(output, "t", 0, 0, 7)
        assert output.cleanup_orphans("t", 0, 10, still_owner=owner) == [orphan.name]
        assert output.staged() == [maybe_committed.name]

    def test_nothing_is_deleted_before_the_first_commit(self, output):
        fake_stage(output, "t", 0, 0, 7)
        assert output.cleanup_orphans("t", 0, None, still_owner=owner) == []
        assert len(output.staged()) == 1

    def test_after_recover_only_attempts_past_the_commit_are_left(self, output):
        committed = fake_stage(output, "t", 0, 0, 10)
        fake_stage(output, "t", 0, 5, 10)
        in_flight = fake_stage(output, "t", 0, 10, 20)
        output.recover("t", 0, 10, committed.commit_metadata)
        output.cleanup_orphans("t", 0, 10, committed.commit_metadata, still_owner=owner)
        assert output.staged("t", 0) == [in_flight.name]
        assert output.published() == [committed.range]

    def test_a_stale_former_owner_cannot_delete_its_successors_batch(self, output):
        # Owner A read the commit (10, first), then stalled past its session. B took
        # over at 10, staged [10, 30) and committed it, and is about to publish.
        first = fake_stage(output, "t", 0, 0, 10)
        output.publish(first)
        successors = fake_stage(output, "t", 0, 10, 30)
        # A resumes and cleans up with what it read before the pause; even if its
        # lease check were wrong (a stall between check and delete), B's batch stays.
        output.cleanup_orphans("t", 0, 10, first.commit_metadata, still_owner=owner)
        assert successors.path.is_dir()
        assert output.publish(successors).is_dir()
        # And every later owner recovers the commit.
        assert output.recover("t", 0, 30, successors.commit_metadata) is not None
        assert output.check_published({("t", 0): (0, 30)})

    def test_nothing_is_deleted_without_a_valid_lease(self, output):
        committed = fake_stage(output, "t", 0, 0, 10)
        orphan = fake_stage(output, "t", 0, 0, 7)
        removed = output.cleanup_orphans(
            "t", 0, 10, committed.commit_metadata, still_owner=lambda: False
        )
        assert removed == []
        assert orphan.path.is_dir()

    def test_the_lease_is_checked_right_before_each_deletion(self, output):
        committed = fake_stage(output, "t", 0, 0, 10)
        for _ in range(3):
            fake_stage(output, "t", 0, 0, 7)
        answers = iter([True, False, True])
        removed = output.cleanup_orphans(
            "t", 0, 10, committed.commit_metadata, still_owner=lambda: next(answers)
        )
        assert len(removed) == 1
        assert len(output.staged("t", 0)) == 3


class TestOutputLocation:
    @pytest.mark.parametrize(
        "root",
        [
            "s3a://bucket/agg",
            "s3://bucket/agg",
            "gs://b/agg",
            "hdfs://nn:8020/agg",
            "file:///tmp/agg",
            "hdfs:/agg",
        ],
    )
    def test_uris_are_refused_not_made_local_directories(self, tmp_path, monkeypatch, root):
        monkeypatch.chdir(tmp_path)
        with pytest.raises(ConfigurationError, match=r"output .* is a URI"):
            PipelineOutput(root)
        with pytest.raises(ConfigurationError):
            PipelineOutput(Path(root))
        assert list(tmp_path.iterdir()) == []

    def test_a_relative_local_path_is_fine(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        PipelineOutput("agg")
        assert (tmp_path / "agg" / "staging").is_dir()


class TestCheckPublished:
    def publish(self, output: PipelineOutput, *ranges: tuple[str, int, int, int]) -> None:
        for topic, partition, start, end in ranges:
            output.publish(fake_stage(output, topic, partition, start, end))

    def test_contiguous_ranges_pass_and_report_their_span(self, output):
        self.publish(output, ("t", 0, 0, 10), ("t", 0, 10, 25), ("t", 1, 5, 6), ("u", 0, 0, 0))
        spans = output.check_published({("t", 0): (0, 25)})
        assert spans == {("t", 0): (0, 25), ("t", 1): (5, 6), ("u", 0): (0, 0)}

    def test_overlap_and_gap_are_reported(self, output):
        self.publish(output, ("t", 0, 0, 10), ("t", 0, 5, 20), ("t", 1, 0, 10), ("t", 1, 12, 20))
        with pytest.raises(PublishedRangeError) as info:
            output.check_published()
        assert len(info.value.problems) == 2
        assert "overlaps" in info.value.problems[0]
        assert "gap [10, 12)" in info.value.problems[1]

    def test_span_must_match_what_was_committed(self, output):
        self.publish(output, ("t", 0, 0, 10))
        with pytest.raises(PublishedRangeError, match="expected"):
            output.check_published({("t", 0): (0, 11)})
        with pytest.raises(PublishedRangeError, match="covers None"):
            output.check_published({("t", 1): (0, 1)})

    def test_manifest_is_read_back(self, output):
        staged = fake_stage(output, "t", 0, 3, 10)
        manifest = output.read_manifest(output.publish(staged))
        assert manifest["start_offset"] == 3
        assert manifest["end_offset"] == 10
        assert manifest["records"] == 7
        with pytest.raises(PipelineOutputError):
            output.read_manifest(Path(output.root))


def job_in(output: PipelineOutput, owner: str) -> Path:
    """A job directory with a part file in it, as a Spark job leaves it mid-write."""
    job = output.new_job_path(owner)
    (job / "_coordination_range=0").mkdir(parents=True)
    (job / "_coordination_range=0" / "part-00000.parquet").write_bytes(b"PAR1 stand-in")
    return job


# A worker in another process: stages under ``owner`` and lives until its stdin closes.
_OTHER_WORKER = """
import sys
from recipes.pipeline._output import PipelineOutput
output = PipelineOutput(sys.argv[1])
job = output.new_job_path(sys.argv[2])
job.mkdir(parents=True)
print(job, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def other_worker(output: PipelineOutput) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live worker process named ``w1`` with a job directory under ``output``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _OTHER_WORKER, str(output.root), "w1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    job = Path(proc.stdout.readline().strip())
    yield proc, job
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        assert pipe is not None
        pipe.close()


class TestJobRuns:
    """Job directories: a starting worker deletes a dead run's, never a live worker's."""

    def test_two_workers_with_the_same_name_keep_each_others_jobs(self, output):
        other = PipelineOutput(output.root)  # a second worker on the output, same name
        mine, theirs = job_in(output, "worker"), job_in(other, "worker")
        assert mine.parent != theirs.parent  # a run each
        assert other.remove_dead_jobs() == 0
        assert output.remove_dead_jobs() == 0
        assert mine.is_dir() and theirs.is_dir()

    def test_runs_of_this_process_are_kept_where_locks_do_not_conflict_within_it(
        self, output, tmp_path, monkeypatch
    ):
        # On NFS, Linux emulates flock with POSIX record locks, which one process never
        # conflicts with: the process's own runs must be known without the lock, whatever
        # spelling of the output's path the cleaner uses.
        mine = job_in(output, "worker")
        monkeypatch.setattr(_output, "_try_lock", lambda fd: True)
        (tmp_path / "link").symlink_to(output.root)
        assert PipelineOutput(tmp_path / "link").remove_dead_jobs() == 0
        assert mine.is_dir()

    def test_a_restart_beside_its_live_predecessor_keeps_its_jobs(self, output, other_worker):
        proc, predecessor_job = other_worker
        mine = job_in(output, "w1")  # the restarted w1, while the old w1 still runs
        assert output.remove_dead_jobs() == 0
        assert predecessor_job.is_dir() and mine.is_dir()

        proc.send_signal(signal.SIGKILL)  # the predecessor dies: its run is dead
        proc.wait()
        assert output.remove_dead_jobs() == 1
        assert not predecessor_job.parent.exists()
        assert not predecessor_job.parent.with_name(predecessor_job.parent.name + ".lock").exists()
        assert mine.is_dir()
        assert output.remove_dead_jobs() == 0

    def test_a_crashed_run_of_another_name_is_removed(self, output):
        crashed = PipelineOutput(output.root)
        left = job_in(crashed, "w 1/x")  # any owner name, quoted
        del crashed
        gc.collect()  # the object is gone: its lock with it, as with a dead process
        assert left.is_dir()
        assert output.remove_dead_jobs() == 1
        assert not left.exists()
        assert os.listdir(output.root / "jobs") == []
        with pytest.raises(PipelineOutputError, match="job directory"):
            output.new_job_path("..")

    def test_close_removes_the_runs_own_directories(self, output):
        job_in(output, "w1")
        output.close()
        assert os.listdir(output.root / "jobs" / "w1") == []
        assert job_in(output, "w1").is_dir()  # staging again starts a new run

    def test_a_directory_without_a_lock_file_is_left_alone(self, output):
        legacy = output.root / "jobs" / "w1" / ("ab" * 16)
        legacy.mkdir(parents=True)
        assert output.remove_dead_jobs() == 0
        assert legacy.is_dir()

    def test_a_cleaner_between_creating_and_locking_a_run_costs_only_a_retry(
        self, output, monkeypatch
    ):
        # Step by step: the run's lock file exists but is not locked yet when another
        # worker's cleanup runs; it takes the run for dead and removes the file. The new
        # run must notice and claim another, or it would run with a lock nobody sees.
        lock = _output._try_lock
        cleaned: list[int] = []

        def cleanup_first(fd: int) -> bool:
            monkeypatch.setattr(_output, "_try_lock", lock)  # once
            cleaned.append(PipelineOutput(output.root).remove_dead_jobs())
            return lock(fd)

        monkeypatch.setattr(_output, "_try_lock", cleanup_first)
        job = job_in(output, "w1")
        assert cleaned == [1]
        assert job.parent.with_name(job.parent.name + ".lock").is_file()
        assert PipelineOutput(output.root).remove_dead_jobs() == 0
        assert job.is_dir()
