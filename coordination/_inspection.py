"""Seeing groups from the outside: list them, describe one, decode what its members sent.

Operators should not need a member's logs to learn who is in a group, who leads and who
runs what. :func:`describe_group` asks the group's coordinator (DescribeGroups, a read that
does not join: no rebalance) for every member's metadata and assignment and decodes them by
the group's protocol type. Each decoder is named by the package that owns the protocol
(entry points ``coordination.group_decoders``: this project's recipes name ``consumer``,
Kafka's consumer protocol from any client, ``election`` and ``tasks``); unknown types keep
their raw bytes. A protocol type of your own gets decoded once you name its decoder there
or :func:`register_decoder` it. KIP-848 consumer groups and share groups are no classic
groups: their own APIs describe them (ConsumerGroupDescribe; ShareGroupDescribe, and
DescribeShareGroupOffsets for the share-partitions' state).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from ._config import CoordinatorConfig
from ._metrics import RebalanceRecord
from ._protocol import consumer_group as cg
from ._protocol import messages as m
from ._protocol import share_group as sg
from ._protocol.error_codes import ErrorCode
from .errors import (
    BrokerError,
    ConfigurationError,
    CoordinationError,
    ProtocolCodecError,
    broker_error,
)
from .transport import CoordinatorNode, TransportError
from .transport import R as _R

log = logging.getLogger("coordination.groups")
_T = TypeVar("_T")

__all__ = [
    "GroupDecoder",
    "GroupDescription",
    "GroupInspector",
    "GroupListing",
    "MemberDescription",
    "describe_group",
    "list_groups",
    "rebalance_timeline",
    "register_decoder",
]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group a broker coordinates (ListGroups)."""

    group_id: str
    protocol_type: str
    state: str
    """"Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead" ("" from
    brokers too old to say)."""
    group_type: str
    """"classic", "consumer" (KIP-848) or "share" (KIP-932), "" from brokers too old to
    say."""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member as the coordinator stores it, with its bytes decoded where known."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    """What it sent in JoinGroup for the selected protocol."""
    assignment: bytes
    """What the leader gave it in SyncGroup."""
    decoded: dict[str, Any] | None
    """The decoder's reading of both (JSON-ready), None for an unknown protocol type."""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as its coordinator describes it (DescribeGroups)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    """The selected protocol ("range", "election-v1", ...), "" when the group has none."""
    members: tuple[MemberDescription, ...]
    summary: dict[str, Any] = field(default_factory=dict)
    """The decoder's view of the whole group: the election's leader and token, the tasks
    each worker runs, the consumer partitions each member owns. For a KIP-848 group: its
    group and assignment epochs, and each member's epoch, partitions and target."""
    group_type: str = "classic"
    """"classic" (JoinGroup, DescribeGroups), or "consumer" for a KIP-848 consumer group
    (ConsumerGroupDescribe: ``protocol`` is then the broker's assignor, and each member's
    ``decoded`` its epoch, assignment, target assignment and subscription), or "share" for a
    KIP-932 share group (ShareGroupDescribe: ``protocol`` is the broker's assignor, each
    member's ``decoded`` its epoch, assignment and subscription)."""

    @property
    def exists(self) -> bool:
        """False when the coordinator knows no such (classic) group.

        DescribeGroups does not refuse an unknown group id: Kafka answers with the state
        ``Dead``, no members and no protocol type (from version 6 of the request, also the
        error GROUP_ID_NOT_FOUND). A group that exists has a protocol type from its first
        member's JoinGroup on, keeps it while Empty (members gone, offsets kept), and is
        ``Dead`` only on its way to deletion. A KIP-848 consumer group or a share group is not
        a classic group: DescribeGroups describes it as missing too, and :func:`describe_group`
        asks ConsumerGroupDescribe, then ShareGroupDescribe.
        """
        return not (self.state == "Dead" and not self.members and not self.protocol_type)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes as hex)."""
        return {
            "group_id": self.group_id,
            "group_type": self.group_type,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "summary": self.summary,
            "members": [
                {
                    "member_id": x.member_id,
                    "group_instance_id": x.group_instance_id,
                    "client_id": x.client_id,
                    "client_host": x.client_host,
                    "decoded": x.decoded,
                    "metadata_hex": x.metadata.hex(),
                    "assignment_hex": x.assignment.hex(),
                }
                for x in self.members
            ],
        }


class GroupDecoder(Protocol):
    """Reads the members of one protocol type (see :func:`register_decoder`)."""

    def describe_member(self, protocol: str, metadata: bytes, assignment: bytes) -> dict[str, Any]:
        """One member's metadata and assignment, JSON-ready. Raise ValueError if unreadable."""
        ...

    def summarize(self, members: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The group as a whole, from its members' decodings (in member id order)."""
        ...


# Where installed packages name their decoders (pyproject.toml's entry points): this
# project's recipes name theirs there, and so can yours; loaded when first needed.
DECODER_ENTRY_POINTS: Final = "coordination.group_decoders"
_registered: dict[str, GroupDecoder] = {}


def register_decoder(protocol_type: str, decoder: GroupDecoder) -> None:
    """Decode groups of ``protocol_type`` with ``decoder`` in :func:`describe_group`.

    A package can instead name its decoder (a module or object with ``describe_member`` and
    ``summarize``) under the entry-point group ``coordination.group_decoders``, keyed by the
    protocol type, so that ``coordination describe`` finds it without importing it first::

        [project.entry-points."coordination.group_decoders"]
        shards = "myservice.shards_describe"
    """
    _registered[protocol_type] = decoder


def _decoder(protocol_type: str) -> GroupDecoder | None:
    if protocol_type in _registered:
        return _registered[protocol_type]
    for entry in importlib.metadata.entry_points(group=DECODER_ENTRY_POINTS):
        if entry.name != protocol_type:
            continue
        try:
            decoder: GroupDecoder = entry.load()
        except ImportError as e:  # named, but its package is broken or half-installed
            log.warning(
                "the decoder of protocol type %r (%s) does not import: %s",
                protocol_type,
                entry.value,
                e,
            )
            return None
        _registered[protocol_type] = decoder
        return decoder
    return None


def list_groups(**settings: Any) -> list[GroupListing]:
    """Every group of the cluster, sorted by id (ListGroups on every broker).

    Args:
        **settings: ``bootstrap_servers`` and the connection settings (TLS, SASL), as for
            :class:`coordination.Coordinator`; also ``request_timeout_ms`` and ``client_id``.

    Raises:
        ConfigurationError: a setting is wrong.
        CoordinationError: a broker refused (e.g. no DESCRIBE on the cluster) or could not be
            reached.
    """
    with _Admin(settings) as admin:
        return admin.list_groups()


def rebalance_timeline(
    group_id: str, *, since_s: float = 3600.0, **settings: Any
) -> list[RebalanceRecord]:
    """The group's rebalances as its members recorded them, oldest first. Does not join it.

    Each member publishes every rebalance it completes (start, reason, duration, generation,
    what moved for it) on the wake-up channel; this reads them back from the group's
    partition of the wake-up topic. Members with the channel off publish nothing, and the
    topic keeps records for an hour. Anyone who may write to the topic can put a record
    there: one that :func:`decode_timeline_record` refuses is skipped, and one warning
    (logger ``coordination.groups``) says how many were and why the first was.

    Args:
        group_id: the group.
        since_s: how far back to read, in seconds (finite, not negative).
        **settings: as for :func:`list_groups`; ``wakeup_topic`` if the members use another
            topic than ``coordination.wakeups``.

    Raises:
        ConfigurationError: a setting is wrong, or ``since_s`` is.
        LookupError: the wake-up topic is missing or cannot be read (the message says why).
        CoordinationError: the cluster could not be reached.
    """
    from ._transport.wakeups import DEFAULT_TOPIC, KafkaWakeups

    if isinstance(since_s, bool) or not isinstance(since_s, int | float):
        raise ConfigurationError(f"since_s must be a number of seconds, got {since_s!r}")
    if not 0 <= since_s <= _MAX_EPOCH_S:
        raise ConfigurationError(
            f"since_s must be a finite number of seconds, not negative, got {since_s!r}"
        )
    options = dict(settings)
    topic = options.pop("wakeup_topic", None) or DEFAULT_TOPIC
    since_ms = int((time.time() - since_s) * 1000)
    with _Admin(options, group_id) as admin:
        reader = KafkaWakeups(
            admin.transport,
            group_id=group_id,
            topic=topic,
            request_timeout_ms=admin.config.request_timeout_ms,
        )
        try:
            entries = reader.read_timeline(since_ms)
        except TransportError as e:
            raise e.stop_error(f"group {group_id!r}: reading the timeline") from e
    records = []
    skipped, first = 0, ""
    for raw in entries:
        try:
            records.append(decode_timeline_record(raw))
        except ProtocolCodecError as e:
            if not skipped:
                first = f"{e} in {raw[:200]!r}"
            skipped += 1
    if skipped:
        log.warning(
            "group %r: skipped %d unreadable timeline record(s) of %d; the first: %s",
            group_id,
            skipped,
            len(entries),
            first,
        )
    return sorted(records, key=lambda r: r.finished_at)


# The wake-up topic is writable by every member of every group that uses it: its records are
# other parties' bytes. Bounds a record must keep to be shown (a string of Kafka's protocol is
# at most 32767 bytes; a time must be one that time.localtime() can render).
_MAX_TIMELINE_RECORD_BYTES: Final = 1 << 20
_MAX_STRING_BYTES: Final = 32_767
_MAX_EPOCH_S: Final = 253_402_300_799.0  # 9999-12-31T23:59:59Z
_MAX_DURATION_S: Final = 365 * 86_400.0
_MAX_INT32: Final = 2**31 - 1


def decode_timeline_record(raw: bytes) -> RebalanceRecord:
    """One record of a group's timeline on the wake-up topic, checked field by field.

    Unknown fields are ignored (a newer member may add some); every field a
    :class:`RebalanceRecord` needs must be there with its type: times finite and within
    year 1970..9999, a duration of 0 to 365 days, counts and the generation within int32,
    strings valid UTF-8 of at most 32767 bytes.

    Raises:
        ProtocolCodecError: the record is not such a JSON object (the message names the field).
    """
    if len(raw) > _MAX_TIMELINE_RECORD_BYTES:
        raise ProtocolCodecError(f"timeline record of {len(raw)} bytes is too large")
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ProtocolCodecError(f"timeline record is not JSON: {e!s:.100}") from None
    if not isinstance(entry, dict):
        raise ProtocolCodecError(f"timeline record is a {type(entry).__name__}, not an object")
    instance = entry.get("group_instance_id")
    return RebalanceRecord(
        started_at=_number(entry, "started_at", 0.0, _MAX_EPOCH_S),
        reason=_string(entry, "reason"),
        duration_s=_number(entry, "duration_s", 0.0, _MAX_DURATION_S),
        generation=_integer(entry, "generation", -1),
        member_id=_string(entry, "member_id"),
        is_leader=_boolean(entry, "is_leader"),
        failed_attempts=_integer(entry, "failed_attempts", 0),
        moved=_string(entry, "moved", ""),
        group_instance_id=None if instance is None else _string(entry, "group_instance_id"),
        client_id=_string(entry, "client_id", ""),
    )


def _field(entry: dict[str, Any], name: str, default: Any) -> Any:
    if name in entry:
        return entry[name]
    if default is None:
        raise ProtocolCodecError(f"timeline record has no {name!r}")
    return default


def _number(entry: dict[str, Any], name: str, low: float, high: float) -> float:
    value = _field(entry, name, None)
    # bool is an int; JSON's NaN and Infinity are floats; an integer of 5000 digits is an int.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolCodecError(f"timeline record's {name} is not a number: {value!r:.40}")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ProtocolCodecError(f"timeline record's {name} is out of range")
    number = float(value)
    if not (math.isfinite(number) and low <= number <= high):
        raise ProtocolCodecError(
            f"timeline record's {name} {number!r} is outside {low:g}..{high:g}"
        )
    return number


def _integer(entry: dict[str, Any], name: str, low: int) -> int:
    value = _field(entry, name, None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolCodecError(f"timeline record's {name} is not an integer: {value!r:.40}")
    if not low <= value <= _MAX_INT32:
        raise ProtocolCodecError(
            f"timeline record's {name} is outside {low}..{_MAX_INT32}: {value!r:.40}"
        )
    return value


def _boolean(entry: dict[str, Any], name: str) -> bool:
    value = _field(entry, name, None)
    if not isinstance(value, bool):
        raise ProtocolCodecError(f"timeline record's {name} is not true or false: {value!r:.40}")
    return value


def _string(entry: dict[str, Any], name: str, default: str | None = None) -> str:
    value = _field(entry, name, default)
    if not isinstance(value, str):
        raise ProtocolCodecError(f"timeline record's {name} is not a string: {value!r:.40}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate (U+D800 alone): no terminal prints it
        raise ProtocolCodecError(f"timeline record's {name} is not valid UTF-8") from None
    if size > _MAX_STRING_BYTES:
        raise ProtocolCodecError(
            f"timeline record's {name} is {size} bytes long (at most {_MAX_STRING_BYTES})"
        )
    return value


def describe_group(group_id: str, **settings: Any) -> GroupDescription:
    """The group's state and members, decoded by its protocol type. Does not join it.

    Args:
        group_id: the group.
        **settings: as for :func:`list_groups`.

    Raises:
        ConfigurationError: a setting is wrong.
        GroupAuthorizationError: no DESCRIBE on the group.
        CoordinationError: the coordinator could not be found or reached.
    """
    with _Admin(settings, group_id) as admin:
        return admin.describe(group_id)


class GroupInspector:
    """A reusable client for looking at groups from outside: one bootstrap and one set of
    connections for many calls (:func:`describe_group` and friends make a new one each time).

    Example:
        with GroupInspector(bootstrap_servers="kafka-1:9092") as inspector:
            while serving:
                leader = inspector.describe("scheduler-leader").summary.get("leader")
                ...

    Thread-safe: calls from several threads share the connections.

    Args:
        **settings: as for :func:`list_groups`.

    Raises:
        ConfigurationError: a setting is wrong.
    """

    def __init__(self, **settings: Any) -> None:
        self._admin = _Admin(settings)

    def describe(self, group_id: str) -> GroupDescription:
        """As :func:`describe_group`."""
        return self._admin.describe(group_id)

    def list_groups(self) -> list[GroupListing]:
        """As :func:`list_groups`."""
        return self._admin.list_groups()

    def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], BrokerError | None]:
        """Set where the share group ``group_id`` starts in each partition (Kafka's
        AlterShareGroupOffsets, what ``kafka-share-groups.sh --reset-offsets`` sends).

        The group must have no members (close its consumers first). Records before a
        partition's new start offset are never delivered to the group; from it on, every
        record is available again, whatever was acknowledged before. Kafka 4.1 or newer.

        Args:
            group_id: the share group.
            offsets: the new start offset of each (topic, partition).

        Returns:
            Each partition's outcome: None where it was set, else the broker's refusal
            (e.g. UNKNOWN_TOPIC_OR_PARTITION).

        Raises:
            ConfigurationError: ``offsets`` is empty, or holds a negative offset or partition.
            BrokerError: the broker refused the whole request: NON_EMPTY_GROUP while members
                remain, UNSUPPORTED_VERSION from a broker without share groups.
            GroupAuthorizationError: no READ on the group.
            CoordinationError: the coordinator could not be found or reached.
        """
        if not offsets:
            raise ConfigurationError("offsets must name at least one (topic, partition)")
        for (topic, partition), offset in offsets.items():
            if partition < 0 or offset < 0:
                raise ConfigurationError(
                    f"offsets: partition and start offset must not be negative, got "
                    f"{(topic, partition)!r}: {offset!r}"
                )
        return self._admin.alter_share_group_offsets(group_id, offsets)

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._admin.transport.close()

    def __enter__(self) -> GroupInspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_NOT_READY: Final = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
)


