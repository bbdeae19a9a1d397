"""Every error this library raises, under one root class.

Catch :class:`CoordinationError` to catch them all. The tree::

    CoordinationError
    ├── ConfigurationError (also ValueError)     a setting or argument is invalid
    ├── CoordinatorStateError (also RuntimeError) misuse: call after close, close from a callback
    ├── CoordinationTimeoutError (also TimeoutError) a blocking call ran out of time
    ├── ConnectionFailedError                     the cluster refuses this client's settings
    │   ├── AuthenticationFailedError             SASL login refused (user, password, mechanism)
    │   └── TlsError                              certificate not trusted, wrong host, not TLS
    ├── BrokerError                               the broker answered with an error code
    │   ├── RetriableBrokerError                  retried with backoff by the engine
    │   ├── RebalanceRequiredError                answered by a rejoin by the engine
    │   ├── MembershipLostError                   the member's generation or id is gone
    │   ├── CommitFailedError                     an offset commit was fenced: nothing committed
    │   └── FatalBrokerError                      the member stops; a person must act
    │       ├── FencedInstanceError               FENCED_INSTANCE_ID
    │       ├── GroupAuthorizationError           GROUP_AUTHORIZATION_FAILED
    │       ├── TopicAuthorizationError           TOPIC_AUTHORIZATION_FAILED
    │       ├── InconsistentGroupProtocolError    INCONSISTENT_GROUP_PROTOCOL
    │       ├── InvalidSessionTimeoutError        INVALID_SESSION_TIMEOUT
    │       ├── InvalidGroupIdError               INVALID_GROUP_ID
    │       ├── GroupMaxSizeReachedError          GROUP_MAX_SIZE_REACHED
    │       ├── UnsupportedVersionError           UNSUPPORTED_VERSION
    │       │   └── ShareGroupsUnsupportedError   the broker has no share groups (KIP-932)
    │       ├── UnreleasedInstanceIdError         UNRELEASED_INSTANCE_ID (consumer groups)
    │       ├── UnsupportedAssignorError          UNSUPPORTED_ASSIGNOR (consumer groups)
    │       └── InvalidRegularExpressionError     INVALID_REGULAR_EXPRESSION (consumer groups)
    ├── ProtocolCodecError                        metadata or assignment bytes could not be decoded
    └── AssignmentError                           perform_assignment raised or returned a bad plan

Broker errors carry ``code`` and ``error_name`` (Kafka's), ``group_id`` and
``member_id``; their message says what to do. :func:`broker_error` builds the
right class for a code from the engine's error table, which also says what the
engine does about each code (coordination/_engine/classify.py, shown in
docs/errors.md).
"""

from __future__ import annotations

from typing import ClassVar

from ._protocol import error_codes as _codes

__all__ = [
    "AssignmentError",
    "AuthenticationFailedError",
    "BrokerError",
    "CommitFailedError",
    "ConfigurationError",
    "ConnectionFailedError",
    "CoordinationError",
    "CoordinationTimeoutError",
    "CoordinatorStateError",
    "FatalBrokerError",
    "FencedInstanceError",
    "GroupAuthorizationError",
    "GroupMaxSizeReachedError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidRegularExpressionError",
    "InvalidSessionTimeoutError",
    "MembershipLostError",
    "ProtocolCodecError",
    "RebalanceRequiredError",
    "RetriableBrokerError",
    "ShareGroupsUnsupportedError",
    "TlsError",
    "TopicAuthorizationError",
    "UnreleasedInstanceIdError",
    "UnsupportedAssignorError",
    "UnsupportedVersionError",
    "broker_error",
]


class CoordinationError(Exception):
    """Root of every error raised by ``coordination`` and ``recipes``."""


class ConfigurationError(CoordinationError, ValueError):
    """A setting or argument is invalid. The message names it and the rule it broke."""


class CoordinatorStateError(CoordinationError, RuntimeError):
    """A method was called in a state that does not allow it (after close, from a callback)."""


