"""The election for asyncio services: awaitable start, close and waits, ``async with``, an
async iterator of leader changes, and callbacks that may be coroutines.

The threaded election runs underneath unchanged (its safety does not depend on the event
loop being responsive), as every recipe's async face does (``recipes/_aio.py``). Its
callbacks hop onto the loop: each one, coroutine or plain function, runs on the loop that
started the election, and the election's thread waits for it, so callbacks keep their order
and ``on_deposed`` still finishes before this member rejoins to elect the next leader. The
loop itself never waits: when it is the first to see that the lease ran out (reading
``is_leader``, ``leadership()``, ``metrics()`` or ``Leadership.check()``), the leadership is
lost at once and ``on_deposed`` and the rejoin follow from a thread of the election. Waits
run on worker threads or resolve from callbacks; nothing polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from .._aio import AsyncFace, Changes, LoopBridge
from ._leader_election import ElectionMetrics, LeaderElection
from ._leadership import LeaderInfo, Leadership

AsyncCallback = Callable[[Any], Awaitable[None] | None]


class AsyncLeaderElection(AsyncFace):
    """:class:`LeaderElection` with an asyncio face.

    Example:
        async def main():
            async def lead(leadership):
                print("leading with token", leadership.token)

            async with AsyncLeaderElection("orders-leader", identity="http://10.0.0.7:8080",
                                           on_elected=lead, bootstrap_servers="kafka:9092") as e:
                async for leader in e.leader_changes():
                    print("leader is now", leader and leader.identity)

    Args:
        group_id, identity, and every other keyword: as for :class:`LeaderElection`, except
        that ``on_elected``, ``on_deposed`` and ``on_leader_change`` may be coroutine
        functions; every callback runs on the event loop that calls :meth:`start`.
    """

    def __init__(
        self,
        group_id: str,
        *,
        on_elected: AsyncCallback | None = None,
        on_deposed: AsyncCallback | None = None,
        on_leader_change: AsyncCallback | None = None,
        **kwargs: Any,
    ) -> None:
        self._bridge = LoopBridge()
        self._user = {
            "on_elected": on_elected,
            "on_deposed": on_deposed,
            "on_leader_change": on_leader_change,
        }
        self._changes: Changes[LeaderInfo | None] = Changes(self._bridge)
        self._lost: dict[int, asyncio.Future[str | None]] = {}  # lost_wait's, by token
        self.election = LeaderElection(
            group_id,
            on_elected=lambda leadership: self._hop("on_elected", leadership),
            on_deposed=self._deposed,
            on_leader_change=self._leader_changed,
            **kwargs,
        )
        # The bridge waits on the election's clock (a simulated one runs this face too), and
        # a deposition the loop notices is told from a thread of the election (it would wait
        # for the loop, on the loop).
        self._recipe = self.election
        self._bridge.clock = self.election._ctx.clock
        self.election._elector.must_not_wait = self._bridge.on_loop

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the election (connects on a worker thread; the loop stays free)."""
        await super().start()

    async def close(self, timeout: float = 30.0) -> None:
        """Leave the election; a leader is deposed first (its ``on_deposed`` runs on the loop)."""
        await super().close(timeout)

    def _closed(self) -> None:
        self._changes.close()

    # ------------------------------------------------------------------ queries and waits

    @property
    def is_leader(self) -> bool:
        """True while this member leads (no waiting: safe on the loop)."""
        return self.election.is_leader

    def leadership(self) -> Leadership | None:
        """This member's current leadership, or None."""
        return self.election.leadership()

    def leader(self) -> LeaderInfo | None:
        """The group's leader as of this member's last rebalance, or None."""
        return self.election.leader()

    def members(self) -> Mapping[str, str]:
        """Every member's identity by member id, as of this member's last rebalance."""
        return self.election.members()

    def metrics(self) -> ElectionMetrics:
        """As :meth:`LeaderElection.metrics`."""
        return self.election.metrics()

    async def wait_for_leader(self, timeout: float | None = None) -> LeaderInfo:
        """Wait until the group has a leader; return it (on a worker thread)."""
        return await asyncio.to_thread(self.election.wait_for_leader, timeout)

    async def lost_wait(self, leadership: Leadership) -> str | None:
        """Wait until ``leadership`` is lost; return why."""
        if leadership.lost.is_set():
            return leadership.reason
        future = self._lost.get(leadership.token)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._lost[leadership.token] = future
            if leadership.lost.is_set():  # lost meanwhile, before the future was there
                future.set_result(leadership.reason)
        return await future

    async def leader_changes(self) -> AsyncIterator[LeaderInfo | None]:
        """The group's leader, now and at every change (None: nobody leads), until closed."""
        async for leader in self._changes.iterate(self.election.leader):
            yield leader

    # ------------------------------------------------------------------ callbacks, on the loop

    def _hop(self, name: str, argument: Any) -> None:
        """Run the user's callback ``name`` on the loop: from the election's threads, wait
        for it; on the loop, schedule it (see ``recipes/_aio.py``). Nothing once the loop is
        gone."""
        callback = self._user[name]
        loop = self._bridge.loop
        if callback is None or loop is None or loop.is_closed():
            return
        self._bridge.run(callback, argument)

    def _deposed(self, leadership: Leadership) -> None:
        loop = self._bridge.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._resolve_lost, leadership)
        self._hop("on_deposed", leadership)

    def _resolve_lost(self, leadership: Leadership) -> None:
        future = self._lost.pop(leadership.token, None)
        if future is not None and not future.done():
            future.set_result(leadership.reason)

    def _leader_changed(self, leader: LeaderInfo | None) -> None:
        self._changes.publish(leader)
        self._hop("on_leader_change", leader)
