"""Moved to :mod:`coordination.lease` (public); this re-export keeps old imports working.

Internal, no compatibility guarantee: import ``LeaseGuard`` from ``coordination.lease``, and
read a member's clock as ``Coordinator.clock``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lease import LeaseGuard as LeaseGuard

if TYPE_CHECKING:
    from ._coordinator import Coordinator
    from .clock import Clock


def engine_clock(member: Coordinator) -> Clock:
    """The clock ``member``'s engine reads its lease from: ``member.clock``."""
    return member.clock
