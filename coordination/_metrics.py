"""Counters and timings of one member (the figures of Kafka's GroupCoordinatorMetrics)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetrics:
    """A snapshot of what one member has done, from ``Coordinator.metrics()``.

    A rebalance spans the first JoinGroup to the successful SyncGroup,
    failed attempts included (as in Kafka). Ages and latencies are seconds;
    None means "not yet".
    """

    rebalance_total: int
    """Rebalances completed (Kafka ``rebalance-total``)."""
    failed_rebalance_total: int
    """JoinGroup or SyncGroup attempts that failed (Kafka ``failed-rebalance-total``)."""
    join_total: int
    """JoinGroup responses received (Kafka ``join-total``)."""
    sync_total: int
    """SyncGroup responses received (Kafka ``sync-total``)."""
    heartbeat_total: int
    """Heartbeat responses received (Kafka ``heartbeat-total``)."""
    coordinator_discoveries: int
    """Times the coordinator was found (1 unless it moved or was lost)."""
    last_rebalance_latency_s: float | None
    """Duration of the last completed rebalance."""
    rebalance_latency_avg_s: float | None
    """Mean rebalance duration (Kafka ``rebalance-latency-avg``)."""
    rebalance_latency_max_s: float | None
    """Longest rebalance (Kafka ``rebalance-latency-max``)."""
    last_rebalance_age_s: float | None
    """Seconds since the last completed rebalance (Kafka ``last-rebalance-seconds-ago``)."""
    last_heartbeat_age_s: float | None
    """Seconds since the last successful heartbeat (Kafka ``last-heartbeat-seconds-ago``)."""
    rejoin_reasons: tuple[str, ...]
    """The reasons of the last (up to 20) rejoin requests, oldest first."""
    wakeups_received: int = 0
    """Other members' wake-ups that made this stable member heartbeat at once."""
