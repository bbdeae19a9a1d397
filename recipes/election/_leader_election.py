"""Leader election over a Kafka group, with fencing tokens and a lease that deposes in time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeVar

from coordination import MemberMetrics
from coordination.clock import Clock
from coordination.errors import ConfigurationError, CoordinationTimeoutError
from coordination.parts import check_int
from coordination.transport import Transport

from .._recipe import Recipe
from ._elector import ElectionCallbacks, Elector
from ._leadership import LeaderInfo, Leadership
from ._wire import PROTOCOL_NAME, PROTOCOL_TYPE, Candidate

log = logging.getLogger("recipes.election")

T = TypeVar("T")

_PROTOCOL: Final = (PROTOCOL_TYPE, PROTOCOL_NAME)

# The longest the lease watchdog waits between two looks while this member leads.
_WATCHDOG_S: Final = 0.25

DEFAULT_TOKEN_TOPIC: Final = "__consumer_offsets"
"""Where the group stores its highest fencing token by default (as partition 0's offset)."""


@dataclass(frozen=True, slots=True)
class ElectionMetrics:
    """A snapshot from :meth:`LeaderElection.metrics`."""

    is_leader: bool
    """This member leads now (its lease holds)."""
    token: int | None
    """Its leadership's fencing token, None if it does not lead."""
    leader: str | None
    """The group's leader's identity as of this member's last rebalance."""
    leader_token: int | None
    """That leader's token."""
    highest_token: int
    """The highest token this member has seen (-1: none)."""
    times_elected: int
    """Leaderships this member took up."""
    times_deposed: int
    """Leaderships it lost (moved, left, lease ran out, fenced)."""
    leader_changes: int
    """Times the group's leader changed, as this member saw it (None counts as a leader)."""
    member: MemberMetrics
    """The group member's counters (rebalances, heartbeats, ...)."""


class LeaderElection(Recipe):
    """Elect exactly one leader among the members of a Kafka group.

    Example:
        def lead(leadership):
            while not leadership.lost.wait(60):
                leadership.check()
                run_the_nightly_job(token=leadership.token)

        with LeaderElection("reports-scheduler", identity="http://10.0.0.7:8080",
                            bootstrap_servers="localhost:9092") as election:
            election.run(lead)      # blocks; lead() runs only while this member leads

    Members advertise an ``identity`` (how the others reach them), whether they are
    ``eligible`` and a ``priority``. In each rebalance the group's rebalance leader keeps the
    current leader if it is still a member (sticky: members joining or leaving do not move
    leadership), else picks the eligible member of highest priority, ties broken by the
    smallest identity. Every member learns who leads (:meth:`leader`); the leader gets a
    :class:`Leadership` with a fencing token that grows with every new leadership.

    Safety:
        A leader gives up leadership before anyone else can be given it. The broker cannot
        remove a member sooner than ``min(session_timeout_ms, rebalance_timeout_ms)`` after
        the last request that confirmed its membership was sent; a leader that cannot
        confirm its membership considers itself deposed ``lease_margin_ms`` before that, sets
        ``leadership.lost`` and calls ``on_deposed``. So two members never both believe they
        lead, provided this host's clock does not run slower than the broker's by more than
        the margin, and a paused process checks (:meth:`Leadership.check`) before acting:
        a process frozen past its lease (SIGSTOP, a VM pause, a GC stall) learns on its first
        check after resuming that it was deposed. An action already under way when the pause
        began cannot be stopped that way; make it count only with the token (a store that
        rejects tokens lower than one it has seen) or a transactional producer
        (:meth:`Leadership.transactional_producer`), which the broker fences.

    Fencing tokens:
        A new leader's token exceeds the generation, every token a member has seen and the
        token stored in the group's committed offsets, as the offset of partition 0 of
        ``token_topic`` (by default ``__consumer_offsets``: the broker refuses offsets of
        topics that do not exist, and that one always does). A member elected leader
        commits its token there, fenced by its generation. It does so before it counts as
        leader (before ``on_elected`` runs, :meth:`run` calls its function or
        :meth:`Leadership.check` passes) unless the token is the generation id and the
        group already has a stored token: the broker stored that generation before it
        answered the SyncGroup, so no later leadership can get the token, and the member
        leads at once and commits right after. If a commit that comes first is refused or
        its outcome stays unknown (no answer, and reading the offset back does not show the
        token), it does not lead and the group elects again, with a higher token. So tokens keep
        growing when every member restarts and the broker deletes the group. The stored token
        lasts as long as the group's offsets: the broker deletes them once the group has been
        empty for ``offsets.retention.minutes`` (default 7 days); a group that stays empty
        longer starts again from its generation.

    States:
        candidate -> leader: elected in a rebalance; ``on_elected`` runs.
        leader -> candidate: deposed (lease ran out, membership lost, left, stepped down, or
        leadership moved); ``leadership.lost`` is set, then ``on_deposed`` runs.

    Callbacks:
        ``on_elected(leadership)``, ``on_deposed(leadership)`` and ``on_leader_change(info)``
        run one at a time. ``on_elected`` and ``on_leader_change`` run on the group's
        membership thread; ``on_deposed`` runs on whichever thread notices first: the
        membership thread, the election's lease watchdog, or the caller of :meth:`close`,
        :meth:`set_eligible`, :meth:`run`, or of a check (``is_leader``,
        :meth:`Leadership.check`) that finds the lease ran out. They must return quickly
        (start a thread for long work, or use :meth:`run`) and must not call :meth:`close`.

    Time and I/O:
        Every wait, lock, event and thread of the election (``leadership.lost`` included)
        comes from its member's clock (``clock=``), and every request goes through its
        transport (``transport=``), so tests can run an election on a manual or simulated
        clock and a scripted broker (``coordination.testing``).
    """

    _KIND: ClassVar[str] = "election"
    _DEFAULTS: ClassVar[Mapping[str, Any]] = {
        # A crashed leader is replaced within about session + one heartbeat (11 s), where
        # Kafka's consumer defaults (45 s / 3 s) would take 48 s; Schema Registry's election
        # uses 10 s / 3 s. Ten heartbeats per session let a leader miss nine before it is
        # evicted. docs/election.md#failover-time has the table.
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        # A member that heartbeats but does not rejoin holds an election up this long.
        "rebalance_timeout_ms": 20_000,
    }
    _LOG: ClassVar[logging.Logger] = log

    def __init__(
        self,
        group_id: str,
        *,
        identity: str,
        eligible: bool = True,
        priority: int = 0,
        on_elected: Callable[[Leadership], None] | None = None,
        on_deposed: Callable[[Leadership], None] | None = None,
        on_leader_change: Callable[[LeaderInfo | None], None] | None = None,
        lease_margin_ms: int | None = None,
        transactional_id: str | None = None,
        token_topic: str = DEFAULT_TOKEN_TOPIC,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the election's group (one group per election; not a consumer group).
            identity: how the others reach this member, e.g. ``"http://10.0.0.7:8080"``;
                unique within the group.
            eligible: False for a member that only observes (it never leads).
            priority: in a free election the highest priority wins.
            on_elected: called when this member becomes leader.
            on_deposed: called when it stops being leader, after ``leadership.lost`` is set.
            on_leader_change: called on every member when the leader changes (None: no leader).
            lease_margin_ms: how long before its membership lease runs out a leader deposes
                itself; default ``heartbeat_interval_ms``.
            transactional_id: the transactional id of the leader's producer; default
                ``"<group_id>.leader"``.
            token_topic: an existing topic under whose partition 0 the group's offsets store
                the highest fencing token; default ``"__consumer_offsets"``. With ACLs, the
                members need Read on it (OffsetCommit) and Describe (OffsetFetch); name a
                topic of your own to avoid granting them on ``__consumer_offsets``.
            transport: where the member's requests go, as for :class:`coordination.Coordinator`;
                default: Kafka. Tests pass a ``coordination.testing.ScriptedTransport``.
            clock: where every time read, wait, lock, event and thread of the election and
                its member come from, as for :class:`coordination.Coordinator`; default: the
                system's. Tests pass a ``coordination.testing.ManualClock``.
            **settings: the group's settings (``bootstrap_servers``, ``session_timeout_ms``,
                TLS, SASL, ...), as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: a setting or argument is invalid; the message names it.
        """
        if not isinstance(identity, str) or not identity.strip():
            raise ConfigurationError(
                "identity must be a non-empty string telling the others how to reach this "
                "member, e.g. 'http://host:8080'"
            )
        check_int("priority", priority)
        if not -(2**63) <= priority < 2**63:
            # Other members' decoders refuse metadata outside int64: this member would never
            # take part in an election.
            raise ConfigurationError(f"priority must fit in 64 bits (signed), got {priority}")
        if not isinstance(token_topic, str) or not token_topic:
            raise ConfigurationError(
                f"token_topic must name an existing topic, got {token_topic!r}"
            )
        super().__init__(group_id, _PROTOCOL, transport=transport, clock=clock, settings=settings)
        lease = self._guard_lease(lease_margin_ms, why=", or a leader would never be valid")
        self.identity = identity
        self.priority = priority
        self.transactional_id = transactional_id or f"{group_id}.leader"
        self._elector = Elector(
            self._ctx,
            lease,
            Candidate(identity, bool(eligible), priority),
            transactional_id=self.transactional_id,
            token_partition=(token_topic, 0),
            callbacks=ElectionCallbacks(on_elected, on_deposed, on_leader_change),
        )
        self._member.listen(self._elector)
        # Its metadata names the generation it holds (Candidate.generation), so every rejoin
        # makes the broker rebalance: a leader's departure goes ahead of its LeaveGroup.
        self._member.rejoin_changes_metadata = True

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout: float = 30.0) -> None:
        """Give up leadership (``on_deposed`` runs first), leave the group, stop (idempotent).

        A leader's departure makes the group elect the next leader at once.

        Args:
            timeout: seconds for the whole close.

        Raises:
            CoordinatorStateError: called from a callback on the group's membership thread.
        """
        super().close(timeout)

    def _starting(self) -> None:
        # Depose the leader when its lease runs out, even if nothing else happens.
        elector = self._elector
        self._watch_lease(
            elector.lease_ran_out, active=elector.leads, poll_s=_WATCHDOG_S, name="election-lease"
        )

    def _after_close(self) -> None:
        # on_leave_prepare deposed a leader already, unless the member could not run it.
        self._elector.depose_current("the election was closed", expected=True)

    def _describe(self) -> str:
        leader = self._elector.leader()
        return (
            f"identity={self.identity!r} leader={leader.identity if leader else None!r} "
            f"is_leader={self.is_leader}"
        )

    # ------------------------------------------------------------------ what users ask

    @property
    def is_leader(self) -> bool:
        """True while this member leads (checked against its lease at the time of the call)."""
        return self._elector.leadership() is not None

    def leadership(self) -> Leadership | None:
        """This member's current leadership, or None if it does not lead."""
        return self._elector.leadership()

    def leader(self) -> LeaderInfo | None:
        """The group's leader as of this member's last rebalance; None if there is none or
        this member is not (yet) in the group."""
        return self._elector.leader()

    def members(self) -> Mapping[str, str]:
        """Every member's identity by member id, as of this member's last rebalance."""
        return self._elector.members()

    def metrics(self) -> ElectionMetrics:
        """What this member has seen and done: whether it leads, with which token, how often
        it was elected and deposed, and its group member's counters."""
        elector = self._elector
        leadership = elector.leadership()
        leader = elector.leader()
        with self._ctx.lock:
            won, lost, changes = (
                elector.times_elected,
                elector.times_deposed,
                elector.leader_changes,
            )
        return ElectionMetrics(
            is_leader=leadership is not None,
            token=leadership.token if leadership is not None else None,
            leader=leader.identity if leader is not None else None,
            leader_token=leader.token if leader is not None else None,
            highest_token=elector.highest_token(),
            times_elected=won,
            times_deposed=lost,
            leader_changes=changes,
            member=self._member.metrics(),
        )

    def wait_for_leader(self, timeout: float | None = None) -> LeaderInfo:
        """Start if needed and block until the group has a leader; return it.

        Args:
            timeout: seconds to wait; None waits forever.

        Returns:
            The leader.

        Raises:
            CoordinationTimeoutError: no leader within ``timeout`` seconds; the message says
                why (this member not in the group yet: the bootstrap servers and the last
                problem, e.g. the cluster could not be reached; or no eligible member).
            DuplicateIdentityError: another member uses this member's identity.
            CoordinatorStateError: the election was closed.
            FatalBrokerError: the member stopped on an error a person must fix.
            ConnectionFailedError: the cluster refuses these settings (SASL, TLS).
        """
        self.start()
        return self._wait(self._leader_or_problem, timeout, self._why_no_leader)

    def _why_no_leader(self) -> str:
        """What a timed-out :meth:`wait_for_leader` waited for, and why it did not come."""
        member = self._member
        servers = member.config.connection.get("bootstrap_servers")
        try:
            member.ensure_active_group(timeout=0)
        except CoordinationTimeoutError as e:
            # The member's own account: the servers could not be reached (and why), or its
            # state, coordinator and last problem.
            cause = str(e).split(" not stable after 0s", 1)[-1].strip(":; ")
            if str(servers) in cause:  # "the bootstrap servers ... could not be reached (...)"
                return f"a leader to be elected: this member is not in the group yet: {cause}"
            return (
                f"a leader to be elected: this member is not in the group yet (bootstrap "
                f"servers {servers!r}; {cause.strip('()')})"
            )
        return (
            "a leader to be elected: this member is in the group, whose last election named "
            "no leader (is any member eligible?)"
        )

    def set_eligible(self, eligible: bool) -> None:
        """Enter or leave the running. A leader that becomes ineligible is deposed first.

        Args:
            eligible: True to stand in elections, False to only observe.
        """
        self._elector.set_eligible(eligible)

    def run(self, func: Callable[[Leadership], T], timeout: float | None = None) -> T:
        """Wait to be elected, call ``func(leadership)``, then step down; return its result.

        ``func`` runs on the calling thread only while this member leads; it must watch
        ``leadership.lost`` (or call ``leadership.check()``) and return soon after leadership
        is lost. When it returns (or raises), this member steps down if it still leads and
        stays out of the running until ``run`` is called again, so another member takes
        over: the same contract as kazoo's ``Election.run``.

        Args:
            func: what to do as leader.
            timeout: seconds to wait to be elected; None waits forever.

        Returns:
            What ``func`` returned.

        Raises:
            CoordinationTimeoutError: not elected within ``timeout`` seconds.
            DuplicateIdentityError: another member uses this member's identity.
            CoordinatorStateError: the election was closed.
            FatalBrokerError: the member stopped on an error a person must fix.
        """
        self.set_eligible(True)
        self.start()
        leadership = self._wait(self._leadership_or_problem, timeout, "this member to be elected")
        try:
            return func(leadership)
        finally:
            # Step down (if still leading) and leave the running either way, so the group
            # does not elect this member again while no func runs.
            self.set_eligible(False)

    def _leader_or_problem(self) -> LeaderInfo | None:
        self._elector.check_problem()
        return self._elector.leader()

    def _leadership_or_problem(self) -> Leadership | None:
        self._elector.check_problem()
        return self._elector.leadership()
