"""The campaign's checker on crafted histories: each violation kind is reported, a clean
history reports none. No broker: the checker is pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devtools.campaign import History, check, load
from devtools.campaign._checker import Event

TOPIC = "stream"
CLASSIC = "consumers"
KIP848 = "consumers848"


def ev(event: str, t: float, **fields: Any) -> Event:
    return {"event": event, "t": t, **fields}


def unit(t: float, task: str) -> Event:
    """A unit of work on ``task``, its ownership checked at ``t``."""
    return ev("tick", t, task=task, checked_at=t)


def wrote(token: int, seq: int, checked: float, acked: float) -> Event:
    return ev("wrote", acked, token=token, seq=seq, checked_at=checked, acked=acked)


def assigned(t: float, generation: int, *partitions: int) -> Event:
    return ev("assigned", t, partitions=[[TOPIC, p] for p in partitions], generation=generation)


def revoked(t: float, generation: int, *partitions: int) -> Event:
    return ev("revoked", t, partitions=[[TOPIC, p] for p in partitions], generation=generation)


def records(t: float, partition: int, first: int, last: int) -> Event:
    return ev("records", t, partitions=[[TOPIC, partition, first, last, last - first + 1]])


def committed(t: float, partition: int, offset: int) -> Event:
    return ev("committed", t, offsets=[[TOPIC, partition, offset]])


def acked(t: float, partition: int, offset: int) -> Event:
    return ev("acked", t, topic=TOPIC, partition=partition, offset=offset, value=f"v{offset}")


def clean() -> History:
    """Two leaderships in turn, a task handed over, a partition handed over with commits."""
    h = History()
    h.election = {
        "leader-1#1": [
            ev("elected", 1.0, token=5),
            wrote(5, 0, 1.1, 1.2),
            wrote(5, 1, 1.9, 2.0),
            ev("deposed", 2.5, token=5),
        ],
        "leader-2#1": [ev("elected", 9.0, token=6), wrote(6, 0, 9.1, 9.2)],
    }
    h.election_log = [
        {"event": "record", "offset": 0, "token": 5, "identity": "leader-1#1", "seq": 0},
        {"event": "record", "offset": 3, "token": 5, "identity": "leader-1#1", "seq": 1},
        {"event": "record", "offset": 6, "token": 6, "identity": "leader-2#1", "seq": 0},
    ]
    h.tasks = {
        "worker-1#1": [
            ev("up", 0.5, tasks=["task-00"]),
            ev("started", 1.0, task="task-00"),
            unit(1.5, "task-00"),
            unit(2.0, "task-00"),
            ev("stopped", 2.2, task="task-00"),
        ],
        "worker-2#1": [ev("started", 2.5, task="task-00"), unit(3.0, "task-00")],
    }
    h.consumer_groups[CLASSIC] = {
        "ours-1#1": [
            assigned(1.0, 1, 0),
            records(1.5, 0, 0, 4),
            committed(1.6, 0, 5),
            records(2.0, 0, 5, 6),  # not committed: the next owner reads them again
            revoked(3.0, 2, 0),
        ],
        "java-1#1": [
            assigned(4.0, 3, 0),
            records(4.5, 0, 5, 9),
            committed(4.6, 0, 10),
        ],
    }
    h.produced = [acked(0.9 + o / 100, 0, o) for o in range(10)]
    h.stream_log = {(TOPIC, 0, o): f"v{o}" for o in range(10)}
    h.faults = [{"event": "fault", "kind": "member_kill", "start": 2.4, "end": 2.6}]
    h.last_fault_at = 2.6
    h.stopping_at = 10.0
    return h


def test_a_clean_history_reports_nothing() -> None:
    report = check(clean())
    assert report.violations == []
    assert report.figures()["faults"] == 1
    # worker-2 started the task at 2.5, before the last fault ended.
    assert report.unowned["task task-00"] == 0.0
    # No leader from 2.6 (leader-1 deposed at 2.5) until 9.0.
    assert abs(report.unowned["leadership"] - 6.4) < 1e-9
    # Revoked at 3.0, assigned at 4.0.
    assert report.unowned[f"partition {TOPIC}-0 in {CLASSIC}"] == 1.0


def test_overlapping_leaderships() -> None:
    h = clean()
    # leader-1 (token 5) still passed a check at 9.5, after token 6 was elected at 9.0.
    h.election["leader-1#1"].insert(3, wrote(5, 2, 9.5, 9.6))
    report = check(h)
    assert len(report.overlaps) == 1
    assert "token 5" in report.overlaps[0].detail and "token 6" in report.overlaps[0].detail


def test_token_regression_in_the_log() -> None:
    h = clean()
    assert h.election_log is not None
    h.election_log.append(
        {"event": "record", "offset": 9, "token": 5, "identity": "leader-1#1", "seq": 7}
    )
    report = check(h)
    assert len(report.token_regressions) == 1
    assert "offset 9" in report.token_regressions[0].detail


def test_token_regression_by_acknowledgements() -> None:
    h = clean()
    # A write with token 5 began after token 6's write was acknowledged, and was accepted.
    h.election["leader-1#1"].append(wrote(5, 9, 9.3, 9.4))
    report = check(h)
    assert len(report.token_regressions) == 1


def test_task_running_twice() -> None:
    h = clean()
    # worker-1 worked on at 2.8, after worker-2 started the task at 2.5.
    h.tasks["worker-1#1"].insert(3, unit(2.8, "task-00"))
    report = check(h)
    assert len(report.tasks_twice) == 1
    assert "worker-1#1" in report.tasks_twice[0].detail


def test_a_frozen_worker_that_stops_late_but_does_nothing_is_fine() -> None:
    h = clean()
    stopped = h.tasks["worker-1#1"].pop()
    h.tasks["worker-1#1"].append({**stopped, "t": 20.0})
    assert check(h).tasks_twice == []


def test_partition_owned_twice_in_overlapping_generations() -> None:
    h = clean()
    h.consumer_groups[CLASSIC]["rdkafka-1#1"] = [
        assigned(2.0, 2, 0),
        records(2.5, 0, 5, 6),
        revoked(3.5, 2, 0),
    ]
    report = check(h)
    assert len(report.partitions_twice) == 1


def test_a_static_successor_in_the_same_generation_after_a_kill_is_fine() -> None:
    h = clean()
    # java-1#1 was killed at 5.0 holding the partition in generation 3; its successor with
    # the same instance id got the same assignment, in the same generation, at 6.0.
    h.exits["java-1#1"] = 5.0
    h.consumer_groups[CLASSIC]["java-1#2"] = [assigned(6.0, 3, 0), records(6.5, 0, 10, 10)]
    assert check(h).partitions_twice == []


def test_lost_record() -> None:
    h = clean()
    h.produced.append(acked(5.0, 0, 10))
    assert h.stream_log is not None
    h.stream_log[(TOPIC, 0, 10)] = "v10"
    report = check(h)
    assert len(report.lost) == 1
    assert "never consumed" in report.lost[0].detail


def test_record_gone_from_the_topic() -> None:
    h = clean()
    assert h.stream_log is not None
    h.stream_log[(TOPIC, 0, 3)] = "someone else's"
    report = check(h)
    assert len(report.lost) == 1
    assert "reads back as" in report.lost[0].detail


def test_duplicate_without_a_rebalance() -> None:
    h = clean()
    # ours-1 was handed offsets 3..4 again in the same ownership.
    h.consumer_groups[CLASSIC]["ours-1#1"].insert(3, records(1.8, 0, 3, 4))
    report = check(h)
    assert len(report.duplicates) == 2
    assert "same ownership" in report.duplicates[0].detail


def test_duplicate_after_a_commit_beyond_it() -> None:
    h = clean()
    # java-1 began at 4.0 although offset 5 had been committed at 1.6: records 0..4 again.
    h.consumer_groups[CLASSIC]["java-1#1"].insert(1, records(4.2, 0, 2, 4))
    report = check(h)
    assert len(report.duplicates) == 3
    assert "committed before" in report.duplicates[0].detail


def test_commit_moving_backwards() -> None:
    h = clean()
    h.consumer_groups[CLASSIC]["java-1#1"] += [records(5.0, 0, 10, 10), committed(5.1, 0, 4)]
    report = check(h)
    assert len(report.commits_backwards) == 1
    assert "committed 4" in report.commits_backwards[0].detail


def test_concurrent_commits_are_not_ordered() -> None:
    h = clean()
    # A commit acknowledged at 1.7 was sent before 1.6's was acknowledged (its records event
    # came at 1.55): the broker may have taken them in either order.
    h.consumer_groups[CLASSIC]["rdkafka-1#1"] = [records(1.55, 1, 0, 0), committed(1.7, 0, 3)]
    assert check(h).commits_backwards == []


def test_unowned_until_the_end() -> None:
    h = clean()
    h.election["leader-2#1"] = []
    report = check(h)
    assert abs(report.unowned["leadership"] - (10.0 - 2.6)) < 1e-9


def test_load_reads_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"epoch_offset": 1000.0}))
    (tmp_path / "campaign.jsonl").write_text(
        json.dumps({"event": "fault", "kind": "member_kill", "start": 1, "end": 3, "t": 3})
        + "\n"
        + json.dumps({"event": "exit", "process": "ours-1#1", "t": 4.0})
        + "\n"
        + json.dumps({"event": "stopping", "t": 9.0})
        + "\n"
    )
    (tmp_path / "consumers").mkdir()
    (tmp_path / "consumers" / "ours-1.1.jsonl").write_text(
        json.dumps({"event": "assigned", "partitions": [[TOPIC, 0]], "t": 1_002_000.0})
        + '\n{"event": "recor'  # cut short by a SIGKILL
    )
    h = load(tmp_path)
    assert h.last_fault_at == 3
    assert h.stopping_at == 9.0
    assert h.exits == {"ours-1#1": 4.0}
    assert h.consumer_groups == {
        CLASSIC: {"ours-1#1": [{"event": "assigned", "partitions": [[TOPIC, 0]], "t": 2.0}]}
    }


def test_two_members_with_one_token() -> None:
    h = clean()
    h.election["leader-3#1"] = [ev("elected", 12.0, token=6), wrote(6, 0, 12.1, 12.2)]
    h.stopping_at = 20.0
    report = check(h)
    # Not at once (no overlap), but one token for two leaderships.
    assert report.overlaps == []
    assert len(report.token_regressions) == 1
    assert "token 6" in report.token_regressions[0].detail


def test_a_leader_elected_with_a_lower_token() -> None:
    h = clean()
    h.election["leader-3#1"] = [ev("elected", 12.0, token=4), wrote(4, 0, 12.1, 12.2)]
    report = check(h)
    assert any("token 4" in v.detail for v in report.token_regressions)


def test_reelected_with_its_token_is_noted_not_counted() -> None:
    h = clean()
    h.election["leader-2#1"] += [
        ev("deposed", 9.5, token=6),
        ev("elected", 9.8, token=6),
        wrote(6, 1, 9.9, 10.0),
    ]
    report = check(h)
    assert report.violations == []
    assert report.reelected_same_token == 1


def test_a_start_recorded_late_by_a_frozen_worker_is_no_run() -> None:
    h = clean()
    # worker-3 was frozen as it began start_task; it recorded "started" on resuming, after
    # worker-2 had the task, found it no longer owned it and stopped it without working.
    h.tasks["worker-3#1"] = [
        ev("started", 2.9, task="task-00"),
        ev("stopped", 2.95, task="task-00"),
    ]
    assert check(h).tasks_twice == []


def test_a_zombie_that_consumed_after_losing_its_generation_is_not_an_owner_twice() -> None:
    # Seen in a long run (seed 1000): java-1 was frozen past its session while owning the
    # partition in generation 24; ours-1, which had lost its own generation-24 membership,
    # was assigned the partition in a later generation (its callback reported -1: its
    # membership was reset again before the callback ran) and lost it at once; java-1,
    # resumed, was handed records it had fetched before it learnt of its loss.
    h = clean()
    h.consumer_groups[CLASSIC]["java-1#1"] = [
        assigned(4.0, 22, 0),
        assigned(4.5, 24),
        records(10.5, 0, 10, 12),
        ev("lost", 10.6, partitions=[[TOPIC, 0]], generation=24),
    ]
    h.consumer_groups[CLASSIC]["ours-2#1"] = [
        assigned(5.0, 24, 1),
        ev("lost", 6.0, partitions=[[TOPIC, 1]], generation=-1),
        ev("assigned", 9.0, partitions=[[TOPIC, 0]], generation=-1),
        ev("lost", 9.2, partitions=[[TOPIC, 0]], generation=-1),
    ]
    assert check(h).partitions_twice == []
    # Had ours-2 not lost its membership in between, generation 24 could not be ruled out.
    h.consumer_groups[CLASSIC]["ours-2#1"].pop(1)
    assert len(check(h).partitions_twice) == 1


def test_a_restarted_member_assigned_and_lost_at_once_without_acting_is_fine() -> None:
    # A new process's first assignment reports generation -1 (its membership was reset before
    # the callback ran) and is lost in the same instant: it never owned the partition for any
    # time, so it overlaps nobody. Had it been handed records meanwhile, it would.
    h = clean()
    h.consumer_groups[CLASSIC]["ours-1#3"] = [
        ev("assigned", 5.0, partitions=[[TOPIC, 0]], generation=-1),
        ev("lost", 5.0, partitions=[[TOPIC, 0]], generation=-1),
    ]
    assert check(h).partitions_twice == []
    h.consumer_groups[CLASSIC]["ours-1#3"].insert(1, records(5.2, 0, 10, 10))
    h.consumer_groups[CLASSIC]["ours-1#3"][2] = ev(
        "lost", 5.5, partitions=[[TOPIC, 0]], generation=-1
    )
    assert len(check(h).partitions_twice) == 1


def test_a_zombie_reading_from_an_old_committed_offset_is_at_least_once() -> None:
    # Seen in a long run (seed 1000): ours-2 read its start offset, was frozen past its
    # session, resumed, announced its (dead) generation's assignment and handed out records
    # java-1 had consumed and committed meanwhile, then learnt of its loss.
    h = clean()
    h.consumer_groups[CLASSIC]["ours-2#1"] = [
        assigned(6.0, 2, 0),
        records(6.2, 0, 5, 9),
        ev("lost", 6.3, partitions=[[TOPIC, 0]], generation=-1),
    ]
    h.consumer_groups[CLASSIC]["java-1#1"][0] = assigned(4.0, 3, 0)
    assert check(h).duplicates == []


# -- two consumer groups: the classic one and a KIP-848 one on the same stream --------------


def kip848_group() -> dict[str, list[Event]]:
    """The stream of :func:`clean` read by a KIP-848 group: ``generation`` is each member's
    epoch, and the partition moves to a member at a higher epoch once released."""
    return {
        "ours848-1#1": [
            assigned(1.2, 3, 0),
            records(1.4, 0, 0, 6),
            committed(1.5, 0, 7),
            revoked(3.2, 3, 0),
        ],
        "java848-1#1": [assigned(3.3, 5, 0), records(3.5, 0, 7, 9), committed(3.6, 0, 10)],
    }


def two_groups() -> History:
    h = clean()
    h.consumer_groups[KIP848] = kip848_group()
    return h


def test_two_clean_groups_report_nothing_and_count_their_work_apart() -> None:
    report = check(two_groups())
    assert report.violations == []
    assert report.counts_of_work[f"{CLASSIC}_consumed"] == 12  # 5, 6 again after the revoke
    assert report.counts_of_work[f"{KIP848}_consumed"] == 10
    assert report.counts_of_work[f"{KIP848}_commits"] == 2
    assert report.counts_of_work[f"{KIP848}_ownerships"] == 2
    # Revoked at 3.2, assigned at 3.3.
    assert abs(report.unowned[f"partition {TOPIC}-0 in {KIP848}"] - 0.1) < 1e-9
    assert report.unowned[f"partition {TOPIC}-0 in {CLASSIC}"] == 1.0


def test_a_partition_owned_by_a_member_of_each_group_at_once_is_fine() -> None:
    # Same partition, same time, same generation number: in two groups, not a violation.
    h = two_groups()
    h.consumer_groups[KIP848]["ours848-1#1"][0] = assigned(1.0, 1, 0)
    h.consumer_groups[KIP848]["ours848-1#1"][-1] = revoked(3.0, 2, 0)
    assert check(h).partitions_twice == []


def test_a_double_ownership_in_the_kip848_group_is_reported_with_its_group() -> None:
    h = two_groups()
    # rdkafka848 took the partition at ours848-1's epoch while ours848-1 still owned it.
    h.consumer_groups[KIP848]["rdkafka848-1#1"] = [
        assigned(2.0, 3, 0),
        records(2.5, 0, 7, 7),
        revoked(2.9, 3, 0),
    ]
    report = check(h)
    assert len(report.partitions_twice) == 1
    detail = report.partitions_twice[0].detail
    assert detail.startswith(f"{KIP848}: ") and "rdkafka848-1#1" in detail


def test_an_overlap_between_two_other_clients_is_listed_apart_not_a_violation() -> None:
    h = two_groups()
    # librdkafka held the partition while Java's member owned it, at one epoch: no member
    # of this library took part, so it is a finding about them, listed apart.
    h.consumer_groups[KIP848]["rdkafka848-1#1"] = [
        assigned(3.5, 4, 0),
        revoked(4.3, 5, 0),
    ]
    report = check(h)
    assert report.violations == []
    assert len(report.peers_partitions_twice) == 1
    assert "rdkafka848-1#1" in report.peers_partitions_twice[0].detail
    assert report.figures()["peers_partitions_twice"] == 1
    assert "rdkafka848-1#1" in report.summary()
    # The same overlap with a member of ours in Java's place is a violation.
    h.consumer_groups[KIP848]["ours848-2#1"] = h.consumer_groups[KIP848].pop("java848-1#1")
    report = check(h)
    assert len(report.partitions_twice) == 1 and report.peers_partitions_twice == []


def reported(t: float, generation: int, *partitions: int) -> Event:
    """A KIP-848 peer's heartbeat telling the broker which partitions it owns."""
    return ev("reported", t, partitions=[[TOPIC, p] for p in partitions], generation=generation)


