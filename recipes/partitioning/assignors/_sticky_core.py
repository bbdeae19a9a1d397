"""The sticky assignment algorithm shared by ``sticky`` and ``cooperative-sticky`` (internal).

The rules are those of Kafka's ``AbstractStickyAssignor`` (clients 3.6+, KIP-792 claims);
the data layout is this module's own, built for groups of thousands of members and a
million partitions in pure Python:

* A partition is an int, its *global id*: topics are sorted by name and numbered, and
  partition ``p`` of topic ``i`` is ``offsets[i] + p``. Members are numbered in member id
  order. Hot loops touch ints and lists only, never per-partition objects; claims arrive
  as int arrays (decoded compactly) and the result stays in ids (``_IdPartitions``), so
  TopicPartition objects are made only if somebody reads them.
* A fresh assignment deals ``range(total)``: slices of a range are ranges, so no list of
  a million ids is built.
* The uniform path (every member subscribes to the same topics) deals the unassigned
  partitions round-robin in whole passes, with list slices, instead of one at a time.
* The general path finds "the least loaded member subscribed to topic t" with one heap per
  distinct subscription, keyed ``count * members + member``, so a key is one int.

Where Java's result depends on ``HashMap`` iteration order (which of several members that
own too many partitions may keep the extra one), members are taken in member id order.

Racks (KIP-881) are Java's too: when members have racks and the partitions' replicas are
on some of them but not all partitions on the same racks, a member keeps only claimed
partitions with a replica on its rack, and unassigned partitions go first to members on
one of their racks, within the same balance. That path (``_assign_uniform_racks``, and
the rack pass of the general builder) is written plainly, one partition at a time.
"""

from __future__ import annotations

import abc
import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import add, itemgetter
from typing import ClassVar, NamedTuple

from coordination.errors import AssignmentError

from ..protocol import (
    Assignment,
    Subscription,
    TopicPartition,
    _GroupedPartitions,
    _IdPartitions,
    _PartitionSpace,
)
from .base import PartitionAssignor, PartitionRacks, gc_paused, subscribed_partition_counts

__all__ = ["AbstractStickyAssignor", "MemberClaim", "sticky_assign"]

_partition_of = itemgetter(1)


class MemberClaim(NamedTuple):
    """What a member says it owned, and since which generation (-1: unknown)."""

    partitions: Sequence[TopicPartition]
    generation: int


class _Layout(_PartitionSpace):
    """The subscribed topics as a partition space, and claims converted to its ids."""

    __slots__ = ("base", "index", "smallest")

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__(list(counts), list(counts.values()))
        self.base = dict(zip(self.topics, self.offsets, strict=True))
        self.index = {topic: i for i, topic in enumerate(self.topics)}
        self.smallest = min(self.counts, default=0)

    def topic_of(self, gid: int) -> int:
        return bisect_right(self.offsets, gid) - 1

    def to_ids(self, partitions: Sequence[TopicPartition]) -> list[int]:
        """Global ids of the partitions that exist, in the claim's order.

        A claim on a topic outside the layout, or on a partition number outside
        ``0 <= p < count``, is dropped: ``base + p`` of such a claim would name another
        topic's partition.
        """
        if not partitions:
            return []
        base = self.base
        if isinstance(partitions, (_GroupedPartitions, _IdPartitions)):
            # Decoded claims: topic runs and an array of numbers, no objects to unpack.
            names, sizes, numbers = partitions.runs()
            try:
                bases = list(map(base.__getitem__, names))
            except KeyError:
                return self._checked_ids(zip(partitions.topics(), numbers, strict=True))
            if min(numbers) < 0 or max(numbers) >= self.smallest:
                return self._checked_ids(zip(partitions.topics(), numbers, strict=True))
            return list(map(add, numbers, chain.from_iterable(map(repeat, bases, sizes))))
        try:
            ids = [base[t] + p for t, p in partitions]
        except KeyError:
            return self._checked_ids(partitions)
        numbers = list(map(_partition_of, partitions))
        if min(numbers) < 0 or max(numbers) >= self.smallest:
            return self._checked_ids(partitions)
        return ids

    def _checked_ids(self, partitions: Iterable[tuple[str, int]]) -> list[int]:
        # Rare: a claim on a topic that is gone or has fewer partitions now, or a hostile
        # one.
        index = self.index
        counts = self.counts
        base = self.base
        return [base[t] + p for t, p in partitions if t in index and 0 <= p < counts[index[t]]]

    def pt_key(self, gid: int) -> tuple[int, int]:
        """Java's order for trimming owned partitions: by partition number, then topic."""
        t = self.topic_of(gid)
        return (gid - self.offsets[t], t)


