"""The Kafka versions the integration tests run against (``KAFKA_VERSIONS``: comma-separated;
default the newest 4.x and 3.9.x)."""

from __future__ import annotations

import os

import pytest

from coordination.testing import KAFKA_3, NEWEST_KAFKA

VERSIONS = [
    v for v in os.environ.get("KAFKA_VERSIONS", f"{NEWEST_KAFKA},{KAFKA_3}").split(",") if v
]

ON_ONE_KAFKA_VERSION = pytest.mark.parametrize(
    "kafka", VERSIONS[:1], indirect=True, ids=lambda v: f"kafka-{v}"
)
"""For a module's ``pytestmark``: its tests run against the first version only. For the tests
of what does not depend on the broker's version (the Spark side of the pipeline, packaging)
and takes minutes: what the broker does differently between versions is the engine's and the
recipes' to meet, and their tests run against every version."""