class _NotReady(Exception):
    def __init__(self, error: CoordinationError) -> None:
        self.error = error


class _Admin:
    def __init__(self, settings: Mapping[str, Any], group_id: str = "coordination-admin") -> None:
        from ._transport.kafka import KafkaTransport

        options = {"client_id": "coordination-admin", "wakeup_topic": None, **settings}
        self.config = CoordinatorConfig.from_settings(group_id, options)
        self.timeout_s = self.config.request_timeout_ms / 1000
        self.transport = KafkaTransport(
            client_id=self.config.client_id,
            request_timeout_ms=self.config.request_timeout_ms,
            connection=dict(self.config.connection),
        )

    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.transport.close()

    def _send(self, request: Any, node: Any) -> Any:
        try:
            return self.transport.send_kafka(request, node_id=node, timeout_s=self.timeout_s)
        except TransportError as e:
            raise e.stop_error(f"{type(request).__name__}") from e

    def list_groups(self) -> list[GroupListing]:
        from kafka.protocol.admin.groups import ListGroupsRequest
        from kafka.protocol.metadata.metadata import MetadataRequest

        brokers = self._send(MetadataRequest(topics=[], max_version=12), None).brokers
        found: dict[str, GroupListing] = {}
        for broker in brokers:
            node = self.transport.dedicated_node("admin", broker.node_id, broker.host, broker.port)
            response = self._send(ListGroupsRequest(states_filter=[], types_filter=[]), node)
            if response.error_code != ErrorCode.NONE:
                raise broker_error(response.error_code, group_id="(every group)", api="ListGroups")
            for g in response.groups:
                found[g.group_id] = GroupListing(
                    group_id=g.group_id,
                    protocol_type=g.protocol_type or "",
                    state=getattr(g, "group_state", "") or "",
                    group_type=getattr(g, "group_type", "") or "",
                )
        return [found[k] for k in sorted(found)]

    def describe(self, group_id: str) -> GroupDescription:
        return self._retrying(lambda: self._describe_once(group_id))

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        # A coordinator that is not ready yet (a fresh cluster creates __consumer_offsets on
        # the first FindCoordinator; a moved group is still loading) is asked again, with
        # backoff, until the request timeout: Kafka's admin client does the same.
        deadline = time.monotonic() + self.timeout_s
        backoff_s = self.config.retry_backoff_ms / 1000
        while True:
            try:
                return attempt()
            except _NotReady as e:
                if time.monotonic() + backoff_s >= deadline:
                    raise e.error from None
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self.config.retry_backoff_max_ms / 1000)

    def _coordinator(self, group_id: str) -> CoordinatorNode:
        try:
            found = self.transport.send(
                m.FindCoordinatorRequest(key=group_id),
                m.FindCoordinatorResponse,
                coordinator=None,
                timeout_s=self.timeout_s,
            )
        except TransportError as e:
            raise e.stop_error(f"group {group_id!r}: FindCoordinator") from e
        if found.error_code != ErrorCode.NONE:
            error = broker_error(found.error_code, group_id=group_id, api="FindCoordinator")
            raise _NotReady(error) if found.error_code in _NOT_READY else error
        return CoordinatorNode(found.node_id, found.host, found.port)

    def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], BrokerError | None]:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, offset))
        request = sg.AlterShareGroupOffsetsRequest(
            group_id, tuple((t, tuple(p)) for t, p in by_topic.items())
        )

        def attempt() -> sg.AlterShareGroupOffsetsResponse:
            try:
                response = self.transport.send(
                    request,
                    sg.AlterShareGroupOffsetsResponse,
                    coordinator=self._coordinator(group_id),
                    timeout_s=self.timeout_s,
                )
            except TransportError as e:
                raise e.stop_error(f"group {group_id!r}: AlterShareGroupOffsets") from e
            if response.error_code != ErrorCode.NONE:
                error = broker_error(
                    response.error_code, group_id=group_id, api="AlterShareGroupOffsets"
                )
                raise _NotReady(error) if response.error_code in _NOT_READY else error
            return response

        response = self._retrying(attempt)
        outcome: dict[tuple[str, int], BrokerError | None] = dict.fromkeys(offsets)
        for answered in response.responses:
            for p in answered.partitions:
                if p.error_code != ErrorCode.NONE:
                    outcome[answered.topic_name, p.partition_index] = broker_error(
                        p.error_code, group_id=group_id, api="AlterShareGroupOffsets"
                    )
        return outcome

    def _describe_once(self, group_id: str) -> GroupDescription:
        node = self._coordinator(group_id)
        try:
            response = self.transport.send(
                m.DescribeGroupRequest(group_id),
                m.DescribeGroupResponse,
                coordinator=node,
                timeout_s=self.timeout_s,
            )
        except TransportError as e:
            raise e.stop_error(f"group {group_id!r}: DescribeGroups") from e
        if response.error_code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
            error = broker_error(response.error_code, group_id=group_id, api="DescribeGroups")
            raise _NotReady(error) if response.error_code in _NOT_READY else error
        described = group_description(group_id, response)
        if described.exists:
            return described
        # Not a classic group: it may be a KIP-848 consumer group (Kafka 4+), or a share
        # group (Kafka 4.1+); each describe API calls a group of another type not found.
        return (
            self._describe_consumer_group(group_id, node)
            or self._describe_share_group(group_id, node)
            or described
        )

    def _describe_consumer_group(
        self, group_id: str, node: CoordinatorNode
    ) -> GroupDescription | None:
        """The KIP-848 group ``group_id`` (ConsumerGroupDescribe); None if there is none, or
        the broker has no such groups (older than Kafka 4.0)."""
        api = "ConsumerGroupDescribe"
        request = cg.ConsumerGroupDescribeRequest((group_id,))
        answer = self._ask(api, request, cg.ConsumerGroupDescribeResponse, group_id, node)
        group = _the_group(answer.groups, api, group_id, absent=_NO_SUCH_GROUP)
        return None if group is None else consumer_group_description(group)

    def _describe_share_group(
        self, group_id: str, node: CoordinatorNode
    ) -> GroupDescription | None:
        """The share group ``group_id`` (ShareGroupDescribe); None if there is none, or the
        broker has no share groups (older than Kafka 4.1, or share.version not enabled)."""
        api = "ShareGroupDescribe"
        request = sg.ShareGroupDescribeRequest((group_id,))
        answer = self._ask(api, request, sg.ShareGroupDescribeResponse, group_id, node)
        group = _the_group(answer.groups, api, group_id, absent=_NO_SUCH_GROUP)
        if group is None:
            return None
        return share_group_description(group, self._share_partitions(group_id, node))

    def _share_partitions(
        self, group_id: str, node: CoordinatorNode
    ) -> sg.DescribedShareGroupOffsets | None:
        """The share-partition state of the group (DescribeShareGroupOffsets v1); None where
        the broker does not offer it."""
        api = "DescribeShareGroupOffsets"
        request = sg.DescribeShareGroupOffsetsRequest((sg.ShareGroupOffsetsRequestGroup(group_id),))
        answer = self._ask(api, request, sg.DescribeShareGroupOffsetsResponse, group_id, node)
        return _the_group(answer.groups, api, group_id, absent=(ErrorCode.UNSUPPORTED_VERSION,))

    def _ask(
        self, api: str, request: Any, response_type: type[_R], group_id: str, node: CoordinatorNode
    ) -> _R:
        """The answer to ``request`` about ``group_id``; no answer is an error."""
        try:
            return self.transport.send(
                request, response_type, coordinator=node, timeout_s=self.timeout_s
            )
        except TransportError as e:
            raise e.stop_error(f"group {group_id!r}: {api}") from e