def _resolve_claims(
    claims: list[list[int]], generations: list[int]
) -> tuple[list[list[int]], set[int]]:
    """Apply KIP-792's rules to the members' claims.

    A partition claimed by one member belongs to it. Claimed by several, it belongs to
    the one with the highest generation; if two or more share the highest generation,
    no claim is valid and the partition is returned in the second set ("multiply
    claimed": somebody may still hold it, so cooperative rebalancing must not hand it to
    a new owner in this round).

    Returns:
        Each member's valid claims (in its own order, duplicates dropped), and the
        multiply claimed partitions.
    """
    total = sum(len(c) for c in claims)
    if len(set(chain.from_iterable(claims))) == total:
        return claims, set()
    best: dict[int, int] = {}
    holder: dict[int, int] = {}
    for member, ids in enumerate(claims):
        generation = generations[member]
        for gid in set(ids):
            seen = best.get(gid)
            if seen is None or generation > seen:
                best[gid] = generation
                holder[gid] = member
            elif generation == seen:
                holder[gid] = -1
    owned: list[list[int]] = []
    for member, ids in enumerate(claims):
        mine = [gid for gid in dict.fromkeys(ids) if holder[gid] == member]
        owned.append(mine)
    return owned, {gid for gid, member in holder.items() if member == -1}


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, MemberClaim],
    *,
    cooperative: bool,
    partition_racks: PartitionRacks | None = None,
) -> dict[str, Assignment]:
    """Balanced, sticky assignment; with ``cooperative``, no partition changes hands directly.

    Args:
        partitions_per_topic: partition count of each known topic.
        subscriptions: each member id's subscription.
        claims: each member id's previously owned partitions and their generation.
        cooperative: withhold partitions that would move from a member that still owns
            them (or that several members claim); they are assigned in the next round.
        partition_racks: the racks of each partition's replicas, per topic (KIP-881);
            used with the members' ``rack_id`` as Java does (module docstring).

    Returns:
        Each member id's assignment, partitions sorted.

    Raises:
        ConfigurationError: a partition count is negative.
        AssignmentError: the algorithm ran out of members to fill (a bug).
    """
    with gc_paused():
        return _sticky_assign(
            partitions_per_topic, subscriptions, claims, cooperative, partition_racks
        )


class AbstractStickyAssignor(PartitionAssignor):
    """What ``sticky`` and ``cooperative-sticky`` share: one :meth:`assign` (Java's name).

    A subclass says how a member's claim is read from its subscription (:meth:`_claim`)
    and whether partitions change hands in two rounds (:attr:`_cooperative`).
    """

    rack_aware = True

    _cooperative: ClassVar[bool]
    """Withhold partitions that would move from a member still owning them (KIP-429)."""

    @staticmethod
    @abc.abstractmethod
    def _claim(subscription: Subscription) -> MemberClaim:
        """What the member says it owned, and since which generation."""

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, Assignment]:
        """Balanced, sticky assignment from the members' claims.

        Args:
            partitions_per_topic: partition count of each known topic.
            subscriptions: each member id's subscription.
            partition_racks: the racks of each partition's replicas, per topic
                (KIP-881); with members' ``rack_id``, partitions go to members on one
                of their racks where balance allows, as Java's assignor does.

        Returns:
            Each member id's assignment, partitions sorted. The cooperative assignor
            withholds partitions still owned elsewhere: they are in nobody's assignment.

        Raises:
            ConfigurationError: a partition count is negative.
        """
        with gc_paused():
            claims = {member: self._claim(sub) for member, sub in subscriptions.items()}
            return sticky_assign(
                partitions_per_topic,
                subscriptions,
                claims,
                cooperative=self._cooperative,
                partition_racks=partition_racks,
            )


