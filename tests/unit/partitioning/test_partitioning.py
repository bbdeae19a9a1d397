"""The consumer-protocol member's side of a rebalance, driven through its callbacks."""

from __future__ import annotations

from typing import Any

import pytest

from coordination import Member
from coordination.errors import ConfigurationError
from recipes.partitioning import (
    ConsumerPartitioning,
    CooperativeStickyAssignor,
    InMemoryTopicMetadata,
    RangeAssignor,
    RebalanceListener,
    RebalanceProtocol,
    TopicPartition,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

T = "orders"


def tps(*partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(T, p) for p in partitions)


class Recorder(RebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("assigned", partitions))

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("revoked", partitions))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("lost", partitions))


def member(*assignors: Any, **kw: Any) -> tuple[ConsumerPartitioning, Recorder]:
    listener = Recorder()
    m = ConsumerPartitioning(
        "g",
        topics=kw.pop("topics", [T]),
        assignors=list(assignors) or None,
        listener=listener,
        topic_metadata=InMemoryTopicMetadata({T: 6, "other": 2}),
        bootstrap_servers="localhost:9092",
        **kw,
    )
    return m, listener


def assignment(*partitions: int) -> bytes:
    return encode_assignment(Assignment(tuple(sorted(tps(*partitions)))))


def test_default_assignors_make_an_eager_member_that_also_speaks_cooperative_sticky() -> None:
    m, _ = member()
    assert m.rebalance_protocol is RebalanceProtocol.EAGER
    assert [p.name for p in m.metadata()] == ["cooperative-sticky", "range"]
    only_coop, _ = member(CooperativeStickyAssignor())
    assert only_coop.rebalance_protocol is RebalanceProtocol.COOPERATIVE


def test_eager_revokes_everything_before_rejoining_then_assigns_everything() -> None:
    m, rec = member(RangeAssignor())
    m.on_join_complete(1, "m-1", "range", assignment(0, 1, 2))
    m.on_join_prepare(1, "m-1")
    m.on_join_complete(2, "m-1", "range", assignment(1, 2))
    assert rec.calls == [
        ("assigned", tps(0, 1, 2)),
        ("revoked", tps(0, 1, 2)),
        ("assigned", tps(1, 2)),
    ]
    assert m.owned() == tps(1, 2)


def test_cooperative_revokes_only_what_moves_and_rejoins_to_hand_it_over() -> None:
    m, rec = member(CooperativeStickyAssignor())
    rejoins: list[str] = []
    m.request_rejoin = rejoins.append  # type: ignore[method-assign,assignment]
    m.on_join_complete(1, "m-1", "cooperative-sticky", assignment(0, 1, 2, 3))
    m.on_join_prepare(1, "m-1")  # keeps everything
    m.on_join_complete(2, "m-1", "cooperative-sticky", assignment(0, 1))
    assert rec.calls == [
        ("assigned", tps(0, 1, 2, 3)),
        ("revoked", tps(2, 3)),
        ("assigned", frozenset()),  # called even when nothing was added
    ]
    assert m.owned() == tps(0, 1)
    assert len(rejoins) == 1 and "revoked" in rejoins[0]


