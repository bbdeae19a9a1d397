"""The election's group side: what a member advertises, whom the rebalance leader picks, and
what each assignment means for this member (elected, deposed, or neither).

:class:`Elector` is the :class:`~recipes._recipe.GroupListener` of a
:class:`~recipes.election.LeaderElection`; it holds the election's state, under the
recipe's lock, and is the only one that changes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coordination import Generation, Member, OffsetAndMetadata
from coordination.errors import CommitFailedError, CoordinationError, ProtocolCodecError
from coordination.hooks import Deposed, Elected
from coordination.lease import LeaseGuard

from .._recipe import GroupListener, RecipeContext
from ._choice import choose_leader
from ._leadership import DuplicateIdentityError, LeaderInfo, Leadership
from ._wire import Candidate, Outcome, decode_outcome, encode_candidate, encode_outcome

# The committed offset's metadata, saying what the offset is.
_TOKEN_METADATA = "leader election: the highest fencing token"


@dataclass(frozen=True, slots=True)
class ElectionCallbacks:
    """The user's callbacks (see :class:`~recipes.election.LeaderElection`); None: none."""

    on_elected: Callable[[Leadership], None] | None = None
    on_deposed: Callable[[Leadership], None] | None = None
    on_leader_change: Callable[[LeaderInfo | None], None] | None = None


