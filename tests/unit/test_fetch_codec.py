"""Fetch v12-v18 on the wire (coordination/_protocol/fetch_codec.py) against kafka-python's
generated Fetch classes, both ways, for every version; the record batches' headers as the
lean fetcher reads them (coordination/_protocol/record_batches.py)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer.fetch import FetchRequest as KafkaFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as KafkaFetchResponse
from kafka.record import MemoryRecordsBuilder

from coordination._protocol import fetch_codec as codec
from coordination._protocol.record_batches import decode_fields, decode_with_batches
from coordination.errors import ProtocolCodecError

VERSIONS = range(codec.MIN_VERSION, codec.MAX_VERSION + 1)
TOPIC_ID = uuid.UUID("0f8fad5b-d9cb-469f-a161-4f4c1b5d0e11")
OTHER_ID = uuid.UUID("7c9e6679-7425-40de-944b-e07fc1f90ae7")


def _body(encoded: bytes) -> bytes:
    """The request's body: past header v2 (key, version, correlation id, client id, tags)."""
    client_id_size = int.from_bytes(encoded[8:10], "big")
    return encoded[10 + client_id_size + 1 :]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_reads_back_in_kafka_python(version: int) -> None:
    request = codec.FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=codec.READ_UNCOMMITTED,
        session_id=7,
        session_epoch=3,
        topics=(
            codec.FetchTopic(
                "t",
                TOPIC_ID,
                (
                    codec.FetchPartition(0, 42, 1 << 20, current_leader_epoch=5),
                    codec.FetchPartition(3, 9, 4096),
                ),
            ),
            codec.FetchTopic("u", OTHER_ID, (codec.FetchPartition(1, 2**40, 1),)),
        ),
        forgotten=(codec.ForgottenTopic("v", OTHER_ID, (1, 2)),),
        rack_id="rack-a",
    )
    encoded = codec.encode_request(request, version, 99, "client")
    assert encoded[:8] == bytes.fromhex("00 01") + version.to_bytes(2, "big") + (99).to_bytes(
        4, "big"
    )
    theirs = KafkaFetchRequest.decode(_body(encoded), version=version)
    assert (theirs.max_wait_ms, theirs.min_bytes, theirs.max_bytes) == (500, 1, 50 << 20)
    assert (theirs.isolation_level, theirs.session_id, theirs.session_epoch) == (0, 7, 3)
    assert theirs.rack_id == "rack-a"
    if version <= 14:
        assert theirs.replica_id == -1
    first, second = theirs.topics
    if version >= 13:
        assert (first.topic_id, second.topic_id) == (TOPIC_ID, OTHER_ID)
    else:
        assert (first.topic, second.topic) == ("t", "u")
    assert [
        (p.partition, p.fetch_offset, p.current_leader_epoch, p.partition_max_bytes)
        for p in first.partitions
    ] == [(0, 42, 5, 1 << 20), (3, 9, -1, 4096)]
    assert [p.last_fetched_epoch for p in first.partitions] == [-1, -1]
    assert second.partitions[0].fetch_offset == 2**40
    (forgotten,) = theirs.forgotten_topics_data
    assert list(forgotten.partitions) == [1, 2]
    assert (forgotten.topic_id if version >= 13 else forgotten.topic) == (
        OTHER_ID if version >= 13 else "v"
    )


def _kafka_response(version: int, records: bytes | None) -> bytes:
    partition = KafkaFetchResponse.FetchableTopicResponse.PartitionData
    aborted = partition.AbortedTransaction(producer_id=5, first_offset=7)
    partitions = [
        partition(
            partition_index=2,
            error_code=0,
            high_watermark=100,
            last_stable_offset=90,
            log_start_offset=3,
            aborted_transactions=[aborted],
            preferred_read_replica=-1,
            records=records,
            current_leader=partition.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
            diverging_epoch=partition.EpochEndOffset(epoch=2, end_offset=80),
        ),
        partition(
            partition_index=0,
            error_code=6,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=None,
        ),
    ]
    topic = KafkaFetchResponse.FetchableTopicResponse(
        topic="t", topic_id=TOPIC_ID, partitions=partitions
    )
    extra = {}
    if version >= 16:
        endpoints = [
            KafkaFetchResponse.NodeEndpoint(node_id=1, host="h", port=9, rack=None),
            KafkaFetchResponse.NodeEndpoint(node_id=2, host="k", port=19, rack="r"),
        ]
        extra["node_endpoints"] = endpoints
    response = KafkaFetchResponse(
        throttle_time_ms=12, error_code=0, session_id=11, responses=[topic], **extra
    )
    header = (1234).to_bytes(4, "big") + b"\x00"  # response header v1: no tagged field
    return header + bytes(response.encode(version=version))


