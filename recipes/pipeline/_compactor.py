"""The compactor of a :class:`~recipes.pipeline.DeltaSink`: partial results merged into the totals.

Workers append each committed batch's partial aggregates to the sink's *partials* table
in blind, idempotent appends, which never conflict with each other. One compactor,
elected among the workers (:class:`~recipes.election.LeaderElection`), merges what the
workers appended since its last cycle into the *totals* table in one Delta transaction
per cycle. That transaction records, as Delta's idempotent-write id of the compactor
(``txnAppId`` = :data:`COMPACTOR_APP_ID`, ``txnVersion`` = the last partials version
merged), how far the totals go; see ``docs/pipeline.md`` (Sinks) for why a crashed,
paused or deposed compactor can neither lose nor double a batch.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from coordination._config import CONNECTION_SETTINGS
from coordination.errors import (
    ConfigurationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
)

from ._sinks import (
    _TXN_APP_ID,
    _TXN_VERSION,
    BATCH_ID_COLUMNS,
    DeltaSink,
    _conflict,
    _session_lock,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from coordination.clock import Clock
    from recipes.election import Leadership

__all__ = [
    "COMPACTOR_APP_ID",
    "CompactionCycle",
    "CompactorRole",
    "DeltaCompactor",
    "current_totals",
    "plan_cycle",
]

log = logging.getLogger("recipes.pipeline")

COMPACTOR_APP_ID: Final = "coordination-pipeline:compactor"
"""The Delta idempotent-write id of the compactor's transactions on the totals table.

Its version is the last version of the partials table that the totals include.
"""

_USER_METADATA: Final = "spark.databricks.delta.commitInfo.userMetadata"
# The columns Delta's change data feed adds to each row it reads.
_CHANGE_COLUMNS: Final = ("_change_type", "_commit_version", "_commit_timestamp")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionCycle:
    """One cycle of the compactor: the partials versions it merges and the totals it starts from.

    Attributes:
        totals_version: The totals table's version the cycle reads (its base).
        first_version: First partials version merged (the one after the base's mark).
        last_version: Last partials version merged; the cycle's ``txnVersion``.
    """

    totals_version: int
    first_version: int
    last_version: int


def plan_cycle(
    totals_version: int, merged_through: int | None, partials_version: int | None
) -> CompactionCycle | None:
    """The next cycle, from one snapshot of the totals and the partials' latest version.

    Args:
        totals_version: The version of the totals snapshot read.
        merged_through: The compactor's ``txnVersion`` recorded in that same snapshot
            (the last partials version the totals include), None before the first cycle.
        partials_version: The partials table's latest version, None if it does not exist.

    Returns:
        The cycle to run, or None if the totals already include every partials version.
    """
    if partials_version is None:
        return None
    first = 0 if merged_through is None else merged_through + 1
    if first > partials_version:
        return None
    return CompactionCycle(
        totals_version=totals_version, first_version=first, last_version=partials_version
    )


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

    Concurrency:
        One thread runs :meth:`run` (or :meth:`compact`). It sets its Delta idempotency
        settings in the session under the sink's session lock; the worker's appends in
        the same session name their own in the writer's options, which Delta takes first.
    """

    def __init__(
        self, spark: SparkSession, sink: DeltaSink, *, identity: str = "", token: int = 0
    ) -> None:
        """Compact ``sink`` through ``spark``.

        Args:
            spark: The session to run the cycles in.
            sink: A sink with ``key_columns`` and compaction on.
            identity: Who runs the cycles, recorded in each commit.
            token: The fencing token of its leadership, recorded in each commit.

        Raises:
            ConfigurationError: The sink does not compact (no ``key_columns`` or no interval).
        """
        if not sink.compacts:
            raise ConfigurationError(
                f"DeltaCompactor: {sink!r} has no compaction (key_columns and an interval)"
            )
        self.spark = spark
        self.sink = sink
        self.identity = identity
        self.token = token
        self.cycles = 0

    def run(self, stop: threading.Event, still_leader: Callable[[], bool]) -> None:
        """Run a cycle every ``compaction_interval_ms`` until ``stop`` is set or leadership ends.

        A cycle that fails (a conflict with another compactor, Spark) is logged and tried
        again at the next interval: nothing of it is visible.

        Args:
            stop: Set it to return after the cycle under way (with one last cycle).
            still_leader: Asked before each commit; False ends the loop.
        """
        assert self.sink.compaction_interval_ms is not None
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
        self._ensure_totals()
        totals_version, merged_through = _state(self.spark, self.sink.table)
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
        return cycle

    def _ensure_totals(self) -> None:
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(self.spark, self.sink.table):
            return
        # The totals have the batches' columns; two compactors creating it conflict and
        # the loser's next cycle finds it.
        schema = _partials(self.spark, self.sink).drop(*BATCH_ID_COLUMNS).limit(0)
        schema.write.format("delta").mode("append").save(self.sink.table)

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
        with _session_lock(self.spark):
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


def current_totals(spark: SparkSession, sink: DeltaSink) -> DataFrame:
    """The totals including the partials not compacted yet, from one consistent pair of versions.

    What a cycle run now would leave in the totals table, without writing it: exact and
    complete up to the partials' latest version, where the totals table alone lags by up
    to one cycle.
    """
    totals_exist = _version(spark, sink.table) is not None
    partials_version = _version(spark, sink.partials) if sink.compacts else None
    if partials_version is None:
        return spark.read.format("delta").load(sink.table)
    if totals_exist:
        totals_version, merged_through = _state(spark, sink.table)
        base = spark.read.format("delta").option("versionAsOf", totals_version).load(sink.table)
    else:
        totals_version, merged_through = -1, None
        base = _partials(spark, sink).drop(*BATCH_ID_COLUMNS).limit(0)
    cycle = plan_cycle(totals_version, merged_through, partials_version)
    if cycle is None:
        return base
    return _combined(base.unionByName(_added(spark, sink, cycle)), sink)


def _added(spark: SparkSession, sink: DeltaSink, cycle: CompactionCycle) -> DataFrame:
    """The partial rows appended in the cycle's partials versions (the change data feed)."""
    from pyspark.sql import functions as F

    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", cycle.first_version)
        .option("endingVersion", cycle.last_version)
        .load(sink.partials)
        .where(F.col("_change_type") == "insert")
        .drop(*_CHANGE_COLUMNS, *BATCH_ID_COLUMNS)
    )


