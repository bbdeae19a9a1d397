"""Where a task distribution's task set comes from: a mapping, a callable, or a compacted topic.

Every worker reads the task set on its own; the group leader assigns from its copy and the
workers start tasks from theirs. A task set has a *version* that only grows, so a worker
can tell whether it is behind the leader's assignment (then it waits before starting
tasks it does not know yet) or ahead of it (then the leader catches up first).
"""

from __future__ import annotations

import abc
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coordination.clock import SYSTEM_CLOCK, Clock, Thread
from coordination.errors import ConfigurationError

log = logging.getLogger("recipes.tasks")

# How long the topic reader waits between polls, and before retrying a failed consumer.
_POLL_MS = 100
_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What the application knows about one task: its weight and its configuration.

    Attributes:
        weight: the task's share of a worker's load (> 0; 1.0 when tasks are alike). Used
            under ``Balance.WEIGHT`` and against worker capacities.
        config: the task's configuration, opaque to the recipe (from a compacted topic: the
            ``config`` field of the record's JSON value). Passed to ``start_task``; a change
            to it restarts the task where it runs, without a rebalance.

    Raises:
        ConfigurationError: ``weight`` is not a finite number > 0.
    """

    weight: float = 1.0
    config: Any = None

    def __post_init__(self) -> None:
        w = self.weight
        if (
            isinstance(w, bool)
            or not isinstance(w, (int, float))
            or not (math.isfinite(w) and w > 0)
        ):
            raise ConfigurationError(f"a task's weight must be a finite number > 0, not {w!r}")


TaskSet = Mapping[str, TaskSpec]
"""Task id -> its spec."""

ChangeListener = Callable[[int, TaskSet, TaskSet], None]
"""Called as ``listener(version, old, new)`` when a source's task set changes."""


def _as_spec(task: str, value: float | TaskSpec) -> TaskSpec:
    if not isinstance(task, str) or not task:
        raise ConfigurationError(f"task ids must be non-empty strings, not {task!r}")
    if isinstance(value, TaskSpec):
        return value
    try:
        return TaskSpec(weight=value)
    except ConfigurationError as e:
        raise ConfigurationError(f"task {task!r}: {e}") from None


def as_task_set(mapping: Mapping[str, float | TaskSpec]) -> dict[str, TaskSpec]:
    """Validate a ``task id -> weight or TaskSpec`` mapping into a task set.

    Raises:
        ConfigurationError: a task id is empty or a weight is not a finite number > 0.
    """
    return {task: _as_spec(task, value) for task, value in mapping.items()}


class TaskSource(abc.ABC):
    """Where the task set comes from. Subclass it for another store of task definitions.

    Every worker of a group must use an equivalent source (the same tasks, the same
    versions). ``snapshot()`` is called from several threads; :meth:`use_clock`,
    :meth:`start` and :meth:`close` once each, in that order, by the task distribution.

    A source that waits (``wait_ready``, ``wait_for_version``), locks or runs a thread makes
    every such object from :attr:`clock`, so that a test's manual or simulated clock
    controls it: a wait on anything else would escape the simulation, or hang it.
    """

    @property
    def clock(self) -> Clock:
        """The distribution's clock (the system's until :meth:`use_clock`)."""
        return getattr(self, "_clock", SYSTEM_CLOCK)

    def use_clock(self, clock: Clock) -> None:
        """Take the distribution's clock; called before :meth:`start`. A subclass that made
        locks, events or conditions from the clock before makes them again here.

        Args:
            clock: the clock of the distribution's group member.
        """
        self._clock = clock

    @abc.abstractmethod
    def snapshot(self) -> tuple[int, TaskSet]:
        """The current version and task set (an immutable view; never mutated afterwards)."""

    def start(self, connection: Mapping[str, Any], on_change: ChangeListener) -> None:  # noqa: B027
        """Begin watching for changes; call ``on_change`` on each one. Default: nothing.

        Args:
            connection: the group's connection settings (``bootstrap_servers``, TLS, SASL),
                for a source that reads from Kafka.
            on_change: the listener; it may be called from any thread, one call at a time.
        """

    def close(self) -> None:  # noqa: B027
        """Stop watching. Default: nothing."""

    def wait_ready(self, timeout: float) -> bool:
        """Block until the source has loaded its initial task set. True if it has."""
        return True

    def wait_for_version(self, version: int, timeout: float) -> bool:
        """Block until :meth:`snapshot` has reached ``version``. True if it has."""
        return self.snapshot()[0] >= version


