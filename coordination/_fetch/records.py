"""Fetched record batches as kafka-python ``ConsumerRecord``\\ s, the default fetcher's.

Batches are decoded when their answer arrives; keys and values are deserialized when the
records are handed out (as kafka-python does), so that a deserializer's error leaves the
partition's position at the record it failed on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from .._protocol.fetch_codec import AbortedTransaction
from .._protocol.record_batches import decode_with_batches

Deserialize = Callable[[str, list[tuple[str, bytes | None]], bytes | None], Any]
# A record as decoded: offset, key, value, headers, timestamp, leader epoch, timestamp type.
Raw = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int, int]


def deserializer(given: Any, setting: str) -> Deserialize | None:
    """``key_deserializer``/``value_deserializer`` as kafka-python takes them: a
    ``kafka.serializer.Deserializer`` (``deserialize(topic, headers, data)``) or a function
    of the bytes alone (called for null keys and values too, as kafka-python calls it).

    Raises:
        TypeError: neither.
    """
    if given is None:
        return None
    method = getattr(given, "deserialize", None)
    if callable(method):
        return method  # type: ignore[no-any-return]
    if callable(given):
        return lambda topic, headers, data: given(data)
    raise TypeError(f"{setting} must be a function of the bytes or a Deserializer, got {given!r}")


def decode_partition(
    data: bytes,
    start: int,
    check_crcs: bool,
    aborted: Sequence[AbortedTransaction] | None = None,
    read_committed: bool = False,
) -> tuple[list[Raw], int]:
    """The records of ``data`` at or after offset ``start`` (a batch comes whole: its records
    before the position are left out), and the last offset the whole batches cover (-1 if
    none), past which the next fetch starts. ``read_committed``: the batches of the
    ``aborted`` transactions (the answer's list for this partition) are left out too.

    Raises:
        ProtocolCodecError: a batch is malformed, fails its CRC (``check_crcs``), or is
            compressed with a codec this Python lacks (naming the package to install).
    """
    fields, batches, through = decode_with_batches(data, check_crcs)
    out: list[Raw] = []
    # As Kafka's consumer does (CompletedFetch): walking the batches in offset order, a
    # producer is in an aborted transaction from the transaction's first offset until its
    # next control batch (the ABORT marker); its transactional batches meanwhile are skipped.
    pending = sorted(aborted or (), key=lambda a: a.first_offset) if read_committed else []
    aborting: set[int] = set()
    for batch in batches:
        if read_committed and batch.producer_id >= 0:
            while pending and pending[0].first_offset <= batch.last_offset:
                aborting.add(pending.pop(0).producer_id)
            if batch.is_control:
                # The marker that ends this producer's transaction: an aborted one ends
                # with ABORT (a committed one was never in ``aborting``).
                aborting.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborting:
                continue
        epoch, kind = batch.leader_epoch, batch.timestamp_type
        out.extend(
            (offset, key, value, headers, timestamp, epoch, kind)
            for offset, key, value, headers, timestamp in fields[batch.first : batch.stop]
            if offset >= start
        )
    return out, through


def consumer_records(
    topic: str,
    partition: int,
    raws: Sequence[Raw],
    key_deserializer: Deserialize | None,
    value_deserializer: Deserialize | None,
) -> list[Any]:
    """``raws`` as ``ConsumerRecord``\\ s with the fields kafka-python fills (no checksum,
    as for every v2 batch).

    Raises:
        Exception: whatever a deserializer raises.
    """
    out: list[Any] = []
    for offset, key, value, headers, timestamp, epoch, kind in raws:
        header_list = list(headers)
        header_size = (
            sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers)
            if headers
            else -1
        )
        out.append(
            ConsumerRecord(
                topic,
                partition,
                epoch,
                offset,
                timestamp,
                kind,
                key if key_deserializer is None else key_deserializer(topic, header_list, key),
                value
                if value_deserializer is None
                else value_deserializer(topic, header_list, value),
                header_list,
                None,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
                header_size,
            )
        )
    return out
