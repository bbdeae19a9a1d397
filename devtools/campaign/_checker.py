"""The campaign's checker: pure functions over what every process recorded.

In the spirit of Jepsen's Kafka checker: nothing here trusts a process's own claim that it
behaved; each check compares what several processes did, on one timeline, against what the
recipes promise (docs/election.md, docs/tasks.md, docs/partitioning.md). Every time is in
seconds of one system-wide clock (``CLOCK_BOOTTIME``; the loader converts the consumer
peers' epoch milliseconds). Where a time could be read either way, the check reads it so
that it never reports a violation that did not happen: an action's time is taken *before*
the check that allowed it, so an acting interval is never longer than the belief behind it.

The checks (each returns the evidence of every violation it found):

* :func:`leadership_overlaps`: two leaderships (tokens) acting in overlapping time;
* :func:`token_regressions`: an accepted write with a lower token after a higher one;
* :func:`tasks_twice`: units of one task done by two processes in overlapping time;
* :func:`partitions_twice`: one partition owned by two consumers of one group in
  overlapping generations *and* overlapping time;
* :func:`lost_records`: acknowledged by the producer, then never consumed by one of the
  consumer groups (or gone from, or changed in, the topic read back at the end);
* :func:`duplicates`: a record consumed again with no rebalance, revocation or crash of its
  consumer to excuse it, or after a commit beyond it was acknowledged;
* :func:`commits_backwards`: an acknowledged commit lower than one acknowledged before it
  was sent;
* :func:`max_unowned`: the longest time after the last fault during which a leadership,
  a task or a partition (in each consumer group) had no owner.

Each consumer group reads the whole stream on its own, so every consumer check runs for
each group separately (a partition owned by one member of each group at once is what two
groups are for), and each of its violations names the group.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

Event = dict[str, Any]
Partition = tuple[str, int]


@dataclass
class History:
    """Everything the campaign's processes recorded, keyed by process (``name#incarnation``).

    ``consumer_groups`` holds each consumer group's processes, by the group's name; the
    groups consume the same stream independently. ``exits`` holds when each process that
    ended was seen to end (killed or closed): it can own nothing after that.
    ``stopping_at`` is when the campaign began stopping everything (intervals still open
    then are cut there); ``last_fault_at`` when the last fault healed.
    """

    election: dict[str, list[Event]] = field(default_factory=dict)
    tasks: dict[str, list[Event]] = field(default_factory=dict)
    consumer_groups: dict[str, dict[str, list[Event]]] = field(default_factory=dict)
    produced: list[Event] = field(default_factory=list)
    election_log: list[Event] | None = None
    stream_log: dict[tuple[str, int, int], str] | None = None
    exits: dict[str, float] = field(default_factory=dict)
    faults: list[Event] = field(default_factory=list)
    last_fault_at: float = 0.0
    stopping_at: float = math.inf


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


@dataclass
class Report:
    faults: int
    overlaps: list[Violation]
    token_regressions: list[Violation]
    tasks_twice: list[Violation]
    partitions_twice: list[Violation]
    lost: list[Violation]
    duplicates: list[Violation]
    commits_backwards: list[Violation]
    unowned: dict[str, float]
    counts_of_work: dict[str, int]
    reelected_same_token: int = 0
    peers_partitions_twice: list[Violation] = field(default_factory=list)
    """Partitions owned twice in the KIP-848 group by two clients that are not this
    library's, or by one of ours and another client that had told the broker it did not own
    the partition: listed, not counted as violations (see :func:`partitions_twice`)."""

    @property
    def violations(self) -> list[Violation]:
        return [
            *self.overlaps,
            *self.token_regressions,
            *self.tasks_twice,
            *self.partitions_twice,
            *self.lost,
            *self.duplicates,
            *self.commits_backwards,
        ]

    @property
    def max_unowned_s(self) -> float:
        return max(self.unowned.values(), default=0.0)

    def figures(self) -> dict[str, float | int]:
        return {
            "faults": self.faults,
            "overlaps": len(self.overlaps),
            "token_regressions": len(self.token_regressions),
            "tasks_twice": len(self.tasks_twice),
            "partitions_twice": len(self.partitions_twice),
            "peers_partitions_twice": len(self.peers_partitions_twice),
            "lost": len(self.lost),
            "duplicates": len(self.duplicates),
            "commits_backwards": len(self.commits_backwards),
            "max_unowned_s": round(self.max_unowned_s, 2),
        }

    def summary(self, examples: int = 5) -> str:
        """A readable account: the work checked, each count, and a few examples of each."""
        lines = ["work checked: " + ", ".join(f"{k}={v}" for k, v in self.counts_of_work.items())]
        for name, found in (
            ("overlapping leaderships", self.overlaps),
            ("token regressions", self.token_regressions),
            ("tasks running twice", self.tasks_twice),
            ("partitions owned twice", self.partitions_twice),
            ("lost records", self.lost),
            ("duplicates beyond at-least-once", self.duplicates),
            ("committed offsets moving backwards", self.commits_backwards),
        ):
            lines.append(f"{name}: {len(found)}")
            lines += [f"  {v.detail}" for v in found[:examples]]
            if len(found) > examples:
                lines.append(f"  ... and {len(found) - examples} more")
        lines.append(
            f"leaders re-elected with the token they had been deposed with: "
            f"{self.reelected_same_token} (no violation: same generation, nobody led between)"
        )
        lines.append(
            f"partitions owned twice by another client's doing (theirs, not a violation): "
            f"{len(self.peers_partitions_twice)}"
        )
        lines += [f"  {v.detail}" for v in self.peers_partitions_twice[:examples]]
        worst = sorted(self.unowned.items(), key=lambda kv: -kv[1])[:examples]
        lines.append(
            f"longest unowned after the last fault: {self.max_unowned_s:.2f} s "
            + ", ".join(f"{k} {v:.2f} s" for k, v in worst)
        )
        return "\n".join(lines)


# -- intervals ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """``owner`` held (or acted on) ``what`` from ``start`` to ``end``."""

    owner: str
    what: str
    start: float
    end: float

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


def _overlapping_pairs(spans: Sequence[Span]) -> list[tuple[Span, Span]]:
    """Pairs of spans of different owners that overlap in time (a sweep over starts)."""
    ordered = sorted(spans, key=lambda s: s.start)
    pairs: list[tuple[Span, Span]] = []
    active: list[Span] = []
    for span in ordered:
        active = [a for a in active if a.end > span.start]
        pairs += [(a, span) for a in active if a.owner != span.owner and a.overlaps(span)]
        active.append(span)
    return pairs


def _largest_gap(spans: Iterable[tuple[float, float]], begin: float, end: float) -> float:
    """The longest stretch of ``[begin, end]`` covered by none of ``spans``."""
    if end <= begin:
        return 0.0
    covered_until = begin
    gap = 0.0
    for start, stop in sorted(spans):
        if stop <= covered_until:
            continue
        if start > covered_until:
            gap = max(gap, min(start, end) - covered_until)
        covered_until = max(covered_until, stop)
        if covered_until >= end:
            break
    return max(gap, end - covered_until)


def _end_of(process: str, history: History) -> float:
    return min(history.exits.get(process, math.inf), history.stopping_at)


# -- the election -------------------------------------------------------------------------


def acting_leaderships(history: History) -> list[Span]:
    """Each leadership's acting span: from ``elected`` to the last write check that passed.

    The end is the time read just before the last ``leadership.check()`` that let a write
    through: the leader believed it led at least until then. A leadership that wrote
    nothing has no span: its ``elected`` may have been recorded by a process frozen since
    (and deposed by then), which acted on nothing. A member re-elected with the same token
    has one span per election.
    """
    spans: list[Span] = []
    for process, events in history.election.items():
        current: list[float] | None = None
        token = ""
        for e in events:
            if e["event"] == "elected":
                if current is not None and current[1] > current[0]:
                    spans.append(Span(process, token, current[0], current[1]))
                token, current = str(e["token"]), [float(e["t"]), -math.inf]
            elif e["event"] == "wrote" and current is not None and str(e["token"]) == token:
                current[1] = max(current[1], float(e["checked_at"]))
        if current is not None and current[1] > -math.inf:
            spans.append(Span(process, token, current[0], max(current)))
    return spans


def leadership_overlaps(history: History) -> list[Violation]:
    """Two processes acting as leader in overlapping time (whatever their tokens)."""
    return [
        Violation(
            "overlap",
            f"token {a.what} ({a.owner}) acted {a.start:.3f}..{a.end:.3f} and token "
            f"{b.what} ({b.owner}) acted {b.start:.3f}..{b.end:.3f}",
        )
        for a, b in _overlapping_pairs(acting_leaderships(history))
    ]


def reelections_with_the_same_token(history: History) -> int:
    """How often a deposed member was elected again with the token it had (not a violation:
    nobody led in between, since the generation did not change; noted in the summary)."""
    count = 0
    for events in history.election.values():
        deposed: set[int] = set()
        for e in events:
            if e["event"] == "deposed":
                deposed.add(int(e["token"]))
            elif e["event"] == "elected" and int(e["token"]) in deposed:
                count += 1
    return count


def token_regressions(history: History) -> list[Violation]:
    """Writes accepted with a lower token after a higher one.

    Three views: the topic's own order (read back with ``read_committed`` at the end); the
    writers' acknowledgements (a write whose check began after another write with a higher
    token was acknowledged, and that was acknowledged too); and the elections of leaderships
    that acted (a later one with a lower token, or with the token another member had).
    """
    out: dict[tuple[str, int, int], Violation] = {}
    highest: tuple[int, Event] | None = None
    for record in history.election_log or []:
        token = int(record["token"])
        if highest is not None and token < highest[0]:
            key = (str(record.get("identity")), token, int(record.get("seq", -1)))
            out[key] = Violation(
                "token_regression",
                f"log offset {record.get('offset')}: token {token} by {record.get('identity')} "
                f"after token {highest[0]} at offset {highest[1].get('offset')}",
            )
        if highest is None or token > highest[0]:
            highest = (token, record)
    by_election = sorted(acting_leaderships(history), key=lambda span: span.start)
    for earlier, later in itertools.combinations(by_election, 2):
        lower = int(later.what) < int(earlier.what)
        shared = later.what == earlier.what and later.owner != earlier.owner
        if lower or shared:
            key = (later.owner, int(later.what), -1)
            out.setdefault(
                key,
                Violation(
                    "token_regression",
                    f"{later.owner} was elected with token {later.what} at {later.start:.3f}, "
                    f"after {earlier.owner} was elected with token {earlier.what} at "
                    f"{earlier.start:.3f}",
                ),
            )
    writes = [
        (float(e["acked"]), float(e["checked_at"]), int(e["token"]), int(e["seq"]), process)
        for process, events in history.election.items()
        for e in events
        if e["event"] == "wrote"
    ]
    by_ack = sorted(writes)
    acks = [w[0] for w in by_ack]
    best_so_far: list[tuple[int, str, float]] = []
    for acked, _checked, token, _seq, process in by_ack:
        previous = best_so_far[-1] if best_so_far else (-1, "", 0.0)
        best_so_far.append(max(previous, (token, process, acked)))
    for _acked, checked, token, seq, process in writes:
        i = bisect.bisect_left(acks, checked) - 1
        if i >= 0 and best_so_far[i][0] > token:
            higher, by, when = best_so_far[i]
            key = (process, token, seq)
            out.setdefault(
                key,
                Violation(
                    "token_regression",
                    f"{process} wrote token {token} (seq {seq}, checked {checked:.3f}) after "
                    f"token {higher} by {by} was acknowledged at {when:.3f}",
                ),
            )
    return list(out.values())


# -- tasks --------------------------------------------------------------------------------


def task_runs(history: History) -> list[Span]:
    """Each run of a task in a process: from its start to its last unit of work.

    A run that did no unit of work has no span: its ``started`` may have been recorded by
    a worker frozen just before, whose lease ran out meanwhile, and that did nothing after.
    ``stopped`` is not an action either (a frozen worker stops its tasks only when it
    resumes, having done nothing in between).
    """
    spans: list[Span] = []
    for process, events in history.tasks.items():
        current: dict[str, list[float]] = {}
        for e in events:
            kind = e["event"]
            if kind not in ("started", "tick", "stopped"):
                continue
            task = str(e["task"])
            t = float(e["checked_at"] if kind == "tick" else e["t"])
            if kind == "tick":
                run = current.setdefault(task, [t, t])
                run[1] = max(run[1], t)
                continue
            ended = current.pop(task, None)
            if ended is not None and ended[1] > -math.inf:
                spans.append(Span(process, task, ended[0], ended[1]))
            if kind == "started":
                current[task] = [t, -math.inf]
        spans += [
            Span(process, task, run[0], run[1])
            for task, run in current.items()
            if run[1] > -math.inf
        ]
    return spans


def tasks_twice(history: History) -> list[Violation]:
    by_task: dict[str, list[Span]] = defaultdict(list)
    for span in task_runs(history):
        by_task[span.what].append(span)
    out: list[Violation] = []
    for task, spans in sorted(by_task.items()):
        for a, b in _overlapping_pairs(spans):
            out.append(
                Violation(
                    "task_twice",
                    f"{task}: {a.owner} ran it {a.start:.3f}..{a.end:.3f} and {b.owner} "
                    f"{b.start:.3f}..{b.end:.3f}",
                )
            )
    return out


# -- consumers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ownership:
    """One consumer process's ownership of one partition (an "epoch" of it)."""

    process: str
    partition: Partition
    start: float
    end: float
    first_generation: int
    last_generation: int
    ended_by: str
    epoch: int


