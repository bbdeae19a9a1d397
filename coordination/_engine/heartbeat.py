"""The heartbeat and session timers (Kafka's ``Heartbeat`` class), as pure time arithmetic."""

from __future__ import annotations


class HeartbeatTimers:
    """When the next heartbeat is due and whether the session has run out.

    All times are seconds on the engine's monotonic clock. The session is
    counted from the last *successful* heartbeat response (or the moment the
    member joined): if none arrives within ``session_timeout``, the broker has
    evicted this member by now, or is about to.
    """

    def __init__(self, *, interval_s: float, session_timeout_s: float, now: float) -> None:
        self.interval = interval_s
        self.session_timeout = session_timeout_s
        self.last_sent = float("-inf")
        self.last_received = now
        self.next_due = now
        self.in_flight = False

    def reset(self, now: float) -> None:
        """Start the session afresh (on joining a generation or finding a coordinator)."""
        self.last_received = now
        self.next_due = now + self.interval
        self.in_flight = False

    def keep_session(self) -> None:
        """A rejoin that left the broker's session timer as it was: the session still counts
        from the last heartbeat answered, the next heartbeat is due when it was."""
        self.in_flight = False

    def sent(self, now: float) -> None:
        self.last_sent = now
        self.in_flight = True
        self.next_due = now + self.interval

    def received(self, now: float) -> None:
        self.in_flight = False
        self.last_received = now

    def answered_elsewhere(self, now: float) -> None:
        """A heartbeat the membership thread sent was answered: the session counts from it;
        the heartbeat thread's own schedule (and any heartbeat it has in flight) stays."""
        self.last_received = max(self.last_received, now)

    def failed(self, now: float, retry_s: float) -> None:
        """A heartbeat got no (usable) response: retry sooner than a full interval."""
        self.in_flight = False
        self.next_due = now + min(retry_s, self.interval)

    def is_due(self, now: float) -> bool:
        return not self.in_flight and now >= self.next_due

    def time_to_next(self, now: float) -> float:
        return max(0.0, self.next_due - now)

    def session_expired(self, now: float) -> bool:
        return now - self.last_received > self.session_timeout

    def age(self, now: float) -> float:
        """Seconds since the last successful heartbeat response."""
        return now - self.last_received
