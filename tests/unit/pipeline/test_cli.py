"""The worker command line: its batching and group protocol flags reach the worker, bad
settings are named."""

from __future__ import annotations

from typing import Any

import pytest

from coordination.errors import ConfigurationError
from recipes.pipeline import _worker
from recipes.pipeline.__main__ import main

WORKER = ["worker", "--bootstrap-servers=127.0.0.1:1", "--group=g", "--topic=t"]


def test_the_batching_flags_reach_the_worker(monkeypatch, tmp_path) -> None:
    seen: dict[str, Any] = {}

    def recording(group_id: str, pipeline: Any, **settings: Any) -> Any:
        seen.update(settings)
        raise ConfigurationError("recorded")  # stops the command before it starts anything

    monkeypatch.setattr(_worker, "PipelineWorker", recording)
    argv = [*WORKER, f"--output={tmp_path}", "--parallel-batches=3"]
    assert main([*argv, "--max-partitions-per-batch=1"]) == 2
    assert seen["parallel_batches"] == 3 and seen["max_partitions_per_batch"] == 1
    seen.clear()
    assert main([*WORKER, f"--output={tmp_path}"]) == 2
    assert seen["parallel_batches"] == 2 and seen["max_partitions_per_batch"] == 64
    assert seen["group_protocol"] == "classic"
    seen.clear()
    assert main([*WORKER, f"--output={tmp_path}", "--group-protocol=consumer"]) == 2
    assert seen["group_protocol"] == "consumer"


@pytest.mark.parametrize("flag", ["--parallel-batches=0", "--max-partitions-per-batch=0"])
def test_a_bad_setting_is_named_without_a_traceback(flag, tmp_path, capsys) -> None:
    assert main([*WORKER, f"--output={tmp_path}", flag]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "parallel_batches" in err and "max_partitions_per_batch" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "sink_type", "interval"),
    [
        (["--sink=parquet"], "ParquetSink", None),
        (["--sink=parquet", "--compaction-interval-ms=30000"], "ParquetSink", 30_000),
        (["--sink=delta"], "DeltaSink", 2000),
        (["--sink=delta", "--compaction-interval-ms=0"], "DeltaSink", None),
    ],
)
def test_the_compaction_flag_sets_each_sinks_compactor(
    flags, sink_type, interval, monkeypatch, tmp_path
) -> None:
    seen: dict[str, Any] = {}

    def recording(group_id: str, pipeline: Any, **settings: Any) -> Any:
        seen["sink"] = pipeline.sink
        raise ConfigurationError("recorded")

    monkeypatch.setattr(_worker, "PipelineWorker", recording)
    assert main([*WORKER, f"--output={tmp_path}", *flags]) == 2
    assert type(seen["sink"]).__name__ == sink_type
    assert seen["sink"].compaction_interval_ms == interval