def _partitions_of(event: Event) -> list[Partition]:
    return [(str(t), int(p)) for t, p in event.get("partitions", [])]


def ownerships(history: History, group: str) -> list[Ownership]:
    """Every ownership interval of ``group``'s consumers, rebuilt from their callbacks.

    "assigned" opens one (cooperative increments and eager full sets compose the same way),
    "revoked" and "lost" close it. Generations: the one of the assigned event to the one of
    the revoked event, or for a loss (or a process that ended) the last generation it knew;
    an assignment reported without its generation gets the lowest it can have been.
    A lost partition's time ends at the member's last records or commit of it: the member
    learns of the loss late, and what matters is until when it acted as owner.
    """
    out: list[Ownership] = []
    epoch_counter = 0
    for process, events in history.consumer_groups[group].items():
        open_: dict[Partition, tuple[float, int, int]] = {}
        last_activity: dict[Partition, float] = {}
        known_generation = -1
        lost_since_known = False
        for e in events:
            kind, t = e.get("event"), float(e.get("t", 0.0))
            generation = int(e.get("generation", -1) or -1)
            if kind == "assigned":
                if generation < 0 and known_generation >= 0:
                    # A peer reports the generation current when its callback runs, -1 if
                    # the membership was reset meanwhile. After a loss, the group had moved
                    # past the generation the member knew, so any new assignment came from
                    # a later one; otherwise the last known one is the lower bound.
                    generation = known_generation + (1 if lost_since_known else 0)
                known_generation = max(known_generation, generation)
                lost_since_known = False
                for tp in _partitions_of(e):
                    if tp not in open_:
                        epoch_counter += 1
                        open_[tp] = (t, known_generation, epoch_counter)
            elif kind in ("revoked", "lost"):
                if kind == "revoked" and generation >= 0:
                    known_generation = max(known_generation, generation)
                if kind == "lost":
                    lost_since_known = True
                for tp in _partitions_of(e):
                    if tp not in open_:
                        continue
                    start, first_gen, epoch = open_.pop(tp)
                    acted = last_activity.get(tp, float("-inf")) >= start
                    if kind == "lost" and first_gen < 0 and not acted:
                        # Reported by a membership already gone (-1) with no generation known
                        # before (a new process), and lost before it did anything: it never
                        # acted as owner, and no generation can place it.
                        continue
                    end = t if kind == "revoked" else max(start, last_activity.get(tp, start))
                    out.append(
                        Ownership(
                            process, tp, start, end, first_gen, known_generation, str(kind), epoch
                        )
                    )
            elif kind == "records":
                for topic, p, *_ in e["partitions"]:
                    last_activity[(str(topic), int(p))] = t
            elif kind == "committed":
                for topic, p, _ in e["offsets"]:
                    last_activity[(str(topic), int(p))] = t
        end_of_process = _end_of(process, history)
        for tp, (start, first_gen, epoch) in open_.items():
            end = max(start, end_of_process)
            ended_by = "exit" if process in history.exits else ""
            last_gen = known_generation if ended_by else 2**62
            out.append(Ownership(process, tp, start, end, first_gen, last_gen, ended_by, epoch))
    return out


