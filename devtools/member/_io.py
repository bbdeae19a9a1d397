"""The member program's clocks, its event output and when it stops."""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Final

# CLOCK_BOOTTIME is system-wide on Linux (so the events of different processes compare) and
# counts time the host spent suspended, as the recipes' leases do.
_BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boot_time() -> float:
    """Seconds on the boot clock, comparable between processes on this host."""
    return time.clock_gettime(_BOOT_CLOCK)


CLOCKS: Final[dict[str, Callable[[], float]]] = {
    "wall": time.time,
    "wall-ms": lambda: time.time() * 1000,
    "boot": boot_time,
    "perf": time.perf_counter,
}
# The group settings passed through to the recipe when given, by their Python names.
_GROUP_SETTINGS: Final = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "rebalance_timeout_ms",
    "retry_backoff_ms",
    "group_instance_id",
    "client_id",
)


class Output:
    """Writes events as JSON lines, each flushed at once; callable from any thread.

    Called as ``output(kind, **fields)`` or ``output(event=kind, **fields)``; ``t`` is read
    from ``clock`` unless given.
    """

    def __init__(self, clock: Callable[[], float] = time.time, out: IO[str] | None = None):
        self.clock = clock
        self._out = out or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        record = {"event": event, **fields}
        record.setdefault("t", self.clock())
        line = json.dumps(record)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class Stopping:
    """When the member must close: SIGTERM, SIGINT, or ``close`` or the end of stdin. The
    other lines of stdin are commands, queued for a recipe that takes any (``shares``)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._commands: queue.Queue[list[str] | None] = queue.Queue()

    def listen(self, *, stdin: bool) -> None:
        """Install the signal handlers (main thread only) and, if ``stdin``, its reader."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: self.stop())
        if stdin:
            threading.Thread(target=self._read, name="stdin", daemon=True).start()

    def stop(self) -> None:
        self.event.set()
        self._commands.put(None)

    def _read(self) -> None:
        for line in sys.stdin:
            words = line.split()
            if words == ["close"]:
                break
            if words:
                self._commands.put(words)
        self.stop()

    def next_command(self) -> list[str] | None:
        """The next command's words, once one comes; None once the member must close."""
        return self._commands.get()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def is_set(self) -> bool:
        return self.event.is_set()


def group_settings(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The group settings given on the command line, plus a recipe's ``extra`` ones."""
    given = {name: getattr(args, name) for name in _GROUP_SETTINGS}
    given.update(extra)
    return {name: value for name, value in given.items() if value is not None}


def required(args: argparse.Namespace, name: str) -> str:
    value = getattr(args, name)
    if not value:
        raise SystemExit(f"--recipe {args.recipe} needs --{name}")
    return str(value)