def test_an_overlap_a_peer_caused_by_reporting_it_owned_nothing_is_listed_apart() -> None:
    # Seen in CI (seed 1631886290): librdkafka's first heartbeat at epoch 2 said it owned
    # nothing (the topic's metadata had not come), then it took epoch 2's whole assignment;
    # the broker, told the partition was free, had handed it on to ours848-1 at epoch 3.
    def history(*reports: Event) -> History:
        h = two_groups()
        h.consumer_groups[KIP848]["rdkafka848-1#1"] = [
            *reports,
            assigned(1.1, 2, 0),
            records(1.15, 0, 0, 2),
            revoked(1.9, 3, 0),
        ]
        return h

    report = check(history(reported(1.05, 2), reported(2.0, 3, 0)))
    assert report.violations == []
    assert len(report.peers_partitions_twice) == 1
    assert (
        "rdkafka848-1#1 had told the broker at epoch 2" in report.peers_partitions_twice[0].detail
    )
    # Without that report, or with one naming the partition at that epoch, or one seen only
    # after ours848-1 took it, the overlap is ours to answer for.
    for reports in (
        (),
        (reported(1.05, 2), reported(1.12, 2, 0)),
        (reported(1.25, 2),),
        (reported(1.05, 1),),
    ):
        report = check(history(*reports))
        assert len(report.partitions_twice) == 1, reports
        assert report.peers_partitions_twice == []


