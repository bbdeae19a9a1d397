"""The consumer group protocol's messages (KIP-848) on the wire: the bytes Kafka's own client
writes (golden, from kafka-clients 4.3.1's generated classes; tests/interop/
test_consumer_group_golden.py checks them against Java again), a round trip of generated
messages, malformed input refused with ProtocolCodecError, and the transport's version
choice from the broker's ApiVersions.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import kafka.errors as kafka_errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.frame import KafkaBytes

from coordination._protocol import consumer_group_codec as codec
from coordination._protocol import messages as m
from coordination._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerGroupMember,
    DescribedTopicPartitions,
    TopicIdPartitions,
)
from coordination._protocol.error_codes import ErrorCode
from coordination._protocol.wire import (
    Reader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)
from coordination._transport.kafka import KafkaTransport, _OwnCodecRequest
from coordination.errors import ProtocolCodecError
from coordination.testing import ScriptedTransport

ORDERS = uuid.UUID("01234567-89ab-cdef-0fed-cba987654321")
PAYMENTS = uuid.UUID("11111111-1111-1111-2222-222222222222")


def _cases() -> dict[str, tuple[codec.Message, int]]:
    """The messages of tests/interop/java/ConsumerGroupWire.java, by the same names."""
    cases: dict[str, tuple[codec.Message, int]] = {}
    for v in (0, 1):
        cases[f"heartbeat-request-join-v{v}"] = (
            ConsumerGroupHeartbeatRequest(
                group_id="orders-app",
                member_id="m-1",
                member_epoch=0,
                instance_id="worker-1",
                rack_id="rack-a",
                rebalance_timeout_ms=300_000,
                subscribed_topic_names=("orders", "payments"),
                subscribed_topic_regex="orders-.*" if v else None,
                server_assignor="uniform",
                topic_partitions=(),
            ),
            v,
        )
        cases[f"heartbeat-request-unchanged-v{v}"] = (
            ConsumerGroupHeartbeatRequest("orders-app", "m-1", 7),
            v,
        )
        cases[f"heartbeat-request-owned-v{v}"] = (
            ConsumerGroupHeartbeatRequest(
                "g",
                "",
                12,
                subscribed_topic_names=(),
                topic_partitions=(
                    TopicIdPartitions(ORDERS, (0, 3, 2**31 - 1)),
                    TopicIdPartitions(PAYMENTS, ()),
                ),
            ),
            v,
        )
        cases[f"heartbeat-request-leave-v{v}"] = (
            ConsumerGroupHeartbeatRequest("g", "m-\u00fc", -2, instance_id="static-1"),
            v,
        )
        cases[f"heartbeat-response-no-assignment-v{v}"] = (
            ConsumerGroupHeartbeatResponse(
                0, member_id="m-1", member_epoch=3, heartbeat_interval_ms=5000, version=v
            ),
            v,
        )
        cases[f"heartbeat-response-empty-assignment-v{v}"] = (
            ConsumerGroupHeartbeatResponse(
                0,
                member_id="m-1",
                member_epoch=1,
                heartbeat_interval_ms=5000,
                assignment=(),
                throttle_time_ms=10,
                version=v,
            ),
            v,
        )
        cases[f"heartbeat-response-assignment-v{v}"] = (
            ConsumerGroupHeartbeatResponse(
                0,
                member_id="m-1",
                member_epoch=2,
                heartbeat_interval_ms=5000,
                assignment=(TopicIdPartitions(ORDERS, (1, 0)), TopicIdPartitions(PAYMENTS, (4,))),
                version=v,
            ),
            v,
        )
        cases[f"heartbeat-response-error-v{v}"] = (
            ConsumerGroupHeartbeatResponse(110, error_message="fenced", member_epoch=-1, version=v),
            v,
        )
        cases[f"describe-request-v{v}"] = (
            ConsumerGroupDescribeRequest(("orders-app", "other"), v == 1),
            v,
        )
        cases[f"describe-request-none-v{v}"] = (ConsumerGroupDescribeRequest(()), v)
        member = DescribedConsumerGroupMember(
            member_id="m-1",
            instance_id=None,
            rack_id="rack-a",
            member_epoch=4,
            client_id="client",
            client_host="/127.0.0.1",
            subscribed_topic_names=("orders", "payments"),
            subscribed_topic_regex=None,
            assignment=(DescribedTopicPartitions(ORDERS, "orders", (0, 1)),),
            target_assignment=(
                DescribedTopicPartitions(ORDERS, "orders", (0,)),
                DescribedTopicPartitions(PAYMENTS, "payments", ()),
            ),
            member_type=1 if v else -1,
        )
        other = DescribedConsumerGroupMember(
            member_id="m-2",
            instance_id="static-2",
            rack_id=None,
            member_epoch=4,
            client_id="c",
            client_host="h",
            subscribed_topic_names=(),
            subscribed_topic_regex="orders.*",
            assignment=(),
            target_assignment=(),
            member_type=0 if v else -1,
        )
        cases[f"describe-response-v{v}"] = (
            ConsumerGroupDescribeResponse(
                (
                    DescribedConsumerGroup(
                        0,
                        "orders-app",
                        group_state="Stable",
                        group_epoch=5,
                        assignment_epoch=5,
                        assignor_name="uniform",
                        members=(member, other),
                        authorized_operations=0x0F00,
                    ),
                    DescribedConsumerGroup(
                        69,
                        "other",
                        error_message="Group other not found.",
                        group_state="Dead",
                    ),
                ),
                version=v,
            ),
            v,
        )
    return cases


CASES = _cases()
HEADERS: dict[str, bytes] = {
    "request-header-v2": encode_request_header(68, 1, 12345, "coordination-1"),
    "request-header-null-client-v2": encode_request_header(69, 0, -7, None),
    "response-header-v1": encode_response_header(12345),
}

# What kafka-clients 4.3.1 writes for each case (ConsumerGroupWire.java's output).
GOLDEN: dict[str, str] = {
    "heartbeat-request-join-v0": (
        "0b6f72646572732d617070046d2d310000000009776f726b65722d31077261636b2d61000493"
        "e003076f7264657273097061796d656e747308756e69666f726d0100"
    ),
    "heartbeat-request-unchanged-v0": "0b6f72646572732d617070046d2d31000000070000ffffffff00000000",
    "heartbeat-request-owned-v0": (
        "0267010000000c0000ffffffff0100030123456789abcdef0fedcba987654321040000000000"
        "0000037fffffff0011111111111111112222222222222222010000"
    ),
    "heartbeat-request-leave-v0": "0267056d2dc3bcfffffffe097374617469632d3100ffffffff00000000",
    "heartbeat-response-no-assignment-v0": "00000000000000046d2d310000000300001388ff00",
    "heartbeat-response-empty-assignment-v0": "0000000a000000046d2d31000000010000138801010000",
    "heartbeat-response-assignment-v0": (
        "00000000000000046d2d31000000020000138801030123456789abcdef0fedcba98765432103"
        "000000010000000000111111111111111122222222222222220200000004000000"
    ),
    "heartbeat-response-error-v0": "00000000006e0766656e63656400ffffffff00000000ff00",
    "describe-request-v0": "030b6f72646572732d617070066f746865720000",
    "describe-request-none-v0": "010000",
    "describe-response-v0": (
        "00000000030000000b6f72646572732d61707007537461626c65000000050000000508756e69"
        "666f726d03046d2d3100077261636b2d610000000407636c69656e740b2f3132372e302e302e"
        "3103076f7264657273097061796d656e747300020123456789abcdef0fedcba987654321076f"
        "72646572730300000000000000010000030123456789abcdef0fedcba987654321076f726465"
        "727302000000000011111111111111112222222222222222097061796d656e74730100000004"
        "6d2d32097374617469632d3200000000040263026801096f72646572732e2a01000100000000"
        "0f000000451747726f7570206f74686572206e6f7420666f756e642e066f7468657205446561"
        "64ffffffffffffffff0101800000000000"
    ),
    "heartbeat-request-join-v1": (
        "0b6f72646572732d617070046d2d310000000009776f726b65722d31077261636b2d61000493"
        "e003076f7264657273097061796d656e74730a6f72646572732d2e2a08756e69666f726d0100"
    ),
    "heartbeat-request-unchanged-v1": (
        "0b6f72646572732d617070046d2d31000000070000ffffffff0000000000"
    ),
    "heartbeat-request-owned-v1": (
        "0267010000000c0000ffffffff010000030123456789abcdef0fedcba9876543210400000000"
        "000000037fffffff0011111111111111112222222222222222010000"
    ),
    "heartbeat-request-leave-v1": "0267056d2dc3bcfffffffe097374617469632d3100ffffffff0000000000",
    "heartbeat-response-no-assignment-v1": "00000000000000046d2d310000000300001388ff00",
    "heartbeat-response-empty-assignment-v1": "0000000a000000046d2d31000000010000138801010000",
    "heartbeat-response-assignment-v1": (
        "00000000000000046d2d31000000020000138801030123456789abcdef0fedcba98765432103"
        "000000010000000000111111111111111122222222222222220200000004000000"
    ),
    "heartbeat-response-error-v1": "00000000006e0766656e63656400ffffffff00000000ff00",
    "describe-request-v1": "030b6f72646572732d617070066f746865720100",
    "describe-request-none-v1": "010000",
    "describe-response-v1": (
        "00000000030000000b6f72646572732d61707007537461626c65000000050000000508756e69"
        "666f726d03046d2d3100077261636b2d610000000407636c69656e740b2f3132372e302e302e"
        "3103076f7264657273097061796d656e747300020123456789abcdef0fedcba987654321076f"
        "72646572730300000000000000010000030123456789abcdef0fedcba987654321076f726465"
        "727302000000000011111111111111112222222222222222097061796d656e74730100000100"
        "046d2d32097374617469632d3200000000040263026801096f72646572732e2a010001000000"
        "00000f000000451747726f7570206f74686572206e6f7420666f756e642e066f746865720544"
        "656164ffffffffffffffff0101800000000000"
    ),
    "request-header-v2": "0044000100003039000e636f6f7264696e6174696f6e2d3100",
    "request-header-null-client-v2": "00450000fffffff9ffff00",
    "response-header-v1": "0000303900",
}


def ours(name: str) -> bytes:
    """Our bytes for a case of ConsumerGroupWire.java."""
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
    reader = Reader(bytes.fromhex(GOLDEN["request-header-v2"]), "header")
    assert decode_request_header(reader) == (68, 1, 12345, "coordination-1")
    reader.done()
    reader = Reader(bytes.fromhex(GOLDEN["request-header-null-client-v2"]), "header")
    assert decode_request_header(reader) == (69, 0, -7, None)
    reader = Reader(bytes.fromhex(GOLDEN["response-header-v1"]), "header")
    assert decode_response_header(reader) == 12345


def test_whole_frames() -> None:
    request, _ = CASES["heartbeat-request-join-v1"]
    assert isinstance(request, ConsumerGroupHeartbeatRequest)
    frame = codec.encode_request(request, 1, 99, "client")
    assert frame[:4] == b"\x00\x44\x00\x01"  # API key 68, version 1
    assert codec.decode_request(frame) == (99, "client", request)
    response, _ = CASES["heartbeat-response-assignment-v1"]
    assert isinstance(response, ConsumerGroupHeartbeatResponse)
    framed = codec.encode_response(response, 1, 99)
    assert codec.decode_response(ConsumerGroupHeartbeatResponse, framed, 1) == (99, response)


# -- generated messages -----------------------------------------------------------------------

INT32 = st.integers(-(2**31), 2**31 - 1)
UNICODE = st.characters(exclude_categories=["Cs"])
TEXT = st.text(UNICODE, max_size=30)
NULLABLE_TEXT = st.none() | TEXT
UUIDS = st.uuids() | st.just(uuid.UUID(int=0))
PARTITIONS = st.lists(INT32, max_size=6).map(tuple)
TOPICS = st.builds(TopicIdPartitions, UUIDS, PARTITIONS)
TOPIC_LIST = st.lists(TOPICS, max_size=4).map(tuple)
NAMES = st.lists(TEXT, max_size=4).map(tuple)
EXAMPLES = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def heartbeat_requests(version: int) -> st.SearchStrategy[ConsumerGroupHeartbeatRequest]:
    return st.builds(
        ConsumerGroupHeartbeatRequest,
        group_id=TEXT,
        member_id=TEXT,
        member_epoch=INT32,
        instance_id=NULLABLE_TEXT,
        rack_id=NULLABLE_TEXT,
        rebalance_timeout_ms=INT32,
        subscribed_topic_names=st.none() | NAMES,
        subscribed_topic_regex=NULLABLE_TEXT if version else st.none(),
        server_assignor=NULLABLE_TEXT,
        topic_partitions=st.none() | TOPIC_LIST,
    )


def heartbeat_responses(version: int) -> st.SearchStrategy[ConsumerGroupHeartbeatResponse]:
    return st.builds(
        ConsumerGroupHeartbeatResponse,
        error_code=st.integers(-(2**15), 2**15 - 1),
        error_message=NULLABLE_TEXT,
        member_id=NULLABLE_TEXT,
        member_epoch=INT32,
        heartbeat_interval_ms=INT32,
        assignment=st.none() | TOPIC_LIST,
        throttle_time_ms=INT32,
        version=st.just(version),
    )


DESCRIBED_TOPICS = st.lists(
    st.builds(DescribedTopicPartitions, UUIDS, TEXT, PARTITIONS), max_size=3
).map(tuple)


def describe_responses(version: int) -> st.SearchStrategy[ConsumerGroupDescribeResponse]:
    member = st.builds(
        DescribedConsumerGroupMember,
        member_id=TEXT,
        instance_id=NULLABLE_TEXT,
        rack_id=NULLABLE_TEXT,
        member_epoch=INT32,
        client_id=TEXT,
        client_host=TEXT,
        subscribed_topic_names=NAMES,
        subscribed_topic_regex=NULLABLE_TEXT,
        assignment=DESCRIBED_TOPICS,
        target_assignment=DESCRIBED_TOPICS,
        member_type=st.integers(-128, 127) if version else st.just(-1),
    )
    group = st.builds(
        DescribedConsumerGroup,
        error_code=st.integers(-(2**15), 2**15 - 1),
        group_id=TEXT,
        error_message=NULLABLE_TEXT,
        group_state=TEXT,
        group_epoch=INT32,
        assignment_epoch=INT32,
        assignor_name=TEXT,
        members=st.lists(member, max_size=3).map(tuple),
        authorized_operations=INT32,
    )
    return st.builds(
        ConsumerGroupDescribeResponse,
        groups=st.lists(group, max_size=3).map(tuple),
        throttle_time_ms=INT32,
        version=st.just(version),
    )


DESCRIBE_REQUESTS = st.builds(
    ConsumerGroupDescribeRequest, st.lists(TEXT, max_size=4).map(tuple), st.booleans()
)


def messages() -> st.SearchStrategy[tuple[codec.Message, int]]:
    by_version = [
        st.tuples(strategy, st.just(v))
        for v in (0, 1)
        for strategy in (
            heartbeat_requests(v),
            heartbeat_responses(v),
            DESCRIBE_REQUESTS,
            describe_responses(v),
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


# -- refused --------------------------------------------------------------------------------


def test_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ProtocolCodecError, match="v1"):
        codec.encode(ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_regex="x"), 0)
    with pytest.raises(ProtocolCodecError, match="no version 2"):
        codec.encode(ConsumerGroupHeartbeatRequest("g", "m", 0), 2)
    with pytest.raises(ProtocolCodecError, match="out of range"):
        codec.encode(ConsumerGroupHeartbeatRequest("g", "m", 2**31), 1)
    with pytest.raises(ProtocolCodecError, match="32767"):
        codec.encode(ConsumerGroupHeartbeatRequest("g" * 40_000, "m", 0), 1)


def test_refuses_malformed_bytes() -> None:
    good = bytes.fromhex(GOLDEN["heartbeat-response-assignment-v1"])
    kind = ConsumerGroupHeartbeatResponse
    with pytest.raises(ProtocolCodecError, match="after the end"):
        codec.decode(kind, good + b"\x00", 1)
    # member_id null is allowed, group_id null is not.
    request = codec.encode(ConsumerGroupHeartbeatRequest("", "m", 0), 1)
    with pytest.raises(ProtocolCodecError, match="group_id is null"):
        codec.decode(ConsumerGroupHeartbeatRequest, b"\x00" + request[1:], 1)
    # A varint of six bytes, an array longer than the bytes left, a string not UTF-8.
    with pytest.raises(ProtocolCodecError, match="longer than 5"):
        codec.decode(ConsumerGroupDescribeRequest, b"\xff" * 6, 0)
    with pytest.raises(ProtocolCodecError, match="more than the bytes left"):
        codec.decode(ConsumerGroupDescribeRequest, b"\xff\xff\xff\x7f" + b"\x00", 0)
    with pytest.raises(ProtocolCodecError, match="UTF-8"):
        codec.decode(ConsumerGroupDescribeRequest, b"\x02\x02\xff\x00\x00", 0)
    with pytest.raises(ProtocolCodecError, match="API key 12"):
        codec.decode_request(encode_request_header(12, 4, 1, None) + b"\x00")


def test_skips_tagged_fields_a_newer_broker_adds() -> None:
    good = bytes.fromhex(GOLDEN["heartbeat-response-no-assignment-v1"])
    # The response's last byte is its (empty) tagged field section: give it two fields.
    tagged = good[:-1] + b"\x02" + b"\x00\x02ab" + b"\x05\x00"
    decoded = codec.decode(ConsumerGroupHeartbeatResponse, tagged, 1)
    assert decoded == CASES["heartbeat-response-no-assignment-v1"][0]


# -- the transport's side: version choice and the answer of a broker without the API ----------


def _versions(**apis: tuple[int, int]) -> BrokerVersionData:
    keys = {"heartbeat": 68, "describe": 69}
    return BrokerVersionData(api_versions={keys[k]: v for k, v in apis.items()})


def test_version_is_v1_where_the_broker_offers_it() -> None:
    request = _OwnCodecRequest(ConsumerGroupHeartbeatRequest("g", "m", 0))
    assert _versions(heartbeat=(0, 1)).api_version(request) == 1
    assert m.MAX_VERSIONS["ConsumerGroupHeartbeat"] == 1
    assert _versions(heartbeat=(0, 7)).api_version(request) == 1
    describe = _OwnCodecRequest(ConsumerGroupDescribeRequest(("g",)))
    assert _versions(describe=(0, 1)).api_version(describe) == 1


@pytest.mark.parametrize("offered", [{}, {"heartbeat": (0, 0)}], ids=["none", "v0 only"])
def test_a_broker_without_v1_is_answered_unsupported_version(
    offered: dict[str, tuple[int, int]],
) -> None:
    # Kafka 3.9 lists ConsumerGroupHeartbeat v0 (early access), and refuses it unless enabled.
    request = _OwnCodecRequest(ConsumerGroupHeartbeatRequest("g", "m", 0))
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion) as e:
        _versions(**offered).api_version(request)
    answer = request.unoffered(e.value)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION and answer.version == -1
    assert answer.error_message is not None
    assert "Kafka 4.0 or newer" in answer.error_message and "API key 68" in answer.error_message


def test_a_describe_without_the_api_is_answered_per_group() -> None:
    describe = _OwnCodecRequest(ConsumerGroupDescribeRequest(("a", "b")))
    described = describe.unoffered(kafka_errors.IncompatibleBrokerVersion("no"))
    assert isinstance(described, ConsumerGroupDescribeResponse)
    assert [g.group_id for g in described.groups] == ["a", "b"]
    assert described.error_code == ErrorCode.UNSUPPORTED_VERSION and described.version == -1
    assert all("API key 69" in (g.error_message or "") for g in described.groups)


def _through_kafka_python_parser(request: Any, answer: bytes) -> Any:
    """The answer as kafka-python's protocol parser reads it (parse_header, then decode)."""
    response_class = request.header.get_response_class()
    buffer = KafkaBytes(len(answer))
    buffer.write(answer)
    buffer.seek(0)
    header = response_class.parse_header(buffer)
    return header.correlation_id, response_class.decode(buffer)


