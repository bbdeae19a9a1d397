"""Distributed coordination for Python over Apache Kafka's group membership protocol.

Subclass :class:`Coordinator` to build on the protocol that Kafka's consumer,
Kafka Connect and Schema Registry are built on; or use a ready recipe from the
``recipes`` package.
"""

from __future__ import annotations

from . import errors as errors
from ._config import CoordinatorConfig as CoordinatorConfig
from ._coordinator import Coordinator as Coordinator
from ._metrics import MemberMetrics as MemberMetrics
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
    "Generation",
    "Member",
    "MemberMetrics",
    "MemberState",
    "OffsetAndMetadata",
    "ProtocolMetadata",
    "__version__",
    "errors",
]

# Show the public classes as coordination.X in reprs and tracebacks.
for _name in __all__:
    if isinstance(globals()[_name], type):
        globals()[_name].__module__ = __name__
del _name
