"""A real Apache Kafka broker for the integration tests.

Where the broker comes from, in order:
1. ``KAFKA_BOOTSTRAP_SERVERS``, if set (an existing cluster);
2. testcontainers' Kafka image, if a Docker engine answers;
3. Kafka's jars from Maven Central, started as a KRaft broker on loopback: in a parallel run
   (pytest-xdist, as ``scripts/test.sh`` runs the suite) one per version shared by every
   worker process (tests/_shared_brokers.py), otherwise one per pytest process.

The engine tests run once per Kafka version in ``KAFKA_VERSIONS`` (default: the
newest 4.x and 3.9.x; comma-separated). A broker that cannot be started fails
the tests with its log; nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from coordination.testing import KafkaCluster
from coordination.testing._broker import TEST_BROKER_CONFIG

from ._versions import VERSIONS

# Every Spark driver a test starts (in this process, or in a worker process it starts, which
# inherits the environment) compiles with C1 alone and collects with the serial collector, as
# the test brokers do: a test's JVM lives for seconds or minutes, in which the full JIT's
# compilations cost more CPU than they save (tests/unit/pipeline/test_spark_job.py: 64-76
# CPU-s instead of 103-109). Benchmarks compare speeds; they do not run under pytest and keep
# the full JIT.
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS",
    "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell",
)


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker_broker_env() -> dict[str, str]:
    """The environment that gives the image's one broker what the harness's brokers have:
    the test settings (TEST_BROKER_CONFIG: sessions, heartbeats, share-group locks) and the
    internal topics of one replica, the share groups' state topic among them (3 replicas by
    default: with fewer brokers a share group's partitions are never initialized)."""
    config = {
        **TEST_BROKER_CONFIG,
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
    }
    # The image reads KAFKA_<NAME> for each broker setting, dots as underscores.
    return {"KAFKA_" + name.upper().replace(".", "_"): value for name, value in config.items()}


@pytest.fixture(scope="session", params=VERSIONS, ids=lambda v: f"kafka-{v}")
def kafka(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of a running broker of the parametrized Kafka version."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    version: str = request.param
    if _docker_available():
        try:
            from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found]
        except ImportError:
            pass
        else:
            container = KafkaContainer(f"apache/kafka:{version}").with_kraft()
            for name, value in docker_broker_env().items():
                container.with_env(name, value)
            with container:
                yield container.get_bootstrap_server()
            return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A parallel run (scripts/test.sh): one broker per version for every worker.
        from ._shared_brokers import shared_bootstrap

        yield shared_bootstrap(version)
        return
    with KafkaCluster(brokers=1, version=version) as cluster:
        yield cluster.bootstrap_servers


# The longest files, started first in a parallel run (a file's tests run in one process, so
# one of these started last would be the run's tail): the CPU-bound simulation, the fault
# campaign, and the Spark pipeline's runs. xdist hands each of the 4 processes two files at
# the start (the 1st and 5th go to the first process, ...): the simulation's partner is a
# short file, so nothing waits behind the simulation.
_LONGEST_FIRST = (
    "tests/simulation/test_simulation.py",
    "tests/campaign/test_campaign.py",
    "tests/integration/test_pipeline_kafka.py",
    "tests/integration/test_pipeline.py",
    "tests/test_layering.py",
    "tests/integration/test_pipeline_cluster.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