def _sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, MemberClaim],
    cooperative: bool,
    partition_racks: PartitionRacks | None = None,
) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    if not members:
        return {}
    layout = _Layout(subscribed_partition_counts(partitions_per_topic, subscriptions))
    generations = [claims[m].generation for m in members]
    raw = [layout.to_ids(claims[m].partitions) for m in members]
    owned, multiply_claimed = _resolve_claims(raw, generations)

    first = subscriptions[members[0]].topics
    first_set = frozenset(first)
    uniform = all(
        s.topics == first or frozenset(s.topics) == first_set
        for s in (subscriptions[m] for m in members)
    )
    member_racks = [subscriptions[m].rack_id or None for m in members]
    racks = _Racks.build(layout, member_racks, partition_racks)
    result: list[Sequence[int]]
    if uniform:
        if racks is None:
            result, transferring = _assign_uniform(layout, owned, multiply_claimed)
        else:
            result, transferring = _assign_uniform_racks(layout, owned, multiply_claimed, racks)
        if not cooperative:
            transferring = set()
    else:
        general = _GeneralBuilder(
            layout, members, subscriptions, owned, raw, generations, racks
        ).build()
        transferring = _transferring(raw, general) if cooperative else set()
        for mine in general:
            mine.sort()
        result = list(general)

    # The output stays in ids: TopicPartition objects are made only if somebody reads
    # them, and encode_assignment writes the ids' bytes directly.
    out: dict[str, Assignment] = {}
    for member, ids in zip(members, result, strict=True):
        if transferring:
            ids = [gid for gid in ids if gid not in transferring]
        out[member] = Assignment(_IdPartitions(layout, ids))
    return out


def _transferring(claims: list[list[int]], result: list[list[int]]) -> set[int]:
    """Partitions given to a member other than one that claims it still (Java's general path).

    Java computes these from the claims as sent, stale ones included: a partition any
    member says it owns and is not kept by that member is "revoked"; revoked partitions
    given to someone else wait for the next round.
    """
    revoked: set[int] = set()
    added: set[int] = set()
    for ids, assigned in zip(claims, result, strict=True):
        mine = set(ids)
        got = set(assigned)
        revoked.update(mine - got)
        added.update(got - mine)
    return added & revoked


# -- uniform subscriptions ----------------------------------------------------------------------


