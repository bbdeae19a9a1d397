"""The compactors: a :class:`~recipes.pipeline.DeltaSink`'s partial results merged into its
totals, and a :class:`~recipes.pipeline.ParquetSink`'s published batches merged into segments.

Workers append each committed batch's partial aggregates to the sink's *partials* table
in blind, idempotent appends, which never conflict with each other. One compactor,
elected among the workers (:class:`~recipes.election.LeaderElection`), merges what the
workers appended since its last cycle into the *totals* table in one Delta transaction
per cycle. That transaction records, as Delta's idempotent-write id of the compactor
(``txnAppId`` = :data:`COMPACTOR_APP_ID`, ``txnVersion`` = the last partials version
merged), how far the totals go; see ``docs/pipeline.md`` (Sinks) for why a crashed,
paused or deposed compactor can neither lose nor double a batch.

A compacting Parquet sink's compactor copies published batches into segments; the file
protocol that keeps readers exact is ``_segments.py``'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from coordination.clock import SYSTEM_CLOCK
from coordination.errors import (
    ConfigurationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
)

from ._delta_log import latest_snapshot, recorded_versions
from ._delta_totals import (
    BATCH_ID_COLUMNS,
    COMPACTOR_APP_ID,
    CompactionCycle,
    _added,
    _combined,
    _partials,
    _same_keys,
    _version,
    plan_cycle,
)
from ._output import PipelineOutputError, _plain_file_name
from ._segments import Segment
from ._sinks import (
    _TXN_APP_ID,
    _TXN_VERSION,
    DeltaSink,
    ParquetSink,
    _conflict,
    _DeltaJvm,
    _session_lock,
    create_delta_table_unless_exists,
    delta_commit_lock,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import Column, DataFrame, SparkSession

    from coordination import CoordinatorConfig
    from coordination.clock import Clock, Event
    from coordination.transport import Transport
    from recipes.election import Leadership

__all__ = ["CompactionCopy", "CompactorRole", "DeltaCompactor", "ParquetCompactor"]

CompactionCopy = Callable[[Sequence[str], "Path"], int]
"""``copy(files, target)``: writes the rows of ``files`` into the new directory ``target``
and returns how many it wrote (a stand-in of Spark's copy, see :class:`ParquetCompactor`)."""

log = logging.getLogger("recipes.pipeline")

_USER_METADATA: Final = "spark.databricks.delta.commitInfo.userMetadata"
_LISTING_PARALLELISM: Final = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
PRUNE_ATTEMPTS: Final = 5
"""How many times :meth:`DeltaCompactor.prune` makes its transaction when appends keep
landing while it does (each attempt reads the log only, a fraction of a second)."""


class _Every:
    """A chore due at most every ``interval_ms`` (0: every time asked; None: never), the
    first time one interval after it is made."""

    def __init__(self, interval_ms: int | None, clock: Clock) -> None:
        self._clock = clock
        self._interval_s = None if interval_ms is None else interval_ms / 1000
        self._next = None if self._interval_s is None else clock.monotonic() + self._interval_s

    def due(self) -> bool:
        return self._next is not None and self._clock.monotonic() >= self._next

    def done(self) -> None:
        """Done now: due again one interval later (a failed chore is not done, and stays
        due)."""
        if self._interval_s is not None:
            self._next = self._clock.monotonic() + self._interval_s


class DeltaCompactor:
    """Merges a :class:`~recipes.pipeline.DeltaSink`'s partials into its totals table.

    Example:
        compactor = DeltaCompactor(spark, sink, identity="w1", token=leadership.token)
        compactor.run(stop, still_leader=leadership.is_valid)

    A :class:`~recipes.pipeline.PipelineWorker` with such a sink runs one itself while it
    leads the election ``<group_id>.compactor``; run one by hand only for tests or tools.

    A cycle reads one snapshot of the totals (version ``v``, which records the last
    partials version ``m`` it includes), computes the new totals of every key that the
    partials versions ``(m, p]`` touch, as the snapshot's totals plus those partials
    (the change data feed of the partials table, pinned to those versions), and writes
    them with one MERGE that *sets* each key's totals (not adds to them), with
    ``txnVersion = p``. So a cycle's outcome is a function of its own consistent inputs:

    * Delta skips it if ``p`` is not above the version recorded when its transaction
      starts (a crash after the commit and a retry, or a newer cycle by another
      compactor), and fails it on commit if another cycle committed meanwhile.
    * If another cycle committed between the read of ``v`` and the start of this one,
      its keys are a subset of this cycle's (its partials are within ``(m, p]``), and
      this cycle sets them from ``v`` plus ``(m, p]``: the right totals again.

    Exactness therefore rests on Delta alone, not on there being one compactor; the
    election only keeps the others from wasting work and conflicting (a leader checks
    ``still_leader`` before each commit, and records its identity and fencing token in
    the commit's ``userMetadata``).

    At most every ``prune_interval_ms``, after a cycle, the partial rows the totals now
    include are deleted from the partials table (:meth:`prune`), so that its snapshot
    holds little more than what is not merged yet; every ``vacuum_interval_ms`` a cycle
    first runs Delta's VACUUM, which removes
    the files of rows deleted longer ago than the table's
    ``delta.deletedFileRetentionDuration`` (7 days by default). Cycles and readers never
    read rows of versions the totals include, so neither depends on what a prune deleted.

    Concurrency:
        One thread runs :meth:`run` (or :meth:`compact`). It sets its Delta idempotency
        settings in the session under the sink's session lock; the worker's appends in
        the same session name their own in the writer's options, which Delta takes first.
    """

    def __init__(
        self,
        spark: SparkSession,
        sink: DeltaSink,
        *,
        identity: str = "",
        token: int = 0,
        prune_interval_ms: int | None = 60_000,
        vacuum_interval_ms: int | None = 3_600_000,
        clock: Clock | None = None,
    ) -> None:
        """Compact ``sink`` through ``spark``.

        Args:
            spark: The session to run the cycles in.
            sink: A sink with ``key_columns`` and compaction on.
            identity: Who runs the cycles, recorded in each commit.
            token: The fencing token of its leadership, recorded in each commit.
            prune_interval_ms: How often, at most, a cycle prunes the partials it merged
                and those of the cycles since the last prune (the first this long after
                the compactor is made; 0: after every cycle); None never prunes. A prune
                costs about as much driver CPU as a small cycle (two Delta state
                reconstructions), whatever it removes.
            vacuum_interval_ms: How often, at most, a cycle runs Delta's VACUUM on the
                partials table before its prune (the first this long after the compactor
                is made; 0: at every cycle); None never runs it.
            clock: What the intervals are measured on (default the system's).

        Raises:
            ConfigurationError: The sink does not compact (no ``key_columns`` or no
                interval), or ``prune_interval_ms`` or ``vacuum_interval_ms`` is negative.
        """
        if not sink.compacts:
            raise ConfigurationError(
                f"DeltaCompactor: {sink!r} has no compaction (key_columns and an interval)"
            )
        for name, interval in (
            ("prune_interval_ms", prune_interval_ms),
            ("vacuum_interval_ms", vacuum_interval_ms),
        ):
            if interval is not None and interval < 0:
                raise ConfigurationError(
                    f"DeltaCompactor: {name} must be >= 0 (or None: never), got {interval}"
                )
        self.spark = spark
        self.sink = sink
        self.identity = identity
        self.token = token
        self.cycles = 0
        self.prune_interval_ms = prune_interval_ms
        self.vacuum_interval_ms = vacuum_interval_ms
        clock = SYSTEM_CLOCK if clock is None else clock
        self._prunes = _Every(prune_interval_ms, clock)
        self._vacuums = _Every(vacuum_interval_ms, clock)
        # The partials version of this compactor's last prune when it came right after the
        # totals' mark: it adds no rows, so the next cycle starts after it.
        self._prune_version: int | None = None
        # The totals' recorded ids as last read: the next read takes only the commits
        # since from the log. A cycle with nothing to merge costs 0.02 s instead of 0.6 s;
        # one that merges still reconstructs the totals' state once, in its MERGE.
        self._totals_versions = recorded_versions(sink.table)

    def run(self, stop: Event, still_leader: Callable[[], bool]) -> None:
        """Run a cycle every ``compaction_interval_ms`` until ``stop`` is set or leadership ends.

        A cycle that fails (a conflict with another compactor, Spark) is logged and tried
        again at the next interval: nothing of it is visible.

        Args:
            stop: Set it to return after the cycle under way (with one last cycle).
            still_leader: Asked before each commit; False ends the loop.
        """
        assert self.sink.compaction_interval_ms is not None
        # A pause after each cycle, not a period from start to start: the compactor shares
        # its worker's JVM and cores, and back-to-back cycles (2-3 s each, beside the
        # batches) slowed both. Measured (the benchmark, --sink delta, 3 runs each): the
        # last offset reached the totals 8.4-9.5 s after it was published with cycles
        # start to start, 6.0-7.0 s with the pause. A shorter pause is no better: with 1 s
        # instead of the benchmark's 2 s, 7.1-7.9 s against 4.7-6.3 s on the same day.
        interval = self.sink.compaction_interval_ms / 1000
        while still_leader():
            stopping = stop.wait(interval)
            try:
                self.compact(still_leader)
            except Exception as e:
                if not _conflict(e):
                    log.exception("compaction of %s failed; trying again", self.sink.table)
                else:
                    log.info("compaction of %s conflicted; trying again: %s", self.sink.table, e)
            if stopping:
                return

    def compact(self, still_leader: Callable[[], bool] = lambda: True) -> CompactionCycle | None:
        """Merge every partials version not yet in the totals, in one transaction.

        Args:
            still_leader: Asked right before the commit; False leaves the cycle undone.

        Returns:
            The cycle that was run, or None if there was nothing to merge or the
            leadership was lost. A cycle that Delta skipped (a newer one had landed)
            is returned too; the totals are exact either way.

        Raises:
            Exception: A Delta conflict or a Spark failure; nothing of the cycle is visible.
        """
        partials_version = _version(self.spark, self.sink.partials)
        if partials_version is None:
            return None
        totals_version, merged_through = self._totals_state()
        if merged_through is not None and merged_through + 1 == self._prune_version:
            merged_through = self._prune_version  # only our prune since the mark
        cycle = plan_cycle(totals_version, merged_through, partials_version)
        if cycle is None:
            return None
        if totals_version < 0:
            self.create_totals()
            totals_version, merged_through = self._totals_state()
            cycle = plan_cycle(totals_version, merged_through, partials_version)
            if cycle is None:
                return None
        new_totals = self._new_totals(cycle)
        if not still_leader():
            log.info("compactor %s is no longer the leader; cycle not run", self.identity)
            return None
        self._merge(new_totals, cycle)
        self.cycles += 1
        log.info(
            "compacted partials versions %d-%d into %s",
            cycle.first_version,
            cycle.last_version,
            self.sink.table,
        )
        # Housekeeping: a failure is logged and tried again at the next cycle (which finds
        # it still due), and one of the two failing does not hold back the other.
        if self._vacuums.due():
            try:
                self._vacuum()
                self._vacuums.done()
            except Exception as e:
                log.warning("VACUUM of %s failed: %s", self.sink.partials, e)
        if self._prunes.due():
            try:
                self.prune()
                self._prunes.done()
            except Exception as e:  # the next cycle's prune deletes the same rows and more
                log.warning("pruning the merged partials of %s failed: %s", self.sink.partials, e)
        return cycle

    def _totals_state(self) -> tuple[int, int | None]:
        """The totals' latest version (-1: no table yet) and the compactor's mark in it,
        read from one snapshot (the mark from the commits since the last read)."""
        snapshot = latest_snapshot(self.spark, self.sink.table)
        version = int(snapshot.version())
        if version < 0:
            return version, None
        return version, self._totals_versions.at(self.spark, snapshot).get(COMPACTOR_APP_ID)

    def _vacuum(self) -> None:
        """Delta's VACUUM on the partials table (at most every ``vacuum_interval_ms``).

        Run right after a cycle's commit, before its prune: the cycle merged through the
        partials' latest version when it was planned, so past every earlier prune, and the
        change data feed of the versions after the mark (which cycles and
        :func:`current_totals` read) needs no file of those prunes. A reader still on an
        older totals snapshot is covered by the retention (files go only once deleted
        longer ago than the table's ``delta.deletedFileRetentionDuration``).
        """
        from delta.tables import DeltaTable

        # VACUUM lists the table's files in as many Spark tasks as this says, 10,000 by
        # default: 30-40 s on two cores for a small table, 3-5 s with the session's cores.
        conf = self.spark.conf
        before = conf.get(_LISTING_PARALLELISM, None)
        conf.set(_LISTING_PARALLELISM, str(self.spark.sparkContext.defaultParallelism))
        try:
            with delta_commit_lock(self.sink.partials):  # VACUUM may log commits
                DeltaTable.forPath(self.spark, self.sink.partials).vacuum()
        finally:
            if before is None:
                conf.unset(_LISTING_PARALLELISM)
            else:
                conf.set(_LISTING_PARALLELISM, before)
        log.info("vacuumed %s", self.sink.partials)

    def prune(self) -> int | None:
        """Remove from the partials table the rows that the totals include (what
        :meth:`compact` does after a cycle, at most every ``prune_interval_ms``).

        Those are the rows of the partials versions up to the totals' mark ``m``: the data
        files of the partials' snapshot at ``m`` (each append writes files of its own).
        They are removed in one Delta transaction that reads no data. The workers' blind
        appends never conflict with it; it conflicts with an append that lands while it
        is made (Delta's Serializable isolation, on a table without partition columns),
        so it is made again at once, up to :data:`PRUNE_ATTEMPTS` times, and else by the
        next cycle. Cycles and readers read only the change data feed of versions after
        the mark, so none reads what a prune removed.

        Returns:
            The mark pruned through, or None if the totals include nothing yet.

        Raises:
            Exception: Delta's conflict, after every attempt conflicted.
        """
        _, merged_through = self._totals_state()
        if merged_through is None:
            return None
        jvm = _DeltaJvm(self.spark)
        audit = {"compactor": self.identity, "token": self.token, "pruned_through": merged_through}
        merged = jvm.files_at(self.sink.partials, merged_through)  # the same for each attempt
        for attempt in range(1, PRUNE_ATTEMPTS + 1):
            txn, removals = jvm.removals(self.sink.partials, merged)
            if removals.isEmpty():
                return merged_through
            with _session_lock(self.spark):
                # The commit's userMetadata comes from the session (the operation carries
                # none): under the lock, so that no other commit of the session takes it.
                self.spark.conf.set(_USER_METADATA, json.dumps(audit, sort_keys=True))
                try:
                    with delta_commit_lock(self.sink.partials):
                        version = int(txn.commit(jvm.scala_list(removals), jvm.manual_update()))
                    break
                except Exception as e:
                    if attempt == PRUNE_ATTEMPTS or not _conflict(e):
                        raise
                    log.debug("prune of %s conflicted (attempt %d): %s", self.sink, attempt, e)
                finally:
                    self.spark.conf.unset(_USER_METADATA)
        # If nothing was appended since the mark, the next cycle starts after this version.
        self._prune_version = version if version == merged_through + 1 else None
        log.info(
            "pruned %s through version %d (%d files)",
            self.sink.partials,
            merged_through,
            removals.size(),
        )
        return merged_through

    def create_totals(self) -> None:
        """Create the totals table, with the partials' columns but the batch id, unless it
        exists (workers create it at start, so that no cycle waits on it;
        :func:`create_delta_table_unless_exists`)."""

        def create() -> None:
            schema = _partials(self.spark, self.sink).drop(*BATCH_ID_COLUMNS).limit(0)
            schema.write.format("delta").mode("append").save(self.sink.table)

        create_delta_table_unless_exists(self.spark, self.sink.table, create)

    def _new_totals(self, cycle: CompactionCycle) -> DataFrame:
        """Each touched key's totals as of ``cycle.last_version``, from the cycle's inputs only."""
        sink = self.sink
        keys = list(sink.key_columns or ())
        added = _added(self.spark, sink, cycle)
        base = (
            self.spark.read.format("delta")
            .option("versionAsOf", cycle.totals_version)
            .load(sink.table)
        )
        touched = added.select(*keys).distinct()
        touched_base = base.join(touched, _same_keys(base, touched, keys), "left_semi")
        return _combined(touched_base.unionByName(added), sink)

    def _merge(self, new_totals: DataFrame, cycle: CompactionCycle) -> None:
        from delta.tables import DeltaTable

        sink = self.sink
        assert sink.key_columns is not None
        keys = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in sink.key_columns)
        updated: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in sink.add_columns}
        audit = {
            "compactor": self.identity,
            "token": self.token,
            "partials_versions": [cycle.first_version, cycle.last_version],
            "totals_version": cycle.totals_version,
        }
        conf = self.spark.conf
        with _session_lock(self.spark), delta_commit_lock(sink.table):
            conf.set(_TXN_APP_ID, COMPACTOR_APP_ID)
            conf.set(_TXN_VERSION, str(cycle.last_version))
            conf.set(_USER_METADATA, json.dumps(audit, sort_keys=True))
            try:
                merge = (
                    DeltaTable.forPath(self.spark, sink.table)
                    .alias("t")
                    .merge(new_totals.alias("s"), keys)
                )
                if updated:
                    merge = merge.whenMatchedUpdate(set=updated)
                merge.whenNotMatchedInsertAll().execute()
            finally:
                conf.unset(_TXN_APP_ID)
                conf.unset(_TXN_VERSION)
                conf.unset(_USER_METADATA)


