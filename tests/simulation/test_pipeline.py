"""The pipeline in the deterministic simulator (``--recipe pipeline``, ``pipeline-848`` on
Kafka's consumer group protocol, and ``pipeline-compacted`` into a compacting Parquet sink):
PipelineWorker as shipped, Spark replaced by a stand-in stage (and copy); a history replays
from its seed, and the checker finds each broken guarantee. CI's 2,000 seeded fault
histories of these three, every offset's result published exactly once through each, run
with the other recipes' in tests/simulation/test_simulation.py (SIMULATION_PIPELINE_HISTORIES,
SIMULATION_PIPELINE_848_HISTORIES and SIMULATION_PIPELINE_COMPACTED_HISTORIES set how many).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devtools.simulation import run_seeds


@pytest.mark.parametrize("compacted", [False, True], ids=["plain", "compacted"])
def test_a_pipeline_history_replays_exactly_from_its_seed(compacted: bool) -> None:
    # The stand-in's staging names, failures and durations come from the seed, as do the
    # threads' order and times, the segments' names and commit times, and the compactor's
    # identity: nothing of the run (uuid4, the wall clock) leaks in.
    from coordination.testing.simulation import History, HistorySettings
    from devtools.simulation.pipeline import CompactedPipelineDriver, PipelineDriver

    driver = CompactedPipelineDriver if compacted else PipelineDriver
    first = History(driver, 7, HistorySettings(faults=30), log_to_trace=True).run()
    again = History(driver, 7, HistorySettings(faults=30), log_to_trace=True).run()
    assert first.ok and len(first.trace) > 100
    assert first.trace == again.trace
    assert (first.steps, first.simulated_s) == (again.steps, again.simulated_s)


def _trusts_a_failed_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Publishes a batch whose commit failed without asking the broker whether it landed.
    from recipes.pipeline._worker import PipelineWorker

    monkeypatch.setattr(PipelineWorker, "_landed", lambda self, sent: set(sent))


def _skips_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    # A new owner starts at the committed offset without publishing the batch the commit
    # names (its predecessor committed it and died before publishing).
    from recipes.pipeline import PipelineOutput

    monkeypatch.setattr(PipelineOutput, "recover", lambda self, *args: None)


def _cleans_up_unfenced(monkeypatch: pytest.MonkeyPatch) -> None:
    # Orphan cleanup fenced neither by the committed offset (it deletes attempts ending past
    # it, which may still be in flight) nor by the lease (a worker resuming from a pause
    # deletes as if it still owned the partition). Either fence alone keeps the output
    # exact (docs/pipeline.md, Guarantees); without both a zombie deletes a batch its
    # successor is about to commit.
    from coordination.lease import LeaseGuard
    from recipes.pipeline import PipelineOutput

    real = PipelineOutput.cleanup_orphans

    def unfenced(
        self: PipelineOutput,
        topic: str,
        partition: int,
        committed_offset: int | None,
        commit_metadata: str | None = None,
        *,
        still_owner: Callable[[], bool],
    ) -> list[str]:
        beyond = None if committed_offset is None else committed_offset + 1_000_000
        return real(self, topic, partition, beyond, commit_metadata, still_owner=still_owner)

    monkeypatch.setattr(PipelineOutput, "cleanup_orphans", unfenced)
    monkeypatch.setattr(LeaseGuard, "holds", lambda self: True)


def _drops_merged_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # A segment that merges smaller ones names only its new batches: those of the segments
    # it replaces are no longer held by any live segment, and their directories are gone.
    from recipes.pipeline._segments import Segments

    real = Segments.commit

    def forgetful(self: Segments, written: Any, *, batches: Any, replaces: Any, **kw: Any) -> Any:
        merged = {b for s in replaces for b in s.batches}
        kept = {name: m for name, m in batches.items() if name not in merged}
        return real(self, written, batches=kept, replaces=replaces, **kw)

    monkeypatch.setattr(Segments, "commit", forgetful)


def _commits_an_unchecked_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy that wrote some rows twice (a Spark task's output written twice), committed
    # without the compactor's count of the rows written.
    import devtools.simulation.pipeline as simulated
    from recipes.pipeline import ParquetCompactor

    real: Callable[..., int] = simulated._copy_rows

    def twice(*args: Any) -> int:
        *bound, files, target = args
        return real(*bound, [*files, files[0]], target)

    monkeypatch.setattr(simulated, "_copy_rows", twice)
    monkeypatch.setattr(
        ParquetCompactor, "_copy", lambda self, files, target, rows: self._copy_with(files, target)
    )


@pytest.mark.parametrize(
    ("recipe", "broken", "found"),
    [
        ("pipeline", _trusts_a_failed_commit, ("past its committed offset", "published twice")),
        ("pipeline", _skips_recovery, ("skipped", "lost")),
        ("pipeline", _cleans_up_unfenced, ("lost",)),
        # On the consumer protocol, the fences that keep a worker the broker moved on from
        # deleting its successor's batches: the member's lease, which must end before
        # the broker can give its partitions away, and the committed offset.
        ("pipeline-848", _cleans_up_unfenced, ("lost",)),
        ("pipeline-compacted", _drops_merged_batches, ("no longer visible",)),
        ("pipeline-compacted", _commits_an_unchecked_copy, ("does not hold the sums",)),
    ],
    ids=[
        "publish-unlanded-commit",
        "no-recover",
        "unfenced-cleanup",
        "848-unfenced-cleanup",
        "segment-drops-merged-batches",
        "segment-copy-unchecked",
    ],
)
def test_the_checker_finds_a_broken_guarantee(
    recipe: str,
    broken: Callable[[pytest.MonkeyPatch], Any],
    found: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken(monkeypatch)
    summary = run_seeds(recipe, range(60), stop_at_first=True)
    assert summary.failures, "the broken guarantee went unnoticed in 60 histories"
    violation = summary.failures[0].violation
    assert violation is not None and any(f in violation for f in found), violation
    assert summary.failures[0].trace  # the story of what happened, for the replay
