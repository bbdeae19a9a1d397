"""What election members advertise and what the rebalance leader tells them, as JSON bytes.

JSON keeps the format readable in broker logs and tools, and lets fields be added: readers
ignore fields they do not know and fill in defaults for fields an older writer left out.
Both documents carry ``"v"``, the format version (1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from coordination.errors import ProtocolCodecError

PROTOCOL_TYPE = "election"
PROTOCOL_NAME = "election-v1"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """One member's metadata: who it is and whether it wants or holds leadership.

    Attributes:
        identity: how others reach it (e.g. a URL); unique in the group.
        eligible: False for members that only observe.
        priority: higher wins a free election.
        leading_token: the fencing token of the leadership it holds now, else None.
        highest_token: the highest token it has seen, so a new token can exceed every old one.
    """

    identity: str
    eligible: bool = True
    priority: int = 0
    leading_token: int | None = None
    highest_token: int = -1


@dataclass(frozen=True, slots=True)
class Outcome:
    """The rebalance leader's answer, the same for every member of a generation.

    Attributes:
        leader_member_id: the member id of the leader, or None if nobody can lead.
        leader_identity: its identity.
        token: its fencing token (the generation in which its leadership began).
        members: every member's identity, by member id (observers included).
        problems: misconfigurations found by the rebalance leader (e.g. a duplicate identity).
        duplicates: identities held by more than one member.
    """

    leader_member_id: str | None
    leader_identity: str | None
    token: int | None
    members: dict[str, str]
    problems: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()


def encode_candidate(c: Candidate) -> bytes:
    return json.dumps(
        {
            "v": FORMAT_VERSION,
            "identity": c.identity,
            "eligible": c.eligible,
            "priority": c.priority,
            "leading_token": c.leading_token,
            "highest_token": c.highest_token,
        },
        separators=(",", ":"),
    ).encode()


def decode_candidate(data: bytes) -> Candidate:
    doc = _load(data, "member metadata")
    try:
        identity = doc["identity"]
        if not isinstance(identity, str) or not identity:
            raise TypeError("identity must be a non-empty string")
        leading = doc.get("leading_token")
        return Candidate(
            identity=identity,
            eligible=bool(doc.get("eligible", True)),
            priority=int(doc.get("priority", 0)),
            leading_token=None if leading is None else int(leading),
            highest_token=int(doc.get("highest_token", -1)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolCodecError(f"election member metadata is invalid: {e}") from None


def encode_outcome(o: Outcome) -> bytes:
    return json.dumps(
        {
            "v": FORMAT_VERSION,
            "leader": o.leader_member_id,
            "leader_identity": o.leader_identity,
            "token": o.token,
            "members": o.members,
            "problems": list(o.problems),
            "duplicates": list(o.duplicates),
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def decode_outcome(data: bytes) -> Outcome:
    doc = _load(data, "assignment")
    try:
        token = doc.get("token")
        members = doc.get("members", {})
        if not isinstance(members, dict):
            raise TypeError("members must be an object")
        return Outcome(
            leader_member_id=doc.get("leader"),
            leader_identity=doc.get("leader_identity"),
            token=None if token is None else int(token),
            members={str(k): str(v) for k, v in members.items()},
            problems=tuple(str(p) for p in doc.get("problems", ())),
            duplicates=tuple(str(p) for p in doc.get("duplicates", ())),
        )
    except (TypeError, ValueError) as e:
        raise ProtocolCodecError(f"election assignment is invalid: {e}") from None


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolCodecError(f"election {what} is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("v"), int):
        raise ProtocolCodecError(f"election {what} has no format version field 'v'")
    return doc