class StaticTasks(TaskSource):
    """A task set held in memory and replaced with :meth:`update`.

    Every worker holds its own copy, so call :meth:`update` (or
    ``TaskDistribution.update_tasks``) on every worker. The leader assigns from its copy;
    a worker assigned a task missing from its own copy waits for an update that has it.
    ``version`` orders updates across workers: pass a growing number that is the same on
    every worker for the same task set (a deployment number, say) and the group detects a
    worker that is behind or ahead (the leader then waits for, or the worker waits before
    starting); leave it 0 and the leader's copy simply rules.
    """

    def __init__(self, tasks: Mapping[str, float | TaskSpec], version: int = 0) -> None:
        self._tasks: dict[str, TaskSpec] = as_task_set(tasks)
        self._version = version
        self._listener: ChangeListener | None = None
        self.use_clock(SYSTEM_CLOCK)

    def use_clock(self, clock: Clock) -> None:
        super().use_clock(clock)
        self._lock = clock.lock()

    def snapshot(self) -> tuple[int, TaskSet]:
        with self._lock:
            return self._version, self._tasks

    def start(self, connection: Mapping[str, Any], on_change: ChangeListener) -> None:
        self._listener = on_change

    def update(self, tasks: Mapping[str, float | TaskSpec], version: int | None = None) -> None:
        """Replace the task set.

        Args:
            tasks: task id -> weight or :class:`TaskSpec`.
            version: the new version, above the current one; None keeps the version (then
                workers are not compared: a local counter would mean nothing elsewhere).

        Raises:
            ConfigurationError: a task is invalid, or ``version`` does not grow.
        """
        new = as_task_set(tasks)
        with self._lock:
            if version is not None and version <= self._version:
                raise ConfigurationError(
                    f"version {version} must be above the current version {self._version}"
                )
            old = self._tasks
            if version is not None:
                self._version = version
            self._tasks = new
            current = self._version
        if self._listener is not None:
            self._listener(current, old, new)


class CallableTasks(TaskSource):
    """A task set read from a function each time it is needed (version 0: never compared).

    The function is called by the leader when it assigns and by every worker when it starts
    tasks; it must be fast and return the same set on every worker. The recipe does not
    learn of changes on its own: call ``TaskDistribution.refresh_tasks()`` after one.
    """

    def __init__(self, read: Callable[[], Mapping[str, float | TaskSpec]]) -> None:
        self._read = read

    def snapshot(self) -> tuple[int, TaskSet]:
        return 0, as_task_set(self._read())


