"""TaskDistribution without a broker: argument checks, task sources, the public surface."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import recipes.tasks
from coordination.errors import ConfigurationError
from recipes.tasks import StaticTasks, TaskDistribution, TaskSpec

BASE = {"bootstrap_servers": "localhost:9092", "session_timeout_ms": 10_000}


def make(**kw: Any) -> TaskDistribution:
    args: dict[str, Any] = {
        "worker_id": "w",
        "start_task": lambda task, spec: None,
        "stop_task": lambda task: None,
        "tasks": {"a": 1.0},
        **BASE,
        **kw,
    }
    return TaskDistribution("g", **args)


def test_public_names_are_sorted_exported_and_documented() -> None:
    names = recipes.tasks.__all__
    assert names == sorted(names)
    for name in names:
        assert inspect.getdoc(getattr(recipes.tasks, name)), name
    doc = inspect.getdoc(TaskDistribution)
    assert doc is not None and "Example:" in doc.split("\n\n")[1]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"worker_id": ""}, "worker_id"),
        ({"max_delay_ms": -1}, "max_delay_ms"),
        ({"stop_timeout_ms": 9_000}, "stop_timeout_ms"),  # + margin 3000 > session 10000
        ({"capacity": -1.0}, "capacity"),
        ({"tasks": {"a": 0}}, "weight"),
        ({"tasks": 42}, "tasks must be"),
        ({"lease_margin_ms": -5}, "lease_margin_ms"),
    ],
)
def test_bad_arguments_are_refused_by_name(kw, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make(**kw)


def test_update_tasks_needs_a_mapping_source() -> None:
    d = make(tasks=lambda: {"a": 1.0})
    with pytest.raises(ConfigurationError, match="mapping"):
        d.update_tasks({"b": 1.0})


def test_static_tasks_versions_only_grow_and_changes_are_reported() -> None:
    seen = []
    source = StaticTasks({"a": 1.0, "b": TaskSpec(2.0, {"x": 1})})
    source.start({}, lambda version, old, new: seen.append((version, sorted(old), sorted(new))))
    assert source.snapshot() == (0, {"a": TaskSpec(1.0), "b": TaskSpec(2.0, {"x": 1})})
    source.update({"b": 2.0})
    source.update({"c": 1.0}, version=5)
    with pytest.raises(ConfigurationError, match="above"):
        source.update({"c": 1.0}, version=5)
    assert seen == [(0, ["a", "b"], ["b"]), (5, ["b"], ["c"])]


def test_a_new_distribution_runs_nothing_and_describes_nothing() -> None:
    d = make()
    assert d.running() == frozenset()
    assert not d.owns("a")
    assert d.describe() is None
    assert d.metrics().started == 0
