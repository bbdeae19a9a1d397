"""Running a recipe's seeded histories as CI does."""

from __future__ import annotations

import os
import subprocess
import sys


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