def _assign_uniform(
    layout: _Layout, owned: list[list[int]], multiply_claimed: set[int]
) -> tuple[list[Sequence[int]], set[int]]:
    """Java's ``ConstrainedAssignmentBuilder`` without racks: every member, same topics.

    1. Each member keeps what it owns, up to its quota: all if below ``min_quota``;
       ``max_quota`` while fewer than ``P % M`` members have been given the extra one;
       else ``min_quota``. What it must give up is "maybe revoked".
    2. The rest is dealt round-robin, sorted by topic and partition, first to the members
       below ``min_quota`` (in member id order, pass after pass), then one each to the
       members at ``min_quota`` that may still take the extra partition.

    Returns:
        Each member's partitions in ascending order, and those moving away from a member
        that still owns them (maybe revoked and given to another, or multiply claimed).
    """
    total = layout.total
    count = len(owned)
    min_quota = total // count
    maybe_revoked: dict[int, int] = {}
    free = bytearray(b"\x01") * total
    kept, under, exact, _ = _keep_claims(layout, owned, min_quota, maybe_revoked)
    for keep in kept:
        for gid in keep:
            free[gid] = 0

    sizes = [len(k) for k in kept]
    # Nothing kept (a fresh assignment): every partition is pending, and a slice of a
    # range is a range, so dealing a million partitions makes no list at all.
    pending: Sequence[int] = range(total) if not any(sizes) else list(compress(range(total), free))
    dealt: list[list[Sequence[int]]] = [[] for _ in range(count)]
    remaining = len(pending)
    at = 0
    # Whole passes over the members below min_quota: member j of the pass gets every
    # len(under)-th partition, which is what dealing one at a time would give it.
    while under and at < remaining:
        width = len(under)
        deficit = min(min_quota - sizes[m] for m in under)
        passes = min(deficit, (remaining - at) // width)
        if passes:
            stop = at + passes * width
            for j, member in enumerate(under):
                dealt[member].append(pending[at + j : stop : width])
                sizes[member] += passes
            at = stop
        else:
            for member, gid in zip(under, pending[at:], strict=False):
                dealt[member].append((gid,))
                sizes[member] += 1
            at = remaining
        still: list[int] = []
        for member in under:
            if sizes[member] == min_quota:
                exact.append(member)
            else:
                still.append(member)
        under = still
    if at < remaining:
        if remaining - at > len(exact):
            raise AssignmentError(
                f"sticky assignment: {remaining - at} partitions left but only "
                f"{len(exact)} members can take one more (please report this bug)"
            )
        for member, gid in zip(exact, pending[at:], strict=False):
            dealt[member].append((gid,))

    transferring: set[int] = set()
    if maybe_revoked or multiply_claimed:
        for member, pieces in enumerate(dealt):
            for gid in chain.from_iterable(pieces):
                previous = maybe_revoked.get(gid)
                if (previous is not None and previous != member) or gid in multiply_claimed:
                    transferring.add(gid)

    assignment: list[Sequence[int]] = []
    for keep, pieces in zip(kept, dealt, strict=True):
        if not keep and len(pieces) == 1:
            # One slice of the ascending pending partitions: ascending already.
            assignment.append(pieces[0])
        else:
            ids = list(chain(keep, *pieces))
            ids.sort()
            assignment.append(ids)
    return assignment, transferring


class _Racks:
    """Java's ``RackInfo``, by member number and global id: who is on which rack."""

    __slots__ = ("member", "members_on", "partition")

    def __init__(
        self, member: list[str | None], partition: list[frozenset[str]], members_on: list[int]
    ) -> None:
        self.member = member  # each member's rack, None without one
        self.partition = partition  # each partition's replica racks
        self.members_on = members_on  # each partition: members on one of its racks

    @staticmethod
    def build(
        layout: _Layout, member_racks: list[str | None], partition_racks: PartitionRacks | None
    ) -> _Racks | None:
        """The racks, or None where Java assigns without them.

        Java uses racks when some member has one, some partition has a replica on a
        member's rack, and not every partition is on the same set of racks (then every
        member is as close as any other).
        """
        members_per_rack: dict[str, int] = {}
        for rack in member_racks:
            if rack:
                members_per_rack[rack] = members_per_rack.get(rack, 0) + 1
        if not members_per_rack or not partition_racks:
            return None
        per_partition: list[frozenset[str]] = []
        for topic, count in zip(layout.topics, layout.counts, strict=True):
            known = partition_racks.get(topic, ())
            per_partition.extend(
                frozenset(known[p]) if p < len(known) else frozenset() for p in range(count)
            )
        every_rack = frozenset().union(*per_partition)
        if members_per_rack.keys().isdisjoint(every_rack):
            return None
        if all(r == every_rack for r in per_partition):
            return None
        members_on = [sum(members_per_rack.get(r, 0) for r in racks) for racks in per_partition]
        return _Racks(list(member_racks), per_partition, members_on)

    def mismatch(self, member: int, gid: int) -> bool:
        """Whether ``member`` has a rack and ``gid`` no replica on it."""
        rack = self.member[member]
        return rack is not None and rack not in self.partition[gid]

    def next_member(self, gid: int, members: Sequence[int], first: int) -> int:
        """The index in ``members``, from ``first`` round, of the first one on a rack of ``gid``."""
        racks = self.partition[gid]
        if not racks:
            return -1
        n = len(members)
        for i in range(n):
            index = (first + i) % n
            rack = self.member[members[index]]
            if rack is not None and rack in racks:
                return index
        return -1


def _assign_uniform_racks(
    layout: _Layout, owned: list[list[int]], multiply_claimed: set[int], racks: _Racks
) -> tuple[list[Sequence[int]], set[int]]:
    """Java's ``ConstrainedAssignmentBuilder`` with racks.

    As :func:`_assign_uniform`, except that a member keeps only claimed partitions with a
    replica on its rack; the unassigned partitions, those on the fewest members' racks
    first, are dealt round-robin to members on one of their racks (below ``min_quota``,
    then at ``min_quota`` while the extra partition is available); what no member on its
    racks can take within the quotas is dealt as without racks.
    """
    total = layout.total
    count = len(owned)
    min_quota, extra_members = divmod(total, count)
    max_quota = min_quota + (1 if extra_members else 0)
    maybe_revoked: dict[int, int] = {}
    free = bytearray(b"\x01") * total
    matching: list[list[int]] = []
    for member, ids in enumerate(owned):
        mine: list[int] = []
        for gid in ids:
            if racks.mismatch(member, gid):
                maybe_revoked[gid] = member
            else:
                mine.append(gid)
        matching.append(mine)
    assignment, under, exact, over = _keep_claims(layout, matching, min_quota, maybe_revoked)
    for keep in assignment:
        for gid in keep:
            free[gid] = 0

    transferring: set[int] = set()

    def give(gid: int, member: int) -> int:
        assignment[member].append(gid)
        previous = maybe_revoked.get(gid)
        if (previous is not None and previous != member) or gid in multiply_claimed:
            transferring.add(gid)
        return len(assignment[member])

    under.sort()  # member numbers are in member id order, as Java sorts the ids
    exact.sort()
    pending = list(compress(range(total), free))
    pending.sort(key=racks.members_on.__getitem__)  # stable: by topic and partition within

    # Within racks.
    rest: list[int] = []
    next_index = 0
    for gid in pending:
        member = -1
        index = racks.next_member(gid, under, next_index)
        if index >= 0:
            member = under[index]
            assigned = len(assignment[member]) + 1
            if assigned >= min_quota:
                under.remove(member)
                if assigned < max_quota and over < extra_members:
                    exact.append(member)
            else:
                index += 1
            next_index = index % len(under) if under else 0
        elif exact:
            index = racks.next_member(gid, exact, 0)
            if index >= 0:
                member = exact[index]
                if len(assignment[member]) + 1 == max_quota:
                    del exact[index]
                    over += 1
                    if over == extra_members:
                        exact.clear()
        if member >= 0:
            give(gid, member)
        else:
            rest.append(gid)

    # The rest round-robin, as Java's iterator over the members below min_quota walks.
    at = 0
    for gid in rest:
        from_under = True
        if at < len(under):
            member = under[at]
            at += 1
        elif not under and not exact:
            raise AssignmentError(
                "sticky assignment: partitions left but no member can take one "
                "(please report this bug)"
            )
        elif not under:
            member = exact.pop(0)
            from_under = False
        else:
            member = under[0]
            at = 1
        assigned = give(gid, member)
        if assigned == min_quota and from_under:
            del under[at - 1]
            at -= 1
            exact.append(member)
        elif assigned == max_quota:
            over += 1

    for ids in assignment:
        ids.sort()
    return list(assignment), transferring


def _keep_claims(
    layout: _Layout, owned: list[list[int]], min_quota: int, maybe_revoked: dict[int, int]
) -> tuple[list[list[int]], list[int], list[int], int]:
    """Step 1 of Java's ``ConstrainedAssignmentBuilder``: what each member keeps of its claims.

    All if below ``min_quota`` (the member is then "under"); ``max_quota`` while fewer
    than ``P % M`` members have been given the extra one; else ``min_quota`` (the member
    may still take the extra one: "exact"). What a member must give up goes into
    ``maybe_revoked``.

    Returns:
        Each member's kept partitions (new lists), the members under ``min_quota``, those
        at it that may take one more, and how many members already have the extra one.
    """
    extra_members = layout.total % len(owned)
    max_quota = min_quota + (1 if extra_members else 0)
    over = 0
    kept: list[list[int]] = []
    under: list[int] = []
    exact: list[int] = []
    for member, ids in enumerate(owned):
        size = len(ids)
        if size < min_quota:
            keep = list(ids)
            under.append(member)
        elif size >= max_quota and over < extra_members:
            over += 1
            if over == extra_members:
                exact.clear()
            keep = _trim(layout, ids, max_quota, member, maybe_revoked)
        else:
            keep = _trim(layout, ids, min_quota, member, maybe_revoked)
            if over < extra_members:
                exact.append(member)
        kept.append(keep)
    return kept, under, exact, over


def _trim(
    layout: _Layout, ids: list[int], quota: int, member: int, maybe_revoked: dict[int, int]
) -> list[int]:
    if len(ids) <= quota:
        return ids
    ordered = sorted(ids, key=layout.pt_key)
    for gid in ordered[quota:]:
        maybe_revoked[gid] = member
    return ordered[:quota]


# -- general case -------------------------------------------------------------------------------


class _Movements:
    """Java's ``PartitionMovements``: where each moved partition came from, per topic.

    Used to move a partition back along the way another partition of the same topic came,
    rather than shuffle two partitions between the same pair of members. Java takes the
    first partition of such a way in its ``HashSet``'s iteration order; this class keeps
    each set's insertion order and table size to take the same one (``_java_first``).
    """

    def __init__(self, layout: _Layout) -> None:
        self.layout = layout
        self.moves: dict[int, tuple[int, int]] = {}
        # topic -> (from, to) -> {partition: insertion number}
        self.by_topic: dict[int, dict[tuple[int, int], dict[int, int]]] = {}
        self.capacity: dict[tuple[int, tuple[int, int]], int] = {}
        self.added = 0
        self.topic_hashes = [_java_string_hash(t) for t in layout.topics]

    def _remove(self, gid: int) -> tuple[int, int]:
        pair = self.moves.pop(gid)
        topic = self.layout.topic_of(gid)
        pairs = self.by_topic[topic]
        del pairs[pair][gid]
        if not pairs[pair]:
            del pairs[pair]
            del self.capacity[(topic, pair)]
        if not pairs:
            del self.by_topic[topic]
        return pair

    def _add(self, gid: int, pair: tuple[int, int]) -> None:
        self.moves[gid] = pair
        topic = self.layout.topic_of(gid)
        entries = self.by_topic.setdefault(topic, {}).setdefault(pair, {})
        key = (topic, pair)
        capacity = self.capacity.setdefault(key, _JAVA_HASH_CAPACITY)
        entries[gid] = self.added
        self.added += 1
        while len(entries) > capacity * 3 // 4:  # Java's load factor 0.75: the table doubles
            capacity *= 2
        self.capacity[key] = capacity

    def move(self, gid: int, old: int, new: int) -> None:
        if gid in self.moves:
            source, _ = self._remove(gid)
            if source != new:
                self._add(gid, (source, new))
        else:
            self._add(gid, (old, new))

    def partition_to_move(self, gid: int, old: int, new: int) -> int:
        topic = self.layout.topic_of(gid)
        pairs = self.by_topic.get(topic)
        if pairs is None:
            return gid
        if gid in self.moves:
            old = self.moves[gid][0]
        reverse = pairs.get((new, old))
        if not reverse:
            return gid
        return self._java_first(topic, reverse, self.capacity[(topic, (new, old))])

    def _java_first(self, topic: int, entries: dict[int, int], capacity: int) -> int:
        """The partition a ``java.util.HashSet<TopicPartition>`` of ``entries`` lists first:
        the lowest bucket, and in a bucket the first inserted."""
        base = self.layout.offsets[topic]
        topic_hash = self.topic_hashes[topic]
        mask = capacity - 1

        def position(gid: int) -> tuple[int, int]:
            # TopicPartition.hashCode(), then HashMap's spread of the high bits.
            h = (31 * (31 + gid - base) + topic_hash) & 0xFFFFFFFF
            return ((h ^ (h >> 16)) & mask, entries[gid])

        return min(entries, key=position)


_JAVA_HASH_CAPACITY = 16  # a new java.util.HashSet's table size


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` as an unsigned 32-bit value (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


class _GeneralBuilder:
    """Java's ``GeneralAssignmentBuilder``: members subscribe differently.

    1. Keep every valid claim whose topic the member still subscribes to.
    2. Give each unassigned partition (topics with the fewest possible members first) to
       the least loaded member subscribed to it, ties to the lowest member id.
    3. Move partitions towards balance: back to the member of the previous generation
       that had it, or to the least loaded member, until no count exceeds another
       possible owner's by more than one. Keep the result only if it is more balanced.
    """

    def __init__(
        self,
        layout: _Layout,
        members: list[str],
        subscriptions: Mapping[str, Subscription],
        owned: list[list[int]],
        claims: list[list[int]],
        generations: list[int],
        racks: _Racks | None = None,
    ) -> None:
        self.layout = layout
        self.racks = racks
        self.size = len(members)
        topics_count = len(layout.topics)
        # Members with the same subscription form a class; per-topic and per-member facts
        # are computed once per class (a group rarely has more than a few).
        class_index: dict[frozenset[int], int] = {}
        by_names: dict[tuple[str, ...], frozenset[int]] = {}
        self.class_members: list[list[int]] = []
        self.class_of: list[int] = []
        for member, name in enumerate(members):
            names = subscriptions[name].topics
            mine = by_names.get(names)
            if mine is None:
                mine = frozenset(layout.index[t] for t in names if t in layout.index)
                by_names[names] = mine
            c = class_index.setdefault(mine, len(class_index))
            if c == len(self.class_members):
                self.class_members.append([])
            self.class_members[c].append(member)
            self.class_of.append(c)
        self.class_topics = list(class_index)
        class_max = [sum(layout.counts[t] for t in mine) for mine in self.class_topics]
        self.member_topics = [self.class_topics[c] for c in self.class_of]
        self.max_sizes = [class_max[c] for c in self.class_of]
        self.topic_classes: list[list[int]] = [[] for _ in range(topics_count)]
        self.topic_members = [0] * topics_count
        for c, mine in enumerate(self.class_topics):
            for t in mine:
                self.topic_classes[t].append(c)
                self.topic_members[t] += len(self.class_members[c])
        # The topic of each global id, for the loops that need it per partition.
        self.topic_ids: list[int] = []
        for t, count in enumerate(layout.counts):
            self.topic_ids.extend(repeat(t, count))
        self.owned = owned
        self.claims = claims
        self.generations = generations
        self.owner = [-1] * layout.total
        self.current: list[list[int]] = []
        self.counts: list[int] = []
        self.revocation_required = False
        self.heaps: list[list[int]] = []
        self.keys: list[int] = []

    # The least loaded member of topic t: the smallest live key among its classes' heaps.
    def _least(self, topic: int) -> int:
        heaps = self.heaps
        keys = self.keys
        size = self.size
        best = -1
        best_heap: list[int] | None = None
        for c in self.topic_classes[topic]:
            heap = heaps[c]
            while heap and keys[heap[0] % size] != heap[0]:
                heapq.heappop(heap)
            if heap and (best < 0 or heap[0] < best):
                best = heap[0]
                best_heap = heap
        if best_heap is None:
            return -1
        return best % size

    def _set_count(self, member: int, count: int) -> None:
        self.counts[member] = count
        key = count * self.size + member
        self.keys[member] = key
        heapq.heappush(self.heaps[self.class_of[member]], key)

    def build(self) -> list[list[int]]:
        layout = self.layout
        size = self.size
        topic_ids = self.topic_ids
        owner = self.owner
        prev = self._previous_owners()
        assigned_flags = bytearray(layout.total)
        set_owner = owner.__setitem__
        set_flag = assigned_flags.__setitem__
        racks = self.racks
        for member, ids in enumerate(self.owned):
            mine = self.member_topics[member]
            if not set(map(topic_ids.__getitem__, ids)) <= mine:
                # The member left some of these topics: those partitions must be revoked
                # before anyone else can have them.
                ids = [gid for gid in ids if topic_ids[gid] in mine]
                self.revocation_required = True
            if racks is not None and any(racks.mismatch(member, gid) for gid in ids):
                # Partitions with no replica on the member's rack move to a member on one.
                ids = [gid for gid in ids if not racks.mismatch(member, gid)]
                self.revocation_required = True
            deque(map(set_owner, ids, repeat(member)), maxlen=0)
            deque(map(set_flag, ids, repeat(1)), maxlen=0)
            self.current.append(list(ids))
        self.counts = [len(c) for c in self.current]
        self.keys = [self.counts[m] * size + m for m in range(size)]
        self.heaps = [sorted(self.keys[m] for m in ms) for ms in self.class_members]
        initializing = max(self.counts) == 0

        topic_order = sorted(
            range(len(layout.topics)),
            key=lambda t: (self.topic_members[t], layout.topics[t]),
        )
        # Only topics with two or more possible members can move.
        movable: list[int] = []
        movable_unassigned: list[int] = []
        free_by_topic: list[tuple[int, list[int]]] = []
        for t in topic_order:
            start = layout.offsets[t]
            span = range(start, start + layout.counts[t])
            free = list(compress(span, map((1).__xor__, assigned_flags[span.start : span.stop])))
            if free and self.topic_members[t]:
                free_by_topic.append((t, free))
            if self.topic_members[t] >= 2:
                movable.extend(span)
                movable_unassigned.extend(free)
        if racks is not None:
            # First every unassigned partition to the least loaded member on one of its
            # racks, then the rest as without racks.
            free_by_topic = [(t, self._assign_within_racks(t, free)) for t, free in free_by_topic]
        for t, free in free_by_topic:
            if free:
                self._assign_least_loaded(t, free)

        movable_topics = {t for t, n in enumerate(self.topic_members) if n >= 2}
        self.active = [self._can_participate(m, movable_topics) for m in range(size)]
        active_counts = [self.counts[m] for m in range(size) if self.active[m]]
        self.histogram: dict[int, int] = {}
        for c in active_counts:
            self.histogram[c] = self.histogram.get(c, 0) + 1
        self.low = min(active_counts, default=0)
        self.high = max(active_counts, default=0)
        self.movements = _Movements(layout)
        self.undo: list[tuple[int, int, int]] = []
        before = _balance_score(active_counts)

        if not self.revocation_required:
            self._perform_reassignments(movable_unassigned, prev)
        performed = self._perform_reassignments(movable, prev)
        if not initializing and performed:
            after = _balance_score([self.counts[m] for m in range(size) if self.active[m]])
            if after >= before:
                for gid, old, new in reversed(self.undo):
                    self.current[new].remove(gid)
                    self.current[old].append(gid)
                    owner[gid] = old
        return self.current

    def _previous_owners(self) -> dict[int, int]:
        """Partitions' owners in the newest generation older than the group's newest."""
        newest = max(self.generations, default=-1)
        topic_ids = self.topic_ids
        prev: dict[int, tuple[int, int]] = {}
        for member, ids in enumerate(self.claims):
            generation = self.generations[member]
            if generation >= newest:
                continue
            # A member that no longer subscribes to a topic cannot be its partitions'
            # previous owner: moving one "back" would give it a partition of a topic it
            # does not consume.
            mine = self.member_topics[member]
            for gid in ids:
                if topic_ids[gid] not in mine:
                    continue
                seen = prev.get(gid)
                if seen is None or generation > seen[1]:
                    prev[gid] = (member, generation)
        return {gid: member for gid, (member, _) in prev.items()}

    def _assign_within_racks(self, topic: int, partitions: list[int]) -> list[int]:
        """Give each partition to the least loaded member on one of its racks (members
        without a rack match any); returns those no such member takes."""
        racks = self.racks
        assert racks is not None
        candidates = [m for c in self.topic_classes[topic] for m in self.class_members[c]]
        counts = self.counts
        rest: list[int] = []
        for gid in partitions:
            best = -1
            for member in candidates:
                if racks.mismatch(member, gid):
                    continue
                if best < 0 or (counts[member], member) < (counts[best], best):
                    best = member
            if best < 0:
                rest.append(gid)
                continue
            self.current[best].append(gid)
            self.owner[gid] = best
            self._set_count(best, counts[best] + 1)
        return rest

    def _assign_least_loaded(self, topic: int, partitions: list[int]) -> None:
        size = self.size
        keys = self.keys
        counts = self.counts
        current = self.current
        owner = self.owner
        classes = self.topic_classes[topic]
        if len(classes) == 1 and self.racks is None:
            # One kind of member takes this topic: no stale keys exist yet (counts only
            # grew through this heap, and no rack pass pushed keys), so its top is the
            # least loaded member.
            heap = self.heaps[classes[0]]
            replace = heapq.heapreplace
            for gid in partitions:
                key = heap[0]
                member = key % size
                current[member].append(gid)
                owner[gid] = member
                counts[member] += 1
                keys[member] = key + size
                replace(heap, key + size)
            return
        for gid in partitions:
            member = self._least(topic)
            current[member].append(gid)
            owner[gid] = member
            heap = self.heaps[self.class_of[member]]
            key = keys[member]
            counts[member] += 1
            keys[member] = key + size
            heapq.heapreplace(heap, key + size)

    def _can_participate(self, member: int, movable_topics: set[int]) -> bool:
        if self.counts[member] < self.max_sizes[member]:
            return True
        topic_ids = self.topic_ids
        return any(topic_ids[gid] in movable_topics for gid in self.current[member])

    def _is_balanced(self) -> bool:
        if self.low >= self.high - 1:
            return True
        layout = self.layout
        counts = self.counts
        owner = self.owner
        active = self.active
        for member in range(self.size):
            if not active[member] or counts[member] == self.max_sizes[member]:
                continue
            mine = counts[member]
            for t in self.member_topics[member]:
                start = layout.offsets[t]
                for gid in range(start, start + layout.counts[t]):
                    other = owner[gid]
                    if other < 0 or other == member or not active[other]:
                        continue
                    if mine + 1 < counts[other]:
                        return False
        return True

    def _perform_reassignments(self, partitions: list[int], prev: dict[int, int]) -> bool:
        performed = False
        topic_ids = self.topic_ids
        counts = self.counts
        while True:
            modified = False
            for gid in partitions:
                if self._is_balanced():
                    break
                member = self.owner[gid]
                if member < 0:
                    continue
                previous = prev.get(gid)
                if (
                    previous is not None
                    and self.active[previous]
                    and counts[member] > counts[previous] + 1
                ):
                    self._reassign(gid, previous)
                    performed = modified = True
                    continue
                least = self._least(topic_ids[gid])
                if least >= 0 and counts[member] > counts[least] + 1:
                    self._reassign(gid, least)
                    performed = modified = True
            if not modified:
                return performed

    def _reassign(self, gid: int, new: int) -> None:
        gid = self.movements.partition_to_move(gid, self.owner[gid], new)
        old = self.owner[gid]
        self.movements.move(gid, old, new)
        self.current[old].remove(gid)
        self.current[new].append(gid)
        self.owner[gid] = new
        self.undo.append((gid, old, new))
        self._shift(old, -1)
        self._shift(new, +1)

    def _shift(self, member: int, delta: int) -> None:
        before = self.counts[member]
        after = before + delta
        self._set_count(member, after)
        histogram = self.histogram
        histogram[before] -= 1
        if not histogram[before]:
            del histogram[before]
        histogram[after] = histogram.get(after, 0) + 1
        self.low = min(histogram)
        self.high = max(histogram)


def _balance_score(counts: list[int]) -> int:
    """Sum of |a - b| over all pairs of counts (Java's getBalanceScore), in O(n log n)."""
    ordered = sorted(counts)
    n = len(ordered)
    return sum(c * (2 * i - n + 1) for i, c in enumerate(ordered))
