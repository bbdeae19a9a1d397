"""The exactly-once output protocol of the pipeline: stage, commit, publish, recover.

Results of one batch (one offset range of one partition) are written to a
uniquely named *staging* directory, the offset commit names that directory in
its metadata, and only then is the directory renamed into ``published/``. A new
owner of the partition finishes what a crashed owner committed but did not
publish (:meth:`PipelineOutput.recover`) and deletes what it never committed
(:meth:`PipelineOutput.cleanup_orphans`); a restarted worker deletes the job
directories of runs that are provably dead (:meth:`PipelineOutput.remove_dead_jobs`).
See ``docs/pipeline.md`` for the failure walkthrough. This module does file
work only; it never starts Spark.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import threading
import urllib.parse
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from coordination.errors import ConfigurationError

from ._errors import PipelineOutputError
from ._files import fsync_dir as _fsync_dir
from ._files import fsync_tree as _fsync_tree
from ._files import listdir as _listdir
from ._segments import OutputView, Segments

__all__ = [
    "MANIFEST_NAME",
    "OffsetRange",
    "PipelineOutput",
    "PipelineOutputError",
    "PublishedRangeError",
    "StagedBatch",
    "StagedFilesError",
    "dir_topic",
]

log = logging.getLogger("recipes.pipeline")

MANIFEST_NAME: Final = "_manifest.json"
"""File written into a staging directory after Spark's write succeeded.

