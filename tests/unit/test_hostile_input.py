"""Decoders of bytes from other members raise only the typed codec error, whatever the bytes.

A member's metadata and a leader's assignment come from the network: one broken or
malicious member must not crash the rebalance leader (or every member) with an exception
nobody catches. Each decoder is fed thousands of seeded random inputs (random bytes,
truncations, bit flips, splices and hostile lengths of valid encodings, deep nesting) and
may only return or raise :class:`~coordination.errors.ProtocolCodecError`.
"""

from __future__ import annotations

import json
import random
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from coordination.errors import ProtocolCodecError
from recipes.election._wire import (
    Candidate,
    Outcome,
    decode_candidate,
    decode_outcome,
    encode_candidate,
    encode_outcome,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from recipes.tasks._assignor import AssignmentStatus, WorkerAssignment, WorkerState
from recipes.tasks._wire import decode_assignment as decode_task_assignment
from recipes.tasks._wire import decode_worker_metadata, encode_worker_metadata
from recipes.tasks._wire import encode_assignment as encode_task_assignment

INPUTS_PER_DECODER = 10_000
TIME_BUDGET_S = 10.0  # per decoder; a few seconds is typical on a shared core

TP = TopicPartition
Decoder = Callable[[bytes], object]


# -- valid samples, the seeds of the mutations ------------------------------------------------


def _election_samples() -> list[bytes]:
    return [
        encode_candidate(Candidate("http://a:1")),
        encode_candidate(Candidate("http://[::1]:8080", False, -3, 7, 9)),
        encode_candidate(Candidate("ü", True, 2**62, None, 2**40)),
    ]


def _outcome_samples() -> list[bytes]:
    return [
        encode_outcome(Outcome(None, None, None, {})),
        encode_outcome(
            Outcome("m-1", "http://a", 12, {"m-1": "http://a", "m-2": "http://b"}, ("x",), ("y",))
        ),
    ]


def _subscription_samples() -> list[bytes]:
    sub = Subscription(
        ("orders", "payments"),
        b"\x00\x01",
        (TP("orders", 0), TP("orders", 3), TP("payments", 1)),
        7,
        "rack-a",
    )
    return [encode_subscription(sub, v) for v in range(4)] + [
        encode_subscription(Subscription(()), 0)
    ]


def _assignment_samples() -> list[bytes]:
    a = Assignment((TP("orders", 2), TP("orders", 0), TP("x", 5)), b"ud")
    return [encode_assignment(a, v) for v in range(4)] + [encode_assignment(Assignment(()))]


def _sticky_samples() -> list[bytes]:
    parts = (TP("orders", 0), TP("orders", 1), TP("x", 9))
    return [encode_sticky_user_data(parts, 4), encode_sticky_user_data(parts, None)]


def _worker_samples() -> list[bytes]:
    return [
        encode_worker_metadata(
            WorkerState(
                member_id="m",
                worker_id="w-1",
                owned=frozenset({"a", "b"}),
                capacity=2.5,
                config_version=3,
            )
        ),
        encode_worker_metadata(WorkerState(member_id="m", worker_id="w-2")),
    ]


def _task_assignment_samples() -> list[bytes]:
    return [
        encode_task_assignment(
            WorkerAssignment(
                assigned=("a", "b"),
                revoked=("c",),
                delay_ms=0,
                leader_id="m-1",
                leader_worker_id="w-1",
                config_version=4,
                status=AssignmentStatus.OK,
            )
        ),
        encode_task_assignment(
            WorkerAssignment(delay_ms=250, leader_id="m-1", leader_worker_id="w-1")
        ),
    ]


# -- hostile inputs ---------------------------------------------------------------------------


_HOSTILE_JSON = [
    b"",
    b"\xff\xfe{}",
    b"\xef\xbb\xbf{}",
    b"null",
    b"[]",
    b'"v"',
    b'{"v":1}',
    b'{"v":true,"identity":"a"}',
    b'{"v":1.0,"identity":"a"}',
    b'{"v":NaN,"identity":"a"}',
    b'{"v":1,"identity":"a","priority":Infinity}',
    b'{"v":1,"identity":"a","priority":-Infinity}',
    b'{"v":1,"identity":"a","priority":NaN}',
    b'{"v":1,"identity":"a","priority":1e400}',
    b'{"v":1,"identity":"a","priority":1.5}',
    b'{"v":1,"identity":"a","priority":"5"}',
    b'{"v":1,"identity":"a","priority":true}',
    b'{"v":1,"identity":"a","priority":' + b"9" * 5000 + b"}",
    b'{"v":1,"identity":"a","priority":' + str(2**63).encode() + b"}",
    b'{"v":1,"identity":"a","highest_token":' + str(2**63 - 1).encode() + b"}",
    b'{"v":1,"identity":"a","leading_token":[1]}',
    b'{"v":1,"identity":"a","eligible":"false"}',
    b'{"v":1,"identity":"a","eligible":0}',
    b'{"v":1,"identity":["a"]}',
    b'{"v":1,"identity":""}',
    b'{"v":1,"identity":"\\ud800"}',
    b'{"v":1,"identity":"a","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"v":1,"identity":"a","x":' + b'{"a":' * 50_000 + b"0" + b"}" * 50_000 + b"}",
    b"[" * 1_000_000,
    b'{"v":1,"members":{"a":{"b":1}}}',
    b'{"v":1,"members":[["a","b"]]}',
    b'{"v":1,"problems":"abc"}',
    b'{"v":1,"problems":[1,2]}',
    b'{"v":1,"duplicates":{"a":1}}',
    b'{"v":1,"leader":7}',
    b'{"v":1,"leader":"m","leader_identity":{"x":1}}',
    b'{"v":1,"token":1e400}',
    b'{"v":1,"token":"7"}',
    b'{"v":1,"token":' + str(2**64).encode() + b"}",
    b'{"v":1,"identity":"' + b"a" * (17 << 20) + b'"}',
    b'{"v":1,"identity":"a"' + b" " * (17 << 20) + b"}",
    b'"' + b'\\"' * 200_000,
]


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _hostile_binary() -> list[bytes]:
    """Hand-made inputs with lengths that would make a naive decoder allocate gigabytes."""
    huge = [2**31 - 1, 2**31 - 2, 0x7FFF, -2, -(2**31)]
    out = [b"", b"\x00", b"\x00\x00", b"\xff\xff", b"\x7f\xff" * 8]
    for n in huge:
        out.append(b"\x00\x00" + _int32(n))  # version 0, then a count
        out.append(b"\x00\x03" + _int32(0) + _int32(n))  # user data length
        out.append(b"\x00\x03" + _int32(0) + _int32(-1) + _int32(n))  # owned partitions
        out.append(b"\x00\x03" + _int32(0) + _int32(-1) + _int32(1) + b"\x00\x01t" + _int32(n))
        out.append(_int32(n))  # sticky user data: topic count
        out.append(_int32(1) + b"\x00\x01t" + _int32(n))  # sticky user data: partitions
        out.append(b"\x00\x00" + _int32(1) + b"\x00\x01t" + _int32(n))  # assignment
        out.append(b"\x00\x00" + struct.pack(">h", n & 0x7FFF) + b"w")  # worker id
        out.append(b"\x00\x00\x00\x01w" + bytes(8) + b"\x00" + _int32(n))  # owned tasks
    out.append(b"\x00\x00\x00\x01w" + bytes(8) + b"\x01" + struct.pack(">d", float("nan")))
    out.append(b"\x00\x00\x00\x01w" + bytes(8) + b"\x01" + struct.pack(">d", float("inf")))
    out.append(b"\x00\x00\x00\x01w" + bytes(8) + b"\x01" + struct.pack(">d", -1.0))
    out.append(b"\x00\x00\x00\x05\x00\x01\xed\xa0\x80" + bytes(10))  # surrogate in UTF-8
    return out


_JSON_VALUES = [
    b"NaN", b"Infinity", b"1e400", b"-1e400", b"1.5", b'"1"', b"true", b"null", b"[]", b"{}",
    b"9", b"[", b"{", b'{"a":', b"-9", b'"\\ud800"', b'"\\u0000"', b'"\\', b"\\",
]  # fmt: skip


def _mutations(rng: random.Random, samples: list[bytes], json_like: bool) -> Iterator[bytes]:
    """Random variations of the valid samples: each kind of damage a wire can do, and worse."""
    alphabet = b'{}[]":,0123456789-.eEtrufalsnNIiy \\u' if json_like else bytes(range(256))
    while True:
        data = bytearray(rng.choice(samples))
        kind = rng.randrange(10 if json_like else 9)
        if kind == 9:  # JSON: one field of a valid document gets a hostile value
            doc = json.loads(data)
            doc[rng.choice([*doc, "x"])] = "\0hole"
            text = json.dumps(doc).encode()
            hostile = rng.choice(_JSON_VALUES) * rng.choice([1, 1, 1, 2, 5000])
            yield text.replace(b'"\\u0000hole"', hostile)
            continue
        if kind == 0:  # random bytes
            yield rng.randbytes(rng.randrange(64))
            continue
        if kind == 1 and data:  # truncation
            yield bytes(data[: rng.randrange(len(data))])
            continue
        for _ in range(rng.randrange(1, 4)):
            if not data:
                break
            at = rng.randrange(len(data))
            if kind == 2:  # bit flips
                data[at] ^= 1 << rng.randrange(8)
            elif kind == 3:  # byte overwrite
                data[at] = rng.choice(alphabet)
            elif kind == 4:  # insertion
                data[at:at] = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 6)))
            elif kind == 5:  # deletion
                del data[at : at + rng.randrange(1, 6)]
            elif kind == 6:  # hostile int16 / int32 length or number at a random place
                value = rng.choice([0x7FFF, -1, -2, 2**31 - 1, -(2**31), 2**31 - 2])
                size = "i" if abs(value) > 0x7FFF else "h"
                packed = struct.pack(">" + size, value)
                data[at : at + len(packed)] = packed
            elif kind == 7:  # splice of two samples
                other = rng.choice(samples)
                data = data[:at] + bytearray(other[rng.randrange(len(other) or 1) :])
            else:  # JSON: replace a value with a hostile one
                token = rng.choice(_JSON_VALUES) * rng.choice([1, 1, 1, 2, 5000])
                data[at : at + rng.randrange(1, 4)] = token
        yield bytes(data)


