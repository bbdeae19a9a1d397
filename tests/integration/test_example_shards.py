"""examples/shards.py, the README's own Coordinator: its demo on a real broker (members join
one by one, one leaves, every shard keeps exactly one owner), two of its processes sharing
the shards as the README says to run them, and the README showing the class as it is."""

from __future__ import annotations

import inspect
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from examples import shards
from examples.shards import SHARDS, ShardOwner

from .members import ROOT

pytestmark = pytest.mark.integration


def test_the_readme_shows_the_example_class_as_it_is() -> None:
    assert inspect.getsource(ShardOwner) in (ROOT / "README.md").read_text()


def test_the_demo_ends_with_every_shard_owned_once(
    kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shards.demo(kafka)
    out = capsys.readouterr().out
    assert "alice joins" in out and "bob leaves" in out
    assert "every shard has exactly one owner" in out
    assert out.rstrip().endswith("done.")  # after every member closed: nothing follows


def test_two_processes_share_the_shards_and_one_takes_all_when_the_other_stops(
    kafka: str,
) -> None:
    # The README's way: `python examples/shards.py NAME BOOTSTRAP` in terminals. Here one
    # member runs in a process, the other in this test, in a group of their own.
    group = f"shards-{uuid.uuid4().hex[:8]}"
    code = (
        "import sys; from examples.shards import ShardOwner; import threading\n"
        f"with ShardOwner({group!r}, 'alice', bootstrap_servers={kafka!r},"
        " session_timeout_ms=6000, heartbeat_interval_ms=500) as m:\n"
        "    m.ensure_active_group(timeout=30); sys.stdin.read()\n"
    )
    alice = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        with ShardOwner(
            group,
            "bob",
            bootstrap_servers=kafka,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        ) as bob:
            _until(lambda: len(bob.owned) == len(SHARDS) // 2, "bob to own half the shards")
            assert alice.stdin is not None
            alice.stdin.close()  # alice leaves the group
            assert alice.wait(30) == 0
            _until(lambda: bob.owned == frozenset(SHARDS), "bob to own every shard")
    finally:
        if alice.poll() is None:
            alice.kill()
            alice.wait()
        assert alice.stdout is not None
        alice.stdout.close()


def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.05)
