"""The engine against a real Apache Kafka broker: joins, leaves, crashes, freezes, upgrades."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordination import Member, MemberState, errors

from .members import FAST, EventProcess, Listing, fast_args, new_group, settled, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def start(created: list[Listing], kafka: str, group: str, n: int, **kw: Any) -> list[Listing]:
    new = [Listing(group, bootstrap_servers=kafka, **kw) for _ in range(n)]
    created.extend(new)
    for m in new:
        m.start()
    return new


def member_process(
    kafka: str, group: str, instance_id: str | None = None, session_timeout_ms: int | None = None
) -> EventProcess:
    """A ``Listing`` member in its own process, so that it can be killed or frozen."""
    session = {} if session_timeout_ms is None else {"session_timeout_ms": session_timeout_ms}
    static = [] if instance_id is None else ["--group-instance-id", instance_id]
    return EventProcess(
        "--recipe=listing",
        f"--bootstrap={kafka}",
        f"--group={group}",
        *fast_args(**session),
        *static,
    )


def test_three_members_agree_on_one_leader_and_its_assignment(kafka: str, members) -> None:
    group = new_group()
    trio = start(members, kafka, group, 3)
    for m in trio:
        m.ensure_active_group(timeout=30)
    wait_until(lambda: settled(trio, 3), 15, "three members in one generation")
    assert sum(m.is_leader for m in trio) == 1
    leader = next(m for m in trio if m.is_leader)
    assignments = [m.last()[3] for m in trio]
    # Every member got its part of the one plan the leader made.
    assert {a["leader"] for a in assignments} == {leader.member_id}
    assert sorted(a["index"] for a in assignments) == [0, 1, 2]
    assert all(a["members"] == sorted(m.member_id for m in trio) for a in assignments)
    assert leader.assigned_as_leader[-1] == 3
    assert all(m.state is MemberState.STABLE for m in trio)
    assert len({m.generation() for m in trio}) == 3  # same generation id, distinct member ids
    assert len({m.generation().generation_id for m in trio}) == 1


def test_a_member_that_leaves_makes_the_rest_rebalance_at_once(kafka: str, members) -> None:
    group = new_group()
    trio = start(members, kafka, group, 3, session_timeout_ms=30_000, heartbeat_interval_ms=300)
    wait_until(lambda: settled(trio, 3), 30, "three members")
    generation = trio[0].last()[0]
    leaving = trio[2]
    started = time.monotonic()
    leaving.close()
    # Far sooner than the 30 s session timeout: LeaveGroup told the broker.
    wait_until(lambda: settled(trio[:2], 2), 10, "two members after a leave")
    assert time.monotonic() - started < 10
    assert trio[0].last()[0] > generation
    assert leaving.state is MemberState.CLOSED


class SlowToRejoin(Listing):
    """Holds the next rebalance open: its on_join_prepare waits while ``hold`` is set."""

    hold_s = 0.0

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        if self.hold_s:
            time.sleep(self.hold_s)
        super().on_join_prepare(generation, member_id)


def test_a_member_closing_while_its_join_waits_at_the_broker_still_leaves(
    kafka: str, members
) -> None:
    # Its JoinGroup is parked until every member rejoins; closing drops that connection and
    # sends LeaveGroup on a new one, which the failed join must not tear down: else the
    # broker counts the closed member in the next generation until its session expires.
    group = new_group()
    slow_settings: dict[str, Any] = {"session_timeout_ms": 10_000, "rebalance_timeout_ms": 20_000}
    (closing,) = start(members, kafka, group, 1, **slow_settings)
    slow = SlowToRejoin(group, bootstrap_servers=kafka, **{**FAST, **slow_settings})
    members.append(slow)
    slow.start()
    wait_until(lambda: settled([closing, slow], 2), 30, "two members")
    slow.hold_s = 3.0
    (joining,) = start(members, kafka, group, 1, **slow_settings)
    wait_until(lambda: closing.state is MemberState.PREPARING_REBALANCE, 10, "a parked join")
    time.sleep(0.5)  # its JoinGroup is at the broker
    started = time.monotonic()
    closing.close(timeout=10.0)
    slow.hold_s = 0.0
    # The slow member rejoins after 3 s; the group of two is complete then, not once the
    # closed member's 10 s session has expired.
    wait_until(lambda: settled([slow, joining], 2), 8, "the two others, without the closed one")
    assert time.monotonic() - started < 8


def joined_behind(
    slow: Listing, knob: str, kafka: str, group: str, members: list[Listing]
) -> Listing:
    """Start ``slow`` alone, set its ``knob`` to 5 s, then start a member with FAST's 3 s
    lease; return that member once both settled (``knob`` back to 0)."""
    members.append(slow)
    slow.start()
    wait_until(lambda: settled([slow], 1), 30, "the first member")
    setattr(slow, knob, 5.0)
    (newcomer,) = start(members, kafka, group, 1)
    wait_until(lambda: settled([slow, newcomer], 2), 30, "two members")
    setattr(slow, knob, 0.0)
    return newcomer


def assert_keeps_its_first_generation(member: Listing) -> None:
    """Through a few heartbeats: still stable in the generation it joined, with a lease, and
    no second rebalance (no on_join_prepare but its first join's)."""
    joined = member.last()[0]
    assert member.membership_lease() > 0
    time.sleep(3 * FAST["heartbeat_interval_ms"] / 1000 + 1)
    assert member.generation_if_stable() is not None
    assert member.generation().generation_id == joined
    with member.lock:
        assert [g for g, _ in member.prepared] == [-1]  # its first join only
        assert [c[0] for c in member.completed] == [joined]
    assert member.metrics().rebalance_total == 1


SLOW_MEMBER: dict[str, Any] = {**FAST, "session_timeout_ms": 20_000}  # outlasts its own wait


def test_a_join_that_waited_longer_than_its_lease_keeps_what_it_was_handed(
    kafka: str, members
) -> None:
    # The group waits 5 s for a slow member to rejoin; the joining member's lease is 3 s
    # (its session), so its JoinGroup's send proves nothing by the time the answer comes.
    # It proves its session with a heartbeat before SyncGroup: it keeps the generation it
    # joined, instead of leaving and joining again at its first heartbeat (a second
    # rebalance, and its assignment lost as soon as it was handed over).
    group = new_group()
    slow = SlowToRejoin(group, bootstrap_servers=kafka, **SLOW_MEMBER)
    assert_keeps_its_first_generation(joined_behind(slow, "hold_s", kafka, group, members))


class SlowToAssign(Listing):
    """A leader whose assignment takes ``assign_s``: the followers' SyncGroups wait for it."""

    assign_s = 0.0

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        time.sleep(self.assign_s)
        return super().perform_assignment(leader_id, protocol, members)


def test_a_sync_that_waited_longer_than_its_lease_keeps_what_it_was_handed(
    kafka: str, members
) -> None:
    # The leader takes 5 s to assign; the follower's SyncGroup waits that long, past its 3 s
    # lease. It proves its session with a heartbeat and its SyncGroup again before taking
    # the assignment, instead of leaving and joining again at its first heartbeat.
    group = new_group()
    leader = SlowToAssign(group, bootstrap_servers=kafka, **SLOW_MEMBER)
    assert_keeps_its_first_generation(joined_behind(leader, "assign_s", kafka, group, members))


def two_members_and_a_process(
    kafka: str, members: list[Listing], processes: list[EventProcess]
) -> tuple[list[Listing], EventProcess]:
    """A stable group of three: two members here and one in a process of its own."""
    group = new_group()
    pair = start(members, kafka, group, 2)
    other = member_process(kafka, group)
    processes.append(other)
    wait_until(lambda: settled(pair, 3) and bool(other.joined()), 30, "three members")
    return pair, other


def test_a_killed_member_is_evicted_after_the_session_timeout(
    kafka: str, members, processes
) -> None:
    pair, victim = two_members_and_a_process(kafka, members, processes)
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_until(lambda: settled(pair, 2), 20, "the survivors to rebalance")
    waited = time.monotonic() - killed
    session = FAST["session_timeout_ms"] / 1000
    # Not before the session ran out (no LeaveGroup was sent), and not much later.
    assert session * 0.8 <= waited <= session + 8


def test_a_frozen_member_learns_it_lost_its_generation_and_rejoins(
    kafka: str, members, processes
) -> None:
    pair, frozen = two_members_and_a_process(kafka, members, processes)
    old = frozen.joined()[-1]
    frozen.signal(signal.SIGSTOP)
    wait_until(lambda: settled(pair, 2), 20, "the others to evict the frozen member")
    evicted_in = pair[0].last()[0]
    frozen.signal(signal.SIGCONT)
    wait_until(
        lambda: (
            settled(pair, 3)
            and len(frozen.joined()) > 1
            and frozen.joined()[-1]["generation"] == pair[0].last()[0]
        ),
        30,
        "the frozen member to come back",
    )
    # Before rejoining it was told its old generation was gone (-1), not asked to hand it over.
    prepares = [e for e in frozen.events if e["event"] == "prepare"]
    assert prepares[-1]["generation"] == -1
    rejoined = frozen.joined()[-1]
    assert rejoined["generation"] > evicted_in > old["generation"]
    assert rejoined["member_id"] != old["member_id"]  # UNKNOWN_MEMBER_ID dropped the old id


def test_a_static_member_restarting_within_its_session_causes_no_rebalance(
    kafka: str, members, processes
) -> None:
    group = new_group()
    pair = start(members, kafka, group, 2, session_timeout_ms=20_000)
    # The restart must come within the static member's session: a new Python process takes
    # seconds to start on a loaded machine, more than the 3 s sessions of the other tests.
    static = member_process(kafka, group, instance_id="static-1", session_timeout_ms=20_000)
    processes.append(static)
    wait_until(lambda: settled(pair, 3) and bool(static.joined()), 30, "three members")
    generation = pair[0].last()[0]
    completed_before = [len(m.completed) for m in pair]
    static.close()  # a static member does not send LeaveGroup
    again = member_process(kafka, group, instance_id="static-1", session_timeout_ms=20_000)
    processes.append(again)
    wait_until(lambda: bool(again.joined()), 30, "the static member to come back")
    time.sleep(2)  # several heartbeats: a rebalance would show by now
    assert again.joined()[-1]["generation"] == generation
    assert [len(m.completed) for m in pair] == completed_before
    assert all(m.generation().generation_id == generation for m in pair)


def test_a_static_member_sharing_an_instance_id_is_fenced(kafka: str, members) -> None:
    group = new_group()
    (first,) = start(members, kafka, group, 1, group_instance_id="dup")
    first.ensure_active_group(timeout=30)
    (second,) = start(members, kafka, group, 1, group_instance_id="dup")
    second.ensure_active_group(timeout=30)
    # The newcomer took the instance id over; the first learns it was fenced, and stops.
    wait_until(lambda: first.state is MemberState.CLOSED, 15, "the first to be fenced")
    with pytest.raises(errors.FencedInstanceError, match="its own id"):
        first.ensure_active_group(timeout=1)


def test_protocol_upgrade_by_rolling_restart(kafka: str, members) -> None:
    group = new_group()
    upgraded = start(members, kafka, group, 1, protocols=("v2", "v1"))
    old = start(members, kafka, group, 2, protocols=("v1",))
    wait_until(lambda: settled(upgraded + old, 3), 30, "a mixed group")
    assert {m.last()[2] for m in upgraded + old} == {"v1"}  # the only common protocol
    for i, m in enumerate(old):
        m.close()
        upgraded += start(members, kafka, group, 1, protocols=("v2", "v1"))
        current = upgraded + old[i + 1 :]

        def restarted(c: list[Listing] = current) -> bool:
            return settled(c, 3)

        wait_until(restarted, 30, f"the group after restart {i + 1}")
    assert {m.last()[2] for m in upgraded} == {"v2"}


def test_a_member_of_another_protocol_type_is_refused(kafka: str, members) -> None:
    group = new_group()
    (member,) = start(members, kafka, group, 1)
    member.ensure_active_group(timeout=30)
    (stranger,) = start(members, kafka, group, 1, protocol_type="something-else")
    with pytest.raises(errors.InconsistentGroupProtocolError) as raised:
        stranger.ensure_active_group(timeout=30)
    assert raised.value.group_id == group
    assert "same protocol_type" in str(raised.value)
    assert member.state is MemberState.STABLE


def test_a_session_timeout_the_broker_refuses_is_a_clear_error(kafka: str, members) -> None:
    (member,) = start(
        members, kafka, new_group(), 1, session_timeout_ms=10_000_000, heartbeat_interval_ms=1000
    )
    with pytest.raises(
        errors.InvalidSessionTimeoutError, match=r"group\.max\.session\.timeout\.ms"
    ):
        member.ensure_active_group(timeout=30)


# Run in a fresh process: kafka-python builds each message version's codec once per process,
# and the tests before this one have built them all in the test process.
FIRST_USE = """
import builtins, logging, sys, threading
from coordination import OffsetAndMetadata
from tests.integration.members import Listing, new_group, wait_until

built = threading.Event()

class Built(logging.Handler):
    def emit(self, record):
        if "codecs of" in record.getMessage():
            built.set()

transport_log = logging.getLogger("coordination.transport")
transport_log.setLevel(logging.DEBUG)
transport_log.addHandler(Built())
member = Listing(new_group(), bootstrap_servers=sys.argv[1])
member.start()
wait_until(built.is_set, 30, "the codecs built after the first join")
compiled = []
real_compile = builtins.compile

def recording_compile(*args, **kwargs):
    if threading.current_thread() is threading.main_thread():
        compiled.append(args[1])
    return real_compile(*args, **kwargs)

builtins.compile = recording_compile
where = ("__consumer_offsets", 0)
member.commit_offsets({where: OffsetAndMetadata(1, "first commit")})
assert member.committed_offsets([where])[where].offset == 1
member.close()
print("compiled on first use:", compiled)
"""


def test_a_members_first_commit_and_its_leave_build_no_codec(kafka: str) -> None:
    """A leader's first OffsetCommit and a closing member's LeaveGroup happen in the middle of
    a handoff; the codecs they need are built after the first join, not then."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE, kafka],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compiled on first use: []", done.stdout


def test_metrics_count_what_happened(kafka: str, members) -> None:
    group = new_group()
    (first,) = start(members, kafka, group, 1)
    first.ensure_active_group(timeout=30)
    start(members, kafka, group, 1)
    wait_until(lambda: first.metrics().rebalance_total >= 2, 20, "a second rebalance")
    metrics = first.metrics()
    assert metrics.last_rebalance_latency_s is not None and metrics.last_rebalance_latency_s < 10
    assert "group is already rebalancing" in metrics.rejoin_reasons
    wait_until(lambda: (first.metrics().last_heartbeat_age_s or 99) < 1, 5, "a heartbeat")


def test_heartbeats_do_not_log_a_line_each(kafka: str, members, caplog) -> None:
    # A service logging at INFO must not get a line per heartbeat from the network layer
    # (kafka-python logs the coordinator each time one is registered with it).
    caplog.set_level(logging.INFO)
    group = new_group()
    (member,) = start(members, kafka, group, 1, **FAST)
    member.ensure_active_group(timeout=30)
    time.sleep(1)  # the wake-up channel's connections are set up

    def registrations() -> list[str]:
        return [m for r in caplog.records if (m := r.getMessage()).startswith("Coordinator for")]

    before, heartbeats = registrations(), member.metrics().heartbeat_total
    wait_until(lambda: member.metrics().heartbeat_total >= heartbeats + 6, 10, "six heartbeats")
    assert registrations() == before
