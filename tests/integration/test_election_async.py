"""The election's asyncio face on a real broker: async with, coroutine callbacks on the
loop, the leader-change iterator, lost_wait."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from recipes.election import AsyncLeaderElection, LeaderInfo, Leadership

pytestmark = pytest.mark.integration
FAST: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "retry_backoff_ms": 50,
}


def test_a_handoff_seen_through_coroutine_callbacks_and_the_change_iterator(kafka: str) -> None:
    group = f"aio-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        loop_thread = threading.current_thread()
        events: list[tuple[str, str, int]] = []
        elected = {"a": asyncio.Event(), "b": asyncio.Event()}

        def on_elected(name: str) -> Any:
            async def callback(leadership: Leadership) -> None:
                assert threading.current_thread() is loop_thread  # on the loop
                await asyncio.sleep(0)  # a real coroutine
                events.append(("elected", name, leadership.token))
                elected[name].set()

            return callback

        def on_deposed(name: str) -> Any:
            def callback(leadership: Leadership) -> None:  # plain functions run there too
                assert threading.current_thread() is loop_thread
                events.append(("deposed", name, leadership.token))

            return callback

        a = AsyncLeaderElection(
            group,
            identity="a",
            priority=1,
            on_elected=on_elected("a"),
            on_deposed=on_deposed("a"),
            bootstrap_servers=kafka,
            **FAST,
        )
        async with AsyncLeaderElection(
            group,
            identity="b",
            on_elected=on_elected("b"),
            on_deposed=on_deposed("b"),
            bootstrap_servers=kafka,
            **FAST,
        ) as b:
            await a.start()
            leader = await asyncio.wait_for(a.wait_for_leader(), 30)
            await asyncio.wait_for(elected[leader.identity].wait(), 30)
            first, other = (a, b) if leader.identity == "a" else (b, a)
            leadership = first.leadership()
            assert leadership is not None

            # The other member learns the outcome on its own (its SyncGroup answer): wait for
            # it, so that its view starts at the leader, not at "nobody yet".
            await asyncio.wait_for(other.wait_for_leader(), 30)
            seen: list[LeaderInfo | None] = []

            async def watch() -> None:
                async for change in other.leader_changes():
                    seen.append(change)
                    if change is not None and change.identity != leader.identity:
                        return

            watcher = asyncio.create_task(watch())
            lost = asyncio.create_task(first.lost_wait(leadership))
            await asyncio.sleep(0.2)
            await first.close()  # the leader leaves: the other one takes over
            assert "leaving" in (await asyncio.wait_for(lost, 10) or "")
            await asyncio.wait_for(watcher, 30)
            successor = "b" if leader.identity == "a" else "a"
            await asyncio.wait_for(elected[successor].wait(), 30)
            assert seen[0] is not None and seen[0].identity == leader.identity
            assert seen[-1] is not None and seen[-1].identity == successor
            assert other.is_leader and other.metrics().times_elected == 1
            await a.close()  # closing twice is fine (a may have closed as the leader)
        kinds = [(k, n) for k, n, _ in events]
        assert kinds[:3] == [
            ("elected", leader.identity),
            ("deposed", leader.identity),
            ("elected", successor),
        ]
        tokens = [t for k, _, t in events if k == "elected"]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)

    asyncio.run(scenario())
