"""The share workload's checker on crafted histories: each violation kind is reported, a
clean history reports none. No broker: the checker is pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devtools.campaign import ShareHistory, check_share, load_share
from devtools.campaign._checker import Event
from devtools.campaign._share_checker import ShareReport, deliveries

TOPIC = "stream"
LIMIT = 3


def ev(event: str, t: float, **fields: Any) -> Event:
    return {"event": event, "t": t, **fields}


def acquired(t: float, offset: int, count: int = 1, polled_at: float | None = None) -> Event:
    return ev(
        "acquired",
        t,
        topic=TOPIC,
        partition=0,
        offset=offset,
        delivery_count=count,
        value=f"v{offset}",
        polled_at=t - 0.05 if polled_at is None else polled_at,
    )


def asking(t: float, offset: int, kind: str, count: int = 1) -> Event:
    return ev(
        "acknowledging",
        t,
        topic=TOPIC,
        partition=0,
        offset=offset,
        delivery_count=count,
        kind=kind,
    )


def answered(t: float, offset: int, kind: str, error: str | None = None) -> Event:
    if error is None:
        return ev("acknowledged", t, topic=TOPIC, partition=0, acks=[[offset, kind]])
    return ev("ack_failed", t, topic=TOPIC, partition=0, acks=[[offset, kind]], error=error)


def produced(*offsets: int) -> list[Event]:
    return [ev("acked", 0.5, topic=TOPIC, partition=0, offset=o, value=f"v{o}") for o in offsets]


def clean() -> ShareHistory:
    """Offset 0 accepted; 1 released, then accepted elsewhere; 2 rejected; 3 held by a
    consumer killed (lock ran out), then accepted; 4 expired at each delivery up to the
    limit (archived); 5 accepted by a consumer killed before the answer (unknown); 6's
    acknowledgement came too late, then it was accepted. The broker sees no lag."""
    h = ShareHistory(delivery_limit=LIMIT, produced=produced(0, 1, 2, 3, 4, 5, 6))
    h.consumers = {
        "share-1#1": [
            acquired(1.0, 0),
            acquired(1.0, 1),
            acquired(1.0, 2),
            asking(1.1, 0, "ACCEPT"),
            asking(1.1, 1, "RELEASE"),
            asking(1.1, 2, "REJECT"),
            answered(1.2, 0, "ACCEPT"),
            answered(1.2, 1, "RELEASE"),
            answered(1.2, 2, "REJECT"),
            acquired(1.5, 3),
            acquired(1.5, 4),
            # killed here, holding 3 and 4
        ],
        "share-2#1": [
            acquired(1.3, 1, count=2),
            asking(1.35, 1, "ACCEPT", count=2),
            answered(1.4, 1, "ACCEPT"),
            acquired(4.0, 3, count=2),
            acquired(4.0, 4, count=2),
            asking(4.1, 3, "ACCEPT", count=2),
            answered(4.2, 3, "ACCEPT"),
            acquired(9.0, 4, count=3),
            acquired(9.0, 6),
            # frozen past the locks
            asking(20.0, 6, "ACCEPT"),
            answered(20.1, 6, "ACCEPT", error="AcquisitionLockExpiredError"),
        ],
        "share-3#1": [
            acquired(5.0, 5),
            asking(5.1, 5, "ACCEPT"),
            # killed before the answer
            acquired(21.0, 6, count=2),
            asking(21.1, 6, "ACCEPT", count=2),
            answered(21.2, 6, "ACCEPT"),
        ],
    }
    h.final_state = {f"{TOPIC}-0": {"start_offset": 7, "lag": 0}}
    return h


def test_a_clean_history_has_no_violation() -> None:
    report = check_share(clean())
    assert report.violations == [], report.summary()
    work = report.counts_of_work
    assert (work["accepted"], work["rejected"], work["released"], work["archived"]) == (4, 1, 1, 1)
    assert (work["ack_failed"], work["ack_unknown"], work["max_delivery_count"]) == (1, 1, 3)
    assert report.figures()["lost"] == 0


def kinds(report: ShareReport) -> list[str]:
    return [v.kind for v in report.violations]


def test_a_record_accepted_twice() -> None:
    h = clean()
    # share-3 also accepted offset 0, long after share-1 (no lock overlap).
    h.consumers["share-3#1"] += [
        acquired(30.0, 0, count=2, polled_at=1.1),
        asking(30.1, 0, "ACCEPT", count=2),
        answered(30.2, 0, "ACCEPT"),
    ]
    assert kinds(check_share(h)) == ["accepted_twice"]


def test_a_stale_acknowledgement_confirmed_after_a_long_poll_is_counted_not_accused() -> None:
    h = clean()
    h.lock_s = 2.0
    # share-3 got delivery 1 of offset 7 in a poll of 9 s (frozen): the broker may have
    # acquired it 9 s before it saw it; share-2 accepted delivery 2 meanwhile.
    h.produced += produced(7)
    h.consumers["share-2#1"] += [
        acquired(3.5, 7, count=2),
        asking(3.55, 7, "ACCEPT", count=2),
        answered(3.6, 7, "ACCEPT"),
    ]
    h.consumers["share-3#1"] += [
        acquired(10.0, 7, polled_at=1.0),
        asking(10.1, 7, "ACCEPT"),
        answered(10.2, 7, "ACCEPT"),
    ]
    report = check_share(h)
    assert report.violations == [] and report.counts_of_work["stale_acks_confirmed"] == 1
    h.lock_s = 10.0  # a poll shorter than the lock excuses nothing
    assert kinds(check_share(h)) == ["accepted_twice"]


def test_a_stale_acknowledgement_confirmed_after_a_long_wait_is_counted_not_accused() -> None:
    h = clean()
    h.lock_s = 2.0
    h.produced += produced(7)
    h.consumers["share-2#1"] += [
        acquired(3.5, 7, count=2),
        asking(3.55, 7, "ACCEPT", count=2),
        answered(3.6, 7, "ACCEPT"),
    ]
    # share-3 got delivery 1 in a short poll, but its ACCEPT's answer took 6 s (frozen with
    # the request out): the broker may have taken it after the lock ran out.
    h.consumers["share-3#1"] += [
        acquired(3.0, 7, polled_at=2.9),
        asking(3.1, 7, "ACCEPT"),
        answered(9.1, 7, "ACCEPT"),
    ]
    report = check_share(h)
    assert report.violations == [] and report.counts_of_work["stale_acks_confirmed"] == 1
    h.consumers["share-3#1"][-1] = answered(4.1, 7, "ACCEPT")  # within the lock
    assert kinds(check_share(h)) == ["accepted_twice"]


def test_a_record_held_by_two_consumers_at_once() -> None:
    h = clean()
    # share-3 got offset 1 by 1.05, while share-1 held it until it asked to release it at
    # 1.1 (confirmed: it still held it then); share-3's release was confirmed too.
    h.consumers["share-3#1"] += [
        acquired(1.05, 1, count=2, polled_at=1.0),
        asking(1.3, 1, "RELEASE", count=2),
        answered(1.32, 1, "RELEASE"),
    ]
    found = kinds(check_share(h))
    assert "held_twice" in found
    assert "count_repeated" in found  # share-2 had delivery 2 too


def test_a_record_delivered_after_it_was_accepted() -> None:
    h = clean()
    h.consumers["share-3#1"] += [acquired(30.0, 0, count=2, polled_at=29.9)]
    assert kinds(check_share(h)) == ["delivered_after_done"]


def test_a_delivery_count_above_the_limit() -> None:
    h = clean()
    h.consumers["share-3#1"] += [acquired(30.0, 4, count=LIMIT + 1, polled_at=29.9)]
    assert kinds(check_share(h)) == ["over_limit"]


def test_a_delivery_count_seen_twice() -> None:
    h = clean()
    h.consumers["share-1#1"][-1] = acquired(1.5, 4, count=2)  # share-2 got count 2 too
    assert kinds(check_share(h)) == ["count_repeated"]


def test_a_count_seen_again_after_a_broker_was_killed_is_excused() -> None:
    h = clean()
    h.consumers["share-1#1"][-1] = acquired(1.5, 4, count=2)
    h.faults = [{"event": "fault", "kind": "broker_kill", "start": 2.0, "end": 3.0}]
    report = check_share(h)
    assert report.violations == []
    assert report.counts_of_work["counts_reset_by_failover"] == 1
    h.faults[0]["kind"] = "network_cut"  # leaders stay
    assert kinds(check_share(h)) == ["count_repeated"]


def test_a_record_done_again_after_the_broker_forgot_it_across_a_failover_is_counted() -> None:
    h = clean()
    # Offset 0, accepted by share-1 at delivery 1 (confirmed at 1.2), delivered anew as
    # delivery 1 at 30.0 and accepted again: the broker forgot the first delivery.
    h.consumers["share-3#1"] += [
        acquired(30.0, 0, count=1, polled_at=29.9),
        asking(30.1, 0, "ACCEPT", count=1),
        answered(30.2, 0, "ACCEPT"),
    ]
    assert kinds(check_share(h)) == ["accepted_twice", "delivered_after_done", "count_repeated"]
    # A failover after the first ACCEPT was confirmed: it was stored by then; not spared.
    h.faults = [{"event": "fault", "kind": "coordinator_kill", "start": 10.0, "end": 12.0}]
    assert kinds(check_share(h)) == ["accepted_twice", "delivered_after_done"]
    # The first ACCEPT in flight (asked 1.1, confirmed 1.2) while a broker was down: its state
    # write waited for a new share coordinator, and may have landed out of order.
    h.faults = [{"event": "fault", "kind": "coordinator_kill", "start": 1.15, "end": 3.0}]
    report = check_share(h)
    assert report.violations == []
    assert report.counts_of_work["done_again_after_state_reset"] == 2
    # A higher count: the broker remembered a delivery, so it is a violation all the same.
    h.consumers["share-3#1"][-3:] = [
        acquired(30.0, 0, count=2, polled_at=29.9),
        asking(30.1, 0, "ACCEPT", count=2),
        answered(30.2, 0, "ACCEPT"),
    ]
    assert kinds(check_share(h)) == ["accepted_twice", "delivered_after_done"]
    # And it is not spared by a still later delivery the broker forgot in its turn.
    h.consumers["share-2#1"] += [
        acquired(40.0, 0, count=2, polled_at=39.9),
        asking(40.1, 0, "ACCEPT", count=2),
        answered(40.2, 0, "ACCEPT"),
    ]
    h.faults.append({"event": "fault", "kind": "coordinator_kill", "start": 30.15, "end": 31.0})
    twice = [v for v in check_share(h).violations if v.kind == "accepted_twice"]
    assert len(twice) == 1 and "share-3#1" in twice[0].detail


def test_a_delivery_count_that_went_down() -> None:
    h = clean()
    # share-2's delivery 3 of offset 4 surely came before its delivery 2 (polls don't meet).
    share_2 = h.consumers["share-2#1"]
    share_2[share_2.index(acquired(9.0, 4, count=3))] = acquired(3.0, 4, count=3)
    assert kinds(check_share(h)) == ["count_decreased"]


def test_a_record_lost() -> None:
    h = clean()
    h.produced += produced(7)  # never delivered
    h.consumers["share-3#1"][-1] = answered(21.2, 6, "ACCEPT", error="AcquisitionLockExpiredError")
    report = check_share(h)
    assert kinds(report) == ["lost", "lost"]
    assert "@6" in report.lost[0].detail and "@7" in report.lost[1].detail


def test_deliveries_nobody_reported_may_reach_the_limit() -> None:
    h = clean()
    h.produced += produced(7)
    # Released at delivery 1; delivery 2 (limit 3) held by share-3, killed at 22.0: its
    # last ShareFetch may have acquired it again (delivery 3) with nobody left to say so.
    h.consumers["share-3#1"] += [
        acquired(21.5, 7, count=2),
        asking(21.6, 7, "RELEASE", count=2),
    ]
    h.consumers["share-1#1"][-1:] = [
        acquired(1.5, 4),
        acquired(1.5, 7),
        asking(1.6, 7, "RELEASE"),
        answered(1.7, 7, "RELEASE"),
    ]
    assert kinds(check_share(h)) == ["lost"]
    h.kills = [22.0]
    report = check_share(h)
    assert report.violations == [] and report.counts_of_work["settled_unseen"] == 1
    h.kills = [21.0]  # before the delivery on record: no chance left after it
    assert kinds(check_share(h)) == ["lost"]


def unseen(t: float, polled_at: float, *records: tuple[int, int], reason: str) -> Event:
    """A consumer's report of records (offset, delivery count) it never handed out."""
    records_ = [list(r) for r in records]
    return ev(
        "unseen", t, topic=TOPIC, partition=0, records=records_, reason=reason, polled_at=polled_at
    )


