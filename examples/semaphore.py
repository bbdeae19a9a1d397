"""A distributed semaphore on a Kafka group: at most N members hold a permit at once.

    python examples/semaphore.py --bootstrap-servers localhost:9092 --permits 2

Run three instances: two hold a permit and "work", the third waits; stop a holder (Ctrl-C)
and the waiter gets its permit within a rebalance.

This is a recipe written as a user would write one: a :class:`coordination.Coordinator`
subclass on the public surface only (``coordination``, ``coordination.clock``,
``coordination.lease``), with no import of a private module. The members advertise whether
they want a permit; the group's leader gives at most N of them one; each holder uses its
permit only while its membership lease holds (``coordination.lease.LeaseGuard``), so a
member cut off from the broker stops before the group can have given its permit away.
tests/integration/test_example_semaphore.py runs it on a real broker,
examples/semaphore_simulation.py on the deterministic simulator under faults.
"""

from __future__ import annotations

import argparse
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata
from coordination.clock import Clock
from coordination.errors import ConfigurationError
from coordination.lease import LeaseGuard
from coordination.transport import Transport

log = logging.getLogger("examples.semaphore")

PROTOCOL = "semaphore-v1"


def _ask(member: Member) -> dict[str, Any]:
    """What a member advertised: its ``permits``, ``want``, ``held`` (in the last generation)."""
    try:
        ask: dict[str, Any] = json.loads(member.metadata)
    except ValueError:
        return {"permits": 0, "want": False, "held": False}
    return ask


def grant(members: Sequence[Member]) -> dict[str, bool]:
    """Who gets a permit: at most N of the members that want one (N: the smallest any member
    advertises, so that members configured differently never give out more than any of
    them allows), those that held one in the last generation first, then by member id."""
    asks = {m.member_id: _ask(m) for m in members}
    permits = min((int(a.get("permits", 0)) for a in asks.values()), default=0)
    wanting = sorted(
        (i for i, a in asks.items() if a.get("want")), key=lambda i: (not asks[i].get("held"), i)
    )
    chosen = set(wanting[: max(0, permits)])
    return {i: i in chosen for i in sorted(asks)}


