"""What the wake-up channel costs an idle member: connections, requests per second, CPU.

Starts N members of one group (default 10, ``coordination.Coordinator`` subclasses in this
process, the recipes' 1 s heartbeats), waits until they are stable and quiet, then counts
over a window (default 60 s) with nothing happening: the sockets the process holds, the
requests its members send (heartbeats; the channel's long-polling fetches) and the CPU
time the process uses. Three layouts, on the same broker: the channel on with a client id of
each member's own, so that each reads for itself as in a process of its own ("alone"); the
channel on with one client id, so that the members share one listener ("shared"); the
channel off (``wakeup_topic=None``).

    python benchmarks/wakeup_cost.py [--quick] [--members N] [--window S] [--bootstrap-servers B]

The last line holds the figures as ``name=value`` pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordination.testing import running_kafka
from examples.shards import ShardOwner

SETTINGS: dict[str, Any] = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 1_000}


class Idle(ShardOwner):
    """The example's shard owner, silent: nothing happens once it is stable."""

    def report(self, generation: int) -> None:
        pass


def sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def requests(members: list[Idle]) -> int:
    total = 0
    for m in members:
        total += m.metrics().heartbeat_total
        channel: Any = m._engine._wakeups
        if channel is not None:
            total += channel.stats.requests
    return total


def measure(bootstrap: str, n: int, window_s: float, layout: str) -> dict[str, float]:
    base_sockets = sockets()
    group = f"wakeup-cost-{uuid.uuid4().hex[:8]}"

    def extra(i: int) -> dict[str, Any]:
        if layout == "off":
            return {"wakeup_topic": None}
        return {"client_id": f"idle-{i}"} if layout == "alone" else {}

    members = [
        Idle(group, f"m{i}", bootstrap_servers=bootstrap, **SETTINGS, **extra(i)) for i in range(n)
    ]
    try:
        for m in members:
            m.start()
        for m in members:
            m.ensure_active_group(timeout=60)
        time.sleep(12)  # the joins' rebalances and wake-ups are over; idle fetches under way
        r0, c0, t0 = requests(members), cpu_s(), time.monotonic()
        time.sleep(window_s)
        r1, c1, t1 = requests(members), cpu_s(), time.monotonic()
        return {
            "sockets_per_member": (sockets() - base_sockets) / n,
            "requests_per_member_s": (r1 - r0) / n / (t1 - t0),
            "cpu_ms_per_member_s": (c1 - c0) * 1000 / n / (t1 - t0),
        }
    finally:
        for m in members:
            m.close(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 15 s window")
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--window", type=float, default=60.0, help="seconds counted")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args()
    window = 15.0 if args.quick else args.window
    with running_kafka(args.bootstrap_servers, full_jit=True) as bootstrap:
        alone = measure(bootstrap, args.members, window, "alone")
        shared = measure(bootstrap, args.members, window, "shared")
        off = measure(bootstrap, args.members, window, "off")
    print(f"{args.members} idle members in one process, {window:.0f} s window, 1 s heartbeats")
    print("on, alone: each member reads its own wake-ups (as in a process of its own)")
    print("on, shared: the members share one listener (one client id)")
    header = ["on, alone", "on, shared", "off", "extra alone", "extra shared"]
    print(f"{'':24s}" + "".join(f"{h:>14s}" for h in header))
    for key in alone:
        row = [alone[key], shared[key], off[key], alone[key] - off[key], shared[key] - off[key]]
        print(f"{key:24s}" + "".join(f"{v:14.2f}" for v in row))
    pairs = [f"{k}_on={v:.3f}" for k, v in alone.items()]
    pairs += [f"{k}_shared={v:.3f}" for k, v in shared.items()]
    pairs += [f"{k}_off={v:.3f}" for k, v in off.items()]
    print(" ".join(pairs))


if __name__ == "__main__":
    main()
