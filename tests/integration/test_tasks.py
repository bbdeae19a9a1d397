"""Task distribution on a real broker: even spread, one owner per task, crashes, freezes."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from recipes.tasks import TaskDistribution, TopicTasks

from .members import FAST, EventProcess, fast_args, new_group, wait_until
from .task_worker import TASK_ARGS, make_worker

pytestmark = pytest.mark.integration

SESSION_S = FAST["session_timeout_ms"] / 1000


class Events:
    """Every event of the in-process workers, each tagged with its worker instance."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def emitter(self, instance: str):
        def emit(**event: Any) -> None:
            event.setdefault("t", time.time())
            event["instance"] = instance
            with self.lock:
                self.items.append(event)

        return emit

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        with self.lock:
            return [
                e
                for e in self.items
                if e["event"] == kind and all(e.get(k) == v for k, v in match.items())
            ]


@pytest.fixture
def workers() -> Iterator[list[TaskDistribution]]:
    created: list[TaskDistribution] = []
    yield created
    for w in created:
        w.close()


def run_intervals(
    events: list[dict[str, Any]], *, work_only: frozenset[str] = frozenset()
) -> dict[str, list[tuple[float, float, str]]]:
    """task -> [(start, end, instance)]: when each instance ran each task.

    A run ends when stop_task began; a run never stopped (a killed process) ends at its last
    tick. For the instances in ``work_only`` (frozen ones), a run ends at its last unit of
    work instead: a frozen process cannot call stop_task, only refrain from working.
    """
    runs: dict[tuple[str, str], list[list[float]]] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        key = (e["instance"], e.get("task", ""))
        if e["event"] == "started":
            runs.setdefault(key, []).append([e["t"], e["t"], 0.0])
        elif e["event"] == "tick" and runs.get(key):
            runs[key][-1][1] = max(runs[key][-1][1], e["checked_at"])
        elif e["event"] == "stopped" and runs.get(key) and not runs[key][-1][2]:
            if key[0] not in work_only:
                runs[key][-1][1] = e["t"]
            runs[key][-1][2] = 1.0
    result: dict[str, list[tuple[float, float, str]]] = {}
    for (instance, task), spans in runs.items():
        for start, end, _ in spans:
            result.setdefault(task, []).append((start, end, instance))
    return result


def assert_never_twice(events: list[dict[str, Any]], **kw: Any) -> None:
    for task, spans in run_intervals(events, **kw).items():
        for s1, e1, i1 in spans:
            for s2, _, i2 in spans:
                overlap = i1 != i2 and s1 <= s2 < e1
                assert not overlap, f"{task} ran on {i1} until {e1} and on {i2} from {s2}"


def owners(ws: list[TaskDistribution]) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for w in ws:
        for t in w.running():
            result.setdefault(t, []).append(w.worker_id)
    return result


def balanced(ws: list[TaskDistribution], tasks: set[str]) -> bool:
    own = owners(ws)
    counts = [len(w.running()) for w in ws]
    return (
        set(own) == tasks
        and all(len(o) == 1 for o in own.values())
        and max(counts) - min(counts) <= 1
    )


def start_worker(created, kafka, group, worker_id, events, **kw) -> TaskDistribution:
    w, _ = make_worker(kafka, group, worker_id, events.emitter(worker_id), **kw)
    created.append(w)
    w.start()
    return w


