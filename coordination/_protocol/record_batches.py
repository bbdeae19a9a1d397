"""Kafka's v2 record batches (magic 2, Kafka 0.11 on), as Fetch and ShareFetch return them.

Internal, no compatibility guarantee. Shared by the share-group codec and the lean record
fetcher: :func:`decode_fields` reads the records only (the share consumers' hot path),
:func:`decode_with_batches` also says what each batch's header holds (its leader epoch,
timestamp type, producer, transactional and control flags). Both raise only
:class:`~coordination.errors.ProtocolCodecError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kafka import codec as kafka_codec
from kafka.record.util import calc_crc32c

from ..errors import ProtocolCodecError

# A record's fields, as the consumers read them: offset, key, value, headers, timestamp.
RecordFields = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]

# A v2 record batch (Kafka's DefaultRecordBatch) up to its records: base offset, length,
# partition leader epoch, magic, CRC, attributes, last offset delta, first and max timestamp,
# producer id and epoch, base sequence, record count.
_BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_BATCH_LENGTH: Final = struct.Struct(">i")
_LOG_OVERHEAD: Final = 12  # the base offset and the length, which does not count them
_MAGIC_AT: Final = 16
_CRC_FROM: Final = 21  # the CRC covers the batch from its attributes on
# kafka-python's least batch (a v0 message's overhead): a batch announced shorter is malformed.
_MIN_BATCH: Final = 26
_CONTROL: Final = 0x20
_LOG_APPEND_TIME: Final = 0x08
_COMPRESSION: Final = 0x07
# Compression type: its name, whether this Python can read it, the decompressor.
_CODECS: Final[dict[int, tuple[str, Callable[[], bool], Callable[[bytes], bytes]]]] = {
    1: ("gzip", kafka_codec.has_gzip, kafka_codec.gzip_decode),
    2: ("snappy", kafka_codec.has_snappy, kafka_codec.snappy_decode),
    3: ("lz4", kafka_codec.has_lz4, kafka_codec.lz4_decode),
    4: ("zstd", kafka_codec.has_zstd, kafka_codec.zstd_decode),
}

_TRANSACTIONAL: Final = 0x10


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What one batch's header says, and where its records are in the list read with it."""

    first: int
    """Index of the batch's first record in the records list (``stop`` if it has none)."""
    stop: int
    """Index after its last record."""
    base_offset: int
    last_offset: int
    """The last offset the batch covers (compaction may have removed its record)."""
    leader_epoch: int
    """The partition leader epoch the batch was written in (Kafka's
    ``partitionLeaderEpoch``)."""
    timestamp_type: int
    """0: the producer's create time; 1: the broker's log-append time."""
    producer_id: int
    is_transactional: bool
    is_control: bool
    """A transaction marker: its records are not read (``first == stop``)."""


def decode_fields(data: bytes, check_crcs: bool = False) -> tuple[list[RecordFields], int]:
    """The records of ``data`` (control records left out), and the last offset its whole
    batches cover (control batches included; -1 if none): an offset past it was in no
    batch read whole. A batch cut short at the end (the broker may send one past its size
    limits) is left out, as Kafka's consumers leave it.

    ``check_crcs``: verify each batch's CRC first, as Kafka's ``check.crcs`` does.

    Raises:
        ProtocolCodecError: a batch is malformed, fails its CRC, or is compressed with a
            codec this Python lacks (the message names the package to install).
    """
    return _decode(data, check_crcs, None)


def decode_with_batches(
    data: bytes, check_crcs: bool = False
) -> tuple[list[RecordFields], list[BatchInfo], int]:
    """As :func:`decode_fields`, and each whole batch's header, in order.

    Raises:
        ProtocolCodecError: as :func:`decode_fields`.
    """
    batches: list[BatchInfo] = []
    records, through = _decode(data, check_crcs, batches)
    return records, batches, through


