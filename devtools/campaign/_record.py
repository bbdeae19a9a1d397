"""The one clock and the one event format every process of a campaign records with."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any

# CLOCK_BOOTTIME is system-wide on Linux (so the events of different processes compare) and
# counts time the host spent suspended, as the recipes' leases do.
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def now() -> float:
    """Seconds on the campaign's clock, comparable between processes on this host."""
    return time.clock_gettime(_CLOCK)


def epoch_offset() -> float:
    """``time.time() - now()``: converts the consumer peers' epoch stamps to this clock."""
    return time.time() - now()


class Recorder:
    """Writes events as JSON lines, each flushed at once (a SIGKILL loses at most a line)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        fields.setdefault("t", now())
        line = json.dumps({"event": event, **fields})
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def member_settings(
    session_timeout_ms: int, instance_id: str | None, **extra: Any
) -> dict[str, Any]:
    """The group settings every member process of a campaign runs with (static if given an
    instance id), plus its recipe's ``extra``."""
    settings: dict[str, Any] = {
        "session_timeout_ms": session_timeout_ms,
        "heartbeat_interval_ms": 500,
        "retry_backoff_ms": 100,
        **extra,
    }
    if instance_id:
        settings["group_instance_id"] = instance_id
    return settings
