"""The worker's side of the protocol without a broker or Spark: failed commits, fenced cleanup.

The worker's Consumer is real, on a manual clock; its group member is a stand-in
that keeps one committed offset per partition and can be told to lose a commit's
response, to refuse commits, or to report an expired membership lease; its fetcher
is a mock. Spark's stage is replaced by a directory with a manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest

from coordination import ErrorCode, Generation, OffsetAndMetadata
from coordination.errors import CommitFailedError, CoordinationTimeoutError
from coordination.testing import ManualClock, ScriptedTransport
from recipes.partitioning import TopicPartition
from recipes.pipeline import PipelineWorker, WorkerEvent
from recipes.pipeline._output import OffsetRange, PipelineOutput, StagedBatch
from recipes.pipeline._worker import _Partition

ILLEGAL_GENERATION = ErrorCode.ILLEGAL_GENERATION
REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS
TP = TopicPartition("t", 0)


class Group:
    """The group as the worker and its consumer see it: ownership, commits, committed
    offsets, the lease."""

    group_id = "g"

    def __init__(self, config: Any) -> None:
        self.config = config
        self.committed: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.lease = 30.0
        self.owns = {TP}
        # Set to an exception to raise after the commit landed (its response lost)
        # or, with ``lands`` False, instead of committing.
        self.commit_error: BaseException | None = None
        self.lands = True
        # With ``commit_error``: the partitions that land (None: as ``lands`` says).
        self.lands_only: set[tuple[str, int]] | None = None
        # Raised by the next commits (one each), before anything lands.
        self.refusals: list[BaseException] = []
        self.commits = 0
        self.on_fetch: Callable[[], None] | None = None

    def owned(self) -> frozenset[TopicPartition]:
        return frozenset(self.owns)

    def generation(self) -> Generation:
        return Generation(3, "member-1", "consumer")

    def membership_lease(self) -> float:
        return self.lease

    def ensure_active_group(self, timeout: float | None = None) -> None:
        pass  # in the group, and never stopped on an error

    def commit_offsets(
        self, offsets: Mapping[tuple[str, int], OffsetAndMetadata], **_: Any
    ) -> None:
        self.commits += 1
        if self.refusals:
            raise self.refusals.pop(0)
        if self.lands_only is not None:
            self.committed.update((tp, om) for tp, om in offsets.items() if tp in self.lands_only)
        elif self.lands:
            self.committed.update(offsets)
        if self.commit_error is not None:
            raise self.commit_error

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], **_: Any
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        result = {tp: self.committed.get(tp) for tp in partitions}
        if self.on_fetch is not None:
            self.on_fetch()
        return result


def fake_stage(output: PipelineOutput, batch: OffsetRange) -> StagedBatch:
    path = output.new_staging_path(batch)
    path.mkdir()
    (path / "part-00000.parquet").write_bytes(b"PAR1 stand-in")
    return output.finish_stage(
        path,
        batch,
        records=batch.end_offset - batch.start_offset,
        rejected_offsets=[],
        window_ms=60_000,
    )


def stage_at(output: PipelineOutput, start: int, end: int) -> StagedBatch:
    return fake_stage(
        output, OffsetRange(topic="t", partition=0, start_offset=start, end_offset=end)
    )


@pytest.fixture
def events() -> list[WorkerEvent]:
    return []


@pytest.fixture
def worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[WorkerEvent]
) -> Iterator[PipelineWorker]:
    w = PipelineWorker(
        "g",
        topic="t",
        output=tmp_path / "out",
        bootstrap_servers="localhost:1",
        on_event=events.append,
        transport=ScriptedTransport(),
        clock=ManualClock(),
    )
    membership = w.group
    monkeypatch.setattr(w.consumer, "_group", Group(membership.config))
    monkeypatch.setattr(w, "_spark", object())
    w.consumer._fetcher = MagicMock()
    monkeypatch.setattr(w, "_stage", lambda batches: [fake_stage(w.output, b) for b in batches])
    yield w
    membership.close()


def group(worker: PipelineWorker) -> Group:
    g = worker.group
    assert isinstance(g, Group)
    return g


def owned(worker: PipelineWorker, start: int) -> _Partition:
    part = _Partition(tp=TP, assigned_at=0.0, ready=True, start=start)
    worker._parts[TP] = part
    worker.consumer.seek(TP, start)
    return part


def process(worker: PipelineWorker, part: _Partition, start: int, end: int) -> None:
    worker._in_flight = {TP}
    worker._jobs = 1
    worker._process(
        [(part, OffsetRange(topic="t", partition=0, start_offset=start, end_offset=end))]
    )


class TestFailedCommit:
    def test_a_commit_whose_response_was_lost_is_published_not_deleted(self, worker):
        # The first attempt landed, its response was lost, and the engine's retry
        # met a generation that had moved on: CommitFailedError for a commit that
        # the group holds.
        g = group(worker)
        g.commit_error = CommitFailedError(ILLEGAL_GENERATION, group_id="g", api="OffsetCommit")
        part = owned(worker, 0)
        process(worker, part, 0, 10)
        committed = g.committed[("t", 0)]
        assert committed.offset == 10
        # The batch the commit names is published; any later owner recovers it.
        out = worker.output
        assert out.published() == [
            OffsetRange(topic="t", partition=0, start_offset=0, end_offset=10)
        ]
        assert out.recover("t", 0, committed.offset, committed.metadata) is not None
        assert part.start == 10 and part.ready

    @pytest.mark.parametrize(
        "error",
        [
            CommitFailedError(ILLEGAL_GENERATION, group_id="g", api="OffsetCommit"),
            CoordinationTimeoutError("OffsetCommit did not complete in time"),
            RuntimeError("anything else"),
        ],
    )
    def test_a_commit_that_did_not_land_leaves_the_batch_in_staging(self, worker, events, error):
        g = group(worker)
        g.commit_error, g.lands = error, False
        part = owned(worker, 0)
        process(worker, part, 0, 10)
        assert ("t", 0) not in g.committed
        assert len(worker.output.staged("t", 0)) == 1
        assert worker.output.published() == []
        assert not part.ready  # prepared again, then processed from the committed offset
        assert part.start == 0
        assert [e.kind for e in events] == ["abandoned"]

    def test_a_commit_whose_outcome_cannot_be_fetched_leaves_the_batch(self, worker):
        g = group(worker)
        g.commit_error = CoordinationTimeoutError("OffsetCommit did not complete in time")

        def unreachable() -> None:
            raise CoordinationTimeoutError("OffsetFetch did not complete in time")

        g.on_fetch = unreachable
        part = owned(worker, 0)
        process(worker, part, 0, 10)
        # It landed, but the worker cannot know: the next owner's recover publishes it.
        committed = g.committed[("t", 0)]
        assert worker.output.staged("t", 0) == [committed.metadata]
        assert worker.output.recover("t", 0, committed.offset, committed.metadata) is not None


class TestFencedCleanup:
    def prepare(self, worker: PipelineWorker) -> _Partition:
        part = _Partition(tp=TP, assigned_at=0.0)
        worker._parts[TP] = part
        worker.consumer.seek(TP, 0)  # where the consumer started it: the log's start
        worker._prepare(part)
        assert part.ready
        return part

    def test_a_former_owner_resuming_from_a_pause_keeps_its_successors_batch(self, worker):
        # Worker A fetches the commit (10, first) and then stalls; meanwhile B owns
        # the partition, stages [10, 30) and commits it. A resumes and recovers.
        g = group(worker)
        out = worker.output
        first = stage_at(out, 0, 10)
        out.publish(first)
        g.committed[("t", 0)] = OffsetAndMetadata(10, first.commit_metadata)
        successor = PipelineOutput(out.root)
        successors: list[StagedBatch] = []

        def b_takes_over() -> None:
            successors.append(stage_at(successor, 10, 30))

        g.on_fetch = b_takes_over
        self.prepare(worker)
        (staged,) = successors
        assert staged.path.is_dir()
        successor.publish(staged)
        assert out.check_published({("t", 0): (0, 30)})

    def test_an_expired_lease_deletes_nothing(self, worker):
        g = group(worker)
        out = worker.output
        committed = stage_at(out, 0, 10)
        orphan = stage_at(out, 0, 7)
        g.committed[("t", 0)] = OffsetAndMetadata(10, committed.commit_metadata)
        g.lease = 0.0  # a member paused past its session has no lease left
        self.prepare(worker)
        assert orphan.path.is_dir()
        g.lease = 30.0
        self.prepare(worker)
        assert not orphan.path.exists()
        assert out.staged() == []
        assert out.published() == [committed.range]

    def test_orphans_are_removed_once_commits_pass_them(self, worker):
        g = group(worker)
        out = worker.output
        crashed = stage_at(out, 0, 8)  # a predecessor died before committing [0, 8)
        part = self.prepare(worker)
        assert crashed.path.is_dir()  # before any commit it may still be in flight
        process(worker, part, 0, 12)
        assert out.staged() == []
        assert g.committed[("t", 0)].offset == 12

    def test_the_lease_margin_must_leave_room(self, tmp_path):
        from coordination.errors import ConfigurationError

        with pytest.raises(ConfigurationError, match="lease_margin_ms"):
            PipelineWorker(
                "g",
                topic="t",
                output=tmp_path,
                bootstrap_servers="localhost:1",
                session_timeout_ms=10_000,
                lease_margin_ms=10_000,
            )


class TestOnTheConsumer:
    def test_a_new_partition_starts_at_its_committed_offset_and_is_never_fetched(self, worker):
        g = group(worker)
        committed = stage_at(worker.output, 0, 10)
        worker.output.publish(committed)
        g.committed[("t", 0)] = OffsetAndMetadata(10, committed.commit_metadata)
        worker.consumer.seek(TP, 0)  # where the consumer started it (here: wrong)
        worker._take(frozenset({TP}))
        part = worker._parts[TP]
        worker._prepare(part)
        assert part.ready and part.start == 10
        # Spark reads the records: the consumer keeps every partition paused.
        assert worker.consumer.paused() == {TP}

    @pytest.mark.parametrize("code", [REBALANCE_IN_PROGRESS, ErrorCode.STALE_MEMBER_EPOCH])
    def test_a_commit_during_a_rebalance_is_retried_once_the_group_is_synced(self, worker, code):
        # STALE_MEMBER_EPOCH: on the consumer protocol, sent before the answer that moved
        # the member's epoch on arrived. Neither refusal applied anything.
        g = group(worker)
        g.refusals = [CommitFailedError(code, group_id="g", api="OffsetCommit")] * 2
        part = owned(worker, 0)
        before = worker._clock.monotonic()
        process(worker, part, 0, 10)
        assert g.commits == 3
        assert g.committed[("t", 0)].offset == 10
        assert worker._clock.monotonic() == pytest.approx(before + 0.4)  # on the clock
        assert part.start == 10 and part.ready

    def test_run_raises_the_error_the_group_member_stopped_on(self, worker):
        from coordination.errors import UnsupportedVersionError

        stopped = UnsupportedVersionError(ErrorCode.UNSUPPORTED_VERSION, group_id="g")

        def ensure_active_group(timeout: float | None = None) -> None:
            raise stopped

        group(worker).ensure_active_group = ensure_active_group  # type: ignore[method-assign]
        worker._started = True
        with pytest.raises(UnsupportedVersionError) as raised:
            worker.run(worker._clock.event())  # owns nothing: it would wait forever
        assert raised.value is stopped

    def test_a_partition_the_consumer_no_longer_owns_is_not_committed(self, worker, events):
        g = group(worker)
        part = owned(worker, 0)
        g.owns = set()  # revoked underneath (the worker's revocation would have waited)
        process(worker, part, 0, 10)
        assert g.commits == 0 and ("t", 0) not in g.committed
        assert [e.kind for e in events] == ["abandoned"]
        assert len(worker.output.staged("t", 0)) == 1

    def test_fetch_settings_that_change_what_is_read_are_refused(self, tmp_path):
        from coordination.errors import ConfigurationError

        with pytest.raises(ConfigurationError, match="value_deserializer"):
            PipelineWorker(
                "g",
                topic="t",
                output=tmp_path,
                bootstrap_servers="localhost:1",
                value_deserializer=bytes.decode,
            )


class TestBatches:
    """How the worker cuts a partition's next offset range."""

    def test_a_batch_runs_from_the_committed_offset_to_the_end_at_most_max_records(self, worker):
        part = owned(worker, 100)
        worker.max_batch_records = 50
        part.end, part.pending_since = 180, worker._clock.monotonic()
        with worker._lock:
            ((cut_part, cut),) = worker._next_batches(worker._clock.monotonic())
        assert cut_part is part
        assert (cut.start_offset, cut.end_offset) == (100, 150)
        assert TP in worker._in_flight

    def test_a_short_range_waits_for_the_delay(self, worker):
        part = owned(worker, 0)
        part.end, part.pending_since = 5, worker._clock.monotonic()
        with worker._lock:
            assert worker._next_batches(worker._clock.monotonic()) == []
        worker._clock.advance(worker.max_batch_delay_s)
        with worker._lock:
            ((_, cut),) = worker._next_batches(worker._clock.monotonic())
        assert (cut.start_offset, cut.end_offset) == (0, 5)

    def two_partitions(self, worker: PipelineWorker) -> tuple[_Partition, _Partition]:
        other = TopicPartition("t", 1)
        group(worker).owns = {TP, other}
        first = owned(worker, 0)
        second = _Partition(tp=other, assigned_at=0.0, ready=True, start=0)
        worker._parts[other] = second
        return first, second

    def test_the_partitions_waiting_longest_go_first(self, worker):
        first, second = self.two_partitions(worker)
        worker.max_partitions_per_batch = 1
        now = worker._clock.monotonic()
        second.end, second.pending_since = 10, now - 5
        first.end, first.pending_since = 10, now - 2
        with worker._lock:
            ((cut, _),) = worker._next_batches(now)
        assert cut is second

    def test_once_one_partition_is_due_every_waiting_partition_joins_the_job(self, worker):
        first, second = self.two_partitions(worker)
        worker.parallel = 1
        now = worker._clock.monotonic()
        first.end, first.pending_since = 10, now - worker.max_batch_delay_s  # due
        second.end, second.pending_since = 3, now  # waiting, not yet due
        with worker._lock:
            cut = worker._next_batches(now)
        assert [(p, b.start_offset, b.end_offset) for p, b in cut] == [
            (first, 0, 10),
            (second, 0, 3),
        ]
        assert worker._in_flight == {first.tp, second.tp}

    def test_the_waiting_partitions_are_shared_among_the_jobs_that_may_start(self, worker):
        first, second = self.two_partitions(worker)
        assert worker.parallel == 2
        now = worker._clock.monotonic()
        first.end, first.pending_since = 10, now - worker.max_batch_delay_s - 1
        second.end, second.pending_since = 3, now - worker.max_batch_delay_s
        with worker._lock:
            assert [p for p, _ in worker._next_batches(now)] == [first]
            worker._jobs += 1  # as _step counts the job it starts
            assert [p for p, _ in worker._next_batches(now)] == [second]

    def test_one_job_commits_all_its_batches_in_one_request_and_publishes_each(self, worker):
        first, second = self.two_partitions(worker)
        first.end, second.end = 10, 4
        worker._in_flight = {first.tp, second.tp}
        worker._jobs = 1
        worker._process(
            [
                (first, OffsetRange(topic="t", partition=0, start_offset=0, end_offset=10)),
                (second, OffsetRange(topic="t", partition=1, start_offset=0, end_offset=4)),
            ]
        )
        g = group(worker)
        assert g.commits == 1
        assert {tp: om.offset for tp, om in g.committed.items()} == {("t", 0): 10, ("t", 1): 4}
        assert [(r.partition, r.end_offset) for r in worker.output.published()] == [(0, 10), (1, 4)]
        assert (first.start, second.start) == (10, 4)
        assert worker._in_flight == set() and worker._jobs == 0

    def test_a_commit_that_landed_for_some_partitions_publishes_only_theirs(self, worker, events):
        # The broker answers per partition: one partition's commit can land while
        # another's is refused (e.g. its ownership moved on).
        first, second = self.two_partitions(worker)
        g = group(worker)
        g.commit_error = CoordinationTimeoutError("OffsetCommit did not complete in time")
        g.lands_only = {("t", 0)}
        worker._in_flight = {first.tp, second.tp}
        worker._jobs = 1
        worker._process(
            [
                (first, OffsetRange(topic="t", partition=0, start_offset=0, end_offset=10)),
                (second, OffsetRange(topic="t", partition=1, start_offset=0, end_offset=4)),
            ]
        )
        assert [(r.partition, r.end_offset) for r in worker.output.published()] == [(0, 10)]
        assert len(worker.output.staged("t", 1)) == 1  # left for a later recover
        assert first.start == 10 and first.ready
        assert not second.ready and second.start == 0
        assert sorted((e.kind, e.partition) for e in events) == [
            ("abandoned", 1),
            ("batch", 0),
        ]

    def test_a_partition_being_revoked_gets_no_new_batch(self, worker):
        part = owned(worker, 0)
        part.end, part.pending_since = 10**6, 0.0
        worker._revoking.add(TP)
        with worker._lock:
            assert worker._next_batches(worker._clock.monotonic()) == []

    def test_after_a_batch_the_rest_of_the_range_is_still_pending(self, worker):
        part = owned(worker, 0)
        part.end = 30
        process(worker, part, 0, 10)
        assert part.start == 10 and part.pending_since is not None
        process(worker, part, 10, 30)
        assert part.start == 30 and part.pending_since is None

    def test_records_that_arrive_during_a_job_wait_from_when_they_were_seen(
        self, worker, monkeypatch
    ):
        # Not from the job's end: under a steady stream they are due as the job ends,
        # so a partition waits for one job, not for a job and then the delay.
        part = owned(worker, 0)
        part.end, part.pending_since = 10, worker._clock.monotonic() - worker.max_batch_delay_s
        with worker._lock:
            ((_, cut),) = worker._next_batches(worker._clock.monotonic())
        assert (cut.start_offset, cut.end_offset) == (0, 10)
        worker._jobs = worker.parallel  # the job runs: the worker's steps only poll
        ends = {TP: 10}
        monkeypatch.setattr(worker, "_ends", lambda partitions: dict(ends))
        worker._step()
        assert part.pending_since is None  # nothing past the batch in flight
        worker._clock.advance(0.2)
        seen_at = worker._clock.monotonic()
        ends[TP] = 25
        worker._step()
        assert part.pending_since == seen_at
        worker._clock.advance(worker.max_batch_delay_s)  # the job takes a while
        process(worker, part, 0, 10)
        assert part.start == 10 and part.pending_since == seen_at
        with worker._lock:
            ((_, cut),) = worker._next_batches(worker._clock.monotonic())
        assert (cut.start_offset, cut.end_offset) == (10, 25)

    def test_kafka_options_come_from_the_group_and_must_be_kafka_settings(self, tmp_path):
        from coordination.errors import ConfigurationError

        w = PipelineWorker(
            "g",
            topic="t",
            output=tmp_path,
            bootstrap_servers=["a:9092", "b:9092"],
            kafka_options={"kafka.fetch.max.bytes": "1048576"},
            transport=ScriptedTransport(),
        )
        assert w.kafka_options == {
            "kafka.fetch.max.bytes": "1048576",
            "kafka.bootstrap.servers": "a:9092,b:9092",
            "kafka.group.id": "g.spark-reader",
        }
        w.group.close()
        with pytest.raises(ConfigurationError, match=r"fetch\.max\.bytes"):
            PipelineWorker(
                "g",
                topic="t",
                output=tmp_path,
                bootstrap_servers="a:9092",
                kafka_options={"fetch.max.bytes": "1"},
            )
        # Spark's source logs in as the group does (tests/unit/pipeline/test_kafka_options.py).
        with pytest.raises(ConfigurationError, match="sasl_plain_username"):
            PipelineWorker(
                "g",
                topic="t",
                output=tmp_path,
                bootstrap_servers="a:9092",
                security_protocol="SASL_SSL",
            )

    def test_a_pipeline_excludes_the_default_pipelines_settings(self, tmp_path):
        from coordination.errors import ConfigurationError
        from recipes.pipeline import ParquetSink, windowed_sum

        with pytest.raises(ConfigurationError, match="set them in it"):
            PipelineWorker(
                "g",
                windowed_sum("t", ParquetSink(tmp_path)),
                topic="t",
                bootstrap_servers="a:9092",
            )
        with pytest.raises(ConfigurationError, match="needs a pipeline"):
            PipelineWorker("g", bootstrap_servers="a:9092")


