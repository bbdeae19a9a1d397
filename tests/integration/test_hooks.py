"""Hooks and exporters on a real broker: what Prometheus scrapes and what OpenTelemetry
reads from an election, a task group and a refused commit."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from coordination import Generation, OffsetAndMetadata
from coordination.errors import CommitFailedError
from coordination.exporters.opentelemetry import GROUP_ATTRIBUTE, OpenTelemetryHooks
from coordination.exporters.prometheus import PrometheusHooks
from coordination.hooks import CommitFailed, CoordinationHooks
from recipes.election import LeaderElection
from recipes.tasks import TaskDistribution

from .members import FAST, Listing, new_group, wait_until

pytestmark = pytest.mark.integration
SETTINGS: dict[str, Any] = dict(FAST)


class Scraped:
    """A process's /metrics endpoint over HTTP, as Prometheus scrapes it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.server, self._thread = start_http_server(0, "127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(self.url, timeout=5) as answer:
            text = answer.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples().get((name, tuple(sorted(labels.items()))))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scraped() -> Iterator[Callable[[], Scraped]]:
    made: list[Scraped] = []

    def make() -> Scraped:
        made.append(Scraped())
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_prometheus_scrapes_an_election_and_its_handoff(
    kafka: str, scraped: Callable[[], Scraped]
) -> None:
    group = new_group()
    a_metrics, b_metrics = scraped(), scraped()
    a = LeaderElection(
        group,
        identity="a",
        priority=1,
        hooks=[PrometheusHooks(a_metrics.registry)],
        bootstrap_servers=kafka,
        **SETTINGS,
    )
    b = LeaderElection(
        group,
        identity="b",
        hooks=[PrometheusHooks(b_metrics.registry)],
        bootstrap_servers=kafka,
        **SETTINGS,
    )
    try:
        # a leads a group of one first: had b's first join landed before a's, b would lead
        # (a sitting leader keeps its place, whatever a newcomer's priority).
        a.start()
        wait_until(lambda: a_metrics.value("coordination_leader", group=group) == 1, 30, "a leads")
        b.start()
        wait_until(lambda: b.leader() is not None and b.leader().identity == "a", 30, "b follows")  # type: ignore[union-attr]
        token = a_metrics.value("coordination_leader_token", group=group)
        assert token is not None and token >= 1
        assert not b_metrics.value("coordination_leader", group=group)  # no series, or 0
        for m in (a_metrics, b_metrics):
            assert (m.value("coordination_rebalance_total", group=group) or 0) >= 1
            assert (m.value("coordination_rebalance_latency_seconds_count", group=group) or 0) >= 1
            assert (m.value("coordination_last_rebalance_timestamp_seconds", group=group) or 0) > (
                time.time() - 60
            )
        a.close()
        wait_until(lambda: b_metrics.value("coordination_leader", group=group) == 1, 30, "b leads")
        assert a_metrics.value("coordination_leader", group=group) == 0
        assert (
            a_metrics.value("coordination_leadership_changes_total", group=group, change="deposed")
            == 1
        )
        b_token = b_metrics.value("coordination_leader_token", group=group)
        assert b_token is not None and b_token > token
    finally:
        a.close()
        b.close()


def otel_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], float]]]:
    """Each instrument's data points (attributes, value or histogram count)."""
    data = reader.get_metrics_data()
    out: dict[str, list[tuple[dict[str, object], float]]] = {}
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.count  # type: ignore[union-attr]
                    out.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return out


def otel_value(reader: InMemoryMetricReader, name: str, group: str) -> float | None:
    for attributes, value in otel_points(reader).get(name, []):
        if attributes.get(GROUP_ATTRIBUTE) == group:
            return value
    return None


def test_opentelemetry_reads_a_task_group_start_and_stop(kafka: str) -> None:
    group = new_group()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    started: set[str] = set()

    worker = TaskDistribution(
        group,
        worker_id="w1",
        tasks={f"t{i}": 1.0 for i in range(4)},
        start_task=lambda task, spec: started.add(task),
        stop_task=lambda task: None,
        hooks=[OpenTelemetryHooks(provider)],
        bootstrap_servers=kafka,
        stop_timeout_ms=1000,
        **SETTINGS,
    )
    try:
        worker.start()
        wait_until(
            lambda: otel_value(reader, "coordination.tasks.running", group) == 4, 30, "4 running"
        )
        assert otel_value(reader, "coordination.task.starts", group) == 4
        assert (otel_value(reader, "coordination.rebalances", group) or 0) >= 1
        assert (otel_value(reader, "coordination.rebalance.duration", group) or 0) >= 1
    finally:
        worker.close()
    assert started == {"t0", "t1", "t2", "t3"}
    assert otel_value(reader, "coordination.tasks.running", group) == 0
    assert otel_value(reader, "coordination.task.stops", group) == 4
    provider.shutdown()


class Commits(CoordinationHooks):
    def __init__(self) -> None:
        self.failed: list[CommitFailed] = []

    def on_commit_failed(self, event: CommitFailed) -> None:
        self.failed.append(event)


def test_a_refused_commit_is_reported(kafka: str) -> None:
    hooks = Commits()
    member = Listing(new_group(), hooks=[hooks], bootstrap_servers=kafka)
    try:
        member.ensure_active_group(timeout=30)
        current = member.generation()
        stale = Generation(current.generation_id - 1, current.member_id, current.protocol)
        with pytest.raises(CommitFailedError):
            member.commit_offsets(
                {("__consumer_offsets", 0): OffsetAndMetadata(5)}, generation=stale
            )
    finally:
        member.close()
    (event,) = hooks.failed
    assert (event.group_id, event.member_id, event.partitions) == (
        member.config.group_id,
        current.member_id,
        1,
    )