Its presence marks the stage complete; the leading underscore makes Spark's
Parquet reader skip it.
"""

# Format 2 lists the batch's Parquet files and their row counts; format 1 did not.
_MANIFEST_FORMAT: Final = 2
_STAGING: Final = "staging"
_PUBLISHED: Final = "published"
_JOBS: Final = "jobs"
# jobs/<owner>/<run>.lock: held (flock) by the live process whose run it is.
_LOCK_SUFFIX: Final = ".lock"

# The lock files (device, inode) of the job runs this process holds. A cleaner in this
# process never takes them for dead: flock would tell on a local filesystem, but on NFS Linux
# emulates flock with POSIX record locks, which never conflict within one process. The file
# is open while its run lives, so its inode cannot be reused meanwhile.
_LIVE_RUNS: set[tuple[int, int]] = set()
_LIVE_RUNS_LOCK = threading.Lock()

# Parsed from the right: Kafka topic names may contain "-" (and "." and "_"),
# partitions and offsets are digits, and the uuid is hex without dashes, so the
# split is unambiguous. Offsets are zero-padded to 20 digits (the width of
# 2**63 - 1) so that names sort in offset order.
# A directory name is limited to 255 bytes (NAME_MAX) but a topic name to 249
# characters; with partition, offsets and uuid a name needs 86 more. Longer
# topics are shortened to a prefix, "~" (not legal in topic names, so no real
# topic collides) and 16 hex digits of the topic's SHA-256.
_MAX_DIR_TOPIC: Final = 160

# "s3a://bucket/x", "hdfs:/x", "file:///x": a URI, which pathlib would silently
# turn into a relative local directory named "s3a:".
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")

_NAME = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d{1,10})-(?P<start>\d{20})-(?P<end>\d{20})"
    r"(?:-(?P<attempt>[0-9a-f]{32}))?$"
)


class StagedFilesError(PipelineOutputError):
    """The files Spark wrote for a batch do not hold the rows the write produced.

    A duplicate part file (a lost or speculative task on a cluster) or a
    missing one. Nothing was committed; the staging directory is removed and
    the batch can be staged again.
    """


class PublishedRangeError(PipelineOutputError):
    """Published offset ranges of a partition overlap or leave a gap.

    Attributes:
        problems: One line per problem found, ``"<topic>-<partition>: ..."``.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("published ranges are not contiguous: " + "; ".join(problems))


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class OffsetRange:
    """The offsets ``[start_offset, end_offset)`` of one Kafka partition.

    Example:
        OffsetRange(topic="events", partition=3, start_offset=100, end_offset=250).name
        # 'events-3-00000000000000000100-00000000000000000250'

    Attributes:
        topic: The Kafka topic.
        partition: The partition number.
        start_offset: First offset of the range (the committed offset the batch started at).
        end_offset: One past the last offset (the offset the batch commits).
    """

    topic: str
    partition: int
    start_offset: int
    end_offset: int

    def __post_init__(self) -> None:
        if not self.topic or "/" in self.topic or self.topic in (".", ".."):
            raise PipelineOutputError(f"topic {self.topic!r} cannot name a directory")
        if not 0 <= self.partition < 2**31:
            raise PipelineOutputError(f"partition must be in [0, 2**31), got {self.partition}")
        if not 0 <= self.start_offset <= self.end_offset < 2**63:
            raise PipelineOutputError(
                f"offsets must satisfy 0 <= start <= end, got [{self.start_offset}, "
                f"{self.end_offset})"
            )

    @property
    def name(self) -> str:
        """The published directory name, ``<topic>-<partition>-<start:020d>-<end:020d>``."""
        topic = dir_topic(self.topic)
        return f"{topic}-{self.partition}-{self.start_offset:020d}-{self.end_offset:020d}"

    @classmethod
    def parse(cls, name: str) -> OffsetRange | None:
        """Read the range from a published or staging directory name.

        A topic longer than 160 characters comes back shortened (see :func:`dir_topic`).

        Args:
            name: A directory name (not a path), with or without the staging suffix.

        Returns:
            The range, or None if ``name`` is not a name this protocol writes.
        """
        parsed = _parse(name)
        return None if parsed is None else parsed[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedBatch:
    """Results of one batch, written to staging and waiting for the offset commit.

    Commit ``range.end_offset`` with metadata :attr:`commit_metadata`, then call
    :meth:`PipelineOutput.publish`. If the commit fails or its outcome is
    unknown, leave the directory: the commit may have landed.

    Attributes:
        range: The offsets the batch covers.
        name: The staging directory name, ``<range.name>-<32 hex digits>``.
        path: The staging directory.
        records: Records in the batch.
        rejected: Records that were not a valid event (see ``docs/pipeline.md``).
        rejected_offsets: Offsets of rejected records, ascending, at most 100.
        window_ms: The tumbling window size the results were computed with (None:
            the results are not per time window).
    """

    range: OffsetRange
    name: str
    path: Path
    records: int
    rejected: int
    rejected_offsets: tuple[int, ...] = field(default=())
    window_ms: int | None

    @property
    def commit_metadata(self) -> str:
        """The OffsetCommit metadata to commit with: the staging directory name."""
        return self.name


class PipelineOutput:
    """One output directory of the pipeline and the operations of its protocol.

    Example:
        output = PipelineOutput("/data/agg")
        output.recover("events", 3, committed, metadata)        # on assignment
        output.cleanup_orphans("events", 3, committed, metadata, still_owner=lease_holds)
        staged = stage_batch(spark, output, batch)              # Spark writes to staging
        if commit(3, staged.range.end_offset, staged.commit_metadata):
            output.publish(staged)
        # else: leave it; recover or cleanup_orphans finishes or removes it

    Layout::

        <root>/staging/<topic>-<partition>-<start:020d>-<end:020d>-<uuid>/   being committed
        <root>/published/<topic>-<partition>-<start:020d>-<end:020d>/        final results

    Requirements:
        ``root`` is a local or mounted POSIX directory shared by the Spark
        driver and executors, on one filesystem, so that ``rename(2)`` of a
        directory is atomic. Object stores (S3, GCS) have no atomic rename and
        are not supported: a URI (``s3a://...``, ``hdfs://...``, ``file:/...``)
        is refused rather than taken as a local relative path.

    Concurrency:
        Every method is safe to call from several processes at once for the
        same batch (an old and a new owner publishing the same staging
        directory: one rename wins, the other finds the target and returns).
        The protocol relies on the broker to let only the current owner of a
        partition commit; the methods here never decide ownership. The one
        method that deletes what another process may still need,
        :meth:`cleanup_orphans`, is fenced: it asks the caller's ``still_owner``
        right before each deletion, and deletes only staging directories that
        no commit can name any more (see its docstring). Job directories are
        fenced by their run's lock: :meth:`remove_dead_jobs` deletes only runs
        whose process is gone (see :meth:`new_job_path`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        before_publish: Callable[[Path, OffsetRange, Sequence[str]], None] | None = None,
        before_publish_all: Callable[[Sequence[tuple[Path, OffsetRange, Sequence[str]]]], None]
        | None = None,
        segments: Callable[[Path, Path], Segments] = Segments,
    ) -> None:
        """Use ``root`` as the output directory, creating its two subdirectories.

        Args:
            root: The output directory: a local path or a POSIX mount, not a URI.
            before_publish: Called by :meth:`publish` with the staging directory,
                its range and its data files, before the directory is renamed
                into ``published/``; if it raises, nothing is published. It must
                be idempotent: a crash after it returned and before the rename
                makes the next :meth:`recover` call it again for the same batch
                (:class:`~recipes.pipeline.DeltaSink` applies the batch to a
                table here, once).
            before_publish_all: If given, called instead of ``before_publish``, once
                for all the batches one :meth:`publish_all` publishes (a list of the
                same triples), with the same contract for each of them.
            segments: Makes the output's :class:`Segments` from its root and
                ``published/`` directory (the simulator's gives them its clock).

        Raises:
            ConfigurationError: ``root`` is a URI (an object store or any other
                non-local filesystem), where publishing could not be atomic.
        """
        text = os.fspath(root)
        if _URI.match(text):
            raise ConfigurationError(
                f"pipeline output {text!r} is a URI: the output (PipelineWorker's output, "
                "--output) must be a local directory or a POSIX mount shared by the Spark "
                "driver and executors, because batches are published by an atomic rename(2) "
                "of a directory, which object stores and remote filesystem URIs do not "
                "offer; mount the storage and give its local path"
            )
        self.root = Path(root)
        self._before_publish = before_publish
        self._before_publish_all = before_publish_all
        self.staging_dir = self.root / _STAGING
        self.published_dir = self.root / _PUBLISHED
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        self.published_dir.mkdir(parents=True, exist_ok=True)
        # Published batches a compactor copied into segments (ParquetCompactor).
        self.segments = segments(self.root, self.published_dir)
        # This object's job runs by owner name (see new_job_path); batch threads share it.
        self._runs: dict[str, _JobRun] = {}
        self._runs_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PipelineOutput({str(self.root)!r})"

    # -- staging ---------------------------------------------------------------

    def new_staging_path(self, offsets: OffsetRange) -> Path:
        """A fresh staging directory path for one attempt at ``offsets`` (not created).

        The random suffix keeps two attempts at the same range (a retry, or an
        old and a new owner) from writing into each other's directory.

        Args:
            offsets: The batch's offset range.

        Returns:
            ``<root>/staging/<offsets.name>-<uuid4 hex>``.
        """
        return self.staging_dir / f"{offsets.name}-{uuid.uuid4().hex}"

    def new_job_path(self, owner: str) -> Path:
        """A fresh directory path (not created) for one Spark job that stages several ranges.

        The job writes every range's results under it, then each range's
        directory is renamed into ``staging/`` (same filesystem). A crash in
        between leaves the job directory; :meth:`remove_dead_jobs` of any later
        process (a restarted worker) deletes it once the crashed process is gone.

        The path lies in this object's *run* of ``owner``: a directory
        ``jobs/<owner>/<run id>/`` claimed by a lock file beside it that this
        process holds (``flock``) from the first call until :meth:`close`, until
        this object is garbage collected, or until the process ends, however it
        ends. So two processes (or two objects) staging under the same owner
        name never share a run, and no cleaner deletes a live run.

        Args:
            owner: The process staging (a worker's name); any string but ``""``,
                ``.`` and ``..``.

        Returns:
            ``<root>/jobs/<owner, quoted>/<run id>/<uuid4 hex>``.

        Raises:
            PipelineOutputError: ``owner`` cannot name a directory, or the output's
                filesystem refuses file locks.
        """
        with self._runs_lock:
            run = self._runs.get(owner)
            if run is None:
                run = self._runs[owner] = _JobRun(self._jobs_of(owner))
        return run.path / uuid.uuid4().hex

    def remove_dead_jobs(self) -> int:
        """Delete the job directories of every run whose process is gone; how many runs.

        Call before staging anything (:class:`~recipes.pipeline.PipelineWorker`
        calls it when it starts). A job directory holds nothing committed
        (ranges are committed only from ``staging/``), so deleting a dead run's
        loses nothing. A run is dead when its lock file can be locked: the
        kernel (or the NFS server) released it when its process ended. Runs of
        live processes, whatever their owner name (two workers left at the same
        name, a restarted worker beside its still-running predecessor), are
        never touched, and neither is a directory without a lock file (an older
        version's layout: delete it by hand once its workers are stopped).

        Returns:
            The number of dead runs removed.
        """
        removed = 0
        jobs = self.root / _JOBS
        for owner in sorted(_listdir(jobs)):
            owner_dir = jobs / owner
            if not owner_dir.is_dir():
                continue  # not ours
            for entry in sorted(_listdir(owner_dir)):
                if entry.endswith(_LOCK_SUFFIX) and _remove_if_dead(
                    owner_dir / entry, owner_dir / entry.removesuffix(_LOCK_SUFFIX)
                ):
                    removed += 1
            # Only if empty; a run being created meanwhile retries (see _JobRun).
            with contextlib.suppress(OSError):
                owner_dir.rmdir()
        if removed:
            log.info("%s: removed the job directories of %d dead run(s)", self.root, removed)
        return removed

    def close(self) -> None:
        """Give up this object's runs: delete their job directories and lock files.

        Call when no job of this object is under way any more (a worker calls it
        when it closes). Staging again afterwards starts a new run.
        """
        with self._runs_lock:
            runs = list(self._runs.values())
            self._runs.clear()
        for run in runs:
            run.close()

    def _jobs_of(self, owner: str) -> Path:
        name = urllib.parse.quote(owner, safe="")
        if name in ("", ".", ".."):
            raise PipelineOutputError(f"{owner!r} cannot name a job directory")
        return self.root / _JOBS / name

    def finish_stage(
        self,
        path: Path,
        offsets: OffsetRange,
        *,
        records: int,
        rejected_offsets: list[int],
        window_ms: int | None,
        files: Mapping[str, int] | None = None,
        schema: str | None = None,
    ) -> StagedBatch:
        """Mark a staging directory complete by writing its manifest.

        Called by :func:`stage_batch` after Spark's write returned and its
        files were checked; only a directory with a manifest can be published.

        Args:
            path: The staging directory Spark wrote.
            offsets: The batch's offset range.
            records: Records in the batch.
            rejected_offsets: Offsets of the records that were not valid events.
            window_ms: The window size the results were computed with.
            files: The batch's data files (names in ``path``) and their row
                counts. Readers read only these files (:meth:`published_files`),
                so a stray file a lost task attempt may leave later is never read.
                None: every data file of the directory is the batch's.
            schema: The data files' Spark schema (its JSON), so that a sink reads them
                without inferring it from the files (a Spark job).

        Returns:
            The staged batch.

        Raises:
            PipelineOutputError: A listed file is not a plain file of ``path``.
        """
        for name in files or {}:
            if "/" in name or name.startswith((".", "_")) or not (path / name).is_file():
                raise PipelineOutputError(f"{path}: {name!r} is not a data file of the batch")
        shown = tuple(sorted(rejected_offsets)[:100])
        manifest: dict[str, Any] = {
            "format": _MANIFEST_FORMAT,
            "topic": offsets.topic,
            "partition": offsets.partition,
            "start_offset": offsets.start_offset,
            "end_offset": offsets.end_offset,
            "records": records,
            "rejected": len(rejected_offsets),
            "rejected_offsets": list(shown),
            "window_ms": window_ms,
        }
        if files is not None:
            manifest["files"] = dict(sorted(files.items()))
            manifest["rows"] = sum(files.values())
        if schema is not None:
            manifest["schema"] = schema
        # Written to a temporary name and renamed so that a crash never leaves a
        # half-written manifest that would mark a stage complete.
        tmp = path / f".{MANIFEST_NAME}.tmp"
        tmp.write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path / MANIFEST_NAME)
        _fsync_tree(path)
        return StagedBatch(
            range=offsets,
            name=path.name,
            path=path,
            records=records,
            rejected=len(rejected_offsets),
            rejected_offsets=shown,
            window_ms=window_ms,
        )

    # -- the protocol ------------------------------------------------------------

    def publish(self, staged: StagedBatch | str) -> Path:
        """Atomically move a committed staging directory into ``published/``.

        Call only after the offset commit naming it succeeded. Idempotent: if
        the published directory already exists (another process published the
        same range first), the staging directory is removed and the call
        succeeds.

        Args:
            staged: The staged batch, or its staging directory name (the commit metadata).

        Returns:
            The published directory.

        Raises:
            PipelineOutputError: The name is not a staging name, the staging
                directory has no manifest (Spark's write did not finish), or it
                is gone and the range was never published: its results are lost.
        """
        return self.publish_all([staged])[0]

    def publish_all(self, batches: Sequence[StagedBatch | str]) -> list[Path]:
        """:meth:`publish` several committed batches (of different partitions): the
        sink's ``before_publish_all`` runs once for all of them that are still staged
        (one Delta transaction for a job's batches), then each directory is renamed.

        Returns:
            The published directories, in the order of ``batches``.

        Raises:
            PipelineOutputError: As :meth:`publish`, for any of them; a failing hook
                publishes none of them.
        """
        plans = [self._plan_publish(b if isinstance(b, str) else b.name) for b in batches]
        pending = [plan for plan in plans if plan.files is not None]
        if pending:
            if self._before_publish_all is not None:
                self._before_publish_all([(p.src, p.offsets, p.files or ()) for p in pending])
            elif self._before_publish is not None:
                for p in pending:
                    self._before_publish(p.src, p.offsets, p.files or ())
        return [self._rename(plan) for plan in plans]

    def _plan_publish(self, name: str) -> _Publishing:
        offsets = self._staging_range(name)
        src = self.staging_dir / name
        dst = self.published_dir / offsets.name
        plan = _Publishing(name, offsets, src, dst)
        if src.is_dir() and not (src / MANIFEST_NAME).is_file():
            if dst.is_dir():
                # Another publisher moved it away between the two checks above.
                plan.already = True
                return plan
            raise PipelineOutputError(f"{src} has no {MANIFEST_NAME}: its write did not finish")
        if src.is_dir():
            try:
                files = self.read_manifest(src).get("files")
            except PipelineOutputError:
                if not dst.is_dir():
                    raise
                # Another publisher moved it away since the checks above.
                plan.already = True
                return plan
            plan.files = (
                sorted(files)
                if isinstance(files, dict)
                else [n for n in _listdir(src) if not n.startswith(("_", "."))]
            )
        return plan

    def _rename(self, plan: _Publishing) -> Path:
        src, dst, offsets = plan.src, plan.dst, plan.offsets
        if plan.already:
            log.debug("%s was already published", offsets.name)
            return dst
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            if dst.is_dir():
                log.debug("%s was already published", offsets.name)
                return dst
            holder = self.segments.holder(offsets.name)
            if holder is not None:
                log.debug("%s was already published (in %s)", offsets.name, holder.name)
                return holder.path
            raise PipelineOutputError(
                f"{src} is gone and {dst} does not exist: the results of a committed "
                "batch were deleted"
            ) from None
        except OSError as exc:
            # rename(2) of a directory onto a non-empty directory fails with
            # ENOTEMPTY (or EEXIST): the same range was published by someone
            # else, from the same Kafka records, so this copy is redundant.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not dst.is_dir():  # a compactor's clean-up took it since: it is in a segment
                holder = self.segments.holder(offsets.name)
                if holder is None:
                    raise
                dst = holder.path
            log.info("%s was already published; removing %s", offsets.name, plan.name)
            shutil.rmtree(src, ignore_errors=True)
            return dst
        _fsync_dir(self.published_dir)
        _fsync_dir(self.staging_dir)
        log.info("published %s", offsets.name)
        return dst

    def abandon(self, staged: StagedBatch | str) -> None:
        """Delete a staging directory for which no offset commit was ever sent.

        Not for a batch whose commit failed or timed out: a commit whose
        response was lost may have landed, and then the committed metadata
        names this directory and deleting it loses the batch for good. Leave
        such a directory; :meth:`recover` publishes it if it was committed and
        :meth:`cleanup_orphans` deletes it once no commit can name it. Idempotent.

        Args:
            staged: The staged batch, or its staging directory name.

        Raises:
            PipelineOutputError: The name is not a staging name.
        """
        name = staged if isinstance(staged, str) else staged.name
        self._staging_range(name)
        shutil.rmtree(self.staging_dir / name, ignore_errors=True)
        log.info("abandoned %s", name)

    def recover(
        self, topic: str, partition: int, committed_offset: int | None, commit_metadata: str | None
    ) -> Path | None:
        """Publish the batch the previous owner committed but did not publish.

        Call on every assignment of a partition, before its first batch and
        before :meth:`cleanup_orphans`.

        Args:
            topic: The topic of the partition.
            partition: The partition.
            committed_offset: The committed offset, or None if there is none.
            commit_metadata: The metadata committed with it, or None.

        Returns:
            The published directory of the committed batch if the metadata names
            one (whether published now or earlier), else None (no commit yet, or
            the commit was not made by this pipeline, e.g. an offset reset).

        Raises:
            PipelineOutputError: The metadata names a batch of another partition,
                or a batch whose results are neither staged nor published.
        """
        if committed_offset is None or not commit_metadata:
            return None
        parsed = _parse(commit_metadata)
        if parsed is None or parsed[1] is None:
            log.warning(
                "%s-%d: commit metadata %r is not a staging name; nothing to recover",
                topic,
                partition,
                commit_metadata,
            )
            return None
        offsets = self._staging_range(commit_metadata)
        if (offsets.topic, offsets.partition) != (dir_topic(topic), partition):
            raise PipelineOutputError(
                f"commit metadata {commit_metadata!r} of {topic}-{partition} names "
                "another partition's batch"
            )
        if offsets.end_offset != committed_offset:
            # The offset was moved without this pipeline (a reset tool keeps or
            # rewrites metadata); the named batch is not what the commit covers.
            log.warning(
                "%s-%d: committed offset %d does not end batch %s; nothing to recover",
                topic,
                partition,
                committed_offset,
                commit_metadata,
            )
            return None
        if (self.published_dir / offsets.name).is_dir():
            # Published already (by the committing owner, or by a concurrent
            # recover): done, whatever is left in staging under that name (e.g. a
            # partial tree a lost Spark task of the same attempt wrote late).
            return self.published_dir / offsets.name
        holder = self.segments.holder(offsets.name)
        if holder is not None:
            return holder.path  # published, then compacted
        log.info("%s-%d: recovering committed batch %s", topic, partition, commit_metadata)
        return self.publish(commit_metadata)

    def cleanup_orphans(
        self,
        topic: str,
        partition: int,
        committed_offset: int | None,
        commit_metadata: str | None = None,
        *,
        still_owner: Callable[[], bool],
    ) -> list[str]:
        """Delete the partition's staging directories that no commit can name any more.

        Call as the partition's owner, after :meth:`recover` (on assignment)
        and after each publish, with the committed offset and metadata the
        caller knows. Orphans come from owners that crashed between write and
        commit, from zombies whose commit was rejected and from commits whose
        outcome was unknown.

        Fencing: a directory is deleted only if its range ends at or below
        ``committed_offset`` and the commit does not name it, and only while
        ``still_owner()`` (asked right before each deletion) returns True. The
        first rule alone keeps a stale caller safe: a former owner that
        resumes from a pause with an old ``committed_offset`` can only reach
        directories ending at or below it, while every batch of a newer owner
        starts at a later commit and ends past it. The second keeps the caller
        from acting once it may no longer own the partition (its membership
        lease with a margin, for :class:`~recipes.pipeline.PipelineWorker`).
        Directories ending past the committed offset are kept: the attempt may
        still be in flight, and is deleted by a later call once the partition's
        commits have passed it.

        Args:
            topic: The topic of the partition.
            partition: The partition.
            committed_offset: The committed offset, or None if there is none
                (then nothing is deleted).
            commit_metadata: The metadata committed with it. Without it, staging
                directories ending at ``committed_offset`` are kept, since one of
                them may be the committed batch.
            still_owner: True while the caller owns the partition with a margin
                for the deletion; False stops the cleanup.

        Returns:
            The names of the deleted directories, sorted.
        """
        removed: list[str] = []
        if committed_offset is None:
            return removed
        for name, offsets in sorted(self._staged(topic, partition)):
            if name == commit_metadata or offsets.end_offset > committed_offset:
                continue
            if commit_metadata is None and offsets.end_offset == committed_offset:
                continue
            if not still_owner():
                log.warning(
                    "%s-%d: no longer sure to own the partition; orphan cleanup stopped",
                    topic,
                    partition,
                )
                break
            shutil.rmtree(self.staging_dir / name, ignore_errors=True)
            removed.append(name)
        if removed:
            log.info("%s-%d: removed orphaned staging %s", topic, partition, removed)
        return removed

    # -- inspection -----------------------------------------------------------------

    def staged(self, topic: str | None = None, partition: int | None = None) -> list[str]:
        """Names of the staging directories, sorted, optionally of one partition.

        Args:
            topic: Only this topic (with ``partition``: only that partition).
            partition: Only this partition.

        Returns:
            Staging directory names.
        """
        return sorted(name for name, _ in self._staged(topic, partition))

    def published(
        self, topic: str | None = None, partition: int | None = None
    ) -> list[OffsetRange]:
        """The published ranges, sorted by topic, partition and offset: those in a
        directory of their own and those a compacted segment holds.

        Args:
            topic: Only this topic.
            partition: Only this partition.

        Returns:
            One range per published batch.
        """
        view = self.segments.view()
        names = list(view.published) + [b for seg in view.segments for b in seg.batches]
        ranges = []
        for entry in names:
            parsed = _parse(entry)
            if parsed is None or parsed[1] is not None:
                continue
            offsets = parsed[0]
            if topic is not None and offsets.topic != dir_topic(topic):
                continue
            if partition is not None and offsets.partition != partition:
                continue
            ranges.append(offsets)
        return sorted(ranges)

    def published_paths(self) -> list[Path]:
        """The directories of the published batches that no compacted segment holds."""
        return [self.published_dir / name for name in self._own_dirs(self.segments.view())]

    def published_files(self) -> list[Path]:
        """The data files of every published batch, as of one instant: those of the live
        compacted segments, and those each other batch's manifest lists.

        A directory whose manifest predates file lists contributes the
        directory itself (every data file in it).

        Returns:
            Paths of files (or directories): the segments' first, then the batches' in
            offset order.

        Raises:
            PipelineOutputError: A published directory has no readable manifest.
        """
        while True:
            view = self.segments.view()
            paths = [seg.path / name for seg in view.segments for name in seg.files]
            try:
                for name in self._own_dirs(view):
                    path = self.published_dir / name
                    files = self.read_manifest(path).get("files")
                    if isinstance(files, dict):
                        paths.extend(path / n for n in sorted(files) if _plain_file_name(n))
                    else:
                        paths.append(path)
            except PipelineOutputError:
                if all((self.published_dir / n).is_dir() for n in self._own_dirs(view)):
                    raise
                continue  # compacted and deleted since the view (no retention): look again
            return paths

    @staticmethod
    def _own_dirs(view: OutputView) -> list[str]:
        """The published directories of ``view`` that hold a batch no segment holds, in
        offset order."""
        parsed = [(p[0], name) for name in view.published if (p := _parse(name)) and not p[1]]
        return [name for _, name in sorted(parsed)]

    def check_published(
        self, expected: Mapping[tuple[str, int], tuple[int, int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """Check that each partition's published ranges are contiguous and disjoint.

        Args:
            expected: Optionally, per ``(topic, partition)``, the span
                ``(start, end)`` the published ranges must cover exactly (for
                example the first offset and the committed offset).

        Returns:
            Per ``(topic, partition)``, the span ``(start, end)`` its ranges cover.

        Raises:
            PublishedRangeError: Two ranges overlap, there is a gap, or a span
                differs from ``expected``; all problems are listed.
        """
        spans: dict[tuple[str, int], tuple[int, int]] = {}
        problems: list[str] = []
        by_partition: dict[tuple[str, int], list[OffsetRange]] = {}
        for r in self.published():
            by_partition.setdefault((r.topic, r.partition), []).append(r)
        for tp, ranges in by_partition.items():
            ranges.sort(key=lambda r: (r.start_offset, r.end_offset))
            for prev, cur in itertools.pairwise(ranges):
                if cur.start_offset < prev.end_offset:
                    problems.append(f"{tp[0]}-{tp[1]}: {prev.name} overlaps {cur.name}")
                elif cur.start_offset > prev.end_offset:
                    problems.append(f"{tp[0]}-{tp[1]}: gap [{prev.end_offset}, {cur.start_offset})")
            spans[tp] = (ranges[0].start_offset, max(r.end_offset for r in ranges))
        for (topic, partition), span in (expected or {}).items():
            got = spans.get((dir_topic(topic), partition))
            if got != span:
                problems.append(f"{topic}-{partition}: covers {got}, expected {span}")
        if problems:
            raise PublishedRangeError(problems)
        return spans

    def read_manifest(self, path: Path) -> dict[str, Any]:
        """The manifest of a staging or published directory.

        Args:
            path: The directory.

        Returns:
            The manifest's fields (``topic``, ``partition``, ``start_offset``,
            ``end_offset``, ``records``, ``rejected``, ``rejected_offsets``, ``window_ms``;
            from format 2 on, ``files`` (data file name to row count) and ``rows``; where
            the stager gave it, ``schema``, the data files' Spark schema as JSON).

        Raises:
            PipelineOutputError: The directory has no readable manifest.
        """
        try:
            raw = (path / MANIFEST_NAME).read_bytes()
        except OSError as exc:
            raise PipelineOutputError(f"{path} has no readable {MANIFEST_NAME}") from exc
        return decode_manifest(raw, where=str(path / MANIFEST_NAME))

    # -- internals ------------------------------------------------------------------

    def _staging_range(self, name: str) -> OffsetRange:
        parsed = _parse(name)
        if parsed is None or parsed[1] is None:
            raise PipelineOutputError(f"{name!r} is not a staging directory name")
        return parsed[0]

    def _staged(
        self, topic: str | None, partition: int | None
    ) -> Iterator[tuple[str, OffsetRange]]:
        for entry in _listdir(self.staging_dir):
            parsed = _parse(entry)
            if parsed is None or parsed[1] is None:
                continue
            offsets = parsed[0]
            if topic is not None and offsets.topic != dir_topic(topic):
                continue
            if partition is not None and offsets.partition != partition:
                continue
            yield entry, offsets


@dataclass(slots=True)
class _Publishing:
    """A batch on its way from staging to ``published/``."""

    name: str
    offsets: OffsetRange
    src: Path
    dst: Path
    files: list[str] | None = None  # its data files, if still staged (the hook's to apply)
    already: bool = False  # published by another process while we looked


class _JobRun:
    """This process's claim on one run directory, ``jobs/<owner>/<run id>/``.

    The claim is the lock file ``<run id>.lock`` beside the directory, created
    and locked (``flock``, exclusive) before the directory exists and held
    until :meth:`close` or the end of the process. A cleaner deletes a run only
    after locking its lock file itself, which it cannot while the run lives.

    Creation races with a cleaner, step by step: (1) we create the lock file;
    (2) a cleaner opens it and locks it first (nothing holds it yet), takes the
    run for dead, deletes the (absent) directory and unlinks the file; (3) we
    lock the unlinked file. Step 3 alone would leave us holding a lock nobody
    sees, so after locking we check that the path still names the file we
    hold, and start over with a new run id if not (or if the cleaner still
    held the lock at step 3). A cleaner that opened the file before we locked
    it and tries after fails to lock it and leaves it.
    """

    def __init__(self, owner_dir: Path) -> None:
        for _ in range(100):
            owner_dir.mkdir(parents=True, exist_ok=True)
            run = uuid.uuid4().hex
            lock = owner_dir / f"{run}{_LOCK_SUFFIX}"
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:
                continue  # a cleaner removed the (empty) owner directory meanwhile
            try:
                claimed = _try_lock(fd) and _same_file(fd, lock)
            except OSError as exc:
                os.close(fd)
                raise PipelineOutputError(
                    f"{lock}: cannot lock a job run's lock file ({exc}); the pipeline's output "
                    "must be on a filesystem with file locks (a local disk, or NFS with locking)"
                ) from exc
            if claimed:
                break
            os.close(fd)  # a cleaner took it for a dead run's: it removes the file
        else:
            raise PipelineOutputError(f"{owner_dir}: could not claim a job run")
        self.path = owner_dir / run
        self._lock_path = lock
        held = os.fstat(fd)
        with _LIVE_RUNS_LOCK:
            _LIVE_RUNS.add((held.st_dev, held.st_ino))
        # Garbage collected without close(): the lock goes, the run is left for a cleaner.
        self._release = weakref.finalize(self, _release_run, fd, (held.st_dev, held.st_ino))

    def close(self) -> None:
        # Directory first, lock file next, lock last: a cleaner that finds the lock file
        # free afterwards sees it unlinked (_same_file) and leaves it.
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._lock_path)
        self._release()


def _release_run(fd: int, identity: tuple[int, int]) -> None:
    with _LIVE_RUNS_LOCK:
        _LIVE_RUNS.discard(identity)
    os.close(fd)


def _remove_if_dead(lock: Path, run_dir: Path) -> bool:
    """Delete ``run_dir`` and ``lock`` if no live process holds ``lock``; whether it did."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False  # gone (another cleaner removed it) or not a file of ours
    try:
        opened = os.fstat(fd)
        with _LIVE_RUNS_LOCK:
            if (opened.st_dev, opened.st_ino) in _LIVE_RUNS:
                return False  # a run of this process
        try:
            if not _try_lock(fd) or not _same_file(fd, lock):
                return False  # alive, or removed by another cleaner since we opened it
        except OSError as exc:
            log.warning("%s: cannot lock (%s); its run is left alone", lock, exc)
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        return True
    finally:
        os.close(fd)  # releases the lock


def _try_lock(fd: int) -> bool:
    """Lock ``fd`` exclusively without waiting; False if another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not unlinked or replaced)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def dir_topic(topic: str) -> str:
    """The form of ``topic`` used in directory names: itself, or shortened if too long.

    Args:
        topic: A Kafka topic name.

    Returns:
        ``topic`` if at most 160 characters, else its first 143 characters, ``~``
        and 16 hex digits of its SHA-256. :meth:`OffsetRange.parse` returns this form.
    """
    if len(topic) <= _MAX_DIR_TOPIC:
        return topic
    digest = hashlib.sha256(topic.encode()).hexdigest()[:16]
    return f"{topic[: _MAX_DIR_TOPIC - 17]}~{digest}"


def decode_manifest(data: bytes, *, where: str = MANIFEST_NAME) -> dict[str, Any]:
    """A manifest's fields from its bytes.

    Raises:
        PipelineOutputError: the bytes are not a UTF-8 JSON object (nothing else escapes,
            whatever the bytes: deep nesting and huge numbers included).
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise PipelineOutputError(f"{where} is not readable JSON") from exc
    if not isinstance(doc, dict):
        raise PipelineOutputError(f"{where} is not a JSON object")
    return doc


def _plain_file_name(name: str) -> bool:
    """Whether a manifest's file name names a file inside its directory (not ``..``)."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _parse(name: str) -> tuple[OffsetRange, str | None] | None:
    """The range and the attempt suffix (None for a published name) of a directory name."""
    m = _NAME.match(name)
    if m is None:
        return None
    try:
        offsets = OffsetRange(
            topic=m["topic"],
            partition=int(m["partition"]),
            start_offset=int(m["start"]),
            end_offset=int(m["end"]),
        )
    except PipelineOutputError:
        return None  # e.g. start > end: not a name this protocol writes
    return offsets, m["attempt"]
