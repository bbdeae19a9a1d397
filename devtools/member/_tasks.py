"""The ``tasks`` recipe: a worker whose tasks are ticking threads."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._io import Output, Stopping, group_settings, required

if TYPE_CHECKING:
    from recipes.tasks import TaskDistribution, TaskError, TaskSpec


class TaskRecorder:
    """start_task/stop_task that run ticking threads and report every event to ``emit``
    (called as ``emit(event=kind, **fields)``): the tasks recipe's worker, in this process or
    in a test's."""

    def __init__(
        self,
        worker_id: str,
        emit: Callable[..., None],
        tick: float = 0.1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.worker_id = worker_id
        self.emit = emit
        self.tick = tick
        self.clock = clock
        self.distribution: TaskDistribution | None = None
        self._threads: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._lock = threading.Lock()

    def start_task(self, task: str, spec: TaskSpec) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=self._work, args=(task, stop), daemon=True)
        with self._lock:
            self._threads[task] = (stop, thread)
        self.emit(event="started", task=task, worker=self.worker_id, config=spec.config)
        thread.start()

    def stop_task(self, task: str) -> None:
        self.emit(event="stopped", task=task, worker=self.worker_id)
        with self._lock:
            stop, thread = self._threads.pop(task)
        stop.set()
        thread.join()

    def on_task_error(self, task: str, error: TaskError) -> None:
        self.emit(event="error", task=task, worker=self.worker_id, error=type(error).__name__)

    def _work(self, task: str, stop: threading.Event) -> None:
        assert self.distribution is not None
        while not stop.wait(self.tick):
            checked_at = self.clock()
            if not self.distribution.owns(task):
                continue
            self.emit(event="tick", task=task, worker=self.worker_id, checked_at=checked_at)


def run_tasks(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from recipes.tasks import TaskDistribution, TopicTasks

    worker_id = args.group_instance_id or required(args, "name")
    source: Any
    if args.task_topic:
        source = TopicTasks(args.task_topic)
    elif args.task_count is not None:
        source = {f"task-{i:02d}": 1.0 for i in range(args.task_count)}
    else:
        source = json.loads(args.tasks or "{}")
    recorder = TaskRecorder(worker_id, emit, args.tick, emit.clock)
    distribution = TaskDistribution(
        args.group,
        worker_id=worker_id,
        start_task=recorder.start_task,
        stop_task=recorder.stop_task,
        on_task_error=recorder.on_task_error,
        tasks=source,
        bootstrap_servers=args.bootstrap,
        **group_settings(
            args, stop_timeout_ms=args.stop_timeout_ms, max_delay_ms=args.max_delay_ms
        ),
    )
    recorder.distribution = distribution
    distribution.start()
    listed = {"tasks": sorted(source)} if isinstance(source, dict) else {}
    emit("up", worker=worker_id, pid=os.getpid(), **listed)
    # Each rebalance's outcome as this worker saw it (the leader sees the whole group).
    last = None
    while not stopping.wait(0.05 if args.views else None):
        view = distribution.describe()
        if view is not None and view != last:
            last = view
            emit(
                "view",
                worker=worker_id,
                generation=view.generation,
                complete=view.complete,
                workers={w: list(ts) for w, ts in view.workers.items()},
                held={w: list(ts) for w, ts in view.held.items()},
            )
    distribution.close()
    emit("closed", worker=worker_id)
