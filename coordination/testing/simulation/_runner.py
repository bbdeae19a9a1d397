"""Run many seeded histories of a recipe and sum them up."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._history import Driver, History, HistorySettings, Result

DriverFactory = Callable[[HistorySettings], Driver]
"""What makes a history's driver: a :class:`Driver` class (or a function) taking the
history's settings."""


@dataclass
class Summary:
    recipe: str
    histories: int = 0
    faults: int = 0
    steps: int = 0
    simulated_s: float = 0.0
    seconds: float = 0.0
    longest_settle_s: float = 0.0
    failures: list[Result] = field(default_factory=list)
    fault_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def per_minute(self) -> float:
        return self.histories / self.seconds * 60 if self.seconds else 0.0

    def line(self) -> str:
        """The last line: ``name=value`` pairs."""
        return (
            f"recipe={self.recipe} histories={self.histories} faults={self.faults} "
            f"faults_per_history={self.faults / max(1, self.histories):.1f} "
            f"violations={len(self.failures)} histories_per_minute={self.per_minute:.0f} "
            f"simulated_hours={self.simulated_s / 3600:.1f} "
            f"longest_settle_s={self.longest_settle_s:.2f}"
        )


def run_seeds(
    driver: DriverFactory,
    seeds: Iterable[int],
    settings: HistorySettings | None = None,
    *,
    stop_at_first: bool = False,
    on_result: Callable[[Result], None] | None = None,
) -> Summary:
    """Run one history per seed of ``driver``'s members; failures keep their trace."""
    summary = Summary(_name(driver))
    started = time.perf_counter()
    for seed in seeds:
        result = History(driver, seed, settings).run()
        summary.histories += 1
        summary.faults += result.faults
        summary.steps += result.steps
        summary.simulated_s += result.simulated_s
        for kind, n in result.fault_kinds.items():
            summary.fault_kinds[kind] = summary.fault_kinds.get(kind, 0) + n
        if result.settle_s is not None:
            summary.longest_settle_s = max(summary.longest_settle_s, result.settle_s)
        if on_result is not None:
            on_result(result)
        if not result.ok:
            summary.failures.append(result)
            if stop_at_first:
                break
    summary.seconds = time.perf_counter() - started
    return summary


def replay(driver: DriverFactory, seed: int, settings: HistorySettings | None = None) -> Result:
    """One history again, with the members' log records in its trace."""
    return History(driver, seed, settings, log_to_trace=True).run()


def _name(driver: DriverFactory) -> str:
    name = getattr(driver, "name", None)
    return name if isinstance(name, str) else getattr(driver, "__name__", "driver")


def with_fixed_hash_seed(argv: list[str]) -> None:
    """Re-run this process with PYTHONHASHSEED=0 unless it is set: the order of sets and
    dicts of strings must not differ between a run and its replay. ``argv`` is what to run
    after the interpreter (e.g. ``["-m", "coordination.testing.simulation", ...]``)."""
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *argv])