class TestFailures:
    def test_a_failing_batch_backs_off_before_its_partition_runs_again(
        self, worker, events, monkeypatch
    ):
        def broken(batches: list[OffsetRange]) -> list[StagedBatch]:
            raise RuntimeError("Spark failed")

        monkeypatch.setattr(worker, "_stage", broken)
        part = owned(worker, 0)
        part.end, part.pending_since = 10, 0.0
        for failures, delay in ((1, 0.5), (2, 1.0), (3, 2.0)):
            process(worker, part, 0, 10)
            assert [e.kind for e in events][-1] == "failed"
            assert part.failures == failures and not part.ready
            worker._prepare(part)  # ready again, at the committed offset
            part.end, part.pending_since = 10, 0.0  # as the next step finds it
            now = worker._clock.monotonic()
            with worker._lock:
                assert worker._next_batches(now) == []  # backing off
            worker._clock.advance(delay)
            with worker._lock:
                cut = worker._next_batches(worker._clock.monotonic())
            assert cut != []
            worker._done(TP)
        monkeypatch.setattr(
            worker, "_stage", lambda batches: [fake_stage(worker.output, b) for b in batches]
        )
        process(worker, part, 0, 10)
        assert part.failures == 0 and part.start == 10

    def test_a_sink_failing_to_recover_a_committed_batch_leaves_it_for_the_next_try(
        self, worker, events, monkeypatch
    ):
        # Found by the simulator (devtools/simulation/pipeline.py): the failure escaped
        # run(), whose thread ended while the consumer kept the partition.
        staged = stage_at(worker.output, 0, 10)
        group(worker).committed[("t", 0)] = OffsetAndMetadata(10, staged.commit_metadata)
        failures = [OSError("the sink is down")]

        def flaky(*_: Any) -> None:
            if failures:
                raise failures.pop()

        monkeypatch.setattr(worker.output, "_before_publish", flaky)
        part = _Partition(tp=TP, assigned_at=0.0)
        worker._parts[TP] = part
        worker._prepare(part)
        assert not part.ready and part.failures == 1
        assert [e.kind for e in events] == ["failed"]
        assert worker.output.staged("t", 0) == [staged.name]
        worker._prepare(part)
        assert part.ready and part.start == 10
        assert worker.output.published() == [staged.range]

    def test_a_lost_spark_jvm_stops_the_worker(self, worker, events, monkeypatch):
        import threading

        from py4j.protocol import Py4JNetworkError

        from coordination.errors import CoordinationError

        def gone(batches: list[OffsetRange]) -> list[StagedBatch]:
            raise Py4JNetworkError("Answer from Java side is empty")

        monkeypatch.setattr(worker, "_stage", gone)
        part = owned(worker, 0)
        process(worker, part, 0, 10)
        assert group(worker).commits == 0
        worker._started = True
        with pytest.raises(CoordinationError, match="stops"):
            worker.run(threading.Event())


