"""Assignors: Java's expected results, balance, stickiness, KIP-792 claims, cooperative rounds."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from coordination.errors import ConfigurationError
from recipes.partitioning.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from recipes.partitioning.protocol import (
    Assignment,
    RebalanceProtocol,
    Subscription,
    TopicPartition,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)

TP = TopicPartition
ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
STICKY = [StickyAssignor, CooperativeStickyAssignor]


def tps(*names: str) -> set[TopicPartition]:
    """``tps("t-0", "u-2")`` -> {TP("t", 0), TP("u", 2)}."""
    out = set()
    for name in names:
        topic, _, p = name.rpartition("-")
        out.add(TP(topic, int(p)))
    return out


def parts(result: Mapping[str, Assignment]) -> dict[str, set[TopicPartition]]:
    return {m: set(a.partitions) for m, a in result.items()}


def sub(
    topics: tuple[str, ...],
    owned: set[TopicPartition] | None = None,
    gen: int = -1,
    instance: str | None = None,
) -> Subscription:
    return Subscription(
        tuple(topics), None, tuple(sorted(owned or ())), gen, group_instance_id=instance
    )


def sticky_sub(
    topics: tuple[str, ...], owned: set[TopicPartition], gen: int | None
) -> Subscription:
    """An eager sticky member: its claim travels in Java StickyAssignor user data."""
    return Subscription(tuple(topics), encode_sticky_user_data(owned, gen))


def check_valid(
    partitions_per_topic: Mapping[str, int],
    subs: Mapping[str, Subscription],
    result: Mapping[str, Assignment],
    *,
    complete: bool = True,
) -> None:
    """Every member present; no partition twice; only subscribed, existing partitions."""
    assert set(result) == set(subs)
    seen: set[TopicPartition] = set()
    for member, assignment in result.items():
        assert list(assignment.partitions) == sorted(assignment.partitions)
        for tp in assignment.partitions:
            assert tp not in seen, f"{tp} assigned twice"
            seen.add(tp)
            assert tp.topic in subs[member].topics
            assert 0 <= tp.partition < partitions_per_topic[tp.topic]
    if complete:
        wanted = {
            TP(t, p)
            for s in subs.values()
            for t in s.topics
            if t in partitions_per_topic
            for p in range(partitions_per_topic[t])
        }
        assert seen == wanted


def spread(result: Mapping[str, Assignment]) -> int:
    sizes = [len(a.partitions) for a in result.values()]
    return max(sizes) - min(sizes)


# -- interface ----------------------------------------------------------------------------------


def test_names_and_protocols() -> None:
    assert [
        a.name
        for a in (
            RangeAssignor(),
            RoundRobinAssignor(),
            StickyAssignor(),
            CooperativeStickyAssignor(),
        )
    ] == ["range", "roundrobin", "sticky", "cooperative-sticky"]
    assert RangeAssignor().supported_protocols() == [RebalanceProtocol.EAGER]
    assert CooperativeStickyAssignor().supported_protocols() == [
        RebalanceProtocol.COOPERATIVE,
        RebalanceProtocol.EAGER,
    ]


@pytest.mark.parametrize("cls", ALL)
def test_every_member_present_and_unknown_topics_skipped(cls: type[PartitionAssignor]) -> None:
    subs = {"a": sub(("t", "missing")), "b": sub(("missing",)), "c": sub(("t",))}
    result = cls().assign({"t": 3, "unsubscribed": 5}, subs)
    check_valid({"t": 3}, subs, result)
    assert result["b"].partitions == ()
    assert cls().assign({"t": 3}, {}) == {}


@pytest.mark.parametrize("cls", ALL)
def test_negative_partition_count_rejected(cls: type[PartitionAssignor]) -> None:
    with pytest.raises(ConfigurationError, match="negative"):
        cls().assign({"t": -1}, {"a": sub(("t",))})


@pytest.mark.parametrize("cls", ALL)
def test_deterministic_under_input_order(cls: type[PartitionAssignor]) -> None:
    rng = random.Random(7)
    topics = [f"t{i}" for i in range(6)]
    counts = {t: rng.randint(1, 9) for t in topics}
    subs = {}
    for i in range(7):
        mine = tuple(rng.sample(topics, rng.randint(1, 6)))
        owned = {TP(t, p) for t in mine for p in range(counts[t]) if rng.random() < 0.2}
        subs[f"m{i}"] = sub(mine, owned, rng.choice([-1, 3, 4]))
    expected = cls().assign(counts, subs)
    for _ in range(5):
        keys = list(subs)
        rng.shuffle(keys)
        shuffled = {
            k: Subscription(
                tuple(rng.sample(subs[k].topics, len(subs[k].topics))),
                None,
                tuple(rng.sample(subs[k].owned_partitions, len(subs[k].owned_partitions))),
                subs[k].generation_id,
            )
            for k in keys
        }
        topic_keys = list(counts)
        rng.shuffle(topic_keys)
        assert cls().assign({t: counts[t] for t in topic_keys}, shuffled) == expected


# -- range and roundrobin: Java's results --------------------------------------------------------


def test_range_two_topics_three_partitions() -> None:
    subs = {"c0": sub(("t1", "t2")), "c1": sub(("t1", "t2"))}
    assert parts(RangeAssignor().assign({"t1": 3, "t2": 3}, subs)) == {
        "c0": tps("t1-0", "t1-1", "t2-0", "t2-1"),
        "c1": tps("t1-2", "t2-2"),
    }


def test_range_only_subscribers_of_each_topic() -> None:
    subs = {"c0": sub(("t1",)), "c1": sub(("t1", "t2")), "c2": sub(("t1",))}
    assert parts(RangeAssignor().assign({"t1": 3, "t2": 2}, subs)) == {
        "c0": tps("t1-0"),
        "c1": tps("t1-1", "t2-0", "t2-1"),
        "c2": tps("t1-2"),
    }


def test_range_static_members_ordered_by_instance_id() -> None:
    # Java's MemberInfo: static members first, by group.instance.id; then by member id.
    subs = {"a": sub(("t",), instance="z"), "b": sub(("t",), instance="y"), "c": sub(("t",))}
    assert parts(RangeAssignor().assign({"t": 5}, subs)) == {
        "b": tps("t-0", "t-1"),
        "a": tps("t-2", "t-3"),
        "c": tps("t-4"),
    }


def test_roundrobin_two_consumers_six_partitions() -> None:
    subs = {"c0": sub(("t1", "t2")), "c1": sub(("t1", "t2"))}
    assert parts(RoundRobinAssignor().assign({"t1": 3, "t2": 3}, subs)) == {
        "c0": tps("t1-0", "t1-2", "t2-1"),
        "c1": tps("t1-1", "t2-0", "t2-2"),
    }


def test_roundrobin_skips_members_not_subscribed() -> None:
    # t2-1 goes to c2, the next in the circle after c1, not back to c0 (not subscribed).
    subs = {"c0": sub(("t1",)), "c1": sub(("t1", "t2")), "c2": sub(("t1", "t2", "t3"))}
    result = RoundRobinAssignor().assign({"t1": 1, "t2": 2, "t3": 3}, subs)
    assert parts(result) == {
        "c0": tps("t1-0"),
        "c1": tps("t2-0"),
        "c2": tps("t2-1", "t3-0", "t3-1", "t3-2"),
    }


def test_roundrobin_static_members_ordered_by_instance_id() -> None:
    subs = {"a": sub(("t",), instance="i2"), "b": sub(("t",), instance="i1")}
    assert parts(RoundRobinAssignor().assign({"t": 3}, subs)) == {
        "b": tps("t-0", "t-2"),
        "a": tps("t-1"),
    }


# -- sticky: balance and stickiness -------------------------------------------------------------


@pytest.mark.parametrize("cls", STICKY)
def test_sticky_fresh_assignment_deals_like_java(cls: type[PartitionAssignor]) -> None:
    subs = {"c0": sub(("t1", "t2")), "c1": sub(("t1", "t2"))}
    assert parts(cls().assign({"t1": 3, "t2": 3}, subs)) == {
        "c0": tps("t1-0", "t1-2", "t2-1"),
        "c1": tps("t1-1", "t2-0", "t2-2"),
    }


def test_cooperative_keeps_owned_and_fills_new_member_with_free_partitions() -> None:
    # Java's testAddRemoveConsumerOneTopic: c1 owned all; c2 joins.
    subs = {"c1": sub(("t",), tps("t-0", "t-1", "t-2"), 1), "c2": sub(("t",), None, -1)}
    result = parts(CooperativeStickyAssignor().assign({"t": 3}, subs))
    # c1 keeps max quota by (partition, topic) order; t-2 must be revoked first.
    assert result == {"c1": tps("t-0", "t-1"), "c2": set()}
    eager = StickyAssignor().assign(
        {"t": 3},
        {"c1": sticky_sub(("t",), tps("t-0", "t-1", "t-2"), 1), "c2": Subscription(("t",))},
    )
    assert parts(eager) == {"c1": tps("t-0", "t-1"), "c2": tps("t-2")}


@pytest.mark.parametrize("cls", STICKY)
def test_sticky_minimal_movement_when_member_leaves(cls: type[PartitionAssignor]) -> None:
    topics = ("a", "b", "c")
    counts = {"a": 7, "b": 5, "c": 8}
    members = [f"m{i}" for i in range(5)]
    first = cls().assign(counts, {m: sub(topics) for m in members})
    survivors = members[1:]
    second_subs = {m: sub(topics, set(first[m].partitions), 1) for m in survivors}
    if cls is StickyAssignor:
        second_subs = {m: sticky_sub(topics, set(first[m].partitions), 1) for m in survivors}
    second = cls().assign(counts, second_subs)
    check_valid(counts, second_subs, second)
    assert spread(second) <= 1
    for m in survivors:  # nobody loses anything; they only take the leaver's partitions
        assert set(first[m].partitions) <= set(second[m].partitions)


# -- KIP-792 claims (Java's AbstractStickyAssignorTest cases) ------------------------------------


def test_stale_generation_claim_loses_to_current_one() -> None:
    owned = tps("t-0", "t-2", "u-1")
    subs = {"c1": sub(("t", "u"), owned, 10), "c2": sub(("t", "u"), owned, 9)}
    for cls in STICKY:
        if cls is StickyAssignor:
            subs = {"c1": sticky_sub(("t", "u"), owned, 10), "c2": sticky_sub(("t", "u"), owned, 9)}
        assert parts(cls().assign({"t": 3, "u": 3}, subs)) == {
            "c1": owned,
            "c2": tps("t-1", "u-0", "u-2"),
        }


def test_highest_generation_wins_each_partition() -> None:
    everything = ("t", "u", "v")
    subs = {
        "c1": sub(everything, tps("t-0", "u-0", "v-0"), 10),
        "c2": sub(everything, tps("t-1", "u-1", "v-1"), 9),
        "c3": sub(everything, tps("u-1", "v-0", "v-2"), 8),
    }
    result = CooperativeStickyAssignor().assign({"t": 3, "u": 3, "v": 3}, subs)
    assert parts(result) == {
        "c1": tps("t-0", "u-0", "v-0"),
        "c2": tps("t-1", "u-1", "v-1"),
        "c3": tps("t-2", "u-2", "v-2"),
    }


def test_same_generation_double_claim_is_withheld_by_cooperative() -> None:
    subs = {
        "c1": sub(("t",), tps("t-0", "t-1"), 1),
        "c2": sub(("t",), tps("t-0", "t-2"), 1),
        "c3": sub(("t",), set(), 1),
    }
    result = parts(CooperativeStickyAssignor().assign({"t": 3}, subs))
    # Both claims on t-0 are invalid; someone may still hold it, so nobody gets it yet.
    assert result == {"c1": tps("t-1"), "c2": tps("t-2"), "c3": set()}
    eager = {m: sticky_sub(("t",), set(s.owned_partitions), 1) for m, s in subs.items()}
    assert parts(StickyAssignor().assign({"t": 3}, eager)) == {
        "c1": tps("t-1"),
        "c2": tps("t-2"),
        "c3": tps("t-0"),
    }


def test_generation_from_user_data_for_v1_members() -> None:
    # Older members (subscription v1) carry the generation only in the user data.
    owned = tps("t-0", "t-1")
    current = Subscription(("t",), encode_cooperative_sticky_user_data(5), tuple(sorted(owned)))
    stale = Subscription(("t",), encode_cooperative_sticky_user_data(4), tuple(sorted(owned)))
    result = parts(CooperativeStickyAssignor().assign({"t": 2}, {"a": stale, "b": current}))
    assert result == {"a": set(), "b": tps("t-0")}  # t-1 moves from b: withheld this round
    # Unparseable user data counts as generation -1, as in Java.
    junk = Subscription(("t",), b"\x01", tuple(sorted(owned)))
    result = parts(CooperativeStickyAssignor().assign({"t": 2}, {"a": junk, "b": current}))
    assert result == {"a": set(), "b": tps("t-0")}


def test_generation_field_preferred_over_user_data() -> None:
    owned = (TP("t", 0),)
    a = Subscription(("t",), encode_cooperative_sticky_user_data(99), owned, 3)
    b = Subscription(("t",), None, owned, 4)
    assert parts(CooperativeStickyAssignor().assign({"t": 2}, {"a": a, "b": b})) == {
        "a": tps("t-1"),
        "b": tps("t-0"),
    }


def test_sticky_unreadable_user_data_owns_nothing() -> None:
    subs = {"a": Subscription(("t",), b"\xff"), "b": sticky_sub(("t",), tps("t-0", "t-1"), 2)}
    assert parts(StickyAssignor().assign({"t": 2}, subs)) == {"a": tps("t-1"), "b": tps("t-0")}


def test_claims_on_vanished_partitions_are_ignored() -> None:
    subs = {"a": sub(("t",), tps("t-5", "gone-0"), 3), "b": sub(("t",), None, 3)}
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    check_valid({"t": 2}, subs, result)
    assert spread(result) == 0


def test_unequal_subscriptions_three_generations() -> None:
    # Java's testSubscriptionNotEqualAndAssignSamePartitionWith3Generation.
    for gens in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]:
        subs = {
            "c1": sub(("t",), tps("t-0", "t-2"), gens[0]),
            "c2": sub(("t",), tps("t-1", "t-2", "t-3"), gens[1]),
            "c3": sub(("t",), tps("t-2", "t-4", "t-5"), gens[2]),
            "c4": sub(("u",), tps("u-0"), 2),
        }
        for cls in STICKY:
            result = cls().assign({"t": 6, "u": 1}, subs)
            check_valid({"t": 6, "u": 1}, subs, result, complete=cls is StickyAssignor)
            if cls is StickyAssignor:
                assert all(1 <= len(a.partitions) <= 2 for a in result.values())


# -- cooperative rounds -------------------------------------------------------------------------


def run_cooperative(
    counts: dict[str, int],
    topics_of: dict[str, tuple[str, ...]],
    owned: dict[str, set[TopicPartition]],
    generation: int,
) -> tuple[dict[str, set[TopicPartition]], int, int]:
    """Rebalance until nobody must revoke; check the cooperative rule in every round.

    Returns:
        Final ownership, the generation reached and the number of rounds.
    """
    assignor = CooperativeStickyAssignor()
    for rounds in range(1, 6):
        subs = {m: sub(topics_of[m], owned.get(m, set()), generation) for m in topics_of}
        result = parts(assignor.assign(counts, subs))
        check_valid(
            counts,
            subs,
            {m: Assignment(tuple(sorted(p))) for m, p in result.items()},
            complete=False,
        )
        holder = {tp: m for m, ps in owned.items() if m in topics_of for tp in ps}
        for member, ps in result.items():
            for tp in ps:
                assert holder.get(tp, member) == member, f"{tp} moved in one round"
        generation += 1
        revoked = any(owned.get(m, set()) - result[m] for m in topics_of)
        owned = result
        if not revoked:
            return owned, generation, rounds
    raise AssertionError("did not converge")


def test_cooperative_new_member_gets_partitions_in_second_round() -> None:
    counts = {"t": 6}
    topics_of: dict[str, tuple[str, ...]] = {"a": ("t",), "b": ("t",)}
    owned, gen, _ = run_cooperative(counts, topics_of, {}, 1)
    topics_of["c"] = ("t",)
    final, _, rounds = run_cooperative(counts, topics_of, owned, gen)
    assert rounds == 2  # revoke, then assign
    assert {len(ps) for ps in final.values()} == {2}
    assert sum(len(ps) for ps in final.values()) == 6


@pytest.mark.parametrize("seed", range(12))
def test_randomized_cooperative_groups(seed: int) -> None:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 6))]
    counts = {t: rng.randint(1, 12) for t in topics}
    uniform = seed % 2 == 0
    names = [f"m{i:02d}" for i in range(rng.randint(1, 9))]
    topics_of = {
        m: tuple(topics) if uniform else tuple(rng.sample(topics, rng.randint(1, len(topics))))
        for m in names
    }
    owned: dict[str, set[TopicPartition]] = {}
    generation = 1
    for _ in range(4):
        owned, generation, _ = run_cooperative(counts, topics_of, owned, generation)
        total = sum(len(ps) for ps in owned.values())
        wanted = sum(counts[t] for t in {t for ts in topics_of.values() for t in ts})
        assert total == wanted  # after convergence everything is assigned
        if uniform:
            sizes = [len(owned[m]) for m in topics_of]
            assert max(sizes) - min(sizes) <= 1
        # membership churn: someone leaves, someone joins
        if len(topics_of) > 1 and rng.random() < 0.7:
            gone = rng.choice(sorted(topics_of))
            del topics_of[gone]
            owned.pop(gone, None)
        new = f"n{rng.randint(0, 999):03d}"
        topics_of[new] = (
            tuple(topics) if uniform else tuple(rng.sample(topics, rng.randint(1, len(topics))))
        )


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("cls", [StickyAssignor, RoundRobinAssignor, RangeAssignor])
def test_randomized_eager_validity_and_balance(cls: type[PartitionAssignor], seed: int) -> None:
    rng = random.Random(1000 + seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 8))]
    counts = {t: rng.randint(0, 20) for t in topics}
    uniform = seed % 2 == 0
    subs = {
        f"m{i}": sub(
            tuple(topics) if uniform else tuple(rng.sample(topics, rng.randint(1, len(topics))))
        )
        for i in range(rng.randint(1, 12))
    }
    result = cls().assign(counts, subs)
    check_valid(counts, subs, result)
    if uniform and cls is not RangeAssignor:
        assert spread(result) <= 1
    if cls is StickyAssignor:
        # Next round with claims: still valid, and balanced for uniform subscriptions.
        again = {m: sticky_sub(s.topics, set(result[m].partitions), 1) for m, s in subs.items()}
        second = cls().assign(counts, again)
        check_valid(counts, again, second)
        if uniform:
            assert parts(second) == parts(result)  # nothing to improve, nothing moves


def test_general_path_balances_unequal_subscriptions() -> None:
    # Java's testLargeAssignmentAndGroupWithNonEqualSubscription, scaled down.
    topics = tuple(f"t{i:02d}" for i in range(20))
    counts = dict.fromkeys(topics, 50)
    subs = {f"c{i:02d}": sub(topics) for i in range(39)}
    subs["c39"] = sub(topics[:1])
    first = CooperativeStickyAssignor().assign(counts, subs)
    check_valid(counts, subs, first)
    assert spread(first) <= 1
    again = {m: sub(s.topics, set(first[m].partitions), 1) for m, s in subs.items()}
    again["c00"] = sub(topics)
    second = CooperativeStickyAssignor().assign(counts, again)
    check_valid(counts, again, second)
    for m in list(subs)[1:]:
        assert set(second[m].partitions) == set(first[m].partitions)


def test_general_path_moves_towards_balance_and_withholds() -> None:
    # b subscribes to both topics but owns nothing; a owns all of t and u.
    subs = {"a": sub(("t", "u"), tps("t-0", "t-1", "u-0", "u-1"), 2), "b": sub(("t", "u", "v"))}
    result = parts(CooperativeStickyAssignor().assign({"t": 2, "u": 2, "v": 1}, subs))
    eager = parts(
        StickyAssignor().assign(
            {"t": 2, "u": 2, "v": 1},
            {
                "a": sticky_sub(("t", "u"), tps("t-0", "t-1", "u-0", "u-1"), 2),
                "b": Subscription(("t", "u", "v")),
            },
        )
    )
    assert len(eager["a"]) == 3 and len(eager["b"]) == 2
    moved = eager["b"] - tps("v-0")
    assert result == {"a": eager["a"], "b": tps("v-0")}
    assert len(moved) == 1


def test_on_assignment_feeds_user_data() -> None:
    coop = CooperativeStickyAssignor()
    assert coop.subscription_user_data(frozenset({"t"})) == b"\xff\xff\xff\xff"
    coop.on_assignment(Assignment((TP("t", 0),)), 12)
    assert coop.subscription_user_data(frozenset({"t"})) == b"\x00\x00\x00\x0c"
    sticky = StickyAssignor()
    assert sticky.subscription_user_data(frozenset({"t"})) is None
    sticky.on_assignment(Assignment((TP("t", 1),)), 4)
    assert sticky.subscription_user_data(frozenset({"t"})) == encode_sticky_user_data(
        [TP("t", 1)], 4
    )
    assert RangeAssignor().subscription_user_data(frozenset()) is None


def test_public_names_documented_and_shown_under_the_package() -> None:
    import recipes.partitioning.assignors as package

    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        obj = getattr(package, name)
        assert obj.__doc__, name
        assert obj.__module__ == "recipes.partitioning.assignors"
        for method in ("assign", "supported_protocols", "subscription_user_data", "on_assignment"):
            assert getattr(obj, method).__doc__, f"{name}.{method}"
