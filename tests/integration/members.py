"""Group members for the integration tests: in-process, or as a separate process to kill
(``devtools.member``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devtools import member

FAST = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 300,
    "rebalance_timeout_ms": 10000,
    "retry_backoff_ms": 50,
}


def new_group() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class Listing(member.Listing):
    """The leader hands every member the sorted list of member ids and its own position;
    the test settings (``FAST``) unless told otherwise."""

    def __init__(self, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **{**FAST, **settings})


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settled(members: Sequence[Listing], size: int) -> bool:
    """All members completed the same generation, whose assignment lists ``size`` members."""
    lasts = []
    for m in members:
        with m.lock:
            if not m.completed:
                return False
            lasts.append(m.completed[-1])
    return (
        len({g for g, *_ in lasts}) == 1
        and all(len(a["members"]) == size for *_, a in lasts)
        and all(m.generation_if_stable() is not None for m in members)
    )


ROOT = Path(__file__).resolve().parents[2]


def fast_args(**overrides: int) -> list[str]:
    """``FAST`` (with ``overrides``) as ``devtools.member`` options."""
    settings = {**FAST, **overrides}
    return [f"--{key.replace('_', '-')}={value}" for key, value in settings.items()]


class EventProcess:
    """A member process (``python -m devtools.member RECIPE_ARGS``, see its docstring) that
    prints JSON events; killable, freezable, closable.

    It closes gracefully when it reads ``close`` on its stdin.
    """

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devtools.member", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        return [e for e in list(self.events) if e["event"] == kind]

    def joined(self) -> list[dict[str, Any]]:
        return self.of("joined")

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Ask the process to close (resuming it if frozen); kill it if it does not."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGCONT)
                assert self.process.stdin is not None
                self.process.stdin.write("close\n")
                self.process.stdin.flush()
                self.process.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(5)  # the pipe ends when the process does
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
