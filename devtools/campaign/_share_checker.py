"""The share workload's checker: pure functions over what the share consumers recorded.

A share group (KIP-932) promises that each record is handed to one consumer at a time,
under an acquisition lock, until it is accepted, rejected, or archived once it reached the
delivery limit. The checks (each returns the evidence of every violation it found):

* :func:`acknowledged_twice`: a record whose acknowledgement the broker confirmed as
  terminal (ACCEPT or REJECT) twice: accepted twice, or accepted and rejected; unless the
  later one came from a poll, or waited for its answer, longer than the lock
  (``stale_acks_confirmed``, counted, not a violation): its consumer may have been frozen,
  or a request or answer held up, so the lock may have run out before the broker took the
  acknowledgement, and Kafka (4.3) answers success to an acknowledgement of records another member
  settled once the share-partition's start offset passed them;
* :func:`held_twice`: two deliveries of a record held at once, both confirmed (the broker
  took an acknowledgement from each: each held the lock until then);
* :func:`delivered_after_done`: a record delivered again after a terminal acknowledgement
  of it was confirmed;

  this one and ``acknowledged_twice`` spare a delivery the broker made having forgotten
  the earlier one (:func:`forgotten`: its count no higher, a share coordinator's failover
  between them; counted as ``done_again_after_state_reset``): Kafka 4.3.1's share-group
  state can go back after such a failover, and a client cannot make a broker forget;
* :func:`over_limit`: a delivery count above the group's limit (or below 1);
* :func:`expired_too_soon`: a record a consumer reported dropped because its lock had run
  out (``unseen``, ``lock_expired``) before the lock could have: from the fetch's sending
  (``polled_at``) to the report (``t``) less than the lock's duration. Such a report
  counts as a delivery towards the limit, so a consumer dropping held records early must
  not hide behind it;
* :func:`counts_not_increasing`: two deliveries of a record with the same count, or a
  higher count acquired surely before a lower one, unless a broker was killed in between:
  a share-partition's leader writes an acquisition's count to the share-group state only
  later (with the acknowledgement or the lock's end), so a new leader may deliver a record
  again with the count it had (counted, as ``counts_reset_by_failover``, not a violation);
* :func:`lost`: an acknowledged record neither accepted, rejected nor archived (delivered
  the limit's number of times), nor with a terminal acknowledgement whose outcome is
  unknown (a consumer killed, or no answer: it may have taken effect); and a partition the
  broker still counts records to do in (lag) at the end. Deliveries nobody reported count
  towards the limit: a consumer killed while its last ShareFetch was answered, or an answer
  cut off by a fault (a broker killed, a network cut or black hole), acquired records no
  process lived to report; a record short of the limit by no more than such chances after
  its last delivery on record may have been archived (``settled_unseen``, counted). The
  lag at the end is not held against a partition whose start offset the broker reported
  higher, with no lag, when the records first settled (:func:`went_back`, counted as
  ``state_went_back``).

Times are the campaign's clock. A delivery is known only between the moment its
ShareFetch was sent (``polled_at``: fetching ahead, during an earlier poll) and the moment
its poll returned (``t``): the broker acquired the record in between. A confirmed
acknowledgement was taken while its delivery's lock was held, after it was asked
(``acknowledging`` is read before ``acknowledge()``), so a confirmed delivery was surely
held from ``t`` to its ``acknowledging``: the checks read times that way, never accusing
what might not have happened.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._checker import Event, Violation

Key = tuple[str, int, int]  # topic, partition, offset
TERMINAL = frozenset({"ACCEPT", "REJECT"})
# The ack failure whose outcome is unknown: it may have taken effect.
UNCERTAIN = "AcknowledgementUncertainError"


@dataclass
class ShareHistory:
    """What the share workload's processes recorded, keyed by process (``name#incarnation``).

    ``final_state`` is the broker's view of the group's partitions at the end (the
    ``share_partitions`` of :meth:`coordination.GroupInspector.describe`'s summary), None
    if it was not read; ``settled_state`` the same view taken once the consumers' accounts
    first settled every record, before the last records were produced.
    """

    consumers: dict[str, list[Event]] = field(default_factory=dict)
    produced: list[Event] = field(default_factory=list)
    delivery_limit: int = 5
    lock_s: float = math.inf
    final_state: dict[str, dict[str, Any]] | None = None
    settled_state: dict[str, dict[str, Any]] | None = None
    faults: list[Event] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    """When a share consumer was killed (SIGKILL)."""


@dataclass
class Delivery:
    """One delivery of a record to a process, and what became of its acknowledgement.

    ``outcome``: ``"confirmed"`` (the broker took it), ``"failed"`` (it did not),
    ``"unknown"`` (asked, never answered), ``""`` (not acknowledged).
    """

    process: str
    key: Key
    delivery_count: int
    polled_at: float
    t: float
    kind: str = ""
    asked_at: float = math.inf
    outcome: str = ""
    answered_at: float = math.inf
    unseen: str = ""
    """Why the application never saw it, if so: ``"lock_expired"`` or ``"closed"`` (the
    consumer reported it acquired and never handed out; ``polled_at`` to ``t`` bound it)."""

    def where(self) -> str:
        what = (
            f"unseen, {self.unseen}" if self.unseen else f"{self.kind or 'no ack'} {self.outcome}"
        )
        return (
            f"{self.process} delivery {self.delivery_count} "
            f"({self.polled_at:.3f}..{self.t:.3f}, {what})"
        )


def deliveries(history: ShareHistory) -> dict[Key, list[Delivery]]:
    """Every delivery of each record, in the order its process recorded them."""
    out: dict[Key, list[Delivery]] = defaultdict(list)
    for process, events in history.consumers.items():
        latest: dict[Key, Delivery] = {}
        for e in events:
            kind = e.get("event")
            if kind in ("acquired", "acknowledging"):
                key = (str(e["topic"]), int(e["partition"]), int(e["offset"]))
                if kind == "acquired":
                    d = Delivery(
                        process,
                        key,
                        int(e["delivery_count"]),
                        float(e["polled_at"]),
                        float(e["t"]),
                    )
                    latest[key] = d
                    out[key].append(d)
                elif key in latest:
                    d = latest[key]
                    d.kind, d.asked_at, d.outcome = str(e["kind"]), float(e["t"]), "unknown"
            elif kind == "unseen" and "records" in e:
                for offset, count in e["records"]:
                    key = (str(e["topic"]), int(e["partition"]), int(offset))
                    out[key].append(
                        Delivery(
                            process,
                            key,
                            int(count),
                            float(e["polled_at"]),
                            float(e["t"]),
                            unseen=str(e["reason"]),
                        )
                    )
            elif kind in ("acknowledged", "ack_failed"):
                outcome = "confirmed" if kind == "acknowledged" else "failed"
                if e.get("error") == UNCERTAIN:
                    outcome = "unknown"
                for offset, _ in e["acks"]:
                    held = latest.get((str(e["topic"]), int(e["partition"]), int(offset)))
                    if held is not None and held.outcome == "unknown":
                        held.outcome, held.answered_at = outcome, float(e["t"])
    return out


def _describe(key: Key) -> str:
    return f"{key[0]}-{key[1]}@{key[2]}"


def forgotten(
    earlier: Delivery, later: Delivery, moved: Sequence[tuple[float, float]] = ()
) -> bool:
    """Whether the broker forgot ``earlier`` when it made ``later``: a count no higher, and
    ``earlier``'s confirmed acknowledgement in flight (asked to answered) during a share
    coordinator's failover (``moved``). That is how Kafka 4.3.1's share-group state goes
    back: the state write of that acknowledgement waits for the new coordinator, is retried
    out of order, and a leader that reads the state again delivers anew. A client that
    reported an acknowledgement the broker never applied is not spared unless it happened
    just then."""
    if later.delivery_count > earlier.delivery_count:
        return False
    begin, end = earlier.asked_at, earlier.answered_at
    return any(start < end and begin < stop for start, stop in moved)


def acknowledged_twice(
    by_record: dict[Key, list[Delivery]],
    lock_s: float = math.inf,
    moved: Sequence[tuple[float, float]] = (),
) -> tuple[list[Violation], int, int]:
    """Records with two confirmed terminal acknowledgements; how many of the later ones a
    poll, or a wait for the answer, longer than ``lock_s`` excuses; and how many a delivery
    the broker forgot (:func:`forgotten`) excuses (see the module's docstring)."""
    out = []
    stale = reset = 0
    for key, ds in sorted(by_record.items()):
        done = sorted(
            (d for d in ds if d.outcome == "confirmed" and d.kind in TERMINAL),
            key=lambda d: d.answered_at,
        )
        unexcused: list[Delivery] = []
        for i, d in enumerate(done[1:], 1):
            if d.t - d.polled_at > lock_s or d.answered_at - d.asked_at > lock_s:
                stale += 1
            elif any(forgotten(e, d, moved) for e in done[:i]):  # the earlier ones only
                reset += 1
            else:
                unexcused.append(d)
        if unexcused:
            out.append(
                Violation(
                    "accepted_twice",
                    f"{_describe(key)}: " + "; ".join(d.where() for d in [done[0], *unexcused]),
                )
            )
    return out, stale, reset


def held_twice(by_record: dict[Key, list[Delivery]]) -> list[Violation]:
    """Two confirmed deliveries of a record whose sure holds (``t`` to ``asked_at``) overlap."""
    out = []
    for key, ds in sorted(by_record.items()):
        confirmed = [d for d in ds if d.outcome == "confirmed"]
        for a, b in itertools.combinations(confirmed, 2):
            if a.t < b.asked_at and b.t < a.asked_at:
                out.append(
                    Violation(
                        "held_twice",
                        f"{_describe(key)}: {a.where()} held until {a.asked_at:.3f} and "
                        f"{b.where()} held until {b.asked_at:.3f}",
                    )
                )
    return out


def delivered_after_done(
    by_record: dict[Key, list[Delivery]], moved: Sequence[tuple[float, float]] = ()
) -> tuple[list[Violation], int]:
    """Deliveries whose poll began after a terminal acknowledgement was confirmed; and how
    many of them the broker made having forgotten that delivery (:func:`forgotten`)."""
    out = []
    reset = 0
    for key, ds in sorted(by_record.items()):
        done = [d for d in ds if d.outcome == "confirmed" and d.kind in TERMINAL]
        if not done:
            continue
        first = min(done, key=lambda d: d.answered_at)
        for d in ds:
            if d.polled_at <= first.answered_at:
                continue
            if forgotten(first, d, moved):
                reset += 1
                continue
            out.append(
                Violation(
                    "delivered_after_done",
                    f"{_describe(key)}: {d.where()} after {first.where()} was confirmed at "
                    f"{first.answered_at:.3f}",
                )
            )
    return out, reset


def expired_too_soon(by_record: dict[Key, list[Delivery]], lock_s: float) -> list[Violation]:
    return [
        Violation("expired_too_soon", f"{_describe(key)}: {d.where()} (lock {lock_s} s)")
        for key, ds in sorted(by_record.items())
        for d in ds
        if d.unseen == "lock_expired" and d.t - d.polled_at < lock_s
    ]


def over_limit(by_record: dict[Key, list[Delivery]], limit: int) -> list[Violation]:
    return [
        Violation("over_limit", f"{_describe(key)}: {d.where()} (limit {limit})")
        for key, ds in sorted(by_record.items())
        for d in ds
        if not 1 <= d.delivery_count <= limit
    ]


# How long after a killed broker is back its partitions' leadership may still move.
FAILOVER_GRACE_S = 10.0


def failovers(history: ShareHistory) -> list[tuple[float, float]]:
    """When share-partitions may have changed leader: each broker kill, from the kill to a
    while after the broker served again."""
    return [
        (float(f["start"]), float(f["end"]) + FAILOVER_GRACE_S)
        for f in history.faults
        if f.get("kind") in ("broker_kill", "coordinator_kill")
    ]


def counts_not_increasing(
    by_record: dict[Key, list[Delivery]], moved: Sequence[tuple[float, float]] = ()
) -> tuple[list[Violation], int]:
    """The same count twice, or a higher count whose poll ended before a lower one's began;
    and how many such pairs a leader change (``moved``) between them excuses."""
    out = []
    excused = 0
    for key, ds in sorted(by_record.items()):
        for a, b in itertools.combinations(sorted(ds, key=lambda d: d.delivery_count), 2):
            if a.delivery_count == b.delivery_count:
                violation = Violation(
                    "count_repeated", f"{_describe(key)}: {a.where()} and {b.where()}"
                )
            elif b.t < a.polled_at:
                violation = Violation(
                    "count_decreased", f"{_describe(key)}: {b.where()} before {a.where()}"
                )
            else:
                continue
            begin, end = min(a.polled_at, b.polled_at), max(a.t, b.t)
            if any(start < end and begin < stop for start, stop in moved):
                excused += 1
            else:
                out.append(violation)
    return out, excused


# Faults that may cut off a ShareFetch's answer after the broker acquired its records.
_ANSWER_CUTTING = frozenset({"broker_kill", "coordinator_kill", "network_cut", "network_blackhole"})


def unseen_chances(history: ShareHistory) -> list[float]:
    """When a delivery may have happened that no consumer reported: each consumer killed
    and each fault that may cut off an answer (each a chance for a record to lose one
    delivery at most), sorted. Deliveries a consumer acquired and never handed out are
    reported by record (``unseen``), deliveries like the others."""
    cuts = [float(f["start"]) for f in history.faults if f.get("kind") in _ANSWER_CUTTING]
    return sorted([*history.kills, *cuts])


def lost(
    history: ShareHistory, by_record: dict[Key, list[Delivery]], unseen: Sequence[float] = ()
) -> list[Violation]:
    """Records not settled by their deliveries on record (``unseen``: see
    :func:`unseen_chances`), and partitions with lag at the end."""
    out = []
    for e in history.produced:
        key = (str(e["topic"]), int(e["partition"]), int(e["offset"]))
        ds = by_record.get(key, [])
        settled = any(
            (d.kind in TERMINAL and d.outcome in ("confirmed", "unknown"))
            or d.delivery_count >= history.delivery_limit
            for d in ds
        )
        if settled or _maybe_archived_unseen(history, ds, float(e["t"]), unseen):
            continue
        seen = "; ".join(d.where() for d in ds) or "never delivered"
        out.append(
            Violation(
                "lost",
                f"{_describe(key)} (value {e.get('value')!r}, acked {float(e['t']):.3f}) "
                f"was neither accepted, rejected nor archived: {seen}",
            )
        )
    for partition, state in sorted((history.final_state or {}).items()):
        if state.get("lag") != 0 and not went_back(history, partition):
            out.append(Violation("undone", f"{partition}: the broker's view at the end: {state}"))
    return out


def went_back(history: ShareHistory, partition: str) -> bool:
    """Whether the broker's view of ``partition`` at the end went back from the one taken
    when the records first settled, which had no lag: a start offset lower than it was.
    Nothing a client sends moves a start offset back; the share coordinator's copy of the
    state does when a write retried after its failover lands after later ones (Kafka
    4.3.1; docs/campaign.md). The records it counts again were done by the broker's own
    earlier word, and each is checked by the consumers' accounts all the same. Only in a
    run with a broker killed (a share coordinator's failover may have happened)."""
    final = (history.final_state or {}).get(partition, {})
    settled = (history.settled_state or {}).get(partition, {})
    if settled.get("lag") != 0 or "start_offset" not in final or not failovers(history):
        return False
    return int(final["start_offset"]) < int(settled.get("start_offset", -1))


def _maybe_archived_unseen(
    history: ShareHistory, ds: Sequence[Delivery], produced_at: float, unseen: Sequence[float]
) -> bool:
    """Whether unreported deliveries after the last one on record may have reached the
    limit (one chance each)."""
    last = max(ds, key=lambda d: d.delivery_count, default=None)
    count, since = (last.delivery_count, last.polled_at) if last else (0, produced_at)
    chances = len(unseen) - bisect.bisect_left(unseen, since)
    return count + chances >= history.delivery_limit


@dataclass
class ShareReport:
    """The share checks' findings, with the figures :mod:`devtools.campaign` prints."""

    faults: int
    accepted_twice: list[Violation]
    held_twice: list[Violation]
    delivered_after_done: list[Violation]
    over_limit: list[Violation]
    expired_too_soon: list[Violation]
    counts_not_increasing: list[Violation]
    lost: list[Violation]
    counts_of_work: dict[str, int]

    max_unowned_s: float = 0.0  # no liveness bound for a share group: every member shares

    @property
    def violations(self) -> list[Violation]:
        return [*itertools.chain.from_iterable(found for _, found in self._checks())]

    def _checks(self) -> list[tuple[str, list[Violation]]]:
        return [
            ("accepted_twice", self.accepted_twice),
            ("held_twice", self.held_twice),
            ("delivered_after_done", self.delivered_after_done),
            ("over_limit", self.over_limit),
            ("expired_too_soon", self.expired_too_soon),
            ("counts_not_increasing", self.counts_not_increasing),
            ("lost", self.lost),
        ]

    def figures(self) -> dict[str, float | int]:
        return {
            "faults": self.faults,
            **{
                k: self.counts_of_work[k]
                for k in ("produced", "deliveries", "accepted", "rejected", "archived")
            },
            **{name: len(found) for name, found in self._checks()},
        }

    def summary(self, examples: int = 5) -> str:
        lines = ["work checked: " + ", ".join(f"{k}={v}" for k, v in self.counts_of_work.items())]
        for name, found in self._checks():
            lines.append(f"{name}: {len(found)}")
            lines += [f"  {v.detail}" for v in found[:examples]]
            if len(found) > examples:
                lines.append(f"  ... and {len(found) - examples} more")
        return "\n".join(lines)


def check_share(history: ShareHistory) -> ShareReport:
    by_record = deliveries(history)
    all_deliveries = [d for ds in by_record.values() for d in ds]

    def confirmed(kind: str) -> int:
        return sum(1 for d in all_deliveries if d.outcome == "confirmed" and d.kind == kind)

    work = {
        "produced": len(history.produced),
        "deliveries": len(all_deliveries),
        "redeliveries": sum(1 for d in all_deliveries if d.delivery_count > 1),
        "accepted": confirmed("ACCEPT"),
        "rejected": confirmed("REJECT"),
        "released": confirmed("RELEASE"),
        "archived": sum(
            1
            for ds in by_record.values()
            if any(d.delivery_count >= history.delivery_limit for d in ds)
            and not any(d.kind in TERMINAL and d.outcome == "confirmed" for d in ds)
        ),
        "ack_failed": sum(1 for d in all_deliveries if d.outcome == "failed"),
        "ack_unknown": sum(1 for d in all_deliveries if d.outcome == "unknown"),
        "max_delivery_count": max((d.delivery_count for d in all_deliveries), default=0),
    }
    unseen = unseen_chances(history)
    work["settled_unseen"] = len(lost(history, by_record)) - len(lost(history, by_record, unseen))
    moved = failovers(history)
    not_increasing, reset_by_failover = counts_not_increasing(by_record, moved)
    work["counts_reset_by_failover"] = reset_by_failover
    twice, work["stale_acks_confirmed"], twice_reset = acknowledged_twice(
        by_record, history.lock_s, moved
    )
    after_done, after_done_reset = delivered_after_done(by_record, moved)
    work["done_again_after_state_reset"] = twice_reset + after_done_reset
    work["state_went_back"] = sum(
        1
        for partition, state in (history.final_state or {}).items()
        if state.get("lag") != 0 and went_back(history, partition)
    )
    return ShareReport(
        faults=len(history.faults),
        accepted_twice=twice,
        held_twice=held_twice(by_record),
        delivered_after_done=after_done,
        over_limit=over_limit(by_record, history.delivery_limit),
        expired_too_soon=expired_too_soon(by_record, history.lock_s),
        counts_not_increasing=not_increasing,
        lost=lost(history, by_record, unseen),
        counts_of_work=work,
    )
