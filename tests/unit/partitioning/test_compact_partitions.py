"""Partitions held compactly: the same values, bytes and results as tuples of TopicPartition.

The sticky assignors return ids, and the decoders return topic runs with an int32 array;
both make TopicPartition objects only when read. Everything a user can observe must be
what the tuple of the same partitions gives: equality, hash, repr, order, encoded bytes,
and the assignment computed from claims held either way.
"""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Mapping, Sequence

import pytest

from recipes.partitioning.assignors import (
    CooperativeStickyAssignor,
    StickyAssignor,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)

from .test_hostile_claims import hostile_claims, random_group, subscriptions

TP = TopicPartition
Sticky = type[StickyAssignor] | type[CooperativeStickyAssignor]
STICKY: list[Sticky] = [StickyAssignor, CooperativeStickyAssignor]


def eager(partitions: Sequence[TopicPartition]) -> tuple[TopicPartition, ...]:
    """The same partitions as a plain tuple (what every assignment used to hold)."""
    return tuple(iter(partitions))


def assign(
    cls: Sticky, counts: Mapping[str, int], topics: Mapping[str, Sequence[str]]
) -> dict[str, Assignment]:
    return cls().assign(counts, {m: Subscription(tuple(t)) for m, t in topics.items()})


@pytest.mark.parametrize("cls", STICKY)
@pytest.mark.parametrize(
    ("counts", "members"),
    [
        ({"a": 4, "b": 4}, 4),  # one partition per topic per member
        ({"a": 7, "b": 3, "c": 0}, 3),  # runs of several partitions, an empty topic
        ({"a": 2}, 5),  # members with nothing
        ({"a": 5, "b": 5}, 2),  # P % M extra partitions
    ],
)
def test_sticky_result_behaves_as_its_tuple(
    cls: Sticky, counts: dict[str, int], members: int
) -> None:
    result = assign(cls, counts, {f"m{i}": list(counts) for i in range(members)})
    for assignment in result.values():
        partitions = assignment.partitions
        plain = eager(partitions)
        assert plain == tuple(sorted(plain))
        assert len(partitions) == len(plain)
        assert partitions == plain and plain == partitions
        assert (partitions != plain) is False
        assert hash(partitions) == hash(plain)
        assert repr(partitions) == repr(plain)
        assert assignment == Assignment(plain)
        assert hash(assignment) == hash(Assignment(plain))
        assert repr(assignment) == repr(Assignment(plain))
        assert list(reversed(partitions)) == list(reversed(plain))
        assert partitions[1:] == plain[1:]
        tail = (TP("z", 9),)
        assert partitions + tail == plain + tail
        assert tail + partitions == tail + plain
        if plain:
            assert partitions[0] == plain[0] and partitions[-1] == plain[-1]
            assert plain[0] in partitions
            assert partitions.index(plain[-1]) == len(plain) - 1
        assert TP("nope", 0) not in partitions
        assert encode_assignment(assignment) == old_encode(assignment)
        assert pickle.loads(pickle.dumps(assignment)) == assignment
        assert copy.deepcopy(assignment) == assignment


def test_compact_partitions_differ_from_other_partitions() -> None:
    result = assign(CooperativeStickyAssignor, {"a": 2}, {"m0": ["a"], "m1": ["a"]})
    assert result["m0"].partitions == (TP("a", 0),)
    assert result["m0"].partitions != (TP("a", 1),)
    assert result["m0"].partitions != result["m1"].partitions
    assert result["m0"] != result["m1"]
    as_list: object = [TP("a", 0)]
    assert result["m0"].partitions != as_list  # as with a tuple


def test_len_and_encoding_make_no_topic_partitions() -> None:
    result = assign(StickyAssignor, {"a": 1000, "b": 1000}, {"m0": ["a", "b"], "m1": ["a", "b"]})
    partitions = result["m0"].partitions
    assert len(partitions) == 1000
    encode_assignment(result["m0"])
    assert partitions._tuple is None  # type: ignore[attr-defined]
    list(partitions)
    assert partitions._tuple is not None  # type: ignore[attr-defined]


def test_other_sequences_are_stored_as_tuples() -> None:
    assignment = Assignment([TP("a", 1), TP("a", 0)])
    assert type(assignment.partitions) is tuple
    assert assignment == Assignment((TP("a", 1), TP("a", 0)))
    sub = Subscription(("a",), owned_partitions=[TP("a", 0)])
    assert type(sub.owned_partitions) is tuple


