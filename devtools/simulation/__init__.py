"""The recipes under the deterministic simulator (``coordination.testing.simulation``): one
driver per recipe, each starting members and checking the recipe's guarantees at every step.

Run: ``python -m devtools.simulation --recipe election --seeds 2000`` (docs/simulation.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordination.testing.simulation import DriverFactory, Result, Summary
from coordination.testing.simulation import replay as _replay
from coordination.testing.simulation import run_seeds as _run_seeds
from examples.shards_simulation import ShardsDriver

from .consumers import AsyncConsumersDriver, BrokerAssignedConsumersDriver, ConsumersDriver
from .election import AsyncElectionDriver, ElectionDriver
from .pipeline import BrokerAssignedPipelineDriver, CompactedPipelineDriver, PipelineDriver
from .queues import AsyncShareWorkersDriver, ShareConsumersDriver, ShareWorkersDriver
from .tasks import TasksDriver

# The recipes the simulator runs, by name.
RECIPES: dict[str, DriverFactory] = {
    "engine": ShardsDriver,
    "election": ElectionDriver,
    "election-async": AsyncElectionDriver,
    "tasks": TasksDriver,
    "consumer": ConsumersDriver,
    "consumer-async": AsyncConsumersDriver,
    "consumer-848": BrokerAssignedConsumersDriver,
    "pipeline": PipelineDriver,
    "pipeline-848": BrokerAssignedPipelineDriver,
    "pipeline-compacted": CompactedPipelineDriver,
    "share": ShareConsumersDriver,
    "share-worker": ShareWorkersDriver,
    "share-worker-async": AsyncShareWorkersDriver,
}


def run_seeds(recipe: str, seeds: Iterable[int], *args: Any, **kwargs: Any) -> Summary:
    """:func:`coordination.testing.simulation.run_seeds` of a recipe named in RECIPES."""
    return _run_seeds(RECIPES[recipe], seeds, *args, **kwargs)


def replay(recipe: str, seed: int, *args: Any, **kwargs: Any) -> Result:
    """:func:`coordination.testing.simulation.replay` of a recipe named in RECIPES."""
    return _replay(RECIPES[recipe], seed, *args, **kwargs)