CLASSIC_CONSUMERS: Final = "consumers"
"""The consumer group of the classic protocol: its leader (ours or not) assigns."""
KIP848_CONSUMERS: Final = "consumers848"
"""The consumer group of Kafka's consumer protocol (KIP-848): the broker assigns."""

PEERS_PARTITION_TWICE = "peers_partition_twice"
"""The kind of a partition owned twice by another client's doing: a finding about it."""


def _this_library(process: str) -> bool:
    """Whether ``process`` runs this library: the campaign names those ``ours…``
    (``ours-1``, ``oursasync-1``, ``ours848-1``); the others are Java's and librdkafka's."""
    return process.startswith("ours")


def partitions_twice(history: History, group: str) -> list[Violation]:
    """A partition owned by two processes of ``group`` in overlapping generations and
    overlapping time.

    Time alone would accuse a static member's successor (it takes over its predecessor's
    assignment in the same generation) and a frozen member that acted briefly before
    learning it was removed; generations alone would accuse a killed process whose last
    generation is still current. Both must overlap. A generation not known (-1) is taken
    as overlapping everything: time decides.

    In a KIP-848 group the generation a member reports is its member epoch, which is its
    own, but the rule holds as it is: a member keeps its epoch while it still owns a
    partition the broker takes from it, and reaches the new target epoch only once it
    reported the partition revoked (a fenced member never reaches it); the broker hands the
    partition to another member only once it is released, at that member's epoch at the
    target epoch or later. So the epochs of two successive owners never meet.

    In the KIP-848 group, an overlap between two processes neither of which runs this
    library is returned with the kind :data:`PEERS_PARTITION_TWICE`: the broker assigns
    there, and each client's ownership follows its own reports to it, so no member of ours
    can make two other clients own one partition at once; it is a finding about those
    clients, which the report lists apart and does not count as a violation. Not in the
    classic group, where a member of ours may be the leader that assigned it. One seen:
    librdkafka 2.16's KIP-848 member reports owning nothing while the topic's metadata is
    missing, then takes the whole assignment of that older epoch after the broker,
    believing it free, handed part of it on. When a member of ours is the one it was
    handed on to, the overlap is the other client's too, and listed apart the same way, if
    that client's own reports show it (:func:`_told_the_broker_it_was_free`).
    """
    by_partition: dict[Partition, list[Ownership]] = defaultdict(list)
    for o in ownerships(history, group):
        by_partition[o.partition].append(o)
    out: list[Violation] = []
    for tp, owned in sorted(by_partition.items()):
        owned.sort(key=lambda o: o.start)
        for i, a in enumerate(owned):
            for b in owned[i + 1 :]:
                if b.start >= a.end:
                    break
                if a.process == b.process or not (a.start < b.end and b.start < a.end):
                    continue
                unknown = min(a.first_generation, b.first_generation) < 0
                generations_meet = unknown or (
                    a.first_generation <= b.last_generation
                    and b.first_generation <= a.last_generation
                )
                if generations_meet:
                    # In the classic group a member of ours may lead and assign to the others.
                    ours = (
                        group != KIP848_CONSUMERS
                        or _this_library(a.process)
                        or _this_library(b.process)
                    )
                    why = ""
                    if ours and group == KIP848_CONSUMERS:
                        for peer, other in ((a, b), (b, a)):
                            if not _this_library(peer.process) and _told_the_broker_it_was_free(
                                history, group, peer, before=other.start
                            ):
                                ours = False
                                why = (
                                    f"; {peer.process} had told the broker at epoch "
                                    f"{peer.first_generation} that it did not own it"
                                )
                    out.append(
                        Violation(
                            "partition_twice" if ours else PEERS_PARTITION_TWICE,
                            f"{group}: {tp[0]}-{tp[1]}: {a.process} owned it "
                            f"{a.start:.3f}..{a.end:.3f} "
                            f"(generations {a.first_generation}..{a.last_generation}, "
                            f"{a.ended_by or 'open'}) and {b.process} {b.start:.3f}..{b.end:.3f} "
                            f"(generations {b.first_generation}..{b.last_generation}, "
                            f"{b.ended_by or 'open'}){why}",
                        )
                    )
    return out


