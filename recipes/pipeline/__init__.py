"""The data pipeline this framework coordinates, on Apache Spark through PySpark.

Pipeline workers share the partitions of an input topic through a consumer
group (:class:`PipelineWorker`), aggregate each partition's events per key and
tumbling window in Spark micro-batches, and publish each batch's results only
after committing its offsets with their generation, so results are exact
although delivery is at-least-once (see ``docs/pipeline.md``). Importing this
package does not import PySpark; starting a worker or a Spark job does.
"""

from ._output import OffsetRange as OffsetRange
from ._output import PipelineOutput as PipelineOutput
from ._output import PipelineOutputError as PipelineOutputError
from ._output import PublishedRangeError as PublishedRangeError
from ._output import StagedBatch as StagedBatch
from ._output import StagedFilesError as StagedFilesError
from ._spark import Batch as Batch
from ._spark import read_results as read_results
from ._spark import spark_session as spark_session
from ._spark import stage_batch as stage_batch
from ._worker import PipelineWorker as PipelineWorker
from ._worker import WorkerEvent as WorkerEvent

__all__ = [
    "Batch",
    "OffsetRange",
    "PipelineOutput",
    "PipelineOutputError",
    "PipelineWorker",
    "PublishedRangeError",
    "StagedBatch",
    "StagedFilesError",
    "WorkerEvent",
    "read_results",
    "spark_session",
    "stage_batch",
]
