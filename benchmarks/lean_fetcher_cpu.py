"""CPU per idle-ish consumer: the default fetcher (kafka-python's KafkaConsumer) against
``fetcher="lean"``.

N members of one group (``recipes.partitioning.Consumer`` in this process, one polling
thread each, ``poll(timeout_ms=100)`` in a loop) read a topic of 2N partitions to which a
producer process writes one record per partition every 400 ms. After a 15 s warm-up, the
process's CPU time over the window (default 20 s) is divided by N and by the window: ms of
CPU per member per second, with context switches; and every record is checked to come once,
in order. Each fetcher in turn, ``--runs`` times.

    python benchmarks/lean_fetcher_cpu.py [--members N] [--window S] [--runs R]
        [--bootstrap-servers B]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from coordination.testing import running_kafka
from recipes.partitioning import Consumer

PRODUCER = """
import sys, time
from kafka import KafkaProducer
bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
while True:
    for i in range(partitions):
        p.send(topic, value=b"busy", partition=i)
    time.sleep(0.4)
"""


def measure(bootstrap: str, kind: str, members: int, window: float, run: int) -> str:
    tag = f"{kind}-{run}-{os.getpid()}"
    topic = f"cpu-{tag}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2 * members, 1)])
    admin.close()
    producer = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, bootstrap, topic, str(2 * members)]
    )
    stop = threading.Event()
    consumed = [0]
    gaps = [0]
    last: dict[Any, int] = {}
    lock = threading.Lock()

    def member() -> None:
        extra: dict[str, Any] = {"fetcher": "lean"} if kind == "lean" else {}
        c = Consumer(
            f"g-{tag}",
            topics=[topic],
            bootstrap_servers=bootstrap,
            auto_offset_reset="latest",
            **extra,
        )
        c.start()
        while not stop.is_set():
            batch = c.poll(timeout_ms=100)
            with lock:
                for tp, records in batch.items():
                    consumed[0] += len(records)
                    for r in records:
                        if tp in last and r.offset != last[tp] + 1:
                            gaps[0] += 1
                        last[tp] = r.offset
        c.close(10)

    threads = [threading.Thread(target=member, daemon=True) for _ in range(members)]
    for t in threads:
        t.start()
    time.sleep(15)
    with lock:
        gaps[0] = 0
        before = consumed[0]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.monotonic()
    time.sleep(window)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    elapsed = time.monotonic() - w0
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    switches = (r1.ru_nvcsw + r1.ru_nivcsw) - (r0.ru_nvcsw + r0.ru_nivcsw)
    line = (
        f"run={run} fetcher={kind} members={members} "
        f"cpu_ms_per_member_s={cpu / elapsed * 1000 / members:.2f} "
        f"switches_per_member_s={switches / elapsed / members:.0f} "
        f"records_per_s={(consumed[0] - before) / elapsed:.0f} "
        f"produced_per_s={2 * members / 0.4:.0f} gaps={gaps[0]}"
    )
    stop.set()
    producer.kill()
    producer.wait()
    for t in threads:
        t.join(15)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()
    with running_kafka(args.bootstrap_servers) as bootstrap:
        for run in range(args.runs):
            for kind in ("default", "lean"):
                print(measure(bootstrap, kind, args.members, args.window, run), flush=True)


if __name__ == "__main__":
    main()