def _told_the_broker_it_was_free(
    history: History, group: str, owned: Ownership, *, before: float
) -> bool:
    """Whether ``owned``'s process told the broker, before ``before``, that it did not own
    the partition at the epoch it owned it in, and never that it did.

    A KIP-848 member's heartbeat lists what it owns (the peers report each list as a
    "reported" event, timed when they saw it, after it was sent); the broker frees a
    partition it is taking from a member once a list at the member's epoch leaves it out,
    and hands it on. A member that then acts on that epoch's assignment owns a partition it
    told the broker it did not: the broker's handing on, and the next owner's taking it,
    followed the protocol.
    """
    reports = [
        e
        for e in history.consumer_groups[group].get(owned.process, [])
        if e.get("event") == "reported" and int(e.get("generation", -1)) == owned.first_generation
    ]
    if any(owned.partition in _partitions_of(e) for e in reports):
        return False
    return any(float(e.get("t", 0.0)) < before for e in reports)


@dataclass(frozen=True)
class Consumption:
    process: str
    t: float
    epoch: int
    epoch_start: float
    epoch_lost: bool = False


Consumed = Mapping[tuple[str, int, int], Sequence[Consumption]]


def consumptions(history: History, group: str) -> dict[tuple[str, int, int], list[Consumption]]:
    """Every (topic, partition, offset) each consumer of ``group`` was handed, with the
    ownership ("epoch" of it) it was in."""
    spans: dict[tuple[str, Partition], list[Ownership]] = defaultdict(list)
    for o in ownerships(history, group):
        spans[(o.process, o.partition)].append(o)
    for owned in spans.values():
        owned.sort(key=lambda o: o.start)
    out: dict[tuple[str, int, int], list[Consumption]] = defaultdict(list)
    for process, events in history.consumer_groups[group].items():
        for e in events:
            if e.get("event") != "records":
                continue
            t = float(e["t"])
            for topic, p, first, last, _count in e["partitions"]:
                tp = (str(topic), int(p))
                epochs = spans.get((process, tp), [])
                # The epoch that began last before these records (records of a partition
                # not owned, which no client should hand out, count as epoch 0).
                starts = [o.start for o in epochs]
                i = bisect.bisect_right(starts, t) - 1
                epoch, epoch_start, lost = (
                    (epochs[i].epoch, epochs[i].start, epochs[i].ended_by == "lost")
                    if i >= 0
                    else (0, 0.0, False)
                )
                for offset in range(int(first), int(last) + 1):
                    out[(tp[0], tp[1], offset)].append(
                        Consumption(process, t, epoch, epoch_start, lost)
                    )
    return out


