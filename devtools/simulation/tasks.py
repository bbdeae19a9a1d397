"""Task distribution under simulation.

Checked at every simulated instant: no task runs on two workers at once, where a worker
runs a task from its ``start_task`` until its ``stop_task`` returns, while its process is
alive and ``owns(task)`` (what work checks before each unit) says so. Slow ``stop_task``
calls stay within ``stop_timeout_ms``, as the recipe's guarantee asks. After the faults:
every task runs on exactly one worker.
"""

from __future__ import annotations

from typing import Any

from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    HistorySettings,
    Host,
    Process,
    Scheduler,
    SimTransport,
    Trace,
    Violation,
)

TASKS = {f"t{i}": 1.0 for i in range(12)}
STOP_TIMEOUT_MS = 2_000


class TasksDriver(DriverBase):
    name = "tasks"
    unique_identity = True

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        # process name -> (process, distribution, tasks started and not yet stopped)
        self.workers: dict[str, tuple[Process, Any, set[str]]] = {}
        # Found inside a recipe's callback, which would swallow an exception: raised by the
        # next check.
        self._violation: str | None = None

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.tasks import TaskDistribution

        process = host.process
        assert process is not None
        running: set[str] = set()

        def start_task(task_id: str, spec: object) -> None:
            if process.dead:
                return
            self._active_elsewhere(task_id, process.name)
            running.add(task_id)
            trace(f"{process.name}: start {task_id}")

        def stop_task(task_id: str) -> None:
            # A slow stop stays within stop_timeout_ms, as the recipe's guarantee asks.
            self.take_slow(host, clock, longest_s=STOP_TIMEOUT_MS / 1000 * 0.9)
            running.discard(task_id)
            trace(f"{process.name}: stopped {task_id}")

        distribution = TaskDistribution(
            GROUP,
            worker_id=host.name,
            start_task=start_task,
            stop_task=stop_task,
            tasks=TASKS,
            stop_timeout_ms=STOP_TIMEOUT_MS,
            max_delay_ms=2_000,
            transport=transport,
            clock=clock,
            group_instance_id=host.instance_id,
            **self.settings.member_settings(),
        )
        self.workers[process.name] = (process, distribution, running)
        distribution.start()

    def close(self, host: Host) -> None:
        if host.process is not None and host.process.name in self.workers:
            self.workers[host.process.name][1].close(10.0)

    def _runners(self) -> dict[str, list[str]]:
        runners: dict[str, list[str]] = {}
        for name, (process, distribution, running) in list(self.workers.items()):
            if process.dead:
                del self.workers[name]
                continue
            for task in running:
                if distribution.owns(task):
                    runners.setdefault(task, []).append(name)
        return runners

    def _active_elsewhere(self, task: str, starter: str) -> None:
        others = [n for n in self._runners().get(task, []) if n != starter]
        if others and self._violation is None:
            self._violation = f"{starter} starts {task} while {others} still run it"

    def check(self, now: float) -> None:
        if self._violation is not None:
            raise Violation(self._violation)
        # Cheap first: only a task that two workers have started can run on two at once.
        seen: set[str] = set()
        for process, _, running in self.workers.values():
            if not running or process.dead:
                continue
            if not seen.isdisjoint(running):
                break
            seen |= running
        else:
            return
        for task, runners in self._runners().items():
            if len(runners) > 1:
                raise Violation(f"task {task} runs on {runners} at once")

    def settled(self, live: list[Host]) -> str | None:
        runners = self._runners()
        wrong = sorted(t for t in TASKS if len(runners.get(t, ())) != 1)
        return f"tasks not running on exactly one worker: {wrong}" if wrong else None
