"""A task worker of the campaign, in its own process.

Each task it runs is a thread doing a unit of work every ``--tick`` seconds, only after
``TaskDistribution.owns()`` said yes. It records:

* ``up`` ``{tasks}``: the task set;
* ``started`` ``{task}`` when ``start_task`` begins, ``stopped`` ``{task}`` when
  ``stop_task`` has ended the task's thread;
* ``unit`` ``{task}``: a unit of work; ``t`` was read just before the ``owns()`` check.

    python -m devtools.campaign._task_worker --bootstrap B --group G \
        --name NAME --tasks 50 [--instance-id ID]
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from types import FrameType

from recipes.tasks import TaskDistribution, TaskSpec

from ._record import Recorder, member_settings, now

record = Recorder()


class Worker:
    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.distribution: TaskDistribution | None = None
        self._running: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self._lock = threading.Lock()

    def start_task(self, task: str, spec: TaskSpec) -> None:
        record("started", task=task)
        stop = threading.Event()
        thread = threading.Thread(target=self._work, args=(task, stop), daemon=True)
        with self._lock:
            self._running[task] = (stop, thread)
        thread.start()

    def stop_task(self, task: str) -> None:
        with self._lock:
            stop, thread = self._running.pop(task)
        stop.set()
        thread.join()
        record("stopped", task=task)

    def _work(self, task: str, stop: threading.Event) -> None:
        assert self.distribution is not None
        while not stop.wait(self.tick):
            before = now()
            if self.distribution.owns(task):
                record("unit", task=task, t=before)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--name", required=True, help="name#incarnation")
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--tick", type=float, default=0.5)
    args = parser.parse_args()
    tasks = {f"task-{i:02d}": 1.0 for i in range(args.tasks)}
    worker = Worker(args.tick)
    settings = member_settings(
        args.session_timeout_ms,
        args.instance_id,
        stop_timeout_ms=1000,
        # A departed worker's tasks go to the others at once: the campaign measures that.
        max_delay_ms=0,
    )
    distribution = TaskDistribution(
        args.group,
        worker_id=args.instance_id or args.name,
        start_task=worker.start_task,
        stop_task=worker.stop_task,
        tasks=tasks,
        bootstrap_servers=args.bootstrap,
        **settings,
    )
    worker.distribution = distribution
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    distribution.start()
    record("up", pid=os.getpid(), tasks=sorted(tasks))
    stopping.wait()
    distribution.close()
    record("closed")


if __name__ == "__main__":
    main()