def lost_records(history: History, consumed: Mapping[str, Consumed]) -> list[Violation]:
    """Acknowledged records some consumer group (``consumed`` holds each one's) never
    consumed, or that read back differently from the topic at the end (checked once)."""
    out: list[Violation] = []
    for e in history.produced:
        key = (str(e["topic"]), int(e["partition"]), int(e["offset"]))
        where = f"{key[0]}-{key[1]}@{key[2]} (value {e.get('value')!r}, acked {float(e['t']):.3f})"
        out += [
            Violation("lost", f"{group}: {where} was never consumed")
            for group, by_group in consumed.items()
            if key not in by_group
        ]
        if history.stream_log is not None:
            found = history.stream_log.get(key)
            if found is None:
                out.append(Violation("lost", f"{where} is not in the topic read back at the end"))
            elif found != str(e.get("value")):
                out.append(Violation("lost", f"{where} reads back as {found!r}"))
    return out


def _acked_commits(
    history: History, group: str
) -> dict[Partition, list[tuple[float, float, int, str]]]:
    """Per partition: (sent no earlier than, acknowledged at, offset, process) of each commit
    by ``group``'s consumers (a group's committed offsets are its own).

    A consumer commits on its polling thread after it reports the records it commits, so
    that thread's last event before a ``committed`` is a lower bound of when the commit was
    sent. Not any event: this library's peers report rebalances from the member's own
    thread, which may tell of a loss between a commit's request and its answer.
    """
    out: dict[Partition, list[tuple[float, float, int, str]]] = defaultdict(list)
    for process, events in history.consumer_groups[group].items():
        previous = -math.inf
        for e in events:
            kind, t = e.get("event"), float(e.get("t", 0.0))
            if kind == "committed":
                for topic, p, offset in e["offsets"]:
                    out[(str(topic), int(p))].append((previous, t, int(offset), process))
            if kind in _POLLING_THREAD_EVENTS:
                previous = t
    return out


