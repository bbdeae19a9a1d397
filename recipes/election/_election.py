"""Leader election over a Kafka group, with fencing tokens and a lease that deposes in time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from typing_extensions import Self

from coordination import Coordinator, Member, MemberState, OffsetAndMetadata, ProtocolMetadata
from coordination._lease import LeaseGuard, engine_clock
from coordination.errors import (
    CommitFailedError,
    ConfigurationError,
    CoordinationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
    ProtocolCodecError,
)

from ._choice import choose_leader
from ._wire import (
    PROTOCOL_NAME,
    PROTOCOL_TYPE,
    Candidate,
    Outcome,
    decode_outcome,
    encode_candidate,
    encode_outcome,
)

log = logging.getLogger("recipes.election")

T = TypeVar("T")
V = TypeVar("V")

_LEASE_RAN_OUT = "its membership lease ran out: no heartbeat was confirmed in time"
# The longest the lease watchdog waits between two looks while this member leads.
_WATCHDOG_S = 0.25

# The committed offset that stores the highest fencing token; its metadata says what it is.
_TOKEN_METADATA = "leader election: the highest fencing token"
DEFAULT_TOKEN_TOPIC = "__consumer_offsets"


class NotLeaderError(CoordinationError):
    """This member does not lead (any more); whatever it was about to do as leader must not
    happen. Raised by :meth:`Leadership.check` and by leader-only calls."""


class DuplicateIdentityError(CoordinationError):
    """Another member of the group advertises the same identity; this member cannot lead.

    Give every member a unique ``identity`` (e.g. its own host:port)."""


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads the group, as every member learns it.

    Attributes:
        identity: the leader's advertised identity (e.g. the URL to forward requests to).
        member_id: its member id in the group.
        token: its fencing token: grows with every new leadership, never repeats, even
            after every member stopped and the broker forgot the group (see
            :class:`LeaderElection`, "Fencing tokens").
    """

    identity: str
    member_id: str
    token: int


class Leadership:
    """This member's leadership, from its election until it is lost.

    Handed to :meth:`LeaderElection.run`'s function and to ``on_elected``. The token
    identifies this leadership: every later leadership has a higher one, so a store that
    remembers the highest token it has seen can reject a deposed leader's writes.

    Example:
        def lead(leadership):
            producer = leadership.transactional_producer()
            while not leadership.lost.wait(5.0):
                producer.begin_transaction()
                producer.send("schedules", f"{leadership.token}: tick".encode())
                leadership.check()          # raises NotLeaderError once deposed
                producer.commit_transaction()   # the broker fences a deposed leader's producer

    Attributes:
        token: the fencing token.
        identity: this member's identity.
        lost: set the moment leadership is lost (wait on it, or poll it).
    """

    def __init__(self, election: LeaderElection, token: int, generation_id: int) -> None:
        self._election = election
        self.token = token
        self.identity = election.identity
        self.generation_id = generation_id
        self.lost = threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()

    @property
    def reason(self) -> str | None:
        """Why leadership was lost, or None while it holds."""
        return self._reason

    def is_valid(self) -> bool:
        """True while this member leads and its membership lease holds.

        Reads the clock itself instead of trusting a flag set by another thread, so a
        process that resumes from a pause longer than its lease sees False at once.
        """
        if self.lost.is_set():
            return False
        if self._election._lease.holds():
            return True
        self._election._depose(self, _LEASE_RAN_OUT, rejoin=True)
        return False

    def check(self) -> None:
        """Raise :class:`NotLeaderError` unless this member still leads. Call it before each
        action only the leader may take."""
        if not self.is_valid():
            raise NotLeaderError(
                f"{self.identity} no longer leads group {self._election.group_id!r} "
                f"(token {self.token}): {self._reason}"
            )

    def transactional_producer(self, **settings: Any) -> Any:
        """A kafka-python ``KafkaProducer`` whose transactions the broker fences by leadership.

        Every leader of the group uses the same ``transactional_id`` (the election's
        ``transactional_id``, by default ``"<group>.leader"``). Creating the producer calls
        ``init_transactions()``, which makes the broker abort the previous leader's open
        transaction and reject anything its producer still tries to send or commit
        (``ProducerFencedError``). Writes made in transactions are therefore safe even from
        a leader that was paused and has not noticed yet. Consumers must read with
        ``isolation_level="read_committed"``. The producer is the caller's: close it when
        leadership is lost (a deposed leader's producer is useless anyway). Only a leader can
        create one, so a deposed member can never fence its successor.

        Args:
            **settings: kafka-python producer settings; the connection settings of the election
                (bootstrap servers, TLS, SASL) are used unless given here.

        Raises:
            NotLeaderError: leadership was lost before the producer was ready (it is closed).
        """
        from kafka import KafkaProducer

        self.check()
        config = {**self._election.coordinator.config.client_settings(), **settings}
        config["transactional_id"] = self._election.transactional_id
        producer = KafkaProducer(**config)
        try:
            producer.init_transactions()
            self.check()
        except BaseException:
            producer.close(timeout=1)
            raise
        return producer

    def _lose(self, reason: str) -> bool:
        with self._lock:
            if self.lost.is_set():
                return False
            self._reason = reason
            self.lost.set()
            return True

    def __repr__(self) -> str:
        state = f"lost: {self._reason}" if self.lost.is_set() else "valid"
        return f"<Leadership {self.identity!r} token={self.token} {state}>"


