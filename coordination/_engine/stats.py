"""The member's rebalance statistics and timeline: counters, timings, the hook events.

:class:`RebalanceStats` records what the engine tells it (a rebalance began, an attempt
failed, a heartbeat was answered) and returns what follows from it: the timeline record
of a finished rebalance, the hook event to send, the metrics snapshot. It never calls the
hooks or the engine itself. Not thread-safe: the engine calls it under its lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque

from .._metrics import MemberMetrics, RebalanceRecord
from .._types import Generation
from ..hooks import RebalanceFailed, RebalanceFinished, RebalanceStarted

# Completed rebalances a member remembers for metrics() and describe's timeline.
TIMELINE_LENGTH = 20
# Rejoin reasons a member remembers for metrics().
_REJOIN_REASONS = 20


class RebalanceStats:
    """Counters and the recent rebalances of one member."""

    def __init__(self, group_id: str, group_instance_id: str | None, client_id: str) -> None:
        self._group_id = group_id
        self._group_instance_id = group_instance_id
        self._client_id = client_id
        self.rebalance_total = 0
        self.failed_rebalance_total = 0
        self.join_total = 0
        self.sync_total = 0
        self.heartbeat_total = 0
        self.coordinator_discoveries = 0
        self.rebalance_latency_sum_s = 0.0
        self.rebalance_latency_max_s = 0.0
        self.last_rebalance_latency_s: float | None = None
        self.last_rebalance_at: float | None = None
        self.rebalance_started_at: float | None = None
        self.last_heartbeat_at: float | None = None
        self.rejoin_reasons: list[str] = []
        self.wakeups = 0
        # The rebalance under way: why it began, when (wall clock), and its failed attempts.
        self.rebalance_reason = ""
        self.rebalance_started_wall = 0.0
        self.rebalance_failures = 0
        self.recent_rebalances: deque[RebalanceRecord] = deque(maxlen=TIMELINE_LENGTH)

    # ------------------------------------------------------------------ what happened

    def attempt(self, now: float, reason: str) -> bool:
        """A join attempt begins; True if it begins a rebalance (its first attempt)."""
        if self.rebalance_started_at is not None:
            return False
        self.rebalance_started_at = now
        self.rebalance_started_wall = time.time()
        self.rebalance_reason = reason
        self.rebalance_failures = 0
        return True

    def attempt_failed(self) -> None:
        self.failed_rebalance_total += 1
        self.rebalance_failures += 1

    def heartbeat_answered(self, now: float) -> None:
        self.last_heartbeat_at = now

    def rejoin_requested(self, reason: str) -> None:
        self.rejoin_reasons.append(reason)
        del self.rejoin_reasons[:-_REJOIN_REASONS]

    def finished(self, now: float, generation: Generation, is_leader: bool) -> RebalanceRecord:
        """The member is stable in ``generation``: the rebalance's timeline record."""
        started = self.rebalance_started_at if self.rebalance_started_at is not None else now
        latency = now - started
        self.rebalance_total += 1
        self.rebalance_latency_sum_s += latency
        self.rebalance_latency_max_s = max(self.rebalance_latency_max_s, latency)
        self.last_rebalance_latency_s = latency
        self.last_rebalance_at = now
        self.rebalance_started_at = None
        record = RebalanceRecord(
            started_at=self.rebalance_started_wall or time.time() - latency,
            reason=self.rebalance_reason,
            duration_s=latency,
            generation=generation.generation_id,
            member_id=generation.member_id,
            is_leader=is_leader,
            failed_attempts=self.rebalance_failures,
            group_instance_id=self._group_instance_id,
            client_id=self._client_id,
        )
        self.recent_rebalances.append(record)
        return record

    def note_change(self, moved: str) -> None:
        """Say what the last rebalance changed for this member (its timeline's ``moved``)."""
        if self.recent_rebalances:
            last = self.recent_rebalances[-1]
            self.recent_rebalances[-1] = dataclasses.replace(last, moved=moved)

    # ------------------------------------------------------------------ answers

    def last_record(self, generation_id: int) -> RebalanceRecord | None:
        """The newest timeline record, if it is that of ``generation_id``."""
        timeline = self.recent_rebalances
        if not timeline or timeline[-1].generation != generation_id:
            return None
        return timeline[-1]

    def started_event(self, member_id: str, reason: str) -> RebalanceStarted:
        return RebalanceStarted(group_id=self._group_id, member_id=member_id, reason=reason)

    def finished_event(self, record: RebalanceRecord) -> RebalanceFinished:
        return RebalanceFinished(
            group_id=self._group_id,
            member_id=record.member_id,
            generation=record.generation,
            is_leader=record.is_leader,
            reason=record.reason,
            duration_s=record.duration_s,
        )

    def failed_event(self, member_id: str, error: str) -> RebalanceFailed:
        return RebalanceFailed(group_id=self._group_id, member_id=member_id, error=error)

    def snapshot(self, now: float) -> MemberMetrics:
        total = self.rebalance_total
        return MemberMetrics(
            rebalance_total=total,
            failed_rebalance_total=self.failed_rebalance_total,
            join_total=self.join_total,
            sync_total=self.sync_total,
            heartbeat_total=self.heartbeat_total,
            coordinator_discoveries=self.coordinator_discoveries,
            last_rebalance_latency_s=self.last_rebalance_latency_s,
            rebalance_latency_avg_s=self.rebalance_latency_sum_s / total if total else None,
            rebalance_latency_max_s=self.rebalance_latency_max_s if total else None,
            last_rebalance_age_s=(
                now - self.last_rebalance_at if self.last_rebalance_at is not None else None
            ),
            last_heartbeat_age_s=(
                now - self.last_heartbeat_at if self.last_heartbeat_at is not None else None
            ),
            rejoin_reasons=tuple(self.rejoin_reasons),
            recent_rebalances=tuple(self.recent_rebalances),
            wakeups_received=self.wakeups,
        )
