"""The README's first example, ``elect.py``, run as a new user runs it: two processes, the
leader stopped with Ctrl-C, the other one takes over. Every line a user sees is whole and
nothing else is printed (no traceback on Ctrl-C)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .members import ROOT

pytestmark = pytest.mark.integration


def readme_example() -> str:
    """The code block after "Save this as `elect.py`" in README.md."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index("Save this as `elect.py`") :]
    start = after.index("```python\n") + len("```python\n")
    code = after[start : after.index("```", start)]
    # A group of its own: the tests of a run share their brokers, and this test runs twice.
    assert '"elect-demo"' in code
    return code.replace('"elect-demo"', f'"elect-demo-{uuid.uuid4().hex[:8]}"')


class Demo:
    """``python elect.py <name> <servers>``; its output lines as they come."""

    def __init__(self, script: Path, name: str, servers: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(script), name, servers],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            # As from a terminal: a child of a background job would ignore Ctrl-C.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._new.put(line.rstrip("\n"))
        self._new.put(None)

    def wait_for(self, line: str, timeout: float = 60) -> None:
        while line not in self.lines:
            got = self._new.get(timeout=timeout)
            assert got is not None, f"ended before {line!r}: {self.lines}"
            self.lines.append(got)

    def interrupt(self) -> list[str]:
        """Ctrl-C; every line it printed, once it has exited (with status 0)."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(30) == 0
        self._reader.join(10)
        while (got := self._new.get_nowait()) is not None:
            self.lines.append(got)
        return self.lines


@pytest.fixture
def demos() -> Iterator[list[Demo]]:
    started: list[Demo] = []
    yield started
    for demo in started:
        if demo.process.poll() is None:
            demo.process.kill()
            demo.process.wait(10)
        if demo.process.stdout is not None:
            demo.process.stdout.close()


def test_the_readme_election_example_hands_over_on_ctrl_c_and_prints_clean_lines(
    kafka: str, demos: list[Demo], tmp_path: Path
) -> None:
    script = tmp_path / "elect.py"
    script.write_text(readme_example())
    alice = Demo(script, "alice", kafka)
    demos.append(alice)
    alice.wait_for("alice: alice leads")
    bob = Demo(script, "bob", kafka)
    demos.append(bob)
    bob.wait_for("bob: alice leads")

    alice_saw = alice.interrupt()
    assert alice_saw[0].startswith("alice: I lead now, fencing token ")
    assert alice_saw[1:] == [
        "alice: alice leads",
        "alice: I no longer lead (this member is leaving the group)",
    ]
    bob.wait_for("bob: bob leads")
    bob_saw = bob.interrupt()
    assert bob_saw[0] == "bob: alice leads"
    assert bob_saw[1].startswith("bob: I lead now, fencing token ")
    assert bob_saw[2:] == [
        "bob: bob leads",
        "bob: I no longer lead (this member is leaving the group)",
    ]
