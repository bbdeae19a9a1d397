"""What a Delta table's log records of idempotent-write ids, read from its commits.

Delta answers "which version did this id record?" from a snapshot's state, which it
reconstructs with a Spark job for every new version a JVM asks about (0.4-1.0 s of a
core on ``local[1]``, measured). The tables of a :class:`~recipes.pipeline.DeltaSink`
get a version from every worker's append and every compactor cycle, so asking the state
each time made a worker's append take 0.8-0.9 s where 0.2-0.3 s is the write and the
commit. :class:`RecordedVersions` reads instead only the commits since its last read (a
few small JSON files), and the state only when it has not read the table before, when
the table at the path is another one (its Delta id changed), or when a commit since is
gone from the log (Delta's log cleanup).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ._jvm import jvm_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RecordedVersions", "latest_snapshot", "recorded_versions", "versions_in_state"]

log = logging.getLogger("recipes.pipeline")


def latest_snapshot(spark: SparkSession, table: str) -> Any:
    """The table's latest snapshot (a JVM object; version -1 if it is not a Delta table).

    A listing of the log: the snapshot's state is reconstructed only when asked for."""
    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog")
    return delta_log.forTableWithSnapshot(spark._jsparkSession, table)._2()


def versions_in_state(snapshot: Any) -> dict[str, int]:
    """Every idempotent-write id's version in ``snapshot``, from the snapshot's state:
    a reconstruction (a Spark job) the first time a snapshot is asked."""
    recorded = snapshot.transactions()
    keys = recorded.keys().iterator()
    versions: dict[str, int] = {}
    while keys.hasNext():
        app_id = str(keys.next())
        versions[app_id] = int(recorded.apply(app_id))
    return versions


def versions_committed(spark: SparkSession, table: str, since: int, latest: int) -> dict[str, int]:
    """The last version of each idempotent-write id committed in the versions
    ``(since, latest]`` of ``table``, read from those commits' files alone.

    Raises:
        Exception: A commit of those versions could not be read (Delta's log cleanup
            removed it): read the snapshot's state instead.
    """
    if latest <= since:
        return {}
    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog")
    log_of_table = delta_log.forTable(spark._jsparkSession, table)
    # failOnDataLoss: a version missing from the range raises rather than being skipped.
    none = jvm_class(spark, "scala.Option").empty()
    changes = log_of_table.getChanges(since + 1, latest, none, True)
    versions: dict[str, int] = {}
    read = since
    while changes.hasNext():
        commit = changes.next()
        read = int(commit._1())
        actions = commit._2()
        for i in range(actions.size()):
            action = actions.apply(i)
            if action.getClass().getSimpleName() == "SetTransaction":
                versions[str(action.appId())] = int(action.version())
    if read != latest:
        raise RuntimeError(f"{table}: read its commits up to version {read}, not {latest}")
    return versions


class RecordedVersions:
    """The idempotent-write versions recorded in one Delta table, as of a snapshot,
    kept from one read to the next (a worker's appends, a compactor's cycles).

    Thread-safe: a worker's jobs may publish at once.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()
        # (table id, version, versions recorded through it) as last read.
        self._read: tuple[str, int, dict[str, int]] | None = None

    def at(self, spark: SparkSession, snapshot: Any) -> dict[str, int]:
        """Every id's version recorded in ``snapshot`` (a snapshot of this table, of
        version >= 0), from the commits since the last read when the table is the same
        one, else from the snapshot's state."""
        version = int(snapshot.version())
        table_id = str(snapshot.metadata().id())
        with self._lock:
            known = self._read
            versions: dict[str, int] | None = None
            if known is not None and known[0] == table_id and known[1] <= version:
                try:
                    since = versions_committed(spark, self.table, known[1], version)
                    versions = {**known[2], **since}
                except Exception as e:
                    log.info("%s: reading its state instead of its commits: %s", self.table, e)
            if versions is None:
                versions = versions_in_state(snapshot)
            self._read = (table_id, version, versions)
            return dict(versions)


_READERS: dict[str, RecordedVersions] = {}
_READERS_GUARD = threading.Lock()


def recorded_versions(table: str) -> RecordedVersions:
    """This process's reader of ``table``'s recorded versions, shared by everything of the
    process that writes the table (a worker's appends, its compactor's cycles, the
    warm-up that reads the partials' state once before the worker joins its group)."""
    with _READERS_GUARD:
        reader = _READERS.get(table)
        if reader is None:
            reader = _READERS[table] = RecordedVersions(table)
        return reader
