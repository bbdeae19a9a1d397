"""Deterministic simulation: thousands of seeded fault histories, each checked at every
simulated instant, each replayable from its seed.

The histories run in a child process with a fixed PYTHONHASHSEED, as the command a failure
prints does, so that a failing seed replays exactly.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest

from coordination._engine.consumer_group import ConsumerGroupMembership
from coordination._engine.membership import GroupMembership
from coordination.testing.simulation import History, HistorySettings
from devtools.simulation import run_seeds
from examples.shards_simulation import ShardsDriver

P = TypeVar("P", bound=Collection[subprocess.Popen[str]])

# CI's share: at least 2,000 histories of 100 faults per recipe.
CI_HISTORIES = int(os.environ.get("SIMULATION_HISTORIES", "2000"))
# The asyncio faces (AsyncLeaderElection, its loop reading is_leader every 20 ms;
# AsyncConsumer, getone/getmany with cancellations) are thin shells over the recipes above,
# run on asyncio's own loop; their histories cost several times as much (every turn of a
# loop is a step, through asyncio's machinery).
ASYNC_HISTORIES = int(os.environ.get("SIMULATION_ASYNC_HISTORIES", "150"))
# The consumer on Kafka's consumer group protocol (KIP-848), against the model of its
# coordinator.
KIP848_HISTORIES = int(os.environ.get("SIMULATION_KIP848_HISTORIES", "2000"))
# The pipeline (tests/simulation/test_pipeline.py): 2,000 histories, most of them on the
# classic protocol into plain Parquet output; on the consumer protocol and into a compacting
# sink the output protocol is the same code (their membership and compactor add the rest).
PIPELINE_HISTORIES = int(os.environ.get("SIMULATION_PIPELINE_HISTORIES", "1700"))
PIPELINE_848_HISTORIES = int(os.environ.get("SIMULATION_PIPELINE_848_HISTORIES", "150"))
PIPELINE_COMPACTED_HISTORIES = int(os.environ.get("SIMULATION_PIPELINE_COMPACTED_HISTORIES", "150"))


def start_cli(*args: str, stdout: int | IO[str] = subprocess.PIPE) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(
        # At a lower priority: simulated time does not care how fast it runs, and the tests
        # beside it in a parallel run (real heartbeats, sessions, timeouts) do.
        ["nice", "-n", "10", sys.executable, "-m", "devtools.simulation", *args],
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def run_cli(*args: str) -> tuple[int, str]:
    with stopped_at_exit([start_cli(*args)]) as (process,):
        out, _ = process.communicate(timeout=600)
    return process.returncode, out


@contextlib.contextmanager
def stopped_at_exit(processes: P) -> Iterator[P]:
    """``processes``, killed if still running when the block ends: a history that runs for
    ever must not outlive its test (pytest's timeout ends the test, not its children) and
    compete with the rest of the suite for the CPU."""
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


# How many histories one child process runs, and how many such children run at once. The
# recipes' histories are cut into chunks that two children take in turn (the longest first)
# rather than all at once: on two cores, ten children at once cost 12% more CPU for the
# same histories (each one's caches cleared by the others), and the suite's length is its
# CPU time. A child's start (imports) is about 0.3 s, under 1% of a chunk.
CHUNK_HISTORIES = 250
SIMULATION_PROCESSES = int(os.environ.get("SIMULATION_PROCESSES", "2"))
# A chunk still running after this long is taken for hung. The limit is per chunk, not on
# the whole test: the test runs at a low priority on whatever CPU the suite leaves, so its
# length follows the machine's load (a loaded run took 2,300 s where a quiet one took
# 1,450 s), while its slowest chunk (150 asyncio histories) has taken at most 900 s.
CHUNK_LIMIT_S = 1800


def chunks(recipe: str, histories: int) -> list[tuple[str, int, int]]:
    """``histories`` of ``recipe`` as (recipe, first seed, count) of CHUNK_HISTORIES each."""
    return [
        (recipe, first, min(CHUNK_HISTORIES, histories - first))
        for first in range(0, histories, CHUNK_HISTORIES)
    ]


@pytest.mark.timeout(4800)  # a hang is found per chunk (CHUNK_LIMIT_S); this is the backstop
def test_every_recipe_keeps_its_guarantees_through_thousands_of_fault_histories(
    tmp_path: Path,
) -> None:
    counts = {
        "engine": CI_HISTORIES,
        "election": CI_HISTORIES,
        "tasks": CI_HISTORIES,
        "consumer": CI_HISTORIES,
        "election-async": ASYNC_HISTORIES,
        "consumer-async": ASYNC_HISTORIES,
        "consumer-848": KIP848_HISTORIES,
        "pipeline": PIPELINE_HISTORIES,
        "pipeline-848": PIPELINE_848_HISTORIES,
        "pipeline-compacted": PIPELINE_COMPACTED_HISTORIES,
    }
    # The dearest per history first (CPU-s a history in a CI run, 2026-12-07: the compacting
    # pipeline 0.55, the pipeline on KIP-848 0.44, the asyncio faces about 0.4, the pipeline
    # 0.31, KIP-848's consumer 0.15, the classic consumer 0.12, the task distribution 0.07),
    # so that the last chunks are short ones.
    order = ["pipeline-compacted", "pipeline-848", "consumer-async", "election-async"]
    order += ["pipeline", "consumer-848", "consumer", "tasks", "election", "engine"]
    waiting = [chunk for recipe in order for chunk in chunks(recipe, counts[recipe])]
    waiting.reverse()  # popped from the end
    running: dict[subprocess.Popen[str], tuple[str, int, int, Path]] = {}
    started: dict[subprocess.Popen[str], float] = {}
    histories: dict[str, int] = {}
    problems = []
    with stopped_at_exit(running):
        while waiting or running:
            while waiting and len(running) < SIMULATION_PROCESSES:
                recipe, first, count = waiting.pop()
                args = ("--recipe", recipe, "--seeds", str(count), "--first-seed", str(first))
                # Into a file, not a pipe: a failing chunk's traces outgrow a pipe's buffer.
                path = tmp_path / f"{recipe}-{first}.out"
                with path.open("w", encoding="utf-8") as out:
                    process = start_cli(*args, "--faults", "100", stdout=out)
                running[process] = (recipe, first, count, path)
                started[process] = time.monotonic()
            hung = [running[p] for p in running if time.monotonic() - started[p] > CHUNK_LIMIT_S]
            assert not hung, f"histories still running after {CHUNK_LIMIT_S} s: {hung}"
            done = [process for process in running if process.poll() is not None]
            if not done:
                time.sleep(0.2)
            for process in done:
                recipe, first, count, path = running.pop(process)
                text = path.read_text(encoding="utf-8")
                name = f"{recipe} seeds {first}..{first + count - 1}"
                last = text.strip().splitlines()[-1] if text.strip() else ""
                print(f"--- {name}: {last}")
                fields = dict(pair.split("=", 1) for pair in last.split() if "=" in pair)
                if process.returncode != 0 or fields.get("violations") != "0":
                    problems.append(f"{name}: exit {process.returncode}\n{text[-20_000:]}")
                    continue
                assert float(fields["faults_per_history"]) >= 100, last
                histories[recipe] = histories.get(recipe, 0) + int(fields["histories"])
    assert not problems, "\n".join(problems)
    assert histories == counts


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


@pytest.mark.parametrize(
    ("recipe", "too_long_s", "found"),
    [
        ("engine", 3.0, "held by"),
        ("election", 3.0, "two leaders"),
    ],
)
def test_the_checker_finds_a_member_that_trusts_its_lease_too_long(
    recipe: str, too_long_s: float, found: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lease some seconds too long (of a 6 s session): two members soon act at once.
    def too_long(self: GroupMembership) -> float:
        cfg = self._config
        confirmed = self._confirmed
        if self.state.value in ("unjoined", "closed") or confirmed is None:
            return 0.0
        if confirmed[0] != self.generation:
            return 0.0
        guaranteed = min(cfg.session_timeout_ms, cfg.rebalance_timeout_ms) / 1000
        return max(0.0, confirmed[1] + guaranteed + too_long_s - self.clock.monotonic())

    monkeypatch.setattr(GroupMembership, "membership_lease", too_long)
    summary = run_seeds(recipe, range(60), stop_at_first=True)
    assert summary.failures, f"{recipe}: a lease {too_long_s} s too long went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and found in failure.violation, failure.violation
    assert failure.trace  # the story of what happened, for the replay


def test_the_checker_finds_a_kip848_member_whose_lease_ignores_the_brokers_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every other member of the consumer-848 histories assumes a session 3 times the
    # broker's; one that never reads the broker's trusts its lease 12 s too long.
    def ignore(self: ConsumerGroupMembership, lookup: object) -> bool:
        self._session_lookup = None
        return True

    monkeypatch.setattr(ConsumerGroupMembership, "_adopt_broker_session", ignore)
    summary = run_seeds("consumer-848", range(200), stop_at_first=True)
    assert summary.failures, "a lease longer than the broker's session went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and "at once, each with a lease" in violation, violation


def test_one_seed_runs_alone_with_its_trace() -> None:
    code, out = run_cli("--recipe", "engine", "--seed", "3", "--faults", "20")
    assert code == 0, out[-5_000:]
    assert "seed=3 faults=20 ok=True" in out


def test_the_checker_finds_a_worker_that_keeps_its_tasks_without_a_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The task distribution stops its tasks margin + stop_timeout_ms before the lease ends
    # and hands a task over only once its owner released it or left: a lease a few seconds
    # too long stays hidden there. A worker that never lets its lease stop anything does not.
    from coordination.lease import LeaseGuard

    monkeypatch.setattr(LeaseGuard, "holds", lambda self: True)
    monkeypatch.setattr(LeaseGuard, "remaining", lambda self: 60.0)
    summary = run_seeds("tasks", range(60), stop_at_first=True)
    assert summary.failures, "a worker that ignores its lease went unnoticed in 60 histories"
    failure = summary.failures[0]
    assert failure.violation is not None and (
        "runs on" in failure.violation or "still run it" in failure.violation
    ), failure.violation


def test_the_checker_finds_a_consumer_that_commits_past_a_record_it_never_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A consumer whose poll() moves its position past the last record of each batch without
    # returning it: its commits pass a record no one was given.
    from recipes.partitioning import Consumer

    real_poll = Consumer.poll

    def lossy_poll(self: Consumer, timeout_ms: int = 1000) -> dict[Any, list[Any]]:
        return {tp: records[:-1] for tp, records in real_poll(self, timeout_ms).items()}

    monkeypatch.setattr(Consumer, "poll", lossy_poll)
    summary = run_seeds("consumer", range(10), stop_at_first=True)
    assert summary.failures, "commits past records never returned went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and "never returned record" in failure.violation


def test_the_checker_finds_a_cooperative_leader_that_does_not_withhold_owned_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # COOPERATIVE rebalancing is safe only because the leader's cooperative-sticky withholds
    # a partition its owner has not revoked yet; an assignor that moves it at once gives it
    # to two members for the time of a rebalance.
    from recipes.partitioning.assignors import _sticky_core

    real = _sticky_core.sticky_assign

    def eager(*args: Any, cooperative: bool, **kwargs: Any) -> Any:
        return real(*args, cooperative=False, **kwargs)

    monkeypatch.setattr(_sticky_core, "sticky_assign", eager)
    summary = run_seeds("consumer", range(60), stop_at_first=True)
    assert summary.failures, "a leader that moves owned partitions at once went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and "at once" in failure.violation, failure.violation


def test_the_checker_finds_a_member_that_keeps_rejoining(monkeypatch: pytest.MonkeyPatch) -> None:
    # A member that asks for a rejoin after every join floods the coordinator: a liveness
    # bug no ownership invariant sees (the tasks worker's rejoin storm was such a loop).
    from examples import shards_simulation as _shards

    real = _shards._ShardMember.on_join_complete

    def rejoin_again(self: Any, *args: Any) -> None:
        real(self, *args)
        self.request_rejoin("once more")

    monkeypatch.setattr(_shards._ShardMember, "on_join_complete", rejoin_again)
    summary = run_seeds("engine", range(5), stop_at_first=True)
    assert summary.failures, "a member rejoining after every join went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and "rejoin storm" in failure.violation
