"""The rebalance listener: what a member is told when its partitions change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .protocol import TopicPartition


class RebalanceListener:
    """Callbacks for partition ownership changes; override what you need (all default to no-ops).

    The semantics are the Java client's ``ConsumerRebalanceListener``:

    * EAGER protocol: before every rejoin, :meth:`on_partitions_revoked` with everything the
      member owns; after the rebalance, :meth:`on_partitions_assigned` with everything it
      owns now.
    * COOPERATIVE protocol: after the rebalance, :meth:`on_partitions_revoked` with only the
      partitions that move away (then the member rejoins at once so that they can be given
      to their new owner), then :meth:`on_partitions_assigned` with only the added ones.
    * :meth:`on_partitions_assigned` is called after every rebalance, possibly with an
      empty set. If it raises, it is called again (after a backoff, the engine retrying
      ``on_join_complete`` with the same assignment) with the same partitions, until it
      returns or a new rebalance supersedes it; partitions still owned after that rebalance
      are then announced with its assignment.
    * If :meth:`on_partitions_revoked` or :meth:`on_partitions_lost` raises, the exception
      is logged (logger ``recipes.partitioning``) and the partitions are given up all the
      same: the recipes' one rule for a user's callback (see ``docs/partitioning.md``).
    * :meth:`on_partitions_lost` replaces "revoked" when the membership was taken away
      (session expired, fenced, generation lost): the partitions may already belong to
      another member, so nothing may be committed for them. By default it calls
      :meth:`on_partitions_revoked`, as Java's does.

    Example:
        class CommitOnRevoke(RebalanceListener):
            def __init__(self, consumer):
                self.consumer = consumer

            def on_partitions_revoked(self, partitions):
                self.consumer.commit()      # last chance to commit what was processed

    Threads:
        The callbacks run on the group's membership thread, one at a time, while the
        ownership change is held back: the partitions are still owned (and committable)
        during ``on_partitions_revoked`` and are already owned during
        ``on_partitions_assigned``. They must not call ``close()``.
    """

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions are about to be taken away; commit what was processed."""

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions are now this member's (may be empty)."""

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions were lost with the membership; do not commit them."""
        self.on_partitions_revoked(partitions)


class _Release(Protocol):
    def __call__(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None: ...


class ForwardingListener(RebalanceListener):
    """Hands ownership changes to two functions of the object that keeps the partitions.

    ``release(partitions, lost=...)`` gets revoked (``lost=False``) and lost (``lost=True``)
    partitions, ``take(partitions)`` assigned ones: the shape in which the
    :class:`~recipes.partitioning.Consumer` and the pipeline worker apply a change to their
    own state (internal).
    """

    def __init__(
        self, release: _Release, take: Callable[[frozenset[TopicPartition]], None]
    ) -> None:
        self._release = release
        self._take = take

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._release(partitions, lost=False)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._release(partitions, lost=True)

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._take(partitions)
