"""The lean fetcher's position lookups: ListOffsets to each partition's leader, and what
the answers mean for the fetcher (offsets found, partitions refused, leaders to look up
again, an error that stops it)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..errors import BrokerError, CoordinationError, CoordinationTimeoutError, broker_error
from ..transport import TransportError
from . import classify
from .classify import Outcome
from .cluster import Cluster, Partition

log = logging.getLogger("coordination.fetching")

P = TypeVar("P", bound=tuple[str, int])


@dataclass(slots=True)
class OffsetsAnswer(Generic[P]):
    found: dict[P, int] = field(default_factory=dict)
    refused: dict[P, BrokerError] = field(default_factory=dict)  # may not be read
    stale: bool = False  # a leader unknown, moved or unreachable: look the leaders up again
    stop: CoordinationError | None = None  # a connection the settings cannot make


def ask_offsets(
    cluster: Cluster,
    partitions: Sequence[P],
    timestamp: int,
    *,
    reconnecting: Callable[[int], bool],
    isolation_level: int,
    timeout_s: float,
    group_id: str,
) -> OffsetsAnswer[P]:
    """Each partition's offset at ``timestamp`` (EARLIEST, LATEST), asked of its leader as
    the cluster's metadata names it; a leader that is ``reconnecting`` is not asked."""
    answer: OffsetsAnswer[P] = OffsetsAnswer()
    meta = cluster.metadata
    by_node: dict[int, dict[Partition, tuple[int, int]]] = {}
    for p in partitions:
        leader = meta.leaders.get((p[0], p[1]))
        if leader is None:
            answer.stale = True
            continue
        by_node.setdefault(leader[0], {})[(p[0], p[1])] = (timestamp, leader[1])
    asked = {(p[0], p[1]): p for p in partitions}
    for node, wanted in by_node.items():
        if reconnecting(node):
            continue
        try:
            answers = cluster.list_offsets(node, wanted, isolation_level, timeout_s)
        except TransportError as e:
            log.warning("fetcher: ListOffsets from broker %d failed: %s", node, e)
            answer.stale = True
            if e.fatal:
                answer.stop = e.stop_error("the lean fetcher asking for offsets")
            continue
        for key, (code, offset) in answers.items():
            q = asked.get(key)
            if q is None:
                continue
            outcome = classify.partition_outcome(code)
            if outcome is Outcome.NONE and offset >= 0:
                answer.found[q] = offset
            elif outcome is Outcome.FATAL:
                answer.refused[q] = broker_error(
                    code, group_id=group_id, api=f"ListOffsets of {q[0]}-{q[1]}"
                )
            else:
                answer.stale = answer.stale or outcome is Outcome.REFRESH
    return answer


def gather_offsets(
    partitions: Sequence[P],
    timeout_ms: int,
    ask: Callable[[list[P]], dict[P, int]],
    now: Callable[[], float],
    sleep: Callable[[float], None],
    backoff_s: float,
) -> dict[P, int]:
    """Each partition's offset, from ``ask`` (of the partitions still missing) until all
    are found, waiting ``backoff_s`` (at least 10 ms) between tries.

    Raises:
        CoordinationTimeoutError: not all were found within ``timeout_ms``.
        BrokerError: a leader refused (e.g. TopicAuthorizationError), as ``ask`` raises.
    """
    deadline = now() + timeout_ms / 1000
    found: dict[P, int] = {}
    wanted = list(partitions)
    while True:
        found.update(ask([p for p in wanted if p not in found]))
        if len(found) == len(wanted):
            return found
        left = deadline - now()
        if left <= 0:
            raise CoordinationTimeoutError(
                f"end offsets of {sorted(p for p in wanted if p not in found)} not found "
                f"within {timeout_ms} ms"
            )
        sleep(min(left, max(backoff_s, 0.01)))
