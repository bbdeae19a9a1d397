"""Task workers for the integration tests: in-process (:func:`make_worker`), or one per
process for kills and freezes (``devtools.member --recipe tasks``, with :data:`TASK_ARGS`).

Every task a worker runs is a thread that "works" every ``tick`` seconds, checking
``TaskDistribution.owns`` first (``devtools.member.TaskRecorder``). Events carry a
wall-clock ``t`` (seconds), comparable between processes on one host:

* ``started``/``stopped`` ``{task}``: start_task / stop_task ran (``t`` at its end for
  started, at its beginning for stopped: the task worked in between);
* ``tick`` ``{task, checked_at}``: a unit of work, ``checked_at`` taken before the check;
* ``error`` ``{task, error}``: on_task_error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from devtools.member import TaskRecorder
from recipes.tasks import TaskDistribution, TaskSpec

from .members import FAST

TASK_SETTINGS: dict[str, Any] = {**FAST, "stop_timeout_ms": 1000}
# The same for a worker process, which also reports each rebalance's outcome as it saw it;
# its tasks move at once unless a test says otherwise (--max-delay-ms).
TASK_ARGS = ("--stop-timeout-ms=1000", "--max-delay-ms=0", "--views")


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
