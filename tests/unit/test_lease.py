"""LeaseGuard: the margin it validates, its checks, and its watchdog on a stepped clock.

The watchdog runs on its own thread. ``SteppedClock`` makes it deterministic: every wait
of the watchdog blocks until the test lets it run its course (the time moves on by
exactly that wait), so each step is one look of the watchdog at a known time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from coordination import CoordinatorConfig
from coordination.clock import Event
from coordination.errors import ConfigurationError
from coordination.lease import LeaseGuard
from coordination.testing import ManualClock

# session 10 s, heartbeat 3 s: with the default margin the lease is low at 3 s or less.
BASE = {"bootstrap_servers": "x:1", "session_timeout_ms": 10_000}
POLL_S = 0.25


def config(**settings: object) -> CoordinatorConfig:
    return CoordinatorConfig.from_settings("g", {**BASE, **settings})


class SteppedClock(ManualClock):
    """A ManualClock whose sleeps wait for the test (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._asleep = False
        self._go = False

    def sleep(self, seconds: float, interrupt: Event) -> None:
        with self._cond:
            self.sleeps.append(seconds)
            self._asleep, self._go = True, False
            self._cond.notify_all()
            while not self._go and not interrupt.is_set():
                self._cond.wait(0.005)
            self._asleep = False
            self._cond.notify_all()

    def wait_asleep(self, sleeps: int = 1) -> None:
        """Block until the watchdog has slept ``sleeps`` times in all and sleeps now."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._asleep and len(self.sleeps) >= sleeps, 5)
            assert ok, "the watchdog did not wait on the clock"

    def step(self, suspended: float = 0.0) -> None:
        """Let the watchdog's wait run its course (and the host sleep ``suspended`` seconds
        more), then return once it has looked at the lease and waits again."""
        self.wait_asleep()
        with self._cond:
            n = len(self.sleeps)
            self.now += self.sleeps[-1] + suspended
            self._go = True
            self._cond.notify_all()
        self.wait_asleep(n + 1)


class Member:
    """A lease source: confirmed until ``expires_at`` on the clock."""

    def __init__(self, clock: ManualClock, lease_s: float = 10.0) -> None:
        self.clock = clock
        self.expires_at = clock.now + lease_s

    def lease(self) -> float:
        return max(0.0, self.expires_at - self.clock.now)

    def renew(self, lease_s: float = 10.0) -> None:
        self.expires_at = self.clock.now + lease_s


def guard(member: Member, margin_ms: int | None = None, **kw: object) -> LeaseGuard:
    return LeaseGuard(member.lease, config(**kw), margin_ms, why=": never safe")


# ------------------------------------------------------------------ the margin setting


def test_the_margin_defaults_to_the_heartbeat_interval() -> None:
    g = guard(Member(ManualClock()), heartbeat_interval_ms=2_000)
    assert g.margin_ms == 2_000
    assert g.floor_s == 2.0


@pytest.mark.parametrize("margin", [-1, True, 1.5, "3000"])
def test_a_margin_must_be_an_int_at_least_zero(margin: object) -> None:
    with pytest.raises(ConfigurationError) as e:
        guard(Member(ManualClock()), margin)  # type: ignore[arg-type]
    assert str(e.value) == f"lease_margin_ms must be an int >= 0, got {margin!r}"


@pytest.mark.parametrize(
    ("settings", "bound"),
    [({}, 10_000), ({"session_timeout_ms": 45_000, "rebalance_timeout_ms": 8_000}, 8_000)],
)
def test_a_margin_must_stay_below_the_guaranteed_lease(
    settings: dict[str, int], bound: int
) -> None:
    # Heartbeats every 3 s (the default): the floor may come within 3 s of the bound, no closer.
    guard(Member(ManualClock()), bound - 3_001, **settings)
    with pytest.raises(ConfigurationError) as e:
        guard(Member(ManualClock()), bound, **settings)
    assert str(e.value) == (
        f"lease_margin_ms={bound} must be below min(session_timeout_ms, "
        f"rebalance_timeout_ms)={bound}: never safe"
    )


def test_a_floor_within_a_heartbeat_interval_of_the_lease_is_refused() -> None:
    # Session 10 s, heartbeats every 3 s: a floor of 7.5 s would be crossed before each
    # heartbeat that renews the lease (it runs down to 10 - 3 s and a round trip), and the
    # recipe would stop its work every time.
    member = Member(ManualClock())
    with pytest.raises(ConfigurationError) as e:
        LeaseGuard(member.lease, config(), 3_000, why="", reserve=("stop_timeout_ms", 4_500))
    assert str(e.value) == (
        "lease_margin_ms (3000) + stop_timeout_ms (4500) + heartbeat_interval_ms (3000) must "
        "be below min(session_timeout_ms, rebalance_timeout_ms) (10000): the lease runs down "
        "by a heartbeat interval between renewals, so it would run out before each one; "
        "lower them or raise session_timeout_ms"
    )
    with pytest.raises(ConfigurationError) as e:
        guard(member, 7_000)
    assert str(e.value).startswith("lease_margin_ms (7000) + heartbeat_interval_ms (3000)")
    g = LeaseGuard(member.lease, config(), 3_000, why="", reserve=("stop_timeout_ms", 3_999))
    assert g.floor_s == pytest.approx(6.999)


def test_a_reserve_counts_with_the_margin_and_is_named() -> None:
    member = Member(ManualClock())
    g = LeaseGuard(member.lease, config(), 3_000, why="!", reserve=("stop_timeout_ms", 3_000))
    assert g.floor_s == 6.0
    with pytest.raises(ConfigurationError) as e:
        LeaseGuard(member.lease, config(), 3_000, why="!", reserve=("stop_timeout_ms", 7_000))
    assert str(e.value) == (
        "lease_margin_ms (3000) + stop_timeout_ms (7000) must be below "
        "min(session_timeout_ms, rebalance_timeout_ms) (10000)!"
    )


# ------------------------------------------------------------------ checks at the call


def test_holds_and_remaining_read_the_lease_at_each_call() -> None:
    clock = ManualClock()
    member = Member(clock)
    g = guard(member, 3_000)
    assert g.holds()
    assert g.remaining() == pytest.approx(7.0)
    clock.advance(6.5)
    assert g.holds()
    assert g.remaining() == pytest.approx(0.5)
    clock.advance(0.5)  # exactly the margin left: no longer holds
    assert not g.holds()
    assert g.remaining() == 0.0
    clock.advance(100)  # a paused process sees it at once
    assert not g.holds()
    assert g.remaining() == -3.0
    member.renew()
    assert g.holds()


# ------------------------------------------------------------------ the watchdog


class Watched:
    """A guard whose watchdog runs on a stepped clock; records when ``on_low`` ran."""

    def __init__(
        self, *, idle_poll_s: float | None = 0.5, raises: bool = False, active: bool = True
    ) -> None:
        self.clock = SteppedClock()
        self.member = Member(self.clock)
        self.guard = guard(self.member, 3_000)
        self.active = active
        self.raises = raises
        self.fired: list[float] = []  # clock times
        self.held: list[float] = []  # clock times on_held ran
        self.looked = threading.Event()  # set at every look
        self.guard.start_watchdog(
            self.clock,
            self._on_low,
            on_held=lambda: self.held.append(self.clock.now),
            active=self._active,
            poll_s=POLL_S,
            idle_poll_s=idle_poll_s,
            name="test-lease",
        )

    def _active(self) -> bool:
        self.looked.set()
        return self.active

    def _on_low(self) -> None:
        self.fired.append(self.clock.now)
        if self.raises:
            raise RuntimeError("boom")

    def steps_until_fired(self, most: int = 100) -> None:
        count = len(self.fired)
        for _ in range(most):
            self.clock.step()
            if len(self.fired) > count:
                return
        raise AssertionError("the watchdog never fired")

    def close(self) -> None:
        self.guard.close()
        self.guard.join(5)
        assert self.guard._thread is not None
        assert not self.guard._thread.is_alive()


@pytest.fixture
def watched() -> Iterator[Watched]:
    w = Watched()
    yield w
    w.close()


def test_the_watchdog_fires_once_when_the_lease_falls_to_the_margin(watched: Watched) -> None:
    watched.steps_until_fired()
    # Exactly when 3 s (the margin) of the 10 s lease were left, not a look earlier.
    assert watched.fired == [1007.0]
    # Never a wait longer than the poll, nor past the moment the lease runs low.
    assert max(watched.clock.sleeps) == POLL_S
    for _ in range(10):
        watched.clock.step()
    assert watched.fired == [1007.0]  # once, however long it stays low


def test_the_watchdog_fires_again_only_after_the_lease_held_again(watched: Watched) -> None:
    watched.steps_until_fired()
    watched.member.renew()
    watched.clock.step()
    assert watched.fired == [1007.0]
    watched.steps_until_fired()
    assert len(watched.fired) == 2
    assert watched.fired[1] == pytest.approx(watched.member.expires_at - 3.0)


def test_the_watchdog_tells_once_when_the_lease_holds_again_after_it_ran_low(
    watched: Watched,
) -> None:
    for _ in range(5):
        watched.clock.step()
    assert watched.held == []  # it never ran low
    watched.steps_until_fired()
    for _ in range(3):
        watched.clock.step()
    assert watched.held == []  # still low
    watched.member.renew()
    renewed_at = watched.clock.now
    for _ in range(3):
        watched.clock.step()
    # At the first look after the renewal (within a poll), once.
    assert len(watched.held) == 1 and renewed_at <= watched.held[0] <= renewed_at + POLL_S


def test_a_lease_just_above_its_floor_is_not_waited_on_to_the_last_rounding_error() -> None:
    w = Watched()
    try:
        w.clock.wait_asleep()
        # At its next look, a rounding error above the floor will be left.
        w.member.expires_at = w.clock.now + POLL_S + 3.0 + 1e-12
        w.clock.step()
        assert w.fired == []
        assert w.clock.sleeps[-1] == 0.001  # its shortest wait, not 1e-12 s
        w.clock.step()
        assert len(w.fired) == 1
    finally:
        w.close()


def test_a_suspended_host_is_noticed_at_its_next_look(watched: Watched) -> None:
    watched.clock.step()
    assert watched.fired == []
    watched.clock.step(suspended=60.0)
    assert watched.fired == [watched.clock.now]


def test_nothing_fires_while_nothing_is_guarded() -> None:
    w = Watched()
    try:
        w.active = False
        w.clock.step()
        w.clock.now += 60.0
        for _ in range(3):
            w.clock.step()
        assert w.fired == []
        assert w.clock.sleeps[-1] == 0.5  # idle_poll_s
        w.active = True
        w.steps_until_fired()
        assert len(w.fired) == 1
        # Idle again, then guarding again with the lease still low: it fires again.
        w.active = False
        w.clock.step()
        w.active = True
        w.steps_until_fired()
        assert len(w.fired) == 2
    finally:
        w.close()


def test_without_an_idle_poll_a_wake_starts_the_watching() -> None:
    w = Watched(idle_poll_s=None, active=False)
    try:
        assert w.looked.wait(5)
        w.clock.now += 60.0
        w.active = True
        assert w.clock.sleeps == []  # idle: it waits for a wake, not on the clock
        w.guard.wake()
        w.clock.wait_asleep()
        assert w.fired == [1060.0]
    finally:
        w.close()


def test_a_raising_action_is_logged_and_the_watchdog_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = Watched(raises=True)
    try:
        w.steps_until_fired()
        assert "the lease watchdog's action raised" in caplog.text
        w.member.renew()
        w.steps_until_fired()
        assert len(w.fired) == 2
    finally:
        w.close()


def test_closing_stops_the_watchdog_before_it_fires() -> None:
    w = Watched()
    w.clock.step()
    w.close()  # interrupts its wait
    w.clock.now += 60.0
    assert w.fired == []


def test_a_closed_guard_starts_no_watchdog() -> None:
    member = Member(ManualClock())
    g = guard(member)
    g.close()
    g.start_watchdog(ManualClock(), lambda: None, poll_s=POLL_S, name="never")
    assert g._thread is None
    g.join(1)  # nothing to wait for
