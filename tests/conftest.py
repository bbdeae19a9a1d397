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

from ._versions import VERSIONS


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


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
            container.with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            container.with_env("KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "500")
            # KIP-848 groups: the test brokers' session and heartbeat (TEST_BROKER_CONFIG).
            container.with_env("KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS", "1000")
            container.with_env("KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS", "6000")
            container.with_env("KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS", "100")
            container.with_env("KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", "500")
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
    "tests/integration/test_pipeline_first_start.py",
    "tests/test_layering.py",
    "tests/integration/test_pipeline_cluster.py",
    "tests/integration/test_pipeline.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
