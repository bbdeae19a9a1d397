"""Share groups (KIP-932): fetching and acknowledging records, in share sessions, at each
partition's leader.

A share group's member fetches from the leaders of the partitions it is assigned, not from
the coordinator. At each leader it keeps a *share session*: the first ShareFetch opens it
(``share_session_epoch`` 0) and names every partition to fetch from; each later request
carries the next epoch (1, 2, ...) and only the changes (partitions added, partitions
forgotten); a ShareAcknowledge of epoch -1 closes it, which releases whatever the member
still holds there. Acknowledgements ride on the next ShareFetch to the partition's leader
(a RENEW, which must not fetch, goes on a ShareAcknowledge of its own); a ShareAcknowledge
sends them without fetching (``commit``, ``close``).

Each request's answer is judged with ``classify.py``'s ShareFetch and ShareAcknowledge
columns: a moved leader drops the session there and the metadata is asked again; a lost
session is opened anew; an authorization failure or a broker without share groups stops.
An acknowledgement that did not succeed is reported for its partition, with its code: a
record whose lock ran out answers INVALID_RECORD_STATE, and is never counted as
acknowledged. An acknowledgement whose request got no answer is reported with
NETWORK_EXCEPTION: the broker may or may not have applied it.

The sessions owe some acknowledgements of their own, for acquired records the application
never gets: a GAP for an acquired offset that holds no record, a RELEASE for each record of a
partition's answer whose batches could not be decoded (Kafka's share consumer rejects a
corrupt batch and releases a record it cannot deserialize; here the failure is not pinned to
one batch, and may be this process's alone, such as a compression library not installed, so
the records go back to the group at once rather than be archived). They ride with the next
request to the partition's leader, as the application's do.

Not thread-safe: one thread (the consumer's) calls it, as Kafka's share consumer is used.
A ShareFetch long-polls on a connection of its own per leader (the transport's
``dedicated_node``), so that it never holds up the member's heartbeats.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar

from .._protocol import share_group as sg
from .._protocol import share_group_codec as codec
from .._protocol.consumer_group import TopicIdPartitions
from .._protocol.error_codes import ErrorCode, error_name
from .._protocol.record_batches import RecordFields
from ..clock import Clock
from ..errors import ProtocolCodecError
from ..transport import CoordinatorNode, Transport, TransportError
from . import classify
from .classify import Api, Next
from .share_group import ShareGroupMembership, TopicIdPartition

if TYPE_CHECKING:
    from .._transport.kafka import DedicatedAnswer

# The code an acknowledgement is reported with when its request got no answer.
NO_ANSWER: Final = ErrorCode.NETWORK_EXCEPTION
# The code for acknowledgements of a partition with no share session to carry them.
NO_SESSION: Final = ErrorCode.SHARE_SESSION_NOT_FOUND

R = TypeVar("R", sg.ShareFetchResponse, sg.ShareAcknowledgeResponse)

Acknowledgements = Mapping[TopicIdPartition, Mapping[int, sg.AcknowledgeType]]
"""Per partition, the acknowledgement of each offset."""


@dataclass(frozen=True, slots=True)
class TopicLocation:
    """A subscribed topic as the cluster's metadata tells it: its name and each partition's
    leader (None: no leader at the moment)."""

    name: str
    leaders: Mapping[int, CoordinatorNode | None]


class Leaders(Protocol):
    """Where the member learns its topics' ids and partition leaders (the cluster's
    Metadata, or a stand-in in tests)."""

    def locate(self, topics: frozenset[str]) -> Mapping[uuid.UUID, TopicLocation]:
        """The topics of ``topics`` that exist, by id. May block on I/O; may raise."""
        ...


class AcquiredRecord(NamedTuple):
    """A record this member acquired: it holds it under the acquisition lock until it
    acknowledges it or ``lock_timeout_ms`` (counted from its fetch) runs out. A named
    tuple, not a frozen dataclass: one is made per record fetched, four times as fast; the
    share consumer unpacks it, so its fields keep this order."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    delivery_count: int
    lock_timeout_ms: int


