"""An elected member leads only once its token is stored in the group's offsets.

The group member's offset calls are replaced by an in-memory store whose commits can be
refused or lose their answer, so every outcome of the commit is covered without a broker.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from coordination import Generation, Member, OffsetAndMetadata
from coordination.errors import CommitFailedError, CoordinationTimeoutError
from recipes.election import LeaderElection, Leadership
from recipes.election._wire import (
    Candidate,
    Outcome,
    decode_candidate,
    decode_outcome,
    encode_candidate,
    encode_outcome,
)

WHERE = ("__consumer_offsets", 0)
GENERATION = 7
MEMBER = "m-1"
ILLEGAL_GENERATION = 22


class Offsets:
    """The group's committed offsets, and what happens to the next commit."""

    def __init__(self, stored: int | None = None) -> None:
        self.stored = {WHERE: OffsetAndMetadata(stored, "")} if stored is not None else {}
        self.commit_fails: Exception | None = None
        self.applied_despite_failure = False
        self.commits: list[tuple[int, int]] = []
        self.timeouts: list[float] = []
        self.rejoins: list[str] = []
        self.reads = 0

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], *, timeout: float = 30.0
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        self.reads += 1
        return {p: self.stored.get(p) for p in partitions}

    def commit_offsets(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
        *,
        generation: Generation | None = None,
        timeout: float = 30.0,
    ) -> None:
        assert generation is not None and generation.generation_id == GENERATION
        (om,) = offsets.values()
        self.commits.append((generation.generation_id, om.offset))
        self.timeouts.append(timeout)
        if self.commit_fails is None or self.applied_despite_failure:
            self.stored.update(offsets)
        if self.commit_fails is not None:
            raise self.commit_fails


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[LeaderElection, Offsets, list[Leadership]]:
    elected: list[Leadership] = []
    election = LeaderElection(
        "g",
        identity="http://a",
        on_elected=elected.append,
        bootstrap_servers="localhost:9092",
        heartbeat_interval_ms=3_000,  # the lease margin the tests count with
        retry_backoff_ms=1,
        retry_backoff_max_ms=1,
    )
    offsets = Offsets()
    coordinator: Any = election.coordinator
    monkeypatch.setattr(coordinator, "committed_offsets", offsets.committed_offsets)
    monkeypatch.setattr(coordinator, "commit_offsets", offsets.commit_offsets)
    monkeypatch.setattr(coordinator, "generation", lambda: Generation(GENERATION, MEMBER, "x"))
    monkeypatch.setattr(coordinator, "membership_lease", lambda: 30.0)
    monkeypatch.setattr(coordinator, "request_rejoin", offsets.rejoins.append)
    return election, offsets, elected


def elect(election: LeaderElection, token: int, stored_token: int | None = None) -> None:
    """This member receives an assignment that names it leader with ``token``; the rebalance
    leader read ``stored_token`` (None: an older version that does not say)."""
    outcome = Outcome(
        MEMBER,
        election.identity,
        token,
        {MEMBER: election.identity},
        stored_token=stored_token,
        stored_token_exists=stored_token is not None and stored_token >= 0,
    )
    election._elector.joined(GENERATION, MEMBER, encode_outcome(outcome))


def test_the_token_is_stored_fenced_by_the_generation_before_on_elected(setup) -> None:
    election, offsets, elected = setup
    elect(election, 12)
    assert offsets.commits == [(GENERATION, 12)]
    assert [e.token for e in elected] == [12] and election.is_leader
    assert offsets.stored[WHERE].offset == 12


