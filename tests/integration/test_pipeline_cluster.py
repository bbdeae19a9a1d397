"""The pipeline on a real Spark standalone cluster: a driver and an executor killed, exact results.

A Spark master and worker run on loopback from the PySpark installation; the pipeline
workers are Spark drivers with ``spark.master=spark://...``, their executors separate
JVMs on the Spark worker, reading the batches from Kafka themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from recipes.pipeline import BatchFailed
from recipes.pipeline._demo import run_demo
from recipes.pipeline._output import PipelineOutput
from recipes.pipeline._spark_cluster import SparkStandalone
from tests._versions import ON_ONE_KAFKA_VERSION

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.timeout(900),
    ON_ONE_KAFKA_VERSION,
]

EVENTS = 12_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SparkStandalone]:
    # Two executors of one core and 512 MB (one per pipeline worker) fit on the worker.
    with SparkStandalone(
        tmp_path / "spark", workers=1, cores_per_worker=2, worker_memory="1200m"
    ) as running:
        yield running


def test_results_are_exact_after_a_driver_and_an_executor_are_killed(
    kafka: str, tmp_path: Path, cluster: SparkStandalone
) -> None:
    killed: list[int] = []
    once = threading.Lock()

    def kill_an_executor(fed: int) -> None:
        # A third of the way: an executor dies under a running pipeline worker. Its
        # driver's job is retried on the executor the Spark worker starts instead.
        if fed >= EVENTS // 3 and not killed and once.acquire(blocking=False):
            killed.append(cluster.kill_executor())

    report = run_demo(
        kafka,
        workers=2,
        partitions=6,
        events=EVENTS,
        rate=600,
        kills=1,  # a pipeline worker (a Spark driver), half-way
        window_ms=10_000,
        output_dir=tmp_path,
        master=cluster.master_url,
        spark_conf={
            "spark.cores.max": "1",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
        },
        session_timeout_ms=6000,
        on_progress=kill_an_executor,
        say=lambda line: None,
    )
    assert killed, "no executor was running to kill"
    assert killed[0] not in cluster.executor_pids()
    assert report.problems == []
    assert report.mismatches == []
    assert report.results == report.tally.results
    assert report.ok
    spans = PipelineOutput(tmp_path / "output").check_published()
    assert sum(end - start for start, end in spans.values()) == EVENTS
    # Batches failed by the executor's death, if any, were processed again: nothing lost.
    failed = report.timeline.of(BatchFailed)
    assert all(e.partition >= 0 for e in failed)
    assert len(report.kills) == 1 and report.kills[0].partitions