def test_an_overlap_between_two_other_clients_of_the_classic_group_is_a_violation() -> None:
    # There a member of ours may have led the generation and assigned it to both.
    h = clean()
    h.consumer_groups[CLASSIC]["ours-1#1"][-1] = revoked(3.0, 2, 0)
    h.consumer_groups[CLASSIC]["rdkafka-1#1"] = [assigned(4.5, 3, 0), revoked(5.5, 3, 0)]
    report = check(h)
    assert len(report.partitions_twice) == 1 and report.peers_partitions_twice == []
    assert "rdkafka-1#1" in report.partitions_twice[0].detail


def test_a_record_one_group_never_consumed_is_lost_for_that_group_only() -> None:
    h = two_groups()
    h.consumer_groups[KIP848]["java848-1#1"][1] = records(3.5, 0, 7, 8)
    report = check(h)
    assert [v.detail.split(":")[0] for v in report.lost] == [KIP848]
    assert "@9" in report.lost[0].detail and "never consumed" in report.lost[0].detail


def test_a_record_both_groups_consumed_is_no_duplicate_but_one_group_reading_it_twice_is() -> None:
    h = two_groups()
    assert check(h).duplicates == []
    h.consumer_groups[KIP848]["java848-1#1"].insert(2, records(3.55, 0, 9, 9))
    report = check(h)
    assert len(report.duplicates) == 1
    assert report.duplicates[0].detail.startswith(f"{KIP848}: {TOPIC}-0@9")


