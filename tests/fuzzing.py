"""A fuzzer of every decoder of bytes that another member or the broker controls.

A member's metadata and a leader's assignment come from the network, a pipeline's commit
metadata from the group's offsets, its manifests from a shared file system, and the
rebalance timeline's records from the wake-up topic (anyone with WRITE on it): one broken
or malicious writer must not crash the rebalance leader (or every member) with an
exception nobody catches. Each decoder is fed seeded random inputs (random bytes,
truncations, bit flips, splices and hostile lengths of valid encodings, deep nesting) and
may only return or raise its typed error (:class:`~coordination.errors.ProtocolCodecError`;
the pipeline's :class:`PipelineOutputError` for manifests).

CI runs a short share (tests/unit/test_hostile_input.py); a long run, one process per
core, with figures::

    python -m tests.fuzzing --inputs 1000000
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kafka.record import MemoryRecordsBuilder

from coordination.__main__ import timeline_line
from coordination._inspection import decode_timeline_record
from coordination._metrics import RebalanceRecord
from coordination._protocol import consumer_group as cg
from coordination._protocol import consumer_group_codec as cg_codec
from coordination._protocol import fetch_codec, record_batches
from coordination._protocol import share_group as sg
from coordination._protocol import share_group_codec as sg_codec
from coordination.errors import CoordinationError, ProtocolCodecError
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
from recipes.pipeline._output import PipelineOutputError, _parse, decode_manifest
from recipes.tasks._assignor import AssignmentStatus, WorkerAssignment, WorkerState
from recipes.tasks._wire import decode_assignment as decode_task_assignment
from recipes.tasks._wire import decode_worker_metadata, encode_worker_metadata
from recipes.tasks._wire import encode_assignment as encode_task_assignment

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
    # Flexible versions: unsigned varint lengths and counts at their largest, and too long.
    for varint in (b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07", b"\xff" * 6):
        out.append(varint + bytes(8))  # a first array or string
        out.append(bytes(6) + varint + bytes(8))  # after a throttle time and error code
        out.append(bytes(17) + b"\x01" + varint)  # a tagged field section
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


def check(
    decoder: Decoder, data: bytes, allowed: type[CoordinationError] = ProtocolCodecError
) -> bool:
    """Decode ``data``: True if it decoded, False if it was refused (``allowed`` raised, or
    None returned: not a value of the format).

    Raises:
        AssertionError: anything else escaped, naming the decoder and the input.
    """
    try:
        decoded = decoder(data)
    except allowed:
        return False
    except Exception as e:
        raise AssertionError(
            f"{decoder.__name__} raised {type(e).__name__}: {e!s:.200} on {data[:120]!r}"
            f" ({len(data)} bytes)"
        ) from e
    return decoded is not None


_CG_TOPICS = (
    cg.TopicIdPartitions(uuid.UUID(int=0x0123456789ABCDEF), (0, 3, 7)),
    cg.TopicIdPartitions(uuid.uuid5(uuid.NAMESPACE_DNS, "t"), ()),
)


def _heartbeat_response_samples(version: int) -> list[bytes]:
    responses = [
        cg.ConsumerGroupHeartbeatResponse(0, None, "m-1", 3, 5000, _CG_TOPICS, version=version),
        cg.ConsumerGroupHeartbeatResponse(0, None, "m-1", 4, 5000, (), 10, version=version),
        cg.ConsumerGroupHeartbeatResponse(110, "fenced", None, -1, version=version),
    ]
    return [cg_codec.encode(r, version) for r in responses]


def _describe_response_samples(version: int) -> list[bytes]:
    topics = tuple(
        cg.DescribedTopicPartitions(t.topic_id, f"topic-{n}", t.partitions)
        for n, t in enumerate(_CG_TOPICS)
    )
    member = cg.DescribedConsumerGroupMember(
        "m-1", "static", "rack", 4, "client", "/127.0.0.1", ("a", "b"), "a.*", topics, topics[:1],
        1 if version else -1,
    )  # fmt: skip
    groups = (
        cg.DescribedConsumerGroup(0, "g", None, "Stable", 5, 5, "uniform", (member,)),
        cg.DescribedConsumerGroup(69, "h", "not found", "Dead"),
    )
    return [cg_codec.encode(cg.ConsumerGroupDescribeResponse(groups, 0, version), version)]


def _heartbeat_request_samples() -> list[bytes]:
    joining = cg.ConsumerGroupHeartbeatRequest(
        "g", "m", 0, "i", "r", 300_000, ("a",), "a.*", "uniform", _CG_TOPICS
    )
    requests = [joining, cg.ConsumerGroupHeartbeatRequest("g", "m", 7)]
    return [cg_codec.encode(r, 1) for r in requests]


def _heartbeat_response_v0(data: bytes) -> object:
    return cg_codec.decode(cg.ConsumerGroupHeartbeatResponse, data, 0)


def _heartbeat_response_v1(data: bytes) -> object:
    return cg_codec.decode(cg.ConsumerGroupHeartbeatResponse, data, 1)


def _describe_response_v0(data: bytes) -> object:
    return cg_codec.decode(cg.ConsumerGroupDescribeResponse, data, 0)


def _describe_response_v1(data: bytes) -> object:
    return cg_codec.decode(cg.ConsumerGroupDescribeResponse, data, 1)


def _heartbeat_request_v1(data: bytes) -> object:
    return cg_codec.decode(cg.ConsumerGroupHeartbeatRequest, data, 1)


def _share_records() -> bytes:
    """Two record batches, the second gzip-compressed, as a ShareFetch returns them."""
    out = b""
    for offset, compression in ((10, 0), (13, 1)):
        builder = MemoryRecordsBuilder(2, compression, 1 << 16, offset=offset)
        builder.append(1_700_000_000_000, b"k", b"v", [("h", b"x"), ("n", None)])
        builder.append(1_700_000_000_001, None, b"\x00" * 40, [])
        builder.close()
        out += bytes(builder.buffer())
    return out


def _share_response_samples(kind: type[sg_codec.Response], version: int) -> list[bytes]:
    leader = sg.LeaderIdAndEpoch(1, 0)
    nodes = (sg.NodeEndpoint(2, "broker-2", 9092, "rack"), sg.NodeEndpoint(3, "h", 1))
    responses: list[sg_codec.Response]
    if kind is sg.ShareGroupHeartbeatResponse:
        responses = [
            sg.ShareGroupHeartbeatResponse(0, None, "m-1", 3, 5000, _CG_TOPICS),
            sg.ShareGroupHeartbeatResponse(25, "unknown member", None, -1),
        ]
    elif kind is sg.ShareGroupDescribeResponse:
        topics = tuple(
            cg.DescribedTopicPartitions(t.topic_id, f"topic-{n}", t.partitions)
            for n, t in enumerate(_CG_TOPICS)
        )
        member = sg.DescribedShareGroupMember("m-1", "rack", 4, "c", "/127.0.0.1", ("a",), topics)
        groups = (
            sg.DescribedShareGroup(0, "g", None, "Stable", 5, 5, "simple", (member,)),
            sg.DescribedShareGroup(69, "h", "not found", "Dead"),
        )
        responses = [sg.ShareGroupDescribeResponse(groups)]
    elif kind is sg.ShareFetchResponse:
        acquired = (sg.AcquiredRecords(10, 11, 1), sg.AcquiredRecords(13, 14, 5))
        partitions = (
            sg.ShareFetchPartitionData(0, current_leader=leader, records=_share_records(),
                                       acquired_records=acquired),
            sg.ShareFetchPartitionData(1, 6, "not leader", 121, "lock", sg.LeaderIdAndEpoch(2, 7)),
        )  # fmt: skip
        fetched = (sg.ShareFetchTopicResponse(_CG_TOPICS[0].topic_id, partitions),)
        responses = [
            sg.ShareFetchResponse(0, None, 30_000, fetched, nodes),
            sg.ShareFetchResponse(122, "no session", -1),
        ]
    else:
        data = (
            sg.ShareAcknowledgePartitionData(0, current_leader=leader),
            sg.ShareAcknowledgePartitionData(1, 121, "lock lost"),
        )
        acknowledged = (sg.ShareAcknowledgeTopicResponse(_CG_TOPICS[0].topic_id, data),)
        responses = [
            sg.ShareAcknowledgeResponse(0, None, 15_000 * (version - 1), acknowledged, nodes)
        ]
    return [sg_codec.encode(r, version) for r in responses]


def _share_request_samples(kind: type[sg_codec.Request]) -> list[bytes]:
    batches = (
        sg.AcknowledgementBatch(10, 12, (sg.AcknowledgeType.ACCEPT,)),
        sg.AcknowledgementBatch(13, 15, (1, 0, 4)),
    )
    topic_id = _CG_TOPICS[0].topic_id
    requests: list[sg_codec.Request]
    if kind is sg.ShareFetchRequest:
        topics = (sg.ShareFetchTopic(topic_id, (sg.ShareFetchPartition(0, batches),)),)
        requests = [
            sg.ShareFetchRequest("g", "m", 0, 500, 1, topics=topics),
            sg.ShareFetchRequest("g", "m", 4, 0, 0, 1 << 20, 1, 1, 1, True, topics, _CG_TOPICS),
        ]
    else:
        partitions = (sg.ShareAcknowledgePartition(0, batches),)
        requests = [
            sg.ShareAcknowledgeRequest(
                "g", "m", 2, True, (sg.ShareAcknowledgeTopic(topic_id, partitions),)
            )
        ]
    return [sg_codec.encode(r, 2) for r in requests]


def _share_decoder(kind: type[sg_codec.Message], version: int) -> Decoder:
    def decode(data: bytes) -> object:
        return sg_codec.decode(kind, data, version)

    decode.__name__ = f"decode {kind.__name__} v{version}"
    return decode


def _commit_metadata_samples() -> list[bytes]:
    return [
        b"events-3-00000000000000000100-00000000000000000200-0f8fad5b-d9cb-469f-a161-4f4c1b5d0e11",
        b"t-0-00000000000000000000-00000000000000000010",
        b"a.b_c-12-00000000000000000007-00000000000000000007-x",
    ]


def _manifest_samples() -> list[bytes]:
    return [
        json.dumps(
            {
                "format": 2,
                "topic": "events",
                "partition": 3,
                "start_offset": 100,
                "end_offset": 200,
                "records": 100,
                "rejected": 1,
                "rejected_offsets": [150],
                "window_ms": 60000,
                "files": {"part-00000.parquet": 7},
                "rows": 7,
            }
        ).encode(),
        b'{"topic":"t","partition":0}',
    ]


def _timeline_samples() -> list[bytes]:
    # As a member publishes them (dataclasses.asdict of its RebalanceRecord, plus its sender).
    records = [
        RebalanceRecord(
            started_at=1_760_000_000.125,
            reason="the member is joining the group for the first time",
            duration_s=0.041,
            generation=1,
            member_id="coordination-4f0e",
            is_leader=True,
            failed_attempts=0,
            moved="leads with token 7",
        ),
        RebalanceRecord(
            started_at=1_760_000_003,
            reason="group is already rebalancing",
            duration_s=2,
            generation=2,
            member_id="m-2",
            is_leader=False,
            failed_attempts=3,
            group_instance_id="worker-1",
            client_id="tasks",
        ),
    ]
    return [json.dumps({**dataclasses.asdict(r), "sender": "0f8fad5b"}).encode() for r in records]


def _timeline_shown(data: bytes) -> object:
    # Decoded, then rendered as `describe --timeline` prints it (local time, durations).
    record = decode_timeline_record(data)
    return timeline_line(record), record.finished_at


def _pipeline_commit_metadata(data: bytes) -> object:
    # The group's committed metadata arrives as a string (the transport decodes it).
    return _parse(data.decode("utf-8", "replace"))


def _fetch_response_samples(version: int) -> list[bytes]:
    """FetchResponses as kafka-python's generated class writes them (header v1 first): one
    with records, aborted transactions, a new leader and node endpoints; one failed."""
    from kafka.protocol.consumer.fetch import FetchResponse

    data = FetchResponse.FetchableTopicResponse.PartitionData
    partitions = [
        data(
            partition_index=0,
            error_code=0,
            high_watermark=20,
            last_stable_offset=20,
            log_start_offset=0,
            aborted_transactions=[data.AbortedTransaction(producer_id=4, first_offset=9)],
            preferred_read_replica=-1,
            records=_share_records(),
            current_leader=data.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
        ),
        data(
            partition_index=1,
            error_code=6,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=None,
        ),
    ]
    topic = FetchResponse.FetchableTopicResponse(
        topic="orders", topic_id=_CG_TOPICS[0].topic_id, partitions=partitions
    )
    extra = {}
    if version >= 16:
        extra["node_endpoints"] = [FetchResponse.NodeEndpoint(node_id=1, host="h", port=9)]
    header = struct.pack(">i", 7) + b"\x00"
    return [
        header + bytes(FetchResponse(0, 0, 5, [topic], **extra).encode(version=version)),
        header + bytes(FetchResponse(0, 70, 0, []).encode(version=version)),
    ]


def _fetch_decoder(version: int) -> Decoder:
    def decode(data: bytes) -> object:
        return fetch_codec.decode_response(data, version)

    decode.__name__ = f"decode FetchResponse v{version}"
    return decode


@dataclass(frozen=True)
class Case:
    """One decoder under fuzzing: its valid samples, and the error it may raise."""

    name: str
    decoder: Decoder
    samples: Callable[[], list[bytes]]
    json_like: bool
    allowed: type[CoordinationError] = ProtocolCodecError


CASES: list[Case] = [
    Case("election candidate", decode_candidate, _election_samples, True),
    Case("election outcome", decode_outcome, _outcome_samples, True),
    Case("consumer subscription", decode_subscription, _subscription_samples, False),
    Case("consumer assignment", decode_assignment, _assignment_samples, False),
    Case("sticky user data", decode_sticky_user_data, _sticky_samples, False),
    Case(
        "cooperative-sticky user data",
        decode_cooperative_sticky_user_data,
        lambda: [encode_cooperative_sticky_user_data(5)],
        False,
    ),
    Case("task worker metadata", lambda d: decode_worker_metadata("m", d), _worker_samples, False),
    Case("task assignment", decode_task_assignment, _task_assignment_samples, False),
    Case("pipeline commit metadata", _pipeline_commit_metadata, _commit_metadata_samples, False),
    Case("pipeline manifest", decode_manifest, _manifest_samples, True, PipelineOutputError),
    Case("rebalance timeline record", _timeline_shown, _timeline_samples, True),
    # The consumer group protocol's responses (KIP-848), from the broker.
    Case(
        "ConsumerGroupHeartbeat response v0",
        _heartbeat_response_v0,
        lambda: _heartbeat_response_samples(0),
        False,
    ),
    Case(
        "ConsumerGroupHeartbeat response v1",
        _heartbeat_response_v1,
        lambda: _heartbeat_response_samples(1),
        False,
    ),
    Case(
        "ConsumerGroupDescribe response v0",
        _describe_response_v0,
        lambda: _describe_response_samples(0),
        False,
    ),
    Case(
        "ConsumerGroupDescribe response v1",
        _describe_response_v1,
        lambda: _describe_response_samples(1),
        False,
    ),
    Case(
        "ConsumerGroupHeartbeat request v1",
        _heartbeat_request_v1,
        _heartbeat_request_samples,
        False,
    ),
    # Share groups (KIP-932): the responses from the broker, the requests the simulator reads,
    # and the record batches of a ShareFetch.
    *(
        Case(
            f"{kind.__name__.removesuffix('Response')} response v{version}",
            _share_decoder(kind, version),
            functools.partial(_share_response_samples, kind, version),
            False,
        )
        for kind, version in (
            (sg.ShareGroupHeartbeatResponse, 1),
            (sg.ShareGroupDescribeResponse, 1),
            (sg.ShareFetchResponse, 1),
            (sg.ShareFetchResponse, 2),
            (sg.ShareAcknowledgeResponse, 1),
            (sg.ShareAcknowledgeResponse, 2),
        )
    ),
    *(
        Case(
            f"{kind.__name__.removesuffix('Request')} request v2",
            _share_decoder(kind, 2),
            functools.partial(_share_request_samples, kind),
            False,
        )
        for kind in (sg.ShareFetchRequest, sg.ShareAcknowledgeRequest)
    ),
    Case("ShareFetch records", sg_codec.decode_records, lambda: [_share_records()], False),
    Case(
        "DescribeShareGroupOffsets response v1",
        _share_decoder(sg.DescribeShareGroupOffsetsResponse, 1),
        lambda: _share_offsets_samples(),
        False,
    ),
    Case(
        "AlterShareGroupOffsets response v0",
        _share_decoder(sg.AlterShareGroupOffsetsResponse, 0),
        lambda: _share_alter_samples(),
        False,
    ),
    # Fetch (the lean record fetcher): the broker's responses and their record batches.
    *(
        Case(
            f"Fetch response v{version}",
            _fetch_decoder(version),
            functools.partial(_fetch_response_samples, version),
            False,
        )
        for version in (12, 13, 16, 18)
    ),
    Case(
        "Fetch records with batch headers",
        record_batches.decode_with_batches,
        lambda: [_share_records()],
        False,
    ),
]


def _share_alter_samples() -> list[bytes]:
    partitions = (sg.AlteredSharePartition(0), sg.AlteredSharePartition(1, 3, "unknown"))
    topics = (sg.AlteredShareGroupOffsetsTopic("orders", _CG_TOPICS[0].topic_id, partitions),)
    responses = [
        sg.AlterShareGroupOffsetsResponse(0, None, topics),
        sg.AlterShareGroupOffsetsResponse(68, "members"),
    ]
    return [sg_codec.encode(r, 0) for r in responses]


def _share_offsets_samples() -> list[bytes]:
    partitions = (
        sg.SharePartitionOffset(0, 17, 5, 2),
        sg.SharePartitionOffset(1, -1, -1, -1, 3, "unknown partition"),
    )
    topics = (sg.ShareGroupOffsetsTopic("orders", _CG_TOPICS[0].topic_id, partitions),)
    responses = [
        sg.DescribeShareGroupOffsetsResponse((sg.DescribedShareGroupOffsets("g", topics),)),
        sg.DescribeShareGroupOffsetsResponse((sg.DescribedShareGroupOffsets("g", (), 16, "no"),)),
    ]
    return [sg_codec.encode(r, 1) for r in responses]


@dataclass
class Figures:
    case: str
    inputs: int = 0
    decoded: int = 0
    refused: int = 0
    seconds: float = 0.0


def fuzz(case: Case, inputs: int, seed: str = "") -> Figures:
    """The valid samples, the hand-made hostile inputs, then ``inputs`` seeded mutations.

    Raises:
        AssertionError: a valid sample did not decode, or another error escaped.
    """
    figures = Figures(case.name)
    started = time.perf_counter()
    valid = case.samples()
    for data in valid:
        case.decoder(data)  # the samples themselves decode
    hostile = _HOSTILE_JSON if case.json_like else _hostile_binary()
    rng = random.Random(f"hostile-{case.name}{seed}")
    mutations = _mutations(rng, valid, case.json_like)
    for n, data in enumerate(itertools.chain(hostile, mutations)):
        if n >= len(hostile) + inputs:
            break
        if check(case.decoder, data, case.allowed):
            figures.decoded += 1
        else:
            figures.refused += 1
        figures.inputs += 1
    figures.seconds = time.perf_counter() - started
    return figures


def _fuzz_by_name(args: tuple[str, int, str]) -> Figures:
    name, inputs, seed = args
    return fuzz(next(c for c in CASES if c.name == name), inputs, seed)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import multiprocessing
    import os

    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__)
    parser.add_argument("--inputs", type=int, default=1_000_000, help="mutations per decoder")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", default="", help="varies the mutations (default: CI's)")
    parser.add_argument(
        "--only", action="append", metavar="DECODER", help="fuzz only this decoder (repeatable)"
    )
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {c.name for c in CASES}
    if unknown:
        parser.error(f"no decoder {sorted(unknown)}; known: {[c.name for c in CASES]}")
    work = [(c.name, args.inputs, args.seed) for c in CASES if c.name in (args.only or [c.name])]
    started = time.perf_counter()
    with multiprocessing.Pool(args.jobs) as pool:
        results = pool.map(_fuzz_by_name, work, chunksize=1)
    print(f"{'decoder':<30} {'inputs':>10} {'decoded':>9} {'refused':>10} {'s':>7} {'per s':>8}")
    for f in results:
        rate = f.inputs / f.seconds if f.seconds else 0.0
        print(
            f"{f.case:<30} {f.inputs:>10} {f.decoded:>9} {f.refused:>10} "
            f"{f.seconds:>7.1f} {rate:>8.0f}"
        )
    total = sum(f.inputs for f in results)
    print(
        f"decoders={len(results)} inputs={total} "
        f"min_inputs_per_decoder={min(f.inputs for f in results)} escaped=0 "
        f"seconds={time.perf_counter() - started:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
