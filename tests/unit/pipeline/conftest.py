"""Fixtures for the pipeline tests: one local SparkSession per module, a fresh output per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recipes.pipeline._output import PipelineOutput

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession shared by the tests of one module (JVM start-up takes seconds).

    PySpark is part of the test extra; without it these tests fail (on the import), they
    are never skipped.
    """
    from recipes.pipeline._spark import spark_session

    session = spark_session("local[2]", app_name="pipeline-tests")
    yield session
    session.stop()


@pytest.fixture
def output(tmp_path: Path) -> PipelineOutput:
    return PipelineOutput(tmp_path / "out")
