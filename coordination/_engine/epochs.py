"""What the heartbeat-only protocols share: KIP-848's consumer groups and KIP-932's share
groups.

A member of either sends one request, a heartbeat carrying its own member id (KIP-1082)
and its *member epoch* (0 to join, -1 to leave), at the interval the broker's answers set;
the answers bring its epoch and, when it changes, its assignment. What differs is the
assignment: a consumer group's member reconciles towards it (:mod:`.reconcile`), a share
group's uses it at once (:mod:`.share_group`). What is the same lives here, on top of
:class:`~coordination._engine.core.MemberCore` (the coordinator, failures, hooks):

- the heartbeat thread's loop (:meth:`EpochHeartbeats._run_heartbeats`), around the
  protocol's ``heartbeat_once``;
- what an error answer does (:meth:`EpochHeartbeats._heartbeat_error`): the hooks, then
  ``classify.py``'s column for the request: stop, join again at epoch 0 (``_fenced``),
  find the coordinator again, or back off;
- the leaving heartbeat, best effort (:meth:`EpochHeartbeats._send_leave`).
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Mapping, Sequence
from typing import TypeVar

from .._protocol import consumer_group as cg
from .._protocol import messages as m
from .._protocol import share_group as sg
from .._protocol.error_codes import ErrorCode, error_name
from .._types import Member, MemberState, ProtocolMetadata
from ..errors import CoordinationError, CoordinatorStateError, broker_error
from ..hooks import HeartbeatFailed
from ..transport import CoordinatorNode, TransportError
from . import classify
from .classify import Api, Next
from .core import MemberCore, Stopped, routine

# How often idle threads look at their stop flag even if nobody wakes them.
IDLE_WAIT_S = 1.0

# The two heartbeats' answers.
R = TypeVar("R", cg.ConsumerGroupHeartbeatResponse, sg.ShareGroupHeartbeatResponse)


def new_member_id(rng: random.Random) -> str:
    """A member id made by the client, as KIP-1082 asks of ConsumerGroupHeartbeat v1 (and
    every ShareGroupHeartbeat): a random (version 4) UUID in Kafka's text form (URL-safe
    base64, no padding). Drawn from the clock's random source, so that a simulated history
    replays exactly."""
    made = uuid.UUID(int=rng.getrandbits(128), version=4)
    return base64.urlsafe_b64encode(made.bytes).rstrip(b"=").decode()


class NoClassicCallbacks:
    """MemberCore's classic callbacks, which a member of these protocols never calls (it has
    no JoinGroup metadata, no leader, no join or sync)."""

    rejoin_changes_metadata = False

    def __init__(self, protocol_type: str) -> None:
        self._protocol_type = protocol_type

    def protocol_type(self) -> str:
        return self._protocol_type

    def metadata(self) -> Sequence[ProtocolMetadata]:
        raise self._not_classic()

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        raise self._not_classic()

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        raise self._not_classic()

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        raise self._not_classic()

    def on_leave_prepare(self) -> None:
        raise self._not_classic()

    def _not_classic(self) -> CoordinatorStateError:
        return CoordinatorStateError(
            f"a member of the {self._protocol_type!r} protocol has no classic protocol callbacks"
        )


class EpochHeartbeats(MemberCore):
    """The heartbeat thread and error handling of a member that heartbeats with an epoch.

    A subclass supplies :meth:`heartbeat_once` (one turn: send a heartbeat if due, act on
    its answer) and :meth:`_fenced` (the broker no longer counts the member: join again at
    epoch 0).
    """

    # The subclass's, read or set here under the lock.
    _member_id: str
    _epoch: int
    _heartbeat_now: bool  # heartbeat at once, whatever the interval says
    _send_full: bool  # the next heartbeat sends every field (after an error)

    def heartbeat_once(self) -> float:
        """Send a heartbeat if one is due; returns the seconds until the next is due."""
        raise NotImplementedError

    def _fenced(self, reason: str, sent_epoch: int) -> None:
        """The broker fenced the heartbeat of ``sent_epoch``: join again at epoch 0."""
        raise NotImplementedError

    def _run_heartbeats(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.heartbeat_once()
            except Stopped:
                break
            except CoordinationError:
                if self._fatal is not None:
                    break
                self._log.exception("%s: error in the heartbeat thread", self._who())
                delay = self._retry_backoff.next_delay()
            except Exception:
                self._log.exception("%s: unexpected error in the heartbeat thread", self._who())
                delay = self._retry_backoff.next_delay()
            with self._lock:
                if self._stop.is_set() or self._fatal is not None:
                    break
                if delay > 0 and not self._heartbeat_now:
                    self._changed.wait(min(delay, IDLE_WAIT_S))

    def _heartbeat_sent_locked(self, now: float) -> None:
        """(Under the lock) A heartbeat goes out now: its interval starts over, and a member
        at epoch 0 that had not begun joining begins (counted, and queued for the hooks)."""
        self._timers.sent(now)
        if self._epoch == cg.JOIN_EPOCH and self._state is MemberState.UNJOINED:  # 0 in both
            self._state = MemberState.PREPARING_REBALANCE
            if self._stats.attempt(now, "the member is joining the group"):
                started = self._stats.started_event(self._member_id, "joining")
                self._tell_locked(lambda: self._hooks.rebalance_started(started))

    def _exchange_heartbeat(
        self, request: m.Request, response_type: type[R], node: CoordinatorNode, sent_at: float
    ) -> R | None:
        """The heartbeat's answer, or None if none came: then a fatal failure (TLS, a
        refused login) has stopped the member, and any other one sends it looking for the
        coordinator again."""
        try:
            return self._transport.send(
                request,
                response_type,
                coordinator=node,
                timeout_s=self._config.request_timeout_ms / 1000,
            )
        except TransportError as e:
            api = type(request).__name__.removesuffix("Request")
            if e.fatal:
                self._fail(e.stop_error(f"{self._who()}: {api}"))
            self._heartbeat_failed(f"{api} got no response: {e}", sent_at)
            self._mark_coordinator_unknown(f"{api} got no response: {e}")
            return None

    def _heartbeat_failed(self, reason: str, sent_at: float) -> None:
        """A heartbeat got an error or no answer: the ``heartbeat_failed`` hook, and, while a
        rebalance is under way (joining, or moving to a new assignment), a failed attempt of
        it (``rebalance_failed``), as the classic engine reports a failed join."""
        with self._lock:
            self._note_problem(reason)
            self._send_full = True
            self._timers.received(self._clock.monotonic())
            rebalancing = self._stats.rebalance_started_at is not None
            if rebalancing:
                self._stats.attempt_failed()
            failed = HeartbeatFailed(
                group_id=self._config.group_id,
                member_id=self._member_id,
                generation=self._epoch,
                error=reason,
            )
            self._tell_locked(lambda: self._hooks.heartbeat_failed(failed))
            if rebalancing:
                attempt = self._stats.failed_event(self._member_id, reason)
                self._tell_locked(lambda: self._hooks.rebalance_failed(attempt))
        self._tell_hooks()

    def _error_for(
        self, api: Api, code: int, member_id: str, message: str | None
    ) -> CoordinationError:
        """The error a heartbeat's ``code`` stands for (the broker's message in it, if any)."""
        where = f"{api.value} (the broker says: {message})" if message else api.value
        return broker_error(code, group_id=self._config.group_id, member_id=member_id, api=where)

    def _heartbeat_error(
        self,
        api: Api,
        code: int,
        message: str | None,
        sent: tuple[str, int],
        sent_at: float,
    ) -> None:
        """Act on a heartbeat answered with ``code`` (sent as member id and epoch ``sent``),
        as ``classify.py``'s column for ``api`` says."""
        reaction = classify.reaction(api, code)
        reason = f"{api.value} returned {error_name(code)}" + (f" ({message})" if message else "")
        member_id, epoch = sent
        error = self._error_for(api, code, member_id, message)
        self._heartbeat_failed(reason, sent_at)
        if reaction.next is Next.FATAL:
            self._fail(error)
        elif reaction.next is Next.REJOIN:
            self._fenced(reason, epoch)
        elif reaction.next is Next.FIND_COORDINATOR:
            self._mark_coordinator_unknown(reason)
        else:
            level = self._heartbeat_retries.level(self._clock.monotonic(), routine(error))
            self._log.log(level, "%s: %s; retrying after backoff", self._who(), reason)
            with self._lock:
                self._timers.failed(self._clock.monotonic(), self._retry_backoff.next_delay())

    def _send_leave(
        self, request: m.Request, response_type: type[R], node: CoordinatorNode, deadline: float
    ) -> R | None:
        """Send the leaving heartbeat ``request``; its answer, or None if none came. Its error
        is logged and ignored: the broker's session timeout ends the membership anyway."""
        api = type(request).__name__.removesuffix("Request")
        try:
            response = self._transport.send(
                request,
                response_type,
                coordinator=node,
                timeout_s=max(
                    0.5,
                    min(self._config.request_timeout_ms / 1000, deadline - self._clock.monotonic()),
                ),
            )
        except TransportError as e:
            self._log.info("%s: the leaving %s got no answer (%s)", self._who(), api, e)
            return None
        code = response.error_code
        if code != ErrorCode.NONE:
            self._log.info(
                "%s: the leaving %s returned %s (ignored: the session ends it)",
                self._who(),
                api,
                error_name(code),
            )
        return response
