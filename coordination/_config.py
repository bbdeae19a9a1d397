"""Settings of a group member, validated once, at construction.

Names are Kafka's, spelled as kafka-python spells them, so existing
kafka-python settings carry over. Connection settings (``bootstrap_servers``,
TLS, SASL, proxies) are not interpreted here: they pass through to
kafka-python's network layer unchanged, after a check that kafka-python knows
the name.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final

from .errors import ConfigurationError
from .hooks import CoordinationHooks, check_hooks
from .parts import check_int

log = logging.getLogger("coordination.config")

# Connection settings handed to kafka-python as they are (its KafkaConnectionManager's keys).
CONNECTION_SETTINGS: Final = frozenset(
    {
        "bootstrap_servers",
        "client_software_name",
        "client_software_version",
        "receive_message_max_bytes",
        "reconnect_backoff_ms",
        "reconnect_backoff_max_ms",
        "socket_connection_setup_timeout_ms",
        "socket_connection_setup_timeout_max_ms",
        "socket_options",
        "max_in_flight_requests_per_connection",
        "connections_max_idle_ms",
        "security_protocol",
        "ssl_context",
        "ssl_check_hostname",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_crlfile",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_name",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
        "proxy_url",
        "api_version",
        "metadata_max_age_ms",
        "client_dns_lookup",
    }
)
# Settings that hold a credential: repr() and str() of the settings show "[hidden]" instead,
# as Kafka's clients do for their password-typed keys, so that a logged config, or an error
# tracker that records frame locals, does not leak it.
SECRET_SETTINGS: Final = frozenset(
    {"sasl_plain_password", "ssl_password", "sasl_oauth_token_provider"}
)
# The connection settings a second client (producer, consumer, admin) must share with the group.
_CLIENT_PREFIXES: Final = ("bootstrap_servers", "security_protocol", "ssl_", "sasl_")

_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's rule for group.instance.id (JoinGroupRequest.validateGroupInstanceId): a topic-like name.
_INSTANCE_ID = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Kafka's protocol writes strings with an int16 length: a longer id cannot be sent at all.
_MAX_STRING_BYTES: Final = 32_767
# host:port, host, [ipv6]:port
_SERVER = re.compile(r"(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^\s:\[\]]+))(?::(?P<port>\d+))?")
_TLS_FILES: Final = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")


class _Hidden:
    def __repr__(self) -> str:
        return "[hidden]"


_HIDDEN: Final = _Hidden()


class ConnectionSettings(dict[str, Any]):
    """Connection settings (a plain dict) whose repr() and str() show each secret (see
    ``SECRET_SETTINGS``) as ``[hidden]``; the values themselves are unchanged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(
            {k: _HIDDEN if k in SECRET_SETTINGS and v is not None else v for k, v in self.items()}
        )

    __str__ = __repr__


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorConfig:
    """The settings of one group member.

    Build it with :meth:`from_settings`, which also sorts out connection
    settings; every field is checked in ``__post_init__``.
    """

    group_id: str
    """The group to join (Kafka ``group.id``). Required, non-empty."""

    group_instance_id: str | None = None
    """A static member id (Kafka ``group.instance.id``, KIP-345). Default None (dynamic).

    A static member that restarts within ``session_timeout_ms`` takes its place back
    without a rebalance; it does not send LeaveGroup on close. Each running
    instance needs its own id: a second one with the same id fences the first. Since the
    broker replaces a static member at once, a static member that gets a new member id holds
    its assignment back for min(session_timeout_ms, rebalance_timeout_ms), until any earlier
    process with the same id has stopped acting (docs/membership.md)."""

    session_timeout_ms: int = 45_000
    """How long the broker waits for a heartbeat before evicting the member
    (Kafka ``session.timeout.ms``). Default 45000 (Kafka's since 3.0). Must lie in the
    broker's ``group.min.session.timeout.ms`` (6000) .. ``group.max.session.timeout.ms``."""

    heartbeat_interval_ms: int = 3_000
    """Time between heartbeats (Kafka ``heartbeat.interval.ms``). Default 3000. Must be below
    ``session_timeout_ms``; keep it at a third or less. It also bounds how fast a member
    notices that a rebalance began."""

    rebalance_timeout_ms: int = 60_000
    """How long the broker waits for every member to rejoin during a rebalance, and for the
    leader's assignment (Kafka ``rebalance.timeout.ms``; the Java consumer sends
    ``max.poll.interval.ms``). Default 60000, Kafka Connect's: callbacks here run on the
    engine's own thread, not between the user's polls, so the consumer's 300 s is not needed.
    ``on_join_prepare`` and ``perform_assignment`` must finish well inside it."""

    retry_backoff_ms: int = 100
    """First wait before retrying a failed request (Kafka ``retry.backoff.ms``). Default 100."""

    retry_backoff_max_ms: int = 1_000
    """Upper bound of the exponential retry backoff (Kafka ``retry.backoff.max.ms``, KIP-580).
    Default 1000."""

    request_timeout_ms: int = 30_000
    """How long to wait for a response (Kafka ``request.timeout.ms``). Default 30000.
    JoinGroup waits ``max(request_timeout_ms, rebalance_timeout_ms + 5000)``, since the
    broker holds it for up to the rebalance timeout."""

    leave_group_on_close: bool = True
    """Send LeaveGroup when a dynamic member closes, so the group rebalances at once instead of
    after the session timeout. Default True. Static members never send it (as in Kafka)."""

    max_assignment_bytes: int = 1_000_000
    """The most group state the leader sends: every member's metadata plus its assignment,
    plus ids. Default 1000000. The broker stores it as one record of ``__consumer_offsets``,
    which that topic's ``max.message.bytes`` limits (1048588 by default); a larger one is
    refused with UNKNOWN_SERVER_ERROR, for ever. Above this limit the leader stops with
    :class:`~coordination.errors.AssignmentError` instead. Raise it only together with the
    broker's limit."""

    wakeup_topic: str | None = "coordination.wakeups"
    """The topic of the wake-up channel (docs/membership.md#wake-ups), or None to turn it off.
    A member that joins, rejoins of its own accord or leaves appends a small record to its
    group's partition of this topic; the other members long-poll it and heartbeat at once, so
    a rebalance starts in milliseconds rather than at everyone's next heartbeat. Created on
    first use (16 partitions, one hour's retention); the principal needs CREATE (or an
    existing topic), DESCRIBE, READ and WRITE on it. Where it cannot be used the member logs
    one warning and relies on heartbeats. Off with an injected transport (tests,
    simulations). Default "coordination.wakeups"."""

    hooks: Sequence[CoordinationHooks] = ()
    """Objects told of the member's events as they happen (rebalances, failed heartbeats,
    leadership, tasks, commits): :mod:`coordination.hooks`, and the Prometheus and
    OpenTelemetry exporters of :mod:`coordination.exporters`. Default none."""

    client_id: str = "coordination"
    """Client id sent with every request (Kafka ``client.id``). Default "coordination"."""

    connection: Mapping[str, Any] = field(default_factory=dict)
    """Connection settings passed to kafka-python unchanged (``bootstrap_servers``, TLS, SASL).
    Its repr, and the config's, show ``sasl_plain_password``, ``ssl_password`` and
    ``sasl_oauth_token_provider`` as ``[hidden]``."""

    def client_settings(self) -> dict[str, Any]:
        """What another kafka-python client of the same cluster needs: bootstrap servers,
        security protocol, TLS and SASL settings (not the socket tuning). Its repr hides the
        secrets as the config's does."""
        return ConnectionSettings(
            (k, v) for k, v in self.connection.items() if k.startswith(_CLIENT_PREFIXES)
        )

    def __post_init__(self) -> None:
        # Copied: a connection mapping the caller keeps changing must not change this config,
        # and the copy's repr hides the secrets.
        object.__setattr__(self, "connection", ConnectionSettings(self.connection))
        if not isinstance(self.group_id, str) or not self.group_id.strip():
            raise ConfigurationError(f"group_id must be a non-empty string, got {self.group_id!r}")
        for name in ("group_id", "client_id"):
            size = len(str(getattr(self, name)).encode("utf-8", "surrogatepass"))
            if size > _MAX_STRING_BYTES:
                raise ConfigurationError(
                    f"{name} is {size} bytes long; Kafka's protocol allows at most "
                    f"{_MAX_STRING_BYTES} bytes (UTF-8): use a shorter {name}"
                )
        if self.group_instance_id is not None and not _INSTANCE_ID.fullmatch(
            self.group_instance_id
        ):
            raise ConfigurationError(
                f"group_instance_id {self.group_instance_id!r} is invalid: use 1 to 249 of the "
                "characters a-z A-Z 0-9 . _ - (or None for a dynamic member)"
            )
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "rebalance_timeout_ms",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "request_timeout_ms",
            "max_assignment_bytes",
        ):
            check_int(name, getattr(self, name), minimum=1, rule="a positive integer (ms)")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigurationError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms}); a third of it or less is usual"
            )
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            log.warning(
                "heartbeat_interval_ms (%d) is above a third of session_timeout_ms (%d): one or "
                "two lost heartbeats will get this member evicted",
                self.heartbeat_interval_ms,
                self.session_timeout_ms,
            )
        if self.heartbeat_interval_ms >= self.rebalance_timeout_ms:
            log.warning(
                "heartbeat_interval_ms (%d) is not below rebalance_timeout_ms (%d): a member "
                "that learns of a rebalance only at its next heartbeat (no wake-up reached it) "
                "can be dropped from it for not rejoining in time",
                self.heartbeat_interval_ms,
                self.rebalance_timeout_ms,
            )
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigurationError(
                f"retry_backoff_max_ms ({self.retry_backoff_max_ms}) must not be below "
                f"retry_backoff_ms ({self.retry_backoff_ms})"
            )
        if not isinstance(self.client_id, str) or not self.client_id:
            raise ConfigurationError(
                f"client_id must be a non-empty string, got {self.client_id!r}"
            )
        object.__setattr__(self, "hooks", check_hooks(self.hooks))
        if self.wakeup_topic is not None and not _TOPIC_NAME.fullmatch(self.wakeup_topic):
            raise ConfigurationError(
                f"wakeup_topic {self.wakeup_topic!r} is not a valid Kafka topic name: use 1 to "
                "249 of the characters a-z A-Z 0-9 . _ - (or None to turn the channel off)"
            )
        if "bootstrap_servers" not in self.connection:
            raise ConfigurationError(
                "bootstrap_servers is required, e.g. bootstrap_servers='localhost:9092' "
                "(`coordination broker` starts a local broker)"
            )
        _check_servers(self.connection["bootstrap_servers"])
        for name in _TLS_FILES:
            path = self.connection.get(name)
            if path is not None and not (isinstance(path, str) and os.access(path, os.R_OK)):
                raise ConfigurationError(
                    f"{name}={path!r} is not a readable file: give the path of the "
                    f"{'CA certificate' if name == 'ssl_cafile' else 'file'} in PEM format"
                )
        protocol = self.connection.get("security_protocol", "PLAINTEXT")
        if protocol not in _SECURITY_PROTOCOLS:
            raise ConfigurationError(
                f"security_protocol must be one of {', '.join(_SECURITY_PROTOCOLS)}, "
                f"got {protocol!r}"
            )

    @property
    def is_static(self) -> bool:
        """True for a static member (one with a ``group_instance_id``)."""
        return self.group_instance_id is not None

    @classmethod
    def from_settings(cls, group_id: str, settings: Mapping[str, Any]) -> CoordinatorConfig:
        """Sort keyword settings into engine fields and connection settings, and validate.

        Raises:
            ConfigurationError: a setting is unknown (the message suggests the nearest
                known name) or breaks a rule.
        """
        engine_names = {f.name for f in fields(cls)} - {"group_id", "connection"}
        engine: dict[str, Any] = {}
        connection: dict[str, Any] = {}
        for key, value in settings.items():
            if key in engine_names:
                engine[key] = value
            elif key in CONNECTION_SETTINGS:
                connection[key] = value
            else:
                known = sorted(engine_names | CONNECTION_SETTINGS)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigurationError(f"unknown setting {key!r}{hint}")
        return cls(group_id=group_id, connection=connection, **engine)


