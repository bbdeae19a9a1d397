"""Reading a ``consumer`` group from the outside (see ``coordination.describe_group``): any
client's subscriptions and assignments, Java's and librdkafka's included."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .protocol import (
    TopicPartition,
    decode_assignment,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    decode_subscription,
)


def _partitions(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return {topic: sorted(ps) for topic, ps in sorted(grouped.items())}


def describe_member(protocol: str, metadata: bytes, assignment: bytes) -> dict[str, Any]:
    """A member's subscription (topics, owned partitions, generation, rack) and assignment."""
    sub = decode_subscription(metadata)
    out: dict[str, Any] = {
        "topics": list(sub.topics),
        "owned_partitions": _partitions(sub.owned_partitions),
        "generation": sub.generation_id,
        "rack": sub.rack_id,
    }
    if protocol == "cooperative-sticky" and sub.user_data:
        out["claimed_generation"] = decode_cooperative_sticky_user_data(sub.user_data)
    elif protocol == "sticky" and sub.user_data:
        claimed = decode_sticky_user_data(sub.user_data)
        out["claimed_partitions"] = _partitions(claimed.partitions)
        out["claimed_generation"] = claimed.generation
    out["assignment"] = _partitions(decode_assignment(assignment).partitions) if assignment else {}
    return out


def summarize(members: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every topic's partitions and how many members own some."""
    owned = 0
    topics: set[str] = set()
    for member in members:
        topics.update(member["topics"])
        owned += sum(len(ps) for ps in member["assignment"].values())
    return {"topics": sorted(topics), "assigned_partitions": owned}
