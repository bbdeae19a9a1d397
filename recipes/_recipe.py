"""The shape every recipe shares: one group member, its lifecycle, one wait, one lease guard.

A recipe is a public class built on :class:`Recipe` plus a :class:`GroupListener` that holds
the recipe's own group logic. The base owns the group member (a :class:`RecipeMember`, the
``Coordinator`` subclass behind every recipe) and gives each recipe the same lifecycle,
waits, callbacks and lease guard, so that a fix to one of them is made once. The member
calls the listener and nothing else of the recipe: Kafka Connect's ``WorkerCoordinator``
and ``WorkerRebalanceListener``, in Python.

A recipe whose public class must itself be a ``Coordinator`` (``ConsumerPartitioning``,
documented and used as one) subclasses :class:`RecipeMember` instead, and takes the rest
piecewise: a :class:`RecipeContext` (:meth:`RecipeContext.of`), the callback rule
(:meth:`RecipeContext.callback`) and the lease guard (:func:`guard_lease`); its lifecycle
and waits are the ``Coordinator``'s.

Time and waiting come from the member's clock: the base's locks, condition and events, the
lease watchdog's thread and every :class:`ClockTimer`. A recipe makes every other thread,
event, lock and wait of its own from :attr:`RecipeContext.clock` too, so that a simulated
clock controls all of it (a wait on anything else would escape the simulation, or hang it).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from typing_extensions import Self

from coordination import Coordinator, Member, MemberState, ProtocolMetadata
from coordination.clock import Clock, Condition, Event, Lock
from coordination.errors import CoordinationTimeoutError, CoordinatorStateError
from coordination.hooks import HookCaller, LeaseAtRisk
from coordination.lease import LeaseGuard
from coordination.transport import Transport

V = TypeVar("V")


class GroupListener(abc.ABC):
    """What a recipe does at each step of the group protocol (Connect's
    ``WorkerRebalanceListener``, widened to the whole protocol).

    A recipe that speaks one protocol implements :meth:`metadata`, :meth:`assign` and
    :meth:`joined`; one that offers several (the consumer protocol: one per assignor)
    overrides :meth:`protocols`, :meth:`assign_with` and :meth:`joined_with`, which are told
    the protocol the group chose. A rebalance alone changes nothing for a cooperative
    recipe; one that must give up work before it rejoins (the consumer protocol's EAGER
    revocation) does so in :meth:`preparing`.

    Threads:
        Every method but :meth:`leaving` runs on the member's membership thread, one at a
        time, never concurrently; :meth:`leaving` runs once, on the thread that closes the
        member (or on the membership thread, if a callback still ran when ``close`` gave up
        waiting for it). None of them may close the member: it would wait for itself.

    Errors:
        What a step raises is logged by the member, which goes on as
        ``docs/threading.md`` says (``assign``: the leader rejoins after a backoff;
        ``joined``: called again with the same assignment after a backoff). A step that
        calls a user's callback does so through :meth:`RecipeContext.callback`, the one rule
        for what a user's callback raises.
    """

    def protocols(self, name: str) -> Sequence[ProtocolMetadata]:
        """The protocols this member offers in its next JoinGroup, most preferred first, each
        with its metadata. Default: the recipe's protocol ``name`` with :meth:`metadata`."""
        return [ProtocolMetadata(name, self.metadata())]

    @abc.abstractmethod
    def metadata(self) -> bytes:
        """This member's metadata for the next JoinGroup (what the group's leader sees)."""

    @abc.abstractmethod
    def assign(
        self, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        """Divide the work of ``generation``; only on the member the broker made leader.

        Must be deterministic and finish well within ``rebalance_timeout_ms``; raising fails
        the rebalance (the leader rejoins after a backoff).
        """

    def assign_with(
        self, protocol: str, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        """:meth:`assign`, told the protocol the group chose among :meth:`protocols`.
        Default: :meth:`assign`."""
        return self.assign(generation, leader_id, members)

    @abc.abstractmethod
    def joined(self, generation: int, member_id: str, assignment: bytes) -> None:
        """This member joined ``generation`` as ``member_id`` and got ``assignment``."""

    def joined_with(
        self, protocol: str, generation: int, member_id: str, assignment: bytes
    ) -> None:
        """:meth:`joined`, told the protocol the group chose. Default: :meth:`joined`."""
        self.joined(generation, member_id, assignment)

    def preparing(self, generation: int, member_id: str) -> None:  # noqa: B027
        """A rebalance begins: this member is about to send a JoinGroup, leaving generation
        ``generation`` (-1: it has none, and :meth:`lost` follows). Default: nothing, as
        for a cooperative recipe, which keeps its work through a rebalance. Must return
        quickly: the group waits for this member's JoinGroup."""

    @abc.abstractmethod
    def lost(self) -> None:
        """This member lost its generation (its session expired, or it was fenced): the
        group may already have given its work to others."""

    @abc.abstractmethod
    def leaving(self) -> None:
        """This member is about to leave the group (``close``); stop the group's work."""


class RecipeMember(Coordinator):
    """The group member behind a recipe: speaks the recipe's protocol, and hands every step
    of the protocol to the recipe's :class:`GroupListener`."""

    def __init__(self, group_id: str, protocol: tuple[str, str], options: Mapping[str, Any]):
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the group.
            protocol: the group's protocol type and this recipe's protocol name.
            options: the keyword arguments of :class:`coordination.Coordinator`
                (``transport``, ``clock`` and the settings).
        """
        super().__init__(group_id, **options)
        self._protocol_type, self._protocol_name = protocol
        self._group_listener: GroupListener | None = None

    def listen(self, listener: GroupListener) -> None:
        """Hand the protocol's steps to ``listener`` (once, before :meth:`start`)."""
        self._group_listener = listener

    @property
    def listener(self) -> GroupListener:
        """The recipe's listener."""
        assert self._group_listener is not None, "the recipe has not given its listener yet"
        return self._group_listener

    def protocol_type(self) -> str:
        return self._protocol_type

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return self.listener.protocols(self._protocol_name)

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        generation = self.generation().generation_id
        return self.listener.assign_with(protocol, generation, leader_id, members)

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        self.listener.preparing(generation, member_id)
        # A lost generation: the group may already have given this member's work away.
        if generation == -1:
            self.listener.lost()

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self.listener.joined_with(protocol, generation, member_id, assignment)

    def on_leave_prepare(self) -> None:
        self.listener.leaving()


def guard_lease(
    member: Coordinator,
    margin_ms: int | None,
    *,
    why: str,
    reserve: tuple[str, int] | None = None,
) -> LeaseGuard:
    """The lease guard of a recipe's member (see :class:`coordination.lease.LeaseGuard`):
    ``margin_ms`` is the recipe's ``lease_margin_ms`` setting (None: its default).

    Raises:
        ConfigurationError: the margin is invalid or leaves no room.
    """
    return LeaseGuard(
        lambda: member.membership_lease(), member.config, margin_ms, why=why, reserve=reserve
    )


class ClockTimer:
    """``threading.Timer`` on a clock: runs ``action`` once after ``delay_s`` seconds, on a
    thread of the clock, unless :meth:`cancel` is called first."""

    def __init__(self, clock: Clock, delay_s: float, action: Callable[[], object], name: str):
        self._cancelled = clock.event()

        def run() -> None:
            if not self._cancelled.wait(delay_s):
                action()

        clock.thread(run, name).start()

    def cancel(self) -> None:
        """Do not run the action, unless it has begun."""
        self._cancelled.set()


@dataclass(frozen=True, slots=True)
class RecipeContext:
    """What the parts of one recipe share: its member, its clock and its state's lock.

    Made by :class:`Recipe` and handed to the recipe's listener and helpers, so that they
    use the recipe's services without reaching into the recipe.

    Attributes:
        name: the recipe and its group, for messages, e.g. ``"election of group 'g'"``.
        member: the group member.
        clock: the member's clock; make every thread, event, lock and wait from it.
        lock: guards the recipe's state (reentrant).
        changed: a condition over ``lock``; notify it when something waited for changes.
        stopped: set once the recipe is closed; sleep on it (``clock.sleep(s, stopped)``).
        callback_lock: held while a user callback runs (see :meth:`callback`).
        log: the recipe's logger; its records carry the group, member id and generation
            as ``extra`` fields.
        hooks: the member's hooks (the ``hooks`` setting); call its typed methods.
    """

    name: str
    member: RecipeMember
    clock: Clock
    lock: Lock
    changed: Condition
    stopped: Event
    callback_lock: Lock
    log: logging.LoggerAdapter[logging.Logger]
    hooks: HookCaller

    @classmethod
    def of(cls, member: RecipeMember, kind: str, logger: logging.Logger) -> RecipeContext:
        """The context of a new recipe of ``kind`` (e.g. ``"election"``) over ``member``,
        logging to ``logger``; everything made from the member's clock."""
        clock = member.clock
        lock = clock.rlock()
        return cls(
            name=f"{kind} of group {member.config.group_id!r}",
            member=member,
            clock=clock,
            lock=lock,
            changed=clock.condition(lock),
            stopped=clock.event(),
            callback_lock=clock.rlock(),
            log=member.member_logger(logger),
            hooks=HookCaller(member.config.hooks),
        )

    @property
    def closed(self) -> bool:
        """Whether the recipe was closed."""
        return self.stopped.is_set()

    def callback(
        self, name: str, fn: Callable[..., object] | None, *args: Any, again: bool = False
    ) -> None:
        """Run the user's callback ``fn(*args)`` (if any) while no other user callback of the
        recipe runs.

        The one rule of every recipe for what a user's callback raises: the exception is
        logged (with its traceback, on the recipe's logger), and the change the callback was
        told of happens all the same: a deposed leader stays deposed, a revoked or lost
        partition is given up. Never can it stop a group's thread or leave the recipe
        half-changed. One kind of callback is told of work that must not begin before it
        has returned (a consumer's ``on_partitions_assigned``: no record of the partitions
        is returned before it): with ``again``, the exception goes on to the member's step
        that called the callback, and the member (which logs it) calls that step again,
        with the same assignment, after a backoff, until the callback returns or a new
        rebalance supersedes it; the work waits meanwhile.
        """
        if fn is None:
            return
        with self.callback_lock:
            if again:
                fn(*args)
                return
            try:
                fn(*args)
            except Exception:
                self.log.exception("%s: %s raised", self.name, name)

    @property
    def group_id(self) -> str:
        return self.member.config.group_id

    @property
    def member_id(self) -> str:
        return self.member.member_id

    def rejoin(self, reason: str) -> None:
        """Ask the member to rejoin, unless the recipe is closed."""
        if not self.closed:
            self.member.request_rejoin(reason)


class Recipe(abc.ABC):
    """The base of every recipe class: it owns the group member and its lifecycle.

    A subclass passes its protocol to ``__init__``, gives the member its
    :class:`GroupListener` with ``self._member.listen(...)``, and fills in the hooks:
    :meth:`_starting` (before the member joins), :meth:`_before_leave` and
    :meth:`_after_close` (around the member's close) and :meth:`_describe` (the repr).

    What every recipe gets:
        * :meth:`start` and :meth:`close` (both idempotent), and ``with`` support;
        * :class:`~coordination.errors.CoordinatorStateError` from :meth:`start` and
          :meth:`_wait` once closed;
        * :meth:`_wait`, the one blocking wait, on the clock's condition;
        * user callbacks run one at a time (:meth:`RecipeContext.callback`), and an
          exception they raise is logged, never propagated into the group's threads (the
          one rule, and its one exception, are in :meth:`RecipeContext.callback`);
        * :meth:`_guard_lease` and :meth:`_watch_lease`: the membership-lease guard
          (:class:`coordination.lease.LeaseGuard`) and its watchdog on the clock, both
          closed with the recipe.

    Locking:
        ``self._ctx.lock`` (reentrant, from the clock) guards the recipe's state; notify
        ``self._ctx.changed`` (a condition over it) whenever something a :meth:`_wait` may
        be waiting for changes. User callbacks run under a lock of their own, never under
        the state's lock, so that a callback may call the recipe's queries.
    """

    _KIND: ClassVar[str] = "recipe"
    """What the recipe is called in errors and logs, e.g. ``"election"``."""
    _LOG: ClassVar[logging.Logger] = logging.getLogger("recipes")
    """Where the recipe logs."""
    _WAIT_POLL_S: ClassVar[float] = 0.25
    """How often :meth:`_wait` asks again if nothing notifies it (the member's own state
    and the lease change without telling the recipe)."""
    _DEFAULTS: ClassVar[Mapping[str, Any]] = {}
    """The recipe's own defaults of group settings, below the user's settings (a recipe that
    fails over faster than Kafka's consumer defaults allow sets them here)."""

    def __init__(
        self,
        group_id: str,
        protocol: tuple[str, str],
        *,
        transport: Transport | None,
        clock: Clock | None,
        settings: Mapping[str, Any],
    ) -> None:
        """Build the group member; nothing connects until :meth:`start`.

        Args:
            group_id: the recipe's group.
            protocol: the group's protocol type and this recipe's protocol name.
            transport: as for :class:`coordination.Coordinator`; None: Kafka.
            clock: as for :class:`coordination.Coordinator`; None: the system's.
            settings: the group's settings, as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: a setting is invalid; the message names it.
        """
        options = {"transport": transport, "clock": clock, **self._DEFAULTS, **settings}
        member = RecipeMember(group_id, protocol, options)
        self._member = member
        self._ctx = RecipeContext.of(member, self._KIND, self._LOG)
        self._lease: LeaseGuard | None = None
        self._started = False

    # ------------------------------------------------------------------ public lifecycle

    @property
    def group_id(self) -> str:
        """The recipe's group."""
        return self._member.group_id

    @property
    def coordinator(self) -> Coordinator:
        """The underlying group member (for ``metrics()``, ``generation()``, ``state``)."""
        return self._member

    def start(self) -> None:
        """Join the group in the background (idempotent); returns at once.

        Raises:
            CoordinatorStateError: the recipe was closed.
        """
        with self._ctx.lock:
            if self._ctx.closed:
                raise self._closed_error()
            if self._started:
                return
            self._started = True
        self._starting()
        self._member.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the recipe's work, leave the group and stop (idempotent).

        Args:
            timeout: seconds for the whole close.

        Raises:
            CoordinatorStateError: called from a callback on the member's own thread.
        """
        ctx = self._ctx
        with ctx.lock:
            if ctx.closed:
                return
            ctx.stopped.set()
            ctx.changed.notify_all()
        deadline = ctx.clock.monotonic() + timeout
        if self._lease is not None:
            self._lease.close()
        leave_group = self._before_leave(deadline, timeout)
        self._member.close(max(0.0, deadline - ctx.clock.monotonic()), leave_group=leave_group)
        self._after_close()
        if self._lease is not None:
            self._lease.join(1)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} group={self.group_id!r} {self._describe()}>"

    # ------------------------------------------------------------------ hooks

    def _starting(self) -> None:  # noqa: B027
        """Called once, by the first :meth:`start`, before the member starts joining."""

    def _before_leave(self, deadline: float, timeout: float) -> bool:
        """Called once by :meth:`close` (the recipe is closed already, the member not yet):
        stop the recipe's work. Returns whether the member may leave the group (False keeps
        its place until its session times out). ``deadline`` is on the clock."""
        return True

    def _after_close(self) -> None:  # noqa: B027
        """Called once by :meth:`close`, after the member has closed."""

    @abc.abstractmethod
    def _describe(self) -> str:
        """The recipe's state for its repr, e.g. ``"identity='a' leader=None"``."""

    # ------------------------------------------------------------------ for the recipes

    def _closed_error(self) -> CoordinatorStateError:
        return CoordinatorStateError(f"{self._ctx.name} is closed")

    def _wait(
        self, ready: Callable[[], V | None], timeout: float | None, what: str | Callable[[], str]
    ) -> V:
        """Block until ``ready()`` returns something other than None; return it.

        ``ready`` runs without the state's lock held (it may run callbacks, e.g. depose a
        leader), after every notification of the condition and at least every
        :attr:`_WAIT_POLL_S`; it may raise, to end the wait with an error.

        Args:
            ready: what is awaited.
            timeout: seconds, on the clock; None waits forever.
            what: what is awaited, for the timeout's message (a callable is asked then).

        Raises:
            CoordinationTimeoutError: not ready within ``timeout``; the message says ``what``.
            CoordinatorStateError: the recipe was closed.
            FatalBrokerError: the member stopped on an error a person must fix (or whichever
                error stopped it).
        """
        ctx = self._ctx
        deadline = None if timeout is None else ctx.clock.monotonic() + timeout
        while True:
            if ctx.closed:
                raise self._closed_error()
            if self._member.state is MemberState.CLOSED:
                # Stopped by a fatal error: the member raises it.
                self._member.ensure_active_group(timeout=0)
            value = ready()
            if value is not None:
                return value
            remaining = None if deadline is None else deadline - ctx.clock.monotonic()
            if remaining is not None and remaining <= 0:
                described = what if isinstance(what, str) else what()
                raise CoordinationTimeoutError(
                    f"{ctx.name}: timed out after {timeout}s waiting for {described}"
                )
            poll = self._WAIT_POLL_S
            with ctx.lock:
                if not ctx.closed:
                    ctx.changed.wait(poll if remaining is None else min(remaining, poll))

    def _guard_lease(
        self, margin_ms: int | None, *, why: str, reserve: tuple[str, int] | None = None
    ) -> LeaseGuard:
        """Make the recipe's lease guard (see :class:`coordination.lease.LeaseGuard`).

        Raises:
            ConfigurationError: the margin is invalid or leaves no room.
        """
        self._lease = guard_lease(self._member, margin_ms, why=why, reserve=reserve)
        return self._lease

    def _watch_lease(
        self,
        on_low: Callable[[], object],
        *,
        poll_s: float,
        name: str,
        active: Callable[[], bool],
        idle_poll_s: float | None = None,
        on_held: Callable[[], object] | None = None,
    ) -> None:
        """Start the lease guard's watchdog thread ``<name>|<group>`` on the clock (see
        ``LeaseGuard.start_watchdog``); :meth:`close` stops it."""
        assert self._lease is not None, "_guard_lease comes first"
        lease, ctx = self._lease, self._ctx

        def at_risk() -> object:
            ctx.hooks.lease_at_risk(
                lambda: LeaseAtRisk(
                    group_id=ctx.group_id, member_id=ctx.member_id, remaining_s=lease.remaining()
                ),
            )
            return on_low()

        self._lease.start_watchdog(
            self._ctx.clock,
            at_risk,
            poll_s=poll_s,
            name=f"{name}|{self.group_id}",
            active=active,
            idle_poll_s=idle_poll_s,
            on_held=on_held,
        )
