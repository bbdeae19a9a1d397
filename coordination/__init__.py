"""Distributed coordination for Python over Apache Kafka's group membership protocol.

Subclass :class:`Coordinator` to build on the protocol that Kafka's consumer,
Kafka Connect and Schema Registry are built on; or use a ready recipe from the
``recipes`` package. A recipe of your own builds on the same public modules the
recipes use: ``coordination.clock``, ``coordination.lease``, ``coordination.transport``
and ``coordination.parts`` (docs/extending.md).
"""

from __future__ import annotations

from . import _kafka_python  # noqa: F401  (first: kafka-python made thread-safe)
from . import errors as errors
from ._config import CoordinatorConfig as CoordinatorConfig
from ._coordinator import Coordinator as Coordinator
from ._inspection import GroupDecoder as GroupDecoder
from ._inspection import GroupDescription as GroupDescription
from ._inspection import GroupInspector as GroupInspector
from ._inspection import GroupListing as GroupListing
from ._inspection import MemberDescription as MemberDescription
from ._inspection import describe_group as describe_group
from ._inspection import list_groups as list_groups
from ._inspection import rebalance_timeline as rebalance_timeline
from ._inspection import register_decoder as register_decoder
from ._metrics import MemberMetrics as MemberMetrics
from ._metrics import RebalanceRecord as RebalanceRecord
from ._protocol.error_codes import ErrorCode as ErrorCode
from ._types import NO_GENERATION as NO_GENERATION
from ._types import Generation as Generation
from ._types import Member as Member
from ._types import MemberState as MemberState
from ._types import OffsetAndMetadata as OffsetAndMetadata
from ._types import ProtocolMetadata as ProtocolMetadata

__version__ = "0.1.0"

__all__ = [
    "NO_GENERATION",
    "Coordinator",
    "CoordinatorConfig",
    "ErrorCode",
    "Generation",
    "GroupDecoder",
    "GroupDescription",
    "GroupInspector",
    "GroupListing",
    "Member",
    "MemberDescription",
    "MemberMetrics",
    "MemberState",
    "OffsetAndMetadata",
    "ProtocolMetadata",
    "RebalanceRecord",
    "__version__",
    "describe_group",
    "errors",
    "list_groups",
    "rebalance_timeline",
    "register_decoder",
]

# Show the public classes as coordination.X in reprs and tracebacks.
for _name in __all__:
    if isinstance(globals()[_name], type):
        globals()[_name].__module__ = __name__
del _name