class FailsOnce(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        super().on_partitions_assigned(partitions)
        if self.failures:
            self.failures -= 1
            raise TimeoutError("OffsetFetch timed out")


@pytest.mark.parametrize("assignor", [RangeAssignor(), CooperativeStickyAssignor()])
def test_a_retried_join_completion_announces_again_what_the_failed_one_did_not(
    assignor: Any,
) -> None:
    # The engine calls on_join_complete again with the same assignment when it raised.
    rec = FailsOnce()
    rec.failures = 0
    m, _ = member(assignor)
    m._listener = rec
    m.on_join_complete(1, "m-1", assignor.name, assignment(0, 1))
    m.on_join_prepare(1, "m-1")
    rec.failures = 1
    with pytest.raises(TimeoutError):
        m.on_join_complete(2, "m-1", assignor.name, assignment(0, 1, 2))
    m.on_join_complete(2, "m-1", assignor.name, assignment(0, 1, 2))  # the retry
    added = tps(2) if assignor.name == "cooperative-sticky" else tps(0, 1, 2)
    assert rec.calls[-2:] == [("assigned", added), ("assigned", added)]
    m.on_join_complete(2, "m-1", assignor.name, assignment(0, 1, 2))  # done: nothing new
    assert rec.calls[-1] == ("assigned", frozenset())


def test_a_failed_cooperative_join_completion_still_hands_over_the_revoked() -> None:
    rec = FailsOnce()
    rec.failures = 0
    m, _ = member(CooperativeStickyAssignor())
    m._listener = rec
    rejoins: list[str] = []
    m.request_rejoin = rejoins.append  # type: ignore[method-assign,assignment]
    m.on_join_complete(1, "m-1", "cooperative-sticky", assignment(0, 1, 2))
    rec.failures = 1
    with pytest.raises(TimeoutError):
        m.on_join_complete(2, "m-1", "cooperative-sticky", assignment(0, 3))
    # Asked before the failure, so the engine rejoins (and the new owner gets 1 and 2)
    # rather than retrying a call that has nothing left to revoke.
    assert len(rejoins) == 1 and "revoked" in rejoins[0]
    assert m.owned() == tps(0, 3)
    m.on_join_prepare(2, "m-1")
    m.on_join_complete(3, "m-1", "cooperative-sticky", assignment(0, 3))
    assert rec.calls[-1] == ("assigned", tps(3))  # announced with the next assignment


@pytest.mark.parametrize("assignor", [RangeAssignor(), CooperativeStickyAssignor()])
def test_losing_the_generation_loses_the_partitions_without_revoking(assignor: Any) -> None:
    m, rec = member(assignor)
    m.on_join_complete(3, "m-1", assignor.name, assignment(0, 1))
    m.on_join_prepare(-1, "m-1")  # ILLEGAL_GENERATION: member id kept, generation reset
    assert rec.calls[-1] == ("lost", tps(0, 1))
    assert m.owned() == frozenset()
    sub = decode_subscription(m.metadata()[0].metadata)
    assert sub.owned_partitions == () and sub.generation_id == -1


def test_subscription_carries_owned_partitions_with_their_generation() -> None:
    m, _ = member(CooperativeStickyAssignor())
    m.on_join_complete(7, "m-1", "cooperative-sticky", assignment(4, 5))
    sub = decode_subscription(m.metadata()[0].metadata)
    assert sub.topics == (T,)
    assert sub.owned_partitions == tuple(sorted(tps(4, 5)))
    assert sub.generation_id == 7  # KIP-792


def test_leader_assigns_around_a_member_whose_subscription_cannot_be_decoded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m, _ = member(RangeAssignor())
    good = encode_subscription(Subscription((T,)))
    members = [
        Member("a", None, good),
        Member("bad", None, b"\x00\x07garbage"),
        Member("c", None, good),
    ]
    plan = m.perform_assignment("a", "range", members)
    assert set(plan) == {"a", "bad", "c"}
    assert decode_assignment(plan["bad"]).partitions == ()
    got = {mid: set(decode_assignment(b).partitions) for mid, b in plan.items()}
    assert got["a"] | got["c"] == tps(0, 1, 2, 3, 4, 5)
    assert "bad" in caplog.text and "cannot be decoded" in caplog.text


def test_an_undecodable_assignment_makes_the_member_rejoin() -> None:
    m, rec = member(RangeAssignor())
    rejoins: list[str] = []
    m.request_rejoin = rejoins.append  # type: ignore[method-assign,assignment]
    m.on_join_complete(2, "m-1", "range", b"\xff")
    assert rejoins and rec.calls == []


def test_pattern_subscription_follows_the_matching_topics() -> None:
    m, _ = member(RangeAssignor(), topics=None, pattern=r"ord.*")
    assert decode_subscription(m.metadata()[0].metadata).topics == (T,)
    assert isinstance(m._metadata, InMemoryTopicMetadata)
    m._metadata.set_partitions("orders-eu", 3)
    assert "orders-eu" in (m._metadata_change() or "")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"topics": None}, "exactly one"),
        ({"topics": [T], "pattern": "x"}, "exactly one"),
        ({"topics": "orders"}, "list of topic names"),
        ({"topics": None, "pattern": "("}, "not a valid regex"),
        ({"topics": [T], "assignors": []}, "at least one"),
        ({"topics": [T], "assignors": [RangeAssignor(), RangeAssignor()]}, "duplicate"),
    ],
)
def test_bad_subscriptions_and_assignors_are_named(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ConsumerPartitioning("g", bootstrap_servers="localhost:9092", **kw)


def test_a_closed_consumer_refuses_to_poll_without_opening_anything() -> None:
    from coordination.errors import CoordinatorStateError
    from recipes.partitioning import Consumer

    consumer = Consumer("g", topics=[T], bootstrap_servers="localhost:9092")
    consumer.close()
    with pytest.raises(CoordinatorStateError, match="closed"):
        consumer.poll(timeout_ms=10)
    assert consumer._fetcher is None


def test_fetch_settings_with_a_fetcher_of_ones_own_are_refused() -> None:
    from coordination.errors import ConfigurationError
    from recipes.partitioning import Consumer

    class Fetcher:
        def assign(self, partitions: object) -> None: ...
        def seek(self, partition: object, offset: int) -> None: ...
        def position(self, partition: object, timeout_ms: int) -> int | None:
            return None

        def poll(self, timeout_ms: int) -> dict[TopicPartition, list[object]]:
            return {}

        def close(self) -> None: ...

    with pytest.raises(ConfigurationError, match=r"max_poll_records.*fetcher="):
        Consumer(
            "g",
            topics=[T],
            bootstrap_servers="localhost:9092",
            fetcher=Fetcher(),
            max_poll_records=5,
        )


# ------------------------------------------------------------------ Kafka's setting names


def test_partition_assignment_strategy_is_accepted_as_kafka_python_spells_it() -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    from recipes.partitioning.assignors import (
        CooperativeStickyAssignor,
        RangeAssignor,
        RoundRobinAssignor,
    )

    by_class = ConsumerPartitioning(
        "g",
        topics=[T],
        bootstrap_servers="localhost:9092",
        partition_assignment_strategy=(RoundRobinPartitionAssignor, RangePartitionAssignor),
    )
    assert [type(a) for a in by_class._assignors] == [RoundRobinAssignor, RangeAssignor]
    by_name = ConsumerPartitioning(
        "g",
        topics=[T],
        bootstrap_servers="localhost:9092",
        partition_assignment_strategy=["cooperative-sticky", "range"],
    )
    assert [a.name for a in by_name._assignors] == ["cooperative-sticky", "range"]
    mine = CooperativeStickyAssignor()
    given = ConsumerPartitioning(
        "g", topics=[T], bootstrap_servers="localhost:9092", partition_assignment_strategy=[mine]
    )
    assert given._assignors == [mine]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"partition_assignment_strategy": ["fastest"]}, r"'fastest' is not an assignor"),
        ({"partition_assignment_strategy": []}, r"is empty"),
        (
            {"partition_assignment_strategy": ["range"], "assignors": []},
            r"assignors= or partition_assignment_strategy=, not both",
        ),
        ({"client_rack": "a", "rack_id": "b"}, r"rack_id='b' and client_rack='a' disagree"),
    ],
)
def test_kafka_names_given_wrong_are_refused_clearly(kw: dict[str, object], message: str) -> None:
    from coordination.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        ConsumerPartitioning("g", topics=[T], bootstrap_servers="localhost:9092", **kw)  # type: ignore[arg-type]


