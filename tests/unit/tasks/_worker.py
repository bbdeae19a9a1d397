"""One TaskDistribution worker whose rounds a test scripts, on a scripted broker and a
manual clock.

No engine thread runs: the test drives the member's steps (join, sync, heartbeat) on its own
thread. Start and stop callbacks are recorded and can be made to block or raise, so that
the test decides what happens while they run; nothing waits on timing except
``stop_timeout_ms`` (0.1 s) running out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from coordination.testing import ManualClock, ScriptedTransport
from coordination.testing import messages as m
from recipes.tasks import TaskDistribution, TaskError, TaskSpec
from recipes.tasks._assignor import WorkerAssignment, WorkerState
from recipes.tasks._wire import decode_worker_metadata, encode_assignment, encode_worker_metadata

NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
ME = "m-w"
STOP_TIMEOUT_MS = 100
SESSION_TIMEOUT_MS = 10_000
# With session_timeout_ms=10000 and the default margin (heartbeat_interval_ms, 3000), the
# watchdog stops everything once fewer than 3.1 s (margin + stop timeout) of the 10 s lease
# remain: 6.9 s after the last confirmed request.
LEASE_LOW_AFTER_S = 6.9
LEASE_RUNS_LOW_S = 7.0  # a little later


def plan(
    *assigned: str, revoked: tuple[str, ...] = (), version: int = 0, delay_ms: int = 0
) -> WorkerAssignment:
    """The assignment a leader named "leader" sends this worker."""
    return WorkerAssignment(
        assigned=tuple(sorted(assigned)),
        revoked=revoked,
        delay_ms=delay_ms,
        leader_id="m-leader",
        leader_worker_id="leader",
        config_version=version,
    )


class Worker:
    """A worker named "w" (member ``m-w``); records its callbacks in ``calls``."""

    def __init__(self, tasks: Any, **kw: Any) -> None:
        self.transport = ScriptedTransport()
        self.clock = ManualClock()
        self.calls: list[tuple[str, str]] = []
        self.errors: list[TaskError] = []
        self.joined_with: list[WorkerState] = []
        # What had been called when each JoinGroup was sent.
        self.calls_at_join: list[list[tuple[str, str]]] = []
        self.blocked: dict[str, threading.Event] = {}  # stop_task(t) waits for it
        self.on_start: Callable[[str], None] | None = None
        self.on_stop: Callable[[str], None] | None = None
        self.d = TaskDistribution(
            "g",
            worker_id="w",
            start_task=self._start,
            stop_task=self._stop,
            on_task_error=lambda task, error: self.errors.append(error),
            tasks=tasks,
            transport=self.transport,
            clock=self.clock,
            bootstrap_servers="x:1",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            stop_timeout_ms=STOP_TIMEOUT_MS,
            **{"heartbeat_interval_ms": 3_000, **kw},  # the lease margin the tests count with
        )
        self.engine = self.d.coordinator._engine
        self.engine.resolve_protocol_type()
        # The test drives the member's steps itself: start() must not start its threads.
        self.d._started = True
        self.d._source.start({}, self.d._group.tasks_changed)  # what start() does, minus threads
        self.transport.prepare(NODE)
        self.generation = 0

    # ------------------------------------------------------------------ the callbacks

    def _start(self, task: str, spec: TaskSpec) -> None:
        self.calls.append(("start", task))
        if self.on_start is not None:
            self.on_start(task)

    def _stop(self, task: str) -> None:
        self.calls.append(("stop", task))
        if self.on_stop is not None:
            self.on_stop(task)
        if task in self.blocked:
            assert self.blocked[task].wait(10)
        self.calls.append(("stopped", task))

    def block_stop(self, task: str) -> threading.Event:
        """Make ``stop_task(task)`` overrun until the returned event is set."""
        self.blocked[task] = threading.Event()
        return self.blocked[task]

    # ------------------------------------------------------------------ rounds

    def rounds(self, *plans: WorkerAssignment, rejoin_may_follow: bool = False) -> None:
        """Rebalance once per plan, each led by another member; plans after the first need a
        rejoin (e.g. revocations). With ``rejoin_may_follow``, the last plan's answers may
        stay unused (a rejoin the test waits for may come after this returns)."""
        for p in plans:
            self.generation += 1
            self.transport.prepare(
                self._join_answer(self.generation, "m-leader", ()),
                response_type=m.JoinGroupResponse,
            )
            self.transport.prepare(self._sync_answer(encode_assignment(p)))
        self.next_round(unused=2 if rejoin_may_follow else 0)

    def lead(self, *others: WorkerState) -> None:
        """Rebalance once, led by this worker, with ``others`` in the group."""
        self.generation += 1
        members = tuple(
            m.JoinGroupResponseMember(o.member_id, None, encode_worker_metadata(o)) for o in others
        )
        self.transport.prepare(
            self._join_answer(self.generation, ME, members), response_type=m.JoinGroupResponse
        )

        def sync(request: m.Request) -> m.Response:
            assert isinstance(request, m.SyncGroupRequest)
            return self._sync_answer(dict(request.assignments)[ME])

        self.transport.prepare(sync, response_type=m.SyncGroupResponse)
        self.next_round()

    def next_round(self, unused: int = 0) -> None:
        self.engine.request_rejoin("the test's next round")
        assert self.engine.join_group_if_needed(deadline=None)
        assert self.transport.pending() in {0, unused}

    def _join_answer(
        self, generation: int, leader: str, others: Sequence[m.JoinGroupResponseMember]
    ) -> Callable[[m.Request], m.Response]:
        def join(request: m.Request) -> m.Response:
            assert isinstance(request, m.JoinGroupRequest)
            ((_, metadata),) = request.protocols
            self.joined_with.append(decode_worker_metadata(ME, metadata))
            self.calls_at_join.append(list(self.calls))
            me = (m.JoinGroupResponseMember(ME, None, metadata),) if leader == ME else ()
            return m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="tasks",
                protocol_name="tasks-v0",
                leader=leader,
                member_id=ME,
                members=me + tuple(others),
            )

        return join

    @staticmethod
    def _sync_answer(assignment: bytes) -> m.SyncGroupResponse:
        return m.SyncGroupResponse(
            error_code=0, protocol_type="tasks", protocol_name="tasks-v0", assignment=assignment
        )

    # ------------------------------------------------------------------ looking

    def owned(self) -> frozenset[str]:
        """What this worker's next JoinGroup reports as its own."""
        return self.d._group.worker_state().owned

    def settled(self) -> bool:
        return self.d._group.settled_view() is not None

    def wait_for_stops(self) -> None:
        """Wait (real time: the manual clock does not move) until no stop_task runs."""
        deadline = time.monotonic() + 5
        while self.d._runner.stopping:
            assert time.monotonic() < deadline, "a stop_task still runs"
            time.sleep(0.005)

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 5
        while not condition():
            assert time.monotonic() < deadline, f"waited in vain for {what}"
            time.sleep(0.005)


class Ticking:
    """Moves a manual clock on by ``step`` every millisecond while in the ``with`` block, as
    time passes for a close() that waits on the clock."""

    def __init__(self, clock: ManualClock, step: float = 0.01) -> None:
        self._clock = clock
        self._step = step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self._clock.advance(self._step)

    def __enter__(self) -> Ticking:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)
