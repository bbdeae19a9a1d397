"""Small file operations the output protocol's modules share."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "fsync_tree", "listdir"]


def listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def fsync_tree(path: Path) -> None:
    # The commit that follows staging tells every later owner "these results
    # exist". Spark's local filesystem writer does not fsync, so without this a
    # machine crash (not just a process crash) after the commit could leave
    # recover() a staging directory with truncated Parquet files.
    for entry in path.rglob("*"):
        if entry.is_file():
            fd = os.open(entry, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    # A rename or a new entry is durable only once its directory is synced. For
    # publish() this matters: the next batch's commit replaces the metadata that
    # names the staging directory, so a publish undone by a machine crash after
    # that commit would leave an orphan that cleanup_orphans() deletes.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