class Elector(GroupListener):
    """One member's part in the election, and everything it knows about it.

    State (guarded by the recipe's lock; ``changed`` is notified at every change):
        ``leadership``: this member's leadership, None unless it leads.
        ``leader``: who leads, as of the last assignment (None: nobody, or not joined).
        ``outcome``: the last assignment read (``outcome_generation``: in which generation).
        ``highest_token``: the highest token this member has seen (it advertises it).
        ``eligible``: whether it stands.
        ``problem``: a DuplicateIdentityError while another member uses this identity.
    """

    def __init__(
        self,
        ctx: RecipeContext,
        lease: LeaseGuard,
        candidate: Candidate,
        *,
        transactional_id: str,
        token_partition: tuple[str, int],
        callbacks: ElectionCallbacks,
    ) -> None:
        """
        Args:
            candidate: what this member advertises of itself (identity, eligible,
                priority); the tokens in it are ignored.
        """
        self.ctx = ctx
        self.lease = lease
        self.identity = candidate.identity
        self.priority = candidate.priority
        self.transactional_id = transactional_id
        self.token_partition = token_partition
        self.callbacks = callbacks
        self._eligible = candidate.eligible
        self._leadership: Leadership | None = None
        self._outcome: Outcome | None = None
        self._outcome_generation = -1  # the generation whose outcome _outcome is
        self._leader: LeaderInfo | None = None
        self._highest_token = -1
        self._declined_token = -1
        # The generation in which this member last committed a token (-1: never).
        self._stored_in_generation = -1
        # The generation in which this member last took up leadership (-1: never).
        self._led_in_generation = -1
        self._problem: DuplicateIdentityError | None = None
        self.times_elected = 0  # under ctx.lock
        self.times_deposed = 0
        self.leader_changes = 0
        # Whether the calling thread must not wait (an asyncio face's event loop, see
        # recipes/_aio.py): a deposition noticed there is told on a thread of its own.
        self.must_not_wait: Callable[[], bool] = lambda: False

    @property
    def group_id(self) -> str:
        return self.ctx.member.group_id

    # ------------------------------------------------------------------ what the recipe asks

    def leadership(self) -> Leadership | None:
        """This member's leadership if it still holds (read against the lease now)."""
        leadership = self._leadership
        return leadership if leadership is not None and leadership.is_valid() else None

    def leads(self) -> bool:
        """Whether this member holds a leadership not yet lost (the lease is not read)."""
        return self._leadership is not None

    def leader(self) -> LeaderInfo | None:
        with self.ctx.lock:
            return self._leader

    def members(self) -> Mapping[str, str]:
        with self.ctx.lock:
            return dict(self._outcome.members) if self._outcome else {}

    def highest_token(self) -> int:
        with self.ctx.lock:
            return self._highest_token

    def check_problem(self) -> None:
        """Raise the problem that keeps this member from leading, if any.

        Raises:
            DuplicateIdentityError: another member uses this member's identity.
        """
        with self.ctx.lock:
            problem = self._problem
        if problem is not None:
            raise problem

    def set_eligible(self, eligible: bool) -> None:
        """Enter or leave the running; a leader that leaves it is deposed first."""
        with self.ctx.lock:
            if self._eligible == eligible:
                return
            self._eligible = eligible
            leadership = self._leadership
        if not eligible and leadership is not None:
            self.depose(leadership, "this member withdrew from the election", expected=True)
        self.ctx.member.request_rejoin(
            "member entered the election" if eligible else "member withdrew from the election"
        )

    # ------------------------------------------------------------------ GroupListener

    def metadata(self) -> bytes:
        with self.ctx.lock:
            leadership = self._leadership
            highest = self._highest_token
            eligible = self._eligible
            declined = self._declined_token
        leading = leadership.token if leadership is not None and leadership.is_valid() else None
        held = self.ctx.member.generation()
        return encode_candidate(
            Candidate(
                self.identity,
                eligible,
                self.priority,
                leading,
                highest,
                held.member_id,
                declined,
                held.generation_id,
            )
        )

    def assign(
        self, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        cfg = self.ctx.member.config
        stored = self._stored_token_known(generation)
        if stored is None:
            # Read now, in the new generation: no commit of an older generation can land
            # later. A failure fails this rebalance (retried after a backoff): no leader is
            # better than a leader whose token may not exceed the last one.
            stored = self._stored_token(min(cfg.request_timeout_ms, cfg.rebalance_timeout_ms // 2))
        outcome = replace(
            choose_leader(generation, members, stored_token=stored),
            stored_token=stored,
            # A known value comes from an outcome that knew a token was stored.
            stored_token_exists=stored >= 0,
        )
        self.ctx.log.info(
            "election %s: generation %d: %s",
            self.group_id,
            generation,
            f"leader {outcome.leader_identity} (token {outcome.token})"
            if outcome.leader_member_id
            else "no leader",
        )
        data = encode_outcome(outcome)
        return {m.member_id: data for m in members}

    def joined(self, generation: int, member_id: str, assignment: bytes) -> None:
        ctx = self.ctx
        try:
            outcome = decode_outcome(assignment)
        except ProtocolCodecError as e:
            # A rebalance leader of another version, or a broken one: follow nobody.
            ctx.log.error("election %s: cannot read the assignment: %s", self.group_id, e)
            outcome = Outcome(None, None, None, {}, (str(e),))
        for problem in outcome.problems:
            ctx.log.error("election %s: %s", self.group_id, problem)
        leads = outcome.leader_member_id == member_id
        info = (
            LeaderInfo(outcome.leader_identity or "", outcome.leader_member_id, outcome.token)
            if outcome.leader_member_id is not None and outcome.token is not None
            else None
        )
        with ctx.lock:
            if outcome.token is not None:
                self._highest_token = max(self._highest_token, outcome.token)
            self._outcome = outcome
            self._outcome_generation = generation
            changed = info != self._leader
            self.leader_changes += changed
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
            self.depose(current, f"leadership moved to {moved_to}", expected=True)
            current = None
        store_after: int | None = None  # a token taken up before it was stored
        if leads and current is None and outcome.token is not None:
            token = outcome.token
            if self._led_in_generation == generation:
                # Deposed since it took up leadership in this generation, and named again by
                # the same outcome: leading again would give two leaderships one token.
                self._not_elected(token, "it already led in this generation")
            elif self._unique_unstored(generation, outcome):
                self._take_up(generation, member_id, token)
                store_after = token
            elif self._store_token(generation, token, outcome.stored_token):
                self._take_up(generation, member_id, token)
        with ctx.lock:
            ctx.changed.notify_all()
            leading = self._leadership
        if leading is not None:
            ctx.member.note_rebalance_change(f"leads with token {leading.token}")
        else:
            ctx.member.note_rebalance_change(
                f"follows {info.identity} (token {info.token})" if info else "no leader"
            )
        if changed:
            ctx.callback("on_leader_change", self.callbacks.on_leader_change, info)
        if store_after is not None:
            self._store_used_token(generation, store_after)
        if outcome.members and member_id not in outcome.members:
            # A static member took its instance's place without a rebalance (KIP-345): the
            # broker handed it the outcome computed for its former member id, which may name
            # that id as leader, and nobody would lead until the next rebalance. Ask for one:
            # this member's metadata now carries its new member id, so the broker sees it
            # changed and rebalances.
            ctx.member.request_rejoin(
                "the election's outcome predates this member's id (a static member took its "
                "instance's place); electing again"
            )

    def _take_up(self, generation: int, member_id: str, token: int) -> None:
        """Lead with ``token``, elected in ``generation``: tell the lease, the hooks, the user."""
        ctx = self.ctx
        elected = Leadership(self, token, generation)
        with ctx.lock:
            self._leadership = elected
            self._led_in_generation = generation
            self.times_elected += 1
            ctx.changed.notify_all()
        self.lease.wake()
        ctx.log.info(
            "election %s: %s elected leader (token %d)", self.group_id, self.identity, token
        )
        ctx.hooks.elected(
            lambda: Elected(
                group_id=ctx.group_id, member_id=member_id, identity=self.identity, token=token
            ),
        )
        ctx.callback("on_elected", self.callbacks.on_elected, elected)

    def lost(self) -> None:
        leadership = self._leadership
        if leadership is not None:
            self.depose(leadership, "this member lost its place in the group")
        with self.ctx.lock:
            changed = self._leader is not None
            self._leader = None
            self._outcome = None
            self.ctx.changed.notify_all()
        if changed:
            self.ctx.callback("on_leader_change", self.callbacks.on_leader_change, None)

    def leaving(self) -> None:
        self.depose_current("this member is leaving the group", expected=True)

    # ------------------------------------------------------------------ the stored token

    def _stored_token_known(self, generation: int) -> int | None:
        """The stored token as of ``generation``'s start, known without reading it when this
        member was handed the outcome of the generation just before; None: read it.

        That outcome carries the stored token as read at its generation's start. From then
        until this generation started, the broker accepted commits of that generation only,
        and in it only its elected member commits, and only the outcome's token. So the
        stored token is the one read then or the outcome's token, whichever is higher (the
        latter if its commit landed). A higher bound than the truth would be safe too (the
        next token only goes higher); this one is exact once the commit landed. It saves
        the rebalance leader a round trip at every handoff.

        Only an outcome that knew a token was stored will do: this outcome passes on that
        knowledge (``stored_token_exists``), on which its elected member may lead before
        storing (:meth:`_unique_unstored`). A bound raised by a token whose commit may have
        failed is no proof that the group has offsets, so a group's first elections read.
        """
        with self.ctx.lock:
            outcome, seen_in = self._outcome, self._outcome_generation
        if (
            outcome is None
            or seen_in != generation - 1
            or outcome.stored_token is None
            or not outcome.stored_token_exists
        ):
            return None
        return max(outcome.stored_token, -1 if outcome.token is None else outcome.token)

    def _unique_unstored(self, generation: int, outcome: Outcome) -> bool:
        """Whether the member elected by ``outcome`` may lead before its token is stored.

        Yes if the token is ``generation``'s id and the group has a stored token already.
        The broker answered this member's SyncGroup only once it had written this
        generation to the group's log (the rebalance leader's assignment, with the
        generation id), so a coordinator that takes over goes on from it. A group's
        generations grow for as long as the group exists: while it has members, and once
        empty for as long as it has committed offsets, among them the stored token. Every
        later free election's token is at least its generation id, so it exceeds this one
        whether or not this one is ever stored, and no other leadership gets it. The
        token is stored right after (:meth:`_store_used_token`) so that the stored token
        keeps up; failing that changes nothing.

        Otherwise the token is stored first (:meth:`_store_token`): the group's first
        leadership (without offsets an empty group is deleted within minutes, and its
        generations start over), and a token above the generation id (tokens that outran
        the generations, which only the stored token remembers).
        """
        return outcome.token == generation and outcome.stored_token_exists

    def _store_used_token(self, generation_id: int, token: int) -> None:
        """Store the token of a leadership taken up before it was stored (see
        :meth:`_unique_unstored`), fenced by its generation. Failing is harmless, so it
        is only logged."""
        ctx = self.ctx
        generation = ctx.member.generation()
        if generation.generation_id != generation_id:
            return  # superseded: the next generation's tokens exceed this one anyway
        # No longer than the lease: this runs on the membership thread, which must be free
        # to answer the next rebalance in time (the commit is worth nothing by then).
        timeout_ms = self._within_lease_ms()
        if timeout_ms <= 0:
            return
        try:
            self._commit_token(generation, token, timeout_ms)
        except CoordinationError as e:
            ctx.log.info(
                "election %s: token %d was not stored (%s); it needs not be: the broker "
                "stored its generation",
                self.group_id,
                token,
                e,
            )

    def _within_lease_ms(self) -> float:
        """How long a request about the token may take: the request timeout, cut to what is
        left of the lease (a leadership would be void after it); <= 0: no time left."""
        return min(self.ctx.member.config.request_timeout_ms, self.lease.remaining() * 1000)

    def _commit_token(self, generation: Generation, token: int, timeout_ms: float) -> None:
        """Commit ``token`` as the group's stored token, fenced by ``generation``."""
        self._stored_in_generation = generation.generation_id
        self.ctx.member.commit_offsets(
            {self.token_partition: OffsetAndMetadata(token, _TOKEN_METADATA)},
            generation=generation,
            timeout=timeout_ms / 1000,
        )

    def _stored_token(self, timeout_ms: float) -> int:
        """The token stored in the group's offsets, -1 if none; raises CoordinationError."""
        where = self.token_partition
        found = self.ctx.member.committed_offsets([where], timeout=timeout_ms / 1000)
        stored = found.get(where)
        return -1 if stored is None else stored.offset

    def _store_token(self, generation_id: int, token: int, read_in_generation: int | None) -> bool:
        """Store ``token`` as the group's highest, fenced by the generation that elected this
        member; True only if it is stored. A leader must not act before: if it did and the
        group were then forgotten, the next leader could get the same token again.

        ``read_in_generation``: the stored token as the rebalance leader read it in this
        generation (None: unknown). Commits of older generations are refused by then, and
        only this member is elected in this one, so until it commits here that is still the
        stored token: a round trip saved on every handoff. After a commit of its own in this
        generation (a leadership deposed since, named again by the same outcome) it reads.
        """
        ctx = self.ctx
        generation = ctx.member.generation()
        if generation.generation_id != generation_id:
            return False  # superseded: the next generation elects again
        cfg = ctx.member.config
        # Waiting longer than the lease is pointless: the leadership would be void.
        timeout_ms = self._within_lease_ms()
        known = read_in_generation if self._stored_in_generation != generation_id else None
        try:
            stored = self._stored_token(timeout_ms) if known is None else known
        except CoordinationError as e:
            # Unknown whether this token is stored already, by an earlier leadership (this
            # member's own, deposed since, included): taking it up could give two
            # leaderships one token. Read back below only after a commit of our own.
            ctx.clock.sleep(cfg.retry_backoff_max_ms / 1000, ctx.stopped)
            self._not_elected(token, f"could not read the stored token: {e}")
            return False
        try:
            if stored >= token:
                # Elected by a rebalance leader that did not read the stored token (an older
                # version): advertise it, so that the next election goes above it.
                with ctx.lock:
                    self._highest_token = max(self._highest_token, stored)
                self._not_elected(token, f"the group already stored token {stored}")
                return False
            self._commit_token(generation, token, timeout_ms)
            return True
        except CommitFailedError as e:
            # Fenced: a newer generation exists; the member rejoins by itself.
            ctx.log.warning(
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
            remaining_ms = self._within_lease_ms()
            if remaining_ms > 0 and self._stored_token(remaining_ms) == token:
                return True
        except CoordinationError as e:
            problem = e
        # A refusal would repeat at once.
        ctx.clock.sleep(cfg.retry_backoff_max_ms / 1000, ctx.stopped)
        self._not_elected(token, f"could not store its token: {problem}")
        return False

    def _not_elected(self, token: int, reason: str) -> None:
        with self.ctx.lock:
            self._declined_token = max(self._declined_token, token)
        self.ctx.log.error(
            "election %s: %s does not take up leadership (token %d): %s; electing again",
            self.group_id,
            self.identity,
            token,
            reason,
        )
        self.ctx.rejoin(f"elected leader could not take up office: {reason}")

    # ------------------------------------------------------------------ losing leadership

    def depose(
        self, leadership: Leadership, reason: str, *, rejoin: bool = False, expected: bool = False
    ) -> None:
        """Mark ``leadership`` lost (once), then tell the user. Safe from any thread.

        On a thread that must not wait (:attr:`must_not_wait`: an event loop, which reads
        ``is_leader`` and finds the lease ran out), the leadership is lost at once and
        everything that follows (hooks, ``on_deposed``, the rejoin) runs on a thread of its
        own: ``on_deposed`` waits for the callbacks' lock, which a callback waiting for that
        loop may hold, and an asyncio face's ``on_deposed`` waits for the loop itself.

        Args:
            rejoin: also make the group elect again (it still names this member leader).
            expected: the member's own doing or the election's normal course (closing,
                withdrawing, a preferred member elected): logged at INFO, not WARNING.
        """
        if not leadership._lose(reason):
            return
        ctx = self.ctx
        with ctx.lock:
            if self._leadership is leadership:
                self._leadership = None
            self.times_deposed += 1
            ctx.changed.notify_all()
        ctx.log.log(
            logging.INFO if expected else logging.WARNING,
            "election %s: %s deposed (token %d): %s",
            self.group_id,
            self.identity,
            leadership.token,
            reason,
        )
        if self.must_not_wait():
            ctx.clock.thread(
                lambda: self._deposed(leadership, reason, rejoin), "election-deposed"
            ).start()
        else:
            self._deposed(leadership, reason, rejoin)

    def _deposed(self, leadership: Leadership, reason: str, rejoin: bool) -> None:
        """What follows a deposition: the hooks, ``on_deposed``, then the rejoin."""
        ctx = self.ctx
        ctx.hooks.deposed(
            lambda: Deposed(
                group_id=ctx.group_id,
                member_id=ctx.member_id,
                identity=self.identity,
                token=leadership.token,
                reason=reason,
            ),
        )
        ctx.callback("on_deposed", self.callbacks.on_deposed, leadership)
        if rejoin:
            ctx.rejoin(f"leader deposed itself: {reason}")

    def depose_current(self, reason: str, *, expected: bool = False) -> None:
        """Depose this member if it leads."""
        leadership = self._leadership
        if leadership is not None:
            self.depose(leadership, reason, expected=expected)

    def lease_ran_out(self) -> None:
        """The lease watchdog found the lease low: depose the leader."""
        leadership = self._leadership
        if leadership is not None:
            leadership.is_valid()  # reads the lease again; deposes if it ran out
