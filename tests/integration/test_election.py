"""Leader election on a real broker: one leader, failover, fencing, no overlap under chaos."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from coordination._transport.wakeups import KafkaWakeups
from coordination.testing import KafkaCluster
from recipes.election import LeaderElection, LeaderInfo, Leadership
from tests._versions import VERSIONS

from .members import FAST, EventProcess, fast_args, new_group, wait_until

pytestmark = pytest.mark.integration

SESSION_S = FAST["session_timeout_ms"] / 1000


@pytest.fixture
def elections() -> Iterator[list[LeaderElection]]:
    created: list[LeaderElection] = []
    yield created
    for e in created:
        e.close()


def elect(
    created: list[LeaderElection], kafka: str, group: str, identity: str, **kw: Any
) -> LeaderElection:
    e = LeaderElection(group, identity=identity, bootstrap_servers=kafka, **{**FAST, **kw})
    created.append(e)
    e.start()
    return e


def agreed(members: list[LeaderElection]) -> LeaderInfo | None:
    """The leader every member names, if they all name the same one and it knows it leads."""
    views = {m.leader() for m in members}
    if len(views) != 1:
        return None
    (info,) = views
    if info is None:
        return None
    leaders = [m for m in members if m.is_leader]
    return info if [m.identity for m in leaders] == [info.identity] else None


def wait_agreed(members: list[LeaderElection], timeout: float = 30) -> LeaderInfo:
    wait_until(lambda: agreed(members) is not None, timeout, "all members to agree on a leader")
    info = agreed(members)
    assert info is not None
    return info


def test_three_members_elect_exactly_one_leader_and_all_agree(kafka: str, elections) -> None:
    group = new_group()
    trio = [elect(elections, kafka, group, f"http://node-{i}") for i in range(3)]
    info = wait_agreed(trio)
    assert sum(m.is_leader for m in trio) == 1
    # Whoever completed the first rebalance leads (sticky); the free-election order
    # (priority, then smallest identity) is covered by the unit tests.
    assert info.identity in {f"http://node-{i}" for i in range(3)}
    assert all(m.members() == trio[0].members() for m in trio)
    assert sorted(trio[0].members().values()) == [f"http://node-{i}" for i in range(3)]


def test_graceful_close_hands_leadership_over_quickly(kafka: str, elections) -> None:
    group = new_group()
    trio = [elect(elections, kafka, group, f"http://node-{i}") for i in range(3)]
    first = wait_agreed(trio)
    leader = next(m for m in trio if m.identity == first.identity)
    rest = [m for m in trio if m is not leader]
    started = time.monotonic()
    leader.close()
    second = wait_agreed(rest, timeout=SESSION_S)  # LeaveGroup: no session timeout to wait
    assert time.monotonic() - started < SESSION_S
    assert second.identity != first.identity
    assert second.token > first.token  # a new leadership, a higher fencing token


def test_a_leaders_departure_goes_ahead_of_its_leave_group_and_the_others_take_over_at_once(
    kafka: str, elections
) -> None:
    # Heartbeats 20 s apart: only the departure's wake-up can start the next round soon.
    # It goes out ahead of the LeaveGroup (every election rejoin makes the broker
    # rebalance), so the others may rejoin before the broker has handled the LeaveGroup.
    slow = {
        "heartbeat_interval_ms": 20_000,
        "session_timeout_ms": 60_000,
        "rebalance_timeout_ms": 60_000,
    }
    group = new_group()
    trio = [elect(elections, kafka, group, f"http://node-{i}", **slow) for i in range(3)]
    first = wait_agreed(trio)

    def listening() -> bool:
        return all(m.coordinator._engine._wakeups.stats.working for m in trio)  # type: ignore[union-attr]

    wait_until(listening, 30, "every member to read its wake-ups")
    time.sleep(1)  # the joins' own wake-ups are read; the group is quiet
    leader = next(m for m in trio if m.identity == first.identity)
    rest = [m for m in trio if m is not leader]
    engine = leader.coordinator._engine
    channel = engine._wakeups
    assert isinstance(channel, KafkaWakeups) and channel._route is not None
    assert engine._coordinator is not None
    rides_along = channel._route.leader == engine._coordinator.node_id
    started = time.monotonic()
    leader.close()
    second = wait_agreed(rest, timeout=10)
    assert time.monotonic() - started < 10  # not 20 s: no heartbeat was due
    assert second.token > first.token
    for survivor in rest:
        reason = survivor.coordinator.metrics().rejoin_reasons[-1]
        assert reason.endswith("announced: leave; the group is rebalancing"), reason
    assert channel.stats.sent_with_leave == (1 if rides_along else 0)


def test_other_members_joining_or_leaving_do_not_move_leadership(kafka: str, elections) -> None:
    group = new_group()
    elected: list[Leadership] = []
    deposed: list[Leadership] = []
    leader = elect(  # would lose a free election
        elections,
        kafka,
        group,
        "http://z-leader",
        on_elected=elected.append,
        on_deposed=deposed.append,
    )
    wait_agreed([leader])
    token = leader.leadership().token  # type: ignore[union-attr]
    others = [elect(elections, kafka, group, f"http://a-{i}", priority=5) for i in range(2)]
    info = wait_agreed([leader, *others])
    assert (info.identity, info.token) == ("http://z-leader", token)
    others[0].close()
    wait_until(lambda: len(leader.members()) == 2, 30, "the group to shrink")
    assert agreed([leader, others[1]]) == info
    # Never interrupted: elected once, at the start, never deposed.
    assert [e.token for e in elected] == [token] and deposed == []


def test_ineligible_members_never_lead_and_learn_there_is_no_leader(kafka: str, elections) -> None:
    group = new_group()
    observers = [
        elect(elections, kafka, group, f"http://obs-{i}", eligible=False) for i in range(2)
    ]
    candidate = elect(elections, kafka, group, "http://zz-candidate")
    info = wait_agreed([*observers, candidate])
    assert info.identity == "http://zz-candidate"
    assert not any(o.is_leader for o in observers)
    candidate.close()
    wait_until(
        lambda: all(len(o.members()) == 2 and o.leader() is None for o in observers),
        30,
        "observers to learn that nobody leads",
    )
    assert not any(o.is_leader for o in observers)


def test_duplicate_identity_is_reported_to_the_duplicate(kafka: str, elections) -> None:
    group = new_group()
    first = elect(elections, kafka, group, "http://same")
    wait_agreed([first])
    second = elect(elections, kafka, group, "http://same")
    from recipes.election import DuplicateIdentityError

    with pytest.raises(DuplicateIdentityError, match="http://same"):
        second.run(lambda leadership: None, timeout=30)
    assert first.is_leader  # the current leader keeps its place


def test_run_calls_func_while_leading_then_steps_down(kafka: str, elections) -> None:
    group = new_group()
    a = elect(elections, kafka, group, "http://a")
    wait_agreed([a])
    b = elect(elections, kafka, group, "http://b")
    wait_agreed([a, b])
    seen: list[tuple[str, int, bool]] = []

    def lead(leadership: Leadership) -> int:
        seen.append((leadership.identity, leadership.token, leadership.is_valid()))
        return 42

    result = a.run(lead)
    assert result == 42
    assert seen and seen[0][0] == "http://a" and seen[0][2]
    # a stepped down and left the running: b takes over.
    info = wait_agreed([a, b])
    assert info.identity == "http://b" and info.token > seen[0][1]
    assert not a.is_leader


# ------------------------------------------------------------------ durable tokens

# The broker looks for empty groups to delete every second instead of every ten minutes.
QUICK_CLEANUP = {"offsets.retention.check.interval.ms": "1000"}


@pytest.fixture(scope="module", params=VERSIONS, ids=lambda v: f"kafka-{v}")
def quick_cleanup_kafka(request: pytest.FixtureRequest) -> Iterator[str]:
    """A broker of its own that deletes an empty group without offsets within a second."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:  # the default ten minutes: the tests still hold, only less sharply
        yield external
        return
    with KafkaCluster(brokers=1, version=request.param, config=QUICK_CLEANUP) as cluster:
        yield cluster.bootstrap_servers


