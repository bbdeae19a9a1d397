"""Seeing groups from the outside on a real broker: ``describe_group``, ``list_groups`` and
the ``coordination groups`` / ``coordination describe`` commands decode a Java consumer
group and the groups of every recipe, without joining them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from coordination import (
    GroupInspector,
    MemberDescription,
    RebalanceRecord,
    describe_group,
    list_groups,
    rebalance_timeline,
)
from recipes.election import LeaderElection
from recipes.tasks import TaskDistribution

from ..integration.members import Listing, settled, wait_until
from ..integration.task_worker import RunningTasks
from .peers import PeerProcess, create_topic, start_java_peer, topic_partitions, wait_settled

pytestmark = pytest.mark.integration
FAST: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "retry_backoff_ms": 50,
}


COMMAND = [sys.executable, "-m", "coordination"]


def decoded(member: MemberDescription) -> dict[str, Any]:
    assert member.decoded is not None, member
    return member.decoded


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_a_java_consumer_group_is_decoded(
    kafka: str, peers: list[PeerProcess], tmp_path: Path
) -> None:
    topic, group = new_name("describe"), new_name("group")
    create_topic(kafka, topic, 4)
    for name in ("java-a", "java-b"):
        peers.append(start_java_peer(kafka, group, [topic], name=name, log_dir=tmp_path))
    wait_settled(peers, topic_partitions(topic, 4), 60)
    # The generation settles before the last member's stored assignment: describe until the
    # assignments cover every partition.
    described = describe_group(group, bootstrap_servers=kafka)
    for _ in range(50):
        assigned = [p for x in described.members for p in decoded(x)["assignment"].get(topic, [])]
        if sorted(assigned) == [0, 1, 2, 3]:
            break
        time.sleep(0.2)
        described = describe_group(group, bootstrap_servers=kafka)
    assert (described.state, described.protocol_type) == ("Stable", "consumer")
    assert described.protocol == "cooperative-sticky"
    assert sorted(x.client_id for x in described.members) == ["java-a", "java-b"]
    for member in described.members:
        assert member.decoded is not None
        assert member.decoded["topics"] == [topic]
        assert "claimed_generation" in member.decoded
    owned = sorted(p for x in described.members for p in decoded(x)["assignment"][topic])
    assert owned == [0, 1, 2, 3]  # every partition, once
    assert described.summary == {"topics": [topic], "assigned_partitions": 4}


def test_an_election_is_decoded_and_names_its_leader_without_joining(kafka: str) -> None:
    group = new_name("elect")
    settings: dict[str, Any] = {"bootstrap_servers": kafka, **FAST}
    b = LeaderElection(group, identity="http://b", **settings)
    watch = LeaderElection(group, identity="http://watch", eligible=False, **settings)
    with LeaderElection(group, identity="http://a", priority=2, **settings) as a:
        # b and watch start once a leads alone: had b's first join landed before a's, b would
        # lead (a sitting leader keeps its place, whatever a newcomer's priority).
        leader = a.wait_for_leader(30)
        with b, watch:
            wait_until(lambda: b.leader() == leader and watch.leader() == leader, 30, "one view")
            generation = a.coordinator.generation().generation_id
            described = describe_group(group, bootstrap_servers=kafka)
            assert described.protocol_type == "election"
            assert described.summary["leader"] == leader.identity == "http://a"
            assert described.summary["token"] == leader.token
            assert described.summary["candidates"] == ["http://a", "http://b"]
            assert described.summary["observers"] == ["http://watch"]
            by_identity = {decoded(x)["identity"]: decoded(x) for x in described.members}
            # Metadata is what each member sent in its last JoinGroup (a's: it leads).
            assert by_identity["http://a"]["priority"] == 2
            assert by_identity["http://b"]["priority"] == 0
            assert by_identity["http://watch"]["eligible"] is False
            # Describing is a read: nobody rebalanced.
            assert a.coordinator.generation().generation_id == generation


def test_a_gateway_follows_the_leader_through_one_inspector(kafka: str) -> None:
    group = new_name("gateway")
    settings: dict[str, Any] = {"bootstrap_servers": kafka, **FAST}
    b = LeaderElection(group, identity="http://b", **settings)
    with (
        GroupInspector(bootstrap_servers=kafka) as inspector,
        LeaderElection(group, identity="http://a", priority=2, **settings) as a,
    ):
        # a leads a group of one first: had b's first join landed before a's, b would lead
        # (a sitting leader keeps its place, whatever a newcomer's priority).
        assert a.wait_for_leader(30).identity == "http://a"
        b.start()
        wait_until(lambda: b.leader() is not None, 30, "b to join")
        wait_until(lambda: inspector.describe(group).summary["leader"] == "http://a", 30, "a")
        assert group in {g.group_id for g in inspector.list_groups()}
        a.close()
        # The same inspector (its connections) sees the new leader.
        wait_until(lambda: inspector.describe(group).summary["leader"] == "http://b", 30, "b")
        # The group's assignment names b before b has stored its token and leads.
        wait_until(lambda: b.is_leader, 30, "b to take up leadership")
        assert inspector.describe(group).summary["token"] == b.leadership().token  # type: ignore[union-attr]
    b.close()


def task_worker(kafka: str, group: str, running: RunningTasks, name: str) -> TaskDistribution:
    """A worker of a group that runs four tasks."""
    return TaskDistribution(
        group,
        worker_id=name,
        start_task=running.start_task(name),
        stop_task=running.stop_task(name),
        tasks={f"t{i}": 1.0 for i in range(4)},
        bootstrap_servers=kafka,
        stop_timeout_ms=1000,  # a 6 s lease leaves room for margin, stop and a heartbeat
        **FAST,
    )


def test_a_task_group_is_decoded(kafka: str) -> None:
    group = new_name("tasks")
    running = RunningTasks("w1", "w2")
    with task_worker(kafka, group, running, "w1"), task_worker(kafka, group, running, "w2"):
        wait_until(
            lambda: [len(t) for t in running.snapshot().values()] == [2, 2], 30, "two tasks each"
        )
        described = describe_group(group, bootstrap_servers=kafka)
        assert described.protocol_type == "tasks"
        expected = {w: sorted(ts) for w, ts in running.snapshot().items()}
        assert described.summary == {"workers": expected, "moving": []}
        assert sorted(decoded(x)["worker_id"] for x in described.members) == ["w1", "w2"]


def test_a_member_describes_its_own_group_over_its_own_connection(kafka: str) -> None:
    group = new_name("inside")
    running = RunningTasks("w1", "w2")
    with (
        task_worker(kafka, group, running, "w1") as w1,
        task_worker(kafka, group, running, "w2"),
    ):
        wait_until(
            lambda: [len(t) for t in running.snapshot().values()] == [2, 2], 30, "two tasks each"
        )
        generation = w1.coordinator.generation().generation_id
        inside = w1.coordinator.describe_group(timeout=10)
        outside = describe_group(group, bootstrap_servers=kafka)
        assert (inside.state, inside.protocol_type) == ("Stable", "tasks")
        expected = {w: sorted(ts) for w, ts in running.snapshot().items()}
        assert inside.summary == outside.summary == {"workers": expected, "moving": []}
        assert [x.member_id for x in inside.members] == [x.member_id for x in outside.members]
        assert w1.coordinator.member_id in {x.member_id for x in inside.members}
        assert w1.coordinator.generation().generation_id == generation  # a read: no rebalance
    gone = describe_group(group, bootstrap_servers=kafka)
    assert gone.members == () and gone.state in ("Empty", "Dead")


def test_an_unknown_protocol_type_keeps_its_bytes_and_every_group_is_listed(kafka: str) -> None:
    group = new_name("listing")
    members = [Listing(group, bootstrap_servers=kafka) for _ in range(2)]
    try:
        for member in members:
            member.start()
        wait_until(lambda: settled(members, 2), 30, "two members")
        described = describe_group(group, bootstrap_servers=kafka)
        assert described.protocol_type == "listing" and described.summary == {}
        assert all(x.decoded is None for x in described.members)
        assert sorted(x.metadata for x in described.members) == [b"v1", b"v1"]
        assert all(json.loads(x.assignment)["members"] for x in described.members)
        listed = {g.group_id: g for g in list_groups(bootstrap_servers=kafka)}
        assert listed[group].protocol_type == "listing"
        assert listed[group].state == "Stable"
    finally:
        for member in members:
            member.close(timeout=10)


def test_the_commands_list_and_describe(kafka: str) -> None:
    group = new_name("cli")
    members = [Listing(group, bootstrap_servers=kafka) for _ in range(2)]
    try:
        for member in members:
            member.start()
        wait_until(lambda: settled(members, 2), 30, "two members")
        command = [sys.executable, "-m", "coordination"]
        listing = subprocess.run(
            [*command, "groups", "--bootstrap-servers", kafka, "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert group in {g["group_id"] for g in json.loads(listing.stdout)}
        shown = subprocess.run(
            [*command, "describe", group, "--bootstrap-servers", kafka, "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        described = json.loads(shown.stdout)
        assert described["state"] == "Stable" and len(described["members"]) == 2
        text = subprocess.run(
            [*command, "describe", group, "--bootstrap-servers", kafka],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert f"group {group}: Stable" in text
        missing = subprocess.run(
            [*command, "describe", group, "--bootstrap-servers", "127.0.0.1:1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert missing.returncode == 1 and "error:" in missing.stderr
        # A typo is not a dead group: the broker answers Dead, no members, no protocol type.
        typo = f"{group}-typo"
        assert not describe_group(typo, bootstrap_servers=kafka).exists
        unknown = subprocess.run(
            [*command, "describe", typo, "--bootstrap-servers", kafka],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert unknown.returncode == 3 and unknown.stdout == ""
        assert f"error: group {typo!r} does not exist" in unknown.stderr
    finally:
        for member in members:
            member.close(timeout=10)


def test_the_timeline_shows_each_members_rebalances_and_what_moved(kafka: str) -> None:
    group = new_name("timeline")
    first = LeaderElection(group, identity="first", priority=1, bootstrap_servers=kafka, **FAST)
    second = LeaderElection(group, identity="second", bootstrap_servers=kafka, **FAST)
    try:
        first.start()
        assert first.wait_for_leader(timeout=30).identity == "first"
        second.start()
        wait_until(lambda: second.leader() is not None, 30, "second sees a leader")

        def recorded() -> list[RebalanceRecord]:
            return rebalance_timeline(group, bootstrap_servers=kafka)

        # Published in the background once each rebalance completes: the first member's two
        # (alone, then with the second) and the second member's one.
        wait_until(lambda: len(recorded()) >= 3, 30, "three rebalances recorded")
        timeline = recorded()
        leading = [r for r in timeline if r.moved.startswith("leads with token ")]
        following = [r for r in timeline if r.moved.startswith("follows first (token ")]
        assert [r.generation for r in leading] == [1, 2]
        assert [r.generation for r in following] == [2]
        first_id, second_id = leading[0].member_id, following[0].member_id
        assert leading[1].member_id == first_id != second_id
        assert leading[0].reason == "the member is joining the group for the first time"
        assert all(0 <= r.duration_s < 30 and r.started_at > time.time() - 120 for r in timeline)
        # Oldest first, by the time each ended.
        assert [r.finished_at for r in timeline] == sorted(r.finished_at for r in timeline)

        shown = subprocess.run(
            [
                *COMMAND,
                "describe",
                group,
                "--timeline",
                "5",
                "--bootstrap-servers",
                kafka,
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        entries = json.loads(shown.stdout)["timeline"]
        assert {(e["member_id"], e["generation"]) for e in entries} >= {
            (first_id, 1),
            (first_id, 2),
            (second_id, 2),
        }
        text = subprocess.run(
            [*COMMAND, "describe", group, "--timeline", "--bootstrap-servers", kafka],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "rebalances recorded in the last 60 min:" in text
        assert f"gen 2 {second_id}: " in text and "follows first" in text
    finally:
        second.close()
        first.close()