_SERVERS_EXAMPLE: Final = (
    "e.g. bootstrap_servers='localhost:9092' or ['kafka-1:9092', 'kafka-2:9092']"
)


def bootstrap_list(given: Any) -> list[str]:
    """``bootstrap_servers`` ('host:port', 'h1:p1,h2:p2' or a list of 'host:port') as a list.

    Raises:
        ConfigurationError: not a string or a list of strings, or an empty entry.
    """
    if isinstance(given, str):
        servers = [s.strip() for s in given.split(",")]
    elif isinstance(given, list | tuple) and all(isinstance(s, str) for s in given):
        servers = [s.strip() for s in given]
    else:
        raise ConfigurationError(
            f"bootstrap_servers must be a 'host:port' string or a list of them, got "
            f"{given!r} ({type(given).__name__}); {_SERVERS_EXAMPLE}"
        )
    if not servers or not all(servers):
        raise ConfigurationError(
            f"bootstrap_servers has an empty entry: {given!r}; {_SERVERS_EXAMPLE}"
        )
    return servers


def split_server(server: str) -> tuple[str, int]:
    """``host:port`` (or ``host``, port 9092; ``[ipv6]:port``) as (host, port).

    Raises:
        ConfigurationError: not host:port, or the port is outside 1-65535.
    """
    match = _SERVER.fullmatch(server)
    port = int(match.group("port") or 9092) if match else 0
    if match is None or not 0 < port < 65536:
        raise ConfigurationError(
            f"bootstrap_servers entry {server!r} is not host:port (port 1-65535); "
            f"{_SERVERS_EXAMPLE}"
        )
    return match.group("v6") or match.group("host"), port


def _check_servers(given: Any) -> None:
    for server in bootstrap_list(given):
        split_server(server)