def _combined(rows: DataFrame, sink: DeltaSink) -> DataFrame:
    """One row per key: the sum of each added column, the first value of the others."""
    from pyspark.sql import functions as F

    keys = list(sink.key_columns or ())
    others = [c for c in rows.columns if c not in keys and c not in sink.add_columns]
    # sum() keeps a DECIMAL(38, s) column's type, where "a + b" would give up a digit of
    # scale to fit 39 digits of precision.
    return rows.groupBy(*keys).agg(
        *(F.sum(c).alias(c) for c in sink.add_columns), *(F.first(c).alias(c) for c in others)
    )


def _same_keys(left: DataFrame, right: DataFrame, keys: list[str]) -> Column:
    return functools.reduce(operator.and_, (left[k].eqNullSafe(right[k]) for k in keys))


def _partials(spark: SparkSession, sink: DeltaSink) -> DataFrame:
    return spark.read.format("delta").load(sink.partials)


def _version(spark: SparkSession, table: str) -> int | None:
    """The table's latest version, None if it is not a Delta table yet."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, table):
        return None
    return _state(spark, table)[0]


def _state(spark: SparkSession, table: str) -> tuple[int, int | None]:
    """The table's latest version and, in that same snapshot, the compactor's ``txnVersion``.

    Read from one snapshot: the version a cycle reads its base totals at must be the one
    whose recorded mark it starts after.
    """
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog  # type: ignore[union-attr]
    pair = delta_log.forTableWithSnapshot(spark._jsparkSession, table)
    snapshot = pair._2()
    recorded = snapshot.transactions().get(COMPACTOR_APP_ID)
    merged_through = int(recorded.get()) if recorded.isDefined() else None
    return int(snapshot.version()), merged_through


# The group settings a worker's compactor election shares with the worker's own membership.
_ELECTION_SETTINGS: Final = CONNECTION_SETTINGS | {
    "client_id",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "rebalance_timeout_ms",
    "retry_backoff_ms",
    "retry_backoff_max_ms",
    "request_timeout_ms",
}


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
        spark: SparkSession,
        sink: DeltaSink,
        *,
        group_id: str,
        identity: str,
        settings: Mapping[str, Any],
        clock: Clock | None = None,
    ) -> None:
        """Prepare the election; nothing connects until :meth:`start`.

        Args:
            spark: The worker's session.
            sink: The compacting sink.
            group_id: The workers' group; the election's is ``<group_id>.compactor``.
            identity: This worker's identity in the election (unique in the group).
            settings: The worker's settings; the connection and timing ones are used.
            clock: The worker's clock.
        """
        from recipes.election import LeaderElection

        self.spark = spark
        self.sink = sink
        self._stop = threading.Event()
        self.election = LeaderElection(
            f"{group_id}.compactor",
            identity=identity,
            clock=clock,
            **{k: v for k, v in settings.items() if k in _ELECTION_SETTINGS},
        )
        self._thread = threading.Thread(
            target=self._stand, name=f"compactor-{identity}", daemon=True
        )

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
                log.exception("compactor election of %s failed; standing again", self.sink.table)
                self._stop.wait(1.0)

    def _lead(self, leadership: Leadership) -> None:
        compactor = DeltaCompactor(
            self.spark, self.sink, identity=leadership.identity, token=leadership.token
        )
        log.info(
            "%s compacts %s (token %d)", leadership.identity, self.sink.table, leadership.token
        )
        compactor.run(self._stop, leadership.is_valid)
