"""The task-distribution wire format: golden bytes, round trips, newer versions, bad bytes."""

from __future__ import annotations

import contextlib
import math
import random
import struct

import pytest

from coordination.errors import ProtocolCodecError
from recipes.tasks._assignor import (
    AssignmentStatus,
    LeaderMemory,
    WorkerAssignment,
    WorkerState,
    assign,
)
from recipes.tasks._wire import (
    ASSIGNMENT_VERSION,
    METADATA_VERSION,
    decode_assignment,
    decode_worker_metadata,
    encode_assignment,
    encode_worker_metadata,
)

STATE = WorkerState(
    member_id="m-1",
    worker_id="w1",
    owned=frozenset({"b", "a"}),
    capacity=2.5,
    config_version=3,
)
STATE_BYTES = bytes.fromhex(
    "0000"  # version 0
    "0002"
    "7731"  # worker_id "w1"
    "0000000000000003"  # config_version 3
    "01"
    "4004000000000000"  # capacity 2.5
    "00000002"
    "0001"
    "61"
    "0001"
    "62"  # owned ["a", "b"]
)

ASSIGNMENT = WorkerAssignment(
    assigned=("a",),
    revoked=("b",),
    delay_ms=5,
    leader_id="m",
    leader_worker_id="w1",
    config_version=3,
    status=AssignmentStatus.OK,
)
ASSIGNMENT_BYTES = bytes.fromhex(
    "0000"  # version 0
    "0000"  # status OK
    "0001"
    "6d"  # leader_id "m"
    "0002"
    "7731"  # leader_worker_id "w1"
    "0000000000000003"  # config_version 3
    "00000005"  # delay_ms 5
    "00000001"
    "0001"
    "61"  # assigned ["a"]
    "00000001"
    "0001"
    "62"  # revoked ["b"]
)


# -- golden bytes ---------------------------------------------------------------------------


def test_worker_metadata_v0_golden_bytes() -> None:
    assert METADATA_VERSION == 0
    assert encode_worker_metadata(STATE) == STATE_BYTES
    assert decode_worker_metadata("m-1", STATE_BYTES) == STATE


def test_worker_metadata_without_capacity_golden_bytes() -> None:
    state = WorkerState(member_id="m", worker_id="w")
    data = bytes.fromhex("000000017700000000000000000000000000")
    assert encode_worker_metadata(state) == data
    assert decode_worker_metadata("m", data) == state


def test_assignment_v0_golden_bytes() -> None:
    assert ASSIGNMENT_VERSION == 0
    assert encode_assignment(ASSIGNMENT) == ASSIGNMENT_BYTES
    assert decode_assignment(ASSIGNMENT_BYTES) == ASSIGNMENT


def test_the_member_id_comes_from_the_caller_not_the_bytes() -> None:
    assert decode_worker_metadata("other", STATE_BYTES).member_id == "other"


# -- round trips ----------------------------------------------------------------------------


def random_name(rng: random.Random) -> str:
    alphabet = "abcxyz-_.:/0123456789é漢字🙂"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))


@pytest.mark.parametrize("seed", range(30))
def test_worker_metadata_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    state = WorkerState(
        member_id=random_name(rng),
        worker_id=random_name(rng),
        owned=frozenset(random_name(rng) for _ in range(rng.randint(0, 20))),
        capacity=rng.choice([None, 0.0, 1.0, rng.uniform(0, 1e6)]),
        config_version=rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(0, 10**9)]),
    )
    assert decode_worker_metadata(state.member_id, encode_worker_metadata(state)) == state


@pytest.mark.parametrize("seed", range(30))
def test_assignment_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    names = sorted({random_name(rng) for _ in range(rng.randint(0, 30))})
    split = rng.randint(0, len(names))
    assignment = WorkerAssignment(
        assigned=tuple(names[:split]),
        revoked=tuple(names[split:]),
        delay_ms=rng.choice([0, 1, 2**31 - 1]),
        leader_id=rng.choice(["", random_name(rng)]),
        leader_worker_id=random_name(rng),
        config_version=rng.randint(-(2**63), 2**63 - 1),
        status=rng.choice(list(AssignmentStatus)),
    )
    assert decode_assignment(encode_assignment(assignment)) == assignment


