"""Share groups (KIP-932): the CPU time one ``ShareConsumer`` spends per record.

A backlog of ``--records`` small records (100-byte values, 8 partitions) is written once;
then, ``--repeats`` times, a fresh share group of one consumer reads it from the start in
explicit mode, acknowledging every record with ACCEPT (the next poll carries the
acknowledgements), as ``share_throughput.py`` does at N=1. The figure is the CPU time of
this process (``time.process_time()``: every thread, the heartbeats' included) from the
first poll that returned records until the last record was handled, per 100,000 records.
Unlike a throughput, it barely moves when other processes compete for the cores.

Run (a Kafka 4.3 broker with share groups is started on loopback unless
``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one)::

    python benchmarks/share_consumer_cpu.py                 # 100,000 records, 3 repeats
    python benchmarks/share_consumer_cpu.py --profile 25    # and cProfile's top 25 entries

With ``--profile`` the figures include cProfile's own cost (about three times as much), and
its times are wall-clock: the waits for the broker show as ``acquire`` and ``recv``.

The last line holds the figures as ``name=value`` pairs: the median, min and max CPU
seconds per 100,000 records over the repeats.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _share_backlog import prepare, read_backlog

from coordination.testing import running_kafka

POLL_MS = 100


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print cProfile's top N entries"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    profiler = cProfile.Profile() if args.profile else None
    with running_kafka(args.bootstrap_servers) as bootstrap:
        topic = prepare(bootstrap, args.records)
        per_100k = []
        for run in range(args.repeats):
            reading = read_backlog(
                bootstrap, topic, args.records, poll_ms=POLL_MS, profiler=profiler
            )
            per_100k.append(reading.cpu_s * 100_000 / reading.records)
            print(f"run {run + 1}: {per_100k[-1]:.3f} CPU-s per 100k records", flush=True)
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(out.getvalue())
    print(
        f"cpu_s_per_100k_median={statistics.median(per_100k):.3f} "
        f"cpu_s_per_100k_min={min(per_100k):.3f} cpu_s_per_100k_max={max(per_100k):.3f} "
        f"records={args.records} repeats={args.repeats}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
