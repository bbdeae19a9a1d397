"""Worker processes of the pipeline, as the demo, the tests and the benchmark run them.

:class:`WorkerProcess` starts ``python -m recipes.pipeline worker`` and collects
the JSON events it prints, read back as :class:`~recipes.pipeline.WorkerEvent`
values; :class:`Timeline` merges the events of several
workers into who owned what when, how long each rebalance took and how long a
killed worker's partitions waited.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ._events import (
    BatchPublished,
    PartitionsAssigned,
    PartitionsReleased,
    RebalanceBegan,
    WorkerEvent,
)

__all__ = ["Kill", "Timeline", "WorkerProcess"]

_ROOT = Path(__file__).resolve().parents[2]

_E = TypeVar("_E", bound=WorkerEvent)


class WorkerProcess:
    """A pipeline worker in a child process; killable, closable, its events collected.

    Example:
        w = WorkerProcess("w1", bootstrap_servers=..., group_id=..., topic="events",
                          output="/tmp/out", log_dir=Path("/tmp/logs"))
        w.wait_for(WorkerStarted, timeout=120)
        w.kill()                      # SIGKILL

    The child writes its events to stdout (one JSON object per line) and its
    logs (and Spark's) to ``<log_dir>/<name>.log``. It closes gracefully on
    ``close`` read from its stdin, and starts processing on ``go`` when started
    with ``wait_for_go``.
    """

    def __init__(
        self,
        name: str,
        *,
        bootstrap_servers: str,
        group_id: str,
        topic: str | Sequence[str],
        output: str | Path,
        log_dir: Path,
        window_ms: int,
        sink: str = "parquet",
        pipeline: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        master: str = "local[1]",
        session_timeout_ms: int = 6000,
        max_batch_records: int = 20_000,
        max_batch_delay_ms: int = 1000,
        parallel_batches: int = 2,
        max_partitions_per_batch: int = 64,
        wait_for_go: bool = False,
        compaction_interval_ms: int | None = None,
        group_protocol: str = "classic",
    ) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        args = [
            sys.executable,
            "-m",
            "recipes.pipeline",
            "worker",
            f"--bootstrap-servers={bootstrap_servers}",
            f"--group={group_id}",
            *(f"--topic={t}" for t in ([topic] if isinstance(topic, str) else topic)),
            f"--output={output}",
            f"--sink={sink}",
            *([f"--pipeline={pipeline}"] if pipeline else []),
            *(f"--spark-conf={k}={v}" for k, v in (spark_conf or {}).items()),
            f"--name={name}",
            f"--master={master}",
            f"--window-ms={window_ms}",
            f"--session-timeout-ms={session_timeout_ms}",
            f"--max-batch-records={max_batch_records}",
            f"--max-batch-delay-ms={max_batch_delay_ms}",
            f"--parallel-batches={parallel_batches}",
            f"--max-partitions-per-batch={max_partitions_per_batch}",
            f"--group-protocol={group_protocol}",
        ]
        if wait_for_go:
            args.append("--wait-for-go")
        if compaction_interval_ms is not None:
            args.append(f"--compaction-interval-ms={compaction_interval_ms}")
        path = os.environ.get("PYTHONPATH", "")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            args,
            cwd=_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{_ROOT}{os.pathsep}{path}" if path else str(_ROOT)},
        )
        self.pid = self.process.pid
        self.events: list[WorkerEvent] = []
        self._lock = threading.Condition()
        self.killed_at: float | None = None
        self._reader = threading.Thread(target=self._read, name=f"{name}-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = WorkerEvent.from_dict(json.loads(line))
            except ValueError:
                continue  # not an event (a library printing to stdout)
            with self._lock:
                self.events.append(event)
                self._lock.notify_all()

    def of(self, kind: type[_E]) -> list[_E]:
        """The events of one class so far (e.g. ``of(BatchPublished)``)."""
        with self._lock:
            return [e for e in self.events if isinstance(e, kind)]

    def owned(self) -> set[int]:
        """The partitions the worker owns according to its events so far."""
        owned: set[int] = set()
        with self._lock:
            for e in self.events:
                if isinstance(e, PartitionsAssigned):
                    owned |= set(e.partitions)
                elif isinstance(e, PartitionsReleased):
                    owned -= set(e.partitions)
        return owned

    def wait_for(self, kind: type[_E], timeout: float) -> _E:
        """Wait for the first event of class ``kind``.

        Raises:
            TimeoutError: None came in time, or the process ended first.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [e for e in self.events if isinstance(e, kind)]
                if found:
                    return found[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.alive:
                    raise TimeoutError(
                        f"worker {self.name}: no {kind.__name__} event (see {self.log_path})"
                    )
                self._lock.wait(min(remaining, 0.5))

    @property
    def alive(self) -> bool:
        """Whether the process is running."""
        return self.process.poll() is None

    def send(self, command: str) -> None:
        """Write a command line (``go``, ``close``) to the worker's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def kill(self) -> float:
        """SIGKILL the worker; returns the wall-clock time of the kill."""
        self.killed_at = time.time()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        return self.killed_at

    def close(self, timeout: float = 60.0) -> None:
        """Ask the worker to close (it hands its partitions over); kill it if it does not."""
        if self.alive:
            try:
                self.send("close")
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(5)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self._log.close()


@dataclass(frozen=True, slots=True)
class Kill:
    """A worker killed with SIGKILL, what it owned, and when its partitions ran again.

    Attributes:
        worker: Its name.
        at: Wall-clock time of the kill.
        partitions: The partitions it owned.
        resumed_after_s: Per partition, seconds from the kill to the first batch another
            worker published for it (None: none seen).
        detected_after_s: Seconds from the kill to the first rebalance a survivor saw.
    """

    worker: str
    at: float
    partitions: tuple[int, ...]
    resumed_after_s: dict[int, float | None]
    detected_after_s: float | None


class Timeline:
    """The merged events of the workers of one run.

    Args:
        workers: The workers.
        t0: Wall-clock time that times are shown relative to.
    """

    def __init__(self, workers: Sequence[WorkerProcess], t0: float) -> None:
        self.t0 = t0
        self.kills = {w.name: w.killed_at for w in workers if w.killed_at is not None}
        events = [e for w in workers for e in list(w.events)]
        self.events = sorted(events, key=lambda e: e.t)

    def of(self, kind: type[_E]) -> list[_E]:
        """Events of one class, in time order."""
        return [e for e in self.events if isinstance(e, kind)]

    def ownership(self) -> dict[int, list[tuple[str, float, float | None]]]:
        """Per partition, ``(worker, from, to)`` intervals (relative seconds; to None: still)."""
        open_: dict[int, tuple[str, float]] = {}
        result: dict[int, list[tuple[str, float, float | None]]] = {}
        # A kill is a moment of its own: (time, the worker killed) instead of an event.
        moments: list[tuple[float, WorkerEvent | str]] = [(e.t, e) for e in self.events]
        moments += [(at, w) for w, at in self.kills.items()]
        moments.sort(key=lambda m: m[0])
        for t, e in moments:
            rel = t - self.t0
            if isinstance(e, PartitionsAssigned):
                for p in e.partitions:
                    if p in open_:  # the previous owner's end was not seen (clock skew)
                        worker, since = open_.pop(p)
                        result.setdefault(p, []).append((worker, since, rel))
                    open_[p] = (e.worker, rel)
            elif isinstance(e, PartitionsReleased | str):
                who = e if isinstance(e, str) else e.worker
                gone = (
                    e.partitions
                    if not isinstance(e, str)
                    else [p for p, (w, _) in open_.items() if w == who]
                )
                for p in gone:
                    if p in open_ and open_[p][0] == who:
                        worker, since = open_.pop(p)
                        result.setdefault(p, []).append((worker, since, rel))
        for p, (worker, since) in open_.items():
            result.setdefault(p, []).append((worker, since, None))
        return dict(sorted(result.items()))

    def rebalances(self) -> list[tuple[int, float, int, int]]:
        """Per generation: ``(generation, at, members, ms)``.

        ``ms`` is the longest time a member spent from the start of the
        rebalance (its JoinGroup) to its assignment; ``at`` is relative seconds.
        """
        by_generation: dict[int, list[PartitionsAssigned]] = {}
        for e in self.of(PartitionsAssigned):
            by_generation.setdefault(e.generation, []).append(e)
        return [
            (
                g,
                min(e.t for e in es) - self.t0,
                len({e.worker for e in es}),
                max(e.rebalance_ms or 0 for e in es),
            )
            for g, es in sorted(by_generation.items())
        ]

    def kill_report(self, worker: str, partitions: Iterable[int]) -> Kill:
        """How a kill of ``worker`` was noticed and when its partitions ran again."""
        at = self.kills[worker]
        resumed: dict[int, float | None] = {}
        for p in sorted(partitions):
            after = [
                e.t - at
                for e in self.of(BatchPublished)
                if e.partition == p and e.worker != worker and e.t > at
            ]
            resumed[p] = min(after) if after else None
        noticed = [e.t - at for e in self.of(RebalanceBegan) if e.worker != worker and e.t > at]
        return Kill(
            worker=worker,
            at=at,
            partitions=tuple(sorted(partitions)),
            resumed_after_s=resumed,
            detected_after_s=min(noticed) if noticed else None,
        )

    def format_ownership(self) -> list[str]:
        """One line per partition: its owners over time."""
        lines = []
        for p, spans in self.ownership().items():
            parts = [
                f"{w} {since:6.1f}-{'end' if until is None else f'{until:.1f}'}s"
                for w, since, until in spans
            ]
            lines.append(f"  p{p:<3} " + ", ".join(parts))
        return lines
