"""Kafka's ``consumer`` protocol: the Subscription and Assignment bytes of JoinGroup and SyncGroup.

A member of a consumer group sends a :class:`Subscription` as its protocol metadata in
JoinGroup; the leader answers each member with an :class:`Assignment` in SyncGroup. The byte
layouts here are Kafka's (``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment``,
versions 0 to 3), so a member of this library can share a group with Java, librdkafka,
kafka-python or franz-go consumers. The module also reads and writes the user data of Java's
``sticky`` and ``cooperative-sticky`` assignors.

Layout (big-endian, non-flexible; every message starts with an int16 version)::

    Subscription  v0: topics [string], user_data nullable bytes
                  v1: + owned_partitions [topic string, partitions [int32]]
                  v2: + generation_id int32 (KIP-792)
                  v3: + rack_id nullable string (KIP-881)
    Assignment  v0-3: assigned_partitions [topic string, partitions [int32]],
                      user_data nullable bytes

Fields are only ever appended, so readers parse a newer version with the newest layout they
know and ignore the rest.
"""

from __future__ import annotations

import abc
import enum
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, islice, repeat
from operator import ne, sub
from typing import Final, NamedTuple, overload

from coordination.errors import ConfigurationError, ProtocolCodecError

__all__ = [
    "ASSIGNMENT_VERSION",
    "PROTOCOL_TYPE",
    "SUBSCRIPTION_VERSION",
    "Assignment",
    "ConsumerProtocolError",
    "RebalanceProtocol",
    "StickyUserData",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_cooperative_sticky_user_data",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_cooperative_sticky_user_data",
    "encode_sticky_user_data",
    "encode_subscription",
]

PROTOCOL_TYPE: Final = "consumer"
"""The JoinGroup ``protocol_type`` of Kafka consumer groups."""
SUBSCRIPTION_VERSION: Final = 3
"""The newest ``ConsumerProtocolSubscription`` version this module writes and fully reads."""
ASSIGNMENT_VERSION: Final = 3
"""The newest ``ConsumerProtocolAssignment`` version (1 to 3 are the same bytes as 0)."""

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_new_tuple = tuple.__new__


class TopicPartition(NamedTuple):
    """One partition of one topic; equal to (and hashable like) kafka-python's TopicPartition."""

    topic: str
    partition: int


class RebalanceProtocol(enum.Enum):
    """How members hand partitions over in a rebalance (KIP-429); values are Kafka's ids."""

    EAGER = 0
    """Every member revokes all its partitions before it rejoins; the default."""
    COOPERATIVE = 1
    """Members keep their partitions through a rebalance and revoke only what moves; a
    partition changes owner over two rebalances (revoke, then assign)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for in JoinGroup: its topics and what it owns.

    Example:
        sub = Subscription(("orders",), owned_partitions=(TopicPartition("orders", 0),),
                           generation_id=7)
        assert decode_subscription(encode_subscription(sub)) == sub

    Attributes:
        topics: the subscribed topic names. Kafka writes them sorted; so does this module.
        user_data: assignor-specific bytes (``None`` is written as a null, not empty, field).
        owned_partitions: the partitions the member owns now (v1+, KIP-429). A read-only
            sequence; a decoded subscription holds them compactly and makes the
            TopicPartition objects on first use (it equals the tuple of them). Any other
            sequence given here is stored as a tuple.
        generation_id: the generation in which it got them, -1 if none (v2+, KIP-792).
        rack_id: the member's ``client.rack``, ``None`` if unset (v3+, KIP-881).
        group_instance_id: the member's static ``group.instance.id``. Not on the wire: the
            caller fills it from the JoinGroup response so that range and round-robin order
            static members as Java does. Decoding leaves it ``None``.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        _freeze(self, "owned_partitions", self.owned_partitions)


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives a member in SyncGroup.

    Example:
        a = Assignment((TopicPartition("orders", 0), TopicPartition("orders", 1)))
        assert decode_assignment(encode_assignment(a)) == a

    Attributes:
        partitions: the partitions the member owns from now on, a read-only sequence.
            The sticky assignors and :func:`decode_assignment` hold them compactly
            (topic names and ints) and make the TopicPartition objects only when an
            element is read: a leader that assigns a million partitions and only
            encodes the plan never makes them. Such a sequence equals, hashes and
            prints like the tuple of the same partitions; ``len()`` and
            :func:`encode_assignment` do not build it. Any other sequence given here is
            stored as a tuple.
        user_data: assignor-specific bytes, ``None`` if the assignor sends none.
    """

    partitions: Sequence[TopicPartition]
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        _freeze(self, "partitions", self.partitions)