def old_encode(assignment: Assignment) -> bytes:
    """The encoder's generic path: a tuple of TopicPartition grouped in order."""
    return encode_assignment(Assignment(eager(assignment.partitions), assignment.user_data))


@pytest.mark.parametrize("seed", range(60))
def test_encoding_compact_partitions_writes_the_tuples_bytes(seed: int) -> None:
    rng = random.Random(seed)
    counts = {f"t{i}": rng.randrange(0, 40) for i in range(rng.randrange(1, 6))}
    members = {
        f"m{i}": rng.sample(sorted(counts), rng.randrange(1, len(counts) + 1))
        for i in range(rng.randrange(1, 9))
    }
    for cls in STICKY:
        for assignment in assign(cls, counts, members).values():
            with_data = Assignment(assignment.partitions, rng.choice([None, b"", b"ud"]))
            wire = encode_assignment(with_data, rng.randrange(4))
            assert wire[2:] == old_encode(with_data)[2:]
            decoded = decode_assignment(wire)
            assert decoded == with_data
            assert encode_assignment(decoded) == encode_assignment(with_data)
            assert encode_assignment(decoded) == old_encode(decoded)
            body = encode_sticky_user_data(assignment.partitions, 3)
            assert body == encode_sticky_user_data(eager(assignment.partitions), 3)
            assert decode_sticky_user_data(body).partitions == eager(assignment.partitions)


def test_decoded_runs_of_one_topic_encode_as_kafka_groups_them() -> None:
    # The same topic twice on the wire (not what Kafka writes, but readable): written back
    # as one group, as the tuple of its partitions would be.
    wire = encode_assignment(Assignment((TP("a", 0), TP("b", 0), TP("a", 1))))
    again = decode_assignment(wire)
    assert again.partitions == (TP("a", 0), TP("a", 1), TP("b", 0))
    assert encode_assignment(again) == wire
    # A hand-built message with two runs of "a".
    two_runs = (
        b"\x00\x03\x00\x00\x00\x02"
        + b"\x00\x01a\x00\x00\x00\x01\x00\x00\x00\x05"
        + b"\x00\x01a\x00\x00\x00\x01\x00\x00\x00\x02"
        + b"\xff\xff\xff\xff"
    )
    decoded = decode_assignment(two_runs)
    assert decoded.partitions == (TP("a", 5), TP("a", 2))
    assert encode_assignment(decoded) == old_encode(decoded)
    assert encode_assignment(decoded) != two_runs


def test_decoded_owned_partitions_equal_the_tuples() -> None:
    owned = (TP("b", 3), TP("a", 1), TP("b", 0))
    decoded = decode_subscription(encode_subscription(Subscription(("a", "b"), None, owned, 4)))
    assert decoded.owned_partitions == (TP("a", 1), TP("b", 0), TP("b", 3))
    assert decoded == Subscription(("a", "b"), None, tuple(sorted(owned)), 4)
    assert len(decoded.owned_partitions) == 3


@pytest.mark.parametrize("seed", range(300))
def test_claims_decoded_or_as_tuples_give_the_same_assignment(seed: int) -> None:
    # Hostile claims (out of range, negative, unknown topics, duplicates) read from the
    # wire, against the same claims as tuples. (The eager assignor always reads its
    # claims from user data, so test_hostile_claims covers its compact path.)
    rng = random.Random(seed)
    counts, topics = random_group(rng)
    claims = hostile_claims(rng, counts, topics, generation=5)
    cls = CooperativeStickyAssignor
    decoded = {
        m: decode_subscription(encode_subscription(s))
        for m, s in subscriptions(cls, topics, claims, rng).items()
    }
    materialized = {
        m: Subscription(s.topics, s.user_data, eager(s.owned_partitions), s.generation_id)
        for m, s in decoded.items()
    }
    compact = cls().assign(counts, decoded)
    plain = cls().assign(counts, materialized)
    assert {m: eager(a.partitions) for m, a in compact.items()} == {
        m: eager(a.partitions) for m, a in plain.items()
    }


def test_fresh_uniform_assignment_is_dealt_round_robin() -> None:
    # Java's result for identical subscriptions and no claims: partitions sorted by topic
    # and number, dealt to members in id order, one at a time.
    counts = {"a": 5, "b": 4}
    members = [f"m{i}" for i in range(4)]
    every = [TP(t, p) for t in sorted(counts) for p in range(counts[t])]
    for cls in STICKY:
        result = assign(cls, counts, {m: ["b", "a"] for m in members})
        expected = {m: tuple(every[i::4]) for i, m in enumerate(members)}
        assert {m: eager(a.partitions) for m, a in result.items()} == expected