def group_state(kafka: str, group: str) -> str | None:
    """The broker's state of ``group`` (e.g. "Empty"), None if it does not know the group."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        for g in admin.list_groups():
            if g["group_id"] == group:
                return str(g["group_state"])
        return None
    finally:
        admin.close()


def stored_token(kafka: str, group: str) -> int | None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        tp = TopicPartition("__consumer_offsets", 0)
        found = admin.list_group_offsets({group: [tp]}).get(group, {}).get(tp)
        return None if found is None or found.offset < 0 else int(found.offset)
    finally:
        admin.close()


def test_tokens_keep_growing_after_every_member_restarted(quick_cleanup_kafka: str) -> None:
    """Every member stops, the group stays empty for several of the broker's cleanup rounds,
    new members start: the new leader's token exceeds the last one. Without the stored
    token the broker would delete the group, its generation would restart at 1 and so
    would the token, and a store that checks ``token > last`` would refuse every leader."""
    kafka = quick_cleanup_kafka
    group = new_group()
    tokens: list[int] = []
    states: list[str | None] = []
    # Every leadership's token, also of one handed over while the pair closes (the second
    # member may be elected, and store its token, before its own close begins).
    elected: list[int] = []
    for round_ in range(3):
        members: list[LeaderElection] = []
        try:
            pair = [
                elect(
                    members,
                    kafka,
                    group,
                    f"http://r{round_}-{i}",
                    on_elected=lambda leadership: elected.append(leadership.token),
                )
                for i in range(2)
            ]
            info = wait_agreed(pair)
            leadership = next(m for m in pair if m.is_leader).leadership()
            assert leadership is not None and leadership.token == info.token
            tokens.append(info.token)

            # Stored: before it counted as leader (the group's first), or right after (a
            # token equal to the generation, in a group that has a stored token).
            def token_stored(token: int = info.token) -> bool:
                return stored_token(kafka, group) == token

            wait_until(token_stored, 10, "the token to be stored")
        finally:
            for m in members:
                m.close()
        # Empty now; the broker checks every second whether to delete the group. It keeps
        # the group and its offsets, because the token is committed in it.
        time.sleep(4)
        states.append(group_state(kafka, group))
    assert tokens == sorted(set(tokens)), f"tokens did not strictly grow: {tokens}"
    assert elected == sorted(set(elected)), f"tokens did not strictly grow: {elected}"
    assert states == ["Empty"] * 3, f"the broker deleted the group: {states}"
    assert stored_token(kafka, group) == elected[-1]


def test_a_leader_that_cannot_store_its_token_never_acts(kafka: str, elections) -> None:
    """The broker refuses the commit (the token topic does not exist): the member the group
    elects never counts as leader, and on_elected never runs."""
    group = new_group()
    elected: list[Leadership] = []
    member = elect(
        elections,
        kafka,
        group,
        "http://no-store",
        token_topic=f"missing-{uuid.uuid4().hex[:8]}",
        on_elected=elected.append,
    )
    wait_until(lambda: member.leader() is not None, 30, "the group to name a leader")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert not member.is_leader and member.leadership() is None
        time.sleep(0.05)
    assert elected == []
    # Every attempt is an election again, each with a higher token than the last.
    first = member.leader()
    wait_until(
        lambda: (
            (info := member.leader()) is not None and first is not None and info.token > first.token
        ),
        30,
        "the group to elect again",
    )


# ------------------------------------------------------------------ kills and freezes


def election_process(kafka: str, group: str, identity: str, *options: str) -> EventProcess:
    """An election member in its own process (``devtools.member``), writing records with
    ``--topic`` until a write fails (``--on-write-error=zombie``: and once after that)."""
    return EventProcess(
        "--recipe=election",
        f"--bootstrap={kafka}",
        f"--group={group}",
        f"--name={identity}",
        *fast_args(),
        *options,
    )


def leaders_of(procs: list[EventProcess]) -> list[EventProcess]:
    """Processes whose last elected/deposed event is 'elected'."""
    result = []
    for p in procs:
        changes = [e for e in p.events if e["event"] in ("elected", "deposed")]
        if changes and changes[-1]["event"] == "elected":
            result.append(p)
    return result


def test_sigkilled_leader_is_replaced_after_the_session_timeout(kafka: str, processes) -> None:
    group = new_group()
    procs = [election_process(kafka, group, f"http://p-{i}") for i in range(3)]
    processes.extend(procs)
    wait_until(lambda: len(leaders_of(procs)) == 1, 30, "a leader")
    (leader,) = leaders_of(procs)
    killed_at = time.time()
    leader.signal(signal.SIGKILL)
    rest = [p for p in procs if p is not leader]
    wait_until(lambda: len(leaders_of(rest)) == 1, SESSION_S * 4, "a new leader")
    (successor,) = leaders_of(rest)
    elected_at = successor.of("elected")[-1]["t"]
    # Not before the broker could have expired the dead leader's session.
    assert elected_at - killed_at >= SESSION_S - 1.0
    assert elected_at - killed_at < SESSION_S * 3


def test_frozen_leader_is_deposed_and_its_writes_are_fenced(kafka: str, processes) -> None:
    group = new_group()
    topic = f"leader-writes-{uuid.uuid4().hex[:8]}"
    procs = [
        election_process(kafka, group, f"http://p-{i}", "--topic", topic, "--on-write-error=zombie")
        for i in range(2)
    ]
    processes.extend(procs)
    wait_until(lambda: len(leaders_of(procs)) == 1, 30, "a leader")
    (old,) = leaders_of(procs)
    (new,) = [p for p in procs if p is not old]
    wait_until(lambda: bool(old.of("wrote")), 30, "the leader to write")

    old.signal(signal.SIGSTOP)
    frozen_at = time.time()
    wait_until(lambda: bool(new.of("elected") and new.of("wrote")), SESSION_S * 5, "a new leader")
    assert new.of("elected")[-1]["token"] > old.of("elected")[-1]["token"]
    # Taken before the signal: the resumed process can log its first event before this
    # process runs again (a loaded machine did), and nothing runs there while it is stopped.
    resumed_at = time.time()
    old.signal(signal.SIGCONT)
    wait_until(lambda: bool(old.of("deposed") and old.of("write_rejected")), 20, "the old leader")

    # After resuming, it learned of its deposition before doing anything as leader.
    writes_after = [e for e in old.of("wrote") if e["checked_at"] > frozen_at]
    assert writes_after == []
    assert old.of("check_failed") or old.of("deposed")[0]["t"] >= resumed_at
    # Its write that ignored the deposition was refused by the broker: it was fenced.
    assert old.of("write_rejected")[0]["error"] in (
        "ProducerFencedError",
        "InvalidProducerEpochError",
        "KafkaError",
    ), old.of("write_rejected")
    assert not old.of("zombie_write_accepted")


def read_committed(kafka: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record of the (one-partition) topic, in log order."""
    consumer = KafkaConsumer(
        bootstrap_servers=kafka,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]  # the last stable offset, for read_committed
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(json.loads(r.value) for r in batch)
        assert consumer.position(tp) >= end, "could not read the leaders' topic to its end"
        return records
    finally:
        consumer.close()