def test_tasks_spread_evenly_each_runs_once_and_moves_are_minimal(kafka: str, workers) -> None:
    group, events = new_group(), Events()
    tasks = {f"task-{i:02d}": 1.0 for i in range(12)}
    trio = [
        start_worker(workers, kafka, group, f"w{i}", events, tasks=tasks, max_delay_ms=0)
        for i in range(3)
    ]
    wait_until(lambda: balanced(trio, set(tasks)), 30, "12 tasks spread over 3 workers")
    assert sorted(len(w.running()) for w in trio) == [4, 4, 4]
    leader_views = [v for w in trio if (v := w.describe()) is not None and v.complete]
    assert len(leader_views) == 1
    assert {t for ts in leader_views[0].workers.values() for t in ts} == set(tasks)

    # A fourth worker joins: only the three tasks it takes are stopped anywhere.
    before = {w.worker_id: w.running() for w in trio}
    stops_before = len(events.of("stopped"))
    quartet = [*trio, start_worker(workers, kafka, group, "w3", events, tasks=tasks)]
    wait_until(lambda: balanced(quartet, set(tasks)), 30, "12 tasks over 4 workers")
    assert sorted(len(w.running()) for w in quartet) == [3, 3, 3, 3]
    moved = events.of("stopped")[stops_before:]
    assert sorted(e["task"] for e in moved) == sorted(quartet[3].running())
    for w in trio:
        assert w.running() <= before[w.worker_id]  # kept tasks were never restarted

    # One leaves: its tasks are started elsewhere, nothing else stops.
    stops_before = len(events.of("stopped"))
    leaving = quartet[1]
    leaving.close()
    rest = [w for w in quartet if w is not leaving]
    wait_until(lambda: balanced(rest, set(tasks)), 30, "12 tasks over 3 workers")
    assert {e["instance"] for e in events.of("stopped")[stops_before:]} == {"w1"}
    for w in rest:
        w.wait_stable(10)
    assert_never_twice(events.items)


def test_weights_and_capacity_shape_the_spread(kafka: str, workers) -> None:
    group, events = new_group(), Events()
    tasks = {"big": 4.0, "mid-1": 2.0, "mid-2": 2.0, **{f"small-{i}": 1.0 for i in range(4)}}
    pair = [start_worker(workers, kafka, group, f"w{i}", events, tasks=tasks) for i in range(2)]
    small = start_worker(workers, kafka, group, "w-small", events, tasks=tasks, capacity=1.0)
    group_of_three = [*pair, small]

    def spread() -> bool:
        own = owners(group_of_three)
        load = {w.worker_id: sum(tasks[t] for t in w.running()) for w in group_of_three}
        return (
            set(own) == set(tasks)
            and all(len(o) == 1 for o in own.values())
            and abs(load["w0"] - load["w1"]) <= 4.0  # within the largest task
        )

    wait_until(spread, 30, "every task to run, spread by weight")
    weight = {w.worker_id: sum(tasks[t] for t in w.running()) for w in group_of_three}
    assert weight["w-small"] <= 1.0
    assert abs(weight["w0"] - weight["w1"]) <= 4.0  # within the largest task
    assert_never_twice(events.items)


def test_tasks_added_changed_and_removed_through_a_compacted_topic(kafka: str, workers) -> None:
    topic = f"tasks-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka)

    def define(task: str, value: dict[str, Any] | None) -> None:
        data = None if value is None else json.dumps(value).encode()
        producer.send(topic, key=task.encode(), value=data).get(10)

    try:
        for i in range(4):
            define(f"t{i}", {"weight": 1, "config": {"n": i}})
        group, events = new_group(), Events()
        sources = [TopicTasks(topic) for _ in range(2)]
        pair = [
            start_worker(workers, kafka, group, f"w{i}", events, tasks=source)
            for i, source in enumerate(sources)
        ]
        wait_until(lambda: balanced(pair, {"t0", "t1", "t2", "t3"}), 30, "4 tasks on 2 workers")
        generation = pair[0].coordinator.generation().generation_id

        # A config change restarts the task where it runs, without a rebalance.
        (owner,) = [w for w in pair if "t0" in w.running()]
        define("t0", {"weight": 1, "config": {"n": 100}})
        wait_until(
            lambda: any(e["config"] == {"n": 100} for e in events.of("started", task="t0")),
            10,
            "t0 to restart with its new config",
        )
        assert events.of("started", task="t0")[-1]["instance"] == owner.worker_id
        assert pair[0].coordinator.generation().generation_id == generation

        # An added task starts on exactly one worker; a removed one stops where it ran.
        added_at = time.time()
        define("t4", {"weight": 1, "config": {"n": 4}})
        wait_until(lambda: len(owners(pair).get("t4", [])) == 1, 20, "t4 to start")
        started = events.of("started", task="t4")
        assert len(started) == 1 and started[0]["t"] - added_at < 10
        # Adding t4 may move a task to rebalance the load; wait until that is over.
        all_five = {"t0", "t1", "t2", "t3", "t4"}
        wait_until(lambda: balanced(pair, all_five), 20, "5 tasks balanced")
        for w in pair:
            w.wait_stable(20)
        (t1_owner,) = [w for w in pair if "t1" in w.running()]
        stops_before = len(events.of("stopped", task="t1"))
        define("t1", None)
        wait_until(lambda: len(events.of("stopped", task="t1")) > stops_before, 10, "t1 to stop")
        stops = events.of("stopped", task="t1")[stops_before:]
        assert [e["instance"] for e in stops] == [t1_owner.worker_id]
        wait_until(lambda: balanced(pair, {"t0", "t2", "t3", "t4"}), 20, "the new task set")
        # wait_stable() covers the changes a worker has read: wait until both have read the
        # tombstone (7 records: the version is the next offset). Followers first: a follower
        # learns of the leader's rebalance only from its next heartbeat, so right after the
        # removal its last assignment still lists t1, and it must not count as settled.
        wait_until(lambda: all(s.snapshot()[0] >= 7 for s in sources), 10, "both to read it")
        for w in sorted(pair, key=lambda w: w.coordinator.is_leader):
            view = w.wait_stable(20)
            assert view.config_version >= 7, (w.worker_id, view)
            assert "t1" not in {t for ts in view.workers.values() for t in ts}, view
        assert_never_twice(events.items)
    finally:
        producer.close()


