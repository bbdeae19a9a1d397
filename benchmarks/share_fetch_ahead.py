"""Share groups (KIP-932): one ``ShareConsumer`` with ``fetch_ahead=True`` against the same
consumer without it, in the same run, on one broker.

A backlog of ``--records`` small records (100-byte values, 8 partitions) is written once.
Then, ``--repeats`` times and for each application work in ``--work-ms``, a fresh share
group of one consumer reads it from the start in explicit mode, once without fetching ahead
and once with, in turn: after each poll that returned records the application waits
``work`` ms (I/O per batch: a bulk write, a call to a service), then accepts every record.
The figure is records/s from the first poll that returned records until the last record
was handled (a new group's first fetch waits while the broker sets up its share-partitions).

Fetching ahead overlaps the broker's answer to the next fetch with the application's work
on this batch: it pays when there is work to overlap (``work`` > 0), and costs a thread's
hand-over when there is none (``work`` 0, the loop of ``share_throughput.py``).

Run (a Kafka 4.3 broker with share groups is started on loopback unless
``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one)::

    python benchmarks/share_fetch_ahead.py                    # work 0, 5, 10 ms; 5 repeats
    python benchmarks/share_fetch_ahead.py --quick            # work 0, 10 ms; 3 repeats

Everything runs on this machine's cores, the broker too. Tables give median [min .. max]
over the repeats; the last line holds the ratios (ahead / not ahead, of the medians) as
``name=value`` pairs.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _share_backlog import prepare, read_backlog

from coordination.testing import running_kafka

POLL_MS = 500


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f} .. {max(values):,.0f}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, help="runs per mode and work (default 5)")
    parser.add_argument("--work-ms", help="comma-separated work per batch, ms (default 0,5,10)")
    parser.add_argument("--quick", action="store_true", help="work 0, 10 ms; 3 repeats")
    args = parser.parse_args(argv)
    works = [float(w) for w in (args.work_ms or ("0,10" if args.quick else "0,5,10")).split(",")]
    repeats = args.repeats or (3 if args.quick else 5)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    rates: dict[tuple[float, bool], list[float]] = {}
    with running_kafka(args.bootstrap_servers) as bootstrap:
        topic = prepare(bootstrap, args.records)
        for run in range(repeats):
            for work in works:
                for ahead in (False, True):
                    rate = read_backlog(
                        bootstrap,
                        topic,
                        args.records,
                        poll_ms=POLL_MS,
                        work_s=work / 1000,
                        fetch_ahead=ahead,
                    ).records_per_s
                    rates.setdefault((work, ahead), []).append(rate)
                    print(
                        f"  run {run + 1} work {work:g} ms fetch_ahead={ahead}: {rate:,.0f} "
                        "records/s",
                        flush=True,
                    )
    print(f"\nrecords/s, one consumer, {args.records:,} records ({repeats} runs)")
    print(f"{'work ms':>8}  {'without':>28}  {'fetch_ahead':>28}  ratio")
    headline = []
    for work in works:
        without, with_ahead = rates[work, False], rates[work, True]
        ratio = statistics.median(with_ahead) / statistics.median(without)
        print(f"{work:>8g}  {spread(without):>28}  {spread(with_ahead):>28}  {ratio:.2f}")
        headline.append(f"ahead_vs_not_work{work:g}ms={ratio:.2f}")
    print("\n" + " ".join(headline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
