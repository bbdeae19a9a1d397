"""One seeded history: members of a recipe on a simulated cluster, under random faults,
with the recipe's guarantees checked at every simulated instant.

A history runs in three phases:

1. *Start*: every member joins.
2. *Faults*: random faults, one after another (see :class:`Fault`), while the recipe's
   safety invariants are checked after every step of every thread.
3. *Quiet*: no more faults; within ``session + rebalance timeout`` (plus the longest
   backoff) of the last fault's end, the work must be owned again (liveness).

A violated invariant stops the history; its seed replays it exactly (same threads, same
order, same times) and its trace says what happened.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._network import SimCluster, SimTransport
from ._scheduler import Process, Scheduler, SimulationError

GROUP = "sim-group"


class Violation(Exception):
    """A recipe's guarantee did not hold."""


@dataclass(frozen=True)
class HistorySettings:
    members: int = 3
    faults: int = 100
    # The mean simulated time between two faults.
    fault_gap_s: float = 1.5
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 10_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Slack for the liveness bound beyond session + rebalance + backoff (coordinator loads).
    settle_slack_s: float = 3.0
    trace_lines: int = 400

    def member_settings(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": "broker-1:9092",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "retry_backoff_ms": self.retry_backoff_ms,
            "retry_backoff_max_ms": self.retry_backoff_max_ms,
            "request_timeout_ms": 5_000,
        }


@dataclass
class Host:
    """A member's slot: its process (replaced at each restart) and its static identity."""

    index: int
    static: bool
    process: Process | None = None
    incarnation: int = 0
    handle: object = None  # what the driver built

    @property
    def name(self) -> str:
        return f"m{self.index}"

    @property
    def instance_id(self) -> str | None:
        return f"instance-{self.index}" if self.static else None


class Driver(Protocol):
    """A recipe under simulation."""

    name: str
    # Whether two processes of one host (same identity) may never run at once, as the task
    # distribution's unique worker_id requires: then no hung process is replaced.
    unique_identity: bool

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        """Build and start ``host``'s member (runs in a thread of the host's process)."""
        ...

    def close(self, host: Host) -> None:
        """Close ``host``'s member gracefully (runs in a thread of the host's process)."""
        ...

    def check(self, now: float) -> None:
        """Raise :class:`Violation` if a safety invariant does not hold right now."""
        ...

    def settled(self, live: list[Host]) -> str | None:
        """None when the work is owned as it should be by the live members, else what is
        not (liveness)."""
        ...

    def slow(self, host: Host, seconds: float) -> None:
        """Make the member's next user callback take ``seconds`` (a slow callback)."""
        ...

    def group_deleted(self) -> None:
        """An operator deleted the (empty) group and its offsets."""
        ...


class DriverBase:
    """What the drivers share: the slow-callback fault, and no state in the group's offsets."""

    unique_identity = False

    def __init__(self, settings: HistorySettings) -> None:
        self.settings = settings
        self._slow: dict[int, float] = {}

    def slow(self, host: Host, seconds: float) -> None:
        self._slow[host.index] = seconds

    def take_slow(self, host: Host, clock: Scheduler, longest_s: float | None = None) -> None:
        """Called in a user callback of ``host``: take the time a slow-callback fault gave."""
        seconds = self.slow_seconds(host, longest_s)
        if seconds:
            clock.sleep(seconds, clock.event())

    def slow_seconds(self, host: Host, longest_s: float | None = None) -> float:
        """How long ``host``'s next user callback is to take (a slow-callback fault), once."""
        seconds = self._slow.pop(host.index, 0.0)
        return seconds if longest_s is None else min(seconds, longest_s)

    def group_deleted(self) -> None:
        pass


class Trace:
    """The last lines of what happened, stamped with simulated time."""

    def __init__(self, scheduler: Scheduler, lines: int) -> None:
        self._scheduler = scheduler
        self.lines: deque[str] = deque(maxlen=lines)

    def __call__(self, text: str) -> None:
        self.lines.append(f"{self._scheduler.now - 1000.0:10.4f}  {text}")