class LeaderElection:
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
        commits its token there, fenced by its generation, before it counts as leader
        (before ``on_elected`` runs, :meth:`run` calls its function or
        :meth:`Leadership.check` passes). If the commit is refused or its outcome stays
        unknown (no answer, and reading the offset back does not show the token), it does
        not lead and the group elects again, with a higher token. So tokens keep growing
        when every member restarts and the broker deletes the group. The stored token
        lasts as long as the group's offsets: the broker deletes them once the group has
        been empty for ``offsets.retention.minutes`` (default 7 days); a group that stays
        empty longer starts again from its generation.

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
    """

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
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigurationError(f"priority must be an int, got {priority!r}")
        if not -(2**63) <= priority < 2**63:
            # Other members' decoders refuse metadata outside int64: this member would never
            # take part in an election.
            raise ConfigurationError(f"priority must fit in 64 bits (signed), got {priority}")
        if not isinstance(token_topic, str) or not token_topic:
            raise ConfigurationError(
                f"token_topic must name an existing topic, got {token_topic!r}"
            )
        self.identity = identity
        self.priority = priority
        self._coordinator = _ElectionCoordinator(self, group_id, **settings)
        coordinator = self._coordinator
        self._lease = LeaseGuard(
            lambda: coordinator.membership_lease(),
            coordinator.config,
            lease_margin_ms,
            why=", or a leader would never be valid",
        )
        self.transactional_id = transactional_id or f"{group_id}.leader"
        self._token_partition = (token_topic, 0)
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._on_leader_change = on_leader_change

        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._callback_lock = threading.RLock()
        self._eligible = bool(eligible)
        self._leadership: Leadership | None = None
        self._outcome: Outcome | None = None
        self._leader: LeaderInfo | None = None
        self._highest_token = -1
        self._problem: CoordinationError | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def group_id(self) -> str:
        return self._coordinator.group_id

    @property
    def coordinator(self) -> Coordinator:
        """The underlying group member (for ``metrics()``, ``generation()``, ``state``)."""
        return self._coordinator

    def start(self) -> None:
        """Join the group in the background (idempotent); returns at once.

        Raises:
            CoordinatorStateError: the election was closed.
        """
        with self._lock:
            if self._closed:
                raise CoordinatorStateError(f"election of group {self.group_id!r} is closed")
            self._start_watchdog()
        self._coordinator.start()

    def close(self, timeout: float = 30.0) -> None:
        """Give up leadership (``on_deposed`` runs first), leave the group, stop (idempotent).

        A leader's departure makes the group elect the next leader at once.
        """
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._lease.close()
        self._coordinator.close(timeout)
        leadership = self._leadership
        if leadership is not None:
            self._depose(leadership, "the election was closed")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ what users ask

    @property
    def is_leader(self) -> bool:
        """True while this member leads (checked against its lease at the time of the call)."""
        leadership = self._leadership
        return leadership is not None and leadership.is_valid()

    def leadership(self) -> Leadership | None:
        """This member's current leadership, or None if it does not lead."""
        leadership = self._leadership
        return leadership if leadership is not None and leadership.is_valid() else None

    def leader(self) -> LeaderInfo | None:
        """The group's leader as of this member's last rebalance; None if there is none or
        this member is not (yet) in the group."""
        with self._lock:
            return self._leader

    def members(self) -> Mapping[str, str]:
        """Every member's identity by member id, as of this member's last rebalance."""
        with self._lock:
            return dict(self._outcome.members) if self._outcome else {}

    def wait_for_leader(self, timeout: float | None = None) -> LeaderInfo:
        """Start if needed and block until the group has a leader; return it.

        Raises:
            CoordinationTimeoutError: no leader within ``timeout`` seconds.
            CoordinatorStateError: the election was closed.
            FatalBrokerError: the member stopped on an error a person must fix.
        """
        self.start()
        return self._wait(lambda: self._leader, timeout, "a leader to be elected")

    def set_eligible(self, eligible: bool) -> None:
        """Enter or leave the running. A leader that becomes ineligible is deposed first."""
        with self._lock:
            if self._eligible == eligible:
                return
            self._eligible = eligible
            leadership = self._leadership
        if not eligible and leadership is not None:
            self._depose(leadership, "this member withdrew from the election")
        self._coordinator.request_rejoin(
            "member entered the election" if eligible else "member withdrew from the election"
        )

    def run(self, func: Callable[[Leadership], T], timeout: float | None = None) -> T:
        """Wait to be elected, call ``func(leadership)``, then step down; return its result.

        ``func`` runs on the calling thread only while this member leads; it must watch
        ``leadership.lost`` (or call ``leadership.check()``) and return soon after leadership
        is lost. When it returns (or raises), this member steps down if it still leads and
        stays out of the running until ``run`` is called again, so another member takes
        over: the same contract as kazoo's ``Election.run``.

        Raises:
            CoordinationTimeoutError: not elected within ``timeout`` seconds.
            DuplicateIdentityError: another member uses this member's identity.
            CoordinatorStateError: the election was closed.
        """
        self.set_eligible(True)
        self.start()
        leadership = self._wait(self.leadership, timeout, "this member to be elected")
        try:
            return func(leadership)
        finally:
            # Step down (if still leading) and leave the running either way, so the group
            # does not elect this member again while no func runs.
            self.set_eligible(False)

    # ------------------------------------------------------------------ the Coordinator side

    def _metadata(self) -> Candidate:
        with self._lock:
            leadership = self._leadership
            highest = self._highest_token
            eligible = self._eligible
        leading = leadership.token if leadership is not None and leadership.is_valid() else None
        return Candidate(self.identity, eligible, self.priority, leading, highest)

    def _assign(self, generation_id: int, members: Sequence[Member]) -> Mapping[str, bytes]:
        cfg = self._coordinator.config
        # Read now, in the new generation: no commit of an older generation can land later.
        # A failure fails this rebalance (retried after a backoff): no leader is better than
        # a leader whose token may not exceed the last one.
        stored = self._stored_token(min(cfg.request_timeout_ms, cfg.rebalance_timeout_ms // 2))
        outcome = choose_leader(generation_id, members, stored_token=stored)
        log.info(
            "election %s: generation %d: %s",
            self.group_id,
            generation_id,
            f"leader {outcome.leader_identity} (token {outcome.token})"
            if outcome.leader_member_id
            else "no leader",
        )
        data = encode_outcome(outcome)
        return {m.member_id: data for m in members}

    def _joined(self, generation_id: int, member_id: str, assignment: bytes) -> None:
        try:
            outcome = decode_outcome(assignment)
        except ProtocolCodecError as e:
            # A rebalance leader of another version, or a broken one: follow nobody.
            log.error("election %s: cannot read the assignment: %s", self.group_id, e)
            outcome = Outcome(None, None, None, {}, (str(e),))
        for problem in outcome.problems:
            log.error("election %s: %s", self.group_id, problem)
        leads = outcome.leader_member_id == member_id
        info = (
            LeaderInfo(outcome.leader_identity or "", outcome.leader_member_id, outcome.token)
            if outcome.leader_member_id is not None and outcome.token is not None
            else None
        )
        with self._lock:
            if outcome.token is not None:
                self._highest_token = max(self._highest_token, outcome.token)
            self._outcome = outcome
            changed = info != self._leader
            self._leader = info
            self._problem = (
                DuplicateIdentityError(
                    f"identity {self.identity!r} is used by another member of group "
                    f"{self.group_id!r}; give every member a unique identity"
                )
                if self.identity in outcome.duplicates and not leads
                else None
            )
            current = self._leadership
        if current is not None and not (leads and current.token == outcome.token):
            moved_to = info.identity if info else "nobody"
            self._depose(current, f"leadership moved to {moved_to}")
            current = None
        if (
            leads
            and current is None
            and outcome.token is not None
            and self._store_token(generation_id, outcome.token)
        ):
            elected = Leadership(self, outcome.token, generation_id)
            with self._lock:
                self._leadership = elected
                self._changed.notify_all()
            self._lease.wake()
            log.info(
                "election %s: %s elected leader (token %d)",
                self.group_id,
                self.identity,
                elected.token,
            )
            self._callback("on_elected", self._on_elected, elected)
        with self._lock:
            self._changed.notify_all()
        if changed:
            self._callback("on_leader_change", self._on_leader_change, info)

    def _stored_token(self, timeout_ms: float) -> int:
        """The token stored in the group's offsets, -1 if none; raises CoordinationError."""
        where = self._token_partition
        found = self._coordinator.committed_offsets([where], timeout=timeout_ms / 1000)
        stored = found.get(where)
        return -1 if stored is None else stored.offset

    def _store_token(self, generation_id: int, token: int) -> bool:
        """Store ``token`` as the group's highest, fenced by the generation that elected this
        member; True only if it is stored. A leader must not act before: if it did and the
        group were then forgotten, the next leader could get the same token again."""
        generation = self._coordinator.generation()
        if generation.generation_id != generation_id:
            return False  # superseded: the next generation elects again
        cfg = self._coordinator.config
        # Waiting longer than the lease is pointless: the leadership would be void.
        timeout_ms = min(cfg.request_timeout_ms, self._lease.remaining() * 1000)
        where = self._token_partition
        try:
            stored = self._stored_token(timeout_ms)
            if stored >= token:
                # Elected by a rebalance leader that did not read the stored token (an older
                # version): advertise it, so that the next election goes above it.
                with self._lock:
                    self._highest_token = max(self._highest_token, stored)
                self._not_elected(token, f"the group already stored token {stored}")
                return False
            self._coordinator.commit_offsets(
                {where: OffsetAndMetadata(token, _TOKEN_METADATA)},
                generation=generation,
                timeout=timeout_ms / 1000,
            )
            return True
        except CommitFailedError as e:
            # Fenced: a newer generation exists; the member rejoins by itself.
            log.warning(
                "election %s: %s not leader: storing token %d was refused: %s",
                self.group_id,
                self.identity,
                token,
                e,
            )
            return False
        except CoordinationError as e:
            problem = e
        # The commit may or may not have been applied (no answer in time). Lead only if the
        # token is known to be stored; otherwise elect again: the next token exceeds this one
        # (this member advertises it as seen), and a late commit of this generation cannot
        # land once the next generation has started.
        try:
            remaining_ms = min(cfg.request_timeout_ms, self._lease.remaining() * 1000)
            if remaining_ms > 0 and self._stored_token(remaining_ms) == token:
                return True
        except CoordinationError as e:
            problem = e
        time.sleep(cfg.retry_backoff_max_ms / 1000)  # a refusal would repeat at once
        self._not_elected(token, f"could not store its token: {problem}")
        return False

    def _not_elected(self, token: int, reason: str) -> None:
        log.error(
            "election %s: %s does not take up leadership (token %d): %s; electing again",
            self.group_id,
            self.identity,
            token,
            reason,
        )
        if not self._closed:
            self._coordinator.request_rejoin(f"elected leader could not take up office: {reason}")

    def _membership_lost(self) -> None:
        leadership = self._leadership
        if leadership is not None:
            self._depose(leadership, "this member lost its place in the group")
        with self._lock:
            changed = self._leader is not None
            self._leader = None
            self._outcome = None
        if changed:
            self._callback("on_leader_change", self._on_leader_change, None)

    def _leaving(self) -> None:
        leadership = self._leadership
        if leadership is not None:
            self._depose(leadership, "this member is leaving the group")

    # ------------------------------------------------------------------ losing leadership

    def _depose(self, leadership: Leadership, reason: str, *, rejoin: bool = False) -> None:
        """Mark ``leadership`` lost (once), then tell the user. Safe from any thread."""
        if not leadership._lose(reason):
            return
        with self._lock:
            if self._leadership is leadership:
                self._leadership = None
            self._changed.notify_all()
        log.warning(
            "election %s: %s deposed (token %d): %s",
            self.group_id,
            self.identity,
            leadership.token,
            reason,
        )
        self._callback("on_deposed", self._on_deposed, leadership)
        if rejoin and not self._closed:
            # The group still names this member leader; rejoin so that it elects again.
            self._coordinator.request_rejoin(f"leader deposed itself: {reason}")

    def _start_watchdog(self) -> None:
        """Depose the leader when its lease runs out, even if nothing else happens."""
        self._lease.start_watchdog(
            engine_clock(self._coordinator),
            self._lease_ran_out,
            active=lambda: self._leadership is not None,
            poll_s=_WATCHDOG_S,
            name=f"election-lease-{self.group_id}",
        )

    def _lease_ran_out(self) -> None:
        """The lease watchdog found the lease low: depose the leader."""
        leadership = self._leadership
        if leadership is not None:
            leadership.is_valid()  # reads the lease again; deposes if it ran out

    # ------------------------------------------------------------------ helpers

    def _wait(self, ready: Callable[[], V | None], timeout: float | None, what: str) -> V:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                closed, problem = self._closed, self._problem
            if closed:
                raise CoordinatorStateError(f"election of group {self.group_id!r} is closed")
            if problem is not None:
                raise problem
            if self._coordinator.state is MemberState.CLOSED:
                # Stopped by a fatal error: let the coordinator raise it.
                self._coordinator.ensure_active_group(timeout=0)
            value = ready()  # outside the lock: it may depose, which runs callbacks
            if value is not None:
                return value
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise CoordinationTimeoutError(
                    f"election of group {self.group_id!r}: timed out after {timeout}s "
                    f"waiting for {what}"
                )
            with self._lock:
                self._changed.wait(0.25 if remaining is None else min(remaining, 0.25))

    def _callback(self, name: str, fn: Callable[[Any], None] | None, arg: Any) -> None:
        if fn is None:
            return
        with self._callback_lock:
            try:
                fn(arg)
            except Exception:
                log.exception("election %s: %s raised", self.group_id, name)

    def __repr__(self) -> str:
        leader = self._leader
        return (
            f"<LeaderElection group={self.group_id!r} identity={self.identity!r} "
            f"leader={leader.identity if leader else None!r} is_leader={self.is_leader}>"
        )


class _ElectionCoordinator(Coordinator):
    """The group member behind a :class:`LeaderElection`."""

    def __init__(self, election: LeaderElection, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self._election = election

    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata(PROTOCOL_NAME, encode_candidate(self._election._metadata()))]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        return self._election._assign(self.generation().generation_id, members)

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        if generation == -1:
            self._election._membership_lost()

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self._election._joined(generation, member_id, assignment)

    def on_leave_prepare(self) -> None:
        self._election._leaving()