class AcquiredRun(NamedTuple):
    """Records of one partition's answer, acquired with one delivery count, in offset order,
    each as ``(offset, key, value, headers, timestamp)``. How a fetch's records come: a
    consumer makes its own records from these without an :class:`AcquiredRecord` each in
    between (a tenth of the share consumer's CPU per record); ``FetchOutcome.records`` is
    the same records one by one."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    delivery_count: int
    lock_timeout_ms: int
    records: list[RecordFields]


@dataclass(slots=True)
class FetchOutcome:
    """What one round of ShareFetches brought: the records acquired, and the outcome of the
    acknowledgements it carried (a code per partition; NONE for success)."""

    runs: list[AcquiredRun] = field(default_factory=list)
    """The records acquired, partition by partition, in runs of one delivery count."""
    acknowledged: dict[TopicIdPartition, int] = field(default_factory=dict)
    answered_at: dict[TopicIdPartition, float] = field(default_factory=dict)
    """When the answer that brought each partition's records came (the member's clock): their
    locks run from about then (the broker took them a little earlier)."""
    undecodable: list[AcquiredRecord] = field(default_factory=list)
    """Records acquired whose batches could not be decoded, one per acquired offset, in
    partition and offset order: their offset and delivery count are known (from the
    answer's acquired ranges), not their content (``key`` and ``value`` None, no headers,
    ``timestamp`` -1). Each spent a delivery; the member releases them with its next request
    to their leader (RELEASE): the broker delivers them again, or archives them at the
    delivery limit."""
    undecodable_why: dict[TopicIdPartition, str] = field(default_factory=dict)
    """Why each partition of ``undecodable`` could not be decoded (the decoder's error)."""

    @property
    def records(self) -> list[AcquiredRecord]:
        """The records acquired (``runs``), one by one, in partition and offset order; a new
        list at each read."""
        return [
            AcquiredRecord(
                r.topic_id, r.topic, r.partition, *fields, r.delivery_count, r.lock_timeout_ms
            )
            for r in self.runs
            for fields in r.records
        ]


@dataclass(slots=True)
class _Session:
    """The share session at one leader, as this member and the broker both know it."""

    epoch: int = sg.OPEN_SESSION_EPOCH  # the next request's
    partitions: frozenset[TopicIdPartition] = frozenset()  # in the session at the broker

    def advance(self, partitions: frozenset[TopicIdPartition]) -> None:
        """The request of this epoch was answered: the next one carries the next epoch."""
        self.partitions = partitions
        # Kafka wraps the epoch to 1 after INT32_MAX (0 would open a new session).
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1


def batches(acks: Mapping[int, sg.AcknowledgeType]) -> tuple[sg.AcknowledgementBatch, ...]:
    """``acks`` as acknowledgement batches: each run of consecutive offsets with one type."""
    items = sorted(acks.items())
    if not items:
        return ()
    out: list[sg.AcknowledgementBatch] = []
    first, kind = items[0]
    last = first
    for offset, ack in items[1:]:
        if offset != last + 1 or ack != kind:
            out.append(sg.AcknowledgementBatch(first, last, (int(kind),)))
            first, kind = offset, ack
        last = offset
    out.append(sg.AcknowledgementBatch(first, last, (int(kind),)))
    return tuple(out)


def _has_renew(acks: Mapping[int, sg.AcknowledgeType]) -> bool:
    return sg.AcknowledgeType.RENEW in acks.values()


@dataclass(slots=True, eq=False)
class FetchInFlight:
    """A round of ShareFetches sent (:meth:`ShareSessions.start_fetch`), its answers not
    taken yet."""

    outcome: FetchOutcome
    max_wait_ms: int
    ahead: bool
    idle: bool = False  # nothing to fetch from: taking it waits up to max_wait_ms
    plan: dict[CoordinatorNode, frozenset[TopicIdPartition]] = field(default_factory=dict)
    requests: dict[CoordinatorNode, sg.ShareFetchRequest] = field(default_factory=dict)
    held_back: dict[TopicIdPartition, dict[int, Any]] = field(default_factory=dict)
    answers: dict[CoordinatorNode, PendingAnswer] = field(default_factory=dict)
    sent_at: float = 0.0

    def ready(self, timeout_s: float, clock: Clock) -> bool:
        """Whether every answer has begun to arrive, waiting up to ``timeout_s`` in all."""
        deadline = clock.monotonic() + timeout_s
        return all(
            answer.ready(max(0.0, deadline - clock.monotonic())) for answer in self.answers.values()
        )


class ShareSessions:
    """The share sessions of one member, one per leader (see the module docstring)."""

    def __init__(
        self,
        membership: ShareGroupMembership,
        leaders: Leaders,
        transport: Transport,
        *,
        max_records: int,
        acquire_mode: sg.ShareAcquireMode = sg.ShareAcquireMode.BATCH_OPTIMIZED,
    ) -> None:
        self._membership = membership
        self._leaders = leaders
        self._link = LeaderLink(transport)
        self._max_records = max_records
        self._acquire_mode = acquire_mode
        self._config = membership.config
        self._sessions: dict[CoordinatorNode, _Session] = {}
        self._located: dict[TopicIdPartition, tuple[str, CoordinatorNode | None]] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._stale = True  # look the leaders up before the next request
        self._refresh_after = 0.0  # not before (the membership's clock)
        self._names_after = 0.0  # the same, for a lookup of the topics' names alone
        # The acknowledgements the sessions owe of their own (see the module docstring): GAP
        # for an acquired offset that held no record (a transaction marker, compacted away),
        # RELEASE for a record that could not be decoded; sent with the partition's next
        # acknowledgements (a fetch carries them all), unless the lock of the answer that
        # acquired them has run out by then (the earliest, per partition; the membership's
        # clock): Kafka applies a partition's acknowledgements all or none, and one for a
        # record no longer held would fail the application's sent with it.
        self._owed: dict[TopicIdPartition, dict[int, sg.AcknowledgeType]] = {}
        self._owed_until: dict[TopicIdPartition, float] = {}
        self._failed = False  # a request of this round failed (see fetch)
        # Set by close: a fetch still on its way (ShareConsumer(fetch_ahead=True), its close's
        # time run out) must not open new sessions and acquire records nobody would release.
        self._closing = False

    # ------------------------------------------------------------------ the consumer's calls

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._names.get(topic_id)

    def named(self, partitions: frozenset[TopicIdPartition]) -> frozenset[tuple[str, int]]:
        """``partitions`` by topic name. A topic whose name is not known yet is looked up
        (with the leaders, at most once a ``retry_backoff_ms``), so that the assignment can
        be read by name before the first fetch; one still unknown is left out."""
        if any(t not in self._names for t, _ in partitions):
            now = self._membership.clock.monotonic()
            if now >= self._names_after:
                # Names only: the leaders are the fetching thread's to look up (a fetch may be
                # out meanwhile, with ShareConsumer(fetch_ahead=True)).
                self._names_after = now + self._config.retry_backoff_ms / 1000
                try:
                    found = self._leaders.locate(self._membership.topics)
                except Exception as e:  # asked again later
                    self._membership.note_problem(f"metadata lookup failed: {e!r}")
                else:
                    self._names.update({topic_id: t.name for topic_id, t in found.items()})
        return frozenset((self._names[t], p) for t, p in partitions if t in self._names)

    def fetch(self, acks: Acknowledgements, max_wait_ms: int) -> FetchOutcome:
        """One ShareFetch to each leader of the assignment (at once, each on its own
        connection), carrying ``acks``; RENEWs first, in a ShareAcknowledge.

        Raises:
            FatalBrokerError: an answer the member cannot go on from (authorization, a broker
                without share groups); the caller stops.
        """
        outcome = self.finish_fetch(self.start_fetch(acks, max_wait_ms), None)
        assert outcome is not None
        return outcome

    def start_fetch(
        self, acks: Acknowledgements, max_wait_ms: int, *, ahead: bool = False
    ) -> FetchInFlight:
        """The first half of :meth:`fetch`: the ShareFetches are sent (the RENEWs and the
        acknowledgements of partitions no longer fetched from are sent and answered);
        :meth:`finish_fetch` takes the answers. ``ahead``: the answers are taken later,
        after other work (their records' locks are counted from the sending, since they may
        have been waiting for a while). Until then the member sends nothing else to the
        leaders.
        """
        inflight = FetchInFlight(FetchOutcome(), max_wait_ms, ahead)
        outcome = inflight.outcome
        renewing = {tp: a for tp, a in acks.items() if _has_renew(a)}
        if renewing:
            outcome.acknowledged.update(self.acknowledge(renewing))
        acks = self._with_owed(
            {tp: a for tp, a in acks.items() if tp not in renewing}, every_owed=True
        )
        plan = self._plan()
        stray = {tp: a for tp, a in acks.items() if not any(tp in p for p in plan.values())}
        if stray:
            # Acknowledgements for partitions no longer fetched from: their own request.
            outcome.acknowledged.update(self.acknowledge(stray))
        if not plan:
            inflight.idle = True
            return inflight
        # Kafka refuses a ShareFetch that opens a session and carries acknowledgements
        # (INVALID_REQUEST, all of them lost): they follow it, in a ShareAcknowledge of the new
        # session, and that fetch does not wait for records.
        opening = {
            leader
            for leader in plan
            if self._sessions.get(leader, _Session()).epoch == sg.OPEN_SESSION_EPOCH
        }
        inflight.held_back = {
            tp: a
            for tp, a in acks.items()
            if tp not in stray and any(tp in plan[leader] for leader in opening)
        }
        inflight.requests = {
            leader: self._fetch_request(
                leader,
                wanted,
                {tp: a for tp, a in acks.items() if tp not in inflight.held_back},
                0 if any(tp in wanted for tp in inflight.held_back) else max_wait_ms,
            )
            for leader, wanted in plan.items()
        }
        inflight.plan = plan
        timeout_s = self._config.request_timeout_ms / 1000 + max_wait_ms / 1000
        self._failed = False
        if self._closing:
            # Nothing more is sent once closing: these acknowledgements' outcome is unknown.
            inflight.requests, inflight.held_back = {}, {}
            return inflight
        inflight.sent_at = self._membership.clock.monotonic()
        inflight.answers = self._start_all(
            inflight.requests, sg.ShareFetchResponse, timeout_s, ahead
        )
        return inflight

    def finish_fetch(self, inflight: FetchInFlight, timeout_s: float | None) -> FetchOutcome | None:
        """The second half of :meth:`fetch`: the answers of ``inflight`` taken, waiting up to
        ``timeout_s`` for them to begin to arrive (None: as long as the requests' timeout);
        None if one has not begun to arrive by then (ask again later).

        Raises:
            FatalBrokerError: as :meth:`fetch`.
        """
        if timeout_s is not None and not inflight.ready(timeout_s, self._membership.clock):
            return None
        outcome = inflight.outcome
        if inflight.idle:
            self._membership.wait_changed(inflight.max_wait_ms / 1000)
            return outcome
        # An answer taken after other work may have waited: its records' locks are counted
        # from when its request went (the broker took them after that), not from now.
        since = inflight.sent_at if inflight.ahead else None
        for leader, answer, answered_at in self._answers(inflight.answers, since):
            request, wanted = inflight.requests[leader], inflight.plan[leader]
            self._on_fetched(leader, request, wanted, answer, outcome, answered_at)
        inflight.answers = {}
        if inflight.held_back:
            self._acknowledge_held_back(inflight.held_back, outcome)
        if self._failed and not outcome.runs:
            # A failed fetch answers at once: wait before the next, as Kafka's clients do.
            self._membership.pause(self._config.retry_backoff_ms / 1000)
        return outcome

    def abandon_fetch(self, inflight: FetchInFlight) -> None:
        """Give up on the answers of ``inflight`` (the member is closing): whether its
        acknowledgements were applied is not known. A leader whose connection this closes
        ends the session there (releasing what the member held): it is forgotten."""
        for leader, answer in inflight.answers.items():
            if answer.abandon():
                self._sessions.pop(leader, None)
        inflight.answers = {}

    def _acknowledge_held_back(
        self, held_back: dict[TopicIdPartition, dict[int, Any]], outcome: FetchOutcome
    ) -> None:
        """Send the acknowledgements that waited for their session's opening fetch, but for
        a partition where that fetch acquired one of their records again: a new session
        releases what the old one held, so they were for a delivery that has ended, and the
        broker would apply them to the new one (which the application has not seen). Those
        are refused here (INVALID_RECORD_STATE, as the broker would have for the old
        delivery)."""
        again = {(r.topic_id, r.partition, r.offset) for r in outcome.records}
        ended = {
            tp for tp, acks in held_back.items() if any((*tp, offset) in again for offset in acks)
        }
        sending = {tp: acks for tp, acks in held_back.items() if tp not in ended}
        # (What the sessions owed goes too: for the records acquired again, it was noted
        # again.)
        if sending:
            outcome.acknowledged.update(self.acknowledge(sending))
        outcome.acknowledged.update({tp: ErrorCode.INVALID_RECORD_STATE for tp in ended})

    def acknowledge(self, acks: Acknowledgements) -> dict[TopicIdPartition, int]:
        """Send ``acks`` now, in a ShareAcknowledge to each partition's leader; the outcome
        per partition (a code, NONE for success)."""
        return self._acknowledge(self._with_owed(dict(acks)), closing=False)

    def close(self, acks: Acknowledgements) -> dict[TopicIdPartition, int]:
        """Send ``acks`` and close every share session (a ShareAcknowledge of epoch -1 to
        each leader): what the member still holds there is released at once."""
        self._closing = True
        try:
            return self._acknowledge(self._with_owed(dict(acks)), closing=True)
        finally:
            self._sessions.clear()

    # ------------------------------------------------------------------ requests

    def _plan(self) -> dict[CoordinatorNode, frozenset[TopicIdPartition]]:
        """Which partitions to fetch from at each leader."""
        assigned = self._membership.assignment()
        unlocated = any(self._located.get(tp, ("", None))[1] is None for tp in assigned)
        now = self._membership.clock.monotonic()
        if (self._stale or unlocated) and now >= self._refresh_after:
            # At most once a backoff: a partition may have no leader for a while.
            self._refresh_after = now + self._config.retry_backoff_ms / 1000
            self._refresh()
        plan: dict[CoordinatorNode, set[TopicIdPartition]] = {}
        for tp in assigned:
            leader = self._located.get(tp, ("", None))[1]
            if leader is not None:
                plan.setdefault(leader, set()).add(tp)
        # A session whose partitions all moved away (or left the assignment): close it.
        for leader in [s for s in self._sessions if s not in plan]:
            self._acknowledge_at(leader, {}, closing=True)
        return {leader: frozenset(tps) for leader, tps in plan.items()}

    def _refresh(self) -> None:
        try:
            found = self._leaders.locate(self._membership.topics)
        except Exception as e:  # the next poll asks again
            self._membership.note_problem(f"metadata lookup failed: {e!r}")
            return
        self._stale = False
        self._names.update({topic_id: t.name for topic_id, t in found.items()})
        self._located = {
            (topic_id, partition): (t.name, leader)
            for topic_id, t in found.items()
            for partition, leader in t.leaders.items()
        }

    def _fetch_request(
        self,
        leader: CoordinatorNode,
        wanted: frozenset[TopicIdPartition],
        acks: Acknowledgements,
        max_wait_ms: int,
    ) -> sg.ShareFetchRequest:
        session = self._sessions.setdefault(leader, _Session())
        opening = session.epoch == sg.OPEN_SESSION_EPOCH
        acked = {tp for tp in wanted if acks.get(tp)}
        # Opening: every partition; then only the new ones, and those with acknowledgements.
        named = wanted if opening else (wanted - session.partitions) | acked
        forgotten = frozenset() if opening else session.partitions - wanted
        return sg.ShareFetchRequest(
            group_id=self._config.group_id,
            member_id=self._membership.member_id,
            share_session_epoch=session.epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_records=self._max_records,
            batch_size=self._max_records,
            share_acquire_mode=self._acquire_mode,
            topics=tuple(
                sg.ShareFetchTopic(
                    topic_id,
                    tuple(
                        sg.ShareFetchPartition(p, batches(acks.get((topic_id, p), {})))
                        for p in partitions
                    ),
                )
                for topic_id, partitions in _by_topic(named)
            ),
            forgotten_topics_data=tuple(
                TopicIdPartitions(topic_id, partitions)
                for topic_id, partitions in _by_topic(forgotten)
            ),
        )

    def _send_all(
        self, requests: Mapping[CoordinatorNode, Any], response_type: type[R], timeout_s: float
    ) -> list[tuple[CoordinatorNode, R | TransportError, float]]:
        """Each request's answer (or the TransportError it got) and when it came, sent to all
        leaders at once."""
        return self._answers(self._start_all(requests, response_type, timeout_s, False), None)

    def _start_all(
        self,
        requests: Mapping[CoordinatorNode, Any],
        response_type: type[R],
        timeout_s: float,
        ahead: bool,
    ) -> dict[CoordinatorNode, PendingAnswer]:
        """Send each request to its leader; their answers to be taken by :meth:`_answers`."""
        clock = self._membership.clock
        started: dict[CoordinatorNode, PendingAnswer] = {}
        for i, leader in enumerate(requests):
            # Where the transport cannot send now and answer later, a request taken later
            # (ahead) or one of several (all at once) goes on a thread of the member's
            # clock, not a pool of its own: every wait must come from the clock (a simulated
            # member's included). The first of those taken at once is sent by this thread.
            started[leader] = self._link.start(
                requests[leader], response_type, leader, timeout_s, clock, ahead or i > 0
            )
        return started

    def _answers(
        self, started: Mapping[CoordinatorNode, PendingAnswer], since: float | None
    ) -> list[tuple[CoordinatorNode, Any, float]]:
        """Each started request's answer (or the TransportError it got) and when it came
        (where not known: now, or ``since`` if given, the answers being taken after other
        work)."""
        clock = self._membership.clock
        out: list[tuple[CoordinatorNode, Any, float]] = []
        for leader, pending in started.items():
            try:
                answer = pending.answer()
            except TransportError as e:
                answer = e
            came = pending.came_at()
            if came is None:
                came = clock.monotonic() if since is None else since
            out.append((leader, answer, came))
        return out

    # ------------------------------------------------------------------ answers

    def _on_fetched(
        self,
        leader: CoordinatorNode,
        request: sg.ShareFetchRequest,
        wanted: frozenset[TopicIdPartition],
        answer: sg.ShareFetchResponse | TransportError,
        outcome: FetchOutcome,
        answered_at: float,
    ) -> None:
        carried = [
            (t.topic_id, p.partition_index)
            for t in request.topics
            for p in t.partitions
            if p.acknowledgement_batches
        ]
        if isinstance(answer, TransportError):
            # The session's state at the broker is unknown: open a new one. Whether the
            # acknowledgements were applied, nobody knows.
            outcome.acknowledged.update({tp: NO_ANSWER for tp in carried})
            self._lost_leader(leader, f"ShareFetch to {leader}: {answer}")
            return
        if answer.error_code != ErrorCode.NONE:
            # Nothing of the request was applied.
            outcome.acknowledged.update({tp: answer.error_code for tp in carried})
            self._react(Api.SHARE_FETCH, leader, answer.error_code, answer.error_message)
            return
        self._sessions[leader].advance(wanted)
        for topic in answer.responses:
            for partition in topic.partitions:
                tp = (topic.topic_id, partition.partition_index)
                if tp in carried:
                    outcome.acknowledged[tp] = partition.acknowledge_error_code
                if partition.error_code != ErrorCode.NONE:
                    self._react(Api.SHARE_FETCH, leader, partition.error_code, None)
                    continue
                lock_ms = answer.acquisition_lock_timeout_ms
                try:
                    acquired = self._acquired(tp, partition, lock_ms)
                except ProtocolCodecError as e:
                    self._membership.note_problem(f"records of {tp} could not be decoded: {e}")
                    acquired = []
                    outcome.undecodable.extend(self._undecodable(tp, partition, lock_ms))
                    outcome.undecodable_why[tp] = str(e)
                if tp in self._owed:
                    until = answered_at + lock_ms / 1000
                    self._owed_until[tp] = min(self._owed_until.get(tp, until), until)
                if acquired:
                    outcome.runs.extend(acquired)
                    outcome.answered_at[tp] = answered_at

    def _undecodable(
        self, tp: TopicIdPartition, partition: sg.ShareFetchPartitionData, lock_ms: int
    ) -> list[AcquiredRecord]:
        """The records ``partition``'s answer acquired, whose batches could not be decoded:
        each offset of its acquired ranges, with the range's delivery count; a RELEASE of
        each is owed (see the module docstring), so that they go back to the group with the
        next request rather than when their lock runs out."""
        topic_id, index = tp
        topic = self._names.get(topic_id, str(topic_id))
        owed = self._owed.setdefault(tp, {})
        out: list[AcquiredRecord] = []
        for r in sorted(partition.acquired_records, key=lambda r: r.first_offset):
            for offset in range(r.first_offset, r.last_offset + 1):
                owed[offset] = sg.AcknowledgeType.RELEASE
                out.append(
                    AcquiredRecord(
                        topic_id=topic_id,
                        topic=topic,
                        partition=index,
                        offset=offset,
                        key=None,
                        value=None,
                        headers=(),
                        timestamp=-1,
                        delivery_count=r.delivery_count,
                        lock_timeout_ms=lock_ms,
                    )
                )
        if not owed:
            del self._owed[tp]
        return out

    def _acquired(
        self, tp: TopicIdPartition, partition: sg.ShareFetchPartitionData, lock_ms: int
    ) -> list[AcquiredRun]:
        """The records of ``partition``'s answer this member acquired; GAPs owed for the
        acquired offsets found empty.

        Raises:
            ProtocolCodecError: its batches could not be decoded.
        """
        groups, through = codec.acquired_groups(partition)
        topic_id, index = tp
        topic = self._names.get(topic_id, str(topic_id))
        # An offset in a batch read whole that holds no record is a GAP (a transaction
        # marker, compacted away); one past the batches read (a batch cut short) is not known
        # to be empty: left unacknowledged, it comes back when its lock runs out rather than
        # being archived unread. Usually every offset holds a record: then none is looked for.
        readable = [
            (r.first_offset, min(r.last_offset, through)) for r in partition.acquired_records
        ]
        got = sum(len(fields) for fields, _ in groups)
        if got != sum(max(0, last - first + 1) for first, last in readable):
            delivered = {f[0] for fields, _ in groups for f in fields}
            for first, last in readable:
                for offset in range(first, last + 1):
                    if offset not in delivered:
                        self._owed.setdefault(tp, {})[offset] = sg.AcknowledgeType.GAP
        return [
            AcquiredRun(topic_id, topic, index, count, lock_ms, fields)
            for fields, count in groups
            if fields
        ]

    def _lost_leader(self, leader: CoordinatorNode, problem: str) -> None:
        """A request to ``leader`` got no answer: the broker may be gone (its partitions led
        elsewhere now), and the session's state there is unknown: a new one, and the leaders
        looked up again."""
        self._failed = True
        self._stale = True
        self._sessions.pop(leader, None)
        self._membership.note_problem(problem)

    def _react(self, api: Api, leader: CoordinatorNode, code: int, message: str | None) -> None:
        """Act on ``code`` as ``classify.py``'s column for ``api`` says."""
        reaction = classify.reaction(api, code)
        self._failed = True
        self._membership.note_problem(
            f"{api.value} to {leader} returned {error_name(code)}"
            + (f" ({message})" if message else "")
        )
        if reaction.next is Next.FATAL:
            self._membership.fail(self._membership.error_for(api, code, message))
        if reaction.next is Next.REFRESH_METADATA:
            self._stale = True
            self._sessions.pop(leader, None)
        elif reaction.next is Next.NEW_SESSION:
            self._sessions.pop(leader, None)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._membership.heartbeat_soon()

    # ------------------------------------------------------------------ acknowledgements

    def _acknowledge(self, acks: Acknowledgements, *, closing: bool) -> dict[TopicIdPartition, int]:
        results: dict[TopicIdPartition, int] = {}
        by_leader: dict[CoordinatorNode, dict[TopicIdPartition, Mapping[int, Any]]] = {}
        for tp, offsets in acks.items():
            leader = self._located.get(tp, ("", None))[1]
            if not offsets:
                continue
            if leader is None or leader not in self._sessions:
                results[tp] = NO_SESSION
                continue
            by_leader.setdefault(leader, {})[tp] = offsets
        leaders = set(by_leader) | (set(self._sessions) if closing else set())
        for leader in leaders:
            results.update(self._acknowledge_at(leader, by_leader.get(leader, {}), closing))
        return results

    def _acknowledge_at(
        self, leader: CoordinatorNode, acks: Acknowledgements, closing: bool
    ) -> dict[TopicIdPartition, int]:
        session = self._sessions.get(leader)
        if session is None or session.epoch == sg.OPEN_SESSION_EPOCH:
            self._sessions.pop(leader, None)
            return {tp: NO_SESSION for tp in acks}  # no session: nothing to acknowledge in
        request = sg.ShareAcknowledgeRequest(
            group_id=self._config.group_id,
            member_id=self._membership.member_id,
            share_session_epoch=sg.CLOSE_SESSION_EPOCH if closing else session.epoch,
            is_renew_ack=any(_has_renew(a) for a in acks.values()),
            topics=tuple(
                sg.ShareAcknowledgeTopic(
                    topic_id,
                    tuple(
                        sg.ShareAcknowledgePartition(p, batches(acks[(topic_id, p)]))
                        for p in partitions
                    ),
                )
                for topic_id, partitions in _by_topic(frozenset(acks))
            ),
        )
        if closing:
            self._sessions.pop(leader, None)
        timeout_s = self._config.request_timeout_ms / 1000
        ((_, answer, _),) = self._send_all(
            {leader: request}, sg.ShareAcknowledgeResponse, timeout_s
        )
        if isinstance(answer, TransportError):
            self._lost_leader(leader, f"ShareAcknowledge to {leader}: {answer}")
            return {tp: NO_ANSWER for tp in acks}
        if answer.error_code != ErrorCode.NONE:
            self._react(Api.SHARE_ACKNOWLEDGE, leader, answer.error_code, answer.error_message)
            return {tp: answer.error_code for tp in acks}
        if not closing:
            session.advance(session.partitions)
        # A partition the answer does not name: whether its acknowledgements were applied,
        # nobody knows (as for a ShareFetch's).
        results: dict[TopicIdPartition, int] = {tp: NO_ANSWER for tp in acks}
        for topic in answer.responses:
            for partition in topic.partitions:
                tp = (topic.topic_id, partition.partition_index)
                results[tp] = partition.error_code
                if partition.error_code != ErrorCode.NONE:
                    self._react(Api.SHARE_ACKNOWLEDGE, leader, partition.error_code, None)
        return results

    def _with_owed(
        self, acks: Acknowledgements, *, every_owed: bool = False
    ) -> dict[TopicIdPartition, dict[int, Any]]:
        """``acks`` and the acknowledgements the sessions owe for their partitions (GAPs,
        RELEASEs of records not decoded; ``every_owed``: for any partition)."""
        out: dict[TopicIdPartition, dict[int, Any]] = {tp: dict(a) for tp, a in acks.items()}
        now = self._membership.clock.monotonic()
        for tp in list(self._owed):
            if tp in out or every_owed:
                owed = self._owed.pop(tp)
                if now < self._owed_until.pop(tp, math.inf):  # else: their lock ran out
                    out[tp] = {**owed, **out.get(tp, {})}
        return out


class LeaderLink:
    """Sends share-group requests to a partition's leader, on a connection of their own per
    leader with Kafka's transport (apart from the coordinator's, where the heartbeats go);
    any other transport gets them with the leader as its ``coordinator``."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        from .._transport.kafka import KafkaTransport

        self._kafka = transport if isinstance(transport, KafkaTransport) else None

    def send(
        self,
        request: sg.ShareFetchRequest | sg.ShareAcknowledgeRequest,
        response_type: type[R],
        leader: CoordinatorNode,
        timeout_s: float,
    ) -> R:
        if self._kafka is None:
            return self._transport.send(
                request, response_type, coordinator=leader, timeout_s=timeout_s
            )
        return self._kafka.send_dedicated(
            request, response_type, purpose="share", node=leader, timeout_s=timeout_s
        )

    def start(
        self,
        request: sg.ShareFetchRequest | sg.ShareAcknowledgeRequest,
        response_type: type[R],
        leader: CoordinatorNode,
        timeout_s: float,
        clock: Clock,
        threaded: bool,
    ) -> PendingAnswer:
        """Send ``request`` and return its answer to come. Kafka's transport sends it now
        and reads the answer when it is taken; with any other (or kafka-python's
        connections), the request is sent on a thread of ``clock`` if ``threaded``, else
        when its answer is taken."""
        if self._kafka is not None:
            try:
                sent = self._kafka.send_dedicated_ahead(
                    request, response_type, purpose="share", node=leader, timeout_s=timeout_s
                )
            except TransportError as e:
                return _Answered(e)
            if sent is not None:
                return _Direct(sent)

        def send() -> Any:
            return self.send(request, response_type, leader, timeout_s)

        return _OnThread(clock, send) if threaded else _WhenTaken(send)


class PendingAnswer(Protocol):
    """A request's answer to come (:meth:`LeaderLink.start`)."""

    def ready(self, timeout_s: float) -> bool:
        """Whether :meth:`answer` would not wait for the broker, waiting up to
        ``timeout_s`` for that."""
        ...

    def answer(self) -> Any:
        """The answer. Raises TransportError: none came."""
        ...

    def abandon(self) -> bool:
        """Give up on the answer; whether that closed the connection (so the broker ended
        the share session)."""
        ...

    def came_at(self) -> float | None:
        """When the answer came, by the member's clock, if known (once taken)."""
        ...


class _Direct:
    """Sent on the transport's own connection; the answer is read when taken."""

    def __init__(self, sent: DedicatedAnswer[Any]) -> None:
        self._sent = sent

    def ready(self, timeout_s: float) -> bool:
        return self._sent.ready(timeout_s)

    def answer(self) -> Any:
        return self._sent.answer()

    def abandon(self) -> bool:
        self._sent.abandon()
        return True

    def came_at(self) -> float | None:
        return None  # read when taken, having come at any time since it was sent


class _Answered:
    """A request that failed as it was sent."""

    def __init__(self, error: TransportError) -> None:
        self._error = error

    def ready(self, timeout_s: float) -> bool:
        return True

    def answer(self) -> Any:
        raise self._error

    def abandon(self) -> bool:
        return False

    def came_at(self) -> float | None:
        return None


class _WhenTaken:
    """Sent, and answered, when its answer is taken."""

    def __init__(self, send: Callable[[], Any]) -> None:
        self._send = send

    def ready(self, timeout_s: float) -> bool:
        return True

    def answer(self) -> Any:
        return self._send()

    def abandon(self) -> bool:
        return False

    def came_at(self) -> float | None:
        return None  # taken as it came


class _OnThread:
    """Sent and answered on a thread of the member's clock."""

    def __init__(self, clock: Clock, send: Callable[[], Any]) -> None:
        self._done = clock.event()
        self._answer: Any = None
        self._error: BaseException | None = None
        self._came: float | None = None

        def run() -> None:
            try:
                self._answer = send()
            except BaseException as e:  # handed to the thread that takes the answer
                self._error = e
            finally:
                self._came = clock.monotonic()
                self._done.set()

        self._thread = clock.thread(run, "coordination-share-fetch")
        self._thread.start()

    def ready(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)

    def answer(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._answer

    def abandon(self) -> bool:
        return False  # the thread ends with its request's timeout; its answer is dropped

    def came_at(self) -> float | None:
        return self._came


def _by_topic(partitions: Iterable[TopicIdPartition]) -> list[tuple[uuid.UUID, tuple[int, ...]]]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in partitions:
        by_topic.setdefault(topic_id, []).append(partition)
    return [(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())]
