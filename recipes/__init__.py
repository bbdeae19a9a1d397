"""Ready-made coordination recipes built on ``coordination.Coordinator``.

* :mod:`recipes.partitioning`: a Kafka consumer (Kafka's own ``consumer`` protocol, all four
  assignors, eager and cooperative) that shares groups with Java and librdkafka consumers.
* :mod:`recipes.election`: leader election with fencing tokens.
* :mod:`recipes.tasks`: Connect-style incremental cooperative task distribution.
* :mod:`recipes.pipeline`: the data pipeline on Apache Spark (PySpark) that these coordinate.
* :mod:`recipes.queues`: a share group's consumer (KIP-932, Kafka's queues), acknowledging
  each record.
"""

__all__: list[str] = []
