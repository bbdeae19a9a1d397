"""The membership lease: how long the broker cannot have removed this member.

A member may act on its assignment only while it is sure the broker still counts it. The
proof is a request whose success shows the broker counted the member (a JoinGroup, a
Heartbeat, a heartbeat followed by a SyncGroup): the broker's session and join timers
started no earlier than that request's send, so it cannot have removed the member before
that time plus min(session timeout, rebalance timeout).

:class:`SessionLease` keeps the proofs and answers questions about them; it returns
verdicts and never acts. The engine holds it under its own lock (it has none), and does
what a verdict asks (rejoin, reset the heartbeat timers). Nothing here is specific to the
classic JoinGroup/SyncGroup protocol but the names of the requests that give proofs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._types import Generation

_LEASE_RAN_OUT = (
    "the membership lease ran out before a heartbeat was answered (an answer "
    "then may come from a coordinator still loading the group); rejoining"
)


@dataclass(frozen=True, slots=True)
class Renewed:
    """A heartbeat answered NONE renewed the lease."""


@dataclass(frozen=True, slots=True)
class MustRejoin:
    """The answer proves nothing: the member must prove its place again by rejoining."""

    reason: str


RENEWED = Renewed()


class SessionLease:
    """The proofs of this member's session at the broker, and what they allow.

    Not thread-safe: the engine calls it under its lock.
    """

    def __init__(self, session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        # How long after a confirmation the broker cannot have removed the member.
        self.lease_s = min(session_timeout_ms, rebalance_timeout_ms) / 1000
        # The generation and the send time of the last request whose success proved that
        # the broker counted this member (a JoinGroup or Heartbeat).
        self.confirmed: tuple[Generation, float] | None = None
        # The generation this member held when it sent its first JoinGroup since it was
        # last stable, and when it sent it (see confirm_join).
        self.joins_since_stable: tuple[int, float] | None = None
        # Whether a JoinGroup of this rebalance got no answer (it may have joined a phase).
        self.join_answer_lost = False
        # The newest generation this member id was answered (a new member id starts over).
        self.highest_generation = -1

    # ------------------------------------------------------------------ questions

    def expires_at(self, generation: Generation) -> float | None:
        """When the lease of ``generation`` ends (engine clock); None if there is none."""
        confirmed = self.confirmed
        if confirmed is None:
            return None
        # Usually the very object the engine holds: no field-by-field comparison then.
        if confirmed[0] is not generation and confirmed[0] != generation:
            return None
        return confirmed[1] + self.lease_s

    def runs_low(self, generation: Generation, now: float, margin_s: float) -> bool:
        """Whether the lease of ``generation`` lasts less than ``margin_s`` more."""
        expires = self.expires_at(generation)
        return expires is None or expires - now < margin_s

    def first_join_generation(self) -> int | None:
        """The generation held when the first JoinGroup since the last stable one left."""
        return None if self.joins_since_stable is None else self.joins_since_stable[0]

    # ------------------------------------------------------------------ what happened

    def join_sent(self, held_generation_id: int, sent_at: float) -> None:
        """A JoinGroup left; the first one of a rebalance is remembered."""
        if self.joins_since_stable is None:
            self.joins_since_stable = (held_generation_id, sent_at)

    def join_answer_was_lost(self) -> None:
        self.join_answer_lost = True

    def saw_generation(self, generation_id: int) -> None:
        """A JoinGroup answered ``generation_id`` (and the member does not take it)."""
        self.highest_generation = max(self.highest_generation, generation_id)

    def member_reset(self) -> None:
        """The member gave up its member id: generations count afresh."""
        self.highest_generation = -1

    def stable(self) -> None:
        """The member is stable: the next rebalance starts a new count."""
        self.joins_since_stable = None
        self.join_answer_lost = False

    def confirm_join(
        self,
        held: Generation,
        generation: Generation,
        sent_at: float,
        *,
        kept_static_follower: bool = False,
    ) -> bool:
        """A JoinGroup sent at ``sent_at`` answered ``generation`` to a member that held
        ``held``: what that proves about the member's session at the broker, which its lease
        may not outlast. Returns whether the broker restarted the session (False: it runs
        on as it was).

        - The generation the member held when it began joining: nothing. A follower that
          rejoins a stable group unchanged gets it back at once, its session timer left as it
          was; the lease keeps what it had.
        - A newer generation than any this member saw: a join phase completed while this
          JoinGroup waited in it (or a static member took its instance's place), and the
          broker restarted the member's session then, after ``sent_at`` (not necessarily
          before the answer was read: the process may have been paused meanwhile, so only
          the send time is a safe start). If an earlier JoinGroup of this rebalance lost its
          answer, the phase may have been that one's, so the lease counts from the first
          JoinGroup of the rebalance instead.
        - An older one: a new coordinator loaded the group as it was stored (a rebalance was
          lost in the move). When it restarted the session is unknown: no lease; the member
          rejoins as a new one at its first heartbeat (see :meth:`renew`).

        ``kept_static_follower``: a static member rejoined with its member id and was
        answered as a follower. A newer generation then proves nothing either: a join phase
        that completes without a static member's JoinGroup keeps it in the group (a dynamic
        one is removed), so its JoinGroup may have reached a Stable group of that
        generation, which answers a follower at once and leaves its session timer as it
        was. The lease then needs the heartbeat before the SyncGroup (see the engine's
        proving heartbeat).
        """
        started = self.joins_since_stable
        first_held = started[0] if started is not None else held.generation_id
        gid = generation.generation_id
        self.highest_generation, highest = (
            max(self.highest_generation, gid),
            self.highest_generation,
        )
        if kept_static_follower and gid > first_held:
            return False
        if gid == first_held:
            confirmed = self.confirmed
            if confirmed is not None and confirmed[0].generation_id == gid:
                self.confirmed = (generation, confirmed[1])
            return False
        if gid > highest:
            # After a lost answer, the phase may have been that JoinGroup's: count from the first.
            counted_from = started[1] if started is not None and self.join_answer_lost else sent_at
            self.confirmed = (generation, counted_from)
        return True

    def renew(self, sent: Generation, sent_at: float) -> Renewed | MustRejoin:
        """A heartbeat of ``sent`` sent at ``sent_at`` was answered NONE: renewed if the
        lease still held when the heartbeat left.

        A coordinator that is loading the group answers every heartbeat NONE without looking
        (Kafka does, 3.x and 4.x), even that of a member it removed before it moved, and a
        member cannot tell such an answer from a real one. A NONE is safe to believe only
        for a member whose lease still held when it sent the heartbeat: the broker could not
        have removed it, and a coordinator that loads the group gives its members new
        sessions. A member whose lease ran out has no proof of its place: it rejoins as a
        new member (a static one takes its instance's place again), which costs a
        rebalance, and this happens only after the heartbeats went unanswered for a whole
        lease.
        """
        confirmed = self.confirmed
        if confirmed is not None and confirmed[0] == sent and confirmed[1] + self.lease_s > sent_at:
            self.confirmed = (sent, max(sent_at, confirmed[1]))
            return RENEWED
        return MustRejoin(_LEASE_RAN_OUT)

    def credit_heartbeat(self, generation: Generation, sent_at: float | None) -> None:
        """A heartbeat sent at ``sent_at`` and answered NONE was followed by a SyncGroup of
        ``generation`` answered NONE: the lease counts from the heartbeat's send.

        A SyncGroup answered from a group already Stable (a follower that synced late) does
        not restart the member's session timer on Kafka 4, so it renews nothing itself; but
        it proves the member was in this generation when it arrived, which makes the
        heartbeat answered before it trustworthy.
        """
        if sent_at is None:
            return
        confirmed = self.confirmed
        if confirmed is None or confirmed[0] != generation or confirmed[1] < sent_at:
            self.confirmed = (generation, sent_at)


def missed_generations(is_static: bool, held: int, answered: int) -> str | None:
    """Why the assignment a static member holds may belong to another member now, if its
    JoinGroup answered a generation past the next one (None otherwise).

    A join phase that completes without a static member's JoinGroup keeps the member
    with the metadata of its previous join (a dynamic one is removed, and learns it
    from UNKNOWN_MEMBER_ID). That generation was assigned from what the member claimed
    before its last assignment, so what it was handed since (a static restart's
    assignment, a late ``on_join_complete``) may have gone to another member, who may
    hold it now with a lease of its own. The member reports its assignment lost
    (``on_join_prepare(-1, ...)``) and joins again without it. A static member whose
    JoinGroup answer was lost looks the same and pays the same (once).
    """
    if not is_static or held < 0 or answered <= held + 1:
        return None
    return (
        f"JoinGroup answered generation {answered}, this member held {held}: a generation "
        "completed without its JoinGroup, and what it holds may have been assigned to "
        "another member"
    )