def test_a_refused_commit_means_not_leader(setup) -> None:
    election, offsets, elected = setup
    offsets.commit_fails = CommitFailedError(ILLEGAL_GENERATION, group_id="g")
    elect(election, 12)
    assert elected == [] and not election.is_leader and election.leadership() is None


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "lost"])
def test_an_unknown_outcome_leads_only_if_reading_back_finds_the_token(setup, applied) -> None:
    election, offsets, elected = setup
    offsets.commit_fails = CoordinationTimeoutError("OffsetCommit did not complete in time")
    offsets.applied_despite_failure = applied
    elect(election, 12)
    assert election.is_leader is applied
    assert [e.token for e in elected] == ([12] if applied else [])
    # Not leading, it makes the group elect again; the token it saw is advertised, so the
    # next one is higher.
    assert bool(offsets.rejoins) is not applied
    assert election._elector.highest_token() == 12


def test_a_token_equal_to_the_generation_leads_before_it_is_stored(setup) -> None:
    # The group has a stored token (5), so it keeps its generations however long it is empty;
    # the broker stored generation 7 before answering the SyncGroup, and every later token
    # is at least its generation id: 7 is unique unstored. Stored after, refused or not.
    election, offsets, _ = setup
    commits_seen: list[int] = []
    election._elector.callbacks = dataclasses.replace(
        election._elector.callbacks,
        on_elected=lambda leadership: commits_seen.append(len(offsets.commits)),
    )
    offsets.commit_fails = CommitFailedError(ILLEGAL_GENERATION, group_id="g")
    elect(election, GENERATION, stored_token=5)
    assert commits_seen == [0] and election.is_leader
    assert offsets.commits == [(GENERATION, GENERATION)] and offsets.reads == 0
    assert not offsets.rejoins  # a refused store after the fact changes nothing


def test_the_store_after_waits_no_longer_than_the_lease(setup, monkeypatch) -> None:
    # It runs on the membership thread, which must answer the next rebalance in time.
    election, offsets, _ = setup
    monkeypatch.setattr(election.coordinator, "membership_lease", lambda: 5.0)
    elect(election, GENERATION, stored_token=5)
    # The lease's 5 s less its margin (the heartbeat interval, 3 s), below the request timeout.
    assert election.is_leader and offsets.timeouts == [pytest.approx(2.0)]


@pytest.mark.parametrize(
    ("token", "stored"),
    [(GENERATION, -1), (GENERATION, None), (GENERATION + 5, 5)],
    ids=["the group's first", "an older rebalance leader", "above the generation"],
)
def test_otherwise_a_token_is_stored_before_it_leads(setup, token, stored) -> None:
    # Without a stored token the group, once empty, is deleted within minutes and its
    # generations start over; a token above its generation id is remembered only stored.
    election, offsets, elected = setup
    offsets.commit_fails = CommitFailedError(ILLEGAL_GENERATION, group_id="g")
    elect(election, token, stored_token=stored)
    assert offsets.commits == [(GENERATION, token)]
    assert elected == [] and not election.is_leader


def test_a_token_not_above_the_stored_one_is_not_taken_up(setup) -> None:
    # Elected by a rebalance leader that did not read the stored token (an older version).
    election, offsets, elected = setup
    offsets.stored[WHERE] = OffsetAndMetadata(40, "")
    elect(election, 12)
    assert elected == [] and offsets.commits == [] and offsets.rejoins
    assert election._elector.highest_token() == 40  # the next election goes above it


def test_the_rebalance_leader_reads_the_stored_token(setup) -> None:
    election, offsets, _ = setup
    offsets.stored[WHERE] = OffsetAndMetadata(40, "")
    members = [Member(MEMBER, None, encode_candidate(Candidate("http://a")))]
    plan = election._elector.assign(3, MEMBER, members)
    outcome = decode_outcome(plan[MEMBER])
    assert outcome.token == 41
    assert outcome.stored_token == 40  # so the elected member need not read it again
    assert outcome.stored_token_exists
    del offsets.stored[WHERE]
    outcome = decode_outcome(election._elector.assign(4, MEMBER, members)[MEMBER])
    assert outcome.stored_token == -1 and not outcome.stored_token_exists


