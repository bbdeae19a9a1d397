"""How the rebalance leader picks the group's leader: a pure, deterministic function."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from coordination import Member
from coordination.errors import ProtocolCodecError

from ._wire import Candidate, Outcome, decode_candidate

log = logging.getLogger("recipes.election")


def choose_leader(
    generation_id: int, members: Sequence[Member], *, stored_token: int = -1
) -> Outcome:
    """Pick the leader for ``generation_id`` from the members' advertised candidacies.

    ``stored_token`` is the highest token stored in the group's committed offsets (-1: none);
    it outlives the members and the group's generations, so it keeps tokens growing when no
    member remembers the last one.

    1. Sticky: a member that still holds leadership (and is eligible) keeps it with its token,
       so a rebalance caused by some other member never moves leadership. If several claim
       it (a deposed leader that has not noticed yet), the highest token wins. A claim below
       ``stored_token`` is stale (a newer leadership was stored since) and is ignored.
    2. Otherwise the eligible member of highest priority, ties broken by the smallest
       identity. Its token exceeds every token any member has seen and the stored one, and
       is at least the generation id, so tokens only grow.
    3. Members sharing an identity cannot win a free election (except the current leader,
       which keeps its place); every member is told about the duplicate.
    A member whose metadata cannot be decoded is left out and reported; it never crashes
    the rebalance leader.
    """
    candidates: dict[str, Candidate] = {}
    problems: list[str] = []
    for m in sorted(members, key=lambda m: m.member_id):
        try:
            candidates[m.member_id] = decode_candidate(m.metadata)
        except ProtocolCodecError as e:
            problems.append(f"member {m.member_id} left out: {e}")
            log.error("election: member %s left out of the election: %s", m.member_id, e)

    holders: dict[str, list[str]] = defaultdict(list)
    for member_id, c in candidates.items():
        holders[c.identity].append(member_id)
    duplicates = sorted(identity for identity, ids in holders.items() if len(ids) > 1)
    for identity in duplicates:
        problems.append(
            f"identity {identity!r} is used by members {', '.join(holders[identity])}; "
            "give every member a unique identity"
        )

    claims = [
        (c.leading_token, c.identity, member_id)
        for member_id, c in candidates.items()
        if c.eligible and c.leading_token is not None and c.leading_token >= stored_token
    ]
    identities = {member_id: c.identity for member_id, c in candidates.items()}
    if claims:
        # Highest token first; equal tokens cannot come from one rebalance, but stay
        # deterministic: smallest identity.
        token, identity, member_id = min(claims, key=lambda t: (-(t[0] or 0), t[1]))
        assert token is not None
        return Outcome(member_id, identity, token, identities, tuple(problems), tuple(duplicates))

    eligible = [
        (c.priority, c.identity, member_id)
        for member_id, c in candidates.items()
        if c.eligible and c.identity not in duplicates
    ]
    if not eligible:
        problems.append("no eligible member: the group has no leader")
        return Outcome(None, None, None, identities, tuple(problems), tuple(duplicates))
    _, identity, member_id = min(eligible, key=lambda t: (-t[0], t[1]))
    highest_seen = max(
        max(c.highest_token, c.leading_token if c.leading_token is not None else -1)
        for c in candidates.values()
    )
    token = max(generation_id, highest_seen + 1, stored_token + 1)
    return Outcome(member_id, identity, token, identities, tuple(problems), tuple(duplicates))
