"""What a rebalance costs the tasks: cooperative TaskDistribution against eager stop-everything.

A group of 10 workers runs 200 tasks (in one process: 10 ``TaskDistribution`` instances,
each with its own connections and threads, on a real broker). Then one worker joins, and
later one leaves (a graceful close). For each event the benchmark measures, from the
start/stop callbacks:

* interrupted task-seconds on kept tasks: the time tasks were stopped that ran on the same
  worker before and after the event (the goal is zero: they had no reason to stop);
* interrupted task-seconds on moved tasks: stopped on one worker, restarted on another;
* the time until every task runs again (until the last restart after the event);
* the number of stop_task calls.

Then one worker of the ten closes and comes back under the same id (one step of a rolling
restart). The same run repeats with the wake-up channel off (``no-wakeups``: members learn of
each rebalance at their next heartbeat, 1 s apart), and with an eager variant of the recipe
that stops every task before each join and reports none (Kafka Connect's original EAGER
protocol, with a sticky leader), so the comparison shares the broker, the settings (the
recipe's defaults) and the machine.

``max_delay_ms`` is 0 here, so a departed worker's tasks move at once; with a delay they
wait for it up to the delay instead (see docs/tasks.md).

    python -m benchmarks.task_rebalance [--quick] [--bootstrap HOST:PORT] [--repeat N]

The last line prints the figures as name=value pairs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from coordination.testing import running_kafka
from recipes.tasks import TaskDistribution, TaskSpec
from recipes.tasks._assignor import WorkerState
from recipes.tasks._task_group import TaskGroup

WORKERS = 10
TASKS = 200
# The recipe's own defaults (10 s session, 1 s heartbeats, 60 s rebalance timeout) apply.
SETTINGS: dict[str, Any] = {
    "retry_backoff_ms": 50,
    "stop_timeout_ms": 1000,
    "max_delay_ms": 0,
}
VARIANTS = ("cooperative", "no-wakeups", "eager")
EVENTS = ("join", "leave", "restart")


class Ledger:
    """Every start and stop of every task, with the time and the worker."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, str]] = []  # (t, kind, task, worker)
        self.owner: dict[str, str] = {}

    def callbacks(self, worker: str) -> tuple[Any, Any]:
        def start(task: str, spec: TaskSpec) -> None:
            time.sleep(self.cost_s)  # opening connections, loading state...
            with self.lock:
                assert task not in self.owner, f"{task} started on {worker}, runs on " + str(
                    self.owner.get(task)
                )
                self.owner[task] = worker
                self.events.append((time.monotonic(), "start", task, worker))

        def stop(task: str) -> None:
            with self.lock:
                self.owner.pop(task, None)
                self.events.append((time.monotonic(), "stop", task, worker))
            time.sleep(self.cost_s)  # flushing, closing...

        return start, stop

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            return dict(self.owner)


class _EagerGroup(TaskGroup):
    def worker_state(self) -> WorkerState:
        # metadata() is called on the membership thread right before each JoinGroup, where
        # an eager member revokes everything (Kafka's onJoinPrepare in EAGER mode).
        self.runner.stop_all("eager protocol: revoke everything before a rebalance")
        return super().worker_state()


class EagerTaskDistribution(TaskDistribution):
    """The eager protocol: stop every task before each join and report none."""

    _GROUP = _EagerGroup


@dataclass
class Figures:
    kept_interrupted_s: float
    moved_interrupted_s: float
    recovery_s: float
    stops: int
    moved: int


def settled(ledger: Ledger, workers: int, quiet_s: float = 1.0) -> bool:
    owner = ledger.snapshot()
    counts: dict[str, int] = {}
    for w in owner.values():
        counts[w] = counts.get(w, 0) + 1
    with ledger.lock:
        last = ledger.events[-1][0] if ledger.events else 0.0
    return (
        len(owner) == TASKS
        and len(counts) == workers
        and max(counts.values()) - min(counts.values()) <= 1
        and time.monotonic() - last >= quiet_s
    )