class TopicTasks(TaskSource):
    """Task definitions in a compacted, single-partition Kafka topic that every worker reads.

    A record's key is the task id (UTF-8); its value is JSON
    ``{"weight": 2.0, "config": {...}}`` (both optional; weight defaults to 1.0); a
    tombstone (null value) removes the task. Create the topic with
    ``cleanup.policy=compact`` and one partition, as Kafka Connect's config topic: the
    version of the task set is the offset after the last record read (``highest offset
    seen + 1``), the same number on every worker that has read the same records.

    Each worker reads the topic from the beginning on a background thread (a kafka-python
    ``KafkaConsumer`` with manual assignment, no group, no commits) and keeps reading.

    Example:
        producer.send("tasks", key=b"ingest-eu", value=b'{"weight": 2, "config": {"region": "eu"}}')
        producer.send("tasks", key=b"ingest-us", value=None)   # removes ingest-us

    Args:
        topic: the topic's name.
        **consumer_settings: kafka-python consumer settings; the group's connection
            settings (bootstrap servers, TLS, SASL) are used for those not given here.
    """

    def __init__(self, topic: str, **consumer_settings: Any) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError("topic must be a non-empty string")
        self.topic = topic
        self._settings = dict(consumer_settings)
        self._tasks: dict[str, TaskSpec] = {}
        self._version = 0
        self._ready = False
        self._thread: Thread | None = None
        self._listener: ChangeListener | None = None
        self._problem: str | None = None
        self.use_clock(SYSTEM_CLOCK)

    def use_clock(self, clock: Clock) -> None:
        super().use_clock(clock)
        self._cond = clock.condition()
        self._closed = clock.event()

    def snapshot(self) -> tuple[int, TaskSet]:
        with self._cond:
            return self._version, self._tasks

    def start(self, connection: Mapping[str, Any], on_change: ChangeListener) -> None:
        self._listener = on_change
        settings = {**connection, **self._settings}
        self._thread = self.clock.thread(lambda: self._run(settings), f"tasks-topic|{self.topic}")
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(5)

    def wait_ready(self, timeout: float) -> bool:
        clock = self.clock
        deadline = clock.monotonic() + timeout
        with self._cond:
            while not self._ready:
                remaining = deadline - clock.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    return False
                self._cond.wait(min(remaining, 0.5))
            return True

    def wait_for_version(self, version: int, timeout: float) -> bool:
        clock = self.clock
        deadline = clock.monotonic() + timeout
        with self._cond:
            while self._version < version:
                remaining = deadline - clock.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    return False
                self._cond.wait(min(remaining, 0.5))
            return True

    # -- the reader thread ----------------------------------------------------------------

    def _run(self, settings: dict[str, Any]) -> None:
        while not self._closed.is_set():
            try:
                self._read(settings)
            except Exception as e:
                problem = f"reading task topic {self.topic!r} failed: {e!r}; retrying"
                if problem != self._problem:
                    log.exception("%s", problem)
                self._problem = problem
                self._closed.wait(_RETRY_S)

    def _read(self, settings: dict[str, Any]) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(enable_auto_commit=False, group_id=None, **settings)
        try:
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                raise RuntimeError("the topic does not exist (yet)")
            if len(partitions) != 1:
                raise RuntimeError(
                    f"the topic has {len(partitions)} partitions; a task topic needs exactly "
                    "one, so that its offsets order every change (like Connect's config topic)"
                )
            tp = TopicPartition(self.topic, next(iter(partitions)))
            consumer.assign([tp])
            # Resume where this reader stopped if it restarts: the task set is still valid.
            with self._cond:
                start = self._version
            consumer.seek(tp, start)
            end = consumer.end_offsets([tp])[tp]
            while not self._closed.is_set():
                batches = consumer.poll(timeout_ms=_POLL_MS)
                records = [r for batch in batches.values() for r in batch]
                position = consumer.position(tp)
                self._problem = None
                self._apply(records, position, ready=position >= end)
        finally:
            consumer.close()

    def _apply(self, records: list[Any], position: int, *, ready: bool) -> None:
        with self._cond:
            old = self._tasks
            new = dict(old)
            for r in records:
                self._apply_one(new, r)
            changed = new != old
            moved = position > self._version
            if moved:
                self._version = position
            version = self._version
            if changed:
                self._tasks = new
            became_ready = ready and not self._ready
            if ready:
                self._ready = True
            if moved or became_ready:
                self._cond.notify_all()
        # Changes seen while loading the topic for the first time are not changes: the
        # worker has not joined with any task set yet.
        if (changed or moved) and self._ready and not became_ready and self._listener:
            self._listener(version, old, new)

    def _apply_one(self, tasks: dict[str, TaskSpec], record: Any) -> None:
        if record.key is None:
            log.warning(
                "task topic %s offset %d: record without a key, skipped", self.topic, record.offset
            )
            return
        try:
            task = bytes(record.key).decode("utf-8")
        except UnicodeDecodeError:
            log.warning(
                "task topic %s offset %d: key is not UTF-8, skipped", self.topic, record.offset
            )
            return
        if record.value is None:
            tasks.pop(task, None)
            return
        try:
            value = json.loads(record.value) if record.value else {}
            if not isinstance(value, dict):
                raise ValueError("the value must be a JSON object")
            tasks[task] = _as_spec(
                task, TaskSpec(float(value.get("weight", 1.0)), value.get("config"))
            )
        except (ValueError, TypeError, ConfigurationError) as e:
            # A bad definition must not stop every worker: keep the previous one and say so.
            log.error(
                "task topic %s offset %d: bad definition of task %r (%s); ignored",
                self.topic,
                record.offset,
                task,
                e,
            )