def _decode(
    data: bytes, check_crcs: bool, batches: list[BatchInfo] | None
) -> tuple[list[RecordFields], int]:
    """The records of ``data`` (control records left out), and the last offset its whole
    batches cover (:func:`decode_fields`); each batch's header into ``batches`` if given.
    Only Kafka's v2 batches (magic 2, Kafka 0.11 on) are read."""
    records: list[RecordFields] = []
    through = -1
    try:
        if type(data) is not bytes:
            data = bytes(data)  # its slices are the keys and values: bytes
        pos, size = 0, len(data)
        # Batch by batch, as kafka-python's MemoryRecords frames them.
        while size - pos >= _LOG_OVERHEAD:
            end = pos + _LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(data, pos + 8)[0]
            if end > size:
                break  # cut short: left out
            if end - pos < _MIN_BATCH:
                raise ValueError(f"a record batch of {end - pos} bytes at {pos}")
            magic = data[pos + _MAGIC_AT]
            if not 2 <= magic <= 127:  # a signed byte
                # Magic 0 and 1 (message formats before Kafka 0.11) are not read.
                raise ValueError(f"a record batch of magic {magic - 256 * (magic > 127)} at {pos}")
            through = max(through, _read_batch(data, pos, end, check_crcs, records, batches))
            pos = end
    except ProtocolCodecError:
        raise
    # A malformed batch fails anywhere (a length past the end, a varint too long, ...), and
    # kafka-python's decompressors raise their own errors (EOFError, zlib.error, OSError, ...):
    # any failure on these bytes means they are malformed.
    except Exception as e:
        raise ProtocolCodecError(f"malformed record batch: {e!r}") from e
    return records, through


def _read_batch(
    data: bytes,
    pos: int,
    end: int,
    check_crcs: bool,
    records: list[RecordFields],
    batches: list[BatchInfo] | None,
) -> int:
    """Append the records of the v2 batch ``data[pos:end]`` to ``records``; the last offset
    it covers."""
    if end - pos < _BATCH_HEADER.size:
        raise ValueError(f"a record batch of {end - pos} bytes at {pos}, shorter than its header")
    (base, _, epoch, _, crc, attributes, last_delta, first_ts, max_ts, producer, _, _, count) = (
        _BATCH_HEADER.unpack_from(data, pos)
    )
    covered: int = base + last_delta
    if check_crcs and calc_crc32c(memoryview(data)[pos + _CRC_FROM : end]) != crc:
        raise ProtocolCodecError(f"record batch at offset {base} fails its CRC")
    first = len(records)
    if attributes & _CONTROL:  # a transaction's marker: no record to deliver
        if batches is not None:
            batches.append(_info(first, base, covered, epoch, attributes, producer))
        return covered
    compression = attributes & _COMPRESSION
    if compression:
        codec = _CODECS.get(compression)
        if codec is None:
            raise ValueError(f"unknown compression type {compression} at offset {base}")
        name, available, decompress = codec
        if not available():
            raise ProtocolCodecError(
                f"record batch at offset {base} is compressed with {name}, which this Python "
                f"cannot read: install kafka-python's {name} extra"
            )
        buffer = bytes(decompress(data[pos + _BATCH_HEADER.size : end]))
        start, stop = 0, len(buffer)
    else:
        buffer, start, stop = data, pos + _BATCH_HEADER.size, end
    log_append_time = max_ts if attributes & _LOG_APPEND_TIME else None
    last = _read_records(buffer, start, stop, count, base, first_ts, log_append_time, records)
    if batches is not None:
        batches.append(_info(first, base, covered, epoch, attributes, producer, len(records)))
    return max(last, covered)