class Semaphore(Coordinator):
    """A counting semaphore shared by the members of a Kafka group: N permits at most.

    Example:
        with Semaphore("nightly-reports", permits=2, bootstrap_servers="localhost:9092") as sem:
            if sem.wait_for_permit(timeout=60):
                while sem.holds():          # read at each step: the lease may run low
                    run_one_bounded_step()
            sem.release()                   # let a waiting member have it

    How permits are given:
        Every member advertises, in its JoinGroup metadata, its ``permits`` and whether it
        wants a permit. The leader gives one to at most ``permits`` of those that want one
        (see :func:`grant`): those that held one in the last generation first, so a
        rebalance for an unrelated reason moves no permit. :meth:`acquire` and
        :meth:`release` change what this member wants and rejoin, which rebalances the group.

    Safety:
        The classic protocol is eager: every member gives up its permit when a rebalance
        starts (``on_join_prepare``) and gets one back only with the new generation's
        assignment. A member that no longer hears from the broker (a network partition, a
        long pause) may not know a rebalance happened, so :meth:`holds` is true only while
        its membership lease is above ``lease_margin_ms`` (``coordination.lease.LeaseGuard``),
        and the lease watchdog calls ``on_revoked`` when it runs low: at no instant do more
        than ``permits`` members hold a permit with a valid lease.

    States:
        WAITING -> HOLDING: this member's assignment grants a permit; ``on_granted`` runs.
        HOLDING -> WAITING: a rebalance starts, :meth:`release` or :meth:`close` is called,
            or the lease runs low (``on_revoked`` runs); a lease renewed while the permit is
            still assigned makes it HOLDING again (``on_granted`` again).

    Threads:
        ``on_granted`` and ``on_revoked`` run on the membership thread, the lease watchdog's
        thread or the thread that calls :meth:`release` / :meth:`close`, one at a time and
        alternating (never two ``on_granted`` without an ``on_revoked`` between). They must
        not call :meth:`close` or :meth:`wait_for_permit`. An exception they raise is logged.
    """

    def __init__(
        self,
        name: str,
        *,
        permits: int,
        want: bool = True,
        lease_margin_ms: int | None = None,
        on_granted: Callable[[], object] | None = None,
        on_revoked: Callable[[], object] | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            name: the semaphore's name: the Kafka group its members join.
            permits: how many members may hold a permit at once (>= 1); every member of the
                group should say the same (the smallest one advertised wins).
            want: whether this member asks for a permit from the start; see :meth:`acquire`.
            lease_margin_ms: how long before its membership lease runs out a holder stops
                holding; default ``heartbeat_interval_ms``.
            on_granted: called when this member gets a permit (see Threads).
            on_revoked: called when it loses or gives up its permit.
            transport: as for :class:`coordination.Coordinator`.
            clock: as for :class:`coordination.Coordinator`.
            **settings: as for :class:`coordination.Coordinator` (``bootstrap_servers``, ...).

        Raises:
            ConfigurationError: ``permits`` is not an int >= 1, the margin leaves no room
                within the session, or a setting is invalid.
        """
        if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
            raise ConfigurationError(f"permits must be an int >= 1, got {permits!r}")
        super().__init__(name, transport=transport, clock=clock, **settings)
        self.permits = permits
        self._want = want
        self._on_granted = on_granted
        self._on_revoked = on_revoked
        self._guard = LeaseGuard(
            self.membership_lease, self.config, lease_margin_ms, why=": no permit could be held"
        )
        # Every wait, lock and thread comes from the member's clock, so that a test's or a
        # simulation's clock controls them.
        self._changed = self.clock.condition()  # guards the state below; notified on changes
        self._granted = False  # the current generation's assignment gives this member a permit
        self._held_last = False  # it did in the generation it is leaving (advertised)
        self._callbacks = self.clock.rlock()  # one callback at a time, in order
        self._announced = False  # the last callback called was on_granted
        self._never = self.clock.event()  # never set: for plain sleeps on the clock

    # -- the protocol ------------------------------------------------------------------

    def protocol_type(self) -> str:
        return "semaphore"

    def metadata(self) -> Sequence[ProtocolMetadata]:
        with self._changed:
            ask = {"permits": self.permits, "want": self._want, "held": self._held_last}
        return [ProtocolMetadata(PROTOCOL, json.dumps(ask, sort_keys=True).encode())]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        return {i: b"1" if granted else b"0" for i, granted in grant(members).items()}

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        self._give_up(remember=True)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        granted = assignment == b"1"
        with self._changed:
            self._granted = granted
            self._changed.notify_all()
        if granted:
            self._guard.start_watchdog(
                self.clock,
                lambda: self._announce(False),
                poll_s=0.25,
                name=f"semaphore-lease|{self.group_id}",
                active=lambda: self._granted,
                on_held=lambda: self._announce(self.holds()),
            )
            self._guard.wake()
        self._announce(self.holds())

    def on_leave_prepare(self) -> None:
        self._give_up(remember=False)

    # -- what a user calls ---------------------------------------------------------------

    def holds(self) -> bool:
        """True while this member holds a permit and its membership lease holds, read now."""
        return self._granted and self._guard.holds()

    def wait_for_permit(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`holds`, at most ``timeout`` seconds (None: for ever).

        Returns:
            Whether this member holds a permit.
        """
        clock = self.clock
        deadline = None if timeout is None else clock.monotonic() + timeout
        # holds() reads the member's lease, so it is never called under this semaphore's
        # lock: a callback holds that lock while the engine may hold its own.
        while not self.holds():
            left = 0.25 if deadline is None else min(0.25, deadline - clock.monotonic())
            if left <= 0:
                return False
            with self._changed:
                if not self._granted:
                    self._changed.wait(left)  # until a generation grants a permit
                    continue
            clock.sleep(min(left, 0.05), self._never)  # granted, but the lease is low
        return True

    def acquire(self) -> None:
        """Ask for a permit (if this member did not already): the group rebalances."""
        with self._changed:
            if self._want:
                return
            self._want = True
        self.request_rejoin("asks for a permit")

    def release(self) -> None:
        """Give up the permit at once (``on_revoked`` runs first if it was held) and stop
        asking for one: the group rebalances and gives it to a member that waits."""
        with self._changed:
            if not self._want:
                return
            self._want = False
        self._give_up(remember=False)
        self.request_rejoin("releases its permit")

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        """Give up the permit, stop the lease watchdog and leave the group (see
        :meth:`coordination.Coordinator.close`)."""
        try:
            super().close(timeout, leave_group=leave_group)
        finally:
            self._give_up(remember=False)
            self._guard.close()
            self._guard.join(timeout)

    # -- inside ----------------------------------------------------------------------------

    def _give_up(self, *, remember: bool) -> None:
        with self._changed:
            self._held_last = self._granted if remember else False
            self._granted = False
        self._announce(False)

    def _announce(self, holding: bool) -> None:
        with self._callbacks:
            if holding == self._announced:
                return
            self._announced = holding
            callback = self._on_granted if holding else self._on_revoked
            if callback is None:
                return
            try:
                callback()
            except Exception:
                log.exception(
                    "the semaphore's %s callback raised", "on_granted" if holding else "on_revoked"
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--name", default="example-semaphore")
    parser.add_argument("--permits", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    me = f"worker-{uuid.uuid4().hex[:6]}"
    with Semaphore(
        args.name,
        permits=args.permits,
        bootstrap_servers=args.bootstrap_servers,
        on_granted=lambda: log.info("%s: got a permit", me),
        on_revoked=lambda: log.info("%s: gave up its permit", me),
    ) as semaphore:
        try:
            while True:
                if semaphore.wait_for_permit(timeout=5):
                    log.info("%s: working with a permit", me)
                    semaphore.clock.sleep(1.0, semaphore.clock.event())
                else:
                    log.info("%s: waiting for a permit", me)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