class CoordinationTimeoutError(CoordinationError, TimeoutError):
    """A blocking call (``ensure_active_group``, ``close``) ran out of time."""


class ConnectionFailedError(CoordinationError):
    """The cluster refuses this client's connection settings; retrying cannot help.

    Raised (and the member stopped) when a SASL login is refused or a TLS connection
    cannot be set up (:class:`AuthenticationFailedError`, :class:`TlsError`). A cluster that
    is merely unreachable (DNS, refused TCP, timeouts) is not: the engine keeps retrying,
    logs a WARNING naming the servers and the cause, and a blocking call's
    :class:`CoordinationTimeoutError` says the bootstrap servers could not be reached and why.
    """


class AuthenticationFailedError(ConnectionFailedError):
    """The broker refused the SASL login: wrong password, unknown user, or a mechanism the
    listener does not enable (``sasl_mechanism``)."""


class TlsError(ConnectionFailedError):
    """No TLS session could be set up: the broker's certificate is not signed by a trusted
    CA (``ssl_cafile``), it does not name the host connected to (``bootstrap_servers``), or
    the port is not a TLS listener (``security_protocol`` does not match the listener's)."""


class ProtocolCodecError(CoordinationError):
    """Metadata or assignment bytes could not be decoded."""


class AssignmentError(CoordinationError):
    """``perform_assignment`` raised or returned an assignment the engine cannot send."""


class BrokerError(CoordinationError):
    """The broker answered a group request with an error code.

    Attributes:
        code: Kafka's numeric error code.
        error_name: Kafka's name for it, e.g. ``FENCED_INSTANCE_ID``.
        group_id: the group the request was for.
        member_id: the member id the request was sent with ("" if none yet).
        api: the request that failed, e.g. ``JoinGroup``.
    """

    retriable: ClassVar[bool] = False
    # What the user should do about it; each fatal class says it in its own words.
    hint: ClassVar[str] = ""

    def __init__(self, code: int, *, group_id: str, member_id: str = "", api: str = "") -> None:
        self.code = code
        self.error_name = _codes.error_name(code)
        self.group_id = group_id
        self.member_id = member_id
        self.api = api
        who = f"group {group_id!r}" + (f", member {member_id!r}" if member_id else "")
        where = f"{api} failed" if api else "broker error"
        message = f"{who}: {where} with {self.error_name} ({code}): {_codes.describe(code)}"
        if self.hint:
            message += f". {self.hint}"
        super().__init__(message)


class RetriableBrokerError(BrokerError):
    """A transient broker condition; the engine retries with backoff."""

    retriable = True


class RebalanceRequiredError(BrokerError):
    """The group is rebalancing or needs this member to join again; the engine rejoins."""

    retriable = True


class MembershipLostError(BrokerError):
    """This member's generation or member id is no longer valid; the engine rejoins."""

    retriable = True


class CommitFailedError(BrokerError):
    """An offset commit was rejected because of the group, not the offsets: the member's
    generation is stale, its member id is gone, or the group is rebalancing.

    Nothing was committed. The member's partitions may already belong to another member,
    which will start from the last committed offsets: records processed since then will be
    processed again there. Do not retry the commit; let the member rejoin (it does so by
    itself) and continue with what it is assigned then.
    """

    hint = "Nothing was committed; the partitions may now belong to another member"


class FatalBrokerError(BrokerError):
    """An error the engine cannot recover from by itself; the member stops."""


class FencedInstanceError(FatalBrokerError):
    """Another member joined with this member's ``group_instance_id``."""

    hint = (
        "Two processes share this group_instance_id; give every instance its own id "
        "and stop the duplicate"
    )


class GroupAuthorizationError(FatalBrokerError):
    """The principal lacks READ (or DESCRIBE) permission on the group."""

    hint = "Grant the principal READ on the group (and DESCRIBE to find its coordinator)"