def _info(
    first: int,
    base: int,
    covered: int,
    epoch: int,
    attributes: int,
    producer: int,
    stop: int | None = None,
) -> BatchInfo:
    return BatchInfo(
        first=first,
        stop=first if stop is None else stop,
        base_offset=base,
        last_offset=covered,
        leader_epoch=epoch,
        timestamp_type=1 if attributes & _LOG_APPEND_TIME else 0,
        producer_id=producer,
        is_transactional=bool(attributes & _TRANSACTIONAL),
        is_control=bool(attributes & _CONTROL),
    )


def _read_records(
    buffer: bytes,
    pos: int,
    stop: int,
    count: int,
    base_offset: int,
    first_timestamp: int,
    log_append_time: int | None,
    records: list[RecordFields],
) -> int:
    """Append the ``count`` records of ``buffer[pos:stop]`` (a batch's, decompressed) to
    ``records``, as kafka-python's DefaultRecordBatch reads them; the highest offset read
    (-1 if none). Raises ValueError or IndexError on malformed bytes.

    The hot loop of a share consumer: most varints are one byte (a small record's length and
    value size, two), read inline here; longer ones by :func:`_varint`."""
    highest = -1
    append = records.append
    for _ in range(count):
        # The record's length: one or two bytes for a small record.
        b = buffer[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buffer[pos + 1] < 0x80:
            n = (b & 0x7F) | (buffer[pos + 1] << 7)
            length, pos = (n >> 1) ^ -(n & 1), pos + 2
        else:
            length, pos = _varint(buffer, pos)
        begin = pos
        b = buffer[pos]  # attributes: unused
        if b < 0x80:
            pos += 1
        else:
            _, pos = _varint(buffer, pos)
        b = buffer[pos]
        if b < 0x80:
            timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            timestamp_delta, pos = _varint(buffer, pos)
        b = buffer[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = _varint(buffer, pos)
        b = buffer[pos]
        if b < 0x80:
            size, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            size, pos = _varint(buffer, pos)
        key = None
        if size >= 0:
            key, pos = buffer[pos : pos + size], pos + size
        # The value's size: one or two bytes up to 8 KiB.
        b = buffer[pos]
        if b < 0x80:
            size, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buffer[pos + 1] < 0x80:
            n = (b & 0x7F) | (buffer[pos + 1] << 7)
            size, pos = (n >> 1) ^ -(n & 1), pos + 2
        else:
            size, pos = _varint(buffer, pos)
        value = None
        if size >= 0:
            value, pos = buffer[pos : pos + size], pos + size
        b = buffer[pos]
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if b == 0:
            pos += 1
        else:
            headers, pos = _read_headers(buffer, pos)
        if pos - begin != length:
            raise ValueError(f"a record announced {length} bytes and holds {pos - begin}")
        offset = base_offset + offset_delta
        timestamp = (
            first_timestamp + timestamp_delta if log_append_time is None else log_append_time
        )
        append((offset, key, value, headers, timestamp))
        if offset > highest:
            highest = offset
    if pos != stop:
        raise ValueError(f"{stop - pos} bytes after the batch's {count} records")
    return highest


def _read_headers(buffer: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = _varint(buffer, pos)
    if count < 0:
        raise ValueError(f"a record with {count} headers")
    headers = []
    for _ in range(count):
        size, pos = _varint(buffer, pos)
        if size < 0:  # a header's name is never null
            raise ValueError(f"a header name of {size} bytes")
        name, pos = buffer[pos : pos + size].decode("utf-8"), pos + size
        size, pos = _varint(buffer, pos)
        value = None
        if size >= 0:
            value, pos = buffer[pos : pos + size], pos + size
        headers.append((name, value))
    return tuple(headers), pos


def _varint(buffer: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` (Kafka's varint and varlong), and the position after it."""
    b = buffer[pos]
    result, shift = b & 0x7F, 7
    while b & 0x80:
        if shift >= 64:
            raise ValueError("a varint out of the int64 range")
        pos += 1
        b = buffer[pos]
        result |= (b & 0x7F) << shift
        shift += 7
    return (result >> 1) ^ -(result & 1), pos + 1
