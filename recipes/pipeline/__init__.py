"""The data pipeline this framework coordinates, on Apache Spark through PySpark (in progress)."""