class _TraceHandler(logging.Handler):
    def __init__(self, trace: Trace) -> None:
        super().__init__(logging.INFO)
        self._trace = trace

    def emit(self, record: logging.LogRecord) -> None:
        self._trace(f"[{record.name}] {record.getMessage()}")


@dataclass
class Result:
    recipe: str
    seed: int
    faults: int = 0
    fault_kinds: dict[str, int] = field(default_factory=dict)
    violation: str | None = None
    steps: int = 0
    simulated_s: float = 0.0
    settle_s: float | None = None
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None


FAULTS = (
    "pause_short",
    "pause_long",
    "crash_restart",
    "slow_callback",
    "drop_requests",
    "drop_responses",
    "slow_network",
    "coordinator_move",
    "broker_restart",
    "graceful_restart",
    "zombie",
    "isolate",
    "delete_group",
)


class History:
    def __init__(
        self,
        driver_factory: Callable[[HistorySettings], Driver],
        seed: int,
        settings: HistorySettings | None = None,
        *,
        log_to_trace: bool = False,
    ) -> None:
        self.settings = settings or HistorySettings()
        self.seed = seed
        self.scheduler = Scheduler(seed)
        self.rng = random.Random(seed ^ 0x5EED)
        self.cluster = SimCluster(self.scheduler)
        self.driver = driver_factory(self.settings)
        self.trace = Trace(self.scheduler, self.settings.trace_lines)
        self.log_to_trace = log_to_trace
        self.hosts = [Host(i, static=self.rng.random() < 0.5) for i in range(self.settings.members)]
        self.result = Result(self.driver.name, seed)
        self._busy_until = 0.0  # when the last fault's effects end
        self._faults_done = True
        self._transports: dict[int, SimTransport] = {}

    # ------------------------------------------------------------------ running

    def run(self) -> Result:
        handler = _TraceHandler(self.trace)
        loggers = [logging.getLogger(name) for name in ("coordination", "recipes", "asyncio")]
        saved = [(lg.level, lg.propagate) for lg in loggers]
        for lg in loggers:
            # asyncio's own records (a future's exception never retrieved...) come from the
            # garbage collector, at moments no seed decides: never in a trace.
            if self.log_to_trace and lg.name != "asyncio":
                lg.addHandler(handler)
                lg.setLevel(logging.INFO)
            else:
                lg.setLevel(logging.CRITICAL)
            lg.propagate = False
        try:
            self._run()
        except Violation as e:
            self.result.violation = str(e)
        except SimulationError as e:
            self.result.violation = f"simulation error: {e}"
        finally:
            self.scheduler.shutdown()
            for lg, (level, propagate) in zip(loggers, saved, strict=True):
                lg.removeHandler(handler)
                lg.setLevel(level)
                lg.propagate = propagate
        if self.scheduler.failures:
            # Named even beside another violation: a member whose thread died is often why.
            name, error = self.scheduler.failures[0]
            died = f"thread {name} died: {error!r}"
            violation = self.result.violation
            self.result.violation = died if violation is None else f"{violation} ({died})"
        self.result.steps = self.scheduler.steps
        self.result.simulated_s = self.scheduler.now - 1000.0
        if self.result.violation is not None or self.log_to_trace:
            self.result.trace = list(self.trace.lines)
        return self.result

    def _run(self) -> None:
        s = self.scheduler
        self.scheduler.probes.append(self._check)
        for host in self.hosts:
            self._start(host)
        s.run(s.now + self.settings.session_timeout_ms / 1000)
        self._faults_done = False
        if self.settings.faults:
            self._schedule_fault()
            while not self._faults_done:
                s.run(s.now + 10.0)
        self._settle()

    def _check(self) -> None:
        """After every step: the driver's invariants, then no rejoin storm."""
        self.driver.check(self.scheduler.now)
        if self.cluster.storm is not None:
            raise Violation(self.cluster.storm)

    def _schedule_fault(self) -> None:
        gap = self.rng.expovariate(1 / self.settings.fault_gap_s)
        self.scheduler.call_later(gap, self._inject)

    def settle_bound_s(self) -> float:
        """How long after the last fault the work must be owned again: a JoinGroup lost just
        before (it waits rebalance timeout + 5 s), the session of a member that died, the
        rebalance, a static member's takeover wait, the longest backoff, and some slack."""
        cfg = self.settings
        join_timeout_ms = cfg.rebalance_timeout_ms + 5_000
        takeover_ms = min(cfg.session_timeout_ms, cfg.rebalance_timeout_ms)
        return (
            join_timeout_ms
            + cfg.session_timeout_ms
            + cfg.rebalance_timeout_ms
            + takeover_ms
            + cfg.retry_backoff_max_ms
        ) / 1000 + cfg.settle_slack_s

    def _settle(self) -> None:
        s = self.scheduler
        quiet_from = max(s.now, self._busy_until)
        bound = self.settle_bound_s()
        s.run(quiet_from)
        live = [h for h in self.hosts if h.process is not None and not h.process.dead]
        settled = s.run_while(lambda: self.driver.settled(live) is not None, quiet_from + bound)
        if not settled:
            raise Violation(
                f"not settled {bound:.1f}s after the last fault: {self.driver.settled(live)}"
            )
        self.result.settle_s = s.now - quiet_from
        self.trace(f"settled after {self.result.settle_s:.3f}s")

    # ------------------------------------------------------------------ members

    def _start(self, host: Host) -> None:
        host.incarnation += 1
        process = host.process = Process(f"{host.name}.{host.incarnation}")
        transport = SimTransport(self.cluster, process)
        self._transports[host.index] = transport
        self.trace(f"{host.name}: start (incarnation {host.incarnation}, static={host.static})")
        self.scheduler.spawn(
            lambda: self.driver.start(host, transport, self.scheduler, self.trace),
            f"{process.name}-main",
            process,
        )

    # ------------------------------------------------------------------ faults

    def _inject(self) -> None:
        kind = self.rng.choice(FAULTS)
        s = self.scheduler
        cfg = self.settings
        session_s = cfg.session_timeout_ms / 1000
        host = self.rng.choice(self.hosts)
        note = getattr(self, f"_fault_{kind}")(host, session_s)
        if self.result.faults + (note is not None) < cfg.faults:
            self._schedule_fault()
        else:
            self._faults_done = True
        if note is None:
            return
        self.result.faults += 1
        self.result.fault_kinds[kind] = self.result.fault_kinds.get(kind, 0) + 1
        self.trace(f"FAULT {kind}: {note}")
        self._busy_until = max(self._busy_until, s.now)

    def _until(self, seconds: float) -> None:
        self._busy_until = max(self._busy_until, self.scheduler.now + seconds)

    def _fault_pause_short(self, host: Host, session_s: float) -> str | None:
        return self._pause(host, self.rng.uniform(0.05, 0.8) * session_s)

    def _fault_pause_long(self, host: Host, session_s: float) -> str | None:
        return self._pause(host, self.rng.uniform(1.05, 2.5) * session_s)

    def _pause(self, host: Host, seconds: float) -> str | None:
        if host.process is None or host.process.dead:
            return None
        self.scheduler.pause(host.process, seconds)
        self._until(seconds)
        return f"{host.name} paused for {seconds:.3f}s"

    def _fault_crash_restart(self, host: Host, session_s: float) -> str | None:
        if host.process is None or host.process.dead:
            return None
        self.scheduler.kill(host.process)
        down = self.rng.uniform(0.0, 2.0) * session_s
        self.scheduler.call_later(down, lambda: self._start(host))
        self._until(down)
        return f"{host.name} killed, back in {down:.3f}s"

    def _fault_graceful_restart(self, host: Host, session_s: float) -> str | None:
        process = host.process
        if process is None or process.dead:
            return None

        def restart() -> None:
            if host.process is not process:
                # Paused before this ran and replaced meanwhile (a hung process): the host's
                # member is the replacement now, which a close(host) would stop. Only this
                # process goes, as its replacer would have it go.
                self.scheduler.kill(process)
                self.rng.uniform(0.0, 1.0)  # drawn as before: the seed's other faults stay
                return
            self.driver.close(host)
            self.scheduler.kill(process)
            self.scheduler.call_later(self.rng.uniform(0.0, 1.0), lambda: self._start(host))

        self.scheduler.spawn(restart, f"{process.name}-close", process)
        self._until(session_s)
        return f"{host.name} closes and restarts"

    def _fault_zombie(self, host: Host, session_s: float) -> str | None:
        """The process hangs and is replaced, then wakes up. Only for dynamic members: two
        processes with one ``group_instance_id`` break static membership's contract (the
        broker replaces the member at once, see ``Coordinator.membership_lease``); nor for a
        recipe whose identities must be unique (the task distribution's worker_id)."""
        old = host.process
        if old is None or old.dead or host.static or self.driver.unique_identity:
            return None
        hang = self.rng.uniform(0.2, 2.5) * session_s
        self.scheduler.pause(old, hang)
        self._start(host)
        after = hang + self.rng.uniform(0.0, 1.0) * session_s
        self.scheduler.call_later(after, lambda: self.scheduler.kill(old))
        self._until(after)
        return f"{old.name} hangs for {hang:.3f}s and is replaced, killed after {after:.3f}s"

    def _fault_isolate(self, host: Host, session_s: float) -> str | None:
        """A network partition around one member: it reaches no broker, and the group goes on
        without it."""
        transport = self._transports.get(host.index)
        if transport is None or host.process is None or host.process.dead:
            return None
        seconds = self.rng.uniform(0.3, 2.5) * session_s
        transport.isolated_until = self.scheduler.now + seconds
        self._until(seconds)
        return f"{host.name} cut off from every broker for {seconds:.3f}s"

    def _fault_slow_callback(self, host: Host, session_s: float) -> str | None:
        seconds = self.rng.uniform(0.1, 1.5) * session_s
        self.driver.slow(host, seconds)
        self._until(seconds)
        return f"{host.name}'s next callback takes {seconds:.3f}s"

    def _fault_drop_requests(self, host: Host, session_s: float) -> str | None:
        return self._partition(session_s, responses_only=False)

    def _fault_drop_responses(self, host: Host, session_s: float) -> str | None:
        return self._partition(session_s, responses_only=True)

    def _partition(self, session_s: float, *, responses_only: bool) -> str | None:
        node = self.cluster.coordinator
        if node is None:
            return None
        seconds = self.rng.uniform(0.05, 1.5) * session_s
        self.cluster.partition(node, seconds, responses_only=responses_only)
        self._until(seconds)
        what = "answers from" if responses_only else "requests to"
        return f"{what} broker {node} lost for {seconds:.3f}s"

    def _fault_slow_network(self, host: Host, session_s: float) -> str | None:
        seconds = self.rng.uniform(0.5, 2.0) * session_s
        extra = self.rng.uniform(0.05, 0.5)
        self.cluster.slow(seconds, extra)
        self._until(seconds)
        return f"network {extra:.3f}s slower for {seconds:.3f}s"

    def _fault_coordinator_move(self, host: Host, session_s: float) -> str | None:
        before = self.cluster.coordinator
        self.cluster.move_coordinator()
        self._until(1.0)
        return f"coordinator moved {before} -> {self.cluster.coordinator}"

    def _fault_broker_restart(self, host: Host, session_s: float) -> str | None:
        up = [n for n, b in self.cluster.brokers.items() if b.up]
        if len(up) < 2:
            return None
        node = self.rng.choice(up)
        down = self.rng.uniform(0.2, 1.5) * session_s
        self.cluster.stop_broker(node)
        self.scheduler.call_later(down, lambda: self.cluster.start_broker(node))
        self._until(down + 1.0)
        return f"broker {node} down for {down:.3f}s"

    def _fault_delete_group(self, host: Host, session_s: float) -> str | None:
        model = self.cluster.coordinator_model()
        if model is None:
            return None
        code = model.delete_group(GROUP)
        if code != 0:
            return None
        self.driver.group_deleted()
        return "group deleted (it was empty), its committed offsets with it"
