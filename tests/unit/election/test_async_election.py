"""AsyncLeaderElection on a scripted broker and a manual clock: its callbacks run on the loop,
and the loop never waits for itself, even when it is the first to see that the lease ran
out (after a GC or VM pause, every thread resumes at once).

The rounds run on a worker thread (``asyncio.to_thread``), standing in for the membership
thread; the test's coroutine is the application on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from recipes.election import AsyncLeaderElection, Leadership, NotLeaderError
from recipes.election._leadership import LEASE_RAN_OUT

from ..test_async_faces import on_a_loop
from ._member import IDENTITY, LEASE_LOW_AFTER_S, Member

DEPOSED_ITSELF = f"leader deposed itself: {LEASE_RAN_OUT}"


def async_member(monkeypatch: pytest.MonkeyPatch) -> tuple[Member, AsyncLeaderElection, Any]:
    """An async member, and a threading event set once it rejoins after deposing itself."""
    a = Member(build=AsyncLeaderElection)
    assert isinstance(a.face, AsyncLeaderElection)
    rejoined = threading.Event()
    request_rejoin = a.engine.request_rejoin

    def spy(reason: str) -> None:
        request_rejoin(reason)
        if reason == DEPOSED_ITSELF:
            rejoined.set()

    monkeypatch.setattr(a.engine, "request_rejoin", spy)
    return a, a.face, rejoined


def check(face: AsyncLeaderElection, leadership: Leadership) -> bool:
    try:
        leadership.check()
    except NotLeaderError:
        return False
    return True


READS: dict[str, Callable[[AsyncLeaderElection, Leadership], bool]] = {
    "is_leader": lambda face, _: face.is_leader,
    "leadership()": lambda face, _: face.leadership() is not None,
    "metrics()": lambda face, _: face.metrics().is_leader,
    "Leadership.check()": check,
    "Leadership.is_valid()": lambda _, leadership: leadership.is_valid(),
}


@pytest.mark.parametrize("read", READS.values(), ids=list(READS))
def test_the_loop_that_first_sees_the_lease_ran_out_keeps_running_and_the_group_elects_again(
    monkeypatch: pytest.MonkeyPatch, read: Callable[[AsyncLeaderElection, Leadership], bool]
) -> None:
    a, face, rejoined = async_member(monkeypatch)

    async def scenario() -> None:
        loop_thread = threading.current_thread()
        await face.start()  # binds the loop (the test drives the member's rounds)
        await asyncio.to_thread(a.lead)
        leadership = face.leadership()
        assert leadership is not None and read(face, leadership)
        a.clock.advance(LEASE_LOW_AFTER_S + 1)  # a pause: the lease ran out meanwhile

        assert not read(face, leadership)  # returns at once, on the loop
        assert leadership.lost.is_set() and leadership.reason == LEASE_RAN_OUT
        assert await face.lost_wait(leadership) == LEASE_RAN_OUT
        # on_deposed runs on the loop, then the member rejoins (from the election's thread):
        # the group still names it leader until it does.
        assert await asyncio.to_thread(rejoined.wait, 5), "the deposed leader never rejoined"
        assert ("deposed", LEASE_RAN_OUT) in a.events
        assert a.threads[a.events.index(("deposed", LEASE_RAN_OUT))] is loop_thread

        await asyncio.to_thread(a.lead)  # the rebalance its rejoin asked for
        assert face.is_leader and a.events[-2:] == [("elected", 2), ("leader", (IDENTITY, 2))]
        assert all(thread is loop_thread for thread in a.threads)

    on_a_loop(scenario)


def test_the_loop_sees_the_lease_ran_out_while_a_callback_holds_the_callbacks_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The membership thread runs on_leader_change and waits for the loop, holding the turn
    # of the election's callbacks; the callback itself (on the loop) finds the lease ran out.
    # on_deposed waits for that turn, so it must not wait on the loop.
    a, face, rejoined = async_member(monkeypatch)
    seen: list[bool] = []

    def on_leader_change(info: object) -> None:
        a.clock.advance(LEASE_LOW_AFTER_S + 1)  # a pause while the callback runs
        seen.append(face.is_leader)

    face._user["on_leader_change"] = on_leader_change

    async def scenario() -> None:
        await face.start()
        await asyncio.to_thread(a.lead)  # elected; on_leader_change runs on the loop
        assert seen == [False]
        assert await asyncio.to_thread(rejoined.wait, 5), "the deposed leader never rejoined"
        assert a.events == [("elected", 1), ("deposed", LEASE_RAN_OUT)]

    on_a_loop(scenario)
