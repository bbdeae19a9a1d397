"""Task distribution for asyncio services: awaitable start, close and waits, ``async with``,
an async iterator of this worker's tasks, and ``start_task`` / ``stop_task`` that may be
coroutines (see ``recipes/_aio.py`` for how callbacks reach the loop)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from coordination.hooks import CoordinationHooks, TaskStarted, TaskStopped, check_hooks

from .._aio import AsyncFace, Changes, LoopBridge, MaybeAsync
from ._distribution import TaskDistribution
from ._runner import TaskMetrics
from ._sources import TaskSpec
from ._task_group import GroupView


class AsyncTaskDistribution(AsyncFace):
    """:class:`TaskDistribution` with an asyncio face.

    Example:
        async def start_task(task_id, spec):
            workers[task_id] = asyncio.create_task(work(task_id))   # returns at once

        async def stop_task(task_id):
            workers.pop(task_id).cancel()

        async with AsyncTaskDistribution("ingest", worker_id="host-a", tasks={"eu": 1.0},
                                         start_task=start_task, stop_task=stop_task,
                                         bootstrap_servers="kafka:9092") as tasks:
            async for running in tasks.task_changes():
                print("running", sorted(running))

    Args:
        group_id, worker_id and every other keyword: as for :class:`TaskDistribution`,
        except that ``start_task``, ``stop_task`` and ``on_task_error`` may be coroutine
        functions. They run on the event loop that calls :meth:`start`, and the
        distribution's thread waits for each, so the threaded recipe's guarantees hold: a
        task is reported stopped (and may start elsewhere) only once its ``stop_task`` has
        finished, and ``stop_task`` must finish within ``stop_timeout_ms``. Keep the loop
        free: a callback that blocks it blocks every other one. ``hooks`` may be None
        (none).
    """

    def __init__(
        self,
        group_id: str,
        *,
        start_task: MaybeAsync,
        stop_task: MaybeAsync,
        on_task_error: MaybeAsync | None = None,
        **kwargs: Any,
    ) -> None:
        self._bridge = LoopBridge()
        self._changes: Changes[frozenset[str]] = Changes(self._bridge)
        watcher = _RunningWatcher(self)
        self.distribution = TaskDistribution(
            group_id,
            start_task=self._bridge.wrap(start_task),
            stop_task=self._bridge.wrap(stop_task),
            on_task_error=self._bridge.wrap(on_task_error),
            **{**kwargs, "hooks": [*check_hooks(kwargs.get("hooks")), watcher]},
        )
        self._recipe = self.distribution
        self._bridge.clock = self.distribution._ctx.clock  # the bridge waits on the recipe's

    # ------------------------------------------------------------------ lifecycle

    async def close(self, timeout: float = 30.0) -> None:
        """Stop every task (their ``stop_task`` runs on the loop), leave, and end the
        iterators."""
        await super().close(timeout)

    def _closed(self) -> None:
        self._changes.close()

    # ------------------------------------------------------------------ queries and waits

    def running(self) -> frozenset[str]:
        """The tasks this worker runs now (no waiting: safe on the loop)."""
        return self.distribution.running()

    def owns(self, task_id: str) -> bool:
        """As :meth:`TaskDistribution.owns`: check it before each unit of work."""
        return self.distribution.owns(task_id)

    def describe(self) -> GroupView | None:
        """As :meth:`TaskDistribution.describe`."""
        return self.distribution.describe()

    def metrics(self) -> TaskMetrics:
        """As :meth:`TaskDistribution.metrics`."""
        return self.distribution.metrics()

    async def wait_stable(self, timeout: float | None = None) -> GroupView:
        """As :meth:`TaskDistribution.wait_stable`, on a worker thread."""
        return await asyncio.to_thread(self.distribution.wait_stable, timeout)

    async def update_tasks(
        self, tasks: Mapping[str, float | TaskSpec], version: int | None = None
    ) -> None:
        """As :meth:`TaskDistribution.update_tasks` (stops of removed tasks run on the loop
        meanwhile)."""
        await asyncio.to_thread(self.distribution.update_tasks, tasks, version)

    async def refresh_tasks(self) -> None:
        """As :meth:`TaskDistribution.refresh_tasks`."""
        await asyncio.to_thread(self.distribution.refresh_tasks)

    async def task_changes(self) -> AsyncIterator[frozenset[str]]:
        """The tasks this worker runs, now and after every start or stop, until closed."""
        async for running in self._changes.iterate(self.running):
            yield running


class _RunningWatcher(CoordinationHooks):
    """Publishes the running set after every start and stop (the hooks run once the
    distribution's state has changed)."""

    def __init__(self, owner: AsyncTaskDistribution) -> None:
        self._owner = owner

    def on_task_started(self, event: TaskStarted) -> None:
        self._owner._changes.publish(self._owner.running())

    def on_task_stopped(self, event: TaskStopped) -> None:
        self._owner._changes.publish(self._owner.running())
