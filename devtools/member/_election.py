"""The ``election`` recipe (and writing while leading), and the kazoo baseline."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from ._io import Output, Stopping, group_settings, required

if TYPE_CHECKING:
    from recipes.election import Leadership


def write_while_leading(
    leadership: Leadership, topic: str, on_error: str, interval: float, emit: Output
) -> None:
    """Write records to ``topic`` through the leadership's transactional producer, checking
    the leadership before each commit, every ``interval`` seconds.

    ``on_error``: ``stop`` ends the writing at the first failure; after a deposition it
    tries once more, so that ``check()`` reports it (``check_failed``). ``zombie`` does the
    same, but after a failed check still writes once: the broker must refuse it. ``retry``
    replaces the producer after any failure but losing the leadership (fenced, timed out,
    broker gone: a new producer fences whatever the old one left behind), and ends as soon
    as the leadership is lost.
    """
    from recipes.election import NotLeaderError

    producer: Any = None
    seq = 0
    try:
        while not (on_error == "retry" and leadership.lost.is_set()):
            if producer is None:
                try:
                    producer = leadership.transactional_producer()
                except Exception as e:  # deposed meanwhile, or a broker fault
                    emit("producer_failed", token=leadership.token, error=repr(e)[:300])
                    if on_error != "retry" or isinstance(e, NotLeaderError):
                        return
                    leadership.lost.wait(1.0)
                    continue
                emit("producer_ready", token=leadership.token)
            try:
                producer.begin_transaction()
                record = {"token": leadership.token, "identity": leadership.identity, "seq": seq}
                producer.send(topic, json.dumps({**record, "t": emit.clock()}).encode())
                checked_at = emit.clock()
                leadership.check()
                producer.commit_transaction()
                acked = emit.clock()
                emit("wrote", token=leadership.token, seq=seq, checked_at=checked_at, acked=acked)
                seq += 1
            except NotLeaderError as e:
                emit("check_failed", token=leadership.token, reason=str(e))
                if on_error == "zombie":
                    _zombie_write(producer, topic, leadership, emit)
                else:
                    with contextlib.suppress(Exception):
                        producer.abort_transaction()
                return
            except Exception as e:
                emit(
                    "write_rejected",
                    token=leadership.token,
                    seq=seq,
                    error=type(e).__name__,
                    detail=repr(e)[:300],
                )
                if on_error != "retry":
                    return
                with contextlib.suppress(Exception):
                    producer.close(timeout=1)
                producer = None
                seq += 1
            # Deposed between writes: the next round's check() reports it (or, retrying,
            # the loop ends).
            leadership.lost.wait(interval)
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=1)


def _zombie_write(producer: Any, topic: str, leadership: Leadership, emit: Output) -> None:
    """Write as if still leader, ignoring the check: the broker must refuse it."""
    try:
        with contextlib.suppress(Exception):  # still inside the transaction the check stopped
            producer.begin_transaction()
        producer.send(topic, json.dumps({"token": leadership.token, "zombie": True}).encode())
        producer.commit_transaction()
        emit("zombie_write_accepted", token=leadership.token)
    except Exception as e:
        emit("write_rejected", token=leadership.token, error=type(e).__name__)


def run_election(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from recipes.election import LeaderElection, LeaderInfo

    writers: list[threading.Thread] = []

    def on_elected(leadership: Leadership) -> None:
        emit("elected", token=leadership.token, generation=leadership.generation_id)
        if args.topic:
            writer = threading.Thread(
                target=write_while_leading,
                args=(leadership, args.topic, args.on_write_error, args.interval, emit),
                daemon=True,
            )
            writers.append(writer)
            writer.start()

    def on_deposed(leadership: Leadership) -> None:
        emit(
            "deposed",
            token=leadership.token,
            generation=leadership.generation_id,
            reason=leadership.reason,
        )

    def on_leader_change(info: LeaderInfo | None) -> None:
        emit(
            "leader",
            identity=info.identity if info else None,
            token=info.token if info else None,
        )

    election = LeaderElection(
        args.group,
        identity=required(args, "name"),
        eligible=not args.ineligible,
        priority=args.priority,
        on_elected=on_elected,
        on_deposed=on_deposed,
        on_leader_change=on_leader_change,
        bootstrap_servers=args.bootstrap,
        **group_settings(args),
    )
    election.start()
    emit("up", pid=os.getpid())
    # Polled rather than taken from on_leader_change: that fires only when the leader
    # changes, and a benchmark also needs to see a new member counted by everyone.
    view: tuple[str | None, int] | None = None
    while not stopping.wait(0.02 if args.views else None):
        info = election.leader()
        now = (info.identity if info else None, len(election.members()))
        if now != view:
            view = now
            emit("view", leader=now[0], members=now[1])
    election.close()
    for writer in writers:
        writer.join(5)
    emit("closed")


def run_kazoo_election(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    from kazoo.client import KazooClient

    timeout_s = (args.session_timeout_ms or 6000) / 1000
    client = KazooClient(hosts=args.bootstrap, timeout=timeout_s)
    client.start(timeout=30)
    election = client.Election(args.group, required(args, "name"))

    def lead() -> None:
        emit("elected")
        stopping.wait()

    contender = threading.Thread(target=election.run, args=(lead,), daemon=True)
    contender.start()
    emit("up", pid=os.getpid())
    stopping.wait()
    # A leader's lead() returns now and run() deletes its lock node; a follower still
    # waiting to be elected withdraws.
    election.cancel()
    contender.join(10)
    client.stop()
    client.close()
    emit("closed")