def _freeze(obj: object, field: str, value: Sequence[TopicPartition]) -> None:
    # Lists (or other mutable sequences) would make a frozen value mutable and unequal to
    # the same partitions in a tuple.
    if type(value) is not tuple and not isinstance(value, _LazyPartitions):
        object.__setattr__(obj, field, tuple(value))


class StickyUserData(NamedTuple):
    """The user data of Java's eager ``StickyAssignor``: the member's last assignment."""

    partitions: Sequence[TopicPartition]
    """Held compactly, as :attr:`Assignment.partitions` is when decoded."""
    generation: int | None
    """``None`` in version 0 of this user data, which had no generation."""


class ConsumerProtocolError(ProtocolCodecError):
    """Consumer-protocol bytes (a subscription, an assignment or user data) are malformed.

    The message says what was wrong and where; the caller adds which member sent them.
    """


# -- encoding -----------------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ConfigurationError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


_ONE: Final = _INT32.pack(1)
_headers: dict[str, bytes] = {}


def _string_cached(value: str) -> bytes:
    """:func:`_string`, remembered for up to 10,000 names (topic names repeat)."""
    made = _headers.get(value)
    if made is None:
        if len(_headers) >= 10_000:
            _headers.clear()
        made = _headers[value] = _string(value)
    return made


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _INT32.pack(-1)
    return _INT32.pack(len(value)) + bytes(value)


# -- partitions held compactly ------------------------------------------------------------------
#
# A leader of a large group handles a million partitions per rebalance: decoding the claims,
# assigning, encoding every member's assignment. One TopicPartition object per partition
# costs more than all of the assignment algorithm, and usually nobody looks at them: the
# leader encodes the plan and sends it. So decoders and the sticky assignors return the
# partitions as the sequences below, which hold topic names and ints, and make the
# TopicPartition tuple only when somebody reads an element; the encoders write them without.

_BIG_ENDIAN: Final = sys.byteorder == "big"
assert array("i").itemsize == 4, "array('i') must hold int32s"


def _int32_bytes(values: Iterable[int]) -> bytes:
    """The values as consecutive big-endian int32s."""
    out = array("i", values)
    if not _BIG_ENDIAN:
        out.byteswap()
    return out.tobytes()


def _int32_array(data: bytes) -> array[int]:
    """Big-endian int32 bytes as an array of ints (4 bytes each, not an object each)."""
    out = array("i", data)
    if not _BIG_ENDIAN:
        out.byteswap()
    return out


def _runs_wire(names: Sequence[str], sizes: Sequence[int], numbers: Sequence[int]) -> bytes:
    """``[topic string, partitions [int32]]`` from runs: ``sizes[i]`` numbers of ``names[i]``.

    ``numbers`` holds all partition numbers, run after run. C-level loops only.
    """
    pack = _INT32.pack
    data = _int32_bytes(numbers)
    ends = list(accumulate(map((4).__mul__, sizes)))
    bodies = map(data.__getitem__, map(slice, [0, *ends[:-1]], ends))
    pieces = chain.from_iterable(
        zip(map(_string_cached, names), map(pack, sizes), bodies, strict=True)
    )
    return b"".join(chain((pack(len(names)),), pieces))