def _records() -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 16, offset=10)
    builder.append(1_700_000_000_000, b"k", b"v", [("h", b"x")])
    builder.append(1_700_000_000_001, None, b"w", [])
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("version", VERSIONS)
def test_a_kafka_python_response_reads_back_here(version: int) -> None:
    records = _records()
    correlation_id, response = codec.decode_response(_kafka_response(version, records), version)
    assert correlation_id == 1234
    assert (response.throttle_time_ms, response.error_code, response.session_id) == (12, 0, 11)
    (topic,) = response.responses
    if version >= 13:
        assert (topic.topic, topic.topic_id) == (None, TOPIC_ID)
    else:
        assert (topic.topic, topic.topic_id) == ("t", None)
    data, failed = topic.partitions
    assert (data.partition, data.error_code, data.high_watermark) == (2, 0, 100)
    assert (data.last_stable_offset, data.log_start_offset) == (90, 3)
    assert data.aborted_transactions == (codec.AbortedTransaction(5, 7),)
    assert data.records == records
    assert data.current_leader == codec.LeaderIdAndEpoch(1, 4)
    assert data.diverging_epoch == codec.EpochEndOffset(2, 80)
    assert (failed.partition, failed.error_code, failed.records) == (0, 6, None)
    assert failed.aborted_transactions is None and failed.current_leader is None
    if version >= 16:
        assert response.node_endpoints == (
            codec.NodeEndpoint(1, "h", 9, None),
            codec.NodeEndpoint(2, "k", 19, "r"),
        )
    else:
        assert response.node_endpoints == ()


@pytest.mark.parametrize("version", [11, 19])
def test_versions_outside_12_to_18_are_refused(version: int) -> None:
    request = codec.FetchRequest(500, 1, 1, 0, 0, -1, ())
    with pytest.raises(ValueError, match=f"v{version}"):
        codec.encode_request(request, version, 1, None)
    with pytest.raises(ProtocolCodecError, match=f"v{version}"):
        codec.decode_response(_kafka_response(12, None), version)


def test_a_truncated_response_is_a_codec_error() -> None:
    whole = _kafka_response(16, _records())
    for cut in (3, 10, len(whole) // 2, len(whole) - 1):
        with pytest.raises(ProtocolCodecError):
            codec.decode_response(whole[:cut], 16)
    with pytest.raises(ProtocolCodecError, match="after the end"):
        codec.decode_response(whole + b"\x00", 16)


def test_batch_headers_say_epoch_timestamp_type_and_producer() -> None:
    create_time = MemoryRecordsBuilder(2, 1, 1 << 16, offset=10)  # gzip
    create_time.append(1_700_000_000_000, b"k", b"v", [])
    create_time.append(1_700_000_000_005, b"k", b"w", [])
    create_time.close()
    data = bytes(create_time.buffer())
    # Set the partition leader epoch (bytes 12-15) and the log-append-time attribute as a
    # broker does; the CRC (which covers the attributes) is not checked here.
    data = data[:12] + (7).to_bytes(4, "big") + data[16:]
    attributes = int.from_bytes(data[21:23], "big") | 0x08
    data = data[:21] + attributes.to_bytes(2, "big") + data[23:]
    records, batches, through = decode_with_batches(data + _records())
    assert [r[0] for r in records] == [10, 11, 10, 11]
    assert through == 11
    first, second = batches
    assert (first.first, first.stop, first.last_offset) == (0, 2, 11)
    assert (first.leader_epoch, first.timestamp_type) == (7, 1)
    assert records[0][4] == records[1][4]  # log-append time: the batch's max timestamp
    assert (second.first, second.stop, second.timestamp_type) == (2, 4, 0)
    assert (second.producer_id, second.is_transactional, second.is_control) == (-1, False, False)
    assert decode_fields(data)[0] == records[:2]