def test_a_delivery_a_consumer_spent_unseen_counts_for_its_record_alone() -> None:
    h = clean()
    h.produced += produced(7)
    # Released at deliveries 1 and 2 (limit 3), confirmed; then the consumer's last round,
    # fetched ahead, acquired delivery 3 and its close released it unseen.
    h.consumers["share-1#1"][-1:] = [
        acquired(1.5, 4),
        acquired(1.5, 7),
        asking(1.6, 7, "RELEASE"),
        answered(1.7, 7, "RELEASE"),
    ]
    before = list(h.consumers["share-3#1"])

    def ending(*events: Event) -> None:
        h.consumers["share-3#1"] = [
            *before,
            acquired(21.5, 7, count=2),
            asking(21.6, 7, "RELEASE", count=2),
            answered(21.7, 7, "RELEASE"),
            *events,
            ev("closed", 22.0),
        ]

    h.lock_s = 0.4  # (a lock that ran out from 21.4 by 21.9)
    ending()
    assert kinds(check_share(h)) == ["lost"]
    for reason in ("closed", "lock_expired"):
        ending(unseen(21.9, 21.4, (7, 3), reason=reason))
        report = check_share(h)
        assert report.violations == [], report.summary()
        assert report.counts_of_work["archived"] == 2  # 4 and 7
    # Another record's unseen delivery says nothing of this one's; nor one short of the limit.
    ending(unseen(21.9, 21.4, (8, 3), reason="closed"))
    assert kinds(check_share(h)) == ["lost"]
    ending(unseen(21.9, 21.4, (7, 2), reason="closed"))
    assert kinds(check_share(h)) == ["count_repeated", "lost"]


