"""Every assignor stays valid whatever members claim to own.

Claims (owned partitions, sticky user data) come from other members and may be stale,
duplicated, out of range, negative, on unknown topics or on topics the claimant no longer
subscribes to. Whatever they are, an assignment gives every partition of a subscribed,
known topic to exactly one member subscribed to its topic, and nothing else. The one
exception is the cooperative protocol: a partition another member claims may be withheld
for one round, to be handed over in the next.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from recipes.partitioning.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)

TP = TopicPartition
ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
STICKY = [StickyAssignor, CooperativeStickyAssignor]
SEEDS = 1500
TOPICS = ["a", "b", "c", "d"]
UNKNOWN = "zz"  # subscribed to by some members, but not in partitions_per_topic


Claims = dict[str, tuple[list[TopicPartition], int]]


def subscriptions(
    cls: type[PartitionAssignor],
    topics: Mapping[str, Sequence[str]],
    claims: Claims,
    rng: random.Random,
) -> dict[str, Subscription]:
    """Each member's subscription, with its claim where ``cls`` reads claims."""
    out = {}
    for member, names in topics.items():
        owned, generation = claims.get(member, ([], -1))
        if cls is StickyAssignor:
            user_data = encode_sticky_user_data(owned, None if generation < 0 else generation)
            out[member] = Subscription(tuple(sorted(names)), user_data)
        elif cls is CooperativeStickyAssignor and rng.random() < 0.3:
            # An older member: the generation only in the user data.
            user_data = encode_cooperative_sticky_user_data(generation)
            out[member] = Subscription(tuple(sorted(names)), user_data, tuple(owned))
        else:
            out[member] = Subscription(
                tuple(sorted(names)), None, tuple(owned), generation_id=generation
            )
    return out


def hostile_claims(
    rng: random.Random,
    counts: Mapping[str, int],
    topics: Mapping[str, Sequence[str]],
    generation: int,
) -> Claims:
    """Claims of every kind: valid, stale, duplicated, out of range, unknown, unsubscribed."""
    every = [TP(t, p) for t, n in counts.items() for p in range(n)]
    claims: Claims = {}
    for member, names in topics.items():
        owned: list[TopicPartition] = []
        for _ in range(rng.randrange(8)):
            kind = rng.randrange(7)
            topic = rng.choice(TOPICS)
            count = counts.get(topic, 0)
            if kind <= 1 and every:  # any existing partition (others may claim it too)
                owned.append(rng.choice(every))
            elif kind == 2:  # one of its own topics' partitions
                mine = [tp for tp in every if tp.topic in names]
                if mine:
                    owned.append(rng.choice(mine))
            elif kind == 3:  # out of range
                owned.append(TP(topic, count + rng.randrange(3)))
            elif kind == 4:  # negative: base + p would alias another topic's partition
                owned.append(TP(topic, -rng.randrange(1, 8)))
            elif kind == 5:  # unknown or deleted topic
                owned.append(TP(rng.choice([UNKNOWN, "gone"]), rng.randrange(4)))
            elif owned:  # a duplicate within the member's own claim
                owned.append(rng.choice(owned))
        stale = rng.choice([generation, generation, generation - 1, generation - 3, -1])
        claims[member] = (owned, stale)
    return claims


def random_group(rng: random.Random) -> tuple[dict[str, int], dict[str, list[str]]]:
    counts = {t: rng.randrange(0, 9) for t in rng.sample(TOPICS, rng.randrange(1, 5))}
    members = [f"m{i}" for i in range(rng.randrange(1, 7))]
    uniform = rng.random() < 0.3
    shared = rng.sample([*TOPICS, UNKNOWN], rng.randrange(1, 4))
    topics = {
        m: shared if uniform else rng.sample([*TOPICS, UNKNOWN], rng.randrange(1, 4))
        for m in members
    }
    return counts, topics


