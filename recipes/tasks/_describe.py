"""Reading a task group from the outside (see ``coordination.describe_group``): who runs
what, what each worker must hand over, and each worker's capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._wire import decode_assignment, decode_worker_metadata


def describe_member(protocol: str, metadata: bytes, assignment: bytes) -> dict[str, Any]:
    """A worker's id, the tasks it runs (what it reported), its capacity, and its assignment."""
    state = decode_worker_metadata("", metadata)
    out: dict[str, Any] = {
        "worker_id": state.worker_id,
        "running": sorted(state.owned),
        "capacity": state.capacity,
        "config_version": state.config_version,
    }
    if assignment:
        a = decode_assignment(assignment)
        out["assignment"] = {
            "assigned": list(a.assigned),
            "revoked": list(a.revoked),
            "delay_ms": a.delay_ms,
            "leader_worker_id": a.leader_worker_id,
            "status": a.status.name,
        }
    return out


def summarize(members: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each worker's assigned tasks, and the tasks being handed over (revoked, not yet
    assigned anywhere)."""
    workers = {
        m["worker_id"]: m.get("assignment", {}).get("assigned", m["running"]) for m in members
    }
    revoked = sorted({t for m in members for t in m.get("assignment", {}).get("revoked", [])})
    return {"workers": dict(sorted(workers.items())), "moving": revoked}