def test_a_delivery_spent_unseen_is_checked_like_the_others() -> None:
    h = clean()
    h.lock_s = 1.0
    # Offset 0 was accepted (confirmed at 1.2 by share-1); delivered again later, unseen.
    h.consumers["share-2#1"].append(unseen(30.0, 29.0, (0, 2), reason="lock_expired"))
    report = check_share(h)
    assert kinds(report) == ["delivered_after_done"]
    assert "unseen, lock_expired" in report.delivered_after_done[0].detail


def test_a_record_reported_expired_before_its_lock_could_have_run_out() -> None:
    h = clean()
    h.lock_s = 2.0
    h.produced += produced(7)
    # Dropped 1.5 s after its fetch was sent, "its lock having run out", at the limit's
    # count: it would settle the record, which no consumer ever saw.
    h.consumers["share-3#1"].append(unseen(21.5, 20.0, (7, LIMIT), reason="lock_expired"))
    assert kinds(check_share(h)) == ["expired_too_soon"]
    h.lock_s = 1.5
    assert check_share(h).violations == []


def test_an_acknowledgement_belongs_to_the_delivery_handed_out_not_to_one_unseen() -> None:
    h = clean()
    h.lock_s = 1.0
    h.produced += produced(7)
    # share-1 holds delivery 1 of 7; its lock runs out, the round fetched ahead acquires
    # delivery 2 and lets it run out unseen; then share-1 acknowledges its delivery 1.
    h.consumers["share-1#1"] += [
        acquired(2.0, 7),
        unseen(4.5, 3.0, (7, 2), reason="lock_expired"),
        asking(4.6, 7, "ACCEPT"),
        answered(4.7, 7, "ACCEPT", error="AcquisitionLockExpiredError"),
    ]
    seven = deliveries(h)[(TOPIC, 0, 7)]
    assert [(d.delivery_count, d.kind, d.outcome, d.unseen) for d in seven] == [
        (1, "ACCEPT", "failed", ""),
        (2, "", "", "lock_expired"),
    ]


