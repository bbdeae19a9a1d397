"""Committing and fetching offsets in the group, fenced by the member's generation, and
reading the group as its coordinator stores it (DescribeGroups).

A commit carries the member id and generation it was made in, so the broker rejects the
commit of a member that missed a rebalance (``ILLEGAL_GENERATION``) or was removed
(``UNKNOWN_MEMBER_ID``): a member that lost its partitions can never commit over the new
owner. Those rejections surface as :class:`~coordination.errors.CommitFailedError` and make
the member rejoin, as a heartbeat with the same answer would. What a commit or fetch does
about each code is decided by the engine's error table (classify.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TypeVar

from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._types import Generation, OffsetAndMetadata
from ..errors import (
    CommitFailedError,
    CoordinationError,
    CoordinationTimeoutError,
    broker_error,
)
from ..hooks import CommitFailed
from ..transport import TransportError
from . import classify
from .classify import Api, Next, Reaction, Reset
from .core import MemberCore

log = logging.getLogger("coordination.offsets")

R = TypeVar("R", msg.OffsetCommitResponse, msg.OffsetFetchResponse, msg.DescribeGroupResponse)

# A response can carry a code per partition; the first of these reactions any code has
# decides (the lowest such code names it). Back off only if every code says so.
_PRECEDENCE = (
    Next.FENCED_COMMIT,
    Next.FENCED_FETCH,
    Next.FIND_COORDINATOR,
    Next.RAISE,
    Next.RETRY_BACKOFF,
)


def _decide(api: Api, codes: set[int]) -> tuple[int, Reaction]:
    """The code that decides a response with ``codes`` (not empty, no NONE), and the
    reaction to it, from the error table (classify.py)."""
    reactions = {code: classify.reaction(api, code) for code in codes}
    for next_ in _PRECEDENCE:
        deciding = [code for code, r in reactions.items() if r.next is next_]
        if deciding:
            return min(deciding), reactions[min(deciding)]
    raise AssertionError(f"{api.value}: no reaction for {sorted(codes)}")


def commit(
    engine: MemberCore,
    offsets: Mapping[tuple[str, int], OffsetAndMetadata],
    generation: Generation | None,
    timeout_s: float,
) -> None:
    """Commit ``offsets`` in ``generation`` (default: the current one); see Coordinator.
    A commit that fails is reported to the ``commit_failed`` hook, then raised."""
    try:
        _commit(engine, offsets, generation, timeout_s)
    except CoordinationError as e:
        error = str(e)
        engine.hooks.commit_failed(
            lambda: CommitFailed(
                group_id=engine.config.group_id,
                member_id=engine.peek_generation().member_id,
                error=error,
                partitions=len(offsets),
            ),
        )
        raise


def _commit(
    engine: MemberCore,
    offsets: Mapping[tuple[str, int], OffsetAndMetadata],
    generation: Generation | None,
    timeout_s: float,
) -> None:
    cfg = engine.config
    sent = generation or engine.generation
    if sent.generation_id < 0 or not sent.member_id:
        raise CommitFailedError(
            ErrorCode.ILLEGAL_GENERATION,
            group_id=cfg.group_id,
            member_id=sent.member_id,
            api="OffsetCommit (not sent: the member is not in a generation)",
        )
    request = msg.OffsetCommitRequest(
        group_id=cfg.group_id,
        generation_id=sent.generation_id,
        member_id=sent.member_id,
        group_instance_id=cfg.group_instance_id,
        offsets=tuple(sorted((t, p, om.offset, om.metadata) for (t, p), om in offsets.items())),
    )
    if not request.offsets:
        return
    deadline = engine.clock.monotonic() + timeout_s
    # Set once an attempt got no answer: the broker may have applied it all the same.
    maybe_applied = False
    while True:
        response = _send(engine, request, msg.OffsetCommitResponse, deadline, "OffsetCommit")
        if response is None:
            maybe_applied = True
            continue
        codes = {code for _, _, code in response.partitions if code != ErrorCode.NONE}
        if not codes:
            return
        code, reaction = _decide(Api.OFFSET_COMMIT, codes)
        if reaction.next is Next.FENCED_COMMIT:
            engine.react_to_fenced_request(sent, reaction.reset, "OffsetCommit", code)
            if maybe_applied and _landed(engine, offsets, deadline):
                # The earlier attempt was applied before the generation moved on; only its
                # answer was lost. The group holds exactly these offsets: committed.
                log.info(
                    "group %r: OffsetCommit retry refused with %s, but the earlier attempt "
                    "had been applied",
                    cfg.group_id,
                    error_name(code),
                )
                return
            raise CommitFailedError(
                code,
                group_id=cfg.group_id,
                member_id=sent.member_id,
                api="OffsetCommit"
                + (
                    " (an earlier attempt got no answer, and the group's committed offsets "
                    "are not this commit's)"
                    if maybe_applied
                    else ""
                ),
            )
        if _retried(engine, reaction, code, deadline, "OffsetCommit"):
            continue
        failed = sorted(
            f"{t}-{p}: {error_name(c)}" for t, p, c in response.partitions if c != ErrorCode.NONE
        )
        error = broker_error(
            code, group_id=cfg.group_id, member_id=sent.member_id, api="OffsetCommit"
        )
        raise type(error)(
            error.code,
            group_id=cfg.group_id,
            member_id=sent.member_id,
            api=f"OffsetCommit of {', '.join(failed)}",
        )


def _landed(
    engine: MemberCore,
    offsets: Mapping[tuple[str, int], OffsetAndMetadata],
    deadline: float,
) -> bool:
    """Whether the group's committed offsets are exactly ``offsets`` (read back to settle a
    commit whose outcome is unknown)."""
    try:
        committed = fetch(engine, offsets, max(0.1, deadline - engine.clock.monotonic()))
    except CoordinationError as e:
        log.warning(
            "group %r: could not read back the committed offsets: %s", engine.config.group_id, e
        )
        return False
    return all(committed.get(tp) == om for tp, om in offsets.items())


def fetch(
    engine: MemberCore,
    partitions: Iterable[tuple[str, int]],
    timeout_s: float,
    *,
    fenced_by_epoch: bool = False,
) -> dict[tuple[str, int], OffsetAndMetadata | None]:
    """The group's committed offsets of ``partitions`` (None where nothing is committed).

    ``fenced_by_epoch`` (a KIP-848 member): each attempt carries the member's id and its
    epoch at that moment, and the broker answers only a member whose epoch is current.
    """
    cfg = engine.config
    wanted = tuple(sorted(set(partitions)))
    if not wanted:
        return {}
    deadline = engine.clock.monotonic() + timeout_s
    while True:
        sent = engine.peek_generation()
        fenced = fenced_by_epoch and sent.generation_id > 0
        request = msg.OffsetFetchRequest(
            group_id=cfg.group_id,
            partitions=wanted,
            member_id=sent.member_id if fenced else None,
            member_epoch=sent.generation_id if fenced else -1,
        )
        response = _send(engine, request, msg.OffsetFetchResponse, deadline, "OffsetFetch")
        if response is None:
            continue
        codes = {response.error_code} | {c for *_, c in response.partitions}
        codes.discard(ErrorCode.NONE)
        if codes:
            code, reaction = _decide(Api.OFFSET_FETCH, codes)
            if reaction.next is Next.FENCED_FETCH:
                engine.react_to_fenced_request(sent, reaction.reset, "OffsetFetch", code)
                if reaction.reset is Reset.NOTHING:
                    _backoff(engine, deadline, "OffsetFetch", error_name(code))
                    continue
            elif _retried(engine, reaction, code, deadline, "OffsetFetch"):
                continue
            failed = sorted({topic for topic, *_, c in response.partitions if c})
            api = f"OffsetFetch of {', '.join(failed)}" if failed else "OffsetFetch"
            raise broker_error(code, group_id=cfg.group_id, api=api)
        result: dict[tuple[str, int], OffsetAndMetadata | None] = dict.fromkeys(wanted)
        for topic, partition, offset, metadata, _ in response.partitions:
            if offset >= 0:
                result[(topic, partition)] = OffsetAndMetadata(offset, metadata or "")
        return result


def describe(engine: MemberCore, timeout_s: float) -> msg.DescribeGroupResponse:
    """The group as its coordinator stores it now; GROUP_ID_NOT_FOUND is an answer (a group
    that does not exist), every other refusal raises."""
    group_id = engine.config.group_id
    request = msg.DescribeGroupRequest(group_id)
    deadline = engine.clock.monotonic() + timeout_s
    while True:
        response = _send(engine, request, msg.DescribeGroupResponse, deadline, "DescribeGroups")
        if response is None:
            continue
        code = response.error_code
        if code in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            return response
        if _retried(
            engine, classify.reaction(Api.DESCRIBE_GROUPS, code), code, deadline, "DescribeGroups"
        ):
            continue
        raise broker_error(code, group_id=group_id, api="DescribeGroups")


def _send(
    engine: MemberCore,
    request: msg.OffsetCommitRequest | msg.OffsetFetchRequest | msg.DescribeGroupRequest,
    response_type: type[R],
    deadline: float,
    api: str,
) -> R | None:
    """One attempt; None if it got no answer (the broker may have applied it all the same)."""
    while (node := engine.coordinator) is None:
        # Look it up here: the caller may be the membership thread itself (a callback that
        # commits or fetches offsets), which then cannot be looking for it.
        if not engine.find_coordinator(deadline):
            raise CoordinationTimeoutError(
                f"group {engine.config.group_id!r}: {api} did not complete in time "
                "(the group coordinator could not be found)"
            )
    remaining = deadline - engine.clock.monotonic()
    try:
        return engine.transport.send(
            request,
            response_type,
            coordinator=node,
            timeout_s=max(0.1, min(remaining, engine.config.request_timeout_ms / 1000)),
        )
    except TransportError as e:
        if e.fatal:
            raise e.stop_error(f"group {engine.config.group_id!r}: {api}") from e
        engine.forget_coordinator(f"{api} got no response: {e}")
        _backoff(engine, deadline, api, str(e))
        return None


def _retried(engine: MemberCore, reaction: Reaction, code: int, deadline: float, api: str) -> bool:
    """Prepare the retry the reaction asks for; False if it asks for none."""
    if reaction.next is Next.FIND_COORDINATOR:
        engine.forget_coordinator(f"{api} returned {error_name(code)}")
    elif reaction.next is not Next.RETRY_BACKOFF:
        return False
    _backoff(engine, deadline, api)
    return True


def _backoff(engine: MemberCore, deadline: float, api: str, why: str = "") -> None:
    wait_s = engine.config.retry_backoff_ms / 1000
    if engine.clock.monotonic() + wait_s > deadline:
        raise CoordinationTimeoutError(
            f"group {engine.config.group_id!r}: {api} did not complete in time"
            + (f" ({why})" if why else "")
        )
    engine.pause(wait_s)
