"""Deterministic simulation: thousands of seeded fault histories, each checked at every
simulated instant, each replayable from its seed.

The histories run in a child process with a fixed PYTHONHASHSEED, as the command a failure
prints does, so that a failing seed replays exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coordination._engine.membership import GroupMembership
from coordination.testing.simulation._history import History, HistorySettings
from coordination.testing.simulation._runner import run_seeds
from coordination.testing.simulation._shards import ShardsDriver

# CI's share: at least 2,000 histories of 100 faults per recipe.
CI_HISTORIES = int(os.environ.get("SIMULATION_HISTORIES", "2000"))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "coordination.testing.simulation", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )


@pytest.mark.timeout(1500)
def test_the_engine_keeps_its_lease_promise_through_thousands_of_fault_histories() -> None:
    done = run_cli("--recipe", "engine", "--seeds", str(CI_HISTORIES), "--faults", "100")
    print(done.stdout[-20_000:])
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
    last = done.stdout.strip().splitlines()[-1]
    fields = dict(pair.split("=") for pair in last.split())
    assert int(fields["histories"]) == CI_HISTORIES
    assert int(fields["violations"]) == 0
    assert float(fields["faults_per_history"]) >= 100


def test_a_history_replays_exactly_from_its_seed() -> None:
    first = History(ShardsDriver, 11, HistorySettings(faults=40), log_to_trace=True).run()
    again = History(ShardsDriver, 11, HistorySettings(faults=40), log_to_trace=True).run()
    assert first.trace == again.trace and len(first.trace) > 100
    assert (first.steps, first.faults, first.simulated_s) == (
        again.steps,
        again.faults,
        again.simulated_s,
    )
    other = History(ShardsDriver, 12, HistorySettings(faults=40), log_to_trace=True).run()
    assert other.trace != first.trace


def test_the_checker_finds_a_member_that_trusts_its_lease_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A lease three seconds too long (half a session): two members soon hold one shard.
    def too_long(self: GroupMembership) -> float:
        cfg = self._config
        confirmed = self._confirmed
        if self.state.value in ("unjoined", "closed") or confirmed is None:
            return 0.0
        if confirmed[0] != self.generation:
            return 0.0
        guaranteed = min(cfg.session_timeout_ms, cfg.rebalance_timeout_ms) / 1000
        return max(0.0, confirmed[1] + guaranteed + 3.0 - self.clock.monotonic())

    monkeypatch.setattr(GroupMembership, "membership_lease", too_long)
    summary = run_seeds("engine", range(50), stop_at_first=True)
    assert summary.failures, "a lease 3 s too long went unnoticed in 50 histories"
    failure = summary.failures[0]
    assert failure.violation is not None and "held by" in failure.violation
    assert failure.trace  # the story of what happened, for the replay


def test_one_seed_runs_alone_with_its_trace() -> None:
    done = run_cli("--recipe", "engine", "--seed", "3", "--faults", "20")
    assert done.returncode == 0, done.stdout[-5_000:]
    assert "seed=3 faults=20 ok=True" in done.stdout
