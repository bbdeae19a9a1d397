"""The campaign's checker on crafted histories: each violation kind is reported, a clean
history reports none. No broker: the checker is pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devtools.campaign import History, check, load
from devtools.campaign._checker import Event

TOPIC = "stream"


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
    h.consumers = {
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
    assert report.unowned[f"partition {TOPIC}-0"] == 1.0  # revoked at 3.0, assigned at 4.0


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
    h.consumers["rdkafka-1#1"] = [assigned(2.0, 2, 0), records(2.5, 0, 5, 6), revoked(3.5, 2, 0)]
    report = check(h)
    assert len(report.partitions_twice) == 1


def test_a_static_successor_in_the_same_generation_after_a_kill_is_fine() -> None:
    h = clean()
    # java-1#1 was killed at 5.0 holding the partition in generation 3; its successor with
    # the same instance id got the same assignment, in the same generation, at 6.0.
    h.exits["java-1#1"] = 5.0
    h.consumers["java-1#2"] = [assigned(6.0, 3, 0), records(6.5, 0, 10, 10)]
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
    h.consumers["ours-1#1"].insert(3, records(1.8, 0, 3, 4))
    report = check(h)
    assert len(report.duplicates) == 2
    assert "same ownership" in report.duplicates[0].detail


def test_duplicate_after_a_commit_beyond_it() -> None:
    h = clean()
    # java-1 began at 4.0 although offset 5 had been committed at 1.6: records 0..4 again.
    h.consumers["java-1#1"].insert(1, records(4.2, 0, 2, 4))
    report = check(h)
    assert len(report.duplicates) == 3
    assert "committed before" in report.duplicates[0].detail


def test_commit_moving_backwards() -> None:
    h = clean()
    h.consumers["java-1#1"] += [records(5.0, 0, 10, 10), committed(5.1, 0, 4)]
    report = check(h)
    assert len(report.commits_backwards) == 1
    assert "committed 4" in report.commits_backwards[0].detail


def test_concurrent_commits_are_not_ordered() -> None:
    h = clean()
    # A commit acknowledged at 1.7 was sent before 1.6's was acknowledged (its records event
    # came at 1.55): the broker may have taken them in either order.
    h.consumers["rdkafka-1#1"] = [records(1.55, 1, 0, 0), committed(1.7, 0, 3)]
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
    assert h.consumers["ours-1#1"] == [{"event": "assigned", "partitions": [[TOPIC, 0]], "t": 2.0}]


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
    h.consumers["java-1#1"] = [
        assigned(4.0, 22, 0),
        assigned(4.5, 24),
        records(10.5, 0, 10, 12),
        ev("lost", 10.6, partitions=[[TOPIC, 0]], generation=24),
    ]
    h.consumers["ours-2#1"] = [
        assigned(5.0, 24, 1),
        ev("lost", 6.0, partitions=[[TOPIC, 1]], generation=-1),
        ev("assigned", 9.0, partitions=[[TOPIC, 0]], generation=-1),
        ev("lost", 9.2, partitions=[[TOPIC, 0]], generation=-1),
    ]
    assert check(h).partitions_twice == []
    # Had ours-2 not lost its membership in between, generation 24 could not be ruled out.
    h.consumers["ours-2#1"].pop(1)
    assert len(check(h).partitions_twice) == 1


def test_a_restarted_member_assigned_and_lost_at_once_without_acting_is_fine() -> None:
    # A new process's first assignment reports generation -1 (its membership was reset before
    # the callback ran) and is lost in the same instant: it never owned the partition for any
    # time, so it overlaps nobody. Had it been handed records meanwhile, it would.
    h = clean()
    h.consumers["ours-1#3"] = [
        ev("assigned", 5.0, partitions=[[TOPIC, 0]], generation=-1),
        ev("lost", 5.0, partitions=[[TOPIC, 0]], generation=-1),
    ]
    assert check(h).partitions_twice == []
    h.consumers["ours-1#3"].insert(1, records(5.2, 0, 10, 10))
    h.consumers["ours-1#3"][2] = ev("lost", 5.5, partitions=[[TOPIC, 0]], generation=-1)
    assert len(check(h).partitions_twice) == 1


def test_a_zombie_reading_from_an_old_committed_offset_is_at_least_once() -> None:
    # Seen in a long run (seed 1000): ours-2 read its start offset, was frozen past its
    # session, resumed, announced its (dead) generation's assignment and handed out records
    # java-1 had consumed and committed meanwhile, then learnt of its loss.
    h = clean()
    h.consumers["ours-2#1"] = [
        assigned(6.0, 2, 0),
        records(6.2, 0, 5, 9),
        ev("lost", 6.3, partitions=[[TOPIC, 0]], generation=-1),
    ]
    h.consumers["java-1#1"][0] = assigned(4.0, 3, 0)
    assert check(h).duplicates == []