def test_commits_are_ordered_within_a_group_only() -> None:
    h = clean()
    # The KIP-848 group commits 4 after the classic group committed 10 (at 4.6): a group's
    # committed offsets are its own.
    h.consumer_groups[KIP848] = {
        "ours848-2#1": [records(5.0, 0, 0, 3), committed(5.1, 0, 4)],
    }
    assert check(h).commits_backwards == []
    # ... but after its own 6, it goes backwards.
    h.consumer_groups[KIP848]["ours848-1#1"] = [records(4.0, 0, 0, 5), committed(4.1, 0, 6)]
    report = check(h)
    assert len(report.commits_backwards) == 1
    assert report.commits_backwards[0].detail.startswith(f"{KIP848}: ")


def test_a_static_kip848_member_back_with_its_assignment_and_epoch_is_fine() -> None:
    # ours848-1#1 closed with epoch -2 (a static leave) holding the partition at epoch 5;
    # its successor with the same instance id took over the assignment at the same epoch.
    h = two_groups()
    h.consumer_groups[KIP848]["java848-1#1"] = [assigned(3.3, 5, 1)]
    h.consumer_groups[KIP848]["ours848-1#1"] = [
        assigned(1.2, 5, 0),
        records(1.4, 0, 0, 6),
        committed(1.5, 0, 7),
        revoked(3.2, 5, 0),
    ]
    h.exits["ours848-1#1"] = 3.3
    h.consumer_groups[KIP848]["ours848-1#2"] = [assigned(4.0, 5, 0), records(4.2, 0, 7, 9)]
    assert check(h).violations == []


