"""The ``shares`` recipe: a pool of members, each given a contiguous share of a topic's
partitions, that a benchmark starts and stops on command (it keeps the process across
groups, so that a member's start does not include Python's)."""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata

from ._io import Output, Stopping, group_settings

# How long ``stop`` lets each member take to leave its group.
CLOSE_TIMEOUT_S = 60.0


def range_split(partitions: int, members: int) -> list[list[int]]:
    """Partitions 0..partitions-1 in contiguous shares, the first ones one larger."""
    share, extra = divmod(partitions, members)
    shares = []
    start = 0
    for i in range(members):
        size = share + (1 if i < extra else 0)
        shares.append(list(range(start, start + size)))
        start += size
    return shares


class RangeShares(Coordinator):
    """A member that gets a contiguous share of ``topic``'s ``partitions``; reports each
    completed rebalance as ``on_assigned(generation, time.perf_counter())``."""

    def __init__(
        self,
        group_id: str,
        *,
        topic: str,
        partitions: int,
        on_assigned: Callable[[int, float], None],
        **settings: Any,
    ) -> None:
        super().__init__(group_id, **settings)
        self._topic = topic
        self._partitions = partitions
        self._on_assigned = on_assigned

    def protocol_type(self) -> str:
        # Not "consumer": the broker must not take this for a consumer group.
        return "join-latency"

    def metadata(self) -> list[ProtocolMetadata]:
        # Like a consumer's subscription: the topic it wants a share of.
        return [ProtocolMetadata("range", self._topic.encode())]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ids = sorted(m.member_id for m in members)
        shares = range_split(self._partitions, len(ids))
        return {
            mid: ",".join(map(str, share)).encode() for mid, share in zip(ids, shares, strict=True)
        }

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self._on_assigned(generation, time.perf_counter())


def run_shares(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    """Commands (stdin): ``start GROUP INDEX...`` starts members with these indices (answers
    ``started``); ``join GROUP INDEX`` answers ``t0`` (its ``t`` the moment before), then
    starts that member; ``stop`` closes every member, in parallel (answers ``stopped``).
    Each member reports ``assigned {member, generation}``, ``t`` read in its
    ``on_join_complete``."""
    members: list[RangeShares] = []
    # kafka-python logs cancelled requests on close as errors; a member that really fails
    # shows up as a slow or failed run.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

    def start(group: str, index: int) -> None:
        def on_assigned(generation: int, at: float) -> None:
            emit("assigned", member=index, generation=generation, t=at)

        member = RangeShares(
            group,
            topic=args.topic,
            partitions=args.partitions,
            on_assigned=on_assigned,
            bootstrap_servers=args.bootstrap,
            **group_settings(args),
        )
        members.append(member)
        member.start()

    def stop() -> None:
        closing = [
            threading.Thread(target=m.close, args=(CLOSE_TIMEOUT_S,), daemon=True) for m in members
        ]
        for t in closing:
            t.start()
        for t in closing:
            t.join(CLOSE_TIMEOUT_S + 5)
        members.clear()

    emit("up", pid=os.getpid())
    for command, *words in iter(stopping.next_command, None):
        if command == "start":
            group, *indices = words
            for index in indices:
                start(group, int(index))
            emit("started")
        elif command == "join":
            group, index = words
            emit("t0")
            logging.getLogger(__name__).debug("t0 member %s joins", index)
            start(group, int(index))
        elif command == "stop":
            stop()
            emit("stopped")
        else:
            emit("unknown_command", command=command)
    stop()
    emit("closed")
