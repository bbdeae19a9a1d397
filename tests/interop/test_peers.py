"""The interop harness itself: its bookkeeping on made-up events, then real peers on a broker.

The integration tests use only the peers (Kafka's Java consumer and librdkafka), so that
the harness is known to be right before this library's consumer joins the mix.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from devtools.orphans import ended
from tests._versions import ON_ONE_KAFKA_VERSION

from .peers import (
    Interval,
    PeerProcess,
    assert_commits_move_forward,
    assert_single_ownership,
    consumed_by,
    create_topic,
    last_committed,
    overlapping,
    owned_partitions,
    ownership_intervals,
    produce,
    start_java_peer,
    start_ours_peer,
    start_rdkafka_peer,
    topic_partitions,
    wait_settled,
    wait_until,
)
from .rdkafka_peer import reported_owned

PARTITIONS = 6
SETTLE_S = 60.0


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def start_fast(
    kind: str,
    kafka: str,
    group: str,
    topic: str,
    name: str,
    log_dir: Path,
    assignor: str = "cooperative-sticky",
) -> PeerProcess:
    """A peer with a short session: a killed peer's partitions move within seconds (the
    test broker allows sessions down to 500 ms)."""
    begin = {"java": start_java_peer, "rdkafka": start_rdkafka_peer, "ours": start_ours_peer}[kind]
    return begin(
        kafka,
        group,
        [topic],
        name=name,
        assignor=assignor,
        log_dir=log_dir,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
    )


# -- the bookkeeping, on made-up events (no broker) ---------------------------------------


def ev(kind: str, t: float, *partitions: int, topic: str = "t") -> dict[str, object]:
    return {"event": kind, "t": t, "partitions": [[topic, p] for p in partitions]}


def test_the_rdkafka_peer_reads_what_each_kip848_heartbeat_says_the_member_owns() -> None:
    # librdkafka 2.x's cgrp lines, as a campaign's peer logged them.
    def heartbeat(generation: int, owned: str) -> str:
        return (
            "HEARTBEAT [r-1#consumer-1] [thrd:main]: GroupCoordinator/3: ConsumerGroupHeartbeat"
            ' of member id "NEkdOSVqSoesmpvllNDdYw", group id "g-1", generation id '
            f'{generation}, group instance id "NULL", current assignment "{owned}", subscribed'
            ' topics "NULL", subscribed topic regex "NULL", remote assignor "NULL"'
        )

    owned = "s(aDQ53VMIQe6oys7Iede9zQ)[3], s(aDQ53VMIQe6oys7Iede9zQ)[0]"
    assert reported_owned(heartbeat(3, owned)) == (3, [["s", 0], ["s", 3]])
    assert reported_owned(heartbeat(2, "")) == (2, [])
    assert reported_owned(heartbeat(3, "NULL")) is None  # unchanged since the last one
    response = (
        "HEARTBEAT [r-1#consumer-1] [thrd:main]: ConsumerGroupHeartbeat response received for"
        ' member id "NEkdOSVqSoesmpvllNDdYw" with epoch 3'
    )
    assert reported_owned(response) is None


def test_eager_callbacks_revoke_everything_then_assign_the_whole_set() -> None:
    events = [ev("assigned", 1, 0, 1, 2), ev("revoked", 5, 0, 1, 2), ev("assigned", 7, 1, 2)]
    assert owned_partitions(events) == {("t", 1), ("t", 2)}
    intervals = ownership_intervals("a", events)
    assert Interval("a", ("t", 0), 1, 5, "revoked") in intervals
    assert Interval("a", ("t", 1), 7, math.inf, "") in intervals
    assert len(intervals) == 5


def test_cooperative_callbacks_carry_increments() -> None:
    events = [ev("assigned", 1, 0, 1, 2), ev("revoked", 5, 2), ev("assigned", 5, 3)]
    assert owned_partitions(events) == {("t", 0), ("t", 1), ("t", 3)}
    # Partition 0 stays owned across the rebalance: one interval, not two.
    assert [i for i in ownership_intervals("a", events) if i.partition == ("t", 0)] == [
        Interval("a", ("t", 0), 1, math.inf, "")
    ]


def test_a_dead_peer_owns_until_it_exited_and_a_lost_one_until_it_last_acted() -> None:
    killed = ownership_intervals("a", [ev("assigned", 1, 0)], exited_at=9)
    assert killed == [Interval("a", ("t", 0), 1, 9, "exit")]
    frozen = [
        ev("assigned", 1, 0, 1),
        {"event": "records", "t": 3, "partitions": [["t", 0, 0, 9, 10]]},
        {"event": "committed", "t": 4, "offsets": [["t", 0, 10]]},
        ev("lost", 50, 0, 1),
    ]
    assert sorted(ownership_intervals("a", frozen), key=lambda i: i.partition) == [
        Interval("a", ("t", 0), 1, 4, "lost"),
        Interval("a", ("t", 1), 1, 1, "lost"),
    ]


def test_overlap_needs_two_peers_on_one_partition_at_one_time() -> None:
    a = Interval("a", ("t", 0), 0, 10, "revoked")
    handed_over = Interval("b", ("t", 0), 10, math.inf, "")
    assert overlapping([a, handed_over, Interval("b", ("t", 1), 0, 5, "revoked")]) == []
    early = Interval("b", ("t", 0), 9.5, math.inf, "")
    assert overlapping([early, a]) == [(a, early)]
    # Gaps in one peer's own history are not overlaps.
    assert overlapping([a, Interval("a", ("t", 0), 5, 20, "revoked")]) == []


# -- real peers ---------------------------------------------------------------------------


def no_errors(peers: list[PeerProcess]) -> None:
    errors = {p.name: p.errors() for p in peers if p.errors()}
    assert not errors, errors


def end_offsets(records: set[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for t, p, offset in records:
        ends[(t, p)] = max(ends.get((t, p), 0), offset + 1)
    return ends


def check_history(peers: list[PeerProcess], produced: set[tuple[str, int, int]]) -> None:
    """Everything produced was consumed and committed, never by two owners at once."""
    wait_until(lambda: produced <= consumed_by(peers), 30, "every record consumed", peers)
    ends = end_offsets(produced)
    wait_until(lambda: last_committed(peers) == ends, 30, "commits up to the end", peers)
    assert_single_ownership(peers)
    assert_commits_move_forward(peers)


@pytest.mark.integration
def test_java_and_rdkafka_peers_share_a_cooperative_group(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("interop"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    produced = produce(kafka, topic, 120, PARTITIONS)
    for name in ("java-1", "java-2"):
        peers.append(start_java_peer(kafka, group, [topic], name=name, log_dir=tmp_path))
    peers.append(start_rdkafka_peer(kafka, group, [topic], name="rdkafka-1", log_dir=tmp_path))
    wait_settled(peers, topic_partitions(topic, PARTITIONS), SETTLE_S)
    # The cooperative-sticky assignors of both clients balance to two partitions each.
    assert sorted(len(p.owned()) for p in peers) == [2, 2, 2]
    produced |= produce(kafka, topic, 120, PARTITIONS)
    check_history(peers, produced)
    # Every kind consumed some of the records written after the group settled.
    assert all(p.consumed() for p in peers)
    for p in peers:
        assert p.terminate() == 0
        assert p.of("closed"), p.describe()
    # Closing revoked everything cleanly; the history still has no double ownership.
    assert all(i.ended_by == "revoked" for p in peers for i in p.intervals())
    assert_single_ownership(peers)
    no_errors(peers)


@pytest.mark.integration
@pytest.mark.parametrize("victim", ["java", "rdkafka"])
def test_a_killed_peers_partitions_move_to_the_others(
    kafka: str, peers: list[PeerProcess], tmp_path: Path, victim: str
) -> None:
    topic, group = new_name("interop"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    peers += [
        start_fast("java", kafka, group, topic, "java-1", tmp_path),
        start_fast("java", kafka, group, topic, "java-2", tmp_path),
        start_fast("rdkafka", kafka, group, topic, "rdkafka-1", tmp_path),
    ]
    wait_settled(peers, everything, SETTLE_S)
    produced = produce(kafka, topic, 60, PARTITIONS)
    wait_until(lambda: produced <= consumed_by(peers), 30, "records consumed", peers)
    dead = next(p for p in peers if p.kind == victim)
    orphaned = dead.owned()
    assert orphaned
    dead.kill()
    survivors = [p for p in peers if p is not dead]
    # No LeaveGroup: the broker notices only when the session (3 s) expires.
    wait_settled(survivors, everything, SETTLE_S)
    assert orphaned <= survivors[0].owned() | survivors[1].owned()
    produced |= produce(kafka, topic, 60, PARTITIONS)
    check_history(peers, produced)
    # What it owned when killed ends with its process, not with a callback.
    assert {i.partition for i in dead.intervals() if i.ended_by == "exit"} == orphaned
    no_errors(survivors)


@pytest.mark.integration
def test_each_kind_leads_the_group_in_turn(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("interop"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)

    def start(kind: str, name: str) -> PeerProcess:
        peer = start_fast(kind, kafka, group, topic, name, tmp_path)
        peers.append(peer)
        return peer

    # The first member of a new group leads; when the leader leaves, the broker picks one
    # of those that remain: with one left, the choice is forced.
    java_1 = start("java", "java-1")
    java_1.wait_for(lambda p: p.led_count() >= 1, SETTLE_S, "java-1 to lead")
    rdkafka_1 = start("rdkafka", "rdkafka-1")
    wait_settled([java_1, rdkafka_1], everything, SETTLE_S)
    java_1.terminate()
    rdkafka_1.wait_for(lambda p: p.led_count() >= 1, SETTLE_S, "rdkafka-1 to lead")
    java_2 = start("java", "java-2")
    wait_settled([rdkafka_1, java_2], everything, SETTLE_S)
    rdkafka_1.terminate()
    java_2.wait_for(lambda p: p.led_count() >= 1, SETTLE_S, "java-2 to lead")
    wait_settled([java_2], everything, SETTLE_S)
    # Each leader assigned for the group as it was: it alone, then with the newcomer.
    assert [e["members"] for e in java_1.of("led")][:2] == [1, 2]
    assert [e["members"] for e in rdkafka_1.of("led")][:2] == [1, 2]
    assert java_2.of("led")[-1]["members"] == 1
    assert_single_ownership(peers)
    no_errors(peers)


@pytest.mark.integration
def test_eager_range_group_of_both_kinds(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("interop"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    peers.append(start_fast("java", kafka, group, topic, "java-1", tmp_path, "range"))
    peers.append(start_fast("rdkafka", kafka, group, topic, "rdkafka-1", tmp_path, "range"))
    wait_settled(peers, everything, SETTLE_S)
    produced = produce(kafka, topic, 60, PARTITIONS)
    peers.append(start_fast("java", kafka, group, topic, "java-2", tmp_path, "range"))
    wait_settled(peers, everything, SETTLE_S)
    assert sorted(len(p.owned()) for p in peers) == [2, 2, 2]
    # Eager: every rebalance revoked everything, so each member has one interval per
    # partition it was given in each generation.
    assert peers[0].of("revoked")[0]["partitions"] == sorted(
        [t, p] for t, p in peers[0].of("assigned")[0]["partitions"]
    )
    peers[1].terminate()
    wait_settled([peers[0], peers[2]], everything, SETTLE_S)
    produced |= produce(kafka, topic, 60, PARTITIONS)
    check_history(peers, produced)
    no_errors(peers)


@pytest.mark.integration
def test_java_peers_upgrade_from_eager_to_cooperative_in_two_rolling_bounces(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    # Kafka's documented upgrade: bounce every member with "range,cooperative-sticky", then
    # again with "cooperative-sticky" alone. The group must never have two owners at once.
    topic, group = new_name("interop"), new_name("group")
    create_topic(kafka, topic, PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    live = [start_fast("java", kafka, group, topic, f"java-{i}", tmp_path, "range") for i in (1, 2)]
    peers += live
    wait_settled(live, everything, SETTLE_S)
    produced = produce(kafka, topic, 60, PARTITIONS)
    n = 2
    for assignor in ("range,cooperative-sticky", "cooperative-sticky"):
        for i in range(len(live)):
            live[i].terminate()
            n += 1
            live[i] = start_fast("java", kafka, group, topic, f"java-{n}", tmp_path, assignor)
            peers.append(live[i])
            wait_settled(live, everything, SETTLE_S)
    produced |= produce(kafka, topic, 60, PARTITIONS)
    check_history(peers, produced)
    # Once every member had switched, the leader used the cooperative assignor.
    assert live[0].of("led") or live[1].of("led")
    last_led = max((e for p in live for e in p.of("led")), key=lambda e: float(e["t"]))
    assert last_led["assignor"] == "cooperative-sticky"
    no_errors(peers)


# -- a killed test run leaves no peer behind -----------------------------------------------

# Starts one peer the way a test does, prints its pid, and waits to be killed (as a test
# run's worker is when the run is killed).
_PARENT = """
import sys, time
from pathlib import Path
from tests.interop import peers
kind, kafka, group, topic, log_dir = sys.argv[1:]
if kind == "java-share":
    peer = peers.start_java_share_peer(kafka, group, [topic], name=kind, log_dir=Path(log_dir))
else:
    start = getattr(peers, f"start_{kind}_peer")
    peer = start(kafka, group, [topic], name=kind, log_dir=Path(log_dir))
print(peer.pid, flush=True)
time.sleep(600)
"""


@ON_ONE_KAFKA_VERSION
@pytest.mark.parametrize("kind", ["java", "java-share", "rdkafka", "ours"])
def test_a_peer_whose_parent_is_killed_ends_within_seconds(
    kafka: str, tmp_path: Path, kind: str
) -> None:
    # Peers run in sessions of their own, so a killed run's signals do not reach them: before
    # they watched their parent, three Java peers of a killed run kept two cores busy for
    # the whole of the next one.
    topic = new_name("orphan")
    create_topic(kafka, topic, 2)
    group = new_name("orphan")
    with subprocess.Popen(
        [sys.executable, "-c", _PARENT, kind, kafka, group, topic, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ) as parent:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        try:
            time.sleep(3)  # the peer is under way (a JVM started, a group joined or joining)
            assert not ended(pid), f"the {kind} peer ended before its parent"
            parent.kill()
            parent.wait()
            deadline = time.monotonic() + 15
            while not ended(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ended(pid), f"the {kind} peer outlived its killed parent by 15 s"
        finally:
            parent.kill()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