# What a consumer peer reports from its polling thread, in the order it does it.
_POLLING_THREAD_EVENTS = frozenset({"records", "committed", "commit_failed"})


def duplicates(history: History, group: str, consumed: Consumed) -> list[Violation]:
    """Records consumed again when at-least-once delivery does not excuse it.

    A record handed out a second time is excused only if its earlier consumer's ownership
    ended in between (a revocation, a loss, a crash: the record's commit may not have
    happened), and only if no commit beyond it had been acknowledged before the second
    consumer's ownership began (that consumer started from the committed offset). The
    second rule spares an ownership that ended in a loss: its member may have read its
    start offset, then been frozen past its session and resumed as a zombie, handing out
    records from there (at-least-once allows that; its commits are refused).
    """
    commits = _acked_commits(history, group)
    highest_before: dict[Partition, tuple[list[float], list[int]]] = {}
    for tp, acked in commits.items():
        acked.sort(key=lambda c: c[1])
        running, times, best = -1, [], []
        for _sent, when, offset, _process in acked:
            running = max(running, offset)
            times.append(when)
            best.append(running)
        highest_before[tp] = (times, best)
    out: list[Violation] = []
    for (topic, p, offset), seen in sorted(consumed.items()):
        if len(seen) < 2:
            continue
        ordered = sorted(seen, key=lambda c: c.t)
        for earlier, again in itertools.pairwise(ordered):
            reason = ""
            if again.process == earlier.process and again.epoch == earlier.epoch:
                reason = "in the same ownership, with no rebalance or crash in between"
            elif not again.epoch_lost:
                times, best = highest_before.get((topic, p), ([], []))
                i = bisect.bisect_left(times, again.epoch_start) - 1
                if i >= 0 and best[i] > offset:
                    reason = (
                        f"although offset {best[i]} was committed before its ownership began "
                        f"at {again.epoch_start:.3f}"
                    )
            if reason:
                out.append(
                    Violation(
                        "duplicate",
                        f"{group}: {topic}-{p}@{offset}: consumed by {earlier.process} at "
                        f"{earlier.t:.3f} and again by {again.process} at {again.t:.3f} {reason}",
                    )
                )
                break
    return out