def wait_settled(ledger: Ledger, workers: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not settled(ledger, workers):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group of {workers} did not settle in {timeout}s")
        time.sleep(0.05)


def measure(ledger: Ledger, before: dict[str, str], t0: float, settled_at: float) -> Figures:
    after = ledger.snapshot()
    with ledger.lock:
        window = [e for e in ledger.events if e[0] >= t0]
    down_since: dict[str, float] = {}
    downtime: dict[str, float] = {}
    stops = 0
    last_start = t0
    for t, kind, task, _ in window:
        if kind == "stop":
            stops += 1
            down_since.setdefault(task, t)
        elif task in down_since:
            downtime[task] = downtime.get(task, 0.0) + t - down_since.pop(task)
            last_start = max(last_start, t)
    for task, since in down_since.items():  # never restarted within the window
        downtime[task] = downtime.get(task, 0.0) + settled_at - since
    kept = {t for t, w in after.items() if before.get(t) == w}
    return Figures(
        kept_interrupted_s=sum(d for t, d in downtime.items() if t in kept),
        moved_interrupted_s=sum(d for t, d in downtime.items() if t not in kept),
        recovery_s=last_start - t0,
        stops=stops,
        moved=sum(1 for t in after if t not in kept),
    )


def run_once(bootstrap: str, variant: str, cost_s: float) -> dict[str, Figures]:
    kind = EagerTaskDistribution if variant == "eager" else TaskDistribution
    settings = dict(SETTINGS)
    if variant == "no-wakeups":
        settings["wakeup_topic"] = None
    group = f"bench-tasks-{uuid.uuid4().hex[:8]}"
    tasks = {f"task-{i:03d}": 1.0 for i in range(TASKS)}
    ledger = Ledger(cost_s)
    members: list[TaskDistribution] = []

    def add(worker: str) -> TaskDistribution:
        start, stop = ledger.callbacks(worker)
        d = kind(
            group,
            worker_id=worker,
            start_task=start,
            stop_task=stop,
            tasks=tasks,
            bootstrap_servers=bootstrap,
            **settings,
        )
        members.append(d)
        d.start()
        return d

    try:
        for i in range(WORKERS):
            add(f"w{i:02d}")
        wait_settled(ledger, WORKERS)
        results: dict[str, Figures] = {}

        before, t0 = ledger.snapshot(), time.monotonic()
        add("w-new")
        wait_settled(ledger, WORKERS + 1)
        results["join"] = measure(ledger, before, t0, time.monotonic())

        before, t0 = ledger.snapshot(), time.monotonic()
        leaving = members[3]  # not the first: the leader usually is w00
        leaving.close()
        members.remove(leaving)
        wait_settled(ledger, WORKERS)
        results["leave"] = measure(ledger, before, t0, time.monotonic())

        # A rolling restart's step: one worker closes and comes back under the same id.
        before, t0 = ledger.snapshot(), time.monotonic()
        restarting = members[5]
        restarting.close()
        members.remove(restarting)
        add(restarting.worker_id)
        wait_settled(ledger, WORKERS)
        results["restart"] = measure(ledger, before, t0, time.monotonic())
        return results
    finally:
        threads = [threading.Thread(target=m.close) for m in members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per variant (~1 minute)")
    parser.add_argument("--repeat", type=int, default=10, help="runs per variant (default 10)")
    parser.add_argument(
        "--cost-ms", type=int, default=20, help="time each start_task and stop_task takes"
    )
    parser.add_argument("--bootstrap", help="an existing broker; default: start one")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    # Retries while the broker loads a new group are routine here; keep the output readable.
    logging.getLogger("coordination").setLevel(logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

    started = time.monotonic()
    collected: dict[tuple[str, str], list[Figures]] = {}
    with running_kafka(args.bootstrap, full_jit=True) as bootstrap:
        for n in range(repeat):
            for variant in VARIANTS:
                for event, figures in run_once(
                    bootstrap, variant, cost_s=args.cost_ms / 1000
                ).items():
                    collected.setdefault((variant, event), []).append(figures)
                    print(
                        f"run {n + 1} {variant:11s} {event:5s}: kept tasks interrupted "
                        f"{figures.kept_interrupted_s:8.2f} task-s, moved tasks interrupted "
                        f"{figures.moved_interrupted_s:7.2f} task-s ({figures.moved} moved), "
                        f"every task runs again after {figures.recovery_s:5.2f} s, "
                        f"{figures.stops} stops",
                        flush=True,
                    )

    def med(variant: str, event: str, field: str) -> float:
        return float(statistics.median(getattr(f, field) for f in collected[(variant, event)]))

    print(
        f"\n{WORKERS} workers, {TASKS} tasks, in one process; start/stop take {args.cost_ms} ms;"
        f" medians of {repeat} run(s)"
    )
    pairs: list[str] = []
    for event in EVENTS:
        coop_kept = med("cooperative", event, "kept_interrupted_s")
        eager_kept = med("eager", event, "kept_interrupted_s")
        coop_moved = med("cooperative", event, "moved_interrupted_s")
        coop_rec = med("cooperative", event, "recovery_s")
        eager_rec = med("eager", event, "recovery_s")
        coop_stops = med("cooperative", event, "stops")
        eager_stops = med("eager", event, "stops")
        quiet_rec = med("no-wakeups", event, "recovery_s")
        print(
            f"{event:7s}: kept-task interruption {coop_kept:.2f} vs {eager_kept:.2f} task-s "
            f"(eager); recovery {coop_rec:.2f} vs {eager_rec:.2f} s "
            f"(x{eager_rec / coop_rec if coop_rec else float('inf'):.1f}); "
            f"stops {coop_stops:.0f} vs {eager_stops:.0f}; without wake-ups recovery "
            f"{quiet_rec:.2f} s (x{quiet_rec / coop_rec if coop_rec else float('inf'):.1f})"
        )
        pairs += [
            f"{event}_kept_interrupted_task_s={coop_kept:.3f}",
            f"{event}_kept_interrupted_task_s_eager={eager_kept:.3f}",
            f"{event}_moved_interrupted_task_s={coop_moved:.3f}",
            f"{event}_recovery_s={coop_rec:.3f}",
            f"{event}_recovery_s_eager={eager_rec:.3f}",
            f"{event}_recovery_s_no_wakeups={quiet_rec:.3f}",
            f"{event}_stops={coop_stops:.0f}",
            f"{event}_stops_eager={eager_stops:.0f}",
        ]
    pairs.append(f"elapsed_s={time.monotonic() - started:.1f}")
    print(" ".join(pairs))


if __name__ == "__main__":
    main()