def test_client_rack_is_the_subscriptions_rack_and_the_fetchers() -> None:
    from recipes.partitioning import Consumer
    from recipes.partitioning.protocol import decode_subscription

    consumer = Consumer("g", topics=[T], bootstrap_servers="localhost:9092", client_rack="az-1")
    (metadata,) = [m for m in consumer.group.metadata() if m.name == "cooperative-sticky"]
    assert decode_subscription(metadata.metadata).rack_id == "az-1"
    assert consumer._fetch_config["client_rack"] == "az-1"
    consumer.close()


# ------------------------------------------------------------------ what a listener raises


class Raises(Recorder):
    """Records every call, then raises from those named."""

    def __init__(self, *failing: str) -> None:
        super().__init__()
        self.failing = set(failing)

    def _maybe_fail(self, what: str) -> None:
        if what in self.failing:
            raise RuntimeError(f"{what} failed")

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        super().on_partitions_assigned(partitions)
        self._maybe_fail("assigned")

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        super().on_partitions_revoked(partitions)
        self._maybe_fail("revoked")

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        super().on_partitions_lost(partitions)
        self._maybe_fail("lost")


@pytest.mark.parametrize(
    ("step", "told"),
    [("an eager rebalance", "revoked"), ("a lost generation", "lost"), ("leaving", "lost")],
)
def test_a_revocation_or_loss_that_raises_is_logged_and_gives_the_partitions_up(
    step: str, told: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The recipes' one rule (RecipeContext.callback): logged, and the change happens all
    # the same; the member's step goes on (nothing reaches the engine).
    m, _ = member(RangeAssignor())
    rec = Raises("revoked", "lost")
    m._listener = rec
    m.on_join_complete(1, "m-1", "range", assignment(0, 1))
    with caplog.at_level("ERROR", logger="recipes.partitioning"):
        if step == "an eager rebalance":
            m.on_join_prepare(1, "m-1")
        elif step == "a lost generation":
            m.on_join_prepare(-1, "m-1")
        else:
            m.on_leave_prepare()  # never joined for real: its generation is -1, so lost
    assert rec.calls[-1] == (told, tps(0, 1))
    assert m.owned() == frozenset()
    sub = decode_subscription(m.metadata()[0].metadata)
    assert sub.owned_partitions == () and sub.generation_id == -1
    (record,) = [r for r in caplog.records if f"on_partitions_{told} raised" in r.getMessage()]
    assert record.exc_info is not None and f"{told} failed" in str(record.exc_info[1])


def test_a_cooperative_revocation_that_raises_still_completes_the_assignment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m, _ = member(CooperativeStickyAssignor())
    rec = Raises("revoked")
    m._listener = rec
    rejoins: list[str] = []
    m.request_rejoin = rejoins.append  # type: ignore[method-assign,assignment]
    m.on_join_complete(1, "m-1", "cooperative-sticky", assignment(0, 1, 2))
    with caplog.at_level("ERROR", logger="recipes.partitioning"):
        m.on_join_complete(2, "m-1", "cooperative-sticky", assignment(0, 3))  # does not raise
    assert rec.calls[-2:] == [("revoked", tps(1, 2)), ("assigned", tps(3))]
    assert m.owned() == tps(0, 3)
    assert len(rejoins) == 1 and "revoked" in rejoins[0]  # the hand-over still happens
    assert "on_partitions_revoked raised" in caplog.text


def test_an_assignment_that_raises_fails_the_step_for_the_engine_to_call_it_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The one exception to "logged and goes on": no record of an announced partition may
    # be returned before on_partitions_assigned returned, so the step is retried (the
    # engine logs it); the partitions are owned, and announced again by the retry.
    m, _ = member(RangeAssignor())
    rec = Raises("assigned")
    m._listener = rec
    with caplog.at_level("ERROR", logger="recipes.partitioning"), pytest.raises(RuntimeError):
        m.on_join_complete(1, "m-1", "range", assignment(0, 1))
    assert m.owned() == tps(0, 1)
    assert "raised" not in caplog.text  # not logged twice: the engine logs what it retries
    rec.failing.clear()
    m.on_join_complete(1, "m-1", "range", assignment(0, 1))
    assert rec.calls == [("assigned", tps(0, 1))] * 2


# ------------------------------------------------------------------ the membership lease


def test_the_lease_guard_holds_only_while_the_membership_lease_is_above_its_margin() -> None:
    m, _ = member(RangeAssignor())
    assert m.lease.margin_ms == m.config.heartbeat_interval_ms  # the default margin
    assert not m.lease.holds()  # never joined: no lease
    margin, _ = member(RangeAssignor(), lease_margin_ms=500)
    assert margin.lease.margin_ms == 500


def test_a_lease_margin_that_leaves_no_room_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="lease_margin_ms"):
        member(RangeAssignor(), lease_margin_ms=45_000)
    # The default margin is checked when the lease is read, so that settings a consumer
    # accepted before it had a lease guard are still accepted.
    m, _ = member(RangeAssignor(), session_timeout_ms=10_000, heartbeat_interval_ms=6_000)
    with pytest.raises(ConfigurationError, match="lease_margin_ms"):
        m.lease  # noqa: B018
