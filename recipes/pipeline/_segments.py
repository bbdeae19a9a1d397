"""Compacted segments of a Parquet output: many published batches held as one directory.

A :class:`~recipes.pipeline.PipelineOutput` publishes one directory per batch, so a
long-running pipeline's file count grows without bound. Its compactor
(:class:`~recipes.pipeline.ParquetCompactor`) copies published batches, and smaller
segments, into one *segment* and commits it; readers then read the segment in place of
what it holds. Layout under the output's root::

    compacted/<segment>/             committed segments: data files and _segment.json
    compacted/.lock                  flock: one commit or clean-up at a time
    compacting/<segment>/            being written (no reader looks here)
    compacting/.trash-<name>/        being deleted

A segment's manifest names every batch it holds and the older segments it *replaces*.
What readers see, :meth:`Segments.view`, is the live segments (present and replaced by
no present segment) and the published batches no live segment holds. Commits and
deletions keep that view exact at every instant:

* a commit is one ``rename(2)`` of a complete directory into ``compacted/``, checked under
  the lock: its new batches are held by no live segment, and what it replaces is live;
  so no batch is ever held twice, whichever compactors run at once;
* what a segment holds or replaces is deleted only ``retention`` after that segment was
  committed (renamed to trash first, so a half-deleted directory is never read), so a
  reader that listed the files just before the commit can still read them;
* a segment replaces, besides the segments it merges, everything they replaced that is
  still present, so deleting a middle generation never brings an older one back to life.

:meth:`Segments.view` takes no lock: it lists the segments, the published batches, then
the segments again, and starts over if they changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._errors import PipelineOutputError
from ._files import fsync_dir, fsync_tree, listdir

__all__ = ["SEGMENT_MANIFEST", "OutputView", "Segment", "Segments"]

log = logging.getLogger("recipes.pipeline")

SEGMENT_MANIFEST: Final = "_segment.json"
_FORMAT: Final = 1
_COMPACTED: Final = "compacted"
_COMPACTING: Final = "compacting"
_LOCK: Final = ".lock"
_TRASH: Final = ".trash-"
_STRAYS_WARNED: set[Path] = set()  # entries of compacted/ that are no segment, told once


@dataclass(frozen=True)
class Segment:
    """One committed segment.

    Attributes:
        name: Its directory name under ``compacted/``.
        path: Its directory.
        batches: Each batch it holds (published directory name) with that batch's manifest.
        replaces: The segments it replaces (their batches are among its own).
        files: Its data files (names in ``path``).
        rows: Its rows.
        committed_s: When it was committed (seconds since the epoch).
    """

    name: str
    path: Path
    batches: Mapping[str, Mapping[str, Any]]
    replaces: tuple[str, ...]
    files: tuple[str, ...]
    rows: int
    committed_s: float


@dataclass(frozen=True)
class OutputView:
    """What readers of an output see at one instant.

    Attributes:
        segments: The live segments, by name.
        replaced: The present segments that a present segment replaces (not read).
        published: Entries of ``published/`` whose batch no live segment holds (read).
        held_published: Entries of ``published/`` whose batch a live segment holds (not read).
    """

    segments: tuple[Segment, ...]
    replaced: tuple[Segment, ...]
    published: tuple[str, ...]
    held_published: tuple[str, ...]

    def holder(self, batch: str) -> Segment | None:
        """The live segment that holds ``batch``, if one does."""
        for segment in self.segments:
            if batch in segment.batches:
                return segment
        return None


class _Changed(Exception):
    """A listed segment was deleted while the view was read: read the view again."""


class Segments:
    """The segments of one output root (see the module's docstring for the protocol)."""

    def __init__(
        self,
        root: Path,
        published_dir: Path,
        *,
        now: Callable[[], float] = time.time,
        names: random.Random | None = None,
    ) -> None:
        """The segments of ``root``.

        Args:
            root: The output's root.
            published_dir: Its ``published/`` directory.
            now: The wall clock (seconds) of commit times and retention, shared by every
                process of the output (the simulator's clock in its histories).
            names: Draws the random part of new segments' names (default: ``uuid4``).
        """
        self.root = root
        self.published_dir = published_dir
        self._now = now
        self._names = names
        self.compacted_dir = root / _COMPACTED
        self.compacting_dir = root / _COMPACTING

    # -- reading --------------------------------------------------------------------

    def view(self) -> OutputView:
        """A consistent view: segments listed before and after the published batches agree."""
        while True:
            try:
                names = self._segment_names()
                present = {name: seg for name in names if (seg := self._read(name)) is not None}
                entries = [e for e in listdir(self.published_dir) if not e.startswith(".")]
                if self._segment_names() == names:
                    return _view(present, entries)
            except _Changed:
                pass

    def holder(self, batch: str) -> Segment | None:
        """The live segment that holds ``batch`` (a published directory name), if any."""
        if not self.compacted_dir.is_dir():
            return None
        return self.view().holder(batch)

    # -- compacting -----------------------------------------------------------------

    @contextlib.contextmanager
    def new_segment(self) -> Iterator[Path]:
        """Where a compactor writes a new segment (not created: Spark's writer creates it),
        then commits it with :meth:`commit`. While the block runs, the directory's lock
        (``compacting/<name>.lock``) keeps :meth:`retire` off it; what is left of it
        uncommitted at the end is deleted."""
        self.compacting_dir.mkdir(parents=True, exist_ok=True)
        name = f"segment-{int(self._now() * 1000):015d}-{self._suffix(12)}"
        lock = self.compacting_dir / f"{name}{_LOCK}"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.compacting_dir / name
        finally:
            shutil.rmtree(self.compacting_dir / name, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            os.close(fd)

    def commit(
        self,
        written: Path,
        *,
        batches: Mapping[str, Mapping[str, Any]],
        replaces: Sequence[Segment],
        rows: int,
        audit: Mapping[str, Any],
        still_leader: Callable[[], bool] = lambda: True,
    ) -> Segment | None:
        """Commit the segment written in ``written`` (data files only, so far).

        Args:
            written: A directory from :meth:`new_segment`, holding the data files.
            batches: Every batch it holds: the new ones and those of ``replaces``.
            replaces: The live segments it merged.
            rows: Its rows.
            audit: Who made it (compactor, token), recorded in its manifest.
            still_leader: Asked under the lock right before the rename.

        Returns:
            The committed segment, or None (and ``written`` deleted) if its inputs
            changed meanwhile (another compactor committed some of them) or
            ``still_leader`` said no.
        """
        files = sorted(n for n in listdir(written) if not n.startswith(("_", ".")))
        fsync_tree(written)  # the data, before the manifest that makes it a segment
        with self._locked():
            view = self.view()
            live = {s.name: s for s in view.segments}
            merged = {b for s in replaces for b in s.batches}
            stale = [s.name for s in replaces if s.name not in live]
            taken = [b for b in batches if b not in merged and view.holder(b) is not None]
            if stale or taken or not still_leader():
                log.info(
                    "segment %s not committed: %s",
                    written.name,
                    f"replaced segments gone {stale}"
                    if stale
                    else f"batches held already {taken[:3]}"
                    if taken
                    else "no longer the compactor",
                )
                shutil.rmtree(written, ignore_errors=True)
                return None
            # Replace what the merged segments replaced too (see the module's docstring).
            replaced_names = sorted(
                {s.name for s in replaces}
                | {r.name for r in view.replaced if any(r.name in s.replaces for s in replaces)}
            )
            # Stamped right before the rename: what it holds stays readable for the
            # retention from about the moment readers can first see it.
            manifest = {
                "format": _FORMAT,
                "batches": {name: dict(batches[name]) for name in sorted(batches)},
                "replaces": replaced_names,
                "files": files,
                "rows": rows,
                "committed_s": self._now(),
                "audit": dict(audit),
            }
            _write_synced(written / SEGMENT_MANIFEST, json.dumps(manifest, sort_keys=True))
            fsync_dir(written)
            self.compacted_dir.mkdir(parents=True, exist_ok=True)
            os.rename(written, self.compacted_dir / written.name)
            fsync_dir(self.compacted_dir)
            fsync_dir(self.compacting_dir)
        log.info(
            "committed segment %s: %d batches, %d rows, replacing %d segments",
            written.name,
            len(batches),
            rows,
            len(replaced_names),
        )
        return _segment(written.name, self.compacted_dir / written.name, manifest)

    def retire(self, retention_s: float, *, now: float | None = None) -> list[str]:
        """Delete what live segments hold or replace once they are ``retention_s`` old,
        and what crashed compactors left in ``compacting/`` (no one holds its lock).

        Returns:
            The names of the published batches and segments deleted.
        """
        if not self.compacted_dir.is_dir() and not self.compacting_dir.is_dir():
            return []
        now = self._now() if now is None else now
        deleted: list[str] = []
        with self._locked():
            view = self.view()
            old = {s.name: s for s in view.segments if now - s.committed_s >= retention_s}
            for entry in view.held_published:
                holder = view.holder(entry)
                if holder is not None and holder.name in old:
                    self._trash(self.published_dir / entry)
                    deleted.append(entry)
            for replaced in view.replaced:
                if any(replaced.name in s.replaces for s in old.values()):
                    self._trash(replaced.path)
                    deleted.append(replaced.name)
            fsync_dir(self.published_dir)
            fsync_dir(self.compacted_dir)
            for entry in listdir(self.compacting_dir):
                if entry.startswith(_TRASH):
                    shutil.rmtree(self.compacting_dir / entry, ignore_errors=True)
                elif not entry.endswith(_LOCK):
                    self._remove_abandoned(entry)
                elif not (self.compacting_dir / entry.removesuffix(_LOCK)).exists():
                    self._remove_abandoned(entry.removesuffix(_LOCK))  # its lock alone
        if deleted:
            log.info("deleted %d compacted batches and segments", len(deleted))
        return deleted

    # -- internals ------------------------------------------------------------------

    def _suffix(self, digits: int) -> str:
        if self._names is None:
            return uuid.uuid4().hex[:digits]
        return f"{self._names.getrandbits(4 * digits):0{digits}x}"

    def _segment_names(self) -> list[str]:
        return sorted(e for e in listdir(self.compacted_dir) if not e.startswith("."))

    def _read(self, name: str) -> Segment | None:
        """The segment ``compacted/<name>``; None if that is no segment (no manifest)."""
        path = self.compacted_dir / name
        try:
            raw = (path / SEGMENT_MANIFEST).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            if not os.path.lexists(path):
                raise _Changed from None  # deleted (moved to trash) since it was listed
            # Segments come in whole (a rename), so this never was one: a stray entry.
            if path not in _STRAYS_WARNED:
                _STRAYS_WARNED.add(path)
                log.warning("%s has no %s: not a segment, not read", path, SEGMENT_MANIFEST)
            return None
        try:
            return _segment(name, path, json.loads(raw))
        except (ValueError, KeyError, TypeError) as e:
            raise PipelineOutputError(
                f"{path / SEGMENT_MANIFEST} is not readable ({e!r}): the segment's batches "
                "cannot be read; restore the file or move the segment out of compacted/ "
                "once its batches are published again"
            ) from e

    def _remove_abandoned(self, name: str) -> None:
        """Delete ``compacting/<name>`` unless its compactor still writes it (holds its lock)."""
        lock = self.compacting_dir / f"{name}{_LOCK}"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return  # being written
        try:
            shutil.rmtree(self.compacting_dir / name, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
        finally:
            os.close(fd)

    def _trash(self, path: Path) -> None:
        self.compacting_dir.mkdir(parents=True, exist_ok=True)
        trash = self.compacting_dir / f"{_TRASH}{path.name}-{self._suffix(8)}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, trash)
            shutil.rmtree(trash, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.compacted_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.compacted_dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _segment(name: str, path: Path, doc: Mapping[str, Any]) -> Segment:
    return Segment(
        name=name,
        path=path,
        batches=doc["batches"],
        replaces=tuple(doc["replaces"]),
        files=tuple(doc["files"]),
        rows=int(doc["rows"]),
        committed_s=float(doc["committed_s"]),
    )


def _write_synced(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = memoryview(text.encode())
        while left:
            left = left[os.write(fd, left) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _view(present: Mapping[str, Segment], entries: Sequence[str]) -> OutputView:
    replaced_names = {r for s in present.values() for r in s.replaces}
    live = tuple(s for n, s in sorted(present.items()) if n not in replaced_names)
    replaced = tuple(s for n, s in sorted(present.items()) if n in replaced_names)
    held = {b for s in live for b in s.batches}
    return OutputView(
        segments=live,
        replaced=replaced,
        published=tuple(sorted(e for e in entries if e not in held)),
        held_published=tuple(sorted(e for e in entries if e in held)),
    )