class ParquetCompactor:
    """Merges a :class:`~recipes.pipeline.ParquetSink`'s published batches into segments.

    Example:
        compactor = ParquetCompactor(spark, sink, identity="w1", token=leadership.token)
        compactor.run(stop, still_leader=leadership.is_valid)

    A :class:`~recipes.pipeline.PipelineWorker` with a compacting sink runs one itself
    while it leads the election ``<group_id>.compactor``; run one by hand only for tests
    or tools.

    A cycle deletes what segments committed ``retention_ms`` ago hold or replace, then
    copies every published batch that no segment holds, with the smallest live segments
    when there would be more than ``max_segments``, into one new segment, and commits it
    (``_segments.py``: one rename under a file lock, refused if another compactor
    committed any of its inputs meanwhile). The copy is a union of the rows, so readers
    read the same rows before and after. Exactness rests on the commit's check, not on
    there being one compactor; the election keeps the others from wasting work.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        sink: ParquetSink,
        *,
        identity: str = "",
        token: int = 0,
        copy: CompactionCopy | None = None,
    ) -> None:
        """Compact ``sink`` through ``spark``.

        Args:
            spark: The session to copy the batches in (None with ``copy``).
            sink: A sink with ``compaction_interval_ms`` set.
            identity: Who runs the cycles, recorded in each segment.
            token: The fencing token of its leadership, recorded in each segment.
            copy: Copies the rows instead of Spark, for a stand-in of Spark (the
                simulator's): ``copy(files, target)`` writes the rows of ``files`` into
                the new directory ``target`` and returns how many it wrote.

        Raises:
            ConfigurationError: The sink does not compact, or neither ``spark`` nor
                ``copy`` is given.
        """
        if not sink.compacts:
            raise ConfigurationError(f"ParquetCompactor: {sink!r} has no compaction_interval_ms")
        if spark is None and copy is None:
            raise ConfigurationError("ParquetCompactor: give a Spark session (or a copy)")
        self.spark = spark
        self.sink = sink
        self.identity = identity
        self.token = token
        self.cycles = 0
        self._copy_with = copy
        # The sink's own view of its output (the simulator's sink gives it its clock).
        self.output = sink.output(spark)  # type: ignore[arg-type]

    def run(self, stop: Event, still_leader: Callable[[], bool]) -> None:
        """Run a cycle every ``compaction_interval_ms`` until ``stop`` is set (after one
        last cycle) or the leadership ends; a failed cycle is logged and tried again."""
        assert self.sink.compaction_interval_ms is not None
        interval = self.sink.compaction_interval_ms / 1000
        while still_leader():
            stopping = stop.wait(interval)
            try:
                self.compact(still_leader)
            except Exception:
                log.exception("compaction of %s failed; trying again", self.sink.root)
            if stopping:
                return

    def compact(self, still_leader: Callable[[], bool] = lambda: True) -> Segment | None:
        """Run one cycle.

        Args:
            still_leader: Asked under the commit's lock; False leaves the cycle undone.

        Returns:
            The committed segment, or None if there was nothing to merge (fewer than two
            batches and segments) or the commit was refused.

        Raises:
            Exception: A Spark failure; nothing of the cycle is visible.
        """
        segments = self.output.segments
        segments.retire(self.sink.retention_ms / 1000)
        view = segments.view()
        fresh = self.output._own_dirs(view)
        # Merge the fewest (smallest) segments that keep the live ones at max_segments
        # after this commit: with new batches, one merged keeps the count where it is.
        excess = len(view.segments) + (1 if fresh else 0) - self.sink.max_segments
        count = 0 if excess <= 0 else excess if fresh else excess + 1
        merged = sorted(view.segments, key=lambda s: (s.rows, s.name))[:count]
        if len(fresh) + len(merged) < 2:
            return None
        batches: dict[str, Any] = {}
        files: list[str] = []
        rows: int | None = 0  # None: a batch's manifest predates row counts
        for name in fresh:
            path = self.output.published_dir / name
            manifest = self.output.read_manifest(path)
            batches[name] = manifest
            listed = manifest.get("files")
            if isinstance(listed, dict):
                files += [str(path / f) for f in sorted(listed) if _plain_file_name(f)]
            else:
                files.append(str(path))
            rows = None if rows is None or "rows" not in manifest else rows + manifest["rows"]
        for segment in merged:
            batches.update(segment.batches)
            files += [str(segment.path / f) for f in segment.files]
            rows = None if rows is None else rows + segment.rows
        with segments.new_segment() as target:
            if files:
                copied = self._copy(files, target, rows)
            else:
                target.mkdir()
                copied = 0
            committed = segments.commit(
                target,
                batches=batches,
                replaces=merged,
                rows=copied,
                audit={"compactor": self.identity, "token": self.token},
                still_leader=still_leader,
            )
        if committed is not None:
            self.cycles += 1
        return committed

    def _copy(self, files: list[str], target: Path, rows: int | None) -> int:
        """Copy the rows of ``files`` into ``target``; returns their number, checked: the
        files written hold as many rows as the inputs (a task's output written twice or
        lost would change what readers see, and the inputs are deleted later)."""
        if self._copy_with is not None:
            got = self._copy_with(files, target)
            expected = got if rows is None else rows
        else:
            assert self.spark is not None
            inputs = self.spark.read.parquet(*files)
            expected = inputs.count() if rows is None else rows
            pieces = max(1, math.ceil(expected / self.sink.rows_per_file))
            inputs.coalesce(pieces).write.parquet(str(target))
            names = sorted(os.listdir(target))
            written = [str(target / n) for n in names if n.endswith(".parquet")]
            got = self.spark.read.parquet(*written).count() if written else 0
        if got != expected:
            raise PipelineOutputError(
                f"{target}: the copy holds {got} rows, its batches {expected}; not committed"
            )
        return expected


# The timing settings a worker's compactor election takes from the worker's membership.
_ELECTION_TIMINGS: Final = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "rebalance_timeout_ms",
    "retry_backoff_ms",
    "retry_backoff_max_ms",
    "request_timeout_ms",
    "client_id",
)


class CompactorRole:
    """A worker's part in compacting: it stands in the election ``<group_id>.compactor``
    and runs a :class:`DeltaCompactor` while it leads.

    Every worker of a compacting :class:`~recipes.pipeline.DeltaSink` has one, so the
    compactor moves to another worker when its worker dies (after the election's session
    timeout); the totals lag meanwhile, and nothing else waits.

    Threads:
        One thread of its own stands in the election and runs the cycles in the worker's
        Spark session, beside the worker's batch jobs.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        sink: DeltaSink | ParquetSink,
        *,
        group_id: str,
        identity: str,
        config: CoordinatorConfig,
        clock: Clock | None = None,
        transport: Transport | None = None,
        copy: CompactionCopy | None = None,
    ) -> None:
        """Prepare the election; nothing connects until :meth:`start`.

        Args:
            spark: The worker's session (None for a ParquetSink with ``copy``).
            sink: The compacting sink.
            group_id: The workers' group; the election's is ``<group_id>.compactor``.
            identity: This worker's identity in the election (unique in the group).
            config: The worker's group settings; its connection and timings are used.
            clock: The worker's clock.
            transport: The worker's transport, if it was given one (the simulator's).
            copy: For a ParquetSink: copies the rows instead of Spark (see
                :class:`ParquetCompactor`).
        """
        from recipes.election import LeaderElection

        self.spark = spark
        self.sink = sink
        self._copy = copy
        # Its waits and its thread come from the worker's clock, as the worker's own do.
        clock = SYSTEM_CLOCK if clock is None else clock
        self._clock = clock
        self._stop = clock.event()
        self.election = LeaderElection(
            f"{group_id}.compactor",
            identity=identity,
            clock=clock,
            transport=transport,
            **config.connection,
            **{name: getattr(config, name) for name in _ELECTION_TIMINGS},
        )
        self._thread = clock.thread(self._stand, f"compactor-{identity}")

    def start(self) -> None:
        """Join the election in the background."""
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Run a last cycle if leading, then leave the election.

        Args:
            timeout: Seconds to wait for the last cycle and for the group to be left.
        """
        self._stop.set()
        self._thread.join(timeout)
        self.election.close(timeout)

    def _stand(self) -> None:
        # run() steps down when _lead returns (the leadership was lost, or the role stops),
        # and waits for the next election when called again.
        while not self._stop.is_set():
            try:
                self.election.run(self._lead, timeout=1.0)
            except CoordinationTimeoutError:
                continue
            except CoordinatorStateError:
                return  # the election was closed
            except Exception:
                log.exception("compactor election of %s failed; standing again", self.sink)
                self._stop.wait(1.0)

    def _lead(self, leadership: Leadership) -> None:
        compactor: DeltaCompactor | ParquetCompactor
        if isinstance(self.sink, DeltaSink):
            assert self.spark is not None
            compactor = DeltaCompactor(
                self.spark,
                self.sink,
                identity=leadership.identity,
                token=leadership.token,
                clock=self._clock,
            )
        else:
            compactor = ParquetCompactor(
                self.spark,
                self.sink,
                identity=leadership.identity,
                token=leadership.token,
                copy=self._copy,
            )
        log.info("%s compacts %s (token %d)", leadership.identity, self.sink, leadership.token)
        compactor.run(self._stop, leadership.is_valid)
