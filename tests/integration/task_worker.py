"""Task workers for the integration tests: in-process, or one per process for kills and freezes.

Every task a worker runs is a thread that "works" every ``tick`` seconds, checking
``TaskDistribution.owns`` first. Events carry a wall-clock ``t`` (seconds), comparable
between processes on one host:

* ``started``/``stopped`` ``{task}``: start_task / stop_task ran (``t`` at its end for
  started, at its beginning for stopped: the task worked in between);
* ``tick`` ``{task, checked_at}``: a unit of work, ``checked_at`` taken before the check;
* ``error`` ``{task, error}``: on_task_error.

    python -m tests.integration.task_worker BOOTSTRAP GROUP WORKER_ID (--tasks JSON | --topic T)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from recipes.tasks import TaskDistribution, TaskError, TaskSpec, TopicTasks

from .members import FAST

TASK_SETTINGS: dict[str, Any] = {**FAST, "stop_timeout_ms": 1000}


class TaskRecorder:
    """start_task/stop_task that run ticking threads and report every event."""

    def __init__(self, worker_id: str, emit: Callable[..., None], tick: float = 0.1) -> None:
        self.worker_id = worker_id
        self.emit = emit
        self.tick = tick
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
            checked_at = time.time()
            if not self.distribution.owns(task):
                continue
            self.emit(event="tick", task=task, worker=self.worker_id, checked_at=checked_at)


class RunningTasks:
    """Which tasks each in-process worker runs now: its start_task / stop_task, recorded
    under one lock."""

    def __init__(self, *workers: str) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, set[str]] = {w: set() for w in workers}

    def start_task(self, worker: str) -> Callable[[str, TaskSpec], None]:
        def start(task: str, spec: TaskSpec) -> None:
            with self._lock:
                self._running[worker].add(task)

        return start

    def stop_task(self, worker: str) -> Callable[[str], None]:
        def stop(task: str) -> None:
            with self._lock:
                self._running[worker].discard(task)

        return stop

    def snapshot(self) -> dict[str, set[str]]:
        with self._lock:
            return {w: set(tasks) for w, tasks in self._running.items()}


def make_worker(
    bootstrap: str,
    group: str,
    worker_id: str,
    emit: Callable[..., None],
    *,
    tasks: Any,
    **options: Any,
) -> tuple[TaskDistribution, TaskRecorder]:
    recorder = TaskRecorder(worker_id, emit)
    distribution = TaskDistribution(
        group,
        worker_id=worker_id,
        start_task=recorder.start_task,
        stop_task=recorder.stop_task,
        on_task_error=recorder.on_task_error,
        tasks=tasks,
        bootstrap_servers=bootstrap,
        **{**TASK_SETTINGS, **options},
    )
    recorder.distribution = distribution
    return distribution, recorder


_print_lock = threading.Lock()


def emit(**event: Any) -> None:
    event.setdefault("t", time.time())
    with _print_lock:
        print(json.dumps(event), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("worker_id")
    parser.add_argument("--tasks", help="a JSON object: task id -> weight")
    parser.add_argument("--topic", help="read the task set from this compacted topic")
    parser.add_argument("--max-delay-ms", type=int, default=0)
    args = parser.parse_args()
    source: Any = TopicTasks(args.topic) if args.topic else json.loads(args.tasks or "{}")
    distribution, _ = make_worker(
        args.bootstrap,
        args.group,
        args.worker_id,
        emit,
        tasks=source,
        max_delay_ms=args.max_delay_ms,
    )
    distribution.start()
    emit(event="up", worker=args.worker_id)

    def report_views() -> None:
        # Each rebalance's outcome as this worker saw it (the leader sees the whole group).
        last = None
        while True:
            view = distribution.describe()
            if view is not None and view != last:
                last = view
                emit(
                    event="view",
                    worker=args.worker_id,
                    generation=view.generation,
                    complete=view.complete,
                    workers={w: list(ts) for w, ts in view.workers.items()},
                    held={w: list(ts) for w, ts in view.held.items()},
                )
            time.sleep(0.05)

    threading.Thread(target=report_views, daemon=True).start()
    try:
        for line in sys.stdin:
            if line.strip() == "close":
                break
    finally:
        distribution.close()
        emit(event="closed", worker=args.worker_id)


if __name__ == "__main__":
    main()