def _check(decoder: Decoder, data: bytes) -> None:
    try:
        decoder(data)
    except ProtocolCodecError:
        pass
    except Exception as e:
        raise AssertionError(
            f"{decoder.__name__} raised {type(e).__name__}: {e!s:.200} on {data[:120]!r}"
            f" ({len(data)} bytes)"
        ) from e


CASES: list[tuple[str, Decoder, Callable[[], list[bytes]], bool]] = [
    ("election candidate", decode_candidate, _election_samples, True),
    ("election outcome", decode_outcome, _outcome_samples, True),
    ("consumer subscription", decode_subscription, _subscription_samples, False),
    ("consumer assignment", decode_assignment, _assignment_samples, False),
    ("sticky user data", decode_sticky_user_data, _sticky_samples, False),
    (
        "cooperative-sticky user data",
        decode_cooperative_sticky_user_data,
        lambda: [encode_cooperative_sticky_user_data(5)],
        False,
    ),
    ("task worker metadata", lambda d: decode_worker_metadata("m", d), _worker_samples, False),
    ("task assignment", decode_task_assignment, _task_assignment_samples, False),
]


@pytest.mark.parametrize(
    ("decoder", "samples", "json_like"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decoder_raises_only_the_codec_error(
    decoder: Decoder, samples: Callable[[], list[bytes]], json_like: bool
) -> None:
    valid = samples()
    for data in valid:
        decoder(data)  # the samples themselves decode
    hostile = _HOSTILE_JSON if json_like else _hostile_binary()
    for data in hostile:
        _check(decoder, data)
    rng = random.Random(f"hostile-{samples.__name__}")
    started = time.monotonic()
    mutations = _mutations(rng, valid, json_like)
    for _ in range(INPUTS_PER_DECODER):
        _check(decoder, next(mutations))
    assert time.monotonic() - started < TIME_BUDGET_S


@pytest.mark.parametrize(
    ("decoder", "samples", "json_like"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_declared_huge_lengths_do_not_allocate(
    decoder: Decoder, samples: Callable[[], list[bytes]], json_like: bool
) -> None:
    inputs = [b'{"v":1,"identity":"a","x":' + b"[" * 200_000] if json_like else _hostile_binary()
    tracemalloc.start()
    try:
        for data in inputs:
            tracemalloc.reset_peak()
            _check(decoder, data)
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 16 * len(data) + (1 << 20), (data[:40], peak)
    finally:
        tracemalloc.stop()


def test_election_numbers_must_be_in_range_integers() -> None:
    ok = json.dumps({"v": 1, "identity": "a", "priority": -(2**63), "highest_token": 2**63 - 2})
    assert decode_candidate(ok.encode()).highest_token == 2**63 - 2
    cases: list[tuple[str, object]] = [
        ("priority", 2**63),
        ("priority", 1.0),
        ("priority", True),
        ("leading_token", 2**63 - 1),  # leaves no room for a higher token
        ("highest_token", -(2**63) - 1),
        ("eligible", 1),
    ]
    for field, value in cases:
        doc = json.dumps({"v": 1, "identity": "a", field: value}).encode()
        with pytest.raises(ProtocolCodecError, match=field):
            decode_candidate(doc)
    for field, value in [("token", 2**63), ("token", "1"), ("leader", 1), ("members", [])]:
        doc = json.dumps({"v": 1, field: value}).encode()
        with pytest.raises(ProtocolCodecError, match=field):
            decode_outcome(doc)
