"""The pipeline under simulation: :class:`recipes.pipeline.PipelineWorker` as shipped, with
Spark replaced by a stand-in stage, publishing into a real :class:`PipelineOutput`.

The workers cut batches from the committed offsets and the partitions' ends, stage them,
commit them (the staging name as metadata, fenced by the generation), ask the broker
whether a failed commit landed, publish, recover a predecessor's committed batch and
delete orphans under their membership lease: the coordination side runs unchanged. Only
two things stand in for the world: the stage (``PipelineWorker(stage=...)``) computes the
windowed sum of ``windowed_sum`` (count and sum per key and tumbling window) in pure
Python from records that are a function of their offset, and writes it with a manifest
into a staging directory of a temporary output directory shared by the workers; and the
consumer's fetcher answers the partitions' ends from a topic that grows with simulated
time. The stage takes simulated time, now and then fails (Spark failing a job) and takes
the slow-callback fault; the sink now and then fails a publish.

Checked after every step (the output's directories are listed only when their time stamp
or link count moved, the coordinator's log read only when it grew):

- each partition's published ranges start at 0 and follow one another: an offset
  published twice (an overlap) or skipped (a gap) is a violation, and so is a published
  directory that disappears;
- nothing is published past the committed offset (read from what the coordinator wrote),
  and what is committed but not yet published is exactly the batch the commit's metadata
  names, still staged with its manifest (else its results are lost);
- committed offsets never go back (until the group and its offsets are deleted);
- every published batch holds the windowed sums of exactly its range's records.

After the faults: every partition is owned by exactly one worker whose lease holds, its
commits have reached what the topic held when the faults ended, everything committed is
published, and the sums of all published results equal the totals of every record below
the committed offsets.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordination.errors import CoordinationError, FencedInstanceError
from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    GroupLog,
    HistorySettings,
    Host,
    OffsetRecord,
    OffsetTombstone,
    Process,
    Scheduler,
    SimTransport,
    Trace,
    Violation,
)
from recipes.pipeline import (
    OffsetRange,
    ParquetSink,
    PipelineOutput,
    PipelineOutputError,
    StagedBatch,
    WorkerEvent,
)
from recipes.pipeline._segments import Segments

from ._supervisor import start_supervised
from .consumers import TOPIC, TOPIC_ID, SimFetcher, SimTopic

PARTITIONS = 4
WINDOW_MS = 1_000
TS_STEP_MS = 100  # a record's timestamp: its offset times this
MAX_BATCH_RECORDS = 200
RESULTS_FILE = "part-00000.json"
STAGE_FAILURE = 0.03  # a share of the stand-in's jobs fail, as Spark's sometimes do
PUBLISH_FAILURE = 0.02  # a share of the publishes fail in the sink
COPY_FAILURE = 0.05  # a share of the compaction copies fail, as Spark jobs do

Totals = dict[tuple[str, int], tuple[int, int]]  # (key, window start) -> (count, sum)
_Stamp = tuple[int, int] | None  # a directory's (mtime_ns, st_nlink), None before a look

# The audit events of every call that can add or remove a directory entry (``open`` may
# create a file; ``os.rename`` is os.replace's too; shutil.rmtree's removals raise theirs).
_ENTRY_CHANGES = frozenset(
    ("open", "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.link", "os.symlink")
)
_entry_changes = [0]  # how many such calls this process made


def _count_entry_changes(
    event: str,
    args: tuple[Any, ...],
    watched: frozenset[str] = _ENTRY_CHANGES,
    count: list[int] = _entry_changes,
) -> None:
    # (What it uses is bound here: the hook outlives the module's globals at exit.)
    if event in watched:
        count[0] += 1


_counting_entry_changes = [False]


def _count_entry_changes_from_now() -> None:
    """Count entry changes from now on, for the life of the process (an audit hook cannot
    be removed): a set lookup per audited call, so that the checker stats the output's
    directories only after a step that may have changed them, not after every step.
    Installed by the first PipelineDriver, not at import: every other recipe's process
    imports this module too, and asyncio audits two events at every turn of a loop."""
    if not _counting_entry_changes[0]:
        sys.addaudithook(_count_entry_changes)
        _counting_entry_changes[0] = True


# One record in REJECTED_EVERY is not a valid event: those whose offset plus
# REJECTED_SHIFT times their partition is a multiple of it (see event, rejected_offsets).
REJECTED_EVERY = 13
REJECTED_SHIFT = 31


def event(partition: int, offset: int) -> tuple[str, int, int] | None:
    """The event at ``offset`` of ``partition``: (key, ts_ms, value), None for a record
    that is not a valid event (rejected, as ``windowed_sum`` rejects one)."""
    if (partition * REJECTED_SHIFT + offset) % REJECTED_EVERY == 0:
        return None
    key = f"sensor-{(offset * 7 + partition) % 5}"
    return key, offset * TS_STEP_MS, (offset * 37 + partition * 11) % 19 - 9


# A range's sums are computed by the stage that writes them, again by the checker that
# reads them back, and again by every retry of the range: once is enough. A window holds
# the records of WINDOW_OFFSETS offsets in a row (a record's timestamp is a function of its
# offset), so a range's sums are those of its whole windows, each computed once, and of
# the records of the windows it cuts at its ends.
WINDOW_OFFSETS = WINDOW_MS // TS_STEP_MS


@functools.lru_cache(maxsize=65536)
def _window_sums(partition: int, window: int) -> Mapping[tuple[str, int], tuple[int, int]]:
    """What ``windowed_sum`` computes of the records of one whole window of ``partition``
    (the offsets ``[window * WINDOW_OFFSETS, (window + 1) * WINDOW_OFFSETS)``)."""
    start = window * WINDOW_OFFSETS
    return _sums_of(partition, start, start + WINDOW_OFFSETS)


def _sums_of(partition: int, start: int, end: int) -> Totals:
    sums: Totals = {}
    for offset in range(start, end):
        found = event(partition, offset)
        if found is None:
            continue
        key, ts_ms, value = found
        window = (key, ts_ms - ts_ms % WINDOW_MS)
        count, total = sums.get(window, (0, 0))
        sums[window] = (count + 1, total + value)
    return sums


@functools.lru_cache(maxsize=4096)
def windowed_sums(
    partition: int, start: int, end: int
) -> Mapping[tuple[str, int], tuple[int, int]]:
    """What ``windowed_sum`` computes of the records ``[start, end)`` of ``partition``
    (shared between its callers: never modified)."""
    first = -(-start // WINDOW_OFFSETS)  # the first whole window
    last = end // WINDOW_OFFSETS  # the window after the last whole one
    if first >= last:
        return _sums_of(partition, start, end)
    sums = _sums_of(partition, start, first * WINDOW_OFFSETS)
    for window in range(first, last):
        add(sums, _window_sums(partition, window))
    add(sums, _sums_of(partition, last * WINDOW_OFFSETS, end))
    return sums


def rejected_offsets(partition: int, start: int, end: int) -> list[int]:
    """The offsets of ``[start, end)`` whose records are not valid events (see :func:`event`)."""
    first = start + (-(partition * REJECTED_SHIFT + start)) % REJECTED_EVERY
    return list(range(first, end, REJECTED_EVERY))


def add(into: Totals, more: Mapping[tuple[str, int], tuple[int, int]]) -> None:
    for window, (count, total) in more.items():
        before = into.get(window, (0, 0))
        into[window] = (before[0] + count, before[1] + total)


def read_sums(path: Path) -> Totals:
    return read_sums_file(path / RESULTS_FILE)


def read_sums_file(path: Path) -> Totals:
    """The sums of one results file (a segment's holds several batches' rows: added up)."""
    sums: Totals = {}
    for key, start, count, total in json.loads(path.read_text(encoding="utf-8")):
        before = sums.get((key, start), (0, 0))
        sums[key, start] = (before[0] + count, before[1] + total)
    return sums


@dataclass(frozen=True, kw_only=True, repr=False)
class SimSink(ParquetSink):
    """A :class:`recipes.pipeline.ParquetSink` whose publish fails now and then before
    anything moved, and whose output's segments (when it compacts) take their time from
    the simulated clock."""

    clock: Any = field(default=None, compare=False, repr=False)
    trace: Any = field(default=None, compare=False, repr=False)
    who: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_rng", self.clock.random())

    def __repr__(self) -> str:  # without the root, a temporary directory: traces replay
        return f"SimSink(compaction_interval_ms={self.compaction_interval_ms}, who={self.who!r})"

    def output(self, spark: Any) -> PipelineOutput:
        return PipelineOutput(
            self.root, before_publish=self._before_publish, segments=self._segments
        )

    def _segments(self, root: Path, published: Path) -> Segments:
        return Segments(root, published, now=self.clock.monotonic, names=self.clock.random())

    def read(self, spark: Any) -> Any:
        raise NotImplementedError("the simulation's checker reads the output itself")

    def _before_publish(self, path: Path, offsets: OffsetRange, files: Sequence[str]) -> None:
        if self._rng.random() < PUBLISH_FAILURE:  # type: ignore[attr-defined]
            self.trace(f"{self.who}: the sink fails to publish {offsets.name}")
            raise OSError(f"stand-in sink: publishing {offsets.name} failed")


def _copy_rows(
    clock: Scheduler,
    rng: random.Random,
    trace: Trace,
    who: str,
    files: Sequence[str],
    target: Path,
) -> int:
    """The compactor's copy, standing in for Spark's: the rows of ``files`` (results files)
    into one results file in ``target``, taking simulated time; now and then it fails, as
    a Spark job does."""
    clock.sleep(rng.uniform(0.05, 0.5), clock.event())
    if rng.random() < COPY_FAILURE:
        trace(f"{who}: the stand-in compaction copy fails")
        raise RuntimeError("stand-in Spark job failed (compaction copy)")
    rows = [row for f in files for row in json.loads(Path(f).read_text(encoding="utf-8"))]
    target.mkdir()
    (target / RESULTS_FILE).write_text(json.dumps(rows), encoding="utf-8")
    return len(rows)


class PipelineFetcher(SimFetcher):
    """The consumer's fetcher, for what the worker asks it: each partition's end (a
    ListOffsets round trip; nothing answers a member cut off from the brokers)."""

    def end_offsets(self, partitions: Sequence[Any], timeout_ms: int) -> dict[Any, int]:
        clock = self._clock
        clock.sleep(self._rng.uniform(0.002, 0.02), clock.event())
        if self._transport.isolated_until > clock.monotonic():
            clock.sleep(timeout_ms / 1000, clock.event())
            raise TimeoutError("ListOffsets: no broker answered")
        now = clock.monotonic()
        return {tp: self._topics[tp.topic].end(now) for tp in partitions}


class _Worker:
    """A worker process: its PipelineWorker, and the events that stop its run() and tell
    that it returned."""

    def __init__(self, process: Process, worker: Any) -> None:
        self.process = process
        self.worker = worker
        self.group = worker.group
        self.stop = worker.group.clock.event()
        self.stopped = worker.group.clock.event()


class PipelineDriver(DriverBase):
    name = "pipeline"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        _count_entry_changes_from_now()
        self.margin_s = settings.heartbeat_interval_ms / 1000
        shm = Path("/dev/shm")
        self.root = Path(
            tempfile.mkdtemp(prefix="pipeline-sim-", dir=shm if os.access(shm, os.W_OK) else None)
        )
        weakref.finalize(self, shutil.rmtree, self.root, True)
        self.published_dir = self.root / "published"
        self.staging_dir = self.root / "staging"
        # published/, staging/, then (compacting) compacted/: see _output_changed.
        self._watched: tuple[str, ...] = (str(self.published_dir), str(self.staging_dir))
        self.workers: dict[str, _Worker] = {}  # by process name
        self.topic: SimTopic | None = None
        self.metadata: Any = None
        self.log: GroupLog | None = None
        self.clock: Scheduler | None = None
        self._read_entries = 0
        # What the checker has seen: the committed offsets and metadata (from the
        # coordinator's log), the published directories, and how far each partition's
        # published ranges reach from 0.
        self.committed: dict[int, tuple[int, str]] = {}
        self.published: set[str] = set()
        self.published_end: dict[int, int] = {}
        self.quiet_since: float | None = None
        self.emptied_at = float("-inf")  # when group_deleted last emptied the output
        self._stamps: tuple[_Stamp, ...] = ()  # see _output_changed
        self._seen_entry_changes: int | None = None

    # ------------------------------------------------------------------ members

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.pipeline import Pipeline, PipelineWorker

        process = host.process
        assert process is not None
        me = process.name
        if self.topic is None:
            self.topic = SimTopic(clock.monotonic())
            self.metadata = self._topic_metadata(transport)
            self.log = transport.cluster.log
            self.clock = clock
        rng = clock.random()

        def stage(
            output: PipelineOutput, ranges: Sequence[OffsetRange], owner: str
        ) -> list[StagedBatch]:
            # The job's time, then its writes at once: a job killed midway leaves nothing
            # in staging (Spark's job directory, removed by the next start, is not modelled).
            clock.sleep(rng.uniform(0.02, 0.3), clock.event())
            self.take_slow(host, clock)
            if rng.random() < STAGE_FAILURE:
                trace(f"{me}: the stand-in job fails")
                raise RuntimeError("stand-in Spark job failed")
            return [self._stage_one(output, offsets, rng.getrandbits(128)) for offsets in ranges]

        pipeline = Pipeline(
            topics=[TOPIC],
            sink=self._sink(clock, trace, me),
            name="sim-windowed-sum",
            window_ms=WINDOW_MS,
        )
        worker = PipelineWorker(
            GROUP,
            pipeline,
            name=me,
            stage=stage,
            compaction_copy=functools.partial(_copy_rows, clock, rng, trace, me),
            compactor_transport=transport.sibling(),
            max_batch_records=MAX_BATCH_RECORDS,
            max_batch_delay_ms=500,
            poll_interval_ms=100,
            parallel_batches=rng.choice([1, 2]),
            on_event=lambda e: trace(f"{me}: {_describe(e)}"),
            topic_metadata=self.metadata,
            fetcher=PipelineFetcher({TOPIC: self.topic}, clock, transport),
            transport=transport,
            clock=clock,
            **self._group_settings(host),
        )
        member = self.workers[me] = _Worker(process, worker)
        started = clock.monotonic()
        worker.start()
        try:
            worker.run(member.stop)
        except FencedInstanceError as e:
            # A newer process of this host's static identity joined while this one hung
            # (its replacement): the broker fenced this member for good, and the worker
            # stops with the member's error rather than wait for partitions that never come.
            trace(f"{me}: stops: {type(e).__name__}")
            worker.close(10.0)
        except CoordinationError as e:
            # A worker that read a commit before the operator emptied the output (see
            # group_deleted) finds its batch gone and stops, as it must; any other reason
            # to stop is a violation (the thread dies of it).
            cause = e if isinstance(e, PipelineOutputError) else e.__cause__
            if not isinstance(cause, PipelineOutputError) or self.emptied_at < started:
                raise
            trace(f"{me}: stops: {cause}")
            # The batch thread that met it died of it too: expected, not a failure.
            clock.failures[:] = [
                (thread, error)
                for thread, error in clock.failures
                if not (thread.startswith(f"{me}-") and isinstance(error, PipelineOutputError))
            ]
            worker.close(10.0)
        finally:
            member.stopped.set()

    def _topic_metadata(self, transport: SimTransport) -> Any:
        from recipes.partitioning import InMemoryTopicMetadata

        return InMemoryTopicMetadata({TOPIC: PARTITIONS})

    def _sink(self, clock: Scheduler, trace: Trace, me: str) -> SimSink:
        return SimSink(self.root, clock=clock, trace=trace, who=me)

    def _group_settings(self, host: Host) -> dict[str, Any]:
        """The worker's group settings: the classic protocol, static members on half the
        hosts."""
        return {"group_instance_id": host.instance_id, **self.settings.member_settings()}

    @staticmethod
    def _stage_one(output: PipelineOutput, offsets: OffsetRange, attempt: int) -> StagedBatch:
        """Stage one range as ``stage_many`` does: results and a manifest in a staging
        directory named by the range and a random attempt."""
        path = output.staging_dir / f"{offsets.name}-{attempt:032x}"
        path.mkdir()
        sums = windowed_sums(offsets.partition, offsets.start_offset, offsets.end_offset)
        rows = sorted([key, start, count, total] for (key, start), (count, total) in sums.items())
        (path / RESULTS_FILE).write_text(json.dumps(rows), encoding="utf-8")
        rejected = rejected_offsets(offsets.partition, offsets.start_offset, offsets.end_offset)
        return output.finish_stage(
            path,
            offsets,
            records=offsets.end_offset - offsets.start_offset,
            rejected_offsets=rejected,
            window_ms=WINDOW_MS,
            files={RESULTS_FILE: len(rows)},
        )

    def close(self, host: Host) -> None:
        # The member of the process this runs in (its thread is "<process>-close"), which
        # may no longer be host.process: a restart whose process was paused before it ran
        # finds the host replaced meanwhile (a hung process's replacement), and must not
        # stop the replacement.
        assert self.clock is not None
        caller = getattr(self.clock.current_thread(), "name", "")
        member = self.workers.get(caller.split("-", 1)[0])
        if member is None:
            return
        member.stop.set()
        member.stopped.wait(30.0)  # run() returns after the batches under way
        member.worker.close(10.0)

    def group_deleted(self) -> None:
        # The group and its offsets are gone: the workers start over from offset 0. An
        # operator who does that starts the output over too (its results would count
        # every record again), so the output is emptied and the checker starts over.
        assert self.clock is not None
        self.emptied_at = self.clock.monotonic()
        for directory in (self.published_dir, self.staging_dir):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        self.committed.clear()
        self.published.clear()
        self.published_end.clear()

    # ------------------------------------------------------------------ invariants

    def _read_commits(self) -> bool:
        """What the coordinator wrote since the last look; whether anything was new."""
        log = self.log
        if log is None or len(log.entries) == self._read_entries:
            return False
        for entry in log.entries[self._read_entries :]:
            if isinstance(entry, OffsetTombstone) and entry.group_id == GROUP:
                self.committed.pop(entry.partition, None)
            elif isinstance(entry, OffsetRecord) and entry.group_id == GROUP:
                before = self.committed.get(entry.partition, (0, ""))[0]
                if entry.offset < before:
                    raise Violation(
                        f"committed offset of {TOPIC}-{entry.partition} went back "
                        f"{before} -> {entry.offset}"
                    )
                self.committed[entry.partition] = (entry.offset, entry.metadata)
        self._read_entries = len(log.entries)
        return True

    def _output_changed(self) -> tuple[bool, bool]:
        """Whether an entry of published/, and of staging/, came or went since the last
        look.

        A directory's modification time and link count (two per subdirectory more) are
        read after every step that opened, made, removed or renamed a file (most steps do
        not), its entries only when they changed: listing a directory that grows by a batch
        at a time at every step would cost most of a history.
        """
        if _entry_changes[0] == self._seen_entry_changes:
            return False, False
        self._seen_entry_changes = _entry_changes[0]
        stamps = tuple(_stamp(directory) for directory in self._watched)
        moved = [
            i >= len(self._stamps) or stamp != self._stamps[i] for i, stamp in enumerate(stamps)
        ]
        self._stamps = stamps
        # A segment committed or retired changes what is published, as a rename does.
        return moved[0] or any(moved[2:]), moved[1]

    def _read_published(self) -> None:
        """The published directories that appeared since the last look: each must follow
        its partition's last one and hold its range's sums."""
        try:
            names = set(os.listdir(self.published_dir))
        except FileNotFoundError:
            names = set()
        gone = self.published - names
        if gone:
            raise Violation(f"published results deleted: {sorted(gone)}")
        for name in sorted(names - self.published, key=_by_range):
            self._newly_published(name, in_own_directory=True)

    def _newly_published(self, name: str, *, in_own_directory: bool) -> None:
        """A batch seen published for the first time: it follows its partition's last one,
        and its directory (if it has one still) holds its range's sums."""
        offsets = OffsetRange.parse(name)
        if offsets is None:
            raise Violation(f"{name!r} in published/ is not a batch's directory")
        p = offsets.partition
        end = self.published_end.get(p, 0)
        if offsets.start_offset < end:
            raise Violation(
                f"offsets [{offsets.start_offset}, {min(end, offsets.end_offset)}) of "
                f"{TOPIC}-{p} published twice ({name})"
            )
        if offsets.start_offset > end:
            raise Violation(
                f"offsets [{end}, {offsets.start_offset}) of {TOPIC}-{p} skipped: {name} "
                "published after a gap"
            )
        if in_own_directory:
            expected = windowed_sums(p, offsets.start_offset, offsets.end_offset)
            if read_sums(self.published_dir / name) != expected:
                raise Violation(f"{name} does not hold the windowed sums of its range")
        self.published_end[p] = offsets.end_offset
        self.published.add(name)

    def check(self, now: float) -> None:
        commits = self._read_commits()
        published_changed, staging_changed = self._output_changed()
        if published_changed:
            self._read_published()
        elif not (staging_changed or commits):
            return
        uncommitted = sorted(self.published_end.keys() - self.committed.keys())
        if uncommitted:
            raise Violation(f"{TOPIC}-{uncommitted[0]} published without a commit")
        for p, (offset, metadata) in self.committed.items():
            end = self.published_end.get(p, 0)
            if end > offset:
                raise Violation(
                    f"{TOPIC}-{p} published up to {end}, past its committed offset {offset}"
                )
            if end == offset:
                continue
            named = OffsetRange.parse(metadata) if metadata else None
            if named is None or (named.start_offset, named.end_offset) != (end, offset):
                raise Violation(
                    f"{TOPIC}-{p}: [{end}, {offset}) committed, but the commit names "
                    f"{metadata!r}, not that range: its results are lost"
                )
            if not (self.staging_dir / metadata / "_manifest.json").is_file():
                raise Violation(
                    f"{TOPIC}-{p}: the committed batch {metadata} is neither published nor "
                    "staged: its results are lost"
                )

    def _holders(self) -> dict[int, list[str]]:
        holders: dict[int, list[str]] = {}
        for name, member in list(self.workers.items()):
            if member.process.dead:
                del self.workers[name]
                continue
            group = member.group
            owned = group.owned()
            if not owned or group.membership_lease() <= self.margin_s:
                continue
            for tp in owned:
                holders.setdefault(tp.partition, []).append(name)
        return holders

    def settled(self, live: list[Host]) -> str | None:
        assert self.clock is not None and self.topic is not None
        if self.quiet_since is None:
            self.quiet_since = self.clock.monotonic()
        holders = self._holders()
        wrong = [p for p in range(PARTITIONS) if len(holders.get(p, ())) != 1]
        if wrong:
            return f"partitions not owned by exactly one worker: {wrong}"
        written = self.topic.end(self.quiet_since)
        behind = {
            p: self.committed.get(p, (0, ""))[0]
            for p in range(PARTITIONS)
            if self.committed.get(p, (0, ""))[0] < written
        }
        if behind:
            return f"commits behind offset {written}, written before the faults ended: {behind}"
        self._read_published()  # whatever the directory's time stamp did not tell
        unpublished = {
            p: (self.published_end.get(p, 0), offset)
            for p, (offset, _) in self.committed.items()
            if self.published_end.get(p, 0) != offset
        }
        if unpublished:
            return f"committed but not yet published: {unpublished}"
        self._check_totals()
        return None

    def _published_totals(self) -> Totals:
        got: Totals = {}
        for name in self.published:
            add(got, read_sums(self.published_dir / name))
        return got

    def _check_totals(self) -> None:
        """The sums of everything published equal the totals of every record below the
        committed offsets."""
        got = self._published_totals()
        expected: Totals = {}
        for p, (offset, _) in self.committed.items():
            add(expected, windowed_sums(p, 0, offset))
        if got != expected:
            wrong = sorted(w for w in got.keys() | expected.keys() if got.get(w) != expected.get(w))
            raise Violation(
                f"published totals differ from the records' in {len(wrong)} windows, e.g. "
                f"{wrong[0]}: {got.get(wrong[0])} published, {expected.get(wrong[0])} expected"
            )


