"""Kafka's wire primitives for flexible message versions (KIP-482), and the headers around them.

Internal, no compatibility guarantee. kafka-python encodes the classic group requests; the
APIs it has no message classes for (ConsumerGroupHeartbeat, ConsumerGroupDescribe, the
share-group APIs) are encoded here, from Kafka's message definitions (``clients/src/main/
resources/common/message/*.json``): big-endian fixed-width integers, unsigned varints,
compact strings, bytes and arrays (length + 1 as an unsigned varint, 0 for null), UUIDs as
16 bytes, and a tagged field section after every struct. A :class:`Reader` refuses anything
malformed with :class:`~coordination.errors.ProtocolCodecError` and allocates nothing a
hostile length announces before the bytes are there.
"""

from __future__ import annotations

import builtins
import struct
import uuid
from typing import Final

from ..errors import ProtocolCodecError

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
# Kafka's string fields hold at most this many UTF-8 bytes (Java's generated writers check it).
MAX_STRING_BYTES: Final = 0x7FFF
# A 32-bit unsigned varint takes at most this many bytes (Java: "Varint is too long").
_MAX_VARINT_BYTES: Final = 5

REQUEST_HEADER_VERSION: Final = 2
"""The request header of a flexible request: key, version, correlation id, client id, tags."""
RESPONSE_HEADER_VERSION: Final = 1
"""The response header of a flexible response: correlation id, tags."""


class Writer:
    """Appends Kafka wire values to a byte buffer; :meth:`bytes` returns what was written."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def bytes(self) -> bytes:
        return bytes(self._out)

    def raw(self, data: builtins.bytes) -> None:
        """Bytes as they are (fixed-width fields packed together by the caller)."""
        self._out += data

    def int8(self, value: int) -> None:
        self._out += _INT8.pack(value)

    def int16(self, value: int) -> None:
        self._out += _INT16.pack(value)

    def int32(self, value: int) -> None:
        self._out += _INT32.pack(value)

    def int64(self, value: int) -> None:
        self._out += _INT64.pack(value)

    def boolean(self, value: bool) -> None:
        self._out.append(1 if value else 0)

    def uvarint(self, value: int) -> None:
        if not 0 <= value <= 0xFFFFFFFF:
            raise ProtocolCodecError(f"{value} does not fit an unsigned 32-bit varint")
        while value > 0x7F:
            self._out.append((value & 0x7F) | 0x80)
            value >>= 7
        self._out.append(value)

    def uuid(self, value: uuid.UUID) -> None:
        self._out += value.bytes

    def compact_string(self, value: str | None, field: str) -> None:
        """A compact (nullable) string: length + 1 as an unsigned varint, 0 for null."""
        if value is None:
            self._out.append(0)
            return
        encoded = value.encode("utf-8")
        if len(encoded) > MAX_STRING_BYTES:
            raise ProtocolCodecError(f"{field} is {len(encoded)} bytes, more than Kafka's 32767")
        self.uvarint(len(encoded) + 1)
        self._out += encoded

    def compact_bytes(self, value: builtins.bytes | None) -> None:
        """Compact (nullable) bytes: length + 1 as an unsigned varint, 0 for null."""
        if value is None:
            self._out.append(0)
            return
        self.uvarint(len(value) + 1)
        self._out += value

    def legacy_string(self, value: str | None) -> None:
        """A nullable string with an int16 length (-1 for null): the request header's client
        id keeps it in flexible headers too, so that any broker can read an ApiVersions."""
        if value is None:
            self.int16(-1)
            return
        encoded = value.encode("utf-8")
        if len(encoded) > MAX_STRING_BYTES:
            raise ProtocolCodecError(f"client id is {len(encoded)} bytes, more than 32767")
        self.int16(len(encoded))
        self._out += encoded

    def compact_length(self, count: int | None) -> None:
        """A compact array's element count (None: a null array)."""
        self.uvarint(0 if count is None else count + 1)

    def no_tagged_fields(self) -> None:
        """An empty tagged field section (no message here sets a tagged field)."""
        self._out.append(0)