def test_the_longest_string_fits() -> None:
    state = WorkerState(member_id="m", worker_id="w" * 0x7FFF)
    assert decode_worker_metadata("m", encode_worker_metadata(state)) == state


def test_assignments_from_assign_survive_the_wire() -> None:
    workers = [
        WorkerState(member_id="m0", worker_id="w0", owned=frozenset({"a", "b", "c"})),
        WorkerState(member_id="m1", worker_id="w1", capacity=4.0),
    ]
    decoded = [decode_worker_metadata(w.member_id, encode_worker_metadata(w)) for w in workers]
    assert decoded == workers
    result = assign(
        {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0},
        decoded,
        LeaderMemory(),
        leader_id="m0",
        now_ms=0,
        max_delay_ms=1000,
    )
    for a in result.assignments.values():
        assert decode_assignment(encode_assignment(a)) == a


# -- compatibility --------------------------------------------------------------------------


def test_a_newer_worker_metadata_version_with_appended_fields_is_read() -> None:
    newer = struct.pack(">h", 7) + STATE_BYTES[2:] + b"\x00\x05extra"
    assert decode_worker_metadata("m-1", newer) == STATE


def test_a_newer_assignment_version_with_appended_fields_is_read() -> None:
    newer = struct.pack(">h", 1) + ASSIGNMENT_BYTES[2:] + b"\xff" * 9
    assert decode_assignment(newer) == ASSIGNMENT


def test_tasks_are_written_sorted_whatever_the_input_order() -> None:
    a = WorkerAssignment(assigned=("b", "a"))
    assert decode_assignment(encode_assignment(a)).assigned == ("a", "b")


# -- bad bytes ------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", range(len(STATE_BYTES)))
def test_truncated_worker_metadata_is_refused(cut: int) -> None:
    with pytest.raises(ProtocolCodecError, match="worker metadata of member 'm'"):
        decode_worker_metadata("m", STATE_BYTES[:cut])


@pytest.mark.parametrize("cut", range(len(ASSIGNMENT_BYTES)))
def test_truncated_assignments_are_refused(cut: int) -> None:
    with pytest.raises(ProtocolCodecError, match="assignment"):
        decode_assignment(ASSIGNMENT_BYTES[:cut])


def test_an_empty_assignment_says_the_leader_sent_nothing() -> None:
    with pytest.raises(ProtocolCodecError, match="leader sent this member nothing"):
        decode_assignment(b"")


def test_truncation_is_reported_with_field_and_offset() -> None:
    with pytest.raises(ProtocolCodecError) as info:
        decode_worker_metadata("m", STATE_BYTES[:8])
    text = str(info.value)
    assert "truncated" in text and "config_version" in text and "at byte 6" in text


def metadata(
    *,
    version: int = 0,
    worker_id: bytes = b"w",
    has_capacity: int = 0,
    capacity: float = 0.0,
    owned: list[bytes] | None = None,
    count: int | None = None,
) -> bytes:
    items = owned if owned is not None else []
    data = struct.pack(">hh", version, len(worker_id)) + worker_id + struct.pack(">q", 0)
    data += struct.pack(">b", has_capacity)
    if has_capacity == 1:
        data += struct.pack(">d", capacity)
    data += struct.pack(">i", len(items) if count is None else count)
    for item in items:
        data += struct.pack(">h", len(item)) + item
    return data


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (metadata(version=-1), "unknown version -1"),
        (metadata(worker_id=b""), "worker_id is empty"),
        (metadata(worker_id=b"\xff\xfe"), "worker_id is not valid UTF-8"),
        (metadata(has_capacity=2), "has_capacity is 2"),
        (metadata(has_capacity=1, capacity=-1.0), "capacity -1.0"),
        (metadata(has_capacity=1, capacity=math.nan), "capacity nan"),
        (metadata(has_capacity=1, capacity=math.inf), "capacity inf"),
        (metadata(owned=[b"a", b"a"]), "owned has duplicates"),
        (metadata(count=-1), "impossible count -1"),
        (metadata(count=2**31 - 1), "impossible count"),
        (metadata() + b"\x00", "1 unexpected trailing bytes"),
        (struct.pack(">hh", 0, -5), "worker_id has negative length -5"),
    ],
)
def test_bad_worker_metadata_is_refused_with_a_clear_message(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolCodecError, match=match):
        decode_worker_metadata("m", data)