def _stamp(directory: str) -> _Stamp:
    """A directory's modification time and link count; (0, 0) when it does not exist."""
    try:
        found = os.stat(directory)
    except FileNotFoundError:
        return 0, 0
    return found.st_mtime_ns, found.st_nlink


def _by_range(name: str) -> tuple[int, int, str]:
    offsets = OffsetRange.parse(name)
    return (-1, -1, name) if offsets is None else (offsets.partition, offsets.start_offset, name)


def _describe(event: WorkerEvent) -> str:
    """A worker event for the trace, without its times (wall-clock ones: no seed decides them)."""
    shown = {
        f.name: getattr(event, f.name)
        for f in dataclasses.fields(event)
        if f.name not in ("kind", "worker", "t") and not f.name.endswith("_ms")
    }
    return f"{event.kind} {shown}"


class CompactedPipelineDriver(PipelineDriver):
    """The pipeline into a compacting Parquet sink (``ParquetSink(compaction_interval_ms=)``):
    the workers elect a compactor (``<group>.compactor``, this library's election on the
    same simulated cluster), which copies the published batches into segments (through a
    stand-in of Spark's copy that takes simulated time and now and then fails), merges the
    smallest segments to keep at most three, and deletes what segments replaced once the
    retention ran out, all by the simulated clock. Faults hit the compactor as they hit
    the worker it runs in (killed mid-copy, paused past its election's session, cut off).

    The same invariants as the pipeline's, read as a reader reads the output (one view of
    segments and published directories): a batch once published stays visible, from its
    directory or from a segment; the published ranges stay contiguous and disjoint; each
    segment, when it appears, holds exactly the sums of the batches it names; and the
    totals of every published file equal the records'.
    """

    name = "pipeline-compacted"
    COMPACTION_INTERVAL_MS = 3000
    MAX_SEGMENTS = 3
    RETENTION_MS = 5000

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.compacted_dir = self.root / "compacted"
        self._watched = (*self._watched, str(self.compacted_dir))
        self.segments_seen: set[str] = set()
        self.segments_committed = 0  # for the tests: the histories compacted
        self.retired = 0  # published directories deleted after their segment's retention
        self._reader: PipelineOutput | None = None

    def _sink(self, clock: Scheduler, trace: Trace, me: str) -> SimSink:
        return SimSink(
            self.root,
            clock=clock,
            trace=trace,
            who=me,
            compaction_interval_ms=self.COMPACTION_INTERVAL_MS,
            max_segments=self.MAX_SEGMENTS,
            retention_ms=self.RETENTION_MS,
        )

    def _view(self) -> Any:
        if self._reader is None:
            assert self.clock is not None
            clock = self.clock
            self._reader = PipelineOutput(
                self.root,
                segments=lambda root, published: Segments(root, published, now=clock.monotonic),
            )
        return self._reader.segments.view()

    def _read_published(self) -> None:
        """What a reader sees now: every batch seen before still there, the new ones in
        order, each new segment holding exactly its batches' sums."""
        view = self._view()
        own = set(view.published)
        held = {b: seg for seg in view.segments for b in seg.batches}
        names = own | held.keys()
        gone = self.published - names
        if gone:
            raise Violation(f"published results no longer visible: {sorted(gone)[:3]}")
        for segment in view.segments:
            if segment.name in self.segments_seen:
                continue
            self.segments_seen.add(segment.name)
            self.segments_committed += 1
            expected: Totals = {}
            for batch in segment.batches:
                offsets = OffsetRange.parse(batch)
                if offsets is None:
                    raise Violation(f"segment {segment.name} holds {batch!r}, not a batch")
                add(
                    expected,
                    windowed_sums(offsets.partition, offsets.start_offset, offsets.end_offset),
                )
            got: Totals = {}
            for f in segment.files:
                add(got, read_sums_file(segment.path / f))
            if got != expected:
                raise Violation(f"segment {segment.name} does not hold the sums of its batches")
        self.retired = max(self.retired, len(self.published - set(os.listdir(self.published_dir))))
        for name in sorted(names - self.published, key=_by_range):
            # One a segment holds already: its sums were checked with the segment's, above.
            self._newly_published(name, in_own_directory=name in own)

    def _published_totals(self) -> Totals:
        """The sums of every file a reader lists at one instant (segments' and the
        directories of the batches no segment holds)."""
        self._view()
        assert self._reader is not None
        got: Totals = {}
        for path in self._reader.published_files():
            add(got, read_sums_file(path))
        return got

    def group_deleted(self) -> None:
        super().group_deleted()
        for directory in (self.compacted_dir, self.root / "compacting"):
            shutil.rmtree(directory, ignore_errors=True)
        self.segments_seen.clear()


