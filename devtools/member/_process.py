"""The parent's side: a member process started, watched and closed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]


class MemberProcess:
    """A ``python -m devtools.member ARGS`` child, run from this checkout: a reader thread
    collects the events it prints (``events``); it can be signalled (SIGKILL, SIGSTOP,
    SIGCONT), and closed. ``stderr`` as for :class:`subprocess.Popen`."""

    def __init__(self, *args: str, stderr: Any = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devtools.member", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self._changed = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):  # a stray line from a library
                event = json.loads(line)
                with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        with self._changed:
            return [e for e in self.events if e["event"] == kind]

    def last(self, *kinds: str) -> dict[str, Any] | None:
        """The latest event of any of these kinds, if any."""
        with self._changed:
            found = [e for e in self.events if e["event"] in kinds]
        return found[-1] if found else None

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def request_close(self) -> None:
        """Ask the member to close (``close`` on its stdin), without waiting."""
        assert self.process.stdin is not None
        self.process.stdin.write("close\n")
        self.process.stdin.flush()

    def close(self, timeout: float = 15.0) -> None:
        """Ask the process to close (resuming it if frozen); kill it if it has not exited
        within ``timeout`` seconds; reap it."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGCONT)
                self.request_close()
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(5)  # the pipe ends when the process does
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