def test_an_uncertain_answer_may_have_taken_effect() -> None:
    h = clean()
    h.consumers["share-3#1"][-1] = answered(
        21.2, 6, "ACCEPT", error="AcknowledgementUncertainError"
    )
    assert check_share(h).violations == []


def test_lag_left_at_the_end() -> None:
    h = clean()
    h.final_state = {f"{TOPIC}-0": {"start_offset": 5, "lag": 2}}
    assert kinds(check_share(h)) == ["undone"]


def test_lag_at_the_end_from_a_start_offset_gone_back_is_the_brokers_copy() -> None:
    h = clean()
    h.final_state = {f"{TOPIC}-0": {"start_offset": 2, "lag": 6}}
    # When the records first settled the broker said: start offset 7, nothing to do.
    h.settled_state = {f"{TOPIC}-0": {"start_offset": 7, "lag": 0}}
    assert kinds(check_share(h)) == ["undone"]  # no broker was killed: no failover
    h.faults = [{"kind": "coordinator_kill", "start": 10.0, "end": 11.0}]
    report = check_share(h)
    assert report.violations == [] and report.counts_of_work["state_went_back"] == 1
    # Not gone back (no lower than then), or then with lag of its own: undone.
    for settled in ({"start_offset": 2, "lag": 0}, {"start_offset": 7, "lag": 1}):
        h.settled_state = {f"{TOPIC}-0": settled}
        assert kinds(check_share(h)) == ["undone"]
    h.settled_state = None
    assert kinds(check_share(h)) == ["undone"]


