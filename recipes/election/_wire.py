"""What election members advertise and what the rebalance leader tells them, as JSON bytes.

JSON keeps the format readable in broker logs and tools, and lets fields be added: readers
ignore fields they do not know and fill in defaults for fields an older writer left out.
Both documents carry ``"v"``, the format version (1).

The bytes come from other members, which may be broken or hostile, and one bad member must
not stop every election: the decoders raise nothing but
:class:`~coordination.errors.ProtocolCodecError`, whatever the bytes. They accept UTF-8 JSON
objects of bounded size (:data:`MAX_CANDIDATE_BYTES`, :data:`MAX_OUTCOME_BYTES`) and
nesting (:data:`MAX_DEPTH`); ``NaN``, ``Infinity`` and numbers beyond a double are rejected
anywhere. A known field must have its type: integers are JSON integers within int64 (never
``true``, ``1.0`` or ``"1"``), a member's tokens below the int64 maximum so that a higher
token still exists; booleans are ``true``/``false``; strings have no lone surrogates.
Absent or ``null`` fields take their defaults.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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
        member_id: the member id it had when it wrote this ("" before it had one). A static
            member that took its instance's place without a rebalance rejoins with its new
            id here, so the broker sees its metadata changed and rebalances (a follower
            rejoining unchanged would get the same generation and outcome back).
        declined_token: the highest token of an outcome that named it leader and that it did
            not take up (-1: none). Raised when it declines, so that its rejoin differs and
            the broker rebalances rather than hand the same outcome back.
        generation: the generation it held when it wrote this (-1: none). Each JoinGroup
            from a generation names it, and the metadata stored with that generation was
            written before it (naming an older one), so every rejoin differs from what the
            broker holds: a member's rejoin always starts a rebalance, even one that reaches
            a stable group before the LeaveGroup it answers (see the engine's departures).
    """

    identity: str
    eligible: bool = True
    priority: int = 0
    leading_token: int | None = None
    highest_token: int = -1
    member_id: str = ""
    declined_token: int = -1
    generation: int = -1


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
        stored_token: the token stored in the group's offsets as the rebalance leader read it
            in this generation (-1: none), or None if it did not say (an older version). Only
            the member elected in this generation can store a token in it, so until it tries,
            this is still the stored token, and the elected member need not read it again.
        stored_token_exists: the rebalance leader knows the group has a stored token: it read
            one in this generation, or was handed the previous generation's outcome, which
            knew it. False from an older version, which does not say. The group then keeps
            its generations however long it stays empty (until its offsets expire), so the
            elected member may lead before storing a token equal to the generation id.
    """

    leader_member_id: str | None
    leader_identity: str | None
    token: int | None
    members: dict[str, str]
    problems: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    stored_token: int | None = None
    stored_token_exists: bool = False


def encode_candidate(c: Candidate) -> bytes:
    return json.dumps(
        {
            "v": FORMAT_VERSION,
            "identity": c.identity,
            "eligible": c.eligible,
            "priority": c.priority,
            "leading_token": c.leading_token,
            "highest_token": c.highest_token,
            "member_id": c.member_id,
            "declined_token": c.declined_token,
            "generation": c.generation,
        },
        separators=(",", ":"),
    ).encode()


def decode_candidate(data: bytes) -> Candidate:
    """Read a member's metadata; whatever the bytes, only the typed codec error escapes.

    Raises:
        ProtocolCodecError: not a JSON object of at most :data:`MAX_CANDIDATE_BYTES`
            with a format version, or a known field has the wrong type or range.
    """
    doc = _load(data, "member metadata", MAX_CANDIDATE_BYTES)
    what = "election member metadata"
    identity = _field(doc, "identity", _text, what)
    if identity is None or not identity:
        raise ProtocolCodecError(f"{what} is invalid: identity must be a non-empty string")
    eligible = _field(doc, "eligible", _boolean, what)
    priority = _field(doc, "priority", _int64, what)
    highest = _field(doc, "highest_token", _token, what)
    member_id = _field(doc, "member_id", _text, what)
    declined = _field(doc, "declined_token", _token, what)
    generation = _field(doc, "generation", _int64, what)
    return Candidate(
        identity=identity,
        eligible=True if eligible is None else eligible,
        priority=0 if priority is None else priority,
        leading_token=_field(doc, "leading_token", _token, what),
        highest_token=-1 if highest is None else highest,
        member_id=member_id or "",
        declined_token=-1 if declined is None else declined,
        generation=-1 if generation is None else generation,
    )


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
            "stored_token": o.stored_token,
            "stored_token_exists": o.stored_token_exists,
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def decode_outcome(data: bytes) -> Outcome:
    """Read the rebalance leader's answer; whatever the bytes, only the typed error escapes.

    Raises:
        ProtocolCodecError: not a JSON object of at most :data:`MAX_OUTCOME_BYTES` with a
            format version, or a known field has the wrong type or range.
    """
    doc = _load(data, "assignment", MAX_OUTCOME_BYTES)
    what = "election assignment"
    members = _field(doc, "members", _text_map, what)
    problems = _field(doc, "problems", _text_list, what)
    duplicates = _field(doc, "duplicates", _text_list, what)
    return Outcome(
        leader_member_id=_field(doc, "leader", _text, what),
        leader_identity=_field(doc, "leader_identity", _text, what),
        token=_field(doc, "token", _int64, what),
        members={} if members is None else members,
        problems=() if problems is None else problems,
        duplicates=() if duplicates is None else duplicates,
        stored_token=_field(doc, "stored_token", _int64, what),
        stored_token_exists=_field(doc, "stored_token_exists", _boolean, what) or False,
    )


# -- decoding: JSON from another member, which may be broken or hostile ------------------------

MAX_CANDIDATE_BYTES = 1 << 20
"""Member metadata longer than this (1 MiB) is rejected unread. A candidate is a few
fields and an identity; Kafka's default ``message.max.bytes`` (about 1 MB) bounds the
metadata of a whole group."""
MAX_OUTCOME_BYTES = 16 << 20
"""An assignment longer than this (16 MiB) is rejected unread. It names every member's
identity, so it grows with the group."""
MAX_DEPTH = 64
"""Deeper nesting of arrays and objects is rejected: the documents nest two levels, and
Python's JSON parser recurses per level (RecursionError, or worse with a raised limit)."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_INT_DIGITS = 20  # len(str(-(2**63))); longer literals are out of range anyway
_T = TypeVar("_T")
# Outside strings, only brackets and braces matter to the depth. A string token always
# matches (an unterminated one runs to the end), so the scan is linear in the input.
_DEPTH_TOKENS = re.compile(rb'"[^"\\]*(?:\\[\s\S][^"\\]*)*"?|[\[{\]}]')


