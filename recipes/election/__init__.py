"""Leader election over a Kafka group: one leader at a time, a fencing token that proves it.

See :class:`LeaderElection`. The group's members advertise an identity; every member learns
who leads; the leader gets a :class:`Leadership` whose token grows with every new leader and
whose transactional producer the broker fences once a newer leader exists.
"""

from ._aio import AsyncLeaderElection as AsyncLeaderElection
from ._choice import choose_leader as choose_leader
from ._leader_election import ElectionMetrics as ElectionMetrics
from ._leader_election import LeaderElection as LeaderElection
from ._leadership import DuplicateIdentityError as DuplicateIdentityError
from ._leadership import LeaderInfo as LeaderInfo
from ._leadership import Leadership as Leadership
from ._leadership import NotLeaderError as NotLeaderError

__all__ = [
    "AsyncLeaderElection",
    "DuplicateIdentityError",
    "ElectionMetrics",
    "LeaderElection",
    "LeaderInfo",
    "Leadership",
    "NotLeaderError",
    "choose_leader",
]
