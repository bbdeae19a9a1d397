"""Consumer protocol codecs: golden bytes built from Kafka's schema, tolerant reading, errors."""

from __future__ import annotations

import struct

import pytest

from coordination.errors import ConfigurationError, ProtocolCodecError
from recipes.partitioning.protocol import (
    Assignment,
    ConsumerProtocolError,
    StickyUserData,
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

TP = TopicPartition


# Byte builders written from ConsumerProtocolSubscription.json / ...Assignment.json.
def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def s(v: str) -> bytes:
    return i16(len(v.encode())) + v.encode()


def b(v: bytes | None) -> bytes:
    return i32(-1) if v is None else i32(len(v)) + v


def tps(groups: list[tuple[str, list[int]]]) -> bytes:
    out = i32(len(groups))
    for topic, parts in groups:
        out += s(topic) + i32(len(parts)) + b"".join(i32(p) for p in parts)
    return out


SUB = Subscription(
    topics=("orders", "audit"),
    user_data=b"\x01\x02",
    owned_partitions=(TP("orders", 2), TP("audit", 0), TP("orders", 0)),
    generation_id=7,
    rack_id="rack-a",
)
# Kafka writes topics sorted and owned partitions grouped by topic, sorted.
V0 = i16(0) + i32(2) + s("audit") + s("orders") + b(b"\x01\x02")
V1 = V0[:0] + i16(1) + V0[2:] + tps([("audit", [0]), ("orders", [0, 2])])
V2 = i16(2) + V1[2:] + i32(7)
V3 = i16(3) + V2[2:] + s("rack-a")


@pytest.mark.parametrize(
    ("version", "expected"), [(0, V0), (1, V1), (2, V2), (3, V3)], ids=["v0", "v1", "v2", "v3"]
)
def test_subscription_golden_bytes(version: int, expected: bytes) -> None:
    assert encode_subscription(SUB, version) == expected


@pytest.mark.parametrize(
    ("data", "owned", "generation", "rack"),
    [
        (V0, (), -1, None),
        (V1, (TP("audit", 0), TP("orders", 0), TP("orders", 2)), -1, None),
        (V2, (TP("audit", 0), TP("orders", 0), TP("orders", 2)), 7, None),
        (V3, (TP("audit", 0), TP("orders", 0), TP("orders", 2)), 7, "rack-a"),
    ],
    ids=["v0", "v1", "v2", "v3"],
)
def test_subscription_decode_each_version(
    data: bytes, owned: tuple[TopicPartition, ...], generation: int, rack: str | None
) -> None:
    assert decode_subscription(data) == Subscription(
        ("audit", "orders"), b"\x01\x02", owned, generation, rack
    )


def test_subscription_null_and_empty_fields() -> None:
    null = Subscription(("t",), None, (), -1, None)
    data = encode_subscription(null)
    assert data == i16(3) + i32(1) + s("t") + i32(-1) + i32(0) + i32(-1) + i16(-1)
    assert decode_subscription(data) == null
    empty = Subscription(("t",), b"", (), -1, None)
    assert decode_subscription(encode_subscription(empty)).user_data == b""


def test_subscription_newer_version_ignores_appended_fields() -> None:
    future = i16(9) + V3[2:] + i32(12345) + s("a field from the future")
    decoded = decode_subscription(future)
    assert decoded.generation_id == 7
    assert decoded.rack_id == "rack-a"


@pytest.mark.parametrize(
    ("data", "generation", "user_data"),
    [
        # Header says v3 but the sender stopped after a whole field: defaults fill in.
        (i16(3) + i32(1) + s("t"), -1, None),
        (i16(3) + i32(1) + s("t") + b(b"u"), -1, b"u"),
        (i16(3) + i32(1) + s("t") + b(b"u") + tps([]), -1, b"u"),
        (i16(3) + i32(1) + s("t") + b(b"u") + tps([]) + i32(4), 4, b"u"),
    ],
)
def test_subscription_truncated_at_a_field_boundary(
    data: bytes, generation: int, user_data: bytes | None
) -> None:
    decoded = decode_subscription(data)
    assert decoded.topics == ("t",)
    assert decoded.generation_id == generation
    assert decoded.user_data == user_data


def test_subscription_empty_rack_is_no_rack() -> None:
    assert decode_subscription(i16(3) + V2[2:] + s("")).rack_id is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "version"),
        (b"\x00", "version"),
        (i16(-1) + i32(0), "unsupported version -1"),
        (i16(0) + i32(2) + s("a"), "topics needs 4 bytes"),
        (i16(0) + i32(1) + i16(3) + b"ab", "topic name needs 3 bytes"),
        (i16(0) + i32(-1), "topics has invalid length -1"),
        (i16(0) + i32(1) + i16(5) + b"ab", "topic name needs 5 bytes"),
        (i16(0) + i32(1) + i16(2) + b"\xff\xfe", "not valid UTF-8"),
        (i16(0) + i32(0) + i32(-2), "user data has invalid length -2"),
        (i16(0) + i32(0) + i32(10) + b"abc", "user data needs 10 bytes"),
        (i16(1) + i32(0) + b(None) + i32(1) + s("t") + i32(3) + i32(0), "partitions of 't'"),
        (i16(2) + i32(0) + b(None) + tps([]) + b"\x00\x01", "generation id"),
        (i16(3) + V2[2:] + i16(-5), "rack id has invalid length -5"),
        (i16(0) + i32(0x7FFFFFFF), "topics needs"),
    ],
)
def test_subscription_malformed(data: bytes, words: str) -> None:
    with pytest.raises(ConsumerProtocolError, match=words) as caught:
        decode_subscription(data)
    assert isinstance(caught.value, ProtocolCodecError)
    assert "subscription" in str(caught.value)


