"""The one clock and the one event format every process of a campaign records with."""

from __future__ import annotations

import time
from typing import IO, Any

from ..member import Output, boot_time


def now() -> float:
    """Seconds on the campaign's clock (``CLOCK_BOOTTIME``: system-wide on Linux, so the
    events of different processes compare, and counting time the host spent suspended, as
    the recipes' leases do), comparable between processes on this host."""
    return boot_time()


def epoch_offset() -> float:
    """``time.time() - now()``: converts the consumer peers' epoch stamps to this clock."""
    return time.time() - now()


class Recorder(Output):
    """Writes events as JSON lines on the campaign's clock, each flushed at once (a SIGKILL
    loses at most a line)."""

    def __init__(self, out: IO[str] | None = None) -> None:
        super().__init__(now, out)


def record_acked(record: Output, value: str, metadata: Any) -> None:
    """A record the cluster acknowledged (``metadata``: the producer's RecordMetadata), as
    the checks read the produced stream: ``acked`` ``{topic, partition, offset, value}``."""
    record(
        "acked",
        topic=metadata.topic,
        partition=metadata.partition,
        offset=metadata.offset,
        value=value,
    )