def commits_backwards(history: History, group: str) -> list[Violation]:
    """Acknowledged commits of ``group`` lower than one acknowledged before they were sent."""
    out: list[Violation] = []
    for tp, acked in sorted(_acked_commits(history, group).items()):
        by_ack = sorted(acked, key=lambda c: c[1])
        times = [c[1] for c in by_ack]
        best: list[tuple[int, str, float]] = []
        for _sent, when, offset, process in by_ack:
            previous = best[-1] if best else (-1, "", 0.0)
            best.append(max(previous, (offset, process, when)))
        for sent, when, offset, process in acked:
            i = bisect.bisect_left(times, sent) - 1
            if i >= 0 and best[i][0] > offset:
                higher, by, at = best[i]
                out.append(
                    Violation(
                        "commit_backwards",
                        f"{group}: {tp[0]}-{tp[1]}: {process} committed {offset} at "
                        f"{when:.3f} after {by} had committed {higher} at {at:.3f}",
                    )
                )
    return out


# -- liveness -----------------------------------------------------------------------------


def max_unowned(history: History) -> dict[str, float]:
    """For each piece of work, the longest time without an owner after the last fault.

    Ownership here is what each process recorded (a leadership from ``elected`` to
    ``deposed``, a task from ``started`` to ``stopped``, a partition from assignment to
    revocation or loss, in each consumer group), each cut where its process ended. The
    window runs from the end of the last fault to when the campaign began stopping
    everything.
    """
    begin, end = history.last_fault_at, history.stopping_at
    if not math.isfinite(end):
        return {}
    out: dict[str, float] = {}
    leadership: list[tuple[float, float]] = []
    for process, events in history.election.items():
        stop = _end_of(process, history)
        elected: dict[int, float] = {}
        for e in events:
            if e["event"] == "elected":
                elected[int(e["token"])] = float(e["t"])
            elif e["event"] == "deposed" and int(e["token"]) in elected:
                leadership.append((elected.pop(int(e["token"])), float(e["t"])))
        leadership += [(start, stop) for start in elected.values()]
    if history.election:
        out["leadership"] = _largest_gap(leadership, begin, end)
    task_spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for process, events in history.tasks.items():
        stop = _end_of(process, history)
        running: dict[str, float] = {}
        for e in events:
            if e["event"] == "started":
                running.setdefault(str(e["task"]), float(e["t"]))
            elif e["event"] == "stopped" and str(e["task"]) in running:
                task_spans[str(e["task"])].append((running.pop(str(e["task"])), float(e["t"])))
        for task, start in running.items():
            task_spans[task].append((start, stop))
    for task in _all_tasks(history):
        out[f"task {task}"] = _largest_gap(task_spans.get(task, []), begin, end)
    produced = sorted({(str(e["topic"]), int(e["partition"])) for e in history.produced})
    for group in sorted(history.consumer_groups):
        partition_spans: dict[Partition, list[tuple[float, float]]] = defaultdict(list)
        for o in ownerships(history, group):
            partition_spans[o.partition].append((o.start, o.end))
        for topic, p in produced:
            out[f"partition {topic}-{p} in {group}"] = _largest_gap(
                partition_spans.get((topic, p), []), begin, end
            )
    return out