@pytest.mark.parametrize("version", [-1, 4])
def test_encode_rejects_unknown_versions(version: int) -> None:
    with pytest.raises(ConfigurationError, match="version"):
        encode_subscription(SUB, version)
    with pytest.raises(ConfigurationError, match="version"):
        encode_assignment(Assignment(()), version)


def test_assignment_golden_bytes_all_versions() -> None:
    # Kafka groups by topic in order of first appearance and keeps partition order.
    assignment = Assignment((TP("b", 1), TP("a", 0), TP("b", 0)), b"ud")
    body = tps([("b", [1, 0]), ("a", [0])]) + b(b"ud")
    for version in range(4):
        assert encode_assignment(assignment, version) == i16(version) + body
    assert decode_assignment(i16(3) + body) == Assignment(
        (TP("b", 1), TP("b", 0), TP("a", 0)), b"ud"
    )


def test_assignment_empty_null_newer_and_truncated() -> None:
    assert encode_assignment(Assignment(())) == i16(3) + i32(0) + i32(-1)
    assert decode_assignment(i16(3) + i32(0) + i32(-1)) == Assignment((), None)
    assert decode_assignment(i16(0) + i32(0) + i32(0)) == Assignment((), b"")
    assert decode_assignment(i16(7) + tps([("t", [3])]) + b(None) + b"later") == Assignment(
        (TP("t", 3),)
    )
    # No user data at all (some clients stop after the partitions).
    assert decode_assignment(i16(0) + tps([("t", [1])])) == Assignment((TP("t", 1),))


@pytest.mark.parametrize(
    "data",
    [b"\x00", i16(0) + i32(1) + s("t") + i32(2) + i32(1), i16(-3) + i32(0)],
)
def test_assignment_malformed(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError, match="assignment"):
        decode_assignment(data)


def test_cooperative_sticky_user_data_is_java_int32() -> None:
    assert encode_cooperative_sticky_user_data(-1) == b"\xff\xff\xff\xff"
    assert encode_cooperative_sticky_user_data(258) == b"\x00\x00\x01\x02"
    assert decode_cooperative_sticky_user_data(b"\xff\xff\xff\xff") == -1
    assert decode_cooperative_sticky_user_data(b"\x00\x00\x00\x09trailing") == 9
    with pytest.raises(ConsumerProtocolError, match="needs 4"):
        decode_cooperative_sticky_user_data(b"\x00\x01")


def test_sticky_user_data_layouts() -> None:
    partitions = (TP("t2", 0), TP("t1", 3), TP("t1", 1))
    v1 = tps([("t1", [1, 3]), ("t2", [0])]) + i32(5)
    assert encode_sticky_user_data(partitions, 5) == v1
    assert decode_sticky_user_data(v1) == StickyUserData((TP("t1", 1), TP("t1", 3), TP("t2", 0)), 5)
    # Version 0 had no generation.
    v0 = tps([("t1", [1])])
    assert encode_sticky_user_data([TP("t1", 1)], None) == v0
    assert decode_sticky_user_data(v0) == StickyUserData((TP("t1", 1),), None)
    with pytest.raises(ConsumerProtocolError, match="sticky user data"):
        decode_sticky_user_data(b"\x00\x00\x00\x01\x00")


def test_round_trip_many_shapes() -> None:
    for version in range(4):
        for sub in [
            Subscription(()),
            Subscription(("a",), b"", (TP("a", 0),), 0, "r"),
            Subscription(("é", "z" * 300), b"\x00" * 1000, (TP("é", 2**31 - 1),), 2**31 - 1),
        ]:
            decoded = decode_subscription(encode_subscription(sub, version))
            assert decoded.topics == tuple(sorted(sub.topics))
            assert decoded.user_data == sub.user_data
            if version >= 1:
                assert decoded.owned_partitions == tuple(sorted(sub.owned_partitions))
            if version >= 2:
                assert decoded.generation_id == sub.generation_id


def test_group_instance_id_is_not_on_the_wire() -> None:
    sub = Subscription(("t",), group_instance_id="static-1")
    assert encode_subscription(sub) == encode_subscription(Subscription(("t",)))
    assert decode_subscription(encode_subscription(sub)).group_instance_id is None


def test_topic_partition_equals_plain_tuple() -> None:
    assert TP("t", 1) == ("t", 1)
    assert hash(TP("t", 1)) == hash(("t", 1))
