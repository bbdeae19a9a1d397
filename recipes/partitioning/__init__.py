"""Consumer partitioning over Kafka's own ``consumer`` protocol (in progress)."""
