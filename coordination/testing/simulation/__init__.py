"""Deterministic simulation of whole groups, for this library's recipes and for your own
``Coordinator`` subclasses: seeded fault histories on simulated time, checked at every step.

The parts (see docs/simulation.md):

- :class:`Scheduler`: the clock every simulated member takes its time, threads, locks and
  waits from (pass it as ``clock=``); one seed, one history, replayed exactly.
- :class:`SimCluster` and :class:`SimTransport`: three brokers and a network, with a model of
  Kafka's classic group coordinator behind them (pass the transport as ``transport=``).
- :class:`SimEventLoop`: asyncio's own event loop on simulated time, for async faces.
- :class:`History`: one seeded history of faults (crashes, pauses, partitions, coordinator
  moves, slow callbacks...) against members a :class:`Driver` starts and checks;
  :func:`run_seeds` runs many and sums them up.

A driver starts one member per host and says what must hold: :meth:`Driver.check` at every
step (safety), :meth:`Driver.settled` once the faults are over (liveness). Subclass
:class:`DriverBase`. ``python -m coordination.testing.simulation --driver
your.module:YourDriver --seeds 1000`` runs your own.
"""

from ._asyncio import SimEventLoop as SimEventLoop
from ._group_coordinator import GroupLog as GroupLog
from ._group_coordinator import OffsetRecord as OffsetRecord
from ._group_coordinator import OffsetTombstone as OffsetTombstone
from ._history import GROUP as GROUP
from ._history import Driver as Driver
from ._history import DriverBase as DriverBase
from ._history import History as History
from ._history import HistorySettings as HistorySettings
from ._history import Host as Host
from ._history import Result as Result
from ._history import Trace as Trace
from ._history import Violation as Violation
from ._network import SimCluster as SimCluster
from ._network import SimTransport as SimTransport
from ._runner import DriverFactory as DriverFactory
from ._runner import Summary as Summary
from ._runner import replay as replay
from ._runner import run_seeds as run_seeds
from ._runner import with_fixed_hash_seed as with_fixed_hash_seed
from ._scheduler import Process as Process
from ._scheduler import Scheduler as Scheduler
from ._scheduler import SimulationError as SimulationError

__all__ = [
    "GROUP",
    "Driver",
    "DriverBase",
    "DriverFactory",
    "GroupLog",
    "History",
    "HistorySettings",
    "Host",
    "OffsetRecord",
    "OffsetTombstone",
    "Process",
    "Result",
    "Scheduler",
    "SimCluster",
    "SimEventLoop",
    "SimTransport",
    "SimulationError",
    "Summary",
    "Trace",
    "Violation",
    "replay",
    "run_seeds",
    "with_fixed_hash_seed",
]