def test_the_request_as_kafka_python_and_direct_connections_send_it() -> None:
    message, _ = CASES["heartbeat-request-join-v1"]
    assert isinstance(message, ConsumerGroupHeartbeatRequest)
    request = KafkaTransport._encode(message)  # what send() hands the connections
    request.API_VERSION = 1
    request.with_header(correlation_id=42, client_id="c-1")
    framed = request.encode(header=True, framed=True)
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    assert codec.decode_request(framed[4:]) == (42, "c-1", message)
    response, _ = CASES["heartbeat-response-assignment-v1"]
    assert isinstance(response, ConsumerGroupHeartbeatResponse)
    answer = codec.encode_response(response, 1, 42)
    # DirectConnection: the bytes after the size, header included.
    decoded = request.header.get_response_class().decode(answer, header=True)
    assert KafkaTransport._decode(decoded) == response
    # kafka-python's connections: parse_header, then decode the rest of the buffer.
    assert _through_kafka_python_parser(request, answer) == (42, response)
    # A malformed answer is a ValueError, which both report as an unreadable answer.
    with pytest.raises(ValueError, match="truncated"):
        request.header.get_response_class().decode(answer[:-3], header=True)


def test_the_scripted_transport_answers_them() -> None:
    transport = ScriptedTransport()
    answer = ConsumerGroupHeartbeatResponse(0, member_id="m", member_epoch=1)
    transport.prepare(answer)
    transport.prepare(ConsumerGroupDescribeResponse(()))
    request = ConsumerGroupHeartbeatRequest("g", "m", 0)
    got = transport.send(request, ConsumerGroupHeartbeatResponse, coordinator=None, timeout_s=1.0)
    assert got == answer and transport.requests(ConsumerGroupHeartbeatRequest) == [request]
    described = transport.send(
        ConsumerGroupDescribeRequest(("g",)),
        ConsumerGroupDescribeResponse,
        coordinator=None,
        timeout_s=1.0,
    )
    assert described.groups == () and described.error_code == 0
