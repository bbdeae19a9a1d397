"""Stops a :class:`~coordination.testing.KafkaCluster`'s brokers when the process that started
them dies without stopping them.

The brokers run in sessions of their own (a test run's Ctrl-C reaches the cluster's owner,
which stops them cleanly), so an owner killed outright (SIGKILL, a test run cut off) would
leave them running: JVMs with their heaps, ports and data directories. Each cluster starts
one of these small processes as a child of its owner; once its parent is gone (it has been
handed to another), it kills every process whose command line names the cluster's directory
(the brokers', through their ``server.properties``) and, if the cluster made that directory,
deletes it. A cluster that stops normally ends it first. Linux only (it reads ``/proc``);
elsewhere the cluster starts none.

Run as ``python -I .../coordination/testing/_reaper.py DIRECTORY [--delete]`` (as a script:
importing the package would cost its owner half a second of CPU per cluster).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

SUPPORTED = Path("/proc/self/cmdline").exists()


def started_from(directory: str) -> Iterator[int]:
    """The processes (but this one) whose command line names a broker's directory in
    ``directory`` (``broker-<id>``, where a cluster keeps each broker's files)."""
    needle = os.fsencode(os.path.join(directory, "broker-"))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in cmdline:
            yield int(entry.name)


def main(argv: Sequence[str]) -> int:
    directory, delete = argv[0], "--delete" in argv[1:]
    # The owner's Ctrl-C is not for this process: the owner stops the cluster (and it) then.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    for pid in started_from(directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if delete:
        time.sleep(0.5)  # the killed JVMs' files close with them
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
