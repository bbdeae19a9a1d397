"""Per-batch latency and throughput of ``stage_batch`` + ``publish`` on a local SparkSession.

Run: ``python -m tests.unit.pipeline.bench_spark_job [master] [runs]``. Not collected by pytest.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time

from recipes.pipeline._output import PipelineOutput
from recipes.pipeline._spark import Batch, spark_session, stage_batch


def records(n: int, start: int) -> list[tuple[int, bytes | None]]:
    return [
        (
            start + i,
            json.dumps(
                {
                    "key": f"k{i % 100}",
                    "ts_ms": 1_700_000_000_000 + i * 7,
                    "value": i % 1000 / 8,
                    "event_id": f"e{start + i}",
                }
            ).encode(),
        )
        for i in range(n)
    ]


def main() -> None:
    master = sys.argv[1] if len(sys.argv) > 1 else "local[2]"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    t0 = time.perf_counter()
    spark = spark_session(master, app_name="pipeline-bench")
    print(f"session start-up: {time.perf_counter() - t0:.2f} s")
    with tempfile.TemporaryDirectory() as root:
        output = PipelineOutput(root)
        offset = 0
        for n in (1_000, 10_000, 100_000):
            data = records(n, 0)
            latencies = []
            for run in range(runs + 2):  # two warm-up runs
                batch_records = [(offset + o, v) for o, v in data]
                t = time.perf_counter()
                batch = Batch(
                    topic="bench",
                    partition=0,
                    start_offset=offset,
                    end_offset=offset + n,
                    records=batch_records,
                )
                output.publish(stage_batch(spark, output, batch))
                if run >= 2:
                    latencies.append(time.perf_counter() - t)
                offset += n
            p50 = statistics.median(latencies)
            print(
                f"{n:>7} records: p50 {p50 * 1000:7.0f} ms  min {min(latencies) * 1000:7.0f} ms"
                f"  max {max(latencies) * 1000:7.0f} ms  {n / p50:>9,.0f} records/s"
            )
    spark.stop()


if __name__ == "__main__":
    main()
