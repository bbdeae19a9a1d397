"""Versioned binary encoding of task-distribution worker metadata and assignments.

Internal, no compatibility guarantee for the Python API; the bytes are a protocol and
evolve compatibly. The layout follows Kafka's own group payloads
(``ConsumerProtocolSubscription``, Connect's worker metadata): big-endian, an ``int16``
version first, Kafka's primitive types, and fields only ever appended.

Types::

    int8, int16, int32, int64   big-endian two's complement
    float64                     IEEE 754 binary64, big-endian
    string                      int16 byte length (>= 0), then that many bytes of UTF-8
    [string]                    int32 count (>= 0), then that many strings

Worker metadata (JoinGroup protocol metadata), version 0::

    version          int16     0
    worker_id        string    non-empty
    config_version   int64     the version of the task set the worker has seen
    has_capacity     int8      0: no capacity limit; 1: a capacity follows
    capacity         float64   only if has_capacity = 1; finite, >= 0
    owned            [string]  the tasks the worker runs, sorted, no duplicates

Assignment (SyncGroup assignment), version 0::

    version          int16     0
    status           int16     AssignmentStatus (0 OK, 1 CONFIG_MISMATCH, 2 DUPLICATE_WORKER_ID)
    leader_id        string    the leader's member id
    leader_worker_id string    the leader's worker id
    config_version   int64     the version of the task set the leader assigned
    delay_ms         int32     >= 0; rejoin after this delay if positive
    assigned         [string]  sorted, no duplicates
    revoked          [string]  sorted, no duplicates, disjoint from assigned

Compatibility: a newer version may only append fields. A decoder reads the fields it knows
from data of any version >= 0 and ignores what follows them if the version is newer than
its own; for its own version, trailing bytes mean corruption and are rejected. So an older
worker can always read a newer leader's assignment, and an older leader a newer worker's
metadata. Anything else wrong raises :class:`~coordination.errors.ProtocolCodecError`
naming the payload, the field and the byte offset.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Final

from coordination.errors import ProtocolCodecError

from ._assignor import AssignmentStatus, WorkerAssignment, WorkerState

__all__ = [
    "ASSIGNMENT_VERSION",
    "METADATA_VERSION",
    "decode_assignment",
    "decode_worker_metadata",
    "encode_assignment",
    "encode_worker_metadata",
]

METADATA_VERSION: Final = 0
"""The worker metadata version this module writes (and the newest it fully understands)."""

ASSIGNMENT_VERSION: Final = 0
"""The assignment version this module writes (and the newest it fully understands)."""

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_FLOAT64: Final = struct.Struct(">d")
_MAX_STRING: Final = 0x7FFF


# -- encoding ---------------------------------------------------------------------------------


class _Writer:
    def __init__(self, what: str) -> None:
        self._what = what
        self._parts: list[bytes] = []

    def _pack(self, fmt: struct.Struct, value: int | float, name: str) -> None:
        try:
            self._parts.append(fmt.pack(value))
        except struct.error as exc:
            raise ProtocolCodecError(
                f"cannot encode {self._what}: {name}={value!r} is out of range"
            ) from exc

    def int8(self, value: int, name: str) -> None:
        self._pack(_INT8, value, name)

    def int16(self, value: int, name: str) -> None:
        self._pack(_INT16, value, name)

    def int32(self, value: int, name: str) -> None:
        self._pack(_INT32, value, name)

    def int64(self, value: int, name: str) -> None:
        self._pack(_INT64, value, name)

    def float64(self, value: float, name: str) -> None:
        self._pack(_FLOAT64, value, name)

    def string(self, value: str, name: str) -> None:
        data = value.encode("utf-8")
        if len(data) > _MAX_STRING:
            raise ProtocolCodecError(
                f"cannot encode {self._what}: {name} is {len(data)} bytes of UTF-8, "
                f"more than the {_MAX_STRING} a string may have"
            )
        self._parts.append(_INT16.pack(len(data)))
        self._parts.append(data)

    def strings(self, values: Iterable[str], name: str) -> None:
        items = sorted(values)
        if len(set(items)) != len(items):
            raise ProtocolCodecError(f"cannot encode {self._what}: {name} has duplicates")
        self.int32(len(items), name)
        for item in items:
            self.string(item, name)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def encode_worker_metadata(state: WorkerState) -> bytes:
    """Encode a worker's JoinGroup metadata (``member_id`` is not part of it).

    Args:
        state: the worker's identity, owned tasks, capacity and task-set version.

    Returns:
        The version-0 bytes (see the module docstring).

    Raises:
        ProtocolCodecError: a string is longer than 32767 bytes of UTF-8 or
            ``config_version`` does not fit in an int64.
    """
    w = _Writer("worker metadata")
    w.int16(METADATA_VERSION, "version")
    w.string(state.worker_id, "worker_id")
    w.int64(state.config_version, "config_version")
    if state.capacity is None:
        w.int8(0, "has_capacity")
    else:
        w.int8(1, "has_capacity")
        w.float64(state.capacity, "capacity")
    w.strings(state.owned, "owned")
    return w.getvalue()


def encode_assignment(assignment: WorkerAssignment) -> bytes:
    """Encode one worker's assignment for SyncGroup.

    Args:
        assignment: what :func:`~recipes.tasks._assignor.assign` computed for the worker.

    Returns:
        The version-0 bytes (see the module docstring).

    Raises:
        ProtocolCodecError: a string is too long, a number does not fit its field, or a
            task is both assigned and revoked.
    """
    overlap = set(assignment.assigned) & set(assignment.revoked)
    if overlap:
        raise ProtocolCodecError(
            f"cannot encode assignment: {sorted(overlap)!r} both assigned and revoked"
        )
    if assignment.delay_ms < 0:
        raise ProtocolCodecError(f"cannot encode assignment: delay_ms={assignment.delay_ms} < 0")
    w = _Writer("assignment")
    w.int16(ASSIGNMENT_VERSION, "version")
    w.int16(assignment.status, "status")
    w.string(assignment.leader_id, "leader_id")
    w.string(assignment.leader_worker_id, "leader_worker_id")
    w.int64(assignment.config_version, "config_version")
    w.int32(assignment.delay_ms, "delay_ms")
    w.strings(assignment.assigned, "assigned")
    w.strings(assignment.revoked, "revoked")
    return w.getvalue()


# -- decoding ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = memoryview(data)
        self._what = what
        self._offset = 0

    def error(self, message: str) -> ProtocolCodecError:
        return ProtocolCodecError(
            f"cannot decode {self._what} ({len(self._data)} bytes): {message} "
            f"at byte {self._offset}"
        )

    def _unpack(self, fmt: struct.Struct, name: str) -> int | float:
        end = self._offset + fmt.size
        if end > len(self._data):
            raise self.error(
                f"truncated: {name} needs {fmt.size} bytes, {len(self._data) - self._offset} left"
            )
        (value,) = fmt.unpack_from(self._data, self._offset)
        self._offset = end
        return value  # type: ignore[no-any-return]

    def int8(self, name: str) -> int:
        return int(self._unpack(_INT8, name))

    def int16(self, name: str) -> int:
        return int(self._unpack(_INT16, name))

    def int32(self, name: str) -> int:
        return int(self._unpack(_INT32, name))

    def int64(self, name: str) -> int:
        return int(self._unpack(_INT64, name))

    def float64(self, name: str) -> float:
        return float(self._unpack(_FLOAT64, name))

    def string(self, name: str) -> str:
        start = self._offset
        length = self.int16(name)
        if length < 0:
            self._offset = start
            raise self.error(f"{name} has negative length {length}")
        end = self._offset + length
        if end > len(self._data):
            raise self.error(
                f"truncated: {name} needs {length} bytes, {len(self._data) - self._offset} left"
            )
        try:
            value = str(self._data[self._offset : end], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{name} is not valid UTF-8") from exc
        self._offset = end
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        start = self._offset
        count = self.int32(name)
        # Every string takes at least its 2-byte length: a count beyond that is garbage,
        # caught here before it makes us loop (or allocate) for billions of items.
        if count < 0 or 2 * count > len(self._data) - self._offset:
            self._offset = start
            raise self.error(f"{name} has an impossible count {count}")
        items = tuple(self.string(name) for _ in range(count))
        if len(set(items)) != count:
            raise self.error(f"{name} has duplicates")
        return items

    def version(self) -> int:
        version = self.int16("version")
        if version < 0:
            self._offset = 0
            raise self.error(f"unknown version {version}")
        return version

    def finish(self, version: int, newest: int) -> None:
        # A newer writer may have appended fields we do not know: ignore them. For our own
        # version, leftover bytes mean the payload is not what its version says.
        if version <= newest and self._offset != len(self._data):
            raise self.error(f"{len(self._data) - self._offset} unexpected trailing bytes")


def decode_worker_metadata(member_id: str, data: bytes) -> WorkerState:
    """Decode a worker's JoinGroup metadata, of any version >= 0.

    Args:
        member_id: the member id the metadata came with (from the JoinGroup response).
        data: the metadata bytes.

    Returns:
        The worker as the assignor sees it.

    Raises:
        ProtocolCodecError: the bytes are truncated, have a negative version, bad UTF-8, an
            empty worker id, a capacity that is negative or not finite, duplicate tasks, or
            trailing bytes at a version this module knows. The message names the field and
            the byte offset.
    """
    r = _Reader(data, f"worker metadata of member {member_id!r}")
    version = r.version()
    worker_id = r.string("worker_id")
    if not worker_id:
        raise r.error("worker_id is empty")
    config_version = r.int64("config_version")
    has_capacity = r.int8("has_capacity")
    capacity: float | None = None
    if has_capacity == 1:
        capacity = r.float64("capacity")
        if not (math.isfinite(capacity) and capacity >= 0):
            raise r.error(f"capacity {capacity!r} is not a finite number >= 0")
    elif has_capacity != 0:
        raise r.error(f"has_capacity is {has_capacity}, not 0 or 1")
    owned = r.strings("owned")
    r.finish(version, METADATA_VERSION)
    return WorkerState(
        member_id=member_id,
        worker_id=worker_id,
        owned=frozenset(owned),
        capacity=capacity,
        config_version=config_version,
    )


def decode_assignment(data: bytes) -> WorkerAssignment:
    """Decode a worker's SyncGroup assignment, of any version >= 0.

    Args:
        data: the assignment bytes.

    Returns:
        The assignment.

    Raises:
        ProtocolCodecError: the bytes are empty (this member got no assignment: a leader
            bug), truncated, have a negative version, an unknown status, a negative delay,
            bad UTF-8, duplicate tasks, a task both assigned and revoked, or trailing bytes
            at a version this module knows.
    """
    if not data:
        raise ProtocolCodecError(
            "cannot decode assignment: it is empty; the leader sent this member nothing "
            "(is every member running the same task-distribution protocol?)"
        )
    r = _Reader(data, "assignment")
    version = r.version()
    code = r.int16("status")
    try:
        status = AssignmentStatus(code)
    except ValueError:
        raise r.error(f"unknown status {code}") from None
    leader_id = r.string("leader_id")
    leader_worker_id = r.string("leader_worker_id")
    config_version = r.int64("config_version")
    delay_ms = r.int32("delay_ms")
    if delay_ms < 0:
        raise r.error(f"delay_ms {delay_ms} is negative")
    assigned = r.strings("assigned")
    revoked = r.strings("revoked")
    overlap = set(assigned) & set(revoked)
    if overlap:
        raise r.error(f"tasks {sorted(overlap)!r} are both assigned and revoked")
    r.finish(version, ASSIGNMENT_VERSION)
    return WorkerAssignment(
        assigned=tuple(sorted(assigned)),
        revoked=tuple(sorted(revoked)),
        delay_ms=delay_ms,
        leader_id=leader_id,
        leader_worker_id=leader_worker_id,
        config_version=config_version,
        status=status,
    )