def test_a_fenced_kip848_zombie_is_judged_by_its_epoch() -> None:
    # ours848-1 was frozen past its session owning the partition at epoch 3; the broker
    # fenced it and gave the partition to java848-1 at epoch 5. Resumed, ours848-1 handed out
    # records it had fetched before it learnt of the loss (at-least-once; its commit fails).
    h = two_groups()
    h.consumer_groups[KIP848]["ours848-1#1"] = [
        assigned(1.2, 3, 0),
        records(1.4, 0, 0, 6),
        committed(1.5, 0, 7),
        records(3.4, 0, 7, 7),
        ev("lost", 3.45, partitions=[[TOPIC, 0]], generation=-1),
    ]
    assert check(h).violations == []
    # Had the broker handed it over at the zombie's epoch, the two owners would overlap.
    h.consumer_groups[KIP848]["java848-1#1"][0] = assigned(3.3, 3, 0)
    assert len(check(h).partitions_twice) == 1


def test_load_gives_the_checker_both_consumer_groups(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"epoch_offset": 1000.0}))
    (tmp_path / "campaign.jsonl").write_text("")
    for group, name in ((CLASSIC, "ours-1.1"), (KIP848, "java848-1.2")):
        (tmp_path / group).mkdir()
        (tmp_path / group / f"{name}.jsonl").write_text(
            json.dumps({"event": "assigned", "partitions": [[TOPIC, 0]], "t": 1_003_000.0})
        )
    h = load(tmp_path)
    assert sorted(h.consumer_groups) == [CLASSIC, KIP848]
    assert h.consumer_groups[KIP848]["java848-1#2"][0]["t"] == 3.0


def test_a_commit_answered_after_a_loss_reported_meanwhile_is_ordered_by_its_batch() -> None:
    # Seen in seed 479353584: ours848-1 reported a batch (offset 397) and committed 398; the
    # request left before it was frozen past its session, java848-1 took the partition and
    # committed 445, and on resuming ours848-1's member thread reported the loss just before
    # its polling thread read the commit's answer. The broker took 398 first (it refuses a
    # commit from a removed member), so nothing went backwards.
    h = two_groups()
    h.consumer_groups[KIP848]["ours848-2#1"] = [
        assigned(1.0, 2, 1),
        records(1.2, 1, 0, 397),
        ev("lost", 5.0, partitions=[[TOPIC, 1]], generation=-1),
        committed(5.0, 1, 398),
    ]
    h.consumer_groups[KIP848]["java848-1#1"] += [
        assigned(3.0, 4, 1),
        records(3.1, 1, 398, 444),
        committed(3.2, 1, 445),
    ]
    assert check(h).commits_backwards == []
    # Had the commit been sent after its batch was reported anew, it would have gone back.
    h.consumer_groups[KIP848]["ours848-2#1"].insert(3, records(4.9, 1, 397, 397))
    assert len(check(h).commits_backwards) == 1
