"""``coordination reset-share-offsets``: where a share group starts in its partitions.

The plan (each partition's new start offset) is printed first; ``--execute`` applies it with
:meth:`GroupInspector.alter_share_group_offsets`. The earliest and latest offsets are the
partitions' log start and end, read with kafka-python's consumer (no group, no commits).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._protocol.error_codes import ErrorCode
from .errors import BrokerError, ConfigurationError, CoordinationError

Partition = tuple[str, int]


def parse_topics(specs: Sequence[str]) -> dict[str, list[int] | None]:
    """``--topic`` values: ``name`` (every partition) or ``name:0,2``.

    Raises:
        ConfigurationError: a value names no topic or lists something that is not a
            partition number.
    """
    topics: dict[str, list[int] | None] = {}
    for spec in specs:
        name, _, listed = spec.partition(":")
        if not name:
            raise ConfigurationError(f"--topic {spec!r}: give a topic name, e.g. orders:0,1")
        if not listed:
            topics[name] = None
            continue
        try:
            partitions = sorted({int(p) for p in listed.split(",")})
        except ValueError:
            partitions = [-1]
        if any(p < 0 for p in partitions):
            raise ConfigurationError(
                f"--topic {spec!r}: partitions must be numbers 0 or more, separated by commas"
            )
        topics[name] = partitions
    return topics


def plan(
    topics: dict[str, list[int] | None],
    to: str | int,
    settings: dict[str, Any],
) -> dict[Partition, int]:
    """Each partition's new start offset: ``to`` is ``"earliest"``, ``"latest"`` or an
    offset (past a partition's end, the end: Kafka refuses a start beyond it).

    Raises:
        ConfigurationError: a topic does not exist, or a listed partition is not one of it.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**settings, enable_auto_commit=False)
    try:
        wanted: list[TopicPartition] = []
        for topic, listed in topics.items():
            known = consumer.partitions_for_topic(topic)
            if not known:
                raise ConfigurationError(f"topic {topic!r} does not exist")
            missing = sorted(set(listed or ()) - known)
            if missing:
                raise ConfigurationError(
                    f"topic {topic!r} has no partition {missing} (it has 0..{max(known)})"
                )
            wanted += [TopicPartition(topic, p) for p in sorted(listed or known)]
        ends = consumer.end_offsets(wanted)
        if to == "latest":
            chosen = ends
        elif to == "earliest":
            chosen = consumer.beginning_offsets(wanted)
        else:
            assert isinstance(to, int)
            chosen = {tp: min(to, ends[tp]) for tp in wanted}
        return {(tp.topic, tp.partition): int(chosen[tp]) for tp in wanted}
    finally:
        consumer.close()


def reset_share_offsets(
    args: argparse.Namespace, connection_settings: Callable[[argparse.Namespace], dict[str, Any]]
) -> int:
    """The command: 0 when the plan was printed (and applied, with --execute), 1 otherwise."""
    from kafka.errors import KafkaError

    from ._inspection import GroupInspector

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    to: str | int = (
        "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
    )
    try:
        if isinstance(to, int) and to < 0:
            raise ConfigurationError(f"--to-offset must be 0 or more, got {to}")
        settings = connection_settings(args)
        offsets = plan(parse_topics(args.topic), to, settings)
        print(f"{'TOPIC':40s} {'PARTITION':>9s} {'NEW START OFFSET':>16s}")
        for (topic, partition), offset in sorted(offsets.items()):
            print(f"{topic:40s} {partition:>9d} {offset:>16d}")
        if not args.execute:
            print("dry run: nothing changed (add --execute to apply)")
            return 0
        with GroupInspector(**settings) as inspector:
            outcome = inspector.alter_share_group_offsets(args.group, offsets)
    except BrokerError as e:
        if e.code == ErrorCode.NON_EMPTY_GROUP:
            print(
                f"error: share group {args.group!r} still has members: close its consumers "
                "(and wait for their sessions to end) before resetting it",
                file=sys.stderr,
            )
        else:
            print(f"error: {e}", file=sys.stderr)
        return 1
    except (CoordinationError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    refused = {p: e for p, e in outcome.items() if e is not None}
    for (topic, partition), error in sorted(refused.items()):
        print(f"error: {topic}-{partition}: {error}", file=sys.stderr)
    if not refused:
        print(f"share group {args.group!r}: {len(offsets)} start offset(s) set")
    return 1 if refused else 0
