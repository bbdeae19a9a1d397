"""The error table: one row per code decides the error class and every request's reaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordination import OffsetAndMetadata, errors
from coordination._engine import classify, offsets
from coordination._engine.classify import Api, Next, Reaction, Reset
from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing import messages as m

from .test_engine import OFFSETS, committed, stable_leader

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def test_every_known_code_has_one_row() -> None:
    codes = [p.code for p in classify.POLICIES]
    assert len(codes) == len(set(codes))
    assert set(codes) == set(E) - {E.NONE}


def test_key_rows() -> None:
    fenced = classify.BY_CODE[E.FENCED_INSTANCE_ID]
    assert fenced.error is errors.FencedInstanceError and not fenced.retriable
    for api in (Api.JOIN_GROUP, Api.SYNC_GROUP, Api.HEARTBEAT):
        assert classify.reaction(api, E.FENCED_INSTANCE_ID) == Reaction(Next.FATAL, Reset.MEMBER)
    assert classify.reaction(Api.OFFSET_COMMIT, E.FENCED_INSTANCE_ID) == Reaction(
        Next.FENCED_COMMIT
    )
    assert classify.reaction(Api.OFFSET_COMMIT, E.REBALANCE_IN_PROGRESS) == Reaction(
        Next.FENCED_COMMIT
    )
    assert classify.reaction(Api.OFFSET_COMMIT, E.ILLEGAL_GENERATION) == Reaction(
        Next.FENCED_COMMIT, Reset.GENERATION
    )
    assert classify.reaction(Api.OFFSET_COMMIT, E.UNKNOWN_MEMBER_ID) == Reaction(
        Next.FENCED_COMMIT, Reset.MEMBER
    )
    assert classify.reaction(Api.HEARTBEAT, E.REBALANCE_IN_PROGRESS).next is Next.REJOIN_IF_STABLE
    assert classify.reaction(Api.JOIN_GROUP, E.MEMBER_ID_REQUIRED).next is (
        Next.RETRY_WITH_MEMBER_ID
    )
    assert classify.reaction(Api.FIND_COORDINATOR, E.GROUP_AUTHORIZATION_FAILED).next is Next.FATAL
    assert classify.reaction(Api.OFFSET_FETCH, E.UNSTABLE_OFFSET_COMMIT).next is (
        Next.RETRY_BACKOFF
    )


def test_share_group_rows() -> None:
    beat, fetch, ack = Api.SHARE_GROUP_HEARTBEAT, Api.SHARE_FETCH, Api.SHARE_ACKNOWLEDGE
    # Fenced or unknown: join again at epoch 0, keeping the member id (KIP-1082).
    for code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
        assert classify.reaction(beat, code) == Reaction(Next.REJOIN, Reset.GENERATION)
    for code in (E.GROUP_MAX_SIZE_REACHED, E.UNSUPPORTED_VERSION, E.GROUP_AUTHORIZATION_FAILED):
        assert classify.reaction(beat, code).next is Next.FATAL
    assert classify.reaction(beat, E.NOT_COORDINATOR).next is Next.FIND_COORDINATOR
    assert classify.reaction(beat, 12345).next is Next.RETRY_BACKOFF
    for api in (fetch, ack):
        assert classify.reaction(api, E.NOT_LEADER_OR_FOLLOWER).next is Next.REFRESH_METADATA
        assert classify.reaction(api, E.SHARE_SESSION_NOT_FOUND).next is Next.NEW_SESSION
        assert classify.reaction(api, E.INVALID_SHARE_SESSION_EPOCH).next is Next.NEW_SESSION
        assert classify.reaction(api, E.TOPIC_AUTHORIZATION_FAILED).next is Next.FATAL
    # A lock that ran out: the caller hears of it; an unlisted ack error too.
    assert classify.reaction(ack, E.INVALID_RECORD_STATE).next is Next.RAISE
    assert classify.reaction(ack, 12345).next is Next.RAISE
    assert classify.reaction(fetch, 12345).next is Next.RETRY_BACKOFF


@pytest.mark.parametrize("code", [12345, E.UNKNOWN_SERVER_ERROR, E.GROUP_ID_NOT_FOUND])
def test_unlisted_codes_back_off_raise_or_are_ignored(code: int) -> None:
    for api in (Api.FIND_COORDINATOR, Api.JOIN_GROUP, Api.SYNC_GROUP, Api.HEARTBEAT):
        assert classify.reaction(api, code) == Reaction(Next.RETRY_BACKOFF), api
    assert classify.reaction(Api.LEAVE_GROUP, code).next is Next.IGNORE
    assert classify.reaction(Api.OFFSET_COMMIT, code).next is Next.RAISE
    assert classify.reaction(Api.OFFSET_FETCH, code).next is Next.RAISE
    assert type(errors.broker_error(code, group_id="g")) is errors.BrokerError


@pytest.mark.parametrize("api", list(Api))
def test_each_request_uses_only_reactions_its_handler_implements(api: Api) -> None:
    used = {classify.reaction(api, p.code).next for p in classify.POLICIES}
    assert used | {classify.DEFAULTS[api].next} <= classify.HANDLED[api]


def test_the_registry_is_the_tables_error_column() -> None:
    for p in classify.POLICIES:
        error = errors.broker_error(p.code, group_id="g")
        assert type(error) is p.error
        assert error.retriable is p.retriable


def test_a_code_the_engine_retries_somewhere_is_retriable_and_none_is_both() -> None:
    retry = {Next.RETRY_NOW, Next.RETRY_WITH_MEMBER_ID, Next.RETRY_BACKOFF}
    retry |= {Next.FIND_COORDINATOR, Next.REJOIN, Next.REJOIN_IF_STABLE}
    retry |= {Next.REFRESH_METADATA, Next.NEW_SESSION}
    for p in classify.POLICIES:
        listed = {r.next for api in Api if (r := p.listed(api)) is not None}
        if listed & retry:
            assert p.retriable, p.name
            assert Next.FATAL not in listed, p.name
        if Next.FATAL in listed and p.code != E.INVALID_REQUEST:
            # INVALID_REQUEST (FindCoordinator only) has no class of its own.
            assert issubclass(p.error, errors.FatalBrokerError), p.name


def test_the_docs_show_the_table_as_it_is() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## What the engine does about each code", 1)[1]
    lines = section.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("| Code |"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    expected = classify.markdown_table()
    assert "".join(lines[start:end]) == expected, (
        f"docs/errors.md's table is not the code's; replace it with:\n{expected}"
    )


def test_old_per_request_tables_are_the_listed_cells() -> None:
    assert classify.JOIN_GROUP[E.UNKNOWN_MEMBER_ID] == Reaction(Next.RETRY_NOW, Reset.MEMBER)
    assert E.REQUEST_TIMED_OUT not in classify.HEARTBEAT
    assert classify.heartbeat(E.NOT_COORDINATOR).next is Next.FIND_COORDINATOR
    assert classify.find_coordinator(E.INVALID_REQUEST).next is Next.FATAL
    assert classify.sync_group(999) == classify.UNLISTED


# ----------------------------------------------------------------- several codes in a response


COMMIT, FETCH = Api.OFFSET_COMMIT, Api.OFFSET_FETCH


@pytest.mark.parametrize(
    ("api", "codes", "deciding", "next_"),
    [
        (COMMIT, {E.NOT_COORDINATOR, E.ILLEGAL_GENERATION}, 22, Next.FENCED_COMMIT),
        (COMMIT, {E.OFFSET_METADATA_TOO_LARGE, E.NOT_COORDINATOR}, 16, Next.FIND_COORDINATOR),
        (COMMIT, {E.REQUEST_TIMED_OUT, E.TOPIC_AUTHORIZATION_FAILED}, 29, Next.RAISE),
        (COMMIT, {E.COORDINATOR_LOAD_IN_PROGRESS, E.NETWORK_EXCEPTION}, 13, Next.RETRY_BACKOFF),
        (FETCH, {E.REQUEST_TIMED_OUT, E.GROUP_AUTHORIZATION_FAILED}, 30, Next.RAISE),
        (FETCH, {E.UNSTABLE_OFFSET_COMMIT}, 88, Next.RETRY_BACKOFF),
    ],
)  # fmt: skip
def test_the_code_that_decides_a_response(
    api: Api, codes: set[int], deciding: int, next_: Next
) -> None:
    code, reaction = offsets._decide(api, codes)
    assert (code, reaction.next) == (deciding, next_)


def test_a_fenced_instance_commit_fails_and_asks_to_rejoin_without_a_reset() -> None:
    h = stable_leader()
    before = h.engine.generation
    h.prepare(committed(E.FENCED_INSTANCE_ID, 0))
    with pytest.raises(errors.CommitFailedError):
        offsets.commit(h.engine, OFFSETS, None, 5)
    assert h.engine.generation == before
    assert h.engine._rejoin_reason and "FENCED_INSTANCE_ID" in h.engine._rejoin_reason


def test_a_fetch_raises_the_code_that_failed_it_not_a_retriable_one() -> None:
    h = stable_leader()
    h.prepare(
        m.OffsetFetchResponse(
            error_code=0,
            partitions=(
                ("t", 0, -1, "", E.REQUEST_TIMED_OUT),
                ("t", 1, -1, "", E.GROUP_AUTHORIZATION_FAILED),
            ),
        )
    )
    with pytest.raises(errors.GroupAuthorizationError):
        offsets.fetch(h.engine, [("t", 0), ("t", 1)], 5)


def test_a_fetch_retries_an_unstable_offset() -> None:
    h = stable_leader()
    h.prepare(
        m.OffsetFetchResponse(
            error_code=0, partitions=(("t", 0, -1, "", E.UNSTABLE_OFFSET_COMMIT),)
        ),
        m.OffsetFetchResponse(error_code=0, partitions=(("t", 0, 7, "", 0),)),
    )
    assert offsets.fetch(h.engine, [("t", 0)], 5) == {("t", 0): OffsetAndMetadata(7)}
