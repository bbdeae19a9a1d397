"""The Spark pipeline on the real broker, as a fresh machine runs it: three workers start at
once from empty package caches, two are killed, the results are still exact, and the
output was compacted meanwhile by the workers' elected compactor (which a kill may hit).

Spark resolves ``spark-sql-kafka`` and ``delta-spark`` through Ivy when its JVM starts.
Three JVMs doing that at once into one empty Ivy cache read each other's half-written files
and failed; the workers now resolve one at a time until the cache is warm (see
``docs/pipeline.md``). Here the JVMs' home (``user.home``: Spark's default Ivy directory,
and the Maven repository Ivy also looks in) is an empty directory, so every run downloads
the packages (98 MB) from Maven Central before the workers start: the first start of a
fresh machine and the killed workers are one run, which pays for three JVMs once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.pipeline._demo import run_demo
from recipes.pipeline._output import PipelineOutput
from tests._versions import ON_ONE_KAFKA_VERSION

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.timeout(900),
    ON_ONE_KAFKA_VERSION,  # Spark's start does not depend on the broker's version
]


def test_three_workers_start_from_empty_caches_and_stay_exact_when_two_are_killed(
    kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every JVM started from here on (the workers', the check's) has an empty home.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Duser.home={home}")
    # Three workers, two SIGKILLed while events are fed (a third and two thirds of
    # the way): the survivor ends up owning every partition.
    report = run_demo(
        kafka,
        workers=3,
        partitions=8,
        events=30_000,
        rate=2000,
        kills=2,
        window_ms=10_000,
        output_dir=tmp_path,
        session_timeout_ms=3000,
        compaction_interval_ms=2000,
        say=lambda line: None,
    )
    assert report.problems == []
    assert report.mismatches == []
    assert report.results == report.tally.results
    assert report.tally.produced == 30_000
    assert sum(c for c, _ in report.results.values()) == 30_000 - report.tally.malformed
    assert report.ok

    # Every offset of every partition was published exactly once.
    output = PipelineOutput(tmp_path / "output")
    spans = output.check_published()
    assert sum(end - start for start, end in spans.values()) == 30_000
    assert len(spans) == 8
    # Most batches were read from compacted segments (the results above included).
    view = output.segments.view()
    held = sum(len(s.batches) for s in view.segments)
    assert view.segments and len(view.segments) <= 8, view.segments
    assert held > len(output.published_paths()), (held, len(output.published_paths()))

    # Each kill's partitions went to the survivors, which processed them again (the
    # second kill may fall into the rebalance that follows the first, so only the
    # first is sure to be noticed by a rebalance of its own).
    assert len(report.kills) == 2
    assert report.kills[0].detected_after_s is not None
    for kill in report.kills:
        assert kill.partitions, f"{kill.worker} owned nothing when killed"
        assert None not in kill.resumed_after_s.values(), kill
        owners_after = {
            w
            for p in kill.partitions
            for w, since, _ in report.timeline.ownership()[p]
            if since > kill.at - report.timeline.t0
        }
        assert owners_after and kill.worker not in owners_after
    # Nothing is left in staging: every attempt was published, abandoned or cleaned up.
    assert PipelineOutput(tmp_path / "output").staged() == []
    # The packages came from Maven Central into the empty home's Ivy cache.
    assert any((home / ".ivy2.5.2" / "jars").glob("*spark-sql-kafka*.jar"))