class _LazyPartitions(Sequence[TopicPartition]):
    """A read-only sequence of TopicPartition whose tuples are made on first use.

    It compares equal to (and hashes like) the tuple of the same partitions, and its repr
    is that tuple's, so code written for ``tuple[TopicPartition, ...]`` keeps working;
    only ``isinstance(x, tuple)`` differs. ``len()`` and the encoders never build the
    tuple; iterating, indexing, ``in``, ``==`` and ``hash`` build it once and keep it.
    """

    __slots__ = ("_tuple",)

    def __init__(self) -> None:
        self._tuple: tuple[TopicPartition, ...] | None = None

    @abc.abstractmethod
    def _make(self) -> tuple[TopicPartition, ...]:
        """Build the tuple (called once)."""

    @abc.abstractmethod
    def _wire(self) -> bytes | None:
        """The ``[topic string, partitions [int32]]`` bytes grouped as Kafka's encoder
        groups them, or ``None`` if only the generic encoder can say."""

    def as_tuple(self) -> tuple[TopicPartition, ...]:
        """The partitions as a plain tuple (built on first use, then kept)."""
        made = self._tuple
        if made is None:
            made = self._tuple = self._make()
        return made

    @overload
    def __getitem__(self, index: int) -> TopicPartition: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TopicPartition, ...]: ...

    def __getitem__(self, index: int | slice) -> TopicPartition | tuple[TopicPartition, ...]:
        return self.as_tuple()[index]

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self.as_tuple())

    def __reversed__(self) -> Iterator[TopicPartition]:
        return reversed(self.as_tuple())

    def __contains__(self, value: object) -> bool:
        return value in self.as_tuple()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _LazyPartitions):
            return len(self) == len(other) and self.as_tuple() == other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return repr(self.as_tuple())

    def __add__(self, other: object) -> tuple[TopicPartition, ...]:
        if isinstance(other, _LazyPartitions):
            return self.as_tuple() + other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() + other
        return NotImplemented

    def __radd__(self, other: object) -> tuple[TopicPartition, ...]:
        if isinstance(other, tuple):
            return other + self.as_tuple()
        return NotImplemented

    def __reduce__(self) -> tuple[type[tuple[TopicPartition, ...]], tuple[object, ...]]:
        # Pickled and copied as the plain tuple.
        return (tuple, (self.as_tuple(),))


class _GroupedPartitions(_LazyPartitions):
    """Partitions as read from the wire: runs of one topic, in the order they were written."""

    __slots__ = ("names", "numbers", "sizes")

    def __init__(self, names: list[str], sizes: list[int], numbers: Sequence[int]) -> None:
        super().__init__()
        self.names = names
        """The topic of each run (a topic may appear in more than one run)."""
        self.sizes = sizes
        """How many partitions each run has (none is empty)."""
        self.numbers = numbers
        """All partition numbers, run after run."""

    def __len__(self) -> int:
        return len(self.numbers)

    def topics(self) -> Iterator[str]:
        """The topic of each partition, in order (without building TopicPartitions)."""
        return chain.from_iterable(map(repeat, self.names, self.sizes))

    def _make(self) -> tuple[TopicPartition, ...]:
        return tuple(
            map(_new_tuple, repeat(TopicPartition), zip(self.topics(), self.numbers, strict=True))
        )

    def runs(self) -> tuple[list[str], list[int], Sequence[int]]:
        """The runs' topics, the runs' sizes, and all partition numbers in order."""
        return self.names, self.sizes, self.numbers

    def _wire(self) -> bytes | None:
        if len(set(self.names)) != len(self.names):
            return None  # Kafka's encoder would merge the runs of a topic.
        return _runs_wire(self.names, self.sizes, self.numbers)


