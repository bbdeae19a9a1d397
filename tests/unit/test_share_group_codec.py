"""The share-group messages (KIP-932) on the wire: the bytes Kafka's own client writes
(golden, from kafka-clients 4.3.1's generated classes; tests/interop/
test_share_group_golden.py checks them against Java again), a round trip of generated
messages, malformed input refused with ProtocolCodecError, the records of a ShareFetch
(a batch Java wrote), and the transport's version choice from the broker's ApiVersions.
"""

from __future__ import annotations

import uuid

import kafka.errors as kafka_errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from coordination._protocol import messages as m
from coordination._protocol import share_group_codec as codec
from coordination._protocol.consumer_group import DescribedTopicPartitions, TopicIdPartitions
from coordination._protocol.error_codes import ErrorCode
from coordination._protocol.share_group import (
    AcknowledgementBatch,
    AcknowledgeType,
    AcquiredRecords,
    DescribedShareGroup,
    DescribedShareGroupMember,
    LeaderIdAndEpoch,
    NodeEndpoint,
    ShareAcknowledgePartition,
    ShareAcknowledgePartitionData,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopic,
    ShareAcknowledgeTopicResponse,
    ShareAcquireMode,
    ShareFetchPartition,
    ShareFetchPartitionData,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareFetchTopic,
    ShareFetchTopicResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareRecord,
)
from coordination._protocol.wire import encode_request_header, encode_response_header
from coordination._transport.kafka import KafkaTransport, _OwnCodecRequest
from coordination.errors import ProtocolCodecError
from coordination.testing import ScriptedTransport

ORDERS = uuid.UUID("01234567-89ab-cdef-0fed-cba987654321")
PAYMENTS = uuid.UUID("11111111-1111-1111-2222-222222222222")
# The record batch ShareGroupWire.java builds (MemoryRecords.withRecords from offset 10).
RECORDS = bytes.fromhex(
    "000000000000000a00000063ffffffff023abfb5ce0000000000020000018bcfe568000000018bcfe568"
    "02ffffffffffffffffffffffffffff000000033a000000066b2d3106762d31040a747261636506616263"
    "0a656d70747901120002020106762d320012000404066b2d330100"
)
RECORDS_READ = (
    ShareRecord(10, b"k-1", b"v-1", (("trace", b"abc"), ("empty", None)), 1_700_000_000_000),
    ShareRecord(11, None, b"v-2", (), 1_700_000_000_001),
    ShareRecord(12, b"k-3", None, (), 1_700_000_000_002),
)


