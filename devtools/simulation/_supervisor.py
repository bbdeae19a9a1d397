"""What a process supervisor does for a static member on Kafka's consumer group protocol: one
refused with UNRELEASED_INSTANCE_ID (its instance still held by the broker: a predecessor
killed without leaving, its session not over) stops, as Kafka's consumers do, and is started
again a session later."""

from __future__ import annotations

from collections.abc import Callable

from coordination.testing.simulation import Scheduler, SimTransport, Trace


def start_supervised(
    start: Callable[[SimTransport], None],
    stopped: Callable[[], None],
    *,
    me: str,
    transport: SimTransport,
    clock: Scheduler,
    trace: Trace,
    session_s: float,
) -> None:
    """``start(transport)`` until it returns without a refusal; after each refusal,
    ``stopped()`` (close the refused member), a session's wait, and a new transport (the
    close closed the process's: a new client, new connections)."""
    from coordination.errors import UnreleasedInstanceIdError

    while True:
        try:
            start(transport)
            return
        except UnreleasedInstanceIdError:
            trace(f"{me}: refused (UNRELEASED_INSTANCE_ID): stops; restarted a session later")
            stopped()
            clock.sleep(session_s, clock.event())
            transport = transport.sibling()