def test_random_kills_and_freezes_never_overlap_two_leaders(kafka: str, processes) -> None:
    """An outside observer checks, from the fenced writes and each leader's own checks, that no
    two leaderships ever overlapped while members were killed, frozen and restarted."""
    rng = random.Random(int(time.time()))
    group = new_group()
    topic = f"leader-writes-{uuid.uuid4().hex[:8]}"
    alive: list[EventProcess] = []
    counter = iter(range(1000))

    def spawn() -> None:
        p = election_process(kafka, group, f"http://p-{next(counter)}", "--topic", topic)
        processes.append(p)
        alive.append(p)

    for _ in range(3):
        spawn()
    deadline = time.monotonic() + 75
    actions: list[str] = []
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, SESSION_S * 1.5))
        victim = rng.choice(leaders_of(alive) or alive)
        action = rng.choice(["kill", "freeze", "close"])
        actions.append(action)
        if action == "kill":
            victim.signal(signal.SIGKILL)
            alive.remove(victim)
            spawn()
        elif action == "freeze":
            victim.signal(signal.SIGSTOP)
            time.sleep(rng.uniform(SESSION_S * 0.5, SESSION_S * 2))
            victim.signal(signal.SIGCONT)
        else:
            alive.remove(victim)
            threading.Thread(target=victim.close, daemon=True).start()
            spawn()
    wait_until(lambda: len(leaders_of(alive)) == 1, SESSION_S * 6, "a final leader")
    for p in alive:  # closing ends the last leader's open transaction
        p.close()

    records = read_committed(kafka, topic)
    assert records, "no leader ever wrote"
    # 1. The log, which only fenced producers could write to, saw tokens only grow, and
    #    each token belongs to one identity.
    tokens = [r["token"] for r in records]
    assert tokens == sorted(tokens), f"a deposed leader wrote after its successor: {tokens}"
    owners: dict[int, set[str]] = {}
    for r in records:
        owners.setdefault(r["token"], set()).add(r["identity"])
    assert all(len(ids) == 1 for ids in owners.values()), owners
    # 2. Each leader's own successful checks (wall clock, one host) never overlap another
    #    leadership's span from election to last successful check.
    spans: dict[int, list[float]] = {}
    for p in processes:
        for e in p.events:
            if e["event"] == "elected":
                spans.setdefault(e["token"], [e["t"], e["t"]])
            elif e["event"] == "wrote":
                span = spans.setdefault(e["token"], [e["checked_at"], e["checked_at"]])
                span[1] = max(span[1], e["checked_at"])
    ordered = sorted(spans.items())
    for (t1, (_, end1)), (t2, (start2, _)) in itertools.pairwise(ordered):
        assert end1 < start2, f"leadership {t1} acted until {end1}, after {t2} began at {start2}"
    assert len(spans) >= 3, f"too few leader changes to prove anything: {actions}"