class _AnsweredGroup(Protocol):
    @property
    def error_code(self) -> int: ...


_G = TypeVar("_G", bound=_AnsweredGroup)

# The describe APIs' answer for a group of another type, or from a broker without them.
_NO_SUCH_GROUP = (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION)


def _the_group(
    groups: Sequence[_G], api: str, group_id: str, *, absent: tuple[int, ...]
) -> _G | None:
    """The one group of an answer about ``group_id`` alone; None if there is none or its
    error code is one of ``absent``.

    Raises:
        _NotReady: an error that passes (the caller asks again).
        CoordinationError: any other error the broker answered with.
    """
    (group,) = groups or (None,)
    if group is None or group.error_code in absent:
        return None
    if group.error_code != ErrorCode.NONE:
        error = broker_error(group.error_code, group_id=group_id, api=api)
        raise _NotReady(error) if group.error_code in _NOT_READY else error
    return group


def _partitions(assigned: Sequence[cg.DescribedTopicPartitions]) -> list[list[Any]]:
    return sorted([t.topic_name, p] for t in assigned for p in t.partitions)


def share_group_description(
    group: sg.DescribedShareGroup, offsets: sg.DescribedShareGroupOffsets | None = None
) -> GroupDescription:
    """A share group as ShareGroupDescribe describes it, with its share-partitions' state
    where DescribeShareGroupOffsets told it (``offsets``).

    Several members of a share group may be assigned the same partition (they share its
    records): the summary's ``sharing`` lists, per partition, the members fetching from it.
    Its ``share_partitions`` gives, per partition the group has state for, the start offset
    (records before it are done: accepted, rejected or archived) and the lag (records from
    there on not yet done; -1 where the broker cannot tell), or the partition's error.
    """
    members = tuple(
        MemberDescription(
            member_id=x.member_id,
            group_instance_id=None,  # share groups have no static membership
            client_id=x.client_id,
            client_host=x.client_host,
            metadata=b"",
            assignment=b"",
            decoded={
                "member_epoch": x.member_epoch,
                "assigned": _partitions(x.assignment),
                "subscribed_topics": sorted(x.subscribed_topic_names),
                "rack": x.rack_id,
            },
        )
        for x in sorted(group.members, key=lambda x: x.member_id)
    )
    sharing: dict[tuple[str, int], list[str]] = {}
    for x in group.members:
        for assigned in x.assignment:
            for partition in assigned.partitions:
                sharing.setdefault((assigned.topic_name, partition), []).append(x.member_id)
    summary: dict[str, Any] = {
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "sharing": {f"{t}-{p}": sorted(ids) for (t, p), ids in sorted(sharing.items())},
    }
    if offsets is not None:
        state: dict[tuple[str, int], dict[str, Any]] = {}
        for topic in offsets.topics:
            for p in topic.partitions:
                state[topic.topic_name, p.partition_index] = (
                    {"start_offset": p.start_offset, "lag": p.lag}
                    if p.error_code == ErrorCode.NONE
                    else {"error": _error_name(p.error_code, p.error_message)}
                )
        summary["share_partitions"] = {f"{t}-{p}": state[t, p] for t, p in sorted(state)}
    return GroupDescription(
        group_id=group.group_id,
        state=group.group_state,
        protocol_type="share",
        protocol=group.assignor_name,
        members=members,
        summary=summary,
        group_type="share",
    )