class BrokerAssignedPipelineDriver(PipelineDriver):
    """The pipeline on Kafka's consumer group protocol (KIP-848,
    ``PipelineWorker(group_protocol="consumer")``), against the simulator's model of the
    KIP-848 coordinator: the broker assigns (uniform), each worker moves to its assignment
    on its own, commits are fenced by the member epoch. The same invariants as the classic
    pipeline's. Static on half the hosts, as the classic pipeline's: a static worker
    restarted while the broker still holds its instance (killed without leaving, its
    session not over) is refused with UNRELEASED_INSTANCE_ID and stops, as Kafka's
    consumers do; its supervisor (here: the driver) starts it again a session later. Every
    other worker assumes a session three times the broker's, so that its lease (which
    fences the deletion of orphans) must count with the broker's session, read before it
    joins.
    """

    name = "pipeline-848"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.refused_instances = 0  # static workers refused, and started again

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        me = host.process.name if host.process is not None else ""
        start = super().start

        def stopped() -> None:
            self.workers[me].worker.close(10.0)
            self.refused_instances += 1

        start_supervised(
            lambda t: start(host, t, clock, trace),
            stopped,
            me=me,
            transport=transport,
            clock=clock,
            trace=trace,
            session_s=self.settings.session_timeout_ms / 1000,
        )

    def _topic_metadata(self, transport: SimTransport) -> Any:
        from recipes.partitioning import InMemoryTopicMetadata

        class WithIds(InMemoryTopicMetadata):
            def topic_ids(self) -> dict[Any, str]:
                return {TOPIC_ID: TOPIC}

        transport.cluster.log.topics[TOPIC] = (TOPIC_ID, PARTITIONS)
        return WithIds({TOPIC: PARTITIONS})

    def _group_settings(self, host: Host) -> dict[str, Any]:
        settings = self.settings.member_settings()
        return {
            **settings,
            "group_instance_id": host.instance_id,  # static on half the hosts
            "group_protocol": "consumer",
            "group_remote_assignor": "uniform",
            **(
                {"session_timeout_ms": 3 * settings["session_timeout_ms"]} if host.index % 2 else {}
            ),
        }
