"""Kafka's consumer group protocol (KIP-848): the reconcile thread.

The broker tells a member its target assignment; the member *reconciles* towards it, on a
thread of its own so that a slow callback never delays a heartbeat: it gives up
(``revoked``) what the target leaves out, takes (``assigned``) what is new once the topics'
names are known, and after a fence gives up everything (``lost``) before it takes anything
again. Every :class:`PartitionCallbacks` call but ``subscription`` runs here, one at a
time, so ``lost`` always comes after an ``assigned`` it overtook.

The heartbeat side (:mod:`.consumer_group`) sets the target and reports what this thread
made of it: ``_owned`` is never less than what the recipe holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from .._config import CoordinatorConfig
from .._protocol import consumer_group as cg
from .._transport.base import Wakeups
from .._types import Generation
from ..clock import Clock
from ..errors import CoordinationError
from ..transport import Transport
from .core import Callbacks, Stopped
from .epochs import IDLE_WAIT_S, EpochHeartbeats

PROTOCOL_NAME = "consumer"

TopicIdPartition = tuple[uuid.UUID, int]
"""A partition as the protocol names it: the topic's id and the partition number."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the member subscribes to: topic names, or a regular expression the broker
    evaluates (RE2J, on whole topic names); the broker's assignor to use (None: the
    broker's default) and the member's rack (Kafka's ``client.rack``)."""

    topics: frozenset[str] | None = None
    pattern: str | None = None
    assignor: str | None = None
    rack: str | None = None


class PartitionCallbacks(Protocol):
    """What a KIP-848 member calls (the consumer recipe implements it). Every method but
    :meth:`subscription` and :meth:`topic_names` runs on the reconcile thread, one at a
    time; none may close the member."""

    def subscription(self) -> Subscription:
        """The current subscription (read before every heartbeat; a change is sent)."""
        ...

    def topic_names(self, topic_ids: frozenset[uuid.UUID]) -> Mapping[uuid.UUID, str]:
        """The names of those of ``topic_ids`` it can resolve (from fresh metadata if
        needed); a partition of a topic left out is taken once its name is known."""
        ...

    def revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        """Give up ``partitions`` (commit what was processed first): the broker gives them
        to another member once the next heartbeat reports them released."""
        ...

    def assigned(self, partitions: frozenset[tuple[str, int]], generation: Generation) -> None:
        """Take ``partitions`` (free: their previous owner released them)."""
        ...

    def lost(self, partitions: frozenset[tuple[str, int]]) -> None:
        """``partitions`` may already belong to another member (fenced, session lost):
        stop at once, commit nothing."""
        ...

    def leaving(self) -> None:
        """The member is about to leave the group: give up everything (commit first)."""
        ...


class ConsumerGroupReconcile(EpochHeartbeats):
    """The reconcile thread's state and work (:meth:`_run_reconcile`); the heartbeat thread
    is :class:`~coordination._engine.epochs.EpochHeartbeats`'s."""

    def __init__(
        self,
        classic: Callbacks,
        callbacks: PartitionCallbacks,
        config: CoordinatorConfig,
        transport: Transport,
        clock: Clock | None,
        wakeups: Wakeups | None,
    ) -> None:
        super().__init__(classic, config, transport, clock, wakeups)
        self._partitions = callbacks
        # The broker's latest assignment for this member (None until the first), and what
        # this thread made of it.
        self._target: frozenset[TopicIdPartition] | None = None
        self._target_epoch = cg.JOIN_EPOCH
        self._owned: frozenset[TopicIdPartition] = frozenset()
        self._names: dict[TopicIdPartition, tuple[str, int]] = {}
        # Set when the member lost its place (fenced, unknown, session): this thread calls
        # ``lost`` for everything it owns before it takes anything again.
        self._lose_all = False
        # The target this thread last worked on, and when.
        self._tried: tuple[frozenset[TopicIdPartition] | None, float] = (None, 0.0)
        # Owned partitions whose ``assigned`` call raised: owned (and reported so), not yet
        # announced; the call is made again for them every ``retry_backoff_ms``, as the
        # classic engine retries a failed on_join_complete.
        self._unannounced: frozenset[TopicIdPartition] = frozenset()

    def owned(self) -> frozenset[tuple[str, int]]:
        """The partitions the member owns (handed to ``assigned`` and not given up since)."""
        with self._lock:
            return frozenset(self._names[p] for p in self._owned if p in self._names)

    def _run_reconcile(self) -> None:
        while not self._stop.is_set():
            try:
                self._reconcile_once()
            except Stopped:
                break
            except CoordinationError:
                if self._fatal is not None:
                    break
                self._log.exception("%s: error while reconciling", self._who())
                self._sleep(self._retry_backoff.next_delay())
            except Exception:
                self._log.exception("%s: unexpected error while reconciling", self._who())
                try:
                    self._sleep(self._retry_backoff.next_delay())
                except Stopped:
                    break

    def _reconcile_once(self) -> None:
        with self._lock:
            while not self._lose_all and not self._reconcile_due_locked():
                self._check_running()
                self._changed.wait(self._reconcile_wait_locked())
            self._check_running()
            if self._lose_all:
                lost = frozenset(self._names[p] for p in self._owned if p in self._names)
                self._owned = frozenset()
                self._unannounced = frozenset()
                self._names = {}
                # ``_lose_all`` stays set until ``lost`` returned: the heartbeat thread
                # rejoins only once the recipe holds nothing (its lease would cover them).
            else:
                lost = None
                target, epoch, owned = self._target, self._target_epoch, self._owned
                first_try = self._tried[0] != target
                self._tried = (target, self._clock.monotonic())
        if lost is not None:
            self._invoke_serialized("lost", self._partitions.lost, lost)
            with self._lock:
                self._lose_all = False
                self._heartbeat_now = True  # rejoin now that nothing is held
                self._changed.notify_all()
            return
        assert target is not None
        self._reconcile(target, epoch, owned, first_try)
        with self._lock:
            if self._lose_all:
                return  # fenced while the callbacks ran: all of it goes to ``lost`` next
            self._heartbeat_now = True  # report what it owns now, at once
            if self._target == self._owned and not self._unannounced:
                record = self._stats.finished(self._clock.monotonic(), self._generation, False)
                finished = self._stats.finished_event(record)
                self._tell_locked(lambda: self._hooks.rebalance_finished(finished))
            self._changed.notify_all()
        self._tell_hooks()

    def _reconcile_due_locked(self) -> bool:
        """A target not reconciled yet: new, or one whose topic names were missing or whose
        ``assigned`` call raised at the last try (tried again every ``retry_backoff_ms``)."""
        if self._target is None or (self._target == self._owned and not self._unannounced):
            return False
        tried_target, tried_at = self._tried
        if tried_target != self._target:
            return True
        return self._clock.monotonic() >= tried_at + self._config.retry_backoff_ms / 1000

    def _reconcile_wait_locked(self) -> float:
        if self._target is not None and (self._target != self._owned or self._unannounced):
            return max(0.001, self._config.retry_backoff_ms / 1000)
        return IDLE_WAIT_S

    def _reconcile(
        self,
        target: frozenset[TopicIdPartition],
        epoch: int,
        owned: frozenset[TopicIdPartition],
        first_try: bool,
    ) -> None:
        """Revoke first, then take what is new and named.

        What the heartbeats report as owned is always at least what the recipe holds: a
        revoked partition leaves ``_owned`` once ``revoked`` returned, an assigned one
        enters it before ``assigned`` is called. Reporting less would let the broker hand a
        partition to another member while this one still works on it.
        """
        with self._lock:
            names = dict(self._names)
            # Those of the last ``assigned`` call that raised and are still to be taken.
            again = self._unannounced & target
            self._unannounced = frozenset()
        revoked = owned - target
        if revoked:
            self._invoke_serialized(
                "revoked", self._partitions.revoked, frozenset(names[p] for p in revoked)
            )
            with self._lock:
                if self._lose_all:
                    return  # fenced meanwhile: ``lost`` takes the rest
                self._owned = self._owned - revoked
                for p in revoked:
                    self._names.pop(p, None)
                self._heartbeat_now = True  # the release, reported at once
                self._changed.notify_all()
        new = target - owned
        topic_name = {p[0]: n[0] for p, n in names.items()}
        unknown = frozenset(t for t, _ in new if t not in topic_name)
        if unknown:
            topic_name.update(self._partitions.topic_names(unknown))
        added = frozenset(p for p in new if p[0] in topic_name)
        if len(added) < len(new) and first_try:
            self._log.info(
                "%s: %d assigned partitions wait for their topics' names (asked again every "
                "retry_backoff_ms)",
                self._who(),
                len(new) - len(added),
            )
        if not added and not again:
            return
        with self._lock:
            if self._lose_all or self._target != target:
                return  # fenced, or a newer assignment: the next turn works from it
            self._owned = self._owned | added
            for p in added:
                self._names[p] = (topic_name[p[0]], p[1])
            announced = (added | again) & self._owned
            taken = frozenset(self._names[p] for p in announced)
            member_id = self._member_id
        ok, _ = self._invoke_serialized(
            "assigned",
            self._partitions.assigned,
            taken,
            Generation(epoch, member_id, PROTOCOL_NAME),
        )
        if not ok:
            with self._lock:
                self._unannounced = announced
