"""The demo's event generator: deterministic events, produced at a steady rate, with a tally.

Event ``i`` is a pure function of ``i`` (its key, event time, value, and whether
it is malformed), so the expected results of any set of produced events can be
computed without reading them back. :func:`produce` counts an event only once
the broker acknowledged it (``acks=all``, idempotent producer), so its tally is
exactly what the input topic holds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from coordination.errors import CoordinationError

__all__ = ["EventSpec", "GeneratorError", "Tally", "produce"]

BASE_TS_MS: Final = 1_700_000_000_000
"""Event time of the first window of the demo's events (2023-11-14T22:13:20Z)."""


class GeneratorError(CoordinationError):
    """The broker did not acknowledge an event, so what the topic holds is unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventSpec:
    """What the generated events look like.

    Example:
        EventSpec(keys=24, span_ms=600_000, malformed_every=1000).event(17)

    Attributes:
        keys: Number of distinct keys (``sensor-00`` ...).
        span_ms: Event times are spread over ``[BASE_TS_MS, BASE_TS_MS + span_ms)``,
            out of order, as late events are in real streams.
        malformed_every: Every n-th event (n > 0) is not JSON and must be rejected.
    """

    keys: int = 24
    span_ms: int = 600_000
    malformed_every: int = 1000

    def event(self, i: int) -> bytes:
        """The value bytes of event ``i``."""
        if self.malformed_every and i % self.malformed_every == self.malformed_every - 1:
            return b"not json {" + str(i).encode()
        key, ts_ms, value = self.fields(i)
        return json.dumps(
            {"key": key, "ts_ms": ts_ms, "value": str(value), "event_id": f"e{i}"}
        ).encode()

    def fields(self, i: int) -> tuple[str, int, Decimal]:
        """Key, event time and value of event ``i`` (malformed or not)."""
        key = f"sensor-{(i * 7) % self.keys:02d}"
        ts_ms = BASE_TS_MS + (i * 7919) % self.span_ms
        value = Decimal((i * 104_729) % 200_001 - 100_000) / 1000
        return key, ts_ms, value

    def is_valid(self, i: int) -> bool:
        """Whether event ``i`` is well-formed."""
        return not (self.malformed_every and i % self.malformed_every == self.malformed_every - 1)


@dataclass
class Tally:
    """What was produced: the expected results per key and window, and the counts.

    Attributes:
        window_ms: The window size the results are computed for.
        results: ``{(key, window_start_ms): (count, sum)}`` of the valid events.
        produced: Events acknowledged by the broker.
        malformed: Of those, events that are not valid.
    """

    window_ms: int
    results: dict[tuple[str, int], tuple[int, Decimal]] = field(default_factory=dict)
    produced: int = 0
    malformed: int = 0

    def add(self, spec: EventSpec, i: int) -> None:
        """Count event ``i`` as produced."""
        self.produced += 1
        if not spec.is_valid(i):
            self.malformed += 1
            return
        key, ts_ms, value = spec.fields(i)
        slot = (key, ts_ms - ts_ms % self.window_ms)
        count, total = self.results.get(slot, (0, Decimal(0)))
        self.results[slot] = (count + 1, total + value)


def produce(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int,
    events: int,
    rate: float,
    window_ms: int,
    spec: EventSpec | None = None,
    first: int = 0,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Tally:
    """Produce events ``first .. first + events - 1`` round-robin over the partitions.

    Args:
        bootstrap_servers: The Kafka cluster.
        topic: The input topic (it must exist with ``partitions`` partitions).
        partitions: Partition count; event ``i`` goes to partition ``i % partitions``.
        events: How many events.
        rate: Events per second (0: as fast as possible).
        window_ms: The pipeline's window, for the tally.
        spec: The events' shape; default :class:`EventSpec`.
        first: Index of the first event.
        stop: Set to stop early; the tally then holds what was produced.
        on_progress: Called with the number of events acknowledged so far, after each chunk.

    Returns:
        The tally of acknowledged events.

    Raises:
        GeneratorError: The broker did not acknowledge an event.
    """
    from kafka import KafkaProducer

    spec = spec or EventSpec()
    tally = Tally(window_ms=window_ms)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers,
        acks="all",
        enable_idempotence=True,  # a retried send is not written twice
        linger_ms=10,
        batch_size=256 * 1024,
    )
    chunk = max(1, min(2000, int(rate / 5) if rate else 2000))
    t0 = time.monotonic()
    try:
        for start in range(first, first + events, chunk):
            if stop is not None and stop.is_set():
                break
            indices = range(start, min(start + chunk, first + events))
            futures: list[tuple[int, Any]] = [
                (i, producer.send(topic, value=spec.event(i), partition=i % partitions))
                for i in indices
            ]
            producer.flush()
            for i, future in futures:
                try:
                    future.get(timeout=30)
                except Exception as e:
                    raise GeneratorError(f"event {i} was not acknowledged: {e!r}") from e
                tally.add(spec, i)
            if on_progress is not None:
                on_progress(tally.produced)
            if rate:
                # Sleep to the schedule, not by a fixed amount, so slow sends do not
                # lower the rate.
                ahead = (start + len(indices) - first) / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        producer.close()
    return tally
