"""OpenTelemetry metrics of a member's events (needs ``opentelemetry-api``).

Example:
    from coordination.exporters.opentelemetry import OpenTelemetryHooks

    # With the OpenTelemetry SDK and an exporter configured (OTLP, Prometheus, ...):
    tasks = TaskDistribution("workers", tasks=..., hooks=[OpenTelemetryHooks()],
                             bootstrap_servers="kafka:9092")
"""

from __future__ import annotations

try:
    from opentelemetry import metrics
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "coordination.exporters.opentelemetry needs opentelemetry-api: "
        "pip install 'kafka-coordination[opentelemetry]'"
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

__all__ = ["GROUP_ATTRIBUTE", "OpenTelemetryHooks"]

GROUP_ATTRIBUTE = "coordination.group"
"""The attribute that names the group on every measurement."""


class OpenTelemetryHooks(CoordinationHooks):
    """Records a member's events as OpenTelemetry metrics, with the group as an attribute.

    Instruments (meter ``coordination``): ``coordination.rebalances``,
    ``coordination.rebalance.duration`` (histogram, s), ``coordination.rebalance.failures``,
    ``coordination.heartbeat.failures`` (attribute ``error``), ``coordination.lease.at_risk``,
    ``coordination.leaders`` (up-down: leaders in this process), ``coordination.leader.token``
    (gauge), ``coordination.leadership.changes`` (attribute ``change``: elected / deposed),
    ``coordination.tasks.running`` (up-down), ``coordination.task.starts``,
    ``coordination.task.stops``, ``coordination.task.stop_overruns``,
    ``coordination.commit.failures``; a share consumer's: ``coordination.share.records.acquired``,
    ``coordination.share.records.redelivered``, ``coordination.share.records.unpolled``
    (attribute ``reason``: acquired, never handed out), ``coordination.share.records.acknowledged``
    (attribute ``type``; ``RENEW``: lock renewals), ``coordination.share.acknowledgement.failures``
    (attribute ``reason``), ``coordination.share.partition.lag`` (gauge, attributes ``topic``
    and ``partition``: the last lag read of each share-partition).

    Args:
        meter_provider: where to get the meter; default the global one
            (``opentelemetry.metrics.get_meter_provider()``).
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
        from .. import __version__

        meter = provider.get_meter("coordination", __version__)
        self.rebalances = meter.create_counter(
            "coordination.rebalances", "{rebalance}", "Rebalances completed."
        )
        self.rebalance_duration = meter.create_histogram(
            "coordination.rebalance.duration",
            "s",
            "From the first JoinGroup of a rebalance to its successful SyncGroup.",
        )
        self.rebalance_failures = meter.create_counter(
            "coordination.rebalance.failures", "{attempt}", "JoinGroup or SyncGroup failures."
        )
        self.heartbeat_failures = meter.create_counter(
            "coordination.heartbeat.failures", "{heartbeat}", "Heartbeats that failed."
        )
        self.lease_at_risk = meter.create_counter(
            "coordination.lease.at_risk", "{event}", "Leases that ran down to their margin."
        )
        self.leaders = meter.create_up_down_counter(
            "coordination.leaders", "{member}", "Members that lead, in this process."
        )
        self.leader_token = meter.create_gauge(
            "coordination.leader.token", "{token}", "The fencing token of the last leadership."
        )
        self.leadership_changes = meter.create_counter(
            "coordination.leadership.changes", "{change}", "Elections won and leaderships lost."
        )
        self.tasks_running = meter.create_up_down_counter(
            "coordination.tasks.running", "{task}", "Tasks running in this process."
        )
        self.task_starts = meter.create_counter(
            "coordination.task.starts", "{task}", "start_task calls that returned."
        )
        self.task_stops = meter.create_counter(
            "coordination.task.stops", "{task}", "stop_task calls that returned or raised."
        )
        self.task_overruns = meter.create_counter(
            "coordination.task.stop_overruns", "{task}", "stop_task calls past the timeout."
        )
        self.commit_failures = meter.create_counter(
            "coordination.commit.failures", "{commit}", "Offset commits that failed."
        )
        self.share_acquired = meter.create_counter(
            "coordination.share.records.acquired",
            "{record}",
            "Records a share consumer's polls acquired.",
        )
        self.share_redelivered = meter.create_counter(
            "coordination.share.records.redelivered",
            "{record}",
            "Of the records acquired, those delivered before.",
        )
        self.share_unpolled = meter.create_counter(
            "coordination.share.records.unpolled",
            "{record}",
            "Records acquired that no poll handed out, by reason.",
        )
        self.share_acknowledged = meter.create_counter(
            "coordination.share.records.acknowledged",
            "{record}",
            "Records whose acknowledgement took effect, by type (RENEW: lock renewals).",
        )
        self.share_acknowledgement_failures = meter.create_counter(
            "coordination.share.acknowledgement.failures",
            "{record}",
            "Records whose acknowledgement did not take effect, by reason.",
        )
        self.share_lag = meter.create_gauge(
            "coordination.share.partition.lag",
            "{record}",
            "The records not done yet of a share-partition, as last read.",
        )

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.rebalances.add(1, at)
        self.rebalance_duration.record(event.duration_s, at)

    def on_rebalance_failed(self, event: RebalanceFailed) -> None:
        self.rebalance_failures.add(1, {GROUP_ATTRIBUTE: event.group_id})

    def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
        self.heartbeat_failures.add(
            1, {GROUP_ATTRIBUTE: event.group_id, "error": error_label(event.error)}
        )

    def on_lease_at_risk(self, event: LeaseAtRisk) -> None:
        self.lease_at_risk.add(1, {GROUP_ATTRIBUTE: event.group_id})

    def on_elected(self, event: Elected) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.leaders.add(1, at)
        self.leader_token.set(event.token, at)
        self.leadership_changes.add(1, {**at, "change": "elected"})

    def on_deposed(self, event: Deposed) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.leaders.add(-1, at)
        self.leadership_changes.add(1, {**at, "change": "deposed"})

    def on_task_started(self, event: TaskStarted) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.tasks_running.add(1, at)
        self.task_starts.add(1, at)

    def on_task_stopped(self, event: TaskStopped) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.tasks_running.add(-1, at)
        self.task_stops.add(1, at)

    def on_task_overran(self, event: TaskOverran) -> None:
        self.task_overruns.add(1, {GROUP_ATTRIBUTE: event.group_id})

    def on_commit_failed(self, event: CommitFailed) -> None:
        self.commit_failures.add(1, {GROUP_ATTRIBUTE: event.group_id})

    def on_records_acquired(self, event: RecordsAcquired) -> None:
        at = {GROUP_ATTRIBUTE: event.group_id}
        self.share_acquired.add(event.count, at)
        if event.redelivered:
            self.share_redelivered.add(event.redelivered, at)

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        self.share_unpolled.add(
            len(event.offsets), {GROUP_ATTRIBUTE: event.group_id, "reason": event.reason}
        )

    def on_records_acknowledged(self, event: RecordsAcknowledged) -> None:
        self.share_acknowledged.add(
            event.count, {GROUP_ATTRIBUTE: event.group_id, "type": event.ack_type}
        )

    def on_acknowledgement_failed(self, event: AcknowledgementFailed) -> None:
        self.share_acknowledgement_failures.add(
            event.count, {GROUP_ATTRIBUTE: event.group_id, "reason": event.reason}
        )

    def on_share_lag_read(self, event: ShareLagRead) -> None:
        for (topic, partition), lag in event.lag.items():
            self.share_lag.set(
                lag, {GROUP_ATTRIBUTE: event.group_id, "topic": topic, "partition": partition}
            )