def assignment_bytes(
    *, status: int = 0, delay_ms: int = 0, assigned: list[bytes], revoked: list[bytes]
) -> bytes:
    data = struct.pack(">hh", 0, status) + b"\x00\x00\x00\x00" + struct.pack(">qi", 0, delay_ms)
    for items in (assigned, revoked):
        data += struct.pack(">i", len(items))
        for item in items:
            data += struct.pack(">h", len(item)) + item
    return data


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (assignment_bytes(status=9, assigned=[], revoked=[]), "unknown status 9"),
        (assignment_bytes(delay_ms=-1, assigned=[], revoked=[]), "delay_ms -1 is negative"),
        (assignment_bytes(assigned=[b"a"], revoked=[b"a"]), "both assigned and revoked"),
        (assignment_bytes(assigned=[b"a", b"a"], revoked=[]), "assigned has duplicates"),
        (assignment_bytes(assigned=[], revoked=[b"\xc3"]), "revoked is not valid UTF-8"),
        (ASSIGNMENT_BYTES + b"\x00\x00", "2 unexpected trailing bytes"),
        (struct.pack(">h", -3) + ASSIGNMENT_BYTES[2:], "unknown version -3"),
    ],
)
def test_bad_assignments_are_refused_with_a_clear_message(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolCodecError, match=match):
        decode_assignment(data)


@pytest.mark.parametrize("seed", range(20))
def test_random_garbage_never_escapes_as_another_exception(seed: int) -> None:
    rng = random.Random(seed)
    for base in (STATE_BYTES, ASSIGNMENT_BYTES):
        for _ in range(200):
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            with contextlib.suppress(ProtocolCodecError):
                decode_worker_metadata("m", bytes(data))
            with contextlib.suppress(ProtocolCodecError):
                decode_assignment(bytes(data))


# -- what cannot be encoded -----------------------------------------------------------------


def test_a_string_over_32767_bytes_cannot_be_encoded() -> None:
    state = WorkerState(member_id="m", worker_id="é" * 0x4000)
    with pytest.raises(ProtocolCodecError, match="worker_id is 32768 bytes"):
        encode_worker_metadata(state)


def test_a_config_version_beyond_int64_cannot_be_encoded() -> None:
    state = WorkerState(member_id="m", worker_id="w", config_version=2**63)
    with pytest.raises(ProtocolCodecError, match=r"config_version=.* out of range"):
        encode_worker_metadata(state)


@pytest.mark.parametrize(
    ("assignment", "match"),
    [
        (WorkerAssignment(delay_ms=2**31), "delay_ms=.* out of range"),
        (WorkerAssignment(delay_ms=-1), "delay_ms=-1 < 0"),
        (WorkerAssignment(assigned=("a",), revoked=("a",)), "both assigned and revoked"),
        (WorkerAssignment(assigned=("a", "a")), "assigned has duplicates"),
    ],
)
def test_invalid_assignments_cannot_be_encoded(assignment: WorkerAssignment, match: str) -> None:
    with pytest.raises(ProtocolCodecError, match=match):
        encode_assignment(assignment)