OTHER = "m-2"


def handed(election: LeaderElection, generation: int, token: int | None, stored: int | None):
    """This member is handed the outcome of ``generation``: another member leads with
    ``token`` (None: nobody leads), and the stored token was ``stored`` at its start."""
    leader = OTHER if token is not None else None
    identities = {MEMBER: election.identity, OTHER: "http://b"}
    outcome = Outcome(
        leader,
        "http://b" if leader else None,
        token,
        identities,
        stored_token=stored,
        stored_token_exists=stored is not None and stored >= 0,
    )
    election._elector.joined(generation, MEMBER, encode_outcome(outcome))


def assign_as_rebalance_leader(election: LeaderElection, generation: int) -> Outcome:
    members = [Member(MEMBER, None, encode_candidate(Candidate("http://a")))]
    return decode_outcome(election._elector.assign(generation, MEMBER, members)[MEMBER])


@pytest.mark.parametrize("token", [30, None], ids=["leader", "no leader"])
def test_the_rebalance_leader_knows_the_stored_token_from_the_previous_outcome(
    setup, token
) -> None:
    # Between generations 5 and 6 only generation 5's elected member could commit, and only
    # its token (30): the stored token is 30 if that commit landed, else still 20.
    election, offsets, _ = setup
    handed(election, 5, token, stored=20)
    outcome = assign_as_rebalance_leader(election, 6)
    assert offsets.reads == 0  # one round trip fewer on every handoff
    expected = 20 if token is None else 30
    assert outcome.stored_token == expected and outcome.token == expected + 1


def test_the_rebalance_leader_reads_when_it_missed_a_generation(setup) -> None:
    # Generation 5 elected someone whose token this member never saw, and who stored it.
    election, offsets, _ = setup
    offsets.stored[WHERE] = OffsetAndMetadata(40, "")
    handed(election, 4, 30, stored=20)
    outcome = assign_as_rebalance_leader(election, 6)
    assert offsets.reads == 1
    assert outcome.stored_token == 40 and outcome.token == 41


def test_the_rebalance_leader_reads_after_losing_its_place(setup) -> None:
    election, offsets, _ = setup
    offsets.stored[WHERE] = OffsetAndMetadata(40, "")
    handed(election, 5, 30, stored=20)
    election._elector.lost()  # removed from the group: it may have missed anything since
    assert assign_as_rebalance_leader(election, 6).token == 41
    assert offsets.reads == 1


def test_the_rebalance_leader_reads_when_the_previous_outcome_did_not_say(setup) -> None:
    # The previous rebalance leader was of a version that does not pass the stored token.
    election, offsets, _ = setup
    offsets.stored[WHERE] = OffsetAndMetadata(40, "")
    handed(election, 5, 30, stored=None)
    assert assign_as_rebalance_leader(election, 6).token == 41
    assert offsets.reads == 1


def test_the_rebalance_leader_reads_when_no_token_was_known_to_be_stored(setup) -> None:
    # Generation 5's leader was the group's first: its token (30) bounds the stored token,
    # but its commit may have failed, and only a read tells whether the group has offsets.
    election, offsets, _ = setup
    offsets.stored[WHERE] = OffsetAndMetadata(30, "")
    handed(election, 5, 30, stored=-1)
    outcome = assign_as_rebalance_leader(election, 6)
    assert offsets.reads == 1
    assert outcome.stored_token == 30 and outcome.stored_token_exists and outcome.token == 31


def test_the_elected_member_trusts_the_stored_token_read_in_its_generation(setup) -> None:
    election, offsets, elected = setup
    elect(election, 12, stored_token=11)
    assert offsets.reads == 0  # one round trip fewer before on_elected
    assert offsets.commits == [(GENERATION, 12)] and [e.token for e in elected] == [12]


