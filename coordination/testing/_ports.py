"""Free TCP ports for servers started by tests and benchmarks.

A port picked now and bound later by another process (a broker, a proxy, a Spark master)
can be taken in between. The kernel's own choice (bind to port 0) is the worst pick for
that: it comes from the ephemeral range, where every outgoing connection also takes its
local port, so a broker's controller dialling a peer can take the very port its neighbour
is about to listen on. :func:`free_port` therefore picks outside that range, never hands
out one port twice in a process, and checks that nothing holds the port right now.
"""

from __future__ import annotations

import random
import socket
import sys
import threading
from pathlib import Path

# Below every platform's default ephemeral range (Linux 32768-60999, BSD/macOS/Windows
# 49152-65535) and above most registered services' ports.
_LOW, _HIGH = 20000, 32767
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_issued: set[int] = set()
_lock = threading.Lock()
_rng = random.Random()


def ephemeral_range() -> tuple[int, int]:
    """The range the kernel takes outgoing connections' local ports from."""
    try:
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return (32768, 60999) if sys.platform.startswith("linux") else (49152, 65535)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds now and no outgoing connection will take.

    Falls back to the kernel's choice only if the ephemeral range leaves no room below it.
    """
    ephemeral_low, ephemeral_high = ephemeral_range()
    with _lock:
        for _ in range(1000):
            port = _rng.randint(_LOW, _HIGH)
            if ephemeral_low <= port <= ephemeral_high or port in _issued:
                continue
            if _bindable(port):
                _issued.add(port)
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
