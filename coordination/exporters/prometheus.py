"""Prometheus metrics of a member's events (needs ``prometheus-client``).

Example:
    from prometheus_client import start_http_server
    from coordination.exporters.prometheus import PrometheusHooks

    start_http_server(9400)                       # the process's /metrics endpoint
    election = LeaderElection("orders-leader", hooks=[PrometheusHooks()],
                              bootstrap_servers="kafka:9092")
"""

from __future__ import annotations

try:
    import prometheus_client as prom
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "coordination.exporters.prometheus needs prometheus-client: "
        "pip install 'kafka-coordination[prometheus]'"
    ) from e

from ..hooks import (
    AcknowledgementFailed,
    CommitFailed,
    CoordinationHooks,
    Deposed,
    Elected,
    HeartbeatFailed,
    LeaseAtRisk,
    RebalanceFailed,
    RebalanceFinished,
    RecordsAcknowledged,
    RecordsAcquired,
    RecordsUnpolled,
    ShareLagRead,
    TaskOverran,
    TaskStarted,
    TaskStopped,
)
from . import error_label

__all__ = ["REBALANCE_BUCKETS_S", "PrometheusHooks"]

REBALANCE_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Histogram buckets of rebalance durations: milliseconds (wake-ups) to the rebalance timeout."""


class PrometheusHooks(CoordinationHooks):
    """Counts a member's events into Prometheus metrics, labelled by group.

    Metrics (prefix ``namespace``, default ``coordination``):
        ``_rebalance_total``, ``_rebalance_latency_seconds`` (histogram),
        ``_failed_rebalance_total``, ``_last_rebalance_timestamp_seconds``,
        ``_heartbeat_failed_total{error}``, ``_lease_at_risk_total``,
        ``_leader`` (members of the group leading in this process), ``_leader_token``,
        ``_leadership_changes_total{change="elected"|"deposed"}``,
        ``_tasks_running``, ``_task_started_total``, ``_task_stopped_total``,
        ``_task_stop_overran_total``, ``_commit_failed_total``; a share consumer's:
        ``_share_records_acquired_total``, ``_share_records_redelivered_total``,
        ``_share_records_acknowledged_total{type}`` (``type="RENEW"``: lock renewals),
        ``_share_records_unpolled_total{reason}`` (acquired, never handed out),
        ``_share_acknowledgement_failed_total{reason}``, ``_share_partition_lag{topic,
        partition}`` (gauge: the last lag read of each share-partition).

    Args:
        registry: where to register them; default ``prometheus_client.REGISTRY``. Give one
            registry per PrometheusHooks: two on one registry would register the names twice.
        namespace: the names' prefix.
    """

    def __init__(
        self, registry: prom.CollectorRegistry | None = None, *, namespace: str = "coordination"
    ) -> None:
        reg = prom.REGISTRY if registry is None else registry
        group = ["group"]

        def counter(name: str, doc: str, labels: list[str] = group) -> prom.Counter:
            return prom.Counter(name, doc, labels, namespace=namespace, registry=reg)

        def gauge(name: str, doc: str, labels: list[str] = group) -> prom.Gauge:
            return prom.Gauge(name, doc, labels, namespace=namespace, registry=reg)

        self.rebalances = counter("rebalance", "Rebalances completed (stable in a generation).")
        self.rebalance_latency = prom.Histogram(
            "rebalance_latency_seconds",
            "From the first JoinGroup of a rebalance to its successful SyncGroup.",
            group,
            namespace=namespace,
            registry=reg,
            buckets=REBALANCE_BUCKETS_S,
        )
        self.failed_rebalances = counter(
            "failed_rebalance", "JoinGroup or SyncGroup attempts that failed."
        )
        self.last_rebalance = gauge(
            "last_rebalance_timestamp_seconds", "When the last rebalance completed (Unix time)."
        )
        self.heartbeat_failures = counter(
            "heartbeat_failed",
            "Heartbeats that failed, by broker error name or no_response.",
            ["group", "error"],
        )
        self.lease_at_risk = counter(
            "lease_at_risk", "Times a member's lease ran down to its margin."
        )
        self.leader = gauge("leader", "Members of the group that lead, in this process.")
        self.leader_token = gauge("leader_token", "The fencing token of the last leadership.")
        self.leadership_changes = counter(
            "leadership_changes", "Elections won and leaderships lost.", ["group", "change"]
        )
        self.tasks_running = gauge("tasks_running", "Tasks running in this process.")
        self.task_starts = counter("task_started", "start_task calls that returned.")
        self.task_stops = counter("task_stopped", "stop_task calls that returned or raised.")
        self.task_overruns = counter(
            "task_stop_overran", "stop_task calls that overran stop_timeout_ms."
        )
        self.commit_failures = counter("commit_failed", "Offset commits that failed.")
        self.share_acquired = counter(
            "share_records_acquired", "Records a share consumer's polls acquired."
        )
        self.share_redelivered = counter(
            "share_records_redelivered", "Of the records acquired, those delivered before."
        )
        self.share_unpolled = counter(
            "share_records_unpolled",
            "Records acquired that no poll handed out, by reason (lock_expired, closed, "
            "undecodable).",
            ["group", "reason"],
        )
        self.share_acknowledged = counter(
            "share_records_acknowledged",
            "Records whose acknowledgement took effect, by type (RENEW: lock renewals).",
            ["group", "type"],
        )
        self.share_acknowledgement_failures = counter(
            "share_acknowledgement_failed",
            "Records whose acknowledgement did not take effect, by reason "
            "(lock_expired, uncertain, refused).",
            ["group", "reason"],
        )
        self.share_lag = gauge(
            "share_partition_lag",
            "The records not done yet of a share-partition, as last read.",
            ["group", "topic", "partition"],
        )

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        self.rebalances.labels(event.group_id).inc()
        self.rebalance_latency.labels(event.group_id).observe(event.duration_s)
        self.last_rebalance.labels(event.group_id).set_to_current_time()

    def on_rebalance_failed(self, event: RebalanceFailed) -> None:
        self.failed_rebalances.labels(event.group_id).inc()

    def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
        self.heartbeat_failures.labels(event.group_id, error_label(event.error)).inc()

    def on_lease_at_risk(self, event: LeaseAtRisk) -> None:
        self.lease_at_risk.labels(event.group_id).inc()

    def on_elected(self, event: Elected) -> None:
        self.leader.labels(event.group_id).inc()
        self.leader_token.labels(event.group_id).set(event.token)
        self.leadership_changes.labels(event.group_id, "elected").inc()

    def on_deposed(self, event: Deposed) -> None:
        self.leader.labels(event.group_id).dec()
        self.leadership_changes.labels(event.group_id, "deposed").inc()

    def on_task_started(self, event: TaskStarted) -> None:
        self.tasks_running.labels(event.group_id).inc()
        self.task_starts.labels(event.group_id).inc()

    def on_task_stopped(self, event: TaskStopped) -> None:
        self.tasks_running.labels(event.group_id).dec()
        self.task_stops.labels(event.group_id).inc()

    def on_task_overran(self, event: TaskOverran) -> None:
        self.task_overruns.labels(event.group_id).inc()

    def on_commit_failed(self, event: CommitFailed) -> None:
        self.commit_failures.labels(event.group_id).inc()

    def on_records_acquired(self, event: RecordsAcquired) -> None:
        self.share_acquired.labels(event.group_id).inc(event.count)
        self.share_redelivered.labels(event.group_id).inc(event.redelivered)

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        self.share_unpolled.labels(event.group_id, event.reason).inc(len(event.offsets))

    def on_records_acknowledged(self, event: RecordsAcknowledged) -> None:
        self.share_acknowledged.labels(event.group_id, event.ack_type).inc(event.count)

    def on_acknowledgement_failed(self, event: AcknowledgementFailed) -> None:
        self.share_acknowledgement_failures.labels(event.group_id, event.reason).inc(event.count)

    def on_share_lag_read(self, event: ShareLagRead) -> None:
        for (topic, partition), lag in event.lag.items():
            self.share_lag.labels(event.group_id, topic, str(partition)).set(lag)
