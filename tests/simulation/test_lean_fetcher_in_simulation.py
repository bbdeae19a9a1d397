"""The lean fetcher's engine runs in the consumer recipes' histories (devtools/simulation/
lean.py): host 1's consumer reads through it in a quarter of its incarnations, against a simulated
leader that moves (its positions then checked with the new leader, KIP-320), stalls and
drops answers. The histories of CI (test_simulation.py)
check it with the rest; this checks that it is really there to be checked."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from coordination._fetch.engine import FetchEngine
from devtools.simulation import lean, run_seeds


def test_the_lean_fetcher_reads_records_and_meets_faults_in_consumer_histories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counts: collections.Counter[str] = collections.Counter()
    poll, abandon, finish = FetchEngine.poll, lean.SimLink.abandon, lean.SimLink.finish

    def counted_poll(self: FetchEngine[Any], timeout_ms: int) -> Any:
        out = poll(self, timeout_ms)
        counts["records"] += sum(len(records) for records in out.values())
        return out

    def counted_abandon(self: lean.SimLink) -> None:
        counts["abandoned"] += self.in_flight
        abandon(self)

    def counted_finish(self: lean.SimLink, timeout_s: float) -> Any:
        answer = finish(self, timeout_s)
        moved = [p for t in answer.responses for p in t.partitions if p.error_code == 6]
        counts["not leader"] += len(moved)  # NOT_LEADER_OR_FOLLOWER: a broker restarted
        return answer

    epoch_ends = lean.SimMetadata.epoch_ends

    def counted_epoch_ends(self: lean.SimMetadata, node: int, wanted: Any, t: float) -> Any:
        answer = epoch_ends(self, node, wanted, t)
        counts["checked"] += sum(code == 0 for code, _, _ in answer.values())  # KIP-320
        return answer

    monkeypatch.setattr(FetchEngine, "poll", counted_poll)
    monkeypatch.setattr(lean.SimMetadata, "epoch_ends", counted_epoch_ends)
    monkeypatch.setattr(lean.SimLink, "abandon", counted_abandon)
    monkeypatch.setattr(lean.SimLink, "finish", counted_finish)
    for recipe in ("consumer", "consumer-848"):
        summary = run_seeds(recipe, range(12))
        assert not summary.failures, summary.failures[0].violation
    assert counts["records"] > 10_000, counts
    assert counts["abandoned"] > 0 and counts["not leader"] > 0, counts
    assert counts["checked"] > 0, counts  # a moved partition's position checked