class _PartitionSpace:
    """Numbered partitions: topic ``i``'s partition ``p`` is ``offsets[i] + p`` (internal).

    Topics are sorted by name, so sorted ids are sorted (topic, partition) pairs. The
    sticky assignors compute with these ids and return :class:`_IdPartitions` over them.
    The per-id tables are built on first use and shared by all assignments of the space.
    """

    __slots__ = ("_by_offset", "_offsets_by_id", "counts", "offsets", "topics", "total")

    def __init__(self, topics: Sequence[str], counts: Sequence[int]) -> None:
        self.topics = list(topics)
        self.counts = list(counts)
        self.offsets = [0, *accumulate(self.counts)][: len(self.counts)]
        self.total = sum(self.counts)
        self._offsets_by_id: list[int] | None = None
        self._by_offset: tuple[dict[int, str], dict[int, bytes], dict[int, bytes]] | None = None

    def offsets_by_id(self) -> list[int]:
        """The first id of every id's topic."""
        if self._offsets_by_id is None:
            self._offsets_by_id = list(chain.from_iterable(map(repeat, self.offsets, self.counts)))
        return self._offsets_by_id

    def by_offset(self) -> tuple[dict[int, str], dict[int, bytes], dict[int, bytes]]:
        """Keyed by a topic's first id: its name, its wire string, and that followed by
        the int32 1 (the header of a topic with one partition in an assignment)."""
        if self._by_offset is None:
            pairs = [
                (o, t) for o, t, c in zip(self.offsets, self.topics, self.counts, strict=True) if c
            ]
            names = dict(pairs)
            wire = {o: _string_cached(t) for o, t in pairs}
            self._by_offset = (names, wire, {o: w + _ONE for o, w in wire.items()})
        return self._by_offset


class _IdPartitions(_LazyPartitions):
    """Sorted partition ids of a :class:`_PartitionSpace` (internal; what assignors return)."""

    __slots__ = ("ids", "space")

    def __init__(self, space: _PartitionSpace, ids: Sequence[int]) -> None:
        super().__init__()
        self.space = space
        self.ids = ids
        """Ascending ids: a list, an array or a ``range``."""

    def __len__(self) -> int:
        return len(self.ids)

    def _split(self) -> tuple[list[int], list[int], list[int]]:
        """Each id's topic offset, each id's partition number, and where each topic's run
        starts (after the first, which starts at 0)."""
        ids = self.ids
        offsets = list(map(self.space.offsets_by_id().__getitem__, ids))
        numbers = list(map(sub, ids, offsets))
        starts = list(compress(range(1, len(ids)), map(ne, offsets, islice(offsets, 1, None))))
        return offsets, numbers, starts

    def topics(self) -> Iterator[str]:
        """The topic of each partition, in order."""
        names = self.space.by_offset()[0]
        return map(names.__getitem__, map(self.space.offsets_by_id().__getitem__, self.ids))

    def _make(self) -> tuple[TopicPartition, ...]:
        offsets, numbers, _ = self._split()
        names = map(self.space.by_offset()[0].__getitem__, offsets)
        return tuple(map(_new_tuple, repeat(TopicPartition), zip(names, numbers, strict=True)))

    def runs(self) -> tuple[list[str], list[int], Sequence[int]]:
        """The topics' names, how many partitions of each, and all partition numbers."""
        count = len(self.ids)
        if not count:
            return [], [], ()
        offsets, numbers, starts = self._split()
        starts.insert(0, 0)
        sizes = list(map(sub, [*starts[1:], count], starts))
        names = self.space.by_offset()[0]
        return list(map(names.__getitem__, map(offsets.__getitem__, starts))), sizes, numbers

    def _wire(self) -> bytes:
        count = len(self.ids)
        if not count:
            return _INT32.pack(0)
        offsets, numbers, starts = self._split()
        _, wire, wire_one = self.space.by_offset()
        pack = _INT32.pack
        if len(starts) == count - 1:
            # Every topic has one partition here: its header, then the number.
            pieces = chain.from_iterable(
                zip(map(wire_one.__getitem__, offsets), map(pack, numbers), strict=True)
            )
            return b"".join(chain((pack(count),), pieces))
        starts.insert(0, 0)
        sizes = list(map(sub, [*starts[1:], count], starts))
        data = _int32_bytes(numbers)
        ends = list(accumulate(map((4).__mul__, sizes)))
        bodies = map(data.__getitem__, map(slice, [0, *ends[:-1]], ends))
        headers = map(wire.__getitem__, map(offsets.__getitem__, starts))
        pieces = chain.from_iterable(zip(headers, map(pack, sizes), bodies, strict=True))
        return b"".join(chain((pack(len(sizes)),), pieces))


