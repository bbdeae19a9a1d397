"""The lean fetcher's check of a partition's position after its leader changed (KIP-320).

A partition's records carry the leader epoch they were written under. When the partition
gets a new leader (a higher leader epoch), the records this side fetched from the old one
may not be in the new leader's log: after an unclean leader election, the new leader's log
ends that epoch earlier, and the offsets past that end hold other records, or none yet.
Before fetching from the new leader, the fetcher asks it (OffsetForLeaderEpoch) where the
epoch of the last record it fetched ends, as Kafka's consumer does:

* at or past the fetch offset: nothing this side read was lost; fetch on;
* before it: the log was truncated there. The fetcher goes back to that offset (it drops
  what it buffered beyond it); if records past it were handed out already and
  ``auto_offset_reset`` is ``"none"``, the partition's next poll raises instead (the
  application decides where to go on: ``seek``);
* unknown (the leader knows no such epoch): the position is reset per
  ``auto_offset_reset``, as for an offset out of range.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ..errors import CoordinationError, broker_error
from ..transport import TransportError
from . import classify
from .classify import Outcome
from .cluster import Cluster, Partition
from .settings import FetchSettings

log = logging.getLogger("coordination.fetching")

P = TypeVar("P", bound=tuple[str, int])
# A leader that was not asked (reconnecting) or did not answer: asked again after a backoff.
NO_ANSWER = -1000
# A partition's ``retry_at`` after a truncation it cannot go on from: not fetched (nor
# checked) until the application seeks it.
UNTIL_SEEK = float("inf")


class Checked(Protocol):
    """What a check reads and changes of a partition's state (the engine's ``_Part``)."""

    position: int | None
    fetch_offset: int | None
    retry_at: float
    fetched_epoch: int | None  # the leader epoch of the last record fetched
    leader_epoch: int | None  # the leader epoch last fetched from or checked under


def unchecked(part: Checked, leader_epoch: int) -> bool:
    """Whether ``part``'s leader changed (``leader_epoch`` is higher) since it was last
    fetched from or checked, with records fetched under a known epoch: its position is
    checked before the next Fetch."""
    return (
        part.fetched_epoch is not None
        and part.leader_epoch is not None
        and leader_epoch > part.leader_epoch
        and part.fetch_offset is not None
    )


def check_positions(
    cluster: Cluster,
    parts: Mapping[P, Checked],
    errors: dict[P, Exception],
    set_position: Callable[[Any, int | None], None],
    *,
    now: float,
    backoff_s: float,
    reconnecting: Callable[[int], bool],
    timeout_s: float,
    settings: FetchSettings,
) -> tuple[bool, CoordinationError | None]:
    """Check the partitions of ``parts`` whose leader changed, with their leaders (see the
    module's docstring): each stays unfetched until its check is answered (a failed one is
    asked again after ``backoff_s``); one whose check refused it gets its error in
    ``errors``. Whether the leaders must be looked up again, and an error that stops the
    fetcher (a connection the settings cannot make)."""
    leaders = cluster.metadata.leaders
    by_node: dict[int, dict[Partition, tuple[int, int]]] = {}
    asked: dict[Partition, P] = {}
    for p, part in parts.items():
        leader = leaders.get((p[0], p[1]))
        if leader is None or part.retry_at > now or not unchecked(part, leader[1]):
            continue
        assert part.fetched_epoch is not None
        by_node.setdefault(leader[0], {})[(p[0], p[1])] = (part.fetched_epoch, leader[1])
        asked[(p[0], p[1])] = p
    stale, stop = False, None
    for node, partitions in by_node.items():
        answers: dict[Partition, tuple[int, int, int]] = {}
        if not reconnecting(node):
            try:
                answers = cluster.epoch_ends(node, partitions, timeout_s)
            except TransportError as e:
                log.warning("fetcher: OffsetForLeaderEpoch from broker %d failed: %s", node, e)
                stale = True
                if e.fatal:
                    stop = e.stop_error("the lean fetcher checking positions")
        for key, (_, current) in partitions.items():
            p, part = asked[key], parts[asked[key]]
            code, epoch, end = answers.get(key, (NO_ANSWER, -1, -1))
            outcome = classify.partition_outcome(code) if code != NO_ANSWER else Outcome.RETRY
            if outcome is Outcome.NONE:
                _checked(p, part, epoch, end, current, errors, set_position, settings)
            elif outcome is Outcome.FATAL:
                errors[p] = broker_error(
                    code, group_id=settings.group_id, api=f"OffsetForLeaderEpoch of {p[0]}-{p[1]}"
                )
                part.retry_at = now + backoff_s  # raised by each poll, asked again meanwhile
            else:
                stale = stale or outcome is Outcome.REFRESH
                part.retry_at = now + backoff_s
    return stale, stop


def _checked(
    p: P,
    part: Checked,
    epoch: int,
    end: int,
    current: int,
    errors: dict[P, Exception],
    set_position: Callable[[Any, int | None], None],
    settings: FetchSettings,
) -> None:
    """Act on a leader's answer: the epoch of the last record fetched ends at ``end`` in its
    log (-1 with ``epoch`` -1: it knows no such epoch)."""
    assert part.position is not None and part.fetch_offset is not None
    if end >= part.fetch_offset and epoch >= 0:
        part.leader_epoch = current  # nothing fetched was lost: fetch on
        return
    known = end >= 0 and epoch >= 0
    if (not known or end < part.position) and settings.auto_offset_reset == "none":
        lost = f"truncated at {end}" if known else "truncated: its leader knows no epoch"
        errors[p] = broker_error(
            classify.OFFSET_OUT_OF_RANGE,
            group_id=settings.group_id,
            api=f"Fetch of {p[0]}-{p[1]}: the log was {lost} below the position "
            f"{part.position} (an unclean leader election; auto_offset_reset is 'none': "
            "seek to go on)",
        )
        part.retry_at = UNTIL_SEEK
        return
    where = "there" if known else f"the {settings.auto_offset_reset}"
    log.warning(
        "fetcher: %s-%d's log was truncated at %d (an unclean leader election); fetching from %s",
        p[0],
        p[1],
        end,
        where,
    )
    set_position(part, min(part.position, end) if known else None)