class TestOnTheGroup:
    """The worker on a plain Consumer: ownership through its listener, the rebalance's
    start through the member's hooks, a real rebalance on a scripted transport."""

    def test_a_rebalance_is_timed_from_the_members_hook_to_the_assignment(self, tmp_path):
        from coordination.hooks import CoordinationHooks, RebalanceFinished
        from coordination.testing import messages as m
        from recipes.partitioning import (
            Consumer,
            ConsumerPartitioning,
            CooperativeStickyAssignor,
            InMemoryTopicMetadata,
        )
        from recipes.partitioning.protocol import Assignment, encode_assignment
        from recipes.pipeline import PartitionsAssigned, PartitionsReleased, RebalanceBegan

        class Finished(CoordinationHooks):
            def __init__(self) -> None:
                self.seen: list[RebalanceFinished] = []

            def on_rebalance_finished(self, event: RebalanceFinished) -> None:
                self.seen.append(event)

        transport, clock, mine = ScriptedTransport(), ManualClock(), Finished()
        events: list[WorkerEvent] = []
        w = PipelineWorker(
            "g",
            topic="t",
            output=tmp_path / "out",
            bootstrap_servers="localhost:1",
            on_event=events.append,
            topic_metadata=InMemoryTopicMetadata({"t": 2}),
            transport=transport,
            clock=clock,
            hooks=[mine],
        )
        # Plain recipe objects: the worker subclasses neither layer.
        assert type(w.consumer) is Consumer and type(w.group) is ConsumerPartitioning
        w.consumer._fetcher = MagicMock()
        engine = w.group._engine
        engine.resolve_protocol_type()
        protocol = CooperativeStickyAssignor().name
        transport.prepare(
            m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
        )

        def join_answer(request: m.Request) -> m.JoinGroupResponse:
            clock.advance(0.25)  # the broker waits for the group's other members
            return m.JoinGroupResponse(
                error_code=0,
                generation_id=1,
                protocol_type="consumer",
                protocol_name=protocol,
                leader="m-1",
                member_id="m-2",
            )

        transport.prepare(join_answer, response_type=m.JoinGroupResponse)
        assignment = Assignment((TopicPartition("t", 0), TopicPartition("t", 1)))
        transport.prepare(
            m.SyncGroupResponse(
                error_code=0,
                protocol_type="consumer",
                protocol_name=protocol,
                assignment=encode_assignment(assignment),
            )
        )
        transport.prepare(
            m.OffsetFetchResponse(error_code=0, partitions=(("t", 0, 5, "", 0), ("t", 1, 7, "", 0)))
        )
        both = {TopicPartition("t", 0), TopicPartition("t", 1)}
        try:
            assert engine.join_group_if_needed(deadline=None)
            assert w.owned() == both
            assert w.consumer.paused() == both  # Spark reads the records
        finally:
            transport.prepare(m.LeaveGroupResponse(error_code=0))
            w.group.close()

        began, assigned, revoked = events
        assert isinstance(began, RebalanceBegan)
        assert (began.kind, began.generation) == ("rebalance", -1)
        assert "first time" in began.reason  # the member's reason, from its hook
        assert isinstance(assigned, PartitionsAssigned)
        assert (assigned.partitions, assigned.owned, assigned.generation) == ((0, 1), (0, 1), 1)
        assert assigned.rebalance_ms == 250
        assert [e.generation for e in mine.seen] == [1]  # the user's hooks are kept
        # Closing hands everything over; no rebalance is under way then.
        assert isinstance(revoked, PartitionsReleased)
        assert (revoked.kind, revoked.partitions, revoked.rebalance_ms) == ("revoked", (0, 1), None)

    def test_an_on_event_that_raises_is_logged_and_the_worker_carries_on(self, worker, caplog):
        def broken(event: WorkerEvent) -> None:
            raise RuntimeError("observer bug")

        worker._on_event = broken
        part = owned(worker, 0)
        with caplog.at_level("ERROR", logger="recipes.pipeline"):
            process(worker, part, 0, 10)
        # The batch went through: committed, published, the partition moved on.
        assert group(worker).committed[("t", 0)].offset == 10
        assert [r.end_offset for r in worker.output.published()] == [10]
        assert part.start == 10 and worker._in_flight == set() and worker._jobs == 0
        (record,) = caplog.records
        assert "on_event raised" in record.getMessage()
        assert "BatchPublished" in record.getMessage()  # with the event
        assert record.exc_info is not None and "observer bug" in str(record.exc_info[1])

    def test_a_hooks_setting_that_is_no_list_is_refused_by_the_group(self, tmp_path):
        from coordination.errors import ConfigurationError
        from coordination.hooks import CoordinationHooks

        with pytest.raises(ConfigurationError, match="hooks"):
            PipelineWorker(
                "g",
                topic="t",
                output=tmp_path,
                bootstrap_servers="localhost:1",
                hooks=CoordinationHooks(),
            )

    def test_the_refused_fetch_settings_are_the_consumers(self):
        from recipes.partitioning._consumer import FETCH_SETTINGS
        from recipes.pipeline._worker import _FETCH_SETTINGS

        assert _FETCH_SETTINGS == FETCH_SETTINGS

    @pytest.mark.parametrize("setting", ["assignors", "partition_assignment_strategy"])
    def test_assignors_are_refused_by_name(self, tmp_path, setting):
        from coordination.errors import ConfigurationError

        given: dict[str, Any] = {setting: []}
        with pytest.raises(ConfigurationError, match=f"{setting} cannot be set.*broker assigns"):
            PipelineWorker("g", topic="t", output=tmp_path, bootstrap_servers="h:1", **given)

    @pytest.mark.parametrize(
        ("setting", "refused"),
        [
            ({"group_remote_assignor": "uniform"}, "group_remote_assignor is for"),
            ({"group_protocol": "eager"}, "group_protocol must be"),
        ],
    )
    def test_the_consumer_refuses_a_group_protocol_setting_that_does_not_fit(
        self, tmp_path, setting, refused
    ):
        from coordination.errors import ConfigurationError

        with pytest.raises(ConfigurationError, match=refused):
            PipelineWorker("g", topic="t", output=tmp_path, bootstrap_servers="h:1", **setting)

    def test_on_the_consumer_protocol_the_group_is_the_broker_assigned_member(self, tmp_path):
        from recipes.partitioning import BrokerAssignedPartitioning

        w = PipelineWorker(
            "g",
            topic="t",
            output=tmp_path,
            bootstrap_servers="h:1",
            group_protocol="consumer",
            group_remote_assignor="range",
            transport=ScriptedTransport(),
            clock=ManualClock(),
        )
        assert isinstance(w.group, BrokerAssignedPartitioning)
        assert w.group is w.consumer.broker_assigned
        assert w.group.member.member_epoch == 0  # not joined yet
        assert w._lease.holds() is False  # no deletion before the member is in the group
