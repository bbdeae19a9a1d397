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
    """Other members' wake-ups read while this member was stable (each made it heartbeat at
    once, rejoin, or wait for the answer of a member sharing its listener)."""
    recent_rebalances: tuple[RebalanceRecord, ...] = ()
    """The last (up to 20) completed rebalances, oldest first: the member's timeline."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceRecord:
    """One completed rebalance of one member, as its timeline keeps it."""

    started_at: float
    """When the member sent its first JoinGroup of it (seconds since the epoch)."""
    reason: str
    """Why it began (the reason sent with JoinGroup)."""
    duration_s: float
    """From the first JoinGroup to the successful SyncGroup."""
    generation: int
    """The generation it ended in."""
    member_id: str
    is_leader: bool
    """Whether this member computed the group's assignment."""
    failed_attempts: int
    """JoinGroup or SyncGroup attempts that failed on the way."""
    moved: str = ""
    """What changed for this member, in the recipe's words (e.g. "+2 -1 partitions"), if the
    recipe says."""
    group_instance_id: str | None = None
    client_id: str = ""

    @property
    def finished_at(self) -> float:
        """When it ended (seconds since the epoch)."""
        return self.started_at + self.duration_s