def test_a_token_not_above_the_one_read_in_its_generation_is_not_taken_up(setup) -> None:
    election, offsets, elected = setup
    elect(election, 12, stored_token=12)
    assert elected == [] and offsets.commits == [] and offsets.rejoins


@pytest.mark.parametrize(
    ("token", "stored"), [(15, 14), (GENERATION, 5)], ids=["stored first", "stored after"]
)
def test_a_member_deposed_in_a_generation_does_not_lead_again_in_it(setup, token, stored) -> None:
    # Elected, deposed, then handed the same outcome of the same generation again: taking
    # the token up again would give two leaderships one token.
    election, offsets, elected = setup
    elect(election, token, stored_token=stored)
    first = election.leadership()
    assert first is not None
    election._elector.depose(first, "its membership lease ran out")
    elect(election, token, stored_token=stored)
    assert [e.token for e in elected] == [token] and not election.is_leader
    assert offsets.commits == [(GENERATION, token)] and offsets.rejoins
    assert decode_candidate(election._elector.metadata()).declined_token == token


def test_after_its_own_commit_in_the_generation_the_elected_member_reads_again(setup) -> None:
    # Elected with 15 (the rebalance leader read 14), its commit's answer lost and the read
    # back not finding it: not leader. The commit lands late; handed the same outcome again,
    # 14 is no longer the stored token, its own 15 is, which it must not take up unread.
    election, offsets, elected = setup
    offsets.commit_fails = CoordinationTimeoutError("OffsetCommit did not complete in time")
    elect(election, 15, stored_token=14)
    assert elected == [] and offsets.reads == 1  # the read back
    offsets.stored[WHERE] = OffsetAndMetadata(15, "")
    offsets.commit_fails = None
    elect(election, 15, stored_token=14)
    assert offsets.reads == 2
    assert elected == [] and offsets.commits == [(GENERATION, 15)]


def test_the_lease_watchdog_deposes_a_leader_whose_lease_runs_out(setup, monkeypatch) -> None:
    election, offsets, elected = setup
    deposed = threading.Event()
    election._elector.callbacks = dataclasses.replace(
        election._elector.callbacks, on_deposed=lambda leadership: deposed.set()
    )
    lease = [30.0]
    monkeypatch.setattr(election.coordinator, "membership_lease", lambda: lease[0])
    election._starting()  # the watchdog: idle until this member is elected
    try:
        elect(election, 12)
        (leadership,) = elected
        assert not deposed.wait(0.3)  # the lease holds
        lease[0] = 3.0  # no more than the margin (heartbeat_interval_ms) left
        assert deposed.wait(5)
        assert (
            leadership.reason == "its membership lease ran out: no heartbeat was confirmed in time"
        )
        assert offsets.rejoins == [f"leader deposed itself: {leadership.reason}"]
        assert not election.is_leader
    finally:
        election._elector.lease.close()
        election._elector.lease.join(5)


def test_a_token_whose_storage_cannot_be_read_is_not_taken_up(setup, monkeypatch) -> None:
    # The fault campaign: a leader deposed by its lease (token 15) was named leader with
    # token 15 again in the same generation; the read of the stored token timed out, and the
    # read-back meant for an uncertain commit of its own found 15 (stored by its earlier
    # leadership) and took it up. A member now never leads twice in one generation (tested
    # above), and an elected member that cannot read the stored token does not lead.
    election, offsets, elected = setup

    def failing_read(partitions, *, timeout=30.0):
        raise CoordinationTimeoutError("OffsetFetch did not complete in time")

    monkeypatch.setattr(election.coordinator, "committed_offsets", failing_read)
    elect(election, 15)
    assert elected == [] and not election.is_leader and offsets.commits == []
    assert offsets.rejoins and "could not read the stored token" in offsets.rejoins[-1]
    # Its rejoin says it declined 15, so the broker rebalances (new outcome, higher token)
    # instead of handing the same one back.
    assert decode_candidate(election._elector.metadata()).declined_token == 15
