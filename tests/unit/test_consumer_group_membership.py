"""The KIP-848 member's state machine (coordination/_engine/consumer_group.py), against a
small model of the broker's side: epochs, the assignment, reconciliation, fencing, leaving.

The model answers each ConsumerGroupHeartbeat as Kafka's group coordinator documents it:
a joining member gets epoch 1 and its share; a member's assignment holds a partition only
once no other member reports owning it; a member that does not report a revocation keeps
its epoch. Threads run on real time with short intervals; the tests wait for conditions,
never for durations.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from coordination import OffsetAndMetadata
from coordination._config import CoordinatorConfig
from coordination._engine import offsets as offsets_api
from coordination._engine.consumer_group import (
    ConsumerGroupMembership,
    Subscription,
)
from coordination._protocol import consumer_group as cg
from coordination._protocol import messages as m
from coordination._protocol.error_codes import ErrorCode
from coordination._types import Generation
from coordination.errors import (
    CommitFailedError,
    CoordinatorStateError,
    MembershipLostError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    broker_error,
)
from coordination.hooks import (
    CoordinationHooks,
    HeartbeatFailed,
    RebalanceFailed,
    RebalanceFinished,
    RebalanceStarted,
)
from coordination.transport import CoordinatorNode, TransportError

ORDERS = uuid.UUID(int=1)
AUDIT = uuid.UUID(int=2)
NAMES = {ORDERS: "orders", AUDIT: "audit"}


class Broker:
    """The coordinator's side of ConsumerGroupHeartbeat for one member (the Transport)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[cg.ConsumerGroupHeartbeatRequest] = []
        self.target: frozenset[tuple[uuid.UUID, int]] = frozenset({(ORDERS, 0), (ORDERS, 1)})
        self.taken_by_others: frozenset[tuple[uuid.UUID, int]] = frozenset()
        self.epoch = 0
        self.errors: list[int] = []  # answered first, one per heartbeat
        self.member_owned: frozenset[tuple[uuid.UUID, int]] = frozenset()
        self.last_sent_assignment: frozenset[tuple[uuid.UUID, int]] | None = None
        self.closed = False
        self.events: list[str] = []

    def send(
        self,
        request: Any,
        response_type: type[Any],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: Any = None,
    ) -> Any:
        if self.closed:
            raise TransportError("closed")
        if isinstance(request, m.FindCoordinatorRequest):
            return m.FindCoordinatorResponse(error_code=0, node_id=1, host="h", port=1)
        assert isinstance(request, cg.ConsumerGroupHeartbeatRequest)
        with self.lock:
            self.requests.append(request)
            if request.topic_partitions is not None:
                self.member_owned = frozenset(
                    (t.topic_id, p) for t in request.topic_partitions for p in t.partitions
                )
                self.events.append(f"reported {sorted(p for _, p in self.member_owned)}")
            if self.errors:
                return cg.ConsumerGroupHeartbeatResponse(error_code=self.errors.pop(0))
            if request.member_epoch < 0:
                self.events.append(f"left {request.member_epoch}")
                return cg.ConsumerGroupHeartbeatResponse(
                    error_code=0, member_id=request.member_id, member_epoch=request.member_epoch
                )
            if request.member_epoch == 0:
                self.epoch += 1
                self.last_sent_assignment = None
            # Partitions another member still reports owning are held back (KIP-848).
            usable = self.target - self.taken_by_others
            assignment = None
            # As Kafka: the assignment again in answer to a report of the owned partitions.
            if usable != self.last_sent_assignment or request.topic_partitions is not None:
                self.last_sent_assignment = usable
                assignment = _by_topic(usable)
            return cg.ConsumerGroupHeartbeatResponse(
                error_code=0,
                member_id=request.member_id,
                member_epoch=self.epoch,
                heartbeat_interval_ms=20,
                assignment=assignment,
            )

    def reassign(self, target: set[tuple[uuid.UUID, int]]) -> None:
        with self.lock:
            self.target = frozenset(target)
            self.epoch += 1

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        pass

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _by_topic(parts: frozenset[tuple[uuid.UUID, int]]) -> tuple[cg.TopicIdPartitions, ...]:
    topics: dict[uuid.UUID, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return tuple(cg.TopicIdPartitions(t, tuple(sorted(ps))) for t, ps in sorted(topics.items()))


class Recipe:
    """The consumer's side: records every callback, in order."""

    def __init__(self, broker: Broker, subscription: Subscription | None = None) -> None:
        self.broker = broker
        self.calls: list[tuple[str, frozenset[tuple[str, int]]]] = []
        self.known = dict(NAMES)
        self.sub = subscription or Subscription(topics=frozenset({"orders"}), assignor="uniform")
        self.generations: list[Generation] = []

    def subscription(self) -> Subscription:
        return self.sub

    def topic_names(self, topic_ids: frozenset[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        return {t: self.known[t] for t in topic_ids if t in self.known}

    def _record(self, name: str, partitions: frozenset[tuple[str, int]]) -> None:
        self.calls.append((name, partitions))
        with self.broker.lock:
            self.broker.events.append(f"{name} {sorted(p for _, p in partitions)}")

    def revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._record("revoked", partitions)

    def assigned(self, partitions: frozenset[tuple[str, int]], generation: Generation) -> None:
        self.generations.append(generation)
        self._record("assigned", partitions)

    def lost(self, partitions: frozenset[tuple[str, int]]) -> None:
        self._record("lost", partitions)

    def leaving(self) -> None:
        self._record("leaving", frozenset())


def member(
    broker: Broker, recipe: Recipe | None = None, **settings: Any
) -> tuple[ConsumerGroupMembership, Recipe]:
    recipe = recipe or Recipe(broker)
    config = CoordinatorConfig.from_settings(
        "g",
        {
            "bootstrap_servers": "h:1",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 100,
            "rebalance_timeout_ms": 5000,
            "retry_backoff_ms": 10,
            **settings,
        },
    )
    return ConsumerGroupMembership(recipe, config, broker), recipe


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_a_member_joins_takes_its_assignment_and_reports_it() -> None:
    broker = Broker()
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert cgm.owned() == {("orders", 0), ("orders", 1)}
        assert recipe.calls == [("assigned", frozenset({("orders", 0), ("orders", 1)}))]
        join = broker.requests[0]
        # A join sends everything; the member made its own id (KIP-1082).
        assert join.member_epoch == 0 and join.member_id
        assert join.subscribed_topic_names == ("orders",)
        assert join.server_assignor == "uniform"
        assert join.rebalance_timeout_ms == 5000
        assert join.topic_partitions == ()
        assert cgm.member_epoch == 1
        assert recipe.generations[0] == Generation(1, join.member_id, "consumer")
        assert cgm.membership_lease() > 5.0
        # Later heartbeats send only what changed: the owned partitions once, then nothing.
        wait_for(lambda: len(broker.requests) >= 4, "more heartbeats")
        later = broker.requests[3]
        assert later.subscribed_topic_names is None and later.rebalance_timeout_ms == -1
        assert later.topic_partitions is None
    finally:
        cgm.close(5)


def test_a_partition_is_revoked_before_the_heartbeat_reports_it_released() -> None:
    broker = Broker()
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        broker.reassign({(ORDERS, 0)})
        wait_for(lambda: ("revoked", frozenset({("orders", 1)})) in recipe.calls, "revoke")
        wait_for(lambda: "reported [0]" in broker.events, "the release reported")
        assert broker.events.index("revoked [1]") < broker.events.index("reported [0]")
        cgm.wait_stable(10)
        assert cgm.owned() == {("orders", 0)}
    finally:
        cgm.close(5)


def test_partitions_come_only_once_the_broker_frees_them() -> None:
    broker = Broker()
    broker.taken_by_others = frozenset({(ORDERS, 1)})
    cgm, recipe = member(broker)
    cgm.start()
    try:
        wait_for(lambda: cgm.owned() == {("orders", 0)}, "the free partition")
        with broker.lock:
            broker.taken_by_others = frozenset()
        wait_for(lambda: cgm.owned() == {("orders", 0), ("orders", 1)}, "the freed partition")
        assert [c[0] for c in recipe.calls] == ["assigned", "assigned"]
    finally:
        cgm.close(5)


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_a_fenced_member_loses_everything_then_joins_again_with_its_id(code: ErrorCode) -> None:
    broker = Broker()
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        first_id = broker.requests[0].member_id
        joins_before = sum(r.member_epoch == 0 for r in broker.requests)
        with broker.lock:
            broker.errors.append(code)
        wait_for(lambda: any(c[0] == "lost" for c in recipe.calls), "lost")
        lost_at = recipe.calls.index(("lost", frozenset({("orders", 0), ("orders", 1)})))
        wait_for(lambda: len(recipe.calls) > lost_at + 1, "assigned again")
        assert recipe.calls[lost_at + 1][0] == "assigned"
        rejoin = [r for r in broker.requests if r.member_epoch == 0][joins_before]
        assert rejoin.member_id == first_id
        assert rejoin.topic_partitions == ()
        cgm.wait_stable(10)
    finally:
        cgm.close(5)


def test_an_unknown_assignor_stops_the_member_with_a_typed_error() -> None:
    broker = Broker()
    broker.errors.append(ErrorCode.UNSUPPORTED_ASSIGNOR)
    cgm, _ = member(broker)
    cgm.start()
    try:
        with pytest.raises(UnsupportedAssignorError, match="group_remote_assignor"):
            cgm.wait_stable(10)
        assert isinstance(cgm.fatal_error, UnsupportedAssignorError)
    finally:
        cgm.close(5)


@pytest.mark.parametrize(("instance", "epoch"), [(None, -1), ("node-1", -2)])
def test_closing_gives_up_the_partitions_then_leaves(instance: str | None, epoch: int) -> None:
    broker = Broker()
    cgm, recipe = member(broker, group_instance_id=instance)
    cgm.start()
    cgm.wait_stable(10)
    cgm.close(5)
    assert recipe.calls[-1] == ("leaving", frozenset())
    assert broker.events[-1] == f"left {epoch}"
    assert cgm.membership_lease() == 0.0
    with pytest.raises(CoordinatorStateError):
        cgm.start()


def test_the_lease_is_bounded_by_the_rebalance_timeout_while_a_revocation_waits() -> None:
    broker = Broker()
    gate = threading.Event()
    recipe = Recipe(broker)
    original = recipe.revoked

    def slow_revoke(partitions: frozenset[tuple[str, int]]) -> None:
        gate.wait(10)
        original(partitions)

    recipe.revoked = slow_revoke  # type: ignore[method-assign]
    cgm, _ = member(broker, recipe, rebalance_timeout_ms=1000)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert cgm.membership_lease() > 5.0  # the session's
        broker.reassign({(ORDERS, 0)})
        wait_for(lambda: cgm.membership_lease() <= 1.0, "the lease bounded by the revocation")
        gate.set()
        wait_for(lambda: cgm.membership_lease() > 5.0, "the session's lease again")
    finally:
        gate.set()
        cgm.close(5)


def test_a_shorter_session_at_the_broker_bounds_the_lease_and_the_session_check() -> None:
    broker = Broker()
    asked: list[CoordinatorNode] = []

    def lookup(node: CoordinatorNode) -> int | None:
        asked.append(node)
        return 2000

    recipe = Recipe(broker)
    config = CoordinatorConfig.from_settings(
        "g", {"bootstrap_servers": "h:1", "heartbeat_interval_ms": 100, "retry_backoff_ms": 10}
    )
    cgm = ConsumerGroupMembership(recipe, config, broker, session_lookup=lookup)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert 1.0 < cgm.membership_lease() <= 2.0  # not the configured 45 s
        assert asked == [CoordinatorNode(1, "h", 1)]  # once, at the coordinator
        assert cgm._timers.session_timeout == 2.0
    finally:
        cgm.close(5)


def test_a_session_lookup_without_an_answer_is_asked_again_before_the_join() -> None:
    answers: list[int | Exception] = [TransportError("timed out"), TransportError("reset"), 2000]

    def lookup(node: CoordinatorNode) -> int | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    broker = Broker()
    recipe = Recipe(broker)
    config = CoordinatorConfig.from_settings(
        "g", {"bootstrap_servers": "h:1", "heartbeat_interval_ms": 100, "retry_backoff_ms": 10}
    )
    cgm = ConsumerGroupMembership(recipe, config, broker, session_lookup=lookup)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert not answers  # asked until it answered
        assert 1.0 < cgm.membership_lease() <= 2.0
    finally:
        cgm.close(5)


def test_a_session_lookup_the_broker_refuses_leaves_the_configured_session_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def lookup(node: CoordinatorNode) -> int | None:
        raise broker_error(
            ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id="g", api="DescribeConfigs"
        )

    broker = Broker()
    recipe = Recipe(broker)
    config = CoordinatorConfig.from_settings(
        "g",
        {"bootstrap_servers": "h:1", "session_timeout_ms": 6000, "heartbeat_interval_ms": 100},
    )
    cgm = ConsumerGroupMembership(recipe, config, broker, session_lookup=lookup)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert cgm.membership_lease() > 5.0
        assert "could not read the group's session timeout" in caplog.text
        assert "GROUP_AUTHORIZATION_FAILED" in caplog.text
    finally:
        cgm.close(5)


class LockProbe(CoordinationHooks):
    """Records, at each rebalance event, whether another thread could take the member's
    lock then (the hooks run once the member's locks are released)."""

    def __init__(self) -> None:
        self.engine: ConsumerGroupMembership | None = None
        self.free: list[tuple[str, bool]] = []

    def _probe(self, what: str) -> None:
        assert self.engine is not None
        lock = self.engine._lock
        got: list[bool] = []

        def take() -> None:
            taken = lock.acquire(timeout=0.5)
            got.append(taken)
            if taken:
                lock.release()

        other = threading.Thread(target=take)
        other.start()
        other.join()
        self.free.append((what, got[0]))

    def on_rebalance_started(self, event: RebalanceStarted) -> None:
        self._probe("started")

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        self._probe("finished")


def test_the_hooks_are_told_of_rebalances_with_the_members_lock_released() -> None:
    broker = Broker()
    probe = LockProbe()
    cgm, _ = member(broker, hooks=[probe])
    probe.engine = cgm
    cgm.start()
    try:
        cgm.wait_stable(10)
        broker.reassign({(ORDERS, 0)})  # a new assignment: started, then finished
        wait_for(lambda: len(probe.free) >= 4, "two rebalances told")
        assert [what for what, _ in probe.free[:4]] == [
            "started",
            "finished",
            "started",
            "finished",
        ], probe.free
        assert all(free for _, free in probe.free), probe.free
    finally:
        cgm.close(5)


def test_a_partition_of_a_topic_not_yet_named_waits_for_its_name() -> None:
    broker = Broker()
    broker.target = frozenset({(ORDERS, 0), (AUDIT, 0)})
    recipe = Recipe(broker)
    del recipe.known[AUDIT]
    cgm, _ = member(broker, recipe)
    cgm.start()
    try:
        wait_for(lambda: cgm.owned() == {("orders", 0)}, "the named topic's partition")
        recipe.known[AUDIT] = "audit"  # the member asks again every retry_backoff_ms
        wait_for(lambda: cgm.owned() == {("orders", 0), ("audit", 0)}, "the named partition")
    finally:
        cgm.close(5)


def test_a_partition_not_taken_yet_is_reported_owned_until_the_broker_moves_it_away() -> None:
    # Reported as not owned, the broker could give it to another member at once; taken
    # afterwards from the older assignment, it would have two owners (seen in the fault
    # campaign after a coordinator failover).
    broker = Broker()
    broker.target = frozenset({(ORDERS, 0), (AUDIT, 0)})
    recipe = Recipe(broker)
    del recipe.known[AUDIT]  # audit-0 cannot be taken yet: its topic has no name
    cgm, _ = member(broker, recipe)
    cgm.start()
    try:
        wait_for(lambda: cgm.owned() == {("orders", 0)}, "the named topic's partition")
        wait_for(lambda: (AUDIT, 0) in broker.member_owned, "audit-0 reported as owned")
        broker.reassign({(ORDERS, 0)})  # the broker moves audit-0 elsewhere
        wait_for(lambda: (AUDIT, 0) not in broker.member_owned, "audit-0 released")
        recipe.known[AUDIT] = "audit"
        time.sleep(0.1)  # several reconcile retries
        assert ("audit", 0) not in cgm.owned()
        assert not any(("audit", 0) in parts for _, parts in recipe.calls)
    finally:
        cgm.close(5)


class CommitBroker(Broker):
    """Also answers OffsetCommit, with ``commit_errors`` first."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_errors: list[int] = []
        self.fetch_errors: list[int] = []
        self.fetches: list[m.OffsetFetchRequest] = []

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        if isinstance(request, m.OffsetFetchRequest):
            self.fetches.append(request)
            with self.lock:
                stale = 0 <= request.member_epoch != self.epoch
            code = self.fetch_errors.pop(0) if self.fetch_errors else 0
            code = code or (ErrorCode.STALE_MEMBER_EPOCH if stale else 0)
            return m.OffsetFetchResponse(
                error_code=code,
                partitions=tuple(
                    (t, p, 7 if not code else -1, "", 0) for t, p in request.partitions
                ),
            )
        if isinstance(request, m.OffsetCommitRequest):
            code = self.commit_errors.pop(0) if self.commit_errors else 0
            return m.OffsetCommitResponse(
                partitions=tuple((t, p, code) for t, p, _, _ in request.offsets)
            )
        return super().send(request, response_type, **kw)


def test_a_commit_refused_as_fenced_loses_the_partitions_a_stale_one_does_not() -> None:
    broker = CommitBroker()
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        offsets = {("orders", 0): OffsetAndMetadata(3, "")}
        broker.commit_errors.append(ErrorCode.STALE_MEMBER_EPOCH)
        with pytest.raises(CommitFailedError):
            offsets_api.commit(cgm, offsets, None, 5)
        assert not any(c[0] == "lost" for c in recipe.calls)  # still a member, still owns
        assert cgm.member_epoch > 0
        broker.commit_errors.append(ErrorCode.FENCED_MEMBER_EPOCH)
        with pytest.raises(CommitFailedError):
            offsets_api.commit(cgm, offsets, None, 5)
        wait_for(lambda: any(c[0] == "lost" for c in recipe.calls), "lost")
        cgm.wait_stable(10)  # joined again
    finally:
        cgm.close(5)


def test_a_stable_member_heartbeats_at_the_interval_not_faster() -> None:
    # The broker answers every report of the owned partitions with the assignment; a member
    # that acknowledged every such answer with another report would heartbeat nonstop.
    broker = Broker()
    cgm, _ = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        time.sleep(0.2)
        before = len(broker.requests)
        time.sleep(0.5)
        sent = len(broker.requests) - before
        assert sent <= 0.5 / 0.020 * 1.5, f"{sent} heartbeats in 0.5 s at a 20 ms interval"
    finally:
        cgm.close(5)


def test_a_fetch_carries_the_epoch_and_is_sent_again_when_the_epoch_moved_on() -> None:
    broker = CommitBroker()  # answers STALE_MEMBER_EPOCH to a fetch of a past epoch
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert cgm.member_epoch == 1
        broker.reassign({(ORDERS, 0), (ORDERS, 1)})  # epoch 2; the member learns it later
        committed = offsets_api.fetch(cgm, [("orders", 0)], 5, fenced_by_epoch=True)
        assert committed == {("orders", 0): OffsetAndMetadata(7, "")}
        *stale, last = broker.fetches
        assert (last.member_id, last.member_epoch) == (cgm.member_id, 2)
        assert all(f.member_epoch == 1 for f in stale)
        assert not any(c[0] == "lost" for c in recipe.calls)
    finally:
        cgm.close(5)


def test_a_fetch_refused_as_fenced_loses_the_partitions_and_raises() -> None:
    broker = CommitBroker()
    cgm, recipe = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        broker.fetch_errors.append(ErrorCode.FENCED_MEMBER_EPOCH)
        with pytest.raises(MembershipLostError):
            offsets_api.fetch(cgm, [("orders", 0)], 5, fenced_by_epoch=True)
        wait_for(lambda: any(c[0] == "lost" for c in recipe.calls), "lost")
        assert len(broker.fetches) == 1
    finally:
        cgm.close(5)


def test_a_fetch_outside_the_group_carries_no_epoch() -> None:
    broker = CommitBroker()
    cgm, _ = member(broker)
    offsets_api.fetch(cgm, [("orders", 0)], 5, fenced_by_epoch=True)
    (only,) = broker.fetches
    assert (only.member_id, only.member_epoch) == (None, -1)
    cgm.close(5)


class Heard(CoordinationHooks):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
        self.events.append(("heartbeat_failed", event.error))

    def on_rebalance_failed(self, event: RebalanceFailed) -> None:
        self.events.append(("rebalance_failed", event.error))


def test_a_failed_heartbeat_is_reported_and_fails_a_rebalance_only_while_one_runs() -> None:
    broker = Broker()
    heard = Heard()
    # Joining: the failed heartbeat is also a failed attempt of the join.
    broker.errors.append(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    cgm, _ = member(broker, hooks=[heard])
    cgm.start()
    try:
        cgm.wait_stable(10)
        assert [kind for kind, _ in heard.events] == ["heartbeat_failed", "rebalance_failed"]
        assert "COORDINATOR_LOAD_IN_PROGRESS" in heard.events[0][1]
        # Stable: a failed heartbeat is only that.
        heard.events.clear()
        broker.errors.append(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        wait_for(lambda: bool(heard.events), "the failed heartbeat")
        time.sleep(0.1)
        assert [kind for kind, _ in heard.events] == ["heartbeat_failed"]
    finally:
        cgm.close(5)


class FailingOnce(Recipe):
    """Its first ``assigned`` raises (e.g. the consumer's OffsetFetch timed out)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.failures = 1

    def assigned(self, partitions: frozenset[tuple[str, int]], generation: Generation) -> None:
        super().assigned(partitions, generation)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("offset fetch timed out")


def test_an_assigned_callback_that_raises_is_called_again_and_the_partitions_stay_owned() -> None:
    broker = Broker()
    recipe = FailingOnce(broker)
    cgm, _ = member(broker, recipe)
    cgm.start()
    try:
        cgm.wait_stable(10)  # stable only once announced
        both = frozenset({("orders", 0), ("orders", 1)})
        assert [c for c in recipe.calls if c[0] == "assigned"] == [("assigned", both)] * 2
        # Reported as owned from the first call on: the broker never read them as released.
        since = broker.events[broker.events.index("assigned [0, 1]") :]
        assert {e for e in since if e.startswith("reported")} == {"reported [0, 1]"}, since
        assert not any(c[0] in ("revoked", "lost") for c in recipe.calls)
    finally:
        cgm.close(5)


def test_a_static_member_refused_its_rejoin_releases_its_own_old_registration() -> None:
    # Fenced, the member rejoins at epoch 0; a broker that still holds the instance for the
    # member's old registration (a moved coordinator restarts the sessions) refuses it with
    # UNRELEASED_INSTANCE_ID. Found by the fault campaign: the member stopped for good.
    broker = Broker()
    cgm, recipe = member(broker, group_instance_id="i-1")
    cgm.start()
    try:
        cgm.wait_stable(10)
        broker.errors += [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNRELEASED_INSTANCE_ID]
        wait_for(lambda: "left -2" in broker.events, "the release of the old registration")
        wait_for(lambda: cgm.member_epoch > 1, "joined again")
        cgm.wait_stable(10)
        assert any(c[0] == "lost" for c in recipe.calls)
    finally:
        cgm.close(5)


def test_a_first_join_refused_for_an_instance_in_use_stops_the_member() -> None:
    broker = Broker()
    broker.errors.append(ErrorCode.UNRELEASED_INSTANCE_ID)
    cgm, _ = member(broker, group_instance_id="i-1")
    cgm.start()
    try:
        with pytest.raises(UnreleasedInstanceIdError):
            cgm.wait_stable(10)
        assert "left -2" not in broker.events
    finally:
        cgm.close(5)


class SilentOnce(Broker):
    """Answers no heartbeat while ``silent``; records the order of what it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.silent = False
        self.sent: list[str] = []
        self.unanswered_at: int | None = None  # index in ``sent`` of the heartbeat

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        self.sent.append(type(request).__name__)
        if self.silent and isinstance(request, cg.ConsumerGroupHeartbeatRequest):
            self.silent = False
            self.unanswered_at = len(self.sent) - 1
            raise TransportError("no answer")
        return super().send(request, response_type, **kw)


def test_a_heartbeat_without_an_answer_makes_the_member_look_for_its_coordinator_again() -> None:
    # The coordinator may have gone (a broker restarting): looking it up again at once is
    # what moves the member to the new one before its session runs out.
    broker = SilentOnce()
    cgm, _ = member(broker)
    cgm.start()
    try:
        cgm.wait_stable(10)
        broker.silent = True
        wait_for(lambda: broker.unanswered_at is not None, "the unanswered heartbeat")
        assert broker.unanswered_at is not None
        start = broker.unanswered_at + 1
        wait_for(lambda: "ConsumerGroupHeartbeatRequest" in broker.sent[start:], "a heartbeat")
        after = broker.sent[start:]
        assert "FindCoordinatorRequest" in after, after
        assert after.index("FindCoordinatorRequest") < after.index("ConsumerGroupHeartbeatRequest")
    finally:
        cgm.close(5)


class TakenOverThenSilent(Broker):
    """Answers the first join as Kafka answers a static member taking over its instance's
    place: epoch 0, with the partitions it may keep; then, while ``silent``, no heartbeat
    (each fails at once) while the coordinator is found throughout; then joins as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.silent = False
        self.took_over = False
        self.removed = False  # the member's session ran out at the broker: joins are new

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        if not isinstance(request, cg.ConsumerGroupHeartbeatRequest):
            return super().send(request, response_type, **kw)
        if self.silent:
            raise TransportError("no answer")
        if request.member_epoch == 0:
            with self.lock:
                self.events.append("join")
                if not self.removed:
                    # Still moving to its target (a revocation elsewhere): epoch 0, the
                    # partitions it keeps, sent with the first answer only.
                    first, self.took_over = not self.took_over, True
                    return cg.ConsumerGroupHeartbeatResponse(
                        error_code=0,
                        member_id=request.member_id,
                        member_epoch=0,
                        heartbeat_interval_ms=20,
                        assignment=_by_topic(self.target) if first else None,
                    )
        return super().send(request, response_type, **kw)


def test_a_static_member_at_epoch_0_unanswered_for_its_session_loses_its_partitions() -> None:
    # Taken over at epoch 0, its heartbeats are joins, which the broker answers even after
    # it removed the member (as a new one): no fencing answer tells it. Its failed
    # heartbeats and the coordinator found again after each restart the heartbeat timers;
    # its session still counts from the last answered heartbeat's sending, and it loses
    # its partitions before its next join is answered (found by consumer-848 histories with
    # static members: two owners at once, each with a lease).
    broker = TakenOverThenSilent()
    cgm, _ = member(broker, session_timeout_ms=600, heartbeat_interval_ms=100)
    cgm.start()
    try:
        wait_for(lambda: cgm.owned() == {("orders", 0), ("orders", 1)}, "the taken-over partitions")
        assert cgm.member_epoch == 0
        with broker.lock:
            broker.events.append("silent from here")
            broker.silent = True
        time.sleep(1.0)  # more than the session, every heartbeat unanswered
        with broker.lock:
            broker.removed = True
            broker.silent = False
        since = broker.events.index("silent from here")
        wait_for(lambda: "join" in broker.events[since:], "a join after the silence")
        events = broker.events[since:]
        assert "lost [0, 1]" in events, events
        assert events.index("lost [0, 1]") < events.index("join"), events
    finally:
        cgm.close(5)


class BlockingLost(Recipe):
    """``lost`` waits until the test lets it return."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.in_lost = threading.Event()
        self.release = threading.Event()

    def lost(self, partitions: frozenset[tuple[str, int]]) -> None:
        self.in_lost.set()
        self.release.wait(10)
        super().lost(partitions)


def test_a_heartbeat_asked_for_while_lost_runs_waits_for_it_without_spinning() -> None:
    # While ``lost`` runs the member sends nothing; a heartbeat asked for at once meanwhile
    # (a full heartbeat, a stale commit, a new subscription) waits for it to return. Before,
    # the heartbeat thread skipped its wait and spun (in the simulator: a history hung).
    broker = Broker()
    recipe = BlockingLost(broker)
    cgm, _ = member(broker, recipe)
    turns = 0
    turn = cgm.heartbeat_once

    def counted() -> float:
        nonlocal turns
        turns += 1
        return turn()

    cgm.heartbeat_once = counted  # type: ignore[method-assign]
    cgm.start()
    try:
        cgm.wait_stable(10)
        with broker.lock:
            broker.errors.append(ErrorCode.FENCED_MEMBER_EPOCH)
        assert recipe.in_lost.wait(10), "lost was not called"
        sent = len(broker.requests)
        cgm.request_rejoin("asked for while lost runs")
        before = turns
        time.sleep(0.5)
        assert turns - before <= 5, f"{turns - before} heartbeat turns in 0.5 s while lost ran"
        assert len(broker.requests) == sent  # nothing sent before lost returned
        recipe.release.set()
        cgm.wait_stable(10)
    finally:
        recipe.release.set()
        cgm.close(5)
