"""A fresh machine's first start: three workers resolve Spark's packages at once from empty caches.

Spark resolves ``spark-sql-kafka`` and ``delta-spark`` through Ivy when its JVM
starts. Three JVMs doing that at once into one empty Ivy cache read each other's
half-written files and failed; the workers now resolve one at a time until the
cache is warm (see ``docs/pipeline.md``). Every run here downloads the packages
(98 MB) from Maven Central into a temporary Ivy directory and Maven repository
and warms up three Spark JVMs on the machine's cores: minutes, so it runs once
per test run, on a broker of its own (newest Kafka), not once per Kafka version.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from recipes.pipeline import WorkerStarted
from recipes.pipeline._cluster import WorkerProcess
from tests._versions import ON_ONE_KAFKA_VERSION

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.timeout(900),
    ON_ONE_KAFKA_VERSION,  # what is tested is Spark's start, not the broker
]


def test_three_workers_start_at_once_from_empty_package_caches(
    kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_three(kafka, tmp_path, monkeypatch)


def start_three(kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The JVM's home (user.home, where Ivy also looks for a Maven repository, ~/.m2)
    # and the Ivy directory are empty: nothing is resolved yet.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Duser.home={home}")
    ivy = tmp_path / "ivy"
    run = uuid.uuid4().hex[:8]
    topic = f"first-start-{run}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        admin.close()
    workers = [
        WorkerProcess(
            f"w{n}",
            bootstrap_servers=kafka,
            group_id=f"first-start-{run}",
            topic=topic,
            output=tmp_path / "out",
            log_dir=tmp_path / "logs",
            window_ms=1000,
            spark_conf={"spark.jars.ivy": str(ivy)},
        )
        for n in (1, 2, 3)
    ]
    try:
        for w in workers:
            w.wait_for(WorkerStarted, timeout=600)
    finally:
        for w in workers:
            w.close()
    assert any((ivy / "jars").glob("*spark-sql-kafka*.jar"))