def _all_tasks(history: History) -> list[str]:
    tasks: set[str] = set()
    for events in history.tasks.values():
        for e in events:
            if e["event"] == "up":
                tasks.update(str(t) for t in e.get("tasks", []))
            elif "task" in e:
                tasks.add(str(e["task"]))
    return sorted(tasks)


# -- all of it ----------------------------------------------------------------------------


def check(history: History) -> Report:
    """Run every check over ``history``; the consumer checks once per consumer group."""
    groups = sorted(history.consumer_groups)
    twice = [v for g in groups for v in partitions_twice(history, g)]
    consumed = {group: consumptions(history, group) for group in groups}
    work: dict[str, int] = {
        "leaderships": len(acting_leaderships(history)),
        "writes": sum(1 for es in history.election.values() for e in es if e["event"] == "wrote"),
        "task_units": sum(1 for es in history.tasks.values() for e in es if e["event"] == "tick"),
        "produced": len(history.produced),
    }
    for group in groups:
        work[f"{group}_ownerships"] = len(ownerships(history, group))
        work[f"{group}_consumed"] = sum(len(v) for v in consumed[group].values())
        work[f"{group}_commits"] = sum(len(v) for v in _acked_commits(history, group).values())
    return Report(
        faults=len(history.faults),
        overlaps=leadership_overlaps(history),
        token_regressions=token_regressions(history),
        tasks_twice=tasks_twice(history),
        partitions_twice=[v for v in twice if v.kind != PEERS_PARTITION_TWICE],
        peers_partitions_twice=[v for v in twice if v.kind == PEERS_PARTITION_TWICE],
        lost=lost_records(history, consumed),
        duplicates=[v for g in groups for v in duplicates(history, g, consumed[g])],
        commits_backwards=[v for g in groups for v in commits_backwards(history, g)],
        unowned=max_unowned(history),
        reelected_same_token=reelections_with_the_same_token(history),
        counts_of_work=work,
    )