def _topic_partitions(groups: Sequence[tuple[str, Sequence[int]]]) -> bytes:
    out = [_INT32.pack(len(groups))]
    for topic, partitions in groups:
        out.append(_string(topic))
        out.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    return b"".join(out)


def _group_sorted(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """Group by topic, topics and partitions sorted (Kafka's order for owned partitions)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [(topic, sorted(by_topic[topic])) for topic in sorted(by_topic)]


def _group_in_order(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """Group by topic in order of first appearance (Kafka's order for assigned partitions)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def _sorted_wire(partitions: Sequence[TopicPartition]) -> bytes:
    """Partitions grouped by topic, topics and partitions sorted."""
    if isinstance(partitions, _IdPartitions):
        # Ids ascend and their topics are numbered in name order: already sorted.
        return partitions._wire()
    return _topic_partitions(_group_sorted(partitions))


def _check_version(version: int, kind: str) -> None:
    if not 0 <= version <= SUBSCRIPTION_VERSION:
        raise ConfigurationError(
            f"{kind} version must be 0 to {SUBSCRIPTION_VERSION}, got {version}"
        )


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """Write a subscription as Kafka's ``ConsumerProtocolSubscription`` of ``version``.

    Fields newer than ``version`` are left out, as Kafka does (they are "ignorable").
    Topics and owned partitions are written sorted.

    Args:
        sub: the subscription.
        version: 0 to 3.

    Returns:
        The int16 version followed by the fields.

    Raises:
        ConfigurationError: ``version`` is out of range or a topic name is too long.
    """
    _check_version(version, "subscription")
    out = [_INT16.pack(version), _INT32.pack(len(sub.topics))]
    out.extend(_string(topic) for topic in sorted(sub.topics))
    out.append(_nullable_bytes(sub.user_data))
    if version >= 1:
        out.append(_sorted_wire(sub.owned_partitions))
    if version >= 2:
        out.append(_INT32.pack(sub.generation_id))
    if version >= 3:
        out.append(_INT16.pack(-1) if sub.rack_id is None else _string(sub.rack_id))
    return b"".join(out)


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """Write an assignment as Kafka's ``ConsumerProtocolAssignment`` of ``version``.

    Versions 0 to 3 have the same fields; only the version number differs. Partitions are
    grouped by topic in order of first appearance, as Kafka writes them.

    Args:
        assignment: the assignment.
        version: 0 to 3.

    Returns:
        The int16 version followed by the fields.

    Raises:
        ConfigurationError: ``version`` is out of range or a topic name is too long.
    """
    _check_version(version, "assignment")
    partitions = assignment.partitions
    body = partitions._wire() if isinstance(partitions, _LazyPartitions) else None
    if body is None:
        body = _topic_partitions(_group_in_order(partitions))
    return b"".join((_INT16.pack(version), body, _nullable_bytes(assignment.user_data)))


# -- decoding -----------------------------------------------------------------------------------


class _Reader:
    """A cursor over bytes that raises ConsumerProtocolError naming what it was reading."""

    __slots__ = ("data", "kind", "pos")

    def __init__(self, data: bytes, kind: str) -> None:
        self.data = data
        self.pos = 0
        self.kind = kind

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def _need(self, size: int, what: str) -> None:
        if self.pos + size > len(self.data):
            raise ConsumerProtocolError(
                f"{self.kind} truncated: {what} needs {size} bytes at offset {self.pos}, "
                f"{len(self.data) - self.pos} left"
            )

    def int16(self, what: str) -> int:
        self._need(2, what)
        (value,) = _INT16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self, what: str) -> int:
        self._need(4, what)
        (value,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def string(self, what: str, *, nullable: bool = False) -> str | None:
        size = self.int16(f"length of {what}")
        if size < 0:
            if nullable and size == -1:
                return None
            raise ConsumerProtocolError(f"{self.kind}: {what} has invalid length {size}")
        self._need(size, what)
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise ConsumerProtocolError(f"{self.kind}: {what} is not valid UTF-8: {e}") from e

    def nullable_bytes(self, what: str) -> bytes | None:
        size = self.int32(f"length of {what}")
        if size == -1:
            return None
        if size < 0:
            raise ConsumerProtocolError(f"{self.kind}: {what} has invalid length {size}")
        self._need(size, what)
        value = self.data[self.pos : self.pos + size]
        self.pos += size
        return bytes(value)

    def count(self, what: str) -> int:
        size = self.int32(f"length of {what}")
        if size < 0:
            raise ConsumerProtocolError(f"{self.kind}: {what} has invalid length {size}")
        # Every element takes at least 2 bytes: refuse a bogus length before allocating.
        self._need(2 * size, what)
        return size

    def int32_array(self, what: str) -> tuple[int, ...]:
        size = self.count(what)
        self._need(4 * size, what)
        values = struct.unpack_from(f">{size}i", self.data, self.pos)
        self.pos += 4 * size
        return values

    def topic_partitions(self, what: str) -> _GroupedPartitions:
        start = self.pos
        try:
            return self._topic_partitions_fast(what)
        except (struct.error, ValueError):
            # Malformed somewhere: read again, checking each field, to say what and where.
            self.pos = start
            return self._topic_partitions_checked(what)

    def _topic_partitions_fast(self, what: str) -> _GroupedPartitions:
        # The hot path of a leader reading thousands of subscriptions: locals only, one
        # bounds check per field, and a fall-back to the checked reader on any anomaly.
        # No TopicPartition objects: the numbers stay int32 bytes until one array.
        data = self.data
        end = len(data)
        count = self.count(what)
        pos = self.pos
        unpack16 = _INT16.unpack_from
        unpack32 = _INT32.unpack_from
        names: list[str] = []
        sizes: list[int] = []
        chunks: list[bytes] = []
        for _ in range(count):
            (size,) = unpack16(data, pos)
            pos += 2
            if size < 0 or pos + size > end:
                raise ValueError("bad topic name")
            topic = data[pos : pos + size].decode()
            pos += size
            (n,) = unpack32(data, pos)
            pos += 4
            if n < 0 or pos + 4 * n > end:
                raise ValueError("bad partition array")
            if n:
                names.append(topic)
                sizes.append(n)
                chunks.append(data[pos : pos + 4 * n])
                pos += 4 * n
        self.pos = pos
        return _GroupedPartitions(names, sizes, _int32_array(b"".join(chunks)))

    def _topic_partitions_checked(self, what: str) -> _GroupedPartitions:
        names: list[str] = []
        sizes: list[int] = []
        numbers = array("i")
        for _ in range(self.count(what)):
            topic = self.string(f"topic name in {what}")
            assert topic is not None
            partitions = self.int32_array(f"partitions of {topic!r} in {what}")
            if partitions:
                names.append(topic)
                sizes.append(len(partitions))
                numbers.extend(partitions)
        return _GroupedPartitions(names, sizes, numbers)


def _version(reader: _Reader) -> int:
    version = reader.int16("version")
    if version < 0:
        raise ConsumerProtocolError(f"{reader.kind}: unsupported version {version}")
    return version


def decode_subscription(data: bytes) -> Subscription:
    """Read Kafka's ``ConsumerProtocolSubscription`` bytes.

    Accepted beyond the letter of the schema, as other clients need it: versions above 3
    (read as version 3, trailing bytes ignored), and a message that ends cleanly after
    the topics or any later whole field (the missing fields take their defaults), which
    some older clients send with a newer version number.

    Args:
        data: the protocol metadata of one member from a JoinGroup response.

    Returns:
        The subscription; ``generation_id`` is -1 and ``rack_id`` ``None`` where absent.

    Raises:
        ConsumerProtocolError: the version is negative, a field is cut in the middle, a
            length is negative (other than a null), or a string is not UTF-8.
    """
    reader = _Reader(memoryview(data).tobytes(), "subscription")
    version = _version(reader)
    topics = tuple(str(reader.string("topic name")) for _ in range(reader.count("topics")))
    user_data: bytes | None = None
    owned: Sequence[TopicPartition] = ()
    generation_id = -1
    rack_id: str | None = None
    if not reader.at_end():
        user_data = reader.nullable_bytes("user data")
    if version >= 1 and not reader.at_end():
        owned = reader.topic_partitions("owned partitions")
    if version >= 2 and not reader.at_end():
        generation_id = reader.int32("generation id")
    if version >= 3 and not reader.at_end():
        rack_id = reader.string("rack id", nullable=True)
        # Java treats an empty rack id as no rack.
        rack_id = rack_id or None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes) -> Assignment:
    """Read Kafka's ``ConsumerProtocolAssignment`` bytes.

    Versions above 3 are read as version 3 (trailing bytes ignored); a message that ends
    right after the partitions has no user data.

    Args:
        data: this member's assignment from a SyncGroup response.

    Returns:
        The assignment, partitions in the order they were written.

    Raises:
        ConsumerProtocolError: the bytes are shorter than a version, the version is
            negative, a field is cut in the middle or has a negative length.
    """
    reader = _Reader(memoryview(data).tobytes(), "assignment")
    _version(reader)
    partitions = reader.topic_partitions("assigned partitions")
    user_data = None if reader.at_end() else reader.nullable_bytes("user data")
    return Assignment(partitions, user_data)


# -- assignor user data -------------------------------------------------------------------------


def encode_cooperative_sticky_user_data(generation: int) -> bytes:
    """Java ``CooperativeStickyAssignor`` user data: the member's last generation, int32.

    Args:
        generation: the generation of the member's last assignment, -1 if none.

    Returns:
        Four bytes, big-endian; -1 is ``ff ff ff ff``.
    """
    return _INT32.pack(generation)


def decode_cooperative_sticky_user_data(data: bytes) -> int:
    """Read Java ``CooperativeStickyAssignor`` user data (trailing bytes are ignored, as Java).

    Args:
        data: the subscription's user data.

    Returns:
        The generation it carries.

    Raises:
        ConsumerProtocolError: fewer than 4 bytes.
    """
    if len(data) < 4:
        raise ConsumerProtocolError(
            f"cooperative-sticky user data has {len(data)} bytes, needs 4 (int32 generation)"
        )
    return int(_INT32.unpack_from(data)[0])


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """Java ``StickyAssignor`` user data: ``[topic string, partitions [int32]]`` then generation.

    Args:
        partitions: the member's last assignment.
        generation: its generation; ``None`` writes version 0 of the layout, which has none.

    Returns:
        The bytes Java's ``StickyAssignor.subscriptionUserData`` would write (topics sorted).
    """
    if isinstance(partitions, _IdPartitions):
        body = _sorted_wire(partitions)
    else:
        body = _topic_partitions(_group_sorted(partitions))
    return body if generation is None else body + _INT32.pack(generation)


def decode_sticky_user_data(data: bytes) -> StickyUserData:
    """Read Java ``StickyAssignor`` user data, with or without the generation.

    Args:
        data: the subscription's user data.

    Returns:
        The previous assignment and its generation (``None`` for the old layout).

    Raises:
        ConsumerProtocolError: the bytes are neither layout. (Java's assignor then treats
            the member as owning nothing; the assignors here do the same.)
    """
    reader = _Reader(memoryview(data).tobytes(), "sticky user data")
    partitions = reader.topic_partitions("previous assignment")
    generation = None if len(data) - reader.pos < 4 else reader.int32("generation")
    return StickyUserData(partitions, generation)
