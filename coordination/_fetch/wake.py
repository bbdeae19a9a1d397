"""How another thread ends the lean fetcher's wait for a Fetch answer (``wakeup()``)."""

from __future__ import annotations

import contextlib
import socket


class Waker:
    """A flag and a socket pair: :meth:`wake` (from any thread) sets the flag and writes a
    byte to the pair, whose :meth:`fileno` the fetcher polls with the leaders' sockets, so
    the wait ends at once; :meth:`take` (the fetcher's thread) says whether a wake-up came
    and empties the pair. A wait that is a sleep (an injected clock) cannot be cut short; it
    sees the flag after. Socket objects, not raw descriptors: after :meth:`close`, a late
    :meth:`wake` fails instead of writing to whatever file reused the number."""

    def __init__(self) -> None:
        self._woken = False
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)

    def wake(self) -> None:
        self._woken = True
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway), or closed
            self._write.send(b"w")

    def take(self) -> bool:
        if not self._woken:
            return False
        self._woken = False
        try:
            while self._read.recv(512):
                pass
        except OSError:
            pass  # empty (BlockingIOError), or closed
        return True

    def fileno(self) -> int:
        return self._read.fileno()

    def close(self) -> None:
        self._read.close()
        self._write.close()
