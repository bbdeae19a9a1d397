"""A user's pipeline, as a worker process loads it with ``--pipeline MODULE:FUNCTION``.

Page views from two topics, counted per page into a Delta table (merged totals).
The output root comes from ``PIPELINE_JOBS_ROOT``, set by the test that starts the workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from recipes.pipeline import DeltaSink, Pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TOPICS_VARIABLE = "PIPELINE_JOBS_TOPICS"
ROOT_VARIABLE = "PIPELINE_JOBS_ROOT"


def views_per_page() -> Pipeline:
    root = Path(os.environ[ROOT_VARIABLE])

    def count(views: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        return (
            views.where(F.col("page").isNotNull())
            .groupBy("page")
            .agg(F.count(F.lit(1)).alias("views"), F.sum("ms").alias("total_ms"))
        )

    return Pipeline(
        topics=os.environ[TOPICS_VARIABLE].split(","),
        schema="user STRING, page STRING, ms BIGINT",
        transform=count,
        sink=views_sink(root),
        name="views-per-page",
    )


def views_sink(root: Path) -> DeltaSink:
    """The pipeline's sink: per-page totals in ``<root>/table``, staged in ``root``."""
    return DeltaSink(
        str(root / "table"), staging=root, key_columns=["page"], add_columns=["views", "total_ms"]
    )
