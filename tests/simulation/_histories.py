"""Running a recipe's seeded histories as CI does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from coordination.testing.simulation import HistorySettings, run_seeds


def assert_histories_pass(recipe: str, histories: int, *, timeout_s: float = 850) -> None:
    """Run ``histories`` histories of 100 faults of ``recipe`` in a child process with a fixed
    PYTHONHASHSEED, as the replay command a failure prints runs them, and assert that every
    one kept the recipe's guarantees (the output's end, with the failures, if not)."""
    out = subprocess.run(
        [
            # At a lower priority, as tests/simulation/test_simulation.py's: simulated time
            # does not care how fast it runs, and the real-time tests beside it do.
            "nice",
            "-n",
            "10",
            sys.executable,
            "-m",
            "devtools.simulation",
            "--recipe",
            recipe,
            "--seeds",
            str(histories),
            "--faults",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    text = out.stdout + out.stderr
    last = text.strip().splitlines()[-1] if text.strip() else ""
    fields = dict(pair.split("=", 1) for pair in last.split() if "=" in pair)
    assert out.returncode == 0 and fields.get("violations") == "0", text[-20_000:]
    assert int(fields["histories"]) == histories, last
    assert float(fields["faults_per_history"]) >= 100, last


def outcomes_of(
    driver: Callable[[HistorySettings], Any], seeds: Iterable[int], settings: HistorySettings
) -> Counter[str]:
    """Run one history per seed in this process and assert that every one kept the recipe's
    guarantees; the ``outcomes`` the drivers counted (what the histories reached), summed."""
    drivers: list[Any] = []

    def made(history_settings: HistorySettings) -> Any:
        drivers.append(driver(history_settings))
        return drivers[-1]

    summary = run_seeds(made, seeds, settings)
    assert not summary.failures, summary.failures[0].violation
    return sum((d.outcomes for d in drivers), Counter[str]())
