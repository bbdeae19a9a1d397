"""The data pipeline this framework coordinates, on Apache Spark through PySpark.

A :class:`Pipeline` is the user's part: its topics, how records become rows
(a schema or a parse function), a transform ``DataFrame -> DataFrame`` and a
sink (:class:`ParquetSink`, or :class:`DeltaSink` for a Delta Lake table).
Pipeline workers share the topics' partitions through a consumer group
(:class:`PipelineWorker`); Spark reads each batch's offset range from Kafka
itself, and each batch's results become visible only after its offsets were
committed with the owner's generation, once, so results are exact although
delivery is at-least-once (see ``docs/pipeline.md``). A worker reports what it
does to ``on_event`` as :class:`WorkerEvent` values. :func:`windowed_sum` is
the demo's pipeline. Importing this package does not import PySpark; starting
a worker or a Spark job does.
"""

from ._compactor import DeltaCompactor as DeltaCompactor
from ._compactor import ParquetCompactor as ParquetCompactor
from ._definition import BATCH_COLUMN as BATCH_COLUMN
from ._definition import Pipeline as Pipeline
from ._events import BatchAbandoned as BatchAbandoned
from ._events import BatchFailed as BatchFailed
from ._events import BatchPublished as BatchPublished
from ._events import PartitionRecovered as PartitionRecovered
from ._events import PartitionsAssigned as PartitionsAssigned
from ._events import PartitionsReleased as PartitionsReleased
from ._events import RebalanceBegan as RebalanceBegan
from ._events import WorkerClosed as WorkerClosed
from ._events import WorkerEvent as WorkerEvent
from ._events import WorkerEventKind as WorkerEventKind
from ._events import WorkerStarted as WorkerStarted
from ._kafka_options import spark_kafka_options as spark_kafka_options
from ._output import OffsetRange as OffsetRange
from ._output import PipelineOutput as PipelineOutput
from ._output import PipelineOutputError as PipelineOutputError
from ._output import PublishedRangeError as PublishedRangeError
from ._output import StagedBatch as StagedBatch
from ._output import StagedFilesError as StagedFilesError
from ._sinks import DeltaSink as DeltaSink
from ._sinks import ParquetSink as ParquetSink
from ._sinks import Sink as Sink
from ._spark import Batch as Batch
from ._spark import kafka_rows as kafka_rows
from ._spark import read_results as read_results
from ._spark import spark_session as spark_session
from ._spark import stage_batch as stage_batch
from ._spark import stage_many as stage_many
from ._spark import stage_rows as stage_rows
from ._windowed_sum import WINDOWED_SUM_KEYS as WINDOWED_SUM_KEYS
from ._windowed_sum import WINDOWED_SUM_TOTALS as WINDOWED_SUM_TOTALS
from ._windowed_sum import aggregate_events as aggregate_events
from ._windowed_sum import parse_events as parse_events
from ._windowed_sum import windowed_sum as windowed_sum
from ._worker import PipelineWorker as PipelineWorker

__all__ = [
    "BATCH_COLUMN",
    "WINDOWED_SUM_KEYS",
    "WINDOWED_SUM_TOTALS",
    "Batch",
    "BatchAbandoned",
    "BatchFailed",
    "BatchPublished",
    "DeltaCompactor",
    "DeltaSink",
    "OffsetRange",
    "ParquetCompactor",
    "ParquetSink",
    "PartitionRecovered",
    "PartitionsAssigned",
    "PartitionsReleased",
    "Pipeline",
    "PipelineOutput",
    "PipelineOutputError",
    "PipelineWorker",
    "PublishedRangeError",
    "RebalanceBegan",
    "Sink",
    "StagedBatch",
    "StagedFilesError",
    "WorkerClosed",
    "WorkerEvent",
    "WorkerEventKind",
    "WorkerStarted",
    "aggregate_events",
    "kafka_rows",
    "parse_events",
    "read_results",
    "spark_kafka_options",
    "spark_session",
    "stage_batch",
    "stage_many",
    "stage_rows",
    "windowed_sum",
]
