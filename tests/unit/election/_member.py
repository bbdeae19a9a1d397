"""One LeaderElection member whose rounds a test scripts, on a scripted broker and a manual
clock.

No engine thread runs: the test drives the member's steps (join, sync, heartbeat) on its own
thread, and moves the clock itself. The broker keeps the group's committed offsets (where
the election stores its highest token) and answers OffsetFetch and OffsetCommit from them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from coordination.testing import ManualClock, ScriptedTransport, SentRequest
from coordination.testing import messages as m
from recipes.election import AsyncLeaderElection, LeaderElection, Leadership
from recipes.election._wire import (
    Candidate,
    Outcome,
    decode_candidate,
    encode_candidate,
    encode_outcome,
)

NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
ME = "m-a"
IDENTITY = "http://a"
SESSION_TIMEOUT_MS = 10_000
# The lease holds while more than the margin (heartbeat_interval_ms, 3 s) is left of the
# 10 s after the last confirmed request: a leader is valid for 7 s after it.
LEASE_LOW_AFTER_S = 7.0
# What the broker answers this member's JoinGroup and SyncGroup, but for the round's details.
JOINED = m.JoinGroupResponse(
    error_code=0, protocol_type="election", protocol_name="election-v1", member_id=ME
)
SYNCED = m.SyncGroupResponse(error_code=0, protocol_type="election", protocol_name="election-v1")


class Broker(ScriptedTransport):
    """A scripted broker that also keeps the group's committed offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: dict[tuple[str, int], int] = {}
        self.commits: list[tuple[int, int]] = []  # (generation, offset) of every commit
        self.refuse_commits: int = 0  # the error code commits get; 0: accepted

    def send(
        self,
        request: m.Request,
        response_type: type[Any],
        *,
        coordinator: Any,
        timeout_s: float,
        then: Any = None,
    ) -> Any:
        if isinstance(request, m.OffsetFetchRequest):
            self.sent.append(SentRequest(request, coordinator, timeout_s))
            return m.OffsetFetchResponse(
                error_code=0,
                partitions=tuple(
                    (t, p, self.committed.get((t, p), -1), None, 0) for t, p in request.partitions
                ),
            )
        if isinstance(request, m.OffsetCommitRequest):
            self.sent.append(SentRequest(request, coordinator, timeout_s))
            for t, p, offset, _ in request.offsets:
                self.commits.append((request.generation_id, offset))
                if not self.refuse_commits:
                    self.committed[(t, p)] = offset
            return m.OffsetCommitResponse(
                partitions=tuple((t, p, self.refuse_commits) for t, p, _, _ in request.offsets)
            )
        return super().send(request, response_type, coordinator=coordinator, timeout_s=timeout_s)


class Member:
    """The member "http://a" (member id ``m-a``); its callbacks are recorded in ``events``,
    and the thread each ran on in ``threads``.

    ``build`` makes the election (default :class:`LeaderElection`; an
    :class:`AsyncLeaderElection` is kept as ``face``, its threaded election as ``election``).
    """

    def __init__(
        self,
        broker: Broker | None = None,
        *,
        build: Callable[..., LeaderElection | AsyncLeaderElection] = LeaderElection,
        **kw: Any,
    ) -> None:
        self.broker = broker or Broker()
        self.clock = ManualClock()
        self.events: list[tuple[str, object]] = []
        self.threads: list[threading.Thread] = []  # where each of events ran
        # What the group's offsets held whenever on_elected ran.
        self.stored_when_elected: list[dict[tuple[str, int], int]] = []
        self.advertised: list[Candidate] = []  # this member's metadata in every JoinGroup
        made = build(
            "g",
            identity=IDENTITY,
            on_elected=self._elected,
            on_deposed=lambda ls: self._record(("deposed", ls.reason)),
            on_leader_change=lambda info: self._record(
                ("leader", None if info is None else (info.identity, info.token))
            ),
            transport=self.broker,
            clock=self.clock,
            bootstrap_servers="x:1",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            **{"heartbeat_interval_ms": 3_000, **kw},  # the lease margin the tests count with
        )
        self.face = made
        self.election = made if isinstance(made, LeaderElection) else made.election
        self.engine = self.election.coordinator._engine
        self.engine.resolve_protocol_type()
        # The test drives the member's steps itself: start() must not start its threads
        # (nor may anything the election asks of its member, e.g. ensure_active_group).
        self.election._started = True
        setattr(self.engine, "start", lambda: None)  # noqa: B010
        self.broker.prepare(NODE)
        self.generation = 0

    def _record(self, event: tuple[str, object]) -> None:
        self.events.append(event)
        self.threads.append(threading.current_thread())

    def _elected(self, leadership: Leadership) -> None:
        self._record(("elected", leadership.token))
        self.stored_when_elected.append(dict(self.broker.committed))

    # ------------------------------------------------------------------ rounds

    def lead(self, *others: tuple[str, Candidate]) -> None:
        """A round in which this member is the group's rebalance leader, with ``others``."""
        self.script_lead(*others)
        self.rebalance()

    def follow(self, outcome: Outcome) -> None:
        """A round led by member ``m-b``, whose answer is ``outcome``."""
        self.script_follow(outcome)
        self.rebalance()

    def script_lead(self, *others: tuple[str, Candidate]) -> None:
        """Script the answers of :meth:`lead`'s round, for :meth:`rebalance`."""
        self.generation += 1
        members = tuple(
            m.JoinGroupResponseMember(member_id, None, encode_candidate(c))
            for member_id, c in others
        )
        self.broker.prepare(self._join_answer(ME, members), response_type=m.JoinGroupResponse)

        def sync(request: m.Request) -> m.Response:
            assert isinstance(request, m.SyncGroupRequest)
            return self._synced(dict(request.assignments)[ME])

        self.broker.prepare(sync, response_type=m.SyncGroupResponse)

    def script_follow(self, outcome: Outcome) -> None:
        """Script the answers of :meth:`follow`'s round, for :meth:`rebalance`."""
        self.generation += 1
        self.broker.prepare(self._join_answer("m-b", ()), response_type=m.JoinGroupResponse)
        self.broker.prepare(self._synced(encode_outcome(outcome)))

    def rebalance(self) -> None:
        """Rejoin, through every round scripted so far."""
        self.engine.request_rejoin("the test's next round")
        assert self.engine.join_group_if_needed(deadline=None)
        assert self.broker.pending() == 0

    def _join_answer(
        self, leader: str, others: tuple[m.JoinGroupResponseMember, ...]
    ) -> Callable[[m.Request], m.Response]:
        generation = self.generation

        def join(request: m.Request) -> m.Response:
            assert isinstance(request, m.JoinGroupRequest)
            ((_, metadata),) = request.protocols
            self.advertised.append(decode_candidate(metadata))
            me = (m.JoinGroupResponseMember(ME, None, metadata),) if leader == ME else ()
            return replace(JOINED, generation_id=generation, leader=leader, members=me + others)

        return join

    @staticmethod
    def _synced(assignment: bytes) -> m.SyncGroupResponse:
        return replace(SYNCED, assignment=assignment)

    def rejoin_reasons(self) -> tuple[str, ...]:
        return self.election.coordinator.metrics().rejoin_reasons
