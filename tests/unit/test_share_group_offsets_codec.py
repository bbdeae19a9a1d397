"""DescribeShareGroupOffsets (API key 90) and AlterShareGroupOffsets (91) on the wire: bytes
written out by hand from Kafka's message definitions (kafka-clients 4.3.1's
``DescribeShareGroupOffsetsRequest.json`` and the others: flexible from v0, ``Lag`` from v1;
AlterShareGroupOffsets has v0 only), which tests/interop/test_share_group_golden.py checks
against Java's generated classes; a round trip of generated messages, malformed input
refused, and the transport's version choice and made-up answer.
"""

from __future__ import annotations

import uuid

import kafka.errors as kafka_errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.broker_version_data import BrokerVersionData

from coordination._protocol import share_group_codec as codec
from coordination._protocol.error_codes import ErrorCode
from coordination._protocol.share_group import (
    AlteredShareGroupOffsetsTopic,
    AlteredSharePartition,
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DescribedShareGroupOffsets,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareGroupOffsetsRequestGroup,
    ShareGroupOffsetsTopic,
    SharePartitionOffset,
)
from coordination._transport.kafka import _OwnCodecRequest
from coordination.errors import ProtocolCodecError

TOPIC = uuid.UUID(int=1)
STATE = DescribedShareGroupOffsets(
    "g", (ShareGroupOffsetsTopic("t", TOPIC, (SharePartitionOffset(0, 17, 5, 2),)),)
)

