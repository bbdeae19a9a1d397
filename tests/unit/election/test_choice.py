"""How the election picks its leader, and what its members send each other."""

from __future__ import annotations

import random

import pytest

from coordination import Member
from coordination.errors import ConfigurationError, ProtocolCodecError
from recipes.election import LeaderElection, choose_leader
from recipes.election._wire import (
    Candidate,
    Outcome,
    decode_candidate,
    decode_outcome,
    encode_candidate,
    encode_outcome,
)


def member(member_id: str, identity: str, **kw: object) -> Member:
    return Member(member_id, None, encode_candidate(Candidate(identity, **kw)))  # type: ignore[arg-type]


def test_free_election_picks_highest_priority_then_smallest_identity() -> None:
    members = [
        member("m-a", "http://c", priority=1),
        member("m-b", "http://b", priority=1),
        member("m-c", "http://a", priority=0),
    ]
    outcome = choose_leader(7, members)
    assert (outcome.leader_member_id, outcome.leader_identity) == ("m-b", "http://b")
    assert outcome.token == 7  # the generation in which leadership began
    assert outcome.members == {"m-a": "http://c", "m-b": "http://b", "m-c": "http://a"}


def test_current_leader_keeps_leadership_and_token_whoever_joins() -> None:
    members = [
        member("m-1", "http://z", leading_token=4, highest_token=4),
        member("m-2", "http://a", priority=100, highest_token=4),  # better in a free election
    ]
    outcome = choose_leader(9, members)
    assert (outcome.leader_member_id, outcome.token) == ("m-1", 4)


def test_of_two_claims_the_newer_leadership_wins() -> None:
    # A deposed leader that has not noticed yet still claims its old token.
    members = [
        member("m-old", "http://old", leading_token=3),
        member("m-new", "http://new", leading_token=5),
    ]
    assert choose_leader(6, members).leader_member_id == "m-new"


def test_new_token_exceeds_every_token_seen_even_if_the_generation_restarted() -> None:
    # The broker forgot the group (it was empty for long), so generations restart at 1.
    members = [member("m-1", "http://a", highest_token=41), member("m-2", "http://b")]
    outcome = choose_leader(1, members)
    assert outcome.token == 42


def test_new_token_exceeds_the_stored_token_when_no_member_remembers_it() -> None:
    # Every member restarted and the broker deleted the group: generations and the members'
    # memories restart, only the token stored in the group's offsets remains.
    members = [member("m-1", "http://a"), member("m-2", "http://b", highest_token=3)]
    assert choose_leader(1, members, stored_token=57).token == 58
    # The stored token never lowers a token the generation or a member already exceeds.
    assert choose_leader(90, members, stored_token=57).token == 90
    assert choose_leader(1, members, stored_token=-1).token == 4


def test_a_claim_below_the_stored_token_is_stale_and_ignored() -> None:
    # A deposed leader that has not noticed yet, whose successor stored a newer token and left.
    members = [
        member("m-old", "http://old", leading_token=3, highest_token=3),
        member("m-b", "http://b", priority=1),
    ]
    outcome = choose_leader(9, members, stored_token=5)
    assert (outcome.leader_member_id, outcome.token) == ("m-b", 9)
    # The current leader's own claim equals the stored token: it keeps leadership and token.
    members = [member("m-1", "http://z", leading_token=5), member("m-2", "http://a", priority=9)]
    assert choose_leader(9, members, stored_token=5).token == 5


def test_ineligible_members_never_lead() -> None:
    members = [member("m-1", "http://a", eligible=False), member("m-2", "http://b")]
    assert choose_leader(2, members).leader_member_id == "m-2"
    # An ineligible member's claim (it withdrew) is ignored too.
    members = [
        member("m-1", "http://a", eligible=False, leading_token=1),
        member("m-2", "http://b"),
    ]
    assert choose_leader(2, members).leader_member_id == "m-2"


def test_no_eligible_member_means_no_leader_clearly() -> None:
    outcome = choose_leader(3, [member("m-1", "http://a", eligible=False)])
    assert outcome.leader_member_id is None and outcome.token is None
    assert any("no eligible member" in p for p in outcome.problems)


def test_duplicate_identities_are_reported_and_cannot_win_a_free_election() -> None:
    members = [
        member("m-1", "http://same"),
        member("m-2", "http://same"),
        member("m-3", "http://z"),
    ]
    outcome = choose_leader(3, members)
    assert outcome.leader_member_id == "m-3"
    assert outcome.duplicates == ("http://same",)
    assert any("m-1, m-2" in p for p in outcome.problems)


def test_a_member_with_undecodable_metadata_is_left_out_not_fatal() -> None:
    members = [Member("m-bad", None, b"\x00garbage"), member("m-ok", "http://ok")]
    outcome = choose_leader(2, members)
    assert outcome.leader_member_id == "m-ok"
    assert "m-bad" not in outcome.members
    assert any("m-bad" in p for p in outcome.problems)


def test_choice_does_not_depend_on_member_order() -> None:
    members = [member(f"m-{i}", f"http://{i % 7}-{i}", priority=i % 3) for i in range(30)]
    first = choose_leader(5, members)
    rng = random.Random(1)
    for _ in range(20):
        rng.shuffle(members)
        assert choose_leader(5, members) == first


def test_candidate_and_outcome_round_trip_and_tolerate_unknown_fields() -> None:
    c = Candidate("http://a", eligible=False, priority=-3, leading_token=None, highest_token=9)
    assert decode_candidate(encode_candidate(c)) == c
    o = Outcome("m-1", "http://a", 4, {"m-1": "http://a"}, ("p",), ("d",))
    assert decode_outcome(encode_outcome(o)) == o
    newer = b'{"v": 2, "identity": "http://x", "new_field": [1, 2]}'
    assert decode_candidate(newer) == Candidate("http://x")


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[]", b'{"identity": "x"}', b'{"v": 1}', b'{"v": 1, "identity": ""}'],
)
def test_bad_candidate_bytes_raise_a_codec_error(data: bytes) -> None:
    with pytest.raises(ProtocolCodecError, match="election member metadata"):
        decode_candidate(data)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"identity": ""}, "identity"),
        ({"identity": "x", "priority": "high"}, "priority"),
        ({"identity": "x", "priority": 2**63}, "priority must fit in 64 bits"),
        ({"identity": "x", "lease_margin_ms": -1}, "lease_margin_ms"),
        ({"identity": "x", "lease_margin_ms": 45_000}, "must be below"),
    ],
)
def test_bad_settings_are_named(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LeaderElection("g", bootstrap_servers="localhost:9092", **kwargs)  # type: ignore[arg-type]