class _Invalid(Exception):
    """A value of the wrong type or range; the caller names the field."""


def _load(data: bytes, what: str, limit: int) -> dict[str, Any]:
    try:
        raw = bytes(data)
    except TypeError:
        raise ProtocolCodecError(f"election {what} is not bytes") from None
    if len(raw) > limit:
        raise ProtocolCodecError(
            f"election {what} is {len(raw)} bytes, more than the {limit} allowed"
        )
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        raise ProtocolCodecError(f"election {what} nests deeper than {MAX_DEPTH} levels")
    try:
        doc = json.loads(
            raw.decode("utf-8"),
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except (_Invalid, ValueError, RecursionError) as e:
        # ValueError covers JSONDecodeError and UnicodeDecodeError.
        raise ProtocolCodecError(f"election {what} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolCodecError(f"election {what} is not a JSON object")
    version = doc.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProtocolCodecError(f"election {what} has no format version field 'v'")
    return doc


def _depth(raw: bytes) -> int:
    depth = deepest = 0
    for match in _DEPTH_TOKENS.finditer(raw):
        token = match[0]
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def _parse_int(literal: str) -> int:
    # Python refuses to convert more than 4300 digits with a bare ValueError; refuse
    # early what could not be in range anyway.
    if len(literal) > _MAX_INT_DIGITS:
        raise _Invalid(f"integer {literal[:24]}... is out of range")
    return int(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Invalid(f"number {literal[:24]} is out of range")
    return value


def _parse_constant(literal: str) -> float:
    raise _Invalid(f"{literal} is not a number")


def _field(doc: dict[str, Any], name: str, check: Callable[[Any], _T], what: str) -> _T | None:
    """The field's value checked by ``check``, or None if absent or null."""
    value = doc.get(name)
    if value is None:
        return None
    try:
        return check(value)
    except _Invalid as e:
        raise ProtocolCodecError(f"{what} is invalid: {name} {e}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid("has a lone surrogate escape") from None
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, got {type(value).__name__}")
    return value


def _int64(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"must be an integer, got {type(value).__name__}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _Invalid(f"{value} is out of the int64 range")
    return value


def _token(value: Any) -> int:
    # A member's tokens must leave room for a higher one: the leader picks the next token
    # as one more than the highest any member has seen.
    number = _int64(value)
    if number == _INT64_MAX:
        raise _Invalid(f"{value} leaves no room for a higher token")
    return number


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Invalid(f"must be an object, got {type(value).__name__}")
    return {_text(k): _text(v) for k, v in value.items()}


def _text_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Invalid(f"must be an array, got {type(value).__name__}")
    return tuple(_text(item) for item in value)