def test_update_tasks_on_every_worker_reaches_the_right_worker(kafka: str, workers) -> None:
    group, events = new_group(), Events()
    tasks = {"a": 1.0, "b": 1.0}
    pair = [start_worker(workers, kafka, group, f"w{i}", events, tasks=tasks) for i in range(2)]
    wait_until(lambda: balanced(pair, {"a", "b"}), 30, "a and b to run")
    for w in pair:
        w.wait_stable(20)
    wait_until(lambda: balanced(pair, {"a", "b"}), 30, "a and b to run")
    (a_owner,) = [w for w in pair if "a" in w.running()]
    seen = len(events.items)
    new_tasks = {"b": 1.0, "c": 1.0}
    for w in pair:
        w.update_tasks(new_tasks)
    wait_until(lambda: balanced(pair, {"b", "c"}), 20, "b and c to run")
    wait_until(lambda: bool(events.of("stopped", task="a")[-1:]), 10, "a to stop")
    after = events.items[seen:]
    assert [(e["event"], e["task"], e["instance"]) for e in after if e["event"] != "tick"] == [
        ("stopped", "a", a_owner.worker_id),
        ("started", "c", a_owner.worker_id),  # b never moved; c takes a's place
    ]
    assert_never_twice(events.items)


# ------------------------------------------------------------------ processes: kill, freeze


def task_process(kafka: str, group: str, worker_id: str, *options: str) -> EventProcess:
    """A task worker in its own process (``devtools.member``), reporting its views."""
    return EventProcess(
        "--recipe=tasks",
        f"--bootstrap={kafka}",
        f"--group={group}",
        f"--name={worker_id}",
        *fast_args(),
        *TASK_ARGS,
        *options,
    )


def running_on(p: EventProcess) -> set[str]:
    """The tasks the process runs, from its started/stopped events."""
    now: set[str] = set()
    for e in list(p.events):
        if e["event"] == "started":
            now.add(e["task"])
        elif e["event"] == "stopped":
            now.discard(e["task"])
    return now


def leader_view(p: EventProcess) -> dict[str, Any] | None:
    views = [e for e in p.of("view") if e["complete"]]
    return views[-1] if views else None


def tagged(procs: list[tuple[str, EventProcess]]) -> list[dict[str, Any]]:
    return [{**e, "instance": name} for name, p in procs for e in list(p.events)]


