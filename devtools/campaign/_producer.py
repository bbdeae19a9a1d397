"""The campaign's producer, in its own process: a numbered stream, acks=all.

It records ``acked`` ``{topic, partition, offset, value}`` for every record the cluster
acknowledged and ``failed`` ``{value, error}`` for those it did not; on SIGTERM it flushes
what is in flight and ends.

    python -m devtools.campaign._producer --bootstrap B --topic T \
        --partitions 6 [--rate 40]
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

from kafka import KafkaProducer

from ._record import Recorder, record_acked

record = Recorder()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--rate", type=float, default=40.0, help="records a second")
    parser.add_argument("--name", default="producer#1")
    args = parser.parse_args()
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10000,
        delivery_timeout_ms=60000,
        metadata_max_age_ms=1000,  # a partition it does not know yet is known within a second
    )
    record("up", pid=os.getpid())

    def on_ack(value: str, metadata: Any) -> None:
        record_acked(record, value, metadata)

    def on_error(value: str, error: BaseException) -> None:
        record("failed", value=value, error=repr(error)[:300])

    # Values carry the producer's name so that a restarted producer never repeats one.
    seq = 0
    pace = 1.0 / args.rate
    next_at = time.monotonic()
    while not stopping.is_set():
        value = f"{args.name}:{seq}"
        try:
            future = producer.send(
                args.topic, value=value.encode(), partition=seq % args.partitions
            )
        except ValueError:
            # A topic created just before may at first be known with fewer partitions (its
            # metadata fills in as they get leaders), and kafka-python refuses a send to a
            # partition it does not know: the same record again after the next refresh.
            stopping.wait(0.2)
            continue
        future.add_callback(lambda metadata, value=value: on_ack(value, metadata))
        future.add_errback(lambda error, value=value: on_error(value, error))
        seq += 1
        next_at += pace
        stopping.wait(max(0.0, next_at - time.monotonic()))
    producer.flush(timeout=60)
    producer.close(timeout=10)
    record("closed", sent=seq)


if __name__ == "__main__":
    main()