def _cases() -> dict[str, tuple[codec.Message, int]]:
    """The messages of tests/interop/java/ShareGroupWire.java, by the same names."""
    cases: dict[str, tuple[codec.Message, int]] = {
        "heartbeat-request-join-v1": (
            ShareGroupHeartbeatRequest("orders-app", "m-1", 0, "rack-a", ("orders", "payments")),
            1,
        ),
        "heartbeat-request-unchanged-v1": (ShareGroupHeartbeatRequest("orders-app", "m-1", 7), 1),
        "heartbeat-request-leave-v1": (
            ShareGroupHeartbeatRequest("g", "m-\u00fc", -1, None, ()),
            1,
        ),
        "heartbeat-response-no-assignment-v1": (
            ShareGroupHeartbeatResponse(
                0, member_id="m-1", member_epoch=3, heartbeat_interval_ms=5000
            ),
            1,
        ),
        "heartbeat-response-empty-assignment-v1": (
            ShareGroupHeartbeatResponse(
                0,
                member_id="m-1",
                member_epoch=1,
                heartbeat_interval_ms=5000,
                assignment=(),
                throttle_time_ms=10,
            ),
            1,
        ),
        "heartbeat-response-assignment-v1": (
            ShareGroupHeartbeatResponse(
                0,
                member_id="m-1",
                member_epoch=2,
                heartbeat_interval_ms=5000,
                assignment=(TopicIdPartitions(ORDERS, (1, 0)), TopicIdPartitions(PAYMENTS, (4,))),
            ),
            1,
        ),
        "heartbeat-response-error-v1": (
            ShareGroupHeartbeatResponse(25, error_message="unknown member", member_epoch=-1),
            1,
        ),
        "describe-request-v1": (ShareGroupDescribeRequest(("orders-app", "other"), True), 1),
        "describe-request-none-v1": (ShareGroupDescribeRequest(()), 1),
        "describe-response-v1": (
            ShareGroupDescribeResponse(
                (
                    DescribedShareGroup(
                        0,
                        "orders-app",
                        group_state="Stable",
                        group_epoch=5,
                        assignment_epoch=5,
                        assignor_name="simple",
                        members=(
                            DescribedShareGroupMember(
                                member_id="m-1",
                                rack_id="rack-a",
                                member_epoch=4,
                                client_id="client",
                                client_host="/127.0.0.1",
                                subscribed_topic_names=("orders", "payments"),
                                assignment=(
                                    DescribedTopicPartitions(ORDERS, "orders", (0, 1)),
                                    DescribedTopicPartitions(PAYMENTS, "payments", ()),
                                ),
                            ),
                            DescribedShareGroupMember("m-2", None, 4, "c", "h", (), ()),
                        ),
                        authorized_operations=0x0F00,
                    ),
                    DescribedShareGroup(
                        69, "other", error_message="Group other not found.", group_state="Dead"
                    ),
                )
            ),
            1,
        ),
    }
    for v in (1, 2):
        cases[f"fetch-request-open-v{v}"] = (
            ShareFetchRequest(
                "orders-app",
                "m-1",
                0,
                max_wait_ms=500,
                min_bytes=1,
                max_records=500,
                batch_size=500,
                share_acquire_mode=ShareAcquireMode.RECORD_LIMIT if v >= 2 else 0,
                topics=(
                    ShareFetchTopic(ORDERS, (ShareFetchPartition(0), ShareFetchPartition(1))),
                    ShareFetchTopic(PAYMENTS, (ShareFetchPartition(2),)),
                ),
            ),
            v,
        )
        accept_or_renew = AcknowledgeType.RENEW if v >= 2 else AcknowledgeType.ACCEPT
        cases[f"fetch-request-acks-v{v}"] = (
            ShareFetchRequest(
                "orders-app",
                "m-1",
                3,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1_048_576,
                max_records=1,
                batch_size=1,
                is_renew_ack=v >= 2,
                topics=(
                    ShareFetchTopic(
                        ORDERS,
                        (
                            ShareFetchPartition(
                                0,
                                (
                                    AcknowledgementBatch(10, 12, (accept_or_renew,)),
                                    AcknowledgementBatch(13, 15, (1, 0, 2)),
                                ),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(TopicIdPartitions(PAYMENTS, (2,)),),
            ),
            v,
        )
        cases[f"fetch-request-close-v{v}"] = (
            ShareFetchRequest(None, "m-\u00fc", -1, 0, 0, max_records=0, batch_size=0),
            v,
        )
        cases[f"fetch-response-v{v}"] = (
            ShareFetchResponse(
                0,
                acquisition_lock_timeout_ms=30_000,
                responses=(
                    ShareFetchTopicResponse(
                        ORDERS,
                        (
                            ShareFetchPartitionData(
                                0,
                                current_leader=LeaderIdAndEpoch(1, 0),
                                records=RECORDS,
                                acquired_records=(
                                    AcquiredRecords(10, 11, 1),
                                    AcquiredRecords(12, 12, 2),
                                ),
                            ),
                            ShareFetchPartitionData(
                                1,
                                error_code=6,
                                error_message="not the leader",
                                acknowledge_error_code=121,
                                acknowledge_error_message="lock lost",
                                current_leader=LeaderIdAndEpoch(2, 7),
                            ),
                        ),
                    ),
                ),
                node_endpoints=(
                    NodeEndpoint(2, "broker-2", 9092, "rack-b"),
                    NodeEndpoint(3, "h", 1),
                ),
                version=v,
            ),
            v,
        )
        cases[f"fetch-response-error-v{v}"] = (
            ShareFetchResponse(
                122,
                "no share session",
                acquisition_lock_timeout_ms=-1,
                throttle_time_ms=5,
                version=v,
            ),
            v,
        )
        cases[f"acknowledge-request-v{v}"] = (
            ShareAcknowledgeRequest(
                "orders-app",
                "m-1",
                2,
                is_renew_ack=v >= 2,
                topics=(
                    ShareAcknowledgeTopic(
                        ORDERS,
                        (
                            ShareAcknowledgePartition(
                                0, (AcknowledgementBatch(10, 12, (accept_or_renew,)),)
                            ),
                            ShareAcknowledgePartition(
                                1, (AcknowledgementBatch(20, 22, (2, 3, 0)),)
                            ),
                        ),
                    ),
                    ShareAcknowledgeTopic(PAYMENTS, (ShareAcknowledgePartition(2, ()),)),
                ),
            ),
            v,
        )
        cases[f"acknowledge-response-v{v}"] = (
            ShareAcknowledgeResponse(
                0,
                acquisition_lock_timeout_ms=15_000 if v >= 2 else 0,
                responses=(
                    ShareAcknowledgeTopicResponse(
                        ORDERS,
                        (
                            ShareAcknowledgePartitionData(0, current_leader=LeaderIdAndEpoch(1, 0)),
                            ShareAcknowledgePartitionData(1, 121, "lock lost"),
                        ),
                    ),
                ),
                node_endpoints=(NodeEndpoint(2, "broker-2", 9092, "rack-b"),),
                version=v,
            ),
            v,
        )
    return cases


CASES = _cases()
HEADERS: dict[str, bytes] = {
    "request-header-v2": encode_request_header(78, 2, 12345, "coordination-1"),
    "response-header-v1": encode_response_header(12345),
}

# What kafka-clients 4.3.1 writes for each case (ShareGroupWire.java's output).
GOLDEN: dict[str, str] = {
    "heartbeat-request-join-v1": (
        "0b6f72646572732d617070046d2d3100000000077261636b2d6103076f7264657273097061796d656e747300"
    ),
    "heartbeat-request-unchanged-v1": "0b6f72646572732d617070046d2d3100000007000000",
    "heartbeat-request-leave-v1": "0267056d2dc3bcffffffff000100",
    "heartbeat-response-no-assignment-v1": "00000000000000046d2d310000000300001388ff00",
    "heartbeat-response-empty-assignment-v1": "0000000a000000046d2d31000000010000138801010000",
    "heartbeat-response-assignment-v1": (
        "00000000000000046d2d31000000020000138801030123456789abcdef0fedcba98765432103"
        "000000010000000000111111111111111122222222222222220200000004000000"
    ),
    "heartbeat-response-error-v1": (
        "0000000000190f756e6b6e6f776e206d656d62657200ffffffff00000000ff00"
    ),
    "describe-request-v1": "030b6f72646572732d617070066f746865720100",
    "describe-request-none-v1": "010000",
    "describe-response-v1": (
        "00000000030000000b6f72646572732d61707007537461626c6500000005000000050773696d"
        "706c6503046d2d31077261636b2d610000000407636c69656e740b2f3132372e302e302e3103"
        "076f7264657273097061796d656e7473030123456789abcdef0fedcba987654321076f726465"
        "72730300000000000000010011111111111111112222222222222222097061796d656e747301"
        "000000046d2d320000000004026302680101000000000f000000451747726f7570206f746865"
        "72206e6f7420666f756e642e066f746865720544656164ffffffffffffffff01018000000000"
        "00"
    ),
    "fetch-request-open-v1": (
        "0b6f72646572732d617070046d2d3100000000000001f4000000017fffffff000001f4000001"
        "f4030123456789abcdef0fedcba9876543210300000000010000000001010000111111111111"
        "1111222222222222222202000000020100000100"
    ),
    "fetch-request-acks-v1": (
        "0b6f72646572732d617070046d2d310000000300000000000000000010000000000001000000"
        "01020123456789abcdef0fedcba987654321020000000003000000000000000a000000000000"
        "000c020100000000000000000d000000000000000f0401000200000002111111111111111122"
        "2222222222222202000000020000"
    ),
    "fetch-request-close-v1": "00056d2dc3bcffffffff00000000000000007fffffff0000000000000000010100",
    "fetch-response-v1": (
        "0000000000000000007530020123456789abcdef0fedcba98765432103000000000000000000"
        "0000000001000000000070000000000000000a00000063ffffffff023abfb5ce000000000002"
        "0000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff000000033a000000"
        "066b2d3106762d31040a7472616365066162630a656d70747901120002020106762d32001200"
        "0404066b2d33010003000000000000000a000000000000000b000100000000000000000c0000"
        "00000000000c000200000000000100060f6e6f7420746865206c656164657200790a6c6f636b"
        "206c6f73740000000200000007000101000003000000020962726f6b65722d32000023840772"
        "61636b2d620000000003026800000001000000"
    ),
    "fetch-response-error-v1": "00000005007a116e6f2073686172652073657373696f6effffffff010100",
    "acknowledge-request-v1": (
        "0b6f72646572732d617070046d2d3100000002030123456789abcdef0fedcba9876543210300"
        "00000002000000000000000a000000000000000c020100000000000102000000000000001400"
        "0000000000001604020300000000111111111111111122222222222222220200000002010000"
        "00"
    ),
    "acknowledge-response-v1": (
        "00000000000000020123456789abcdef0fedcba9876543210300000000000000000000010000"
        "000000000000000100790a6c6f636b206c6f7374ffffffffffffffff00000002000000020962"
        "726f6b65722d3200002384077261636b2d620000"
    ),
    "fetch-request-open-v2": (
        "0b6f72646572732d617070046d2d3100000000000001f4000000017fffffff000001f4000001"
        "f40100030123456789abcdef0fedcba987654321030000000001000000000101000011111111"
        "11111111222222222222222202000000020100000100"
    ),
    "fetch-request-acks-v2": (
        "0b6f72646572732d617070046d2d310000000300000000000000000010000000000001000000"
        "010001020123456789abcdef0fedcba987654321020000000003000000000000000a00000000"
        "0000000c020400000000000000000d000000000000000f040100020000000211111111111111"
        "11222222222222222202000000020000"
    ),
    "fetch-request-close-v2": (
        "00056d2dc3bcffffffff00000000000000007fffffff00000000000000000000010100"
    ),
    "fetch-response-v2": (
        "0000000000000000007530020123456789abcdef0fedcba98765432103000000000000000000"
        "0000000001000000000070000000000000000a00000063ffffffff023abfb5ce000000000002"
        "0000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff000000033a000000"
        "066b2d3106762d31040a7472616365066162630a656d70747901120002020106762d32001200"
        "0404066b2d33010003000000000000000a000000000000000b000100000000000000000c0000"
        "00000000000c000200000000000100060f6e6f7420746865206c656164657200790a6c6f636b"
        "206c6f73740000000200000007000101000003000000020962726f6b65722d32000023840772"
        "61636b2d620000000003026800000001000000"
    ),
    "fetch-response-error-v2": "00000005007a116e6f2073686172652073657373696f6effffffff010100",
    "acknowledge-request-v2": (
        "0b6f72646572732d617070046d2d310000000201030123456789abcdef0fedcba98765432103"
        "0000000002000000000000000a000000000000000c0204000000000001020000000000000014"
        "0000000000000016040203000000001111111111111111222222222222222202000000020100"
        "0000"
    ),
    "acknowledge-response-v2": (
        "0000000000000000003a98020123456789abcdef0fedcba98765432103000000000000000000"
        "00010000000000000000000100790a6c6f636b206c6f7374ffffffffffffffff000000020000"
        "00020962726f6b65722d3200002384077261636b2d620000"
    ),
    "request-header-v2": "004e000200003039000e636f6f7264696e6174696f6e2d3100",
    "response-header-v1": "0000303900",
}


def ours(name: str) -> bytes:
    """Our bytes for a case of ShareGroupWire.java."""
    if name in HEADERS:
        return HEADERS[name]
    message, version = CASES[name]
    return codec.encode(message, version)


@pytest.mark.parametrize("name", sorted(CASES))
def test_writes_what_kafka_writes(name: str) -> None:
    message, version = CASES[name]
    assert codec.encode(message, version).hex() == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_reads_what_kafka_writes(name: str) -> None:
    message, version = CASES[name]
    assert codec.decode(type(message), bytes.fromhex(GOLDEN[name]), version) == message


def test_headers_as_kafka_writes_them() -> None:
    for name, data in HEADERS.items():
        assert data.hex() == GOLDEN[name], name


def test_whole_frames() -> None:
    for request_name, response_name in (
        ("fetch-request-acks-v2", "fetch-response-v2"),
        ("acknowledge-request-v1", "acknowledge-response-v1"),
        ("heartbeat-request-join-v1", "heartbeat-response-assignment-v1"),
    ):
        request, version = CASES[request_name]
        response, _ = CASES[response_name]
        assert isinstance(request, codec.Request) and isinstance(response, codec.Response)
        frame = codec.encode_request(request, version, 99, "client")
        assert frame[:2] == codec.api_key(type(request)).to_bytes(2, "big")
        assert codec.decode_request(frame) == (99, "client", request)
        framed = codec.encode_response(response, version, 99)
        assert codec.response_type(type(request)) is type(response)
        assert codec.decode_response(type(response), framed, version) == (99, response)


# -- the records of a ShareFetch -------------------------------------------------------------


def test_reads_the_records_java_wrote() -> None:
    assert codec.decode_records(RECORDS) == RECORDS_READ
    assert codec.decode_records(RECORDS, check_crcs=True) == RECORDS_READ
    assert codec.decode_records(b"") == ()
    fetched, _ = CASES["fetch-response-v2"]
    assert isinstance(fetched, ShareFetchResponse)
    partition = fetched.responses[0].partitions[0]
    # Offsets 10-11 on their first delivery, 12 on its second.
    assert codec.acquired(partition) == tuple(zip(RECORDS_READ, (1, 1, 2), strict=True))


def _batch(offset: int, compression: int, count: int, *, transactional: bool = False) -> bytes:
    builder = MemoryRecordsBuilder(
        2, compression, 1 << 16, offset=offset, transactional=transactional, producer_id=7,
        producer_epoch=0, base_sequence=0,
    )  # fmt: skip
    for n in range(count):
        builder.append(1_000 + n, None, f"value-{offset + n}".encode(), [])
    builder.close()
    return bytes(builder.buffer())


def test_records_of_several_batches_only_acquired_ones() -> None:
    data = _batch(0, 0, 3) + _batch(3, 1, 2)  # the second gzip-compressed
    partition = ShareFetchPartitionData(
        0, records=data, acquired_records=(AcquiredRecords(1, 1, 3), AcquiredRecords(3, 4, 1))
    )
    got = [(r.offset, r.value, count) for r, count in codec.acquired(partition)]
    assert got == [(1, b"value-1", 3), (3, b"value-3", 1), (4, b"value-4", 1)]
    # A batch cut short by max_bytes is left out, as Kafka's consumers leave it.
    assert [r.offset for r in codec.decode_records(data[:-5])] == [0, 1, 2]


def test_records_refused_when_malformed() -> None:
    flipped = bytearray(RECORDS)
    flipped[-3] ^= 0x40  # inside the last record's key
    with pytest.raises(ProtocolCodecError, match="CRC"):
        codec.decode_records(bytes(flipped), check_crcs=True)
    bad_length = bytearray(RECORDS)
    bad_length[61] = 0x7F  # the first record's length varint: far past the batch
    with pytest.raises(ProtocolCodecError, match="malformed record batch"):
        codec.decode_records(bytes(bad_length))


def _as_kafka_python_reads(data: bytes) -> list[ShareRecord]:
    """The records of ``data`` as kafka-python's reader gives them: the reference."""
    batches, out = MemoryRecords(data), []
    while batches.has_next():
        for r in batches.next_batch():
            out.append(ShareRecord(r.offset, r.key, r.value, tuple(r.headers), r.timestamp))
    return out


@pytest.mark.parametrize("compression", [0, 1])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_reads_records_as_kafka_python_does(compression: int, log_append_time: bool) -> None:
    # Varints of one byte and of several (lengths, offset and timestamp deltas, negative
    # ones too), null and empty keys and values, headers with a null value.
    builder = MemoryRecordsBuilder(2, compression, 1 << 20, offset=0)
    # Sizes whose varints take 1, 2 (64 .. 8,191) and 3 bytes, and their edges.
    values: list[bytes | None] = [
        b"",
        None,
        b"v" * 63,
        b"w" * 64,
        b"x" * 20_000,
        b"y" * 8_191,
        b"z" * 8_192,
    ]
    for n in range(200):
        headers = [("h", b"x" * n), ("\u00fc", None)] if n % 7 == 0 else []
        key = None if n % 3 == 0 else str(n).encode()
        # Timestamps around the first one, a little before it or long after it.
        delta = (n % 11 - 5) * (1 if n % 2 else 1_000_003) if n else 0
        builder.append(1_700_000_000_000 + delta, key, values[n % len(values)], headers)
    builder.close()
    data = bytearray(builder.buffer())
    if log_append_time:
        data[22] |= 0x08  # the attributes' timestamp type: LogAppendTime (not in the CRC here)
    expected = _as_kafka_python_reads(bytes(data))
    assert len(expected) == 200
    if log_append_time:
        assert {r.timestamp for r in expected} == {1_700_000_000_000 + 5 * 1_000_003}
    assert list(codec.decode_records(bytes(data))) == expected


def test_refuses_a_batch_of_negative_length() -> None:
    data = bytearray(_batch(0, 0, 3) + _batch(3, 0, 3))
    second = len(data) // 2
    # Lengths that put the batch's end before its start.
    for length in (-1, -(second + 12), -(second + 12 + 5)):
        data[second + 8 : second + 12] = length.to_bytes(4, "big", signed=True)
        with pytest.raises(ProtocolCodecError, match="malformed record batch"):
            codec.decode_records(bytes(data))


def test_refuses_batches_older_than_magic_2() -> None:
    builder = MemoryRecordsBuilder(1, 0, 1 << 16, offset=5)
    builder.append(1_000, b"k", b"v", [])
    builder.close()
    with pytest.raises(ProtocolCodecError, match="magic 1"):
        codec.decode_records(bytes(builder.buffer()))


# -- generated messages -----------------------------------------------------------------------

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UNICODE = st.characters(exclude_categories=["Cs"])
TEXT = st.text(UNICODE, max_size=20)
NULLABLE_TEXT = st.none() | TEXT
UUIDS = st.uuids() | st.just(uuid.UUID(int=0))
PARTITIONS = st.lists(INT32, max_size=5).map(tuple)
TOPIC_LIST = st.lists(st.builds(TopicIdPartitions, UUIDS, PARTITIONS), max_size=3).map(tuple)
NAMES = st.lists(TEXT, max_size=3).map(tuple)
LEADERS = st.builds(LeaderIdAndEpoch, INT32, INT32)
NODES = st.lists(st.builds(NodeEndpoint, INT32, TEXT, INT32, NULLABLE_TEXT), max_size=2).map(tuple)
BATCHES = st.lists(
    st.builds(AcknowledgementBatch, INT64, INT64, st.lists(INT8, max_size=4).map(tuple)),
    max_size=3,
).map(tuple)
EXAMPLES = settings(max_examples=300, deadline=None, derandomize=True, database=None)

HEARTBEAT_REQUESTS = st.builds(
    ShareGroupHeartbeatRequest, TEXT, TEXT, INT32, NULLABLE_TEXT, st.none() | NAMES
)
HEARTBEAT_RESPONSES = st.builds(
    ShareGroupHeartbeatResponse,
    error_code=INT16,
    error_message=NULLABLE_TEXT,
    member_id=NULLABLE_TEXT,
    member_epoch=INT32,
    heartbeat_interval_ms=INT32,
    assignment=st.none() | TOPIC_LIST,
    throttle_time_ms=INT32,
)
DESCRIBE_REQUESTS = st.builds(ShareGroupDescribeRequest, NAMES, st.booleans())
DESCRIBE_RESPONSES = st.builds(
    ShareGroupDescribeResponse,
    groups=st.lists(
        st.builds(
            DescribedShareGroup,
            error_code=INT16,
            group_id=TEXT,
            error_message=NULLABLE_TEXT,
            group_state=TEXT,
            group_epoch=INT32,
            assignment_epoch=INT32,
            assignor_name=TEXT,
            members=st.lists(
                st.builds(
                    DescribedShareGroupMember,
                    TEXT,
                    NULLABLE_TEXT,
                    INT32,
                    TEXT,
                    TEXT,
                    NAMES,
                    st.lists(
                        st.builds(DescribedTopicPartitions, UUIDS, TEXT, PARTITIONS), max_size=2
                    ).map(tuple),
                ),
                max_size=2,
            ).map(tuple),
            authorized_operations=INT32,
        ),
        max_size=2,
    ).map(tuple),
    throttle_time_ms=INT32,
)


def fetch_requests(version: int) -> st.SearchStrategy[ShareFetchRequest]:
    partitions = st.lists(st.builds(ShareFetchPartition, INT32, BATCHES), max_size=2).map(tuple)
    return st.builds(
        ShareFetchRequest,
        group_id=NULLABLE_TEXT,
        member_id=NULLABLE_TEXT,
        share_session_epoch=INT32,
        max_wait_ms=INT32,
        min_bytes=INT32,
        max_bytes=INT32,
        max_records=INT32,
        batch_size=INT32,
        share_acquire_mode=INT8 if version >= 2 else st.just(0),
        is_renew_ack=st.booleans() if version >= 2 else st.just(False),
        topics=st.lists(st.builds(ShareFetchTopic, UUIDS, partitions), max_size=2).map(tuple),
        forgotten_topics_data=TOPIC_LIST,
    )


def fetch_responses(version: int) -> st.SearchStrategy[ShareFetchResponse]:
    partition = st.builds(
        ShareFetchPartitionData,
        partition_index=INT32,
        error_code=INT16,
        error_message=NULLABLE_TEXT,
        acknowledge_error_code=INT16,
        acknowledge_error_message=NULLABLE_TEXT,
        current_leader=LEADERS,
        records=st.binary(max_size=40),
        acquired_records=st.lists(st.builds(AcquiredRecords, INT64, INT64, INT16), max_size=3).map(
            tuple
        ),
    )
    return st.builds(
        ShareFetchResponse,
        error_code=INT16,
        error_message=NULLABLE_TEXT,
        acquisition_lock_timeout_ms=INT32,
        responses=st.lists(
            st.builds(ShareFetchTopicResponse, UUIDS, st.lists(partition, max_size=2).map(tuple)),
            max_size=2,
        ).map(tuple),
        node_endpoints=NODES,
        throttle_time_ms=INT32,
        version=st.just(version),
    )


def acknowledge_requests(version: int) -> st.SearchStrategy[ShareAcknowledgeRequest]:
    partitions = st.lists(st.builds(ShareAcknowledgePartition, INT32, BATCHES), max_size=2)
    return st.builds(
        ShareAcknowledgeRequest,
        group_id=NULLABLE_TEXT,
        member_id=NULLABLE_TEXT,
        share_session_epoch=INT32,
        is_renew_ack=st.booleans() if version >= 2 else st.just(False),
        topics=st.lists(
            st.builds(ShareAcknowledgeTopic, UUIDS, partitions.map(tuple)), max_size=2
        ).map(tuple),
    )


def acknowledge_responses(version: int) -> st.SearchStrategy[ShareAcknowledgeResponse]:
    partition = st.builds(ShareAcknowledgePartitionData, INT32, INT16, NULLABLE_TEXT, LEADERS)
    return st.builds(
        ShareAcknowledgeResponse,
        error_code=INT16,
        error_message=NULLABLE_TEXT,
        acquisition_lock_timeout_ms=INT32 if version >= 2 else st.just(0),
        responses=st.lists(
            st.builds(
                ShareAcknowledgeTopicResponse, UUIDS, st.lists(partition, max_size=2).map(tuple)
            ),
            max_size=2,
        ).map(tuple),
        node_endpoints=NODES,
        throttle_time_ms=INT32,
        version=st.just(version),
    )


def messages() -> st.SearchStrategy[tuple[codec.Message, int]]:
    v1_only = [HEARTBEAT_REQUESTS, HEARTBEAT_RESPONSES, DESCRIBE_REQUESTS, DESCRIBE_RESPONSES]
    by_version = [st.tuples(s, st.just(1)) for s in v1_only] + [
        st.tuples(strategy, st.just(v))
        for v in (1, 2)
        for strategy in (
            fetch_requests(v),
            fetch_responses(v),
            acknowledge_requests(v),
            acknowledge_responses(v),
        )
    ]
    return st.one_of(*by_version)


@EXAMPLES
@given(messages())
def test_round_trip(case: tuple[codec.Message, int]) -> None:
    message, version = case
    data = codec.encode(message, version)
    assert codec.decode(type(message), data, version) == message
    # Every shorter prefix is refused, never misread.
    for end in range(0, len(data), max(1, len(data) // 16)):
        with pytest.raises(ProtocolCodecError):
            codec.decode(type(message), data[:end], version)


def test_a_fetch_answer_of_partitions_as_small_as_they_come_is_read() -> None:
    # Two partitions with nothing in them: 22 bytes each, the least a partition takes (the
    # decoder once asked for 24 before reading the list, found by the fuzzer above).
    empty = ShareFetchPartitionData(0)
    answer = ShareFetchResponse(
        0,
        responses=(ShareFetchTopicResponse(uuid.UUID(int=0), (empty, empty)),),
        version=1,
    )
    assert codec.decode(ShareFetchResponse, codec.encode(answer, 1), 1) == answer


# -- refused --------------------------------------------------------------------------------


def test_refuses_what_the_wire_cannot_carry() -> None:
    renew = ShareFetchRequest("g", "m", 1, 0, 0, is_renew_ack=True)
    with pytest.raises(ProtocolCodecError, match="v2"):
        codec.encode(renew, 1)
    with pytest.raises(ProtocolCodecError, match="v2"):
        codec.encode(ShareAcknowledgeRequest("g", "m", 1, is_renew_ack=True), 1)
    # v0 was Kafka 4.0's early access, removed in 4.1: not spoken.
    with pytest.raises(ProtocolCodecError, match="no version 0"):
        codec.encode(ShareGroupHeartbeatRequest("g", "m", 0), 0)
    with pytest.raises(ProtocolCodecError, match="no version 3"):
        codec.encode(renew, 3)
    with pytest.raises(ProtocolCodecError, match="out of range"):
        codec.encode(ShareFetchRequest("g", "m", 2**31, 0, 0), 2)
    with pytest.raises(ProtocolCodecError, match="out of range"):
        batch = AcknowledgementBatch(0, 0, (128,))
        topic = ShareAcknowledgeTopic(ORDERS, (ShareAcknowledgePartition(0, (batch,)),))
        codec.encode(ShareAcknowledgeRequest("g", "m", 1, topics=(topic,)), 2)
    # The acquire mode is ignorable: v1 drops it, as Kafka's writer does.
    dropped = ShareFetchRequest("g", "m", 0, 0, 0, share_acquire_mode=1)
    assert codec.decode(ShareFetchRequest, codec.encode(dropped, 1), 1).share_acquire_mode == 0


def test_refuses_malformed_bytes() -> None:
    good = bytes.fromhex(GOLDEN["fetch-response-v2"])
    with pytest.raises(ProtocolCodecError, match="after the end"):
        codec.decode(ShareFetchResponse, good + b"\x00", 2)
    # The records of a partition may not be null from v1 (Kafka's readers refuse it too).
    empty = bytes.fromhex(GOLDEN["fetch-response-error-v1"])
    partition = ShareFetchPartitionData(0)
    response = ShareFetchResponse(0, responses=(ShareFetchTopicResponse(ORDERS, (partition,)),))
    encoded = codec.encode(response, 1)
    # The end: records (empty: 1), acquired records, three tag sections and no nodes.
    assert encoded[-6:] == b"\x01\x01\x00\x00\x01\x00"
    with pytest.raises(ProtocolCodecError, match="records is null"):
        codec.decode(ShareFetchResponse, encoded[:-6] + b"\x00" + encoded[-5:], 1)
    assert codec.decode(ShareFetchResponse, empty, 1).error_code == 122
    with pytest.raises(ProtocolCodecError, match="more than the bytes left"):
        codec.decode(ShareFetchResponse, bytes(6) + b"\x00\x00\x00\x00\x00\xff\xff\xff\x0f", 1)
    with pytest.raises(ProtocolCodecError, match="API key 68"):
        codec.decode_request(encode_request_header(68, 1, 1, None) + b"\x00")


def test_skips_tagged_fields_a_newer_broker_adds() -> None:
    good = bytes.fromhex(GOLDEN["acknowledge-response-v2"])
    tagged = good[:-1] + b"\x02" + b"\x00\x02ab" + b"\x05\x00"
    decoded = codec.decode(ShareAcknowledgeResponse, tagged, 2)
    assert decoded == CASES["acknowledge-response-v2"][0]


# -- the transport's side: version choice and the answer of a broker without the API ----------


def _versions(**apis: tuple[int, int]) -> BrokerVersionData:
    keys = {"heartbeat": 76, "describe": 77, "fetch": 78, "acknowledge": 79}
    return BrokerVersionData(api_versions={keys[k]: v for k, v in apis.items()})


def test_version_is_the_newest_both_speak() -> None:
    fetch = _OwnCodecRequest(ShareFetchRequest("g", "m", 0, 500, 1))
    assert _versions(fetch=(1, 2)).api_version(fetch) == 2
    assert _versions(fetch=(1, 1)).api_version(fetch) == 1  # a Kafka 4.1 broker
    assert _versions(fetch=(1, 9)).api_version(fetch) == 2
    assert m.MAX_VERSIONS["ShareFetch"] == 2 and m.MAX_VERSIONS["ShareAcknowledge"] == 2
    heartbeat = _OwnCodecRequest(ShareGroupHeartbeatRequest("g", "m", 0))
    assert _versions(heartbeat=(1, 1)).api_version(heartbeat) == 1
    acknowledge = _OwnCodecRequest(ShareAcknowledgeRequest("g", "m", 1))
    assert _versions(acknowledge=(1, 2)).api_version(acknowledge) == 2


@pytest.mark.parametrize("offered", [{}, {"heartbeat": (0, 0)}], ids=["none", "v0 only"])
def test_a_broker_without_share_groups_is_answered_unsupported_version(
    offered: dict[str, tuple[int, int]],
) -> None:
    # Kafka 3.9 lists no share-group API; Kafka 4.0 lists v0 (early access) only.
    request = _OwnCodecRequest(ShareGroupHeartbeatRequest("g", "m", 0))
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion) as e:
        _versions(**offered).api_version(request)
    answer = request.unoffered(e.value)
    assert isinstance(answer, ShareGroupHeartbeatResponse)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION and answer.version == -1
    assert answer.error_message is not None
    assert "Kafka 4.1 or newer" in answer.error_message and "API key 76" in answer.error_message
    assert "share.version" in answer.error_message


def test_every_share_request_has_its_unsupported_answer() -> None:
    problem = kafka_errors.IncompatibleBrokerVersion("no")
    fetch = _OwnCodecRequest(ShareFetchRequest("g", "m", 0, 500, 1)).unoffered(problem)
    assert isinstance(fetch, ShareFetchResponse) and fetch.version == -1
    assert fetch.error_code == ErrorCode.UNSUPPORTED_VERSION
    acknowledged = _OwnCodecRequest(ShareAcknowledgeRequest("g", "m", 1)).unoffered(problem)
    assert isinstance(acknowledged, ShareAcknowledgeResponse)
    assert acknowledged.error_code == ErrorCode.UNSUPPORTED_VERSION
    described = _OwnCodecRequest(ShareGroupDescribeRequest(("a", "b"))).unoffered(problem)
    assert isinstance(described, ShareGroupDescribeResponse)
    assert [g.group_id for g in described.groups] == ["a", "b"]
    assert described.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_the_request_as_the_connections_send_it() -> None:
    message, _ = CASES["fetch-request-acks-v2"]
    assert isinstance(message, ShareFetchRequest)
    request = KafkaTransport._encode(message)  # what send() hands the connections
    request.API_VERSION = 2
    request.with_header(correlation_id=42, client_id="c-1")
    framed = request.encode(header=True, framed=True)
    assert codec.decode_request(framed[4:]) == (42, "c-1", message)
    response, _ = CASES["fetch-response-v2"]
    assert isinstance(response, ShareFetchResponse)
    answer = codec.encode_response(response, 2, 42)
    decoded = request.header.get_response_class().decode(answer, header=True)
    assert KafkaTransport._decode(decoded) == response


def test_the_scripted_transport_answers_them() -> None:
    transport = ScriptedTransport()
    answer = ShareGroupHeartbeatResponse(0, member_id="m", member_epoch=1)
    transport.prepare(answer)
    request = ShareGroupHeartbeatRequest("g", "m", 0)
    got = transport.send(request, ShareGroupHeartbeatResponse, coordinator=None, timeout_s=1.0)
    assert got == answer and transport.requests(ShareGroupHeartbeatRequest) == [request]


def test_the_batches_read_whole_cover_up_to_their_last_offset() -> None:
    data = _batch(0, 0, 3) + _batch(3, 1, 2)
    assert codec.decode_batches(data)[1] == 4
    assert codec.decode_batches(data[:-5])[1] == 2  # the cut batch covers nothing
    assert codec.decode_batches(b"") == ((), -1)
