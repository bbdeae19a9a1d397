"""Partition assignors for the ``consumer`` protocol: Kafka's four, and the interface.

``range``, ``roundrobin``, ``sticky`` and ``cooperative-sticky`` behave as Kafka's Java
assignors of the same names, so a group may mix members of this library with Java,
librdkafka or kafka-python consumers. Subclass :class:`PartitionAssignor` for your own.
"""

from __future__ import annotations

from .base import PartitionAssignor as PartitionAssignor
from .cooperative_sticky import CooperativeStickyAssignor as CooperativeStickyAssignor
from .range import RangeAssignor as RangeAssignor
from .round_robin import RoundRobinAssignor as RoundRobinAssignor
from .sticky import StickyAssignor as StickyAssignor

__all__ = [
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
