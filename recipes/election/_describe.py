"""Reading an election group from the outside (see ``coordination.describe_group``): who
leads with which token, who may lead, who only observes. A gateway can ask who leads this
way without joining (joining would cause a rebalance)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._wire import decode_candidate, decode_outcome


def describe_member(protocol: str, metadata: bytes, assignment: bytes) -> dict[str, Any]:
    """A candidate's identity, eligibility, priority and tokens, and the outcome it was given."""
    c = decode_candidate(metadata)
    out: dict[str, Any] = {
        "identity": c.identity,
        "eligible": c.eligible,
        "priority": c.priority,
        "leading_token": c.leading_token,
        "highest_token": c.highest_token,
    }
    if assignment:
        o = decode_outcome(assignment)
        out["outcome"] = {
            "leader_member_id": o.leader_member_id,
            "leader_identity": o.leader_identity,
            "token": o.token,
            "problems": list(o.problems),
        }
    return out


def summarize(members: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The leader the latest outcome names, its token, and the candidates and observers."""
    outcomes = [m["outcome"] for m in members if m.get("outcome")]
    latest = max(outcomes, key=lambda o: -1 if o["token"] is None else o["token"], default=None)
    return {
        "leader": latest["leader_identity"] if latest else None,
        "token": latest["token"] if latest else None,
        "candidates": sorted(m["identity"] for m in members if m["eligible"]),
        "observers": sorted(m["identity"] for m in members if not m["eligible"]),
    }
