"""The errors a task distribution reports about its tasks (to ``on_task_error``)."""

from __future__ import annotations

from coordination.errors import CoordinationError


class TaskError(CoordinationError):
    """A task failed to start or stop; passed to ``on_task_error``.

    Attributes:
        task_id: the task.
    """

    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class TaskStartError(TaskError):
    """``start_task`` raised (the cause is chained); the task is not running here."""


class TaskStopError(TaskError):
    """``stop_task`` raised (the cause is chained); the task is treated as stopped."""


class TaskStopTimeoutError(TaskStopError):
    """``stop_task`` did not return within ``stop_timeout_ms``.

    Whatever the reason for the stop (revocation, removal, lost membership, the lease
    watchdog, close), the worker keeps reporting the task as its own in every JoinGroup
    until ``stop_task`` returns, so that the leader gives it to no other worker, and does
    not start it again meanwhile; it rejoins when the stop returns. :meth:`close` waits for
    such stops (up to half its timeout) before leaving. If the group removes the worker
    while the stop still runs (its session expired, or close left after waiting in vain),
    the group gives the task away regardless: it may then run twice, and this error is the
    only trace of it.
    """
