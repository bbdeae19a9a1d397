"""Connect-style task distribution: named tasks spread over a group of workers.

See :class:`TaskDistribution`. Each task runs on exactly one worker; when workers join,
leave or crash, only the tasks that must move are stopped (Kafka Connect's incremental
cooperative rebalancing, KIP-415), a crashed worker's tasks wait ``max_delay_ms`` for it
to come back, and a worker that loses touch with the group stops its tasks before the
group can give them away. The task set comes from a mapping, a callable, or a compacted
topic (:class:`TopicTasks`) that every worker reads.
"""

from __future__ import annotations

from ._aio import AsyncTaskDistribution as AsyncTaskDistribution
from ._assignor import Balance as Balance
from ._distribution import TaskDistribution as TaskDistribution
from ._errors import TaskError as TaskError
from ._errors import TaskStartError as TaskStartError
from ._errors import TaskStopError as TaskStopError
from ._errors import TaskStopTimeoutError as TaskStopTimeoutError
from ._runner import TaskMetrics as TaskMetrics
from ._sources import CallableTasks as CallableTasks
from ._sources import StaticTasks as StaticTasks
from ._sources import TaskSource as TaskSource
from ._sources import TaskSpec as TaskSpec
from ._sources import TopicTasks as TopicTasks
from ._task_group import GroupView as GroupView

__all__ = [
    "AsyncTaskDistribution",
    "Balance",
    "CallableTasks",
    "GroupView",
    "StaticTasks",
    "TaskDistribution",
    "TaskError",
    "TaskMetrics",
    "TaskSource",
    "TaskSpec",
    "TaskStartError",
    "TaskStopError",
    "TaskStopTimeoutError",
    "TopicTasks",
]