class TopicAuthorizationError(FatalBrokerError):
    """The principal may not read or commit the group's offsets of a topic (the request
    names the topics)."""

    hint = (
        "Grant the principal DESCRIBE on the topic to read the group's offsets of it and READ "
        "to commit them (see docs/security.md for what each recipe needs)"
    )


class InconsistentGroupProtocolError(FatalBrokerError):
    """The member's protocol type or protocols do not match the group's."""

    hint = (
        "Every member of a group must use the same protocol_type and share at least one "
        "protocol name; use a different group_id for a different kind of member"
    )


class InvalidSessionTimeoutError(FatalBrokerError):
    """``session_timeout_ms`` is outside the range the broker allows."""

    hint = (
        "Set session_timeout_ms between the broker's group.min.session.timeout.ms "
        "(default 6000) and group.max.session.timeout.ms (default 1800000)"
    )


class InvalidGroupIdError(FatalBrokerError):
    """The group id is not valid."""

    hint = "Use a non-empty group_id"


class GroupMaxSizeReachedError(FatalBrokerError):
    """The group already has as many members as the broker's ``group.max.size`` allows."""

    hint = "Raise the broker's group.max.size or run fewer members"


class UnsupportedVersionError(FatalBrokerError):
    """The broker does not support a request version this member needs."""

    hint = (
        "Static membership (group_instance_id) needs Kafka 2.3 or newer, and the consumer "
        "group protocol (group_protocol='consumer', KIP-848) Kafka 4.0 or newer; upgrade the "
        "broker or unset the setting"
    )


class ShareGroupsUnsupportedError(UnsupportedVersionError):
    """(Share groups, KIP-932) the broker has no share groups: it is older than Kafka 4.1
    (it offers none of their requests), or share groups are not enabled on it (Kafka 4.1+
    answers UNSUPPORTED_VERSION while the ``share.version`` feature is 0)."""

    hint = (
        "Share groups need Kafka 4.2 or newer (production-ready there; 4.1 is a preview) with "
        "the share.version feature enabled: bin/kafka-features.sh --bootstrap-server ... "
        "upgrade --feature share.version=1 (a cluster formatted by 4.2+ has it on)"
    )


class UnreleasedInstanceIdError(FatalBrokerError):
    """(Consumer groups, KIP-848) another member with this ``group_instance_id`` is still in
    the group. Unlike the classic protocol, the broker refuses the *new* member."""

    hint = (
        "Stop the other process with this group_instance_id (or wait for its session to end) "
        "before starting this one; give every instance its own id"
    )


class UnsupportedAssignorError(FatalBrokerError):
    """(Consumer groups) the broker has no assignor by the name given."""

    hint = (
        "Set group_remote_assignor to one of the broker's group.consumer.assignors "
        "('uniform' and 'range' by default), or leave it unset for the broker's default"
    )


class InvalidRegularExpressionError(FatalBrokerError):
    """(Consumer groups) the broker cannot parse the subscription's pattern."""

    hint = (
        "The broker evaluates the pattern with RE2J on whole topic names: use RE2 syntax "
        "(no lookarounds or backreferences)"
    )


# The class each broker code raises: the error column of the engine's table
# (coordination/_engine/classify.py), which registers it here when it loads (importing any
# part of the package loads it). The table refers to the classes above, so it is the one
# that imports: this module imports nothing of the engine.
_CLASS_OF_CODE: dict[int, type[BrokerError]] = {}


def _register_classes(classes: dict[int, type[BrokerError]]) -> None:
    """Record the class raised for each code (called once, by the engine's error table)."""
    _CLASS_OF_CODE.update(classes)


def broker_error(code: int, *, group_id: str, member_id: str = "", api: str = "") -> BrokerError:
    """Build the error class the engine's error table gives ``code`` (``BrokerError`` for
    codes it does not list)."""
    cls = _CLASS_OF_CODE.get(code, BrokerError)
    return cls(code, group_id=group_id, member_id=member_id, api=api)