# Field by field, spaces between fields: compact lengths and strings are their length + 1 as
# a varint; every struct ends with an empty tagged-field section (00).
GOLDEN: dict[str, tuple[codec.Message, int, str]] = {
    "offsets-request-all-v1": (
        DescribeShareGroupOffsetsRequest((ShareGroupOffsetsRequestGroup("g"),)),
        1,
        # 1 group, "g", topics null, the group's tags, the request's
        "02 0267 00 00 00",
    ),
    "offsets-request-topics-v1": (
        DescribeShareGroupOffsetsRequest((ShareGroupOffsetsRequestGroup("g", (("t", (0, 3)),)),)),
        1,
        # 1 group, "g", 1 topic, "t", 2 partitions (0, 3), tags of the topic, group, request
        "02 0267 02 0274 03 00000000 00000003 00 00 00",
    ),
    "offsets-response-v1": (
        DescribeShareGroupOffsetsResponse((STATE,)),
        1,
        # throttle; 1 group, "g"; 1 topic, "t", its id; 1 partition: 0, start offset 17,
        # leader epoch 5, lag 2, no error, null message, tags; the topic's tags; the group's
        # error code, null message, tags; the response's tags
        "00000000 02 0267 02 0274 00000000000000000000000000000001 "
        "02 00000000 0000000000000011 00000005 0000000000000002 0000 00 00 "
        "00 0000 00 00 00",
    ),
    "offsets-response-error-v1": (
        DescribeShareGroupOffsetsResponse(
            (DescribedShareGroupOffsets("g", (), ErrorCode.NOT_COORDINATOR, "x"),), 10
        ),
        1,
        "0000000a 02 0267 01 0010 0278 00 00",
    ),
    "alter-request-v0": (
        AlterShareGroupOffsetsRequest("g", (("t", ((0, 5),)),)),
        0,
        # "g"; 1 topic, "t"; 1 partition: 0, start offset 5, tags; the topic's tags; tags
        "0267 02 0274 02 00000000 0000000000000005 00 00 00",
    ),
    "alter-response-v0": (
        AlterShareGroupOffsetsResponse(
            0, None, (AlteredShareGroupOffsetsTopic("t", TOPIC, (AlteredSharePartition(0),)),)
        ),
        0,
        # throttle, no error, null message; 1 topic, "t", its id; 1 partition: 0, no error,
        # null message, tags; the topic's tags; tags
        "00000000 0000 00 02 0274 00000000000000000000000000000001 02 00000000 0000 00 00 00 00",
    ),
    "alter-response-error-v0": (
        AlterShareGroupOffsetsResponse(ErrorCode.NON_EMPTY_GROUP, "members"),
        0,
        "00000000 0044 086d656d62657273 01 00",
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_writes_and_reads_what_the_definitions_say(name: str) -> None:
    message, version, golden = GOLDEN[name]
    assert codec.encode(message, version).hex() == golden.replace(" ", "")
    assert codec.decode(type(message), bytes.fromhex(golden), version) == message


def test_whole_frames_carry_api_key_90() -> None:
    request, _, _ = GOLDEN["offsets-request-topics-v1"]
    assert isinstance(request, DescribeShareGroupOffsetsRequest)
    frame = codec.encode_request(request, 1, 7, "admin")
    assert frame[:4] == bytes.fromhex("005a0001")  # key 90, v1
    assert codec.decode_request(frame) == (7, "admin", request)
    assert (
        codec.response_type(DescribeShareGroupOffsetsRequest) is DescribeShareGroupOffsetsResponse
    )


NAMES = st.text(max_size=5)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
REQUESTS = st.builds(
    DescribeShareGroupOffsetsRequest,
    st.lists(
        st.builds(
            ShareGroupOffsetsRequestGroup,
            NAMES,
            st.none()
            | st.lists(st.tuples(NAMES, st.lists(INT32).map(tuple)), max_size=3).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
)


def _responses(version: int) -> st.SearchStrategy[DescribeShareGroupOffsetsResponse]:
    partitions = st.builds(
        SharePartitionOffset,
        INT32,
        INT64,
        INT32,
        INT64 if version >= 1 else st.just(-1),
        st.integers(-(2**15), 2**15 - 1),
        st.none() | NAMES,
    )
    topics = st.builds(
        ShareGroupOffsetsTopic, NAMES, st.uuids(), st.lists(partitions, max_size=3).map(tuple)
    )
    groups = st.builds(
        DescribedShareGroupOffsets,
        NAMES,
        st.lists(topics, max_size=3).map(tuple),
        st.integers(-(2**15), 2**15 - 1),
        st.none() | NAMES,
    )
    return st.builds(
        DescribeShareGroupOffsetsResponse,
        st.lists(groups, max_size=3).map(tuple),
        INT32,
        st.just(version),
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_round_trip(data: st.DataObject) -> None:
    request = data.draw(REQUESTS)
    assert codec.decode(type(request), codec.encode(request, 1), 1) == request
    response = data.draw(_responses(1))
    assert codec.decode(type(response), codec.encode(response, 1), 1) == response


def test_refuses_malformed_bytes() -> None:
    good = bytes.fromhex(GOLDEN["offsets-response-v1"][2])
    for cut in range(len(good)):
        with pytest.raises(ProtocolCodecError):
            codec.decode(DescribeShareGroupOffsetsResponse, good[:cut], 1)
    with pytest.raises(ProtocolCodecError, match="after the end"):
        codec.decode(DescribeShareGroupOffsetsResponse, good + b"\x00", 1)
    with pytest.raises(ProtocolCodecError, match="more than the bytes left"):
        codec.decode(DescribeShareGroupOffsetsResponse, bytes(4) + b"\xff\xff\xff\x0f", 1)
    with pytest.raises(ProtocolCodecError, match="no version 0"):
        codec.decode(DescribeShareGroupOffsetsResponse, good, 0)  # v0: not spoken here


def test_version_is_v1_and_a_broker_without_it_is_answered_unsupported_version() -> None:
    request = _OwnCodecRequest(
        DescribeShareGroupOffsetsRequest((ShareGroupOffsetsRequestGroup("g"),))
    )
    assert request.API_KEY == 90
    assert BrokerVersionData(api_versions={90: (0, 1)}).api_version(request) == 1
    assert BrokerVersionData(api_versions={90: (0, 5)}).api_version(request) == 1
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion) as e:
        BrokerVersionData(api_versions={90: (0, 0)}).api_version(request)
    answer = request.unoffered(e.value)
    assert isinstance(answer, DescribeShareGroupOffsetsResponse) and answer.version == -1
    (group,) = answer.groups
    assert group.group_id == "g" and group.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert group.error_message is not None and "API key 90" in group.error_message


def test_alter_is_v0_and_a_broker_without_it_is_answered_unsupported_version() -> None:
    request = _OwnCodecRequest(AlterShareGroupOffsetsRequest("g", (("t", ((0, 5),)),)))
    assert request.API_KEY == 91
    assert BrokerVersionData(api_versions={91: (0, 0)}).api_version(request) == 0
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion) as e:
        BrokerVersionData(api_versions={}).api_version(request)
    answer = request.unoffered(e.value)
    assert isinstance(answer, AlterShareGroupOffsetsResponse) and answer.version == -1
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        AlterShareGroupOffsetsRequest,
        NAMES,
        st.lists(
            st.tuples(NAMES, st.lists(st.tuples(INT32, INT64), max_size=3).map(tuple)), max_size=3
        ).map(tuple),
    ),
    st.builds(
        AlterShareGroupOffsetsResponse,
        st.integers(-(2**15), 2**15 - 1),
        st.none() | NAMES,
        st.lists(
            st.builds(
                AlteredShareGroupOffsetsTopic,
                NAMES,
                st.uuids(),
                st.lists(
                    st.builds(
                        AlteredSharePartition,
                        INT32,
                        st.integers(-(2**15), 2**15 - 1),
                        st.none() | NAMES,
                    ),
                    max_size=3,
                ).map(tuple),
            ),
            max_size=3,
        ).map(tuple),
        INT32,
        st.just(0),
    ),
)
def test_alter_round_trip(
    request: AlterShareGroupOffsetsRequest, response: AlterShareGroupOffsetsResponse
) -> None:
    assert codec.decode(type(request), codec.encode(request, 0), 0) == request
    assert codec.decode(type(response), codec.encode(response, 0), 0) == response
    with pytest.raises(ProtocolCodecError, match="no version 1"):
        codec.encode(request, 1)