def _error_name(code: int, message: str | None) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


def consumer_group_description(group: cg.DescribedConsumerGroup) -> GroupDescription:
    """A KIP-848 consumer group as ConsumerGroupDescribe describes it."""
    members = tuple(
        MemberDescription(
            member_id=x.member_id,
            group_instance_id=x.instance_id,
            client_id=x.client_id,
            client_host=x.client_host,
            metadata=b"",
            assignment=b"",
            decoded={
                "member_epoch": x.member_epoch,
                "assigned": _partitions(x.assignment),
                "target": _partitions(x.target_assignment),
                "subscribed_topics": sorted(x.subscribed_topic_names),
                "subscribed_regex": x.subscribed_topic_regex,
                "rack": x.rack_id,
                # A classic member of a group being upgraded to (or from) the new protocol.
                "classic_member": x.member_type == 0,
            },
        )
        for x in sorted(group.members, key=lambda x: x.member_id)
    )
    return GroupDescription(
        group_id=group.group_id,
        state=group.group_state,
        protocol_type="consumer",
        protocol=group.assignor_name,
        members=members,
        summary={
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "owned": {x.member_id: x.decoded["assigned"] for x in members if x.decoded is not None},
        },
        group_type="consumer",
    )


def group_description(group_id: str, response: m.DescribeGroupResponse) -> GroupDescription:
    """The group a DescribeGroups answer without a refusal describes, decoded."""
    if response.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return GroupDescription(group_id, "Dead", "", "", ())
    decoder = _decoder(response.protocol_type)
    members = [
        MemberDescription(
            member_id=x.member_id,
            group_instance_id=x.group_instance_id,
            client_id=x.client_id,
            client_host=x.client_host,
            metadata=x.metadata,
            assignment=x.assignment,
            decoded=_decode(decoder, response.protocol, x.metadata, x.assignment),
        )
        for x in sorted(response.members, key=lambda x: x.member_id)
    ]
    summary: dict[str, Any] = {}
    if decoder is not None:
        readable = [x.decoded for x in members if x.decoded and "error" not in x.decoded]
        try:
            summary = decoder.summarize(readable)
        except (ValueError, KeyError, TypeError) as e:
            summary = {"error": f"cannot summarize: {e}"}
    return GroupDescription(
        group_id=group_id,
        state=response.state,
        protocol_type=response.protocol_type,
        protocol=response.protocol,
        members=tuple(members),
        summary=summary,
    )


def _decode(
    decoder: GroupDecoder | None, protocol: str, metadata: bytes, assignment: bytes
) -> dict[str, Any] | None:
    if decoder is None:
        return None
    try:
        return decoder.describe_member(protocol, metadata, assignment)
    except (ValueError, KeyError, TypeError, CoordinationError) as e:
        return {"error": f"unreadable: {e}"}
