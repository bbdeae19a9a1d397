"""The membership-lease guard: a margin, a floor, and a watchdog, for work only one member may do.

A member that acts as the only one of its kind (a leader, the owner of a task, the
deleter of a partition's files) must stop before the broker can have removed it from
the group, that is before :meth:`Coordinator.membership_lease` runs out. It stops a
margin earlier, so that a clock running a little slow or the stopping itself cannot
carry it past the lease. :class:`LeaseGuard` validates that margin, answers whether the
lease still holds, reading the clock at the call, and can watch the lease from a thread
of its own that acts once when it runs low, even if nothing else happens. The recipes
(election, tasks, partitioning, the pipeline) guard their work with it, and so can a
user's own ``Coordinator`` subclass (``examples/semaphore.py`` does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ._config import CoordinatorConfig
from .clock import Clock, Event, Thread
from .errors import ConfigurationError
from .parts import check_int

__all__ = ["LeaseGuard"]

log = logging.getLogger("coordination.lease")

# The watchdog's shortest wait between two looks at a lease that still holds.
_SHORTEST_WAIT_S = 0.001


def _always() -> bool:
    return True


class LeaseGuard:
    """One member's membership lease, held to a margin: validated once, checked at each call.

    Example:
        guard = LeaseGuard(member.membership_lease, member.config, lease_margin_ms,
                           why=", or a leader would never be valid")
        guard.start_watchdog(member.clock, depose, poll_s=0.25, name="election-lease")
        ...
        if guard.holds():
            act_as_leader()
        ...
        guard.close()

    The lease holds while more than its *floor* remains: the margin, plus the ``reserve``
    a recipe needs to stop what it does (a task distribution's ``stop_timeout_ms``).

    Watchdog:
        :meth:`start_watchdog` runs a daemon thread that looks at the lease while
        ``active()`` is true and calls ``on_low()`` once when it finds that the lease no
        longer holds. It calls it again only after it saw the lease hold again, or saw
        ``active()`` false (it re-arms); seeing it hold again after ``on_low``, it calls
        ``on_held()`` if given. It waits between looks on the engine's clock,
        never longer than ``poll_s`` nor than the lease has left above its floor: a host
        suspended meanwhile (or a process paused) is noticed within ``poll_s`` of resuming.
        While ``active()`` is false it waits ``idle_poll_s``, or until :meth:`wake` if None.
        ``on_low`` and ``on_held`` run on the watchdog thread; an exception they raise is
        logged and the watchdog goes on.
    """

    def __init__(
        self,
        lease: Callable[[], float],
        config: CoordinatorConfig,
        margin_ms: int | None,
        *,
        why: str,
        reserve: tuple[str, int] | None = None,
    ) -> None:
        """Validate the margin.

        Args:
            lease: the member's lease now, in seconds (``Coordinator.membership_lease``); called
                at every check, so it may look the member up anew each time.
            config: the member's settings; ``margin_ms`` defaults to ``heartbeat_interval_ms``
                and, with the reserve, must stay below ``min(session_timeout_ms,
                rebalance_timeout_ms)`` by more than ``heartbeat_interval_ms``.
            margin_ms: the ``lease_margin_ms`` setting, or None for its default.
            why: the end of the error message when the margin leaves no room, with its
                separator, e.g. ``": no deletion could ever be fenced"``.
            reserve: a setting's name and value (ms) added to the margin to make the floor,
                e.g. ``("stop_timeout_ms", 5000)``; already validated by the caller.

        Raises:
            ConfigurationError: the margin is not an int >= 0, or leaves no room (the floor
                is not below the lease by more than a heartbeat interval); the message names
                ``lease_margin_ms``.
        """
        margin = config.heartbeat_interval_ms if margin_ms is None else margin_ms
        check_int("lease_margin_ms", margin, minimum=0)
        guaranteed_ms = min(config.session_timeout_ms, config.rebalance_timeout_ms)
        reserve_ms = 0 if reserve is None else reserve[1]
        floor_ms = margin + reserve_ms
        if floor_ms >= guaranteed_ms:
            if reserve is None:
                raise ConfigurationError(
                    f"lease_margin_ms={margin} must be below min(session_timeout_ms, "
                    f"rebalance_timeout_ms)={guaranteed_ms}{why}"
                )
            raise ConfigurationError(
                f"lease_margin_ms ({margin}) + {reserve[0]} ({reserve_ms}) must be below "
                f"min(session_timeout_ms, rebalance_timeout_ms) ({guaranteed_ms}){why}"
            )
        if floor_ms + config.heartbeat_interval_ms >= guaranteed_ms:
            # Between two renewals (heartbeats, an interval apart) the lease runs down by an
            # interval and a round trip: a floor that close is crossed before every renewal,
            # and the recipe would stop its work each time.
            named = f" + {reserve[0]} ({reserve_ms})" if reserve is not None else ""
            raise ConfigurationError(
                f"lease_margin_ms ({margin}){named} + heartbeat_interval_ms "
                f"({config.heartbeat_interval_ms}) must be below min(session_timeout_ms, "
                f"rebalance_timeout_ms) ({guaranteed_ms}): the lease runs down by a heartbeat "
                "interval between renewals, so it would run out before each one; lower them "
                "or raise session_timeout_ms"
            )
        self._lease = lease
        self.margin_ms = margin
        # In one division, as the recipes always computed it.
        self.floor_s = (margin + reserve_ms) / 1000
        # Made by start_watchdog, from the clock the watchdog waits on.
        self._wake: Event | None = None
        self._clock: Clock | None = None
        self._closed = False
        self._thread: Thread | None = None

    def remaining(self) -> float:
        """Seconds the lease has left above its floor, from the clock now; <= 0 once low."""
        return self._lease() - self.floor_s

    def holds(self) -> bool:
        """True while more than the floor is left of the lease, read from the clock now."""
        return self._lease() > self.floor_s

    # ------------------------------------------------------------------ watchdog

    def start_watchdog(
        self,
        clock: Clock,
        on_low: Callable[[], object],
        *,
        poll_s: float,
        name: str,
        active: Callable[[], bool] = _always,
        idle_poll_s: float | None = None,
        on_held: Callable[[], object] | None = None,
    ) -> None:
        """Start the watchdog thread (see the class docstring); once, and never after
        :meth:`close`.

        Args:
            clock: the member's clock (``Coordinator.clock``), which the lease is counted on.
            on_low: called once when the lease no longer holds while ``active()``.
            poll_s: the longest wait between two looks at the lease.
            name: the thread's name.
            active: whether there is anything to guard now; default always.
            idle_poll_s: how long to wait while ``active()`` is false before asking it
                again; None: until :meth:`wake`.
            on_held: called once when the lease holds again after ``on_low`` was called
                (e.g. to start what waited for it), while ``active()``.
        """
        if self._closed or self._thread is not None:
            return
        wake = self._wake = clock.event()
        self._clock = clock
        self._thread = clock.thread(
            lambda: self._watch(clock, wake, on_low, on_held, active, poll_s, idle_poll_s), name
        )
        self._thread.start()

    def wake(self) -> None:
        """Make the watchdog look now (e.g. ``active()`` may have become true)."""
        if self._wake is not None:
            self._wake.set()

    def close(self) -> None:
        """Stop the watchdog (idempotent); it ends at its next look, ``on_low`` not called."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the watchdog thread to end (after :meth:`close`)."""
        thread = self._thread
        if (
            thread is not None
            and self._clock is not None
            and (thread is not self._clock.current_thread())
        ):
            thread.join(timeout)

    def _watch(
        self,
        clock: Clock,
        wake: Event,
        on_low: Callable[[], object],
        on_held: Callable[[], object] | None,
        active: Callable[[], bool],
        poll_s: float,
        idle_poll_s: float | None,
    ) -> None:
        armed = True
        while True:
            # Cleared before the look: a wake() after it makes the next wait return at once.
            wake.clear()
            if self._closed:
                return
            if not active():
                armed = True
                if idle_poll_s is None:
                    wake.wait()
                else:
                    clock.sleep(idle_poll_s, wake)
                continue
            remaining = self.remaining()
            if remaining > 0:
                if not armed and on_held is not None:
                    try:
                        on_held()
                    except Exception:
                        log.exception("the lease watchdog's action raised")
                armed = True
                # Renewals only push the lease out, so waking when it runs low is enough;
                # the cap keeps a suspended host from oversleeping by the suspension. The
                # floor keeps a rounding error of the remaining time from being the wait (a
                # manual clock moved on by 1e-14 s may not move at all).
                clock.sleep(max(_SHORTEST_WAIT_S, min(remaining, poll_s)), wake)
                continue
            if armed:
                armed = False
                try:
                    on_low()
                except Exception:
                    log.exception("the lease watchdog's action raised")
                continue  # look again at once: on_low may have ended what was active
            clock.sleep(poll_s, wake)
