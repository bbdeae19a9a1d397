"""Moved to :mod:`coordination.clock` (public); this re-export keeps old imports working.

Internal, no compatibility guarantee: import from ``coordination.clock``.
"""

from __future__ import annotations

from ..clock import SYSTEM_CLOCK as SYSTEM_CLOCK
from ..clock import Clock as Clock
from ..clock import Condition as Condition
from ..clock import Event as Event
from ..clock import Lock as Lock
from ..clock import SystemClock as SystemClock
from ..clock import Thread as Thread
from ..clock import ThreadingClock as ThreadingClock