def test_killed_worker_gets_its_tasks_back_within_the_delay_and_not_after(
    kafka: str, processes
) -> None:
    group = new_group()
    tasks = json.dumps({f"task-{i}": 1.0 for i in range(9)})
    opts = ("--tasks", tasks, "--max-delay-ms", "6000")
    leader = task_process(kafka, group, "w0", *opts)
    processes.append(leader)
    wait_until(lambda: len(running_on(leader)) == 9, 30, "the first worker to run everything")
    others = [task_process(kafka, group, f"w{i}", *opts) for i in (1, 2)]
    processes.extend(others)
    procs = [leader, *others]
    wait_until(lambda: sorted(len(running_on(p)) for p in procs) == [3, 3, 3], 30, "3 each")
    victim = others[1]
    mine = running_on(victim)
    stable = {id(p): len(p.of("stopped")) for p in procs[:2]}

    victim.signal(signal.SIGKILL)
    wait_until(
        lambda: bool((v := leader_view(leader)) and v["held"].get("w2")),
        SESSION_S * 4,
        "the leader to hold w2's tasks",
    )
    assert sorted(leader_view(leader)["held"]["w2"]) == sorted(mine)  # type: ignore[index]
    back = task_process(kafka, group, "w2", *opts)  # the same worker id, a new process
    processes.append(back)
    wait_until(lambda: running_on(back) == mine, 20, "w2 to get its own tasks back")
    for p in procs[:2]:
        assert len(p.of("stopped")) == stable[id(p)], "a surviving worker stopped a task"

    # Killed again and not restarted: after the delay the others take its tasks.
    killed_at = time.time()
    back.signal(signal.SIGKILL)
    wait_until(
        lambda: sorted(len(running_on(p)) for p in procs[:2]) == [4, 5],
        SESSION_S + 15,
        "the others to take over w2's tasks",
    )
    taken = [e for p in procs[:2] for e in p.of("started") if e["t"] > killed_at]
    assert sorted(e["task"] for e in taken) == sorted(mine)
    assert min(e["t"] for e in taken) - killed_at >= SESSION_S + 6.0 - 1.0  # session + delay
    assert_never_twice(tagged([("w0", leader), ("w1", others[0]), ("w2a", victim), ("w2b", back)]))


def test_frozen_worker_stops_its_tasks_before_doing_more_work(kafka: str, processes) -> None:
    group = new_group()
    tasks = json.dumps({f"task-{i}": 1.0 for i in range(6)})
    first = task_process(kafka, group, "w0", "--tasks", tasks)
    processes.append(first)
    wait_until(lambda: len(running_on(first)) == 6, 30, "w0 to run everything")
    frozen = task_process(kafka, group, "w1", "--tasks", tasks)
    processes.append(frozen)
    wait_until(lambda: len(running_on(frozen)) == 3, 30, "w1 to take half")
    wait_until(lambda: len(frozen.of("tick")) >= 6, 10, "w1 to work")
    its_tasks = running_on(frozen)

    frozen.signal(signal.SIGSTOP)
    frozen_at = time.time()
    wait_until(lambda: len(running_on(first)) == 6, SESSION_S * 4, "w0 to take w1's tasks")
    taken_at = max(e["t"] for e in first.of("started") if e["task"] in its_tasks)
    time.sleep(1.0)
    # Taken before the signal: the resumed process can log its first event before this
    # process runs again (a loaded machine did), and nothing runs there while it is stopped.
    resumed_at = time.time()
    frozen.signal(signal.SIGCONT)
    # It stops them at once; with wake-ups the group may hand them straight back to it, too
    # soon for a poll of what it runs to see the gap: look for the stops.
    wait_until(
        lambda: all(
            any(e["task"] == t and e["t"] >= resumed_at for e in frozen.of("stopped"))
            for t in its_tasks
        ),
        10,
        "w1 to stop its tasks",
    )

    # Before it was frozen it worked; after resuming, stop_task ran before any more work.
    for task in its_tasks:
        after = [e for e in frozen.events if e.get("task") == task and e["t"] >= resumed_at]
        kinds = [e["event"] for e in after]
        assert kinds and kinds[0] == "stopped", (task, kinds[:5])
        assert not [
            e
            for e in frozen.of("tick")
            if e["task"] == task and frozen_at < e["checked_at"] and e["checked_at"] < after[0]["t"]
        ], f"{task}: w1 worked between its freeze and its stop"
    assert taken_at - frozen_at >= SESSION_S - 1.0  # not before the session could expire
    # No task was worked on by two workers at once.
    assert_never_twice(tagged([("w0", first), ("w1", frozen)]), work_only=frozenset({"w1"}))
    # It rejoins and the group spreads the tasks again.
    wait_until(
        lambda: sorted([len(running_on(first)), len(running_on(frozen))]) == [3, 3],
        30,
        "the group to rebalance after w1 came back",
    )
    counts = Counter(e["event"] for e in frozen.events)
    assert counts["error"] == 0, frozen.of("error")