def check(
    cls: type[PartitionAssignor],
    counts: Mapping[str, int],
    topics: Mapping[str, Sequence[str]],
    claims: Claims,
    result: Mapping[str, Assignment],
) -> set[TopicPartition]:
    """Assert the invariants; return the partitions withheld (cooperative only)."""
    assert set(result) == set(topics)
    seen: dict[TopicPartition, str] = {}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp.topic in counts, (member, tp, "unknown topic")
            assert 0 <= tp.partition < counts[tp.topic], (member, tp, "out of range")
            assert tp.topic in topics[member], (member, tp, "not subscribed")
            assert tp not in seen, (tp, "given to", seen[tp], "and", member)
            seen[tp] = member
    wanted = {
        TP(t, p)
        for t, n in counts.items()
        if any(t in names for names in topics.values())
        for p in range(n)
    }
    missing = wanted - set(seen)
    if cls is not CooperativeStickyAssignor:
        assert not missing, ("unassigned", sorted(missing))
        return set()
    claimed = {tp for owned, _ in claims.values() for tp in owned}
    # Withheld only while some member claims it: it is handed over next round.
    assert missing <= claimed, ("unassigned and unclaimed", sorted(missing - claimed))
    return missing


@pytest.mark.parametrize("cls", ALL)
def test_hostile_claims_one_round(cls: type[PartitionAssignor]) -> None:
    for seed in range(SEEDS):
        rng = random.Random(f"claims-{seed}")
        counts, topics = random_group(rng)
        claims = hostile_claims(rng, counts, topics, generation=5)
        subs = subscriptions(cls, topics, claims, rng)
        result = cls().assign(counts, subs)
        check(cls, counts, topics, claims, result)


@pytest.mark.parametrize("cls", ALL)
def test_hostile_claims_over_many_rounds(cls: type[PartitionAssignor]) -> None:
    """Each round's result is the next round's claims, with hostile ones mixed in and
    members changing subscriptions, joining and leaving; then the group settles."""
    for seed in range(SEEDS // 4):
        rng = random.Random(f"rounds-{seed}")
        counts, topics = random_group(rng)
        claims = hostile_claims(rng, counts, topics, generation=1)
        for generation in range(2, 10):
            result = cls().assign(counts, subscriptions(cls, topics, claims, rng))
            check(cls, counts, topics, claims, result)
            claims = {m: (list(a.partitions), generation) for m, a in result.items()}
            if rng.random() < 0.5:  # churn: one member changes its subscription
                member = rng.choice(sorted(topics))
                topics[member] = rng.sample([*TOPICS, UNKNOWN], rng.randrange(1, 4))
            if rng.random() < 0.3:  # hostile or stale claims again
                for member, extra in hostile_claims(rng, counts, topics, generation).items():
                    claims[member] = (claims[member][0] + extra[0], extra[1])
        # Stable from here: a cooperative group hands every withheld partition over.
        for generation in range(10, 14):
            result = cls().assign(counts, subscriptions(cls, topics, claims, rng))
            withheld = check(cls, counts, topics, claims, result)
            claims = {m: (list(a.partitions), generation) for m, a in result.items()}
        assert not withheld, (seed, sorted(withheld))


@pytest.mark.parametrize("cls", STICKY)
def test_negative_claim_does_not_alias_another_topics_partition(
    cls: type[PartitionAssignor],
) -> None:
    # Global ids: a-0..a-3 are 0..3, b-0..b-1 are 4..5; b-(-2) would be 2, i.e. a-2.
    counts = {"a": 4, "b": 2}
    topics = {"m": ["a", "b"], "n": ["a", "b"]}
    claims: Claims = {"m": ([TP("b", -2)], 1), "n": ([], -1)}
    result = cls().assign(counts, subscriptions(cls, topics, claims, random.Random(0)))
    check(cls, counts, topics, claims, result)
    assigned = sorted(tp for a in result.values() for tp in a.partitions)
    assert assigned == [TP("a", p) for p in range(4)] + [TP("b", 0), TP("b", 1)]


@pytest.mark.parametrize("cls", STICKY)
def test_claim_on_unsubscribed_topic_does_not_give_the_partition_back(
    cls: type[PartitionAssignor],
) -> None:
    # x left topic b but still claims b-0 from generation 1; y (generation 2) owns it all.
    counts = {"a": 1, "b": 4}
    topics = {"x": ["a"], "y": ["a", "b"], "z": ["a", "b"]}
    claims: Claims = {
        "x": ([TP("b", 0)], 1),
        "y": ([TP("a", 0), TP("b", 0), TP("b", 1), TP("b", 2), TP("b", 3)], 2),
        "z": ([], -1),
    }
    result = cls().assign(counts, subscriptions(cls, topics, claims, random.Random(0)))
    check(cls, counts, topics, claims, result)
    assert all(tp.topic == "a" for tp in result["x"].partitions)