class Reader:
    """Reads Kafka wire values from ``data``; every read checks that the bytes are there.

    Raises:
        ProtocolCodecError: from every method, for truncated or malformed input; the
            message names ``what`` was being read.
    """

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    @property
    def position(self) -> int:
        return self._pos

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def fail(self, problem: str) -> ProtocolCodecError:
        return ProtocolCodecError(f"{self._what}: {problem} (at byte {self._pos})")

    def _take(self, size: int) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise self.fail(f"truncated: {size} bytes needed, {self.remaining()} left")
        chunk = bytes(self._data[self._pos : end])
        self._pos = end
        return chunk

    def raw(self, size: int) -> bytes:
        """The next ``size`` bytes as they are (a tagged field's value, read on its own)."""
        return self._take(size)

    def _fixed(self, codec: struct.Struct) -> int:
        if self._pos + codec.size > len(self._data):
            raise self.fail(f"truncated: {codec.size} bytes needed, {self.remaining()} left")
        value: int = codec.unpack_from(self._data, self._pos)[0]
        self._pos += codec.size
        return value

    def int8(self) -> int:
        return self._fixed(_INT8)

    def int16(self) -> int:
        return self._fixed(_INT16)

    def int32(self) -> int:
        return self._fixed(_INT32)

    def int64(self) -> int:
        return self._fixed(_INT64)

    def boolean(self) -> bool:
        return self._fixed(_INT8) != 0  # as Kafka's readers: any non-zero byte is true

    def uvarint(self) -> int:
        data, pos = self._data, self._pos
        if pos < len(data) and data[pos] < 0x80:  # most lengths and counts: one byte
            self._pos = pos + 1
            return data[pos]
        value = 0
        for shift in range(0, 7 * _MAX_VARINT_BYTES, 7):
            if pos >= len(data):
                self._pos = pos
                raise self.fail("truncated varint")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self._pos = pos
                if value > 0xFFFFFFFF:
                    raise self.fail("varint larger than 32 bits")
                return value
        self._pos = pos
        raise self.fail("varint longer than 5 bytes")

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def compact_string(self, field: str, *, nullable: bool = False) -> str | None:
        size = self.uvarint() - 1
        if size < 0:
            if not nullable:
                raise self.fail(f"{field} is null")
            return None
        if size > MAX_STRING_BYTES:
            raise self.fail(f"{field} is {size} bytes, more than Kafka's 32767")
        raw = self._take(size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not UTF-8 ({e.reason})") from e

    def string(self, field: str) -> str:
        """A compact string that may not be null."""
        value = self.compact_string(field)
        assert value is not None
        return value

    def compact_bytes(self, field: str, *, nullable: bool = False) -> bytes | None:
        """Compact bytes (a ``bytes`` or ``records`` field): length + 1, 0 for null."""
        size = self.uvarint() - 1
        if size < 0:
            if not nullable:
                raise self.fail(f"{field} is null")
            return None
        return self._take(size)

    def legacy_string(self, field: str) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        raw = self._take(size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not UTF-8 ({e.reason})") from e

    def compact_length(self, field: str, *, nullable: bool = False, least_bytes: int = 1) -> int:
        """A compact array's element count, -1 for null; a count that ``least_bytes`` per
        element could not fit in the bytes left is refused before anything is allocated."""
        count = self.uvarint() - 1
        if count < 0:
            if not nullable:
                raise self.fail(f"{field} is null")
            return -1
        if count * least_bytes > self.remaining():
            raise self.fail(f"{field} announces {count} elements, more than the bytes left hold")
        return count

    def int32_array(self, field: str) -> tuple[int, ...]:
        count = self.compact_length(field, least_bytes=4)
        values = struct.unpack_from(f">{count}i", self._data, self._pos)
        self._pos += 4 * count
        return tuple(values)

    def string_array(self, field: str, *, nullable: bool = False) -> tuple[str, ...] | None:
        count = self.compact_length(field, nullable=nullable)
        if count < 0:
            return None
        return tuple(self.string(field) for _ in range(count))

    def tagged_fields(self) -> None:
        """Skip a tagged field section: none of the fields read here is tagged, and a tag a
        newer version adds is ignorable by definition."""
        count = self.uvarint()
        if count * 2 > self.remaining():
            raise self.fail(f"{count} tagged fields announced, more than the bytes left hold")
        for _ in range(count):
            self.uvarint()  # the tag
            self._take(self.uvarint())

    def done(self) -> None:
        if self._pos != len(self._data):
            raise self.fail(f"{len(self._data) - self._pos} bytes after the end")


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v2, the header of every flexible request version."""
    out = Writer()
    out.int16(api_key)
    out.int16(api_version)
    out.int32(correlation_id)
    out.legacy_string(client_id)
    out.no_tagged_fields()
    return out.bytes()


def decode_request_header(reader: Reader) -> tuple[int, int, int, str | None]:
    """Request header v2: (api key, api version, correlation id, client id)."""
    api_key = reader.int16()
    api_version = reader.int16()
    correlation_id = reader.int32()
    client_id = reader.legacy_string("client id")
    reader.tagged_fields()
    return api_key, api_version, correlation_id, client_id


def encode_response_header(correlation_id: int) -> bytes:
    """Response header v1, the header of every flexible response version."""
    out = Writer()
    out.int32(correlation_id)
    out.no_tagged_fields()
    return out.bytes()


def decode_response_header(reader: Reader) -> int:
    """Response header v1: the correlation id."""
    correlation_id = reader.int32()
    reader.tagged_fields()
    return correlation_id
