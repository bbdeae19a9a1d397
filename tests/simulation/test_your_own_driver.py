"""The simulator for users' own coordinators (docs/testing.md): the command line with a
driver named by module and attribute, and clear errors for a wrong one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coordination.testing.simulation import run_seeds
from examples.shards_simulation import ShardsDriver

ROOT = Path(__file__).resolve().parents[2]


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordination.testing.simulation", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_example_driver_runs_from_the_command_line() -> None:
    done = simulate("--driver", "examples.shards_simulation:ShardsDriver", "--seeds", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "histories=3 faults=300" in done.stdout and "violations=0" in done.stdout


def test_a_wrong_driver_is_named_in_the_error() -> None:
    for where, said in [
        ("examples.shards_simulation", "module:attribute"),
        ("examples.no_such_module:Driver", "No module named"),
        ("examples.shards_simulation:NoSuchDriver", "NoSuchDriver"),
        ("examples.shards_simulation:GROUP", "not a Driver factory"),
    ]:
        done = simulate("--driver", where, "--seeds", "1")
        assert done.returncode == 2 and said in done.stderr, (where, done.stderr)


def test_run_seeds_takes_the_driver_itself() -> None:
    summary = run_seeds(ShardsDriver, range(3))
    assert summary.recipe == "engine" and summary.histories == 3 and not summary.failures