def test_the_loader_reads_a_run_directory(tmp_path: Path) -> None:
    h = clean()
    (tmp_path / "meta.json").write_text(json.dumps({"epoch_offset": 0.0, "workload": "share"}))
    lines = [
        {
            "event": "share_config",
            "t": 0.0,
            "delivery_limit": LIMIT,
            "share.record.lock.duration.ms": "2000",
        },
        {"event": "fault", "t": 2.0, "kind": "member_kill", "start": 1.6, "end": 2.0},
        {"event": "share_state_settled", "t": 25.0, "partitions": {"x-0": {"lag": 0}}},
        {"event": "share_state", "t": 30.0, "partitions": h.final_state},
    ]
    (tmp_path / "campaign.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    for directory, files in (
        ("share", {f"{p.replace('#', '.')}.jsonl": es for p, es in h.consumers.items()}),
        ("producer", {"producer.1.jsonl": h.produced}),
    ):
        (tmp_path / directory).mkdir()
        for name, events in files.items():
            text = "".join(json.dumps(e) + "\n" for e in events)
            (tmp_path / directory / name).write_text(text + '{"event": "acq')  # cut by a kill
    loaded = load_share(tmp_path)
    assert loaded.consumers == h.consumers
    assert loaded.produced == h.produced
    assert (loaded.delivery_limit, loaded.lock_s, loaded.final_state, len(loaded.faults)) == (
        LIMIT,
        2.0,
        h.final_state,
        1,
    )
    assert loaded.settled_state == {"x-0": {"lag": 0}}
    assert check_share(loaded).violations == []
