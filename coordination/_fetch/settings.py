"""The lean fetcher's settings: kafka-python's consumer settings it honours, validated once.

What it cannot do yet is refused here, by name, rather than done wrongly: fetching from the
closest replica
(KIP-392, ``client_rack``), SASL, proxies and a pinned ``api_version`` (the direct
connections speak PLAINTEXT and TLS only), and settings it does not know.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Final

from .._config import bootstrap_list, split_server
from .._transport.kafka import _direct_settings
from .._transport.link import DirectSettings
from ..errors import ConfigurationError
from .records import Deserialize, deserializer

_USE_DEFAULT: Final = "; use the default fetcher (kafka-python's KafkaConsumer) for it"

# Settings read here, with kafka-python's defaults (its KafkaConsumer.DEFAULT_CONFIG).
_DEFAULTS: Final[dict[str, Any]] = {
    "bootstrap_servers": "localhost",
    "client_id": "kafka-python-lean",
    "group_id": None,
    "auto_offset_reset": "latest",
    "enable_auto_commit": False,
    "fetch_min_bytes": 1,
    "fetch_max_wait_ms": 500,
    "fetch_max_bytes": 52428800,
    "max_partition_fetch_bytes": 1048576,
    "max_poll_records": 500,
    "check_crcs": True,
    "key_deserializer": None,
    "value_deserializer": None,
    "isolation_level": "read_uncommitted",
    "enable_incremental_fetch_sessions": True,
    "request_timeout_ms": 30000,
    "retry_backoff_ms": 100,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 30000,
    "metadata_max_age_ms": 300000,
    "bootstrap_timeout_ms": 30000,
    "receive_buffer_bytes": None,
    "send_buffer_bytes": None,
    "client_rack": "",
}
# Passed on to the connections as they are (kafka-python's names).
_CONNECTION: Final = (
    "security_protocol",
    "ssl_",
    "sasl_",
    "socket_options",
    "socket_connection_setup_timeout_ms",
    "receive_message_max_bytes",
    "connections_max_idle_ms",
    "api_version",
    "proxy_url",
    "client_software_",
)
_POSITIVE: Final = (
    "fetch_max_wait_ms",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "max_poll_records",
    "request_timeout_ms",
    "bootstrap_timeout_ms",
    "metadata_max_age_ms",
)
_NOT_NEGATIVE: Final = ("fetch_min_bytes", "retry_backoff_ms", "reconnect_backoff_ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSettings:
    """What the fetcher reads its settings as (the kafka-python names, in ms and bytes)."""

    servers: tuple[tuple[str, int], ...]
    group_id: str
    auto_offset_reset: str
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    check_crcs: bool
    key_deserializer: Deserialize | None
    value_deserializer: Deserialize | None
    sessions: bool
    read_committed: bool
    request_timeout_ms: int
    retry_backoff_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    metadata_max_age_ms: int
    bootstrap_timeout_ms: int
    direct: DirectSettings | None


def fetch_settings(config: dict[str, Any], *, connect: bool = True) -> FetchSettings:
    """``config`` (kafka-python's consumer settings) validated; ``connect=False`` (tests):
    no connection settings are built.

    Raises:
        ConfigurationError: a bad value, a setting this fetcher does not know, or one it
            does not support (the message names it and says to use the default fetcher).
    """
    unknown = sorted(k for k in config if k not in _DEFAULTS and not k.startswith(_CONNECTION))
    if unknown:
        raise ConfigurationError(f"the lean fetcher does not know the settings {unknown}")
    given = {**_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    _refuse_unsupported(given)
    for name in _POSITIVE:
        _check_int(name, given[name], 1)
    for name in _NOT_NEGATIVE:
        _check_int(name, given[name], 0)
    reset = given["auto_offset_reset"]
    if reset not in ("earliest", "latest", "none"):
        raise ConfigurationError(
            f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {reset!r}"
        )
    servers = tuple(split_server(s) for s in bootstrap_list(given["bootstrap_servers"]))
    direct = _connection_settings(given) if connect else None
    return FetchSettings(
        servers=servers,
        group_id=str(given["group_id"] or ""),
        auto_offset_reset=reset,
        fetch_min_bytes=given["fetch_min_bytes"],
        fetch_max_wait_ms=given["fetch_max_wait_ms"],
        fetch_max_bytes=given["fetch_max_bytes"],
        max_partition_fetch_bytes=given["max_partition_fetch_bytes"],
        max_poll_records=given["max_poll_records"],
        check_crcs=bool(given["check_crcs"]),
        key_deserializer=_deserializer(given, "key_deserializer"),
        value_deserializer=_deserializer(given, "value_deserializer"),
        sessions=bool(given["enable_incremental_fetch_sessions"]),
        read_committed=given["isolation_level"] == "read_committed",
        request_timeout_ms=given["request_timeout_ms"],
        retry_backoff_ms=given["retry_backoff_ms"],
        reconnect_backoff_ms=given["reconnect_backoff_ms"],
        reconnect_backoff_max_ms=max(given["reconnect_backoff_max_ms"], 1),
        metadata_max_age_ms=given["metadata_max_age_ms"],
        bootstrap_timeout_ms=given["bootstrap_timeout_ms"],
        direct=direct,
    )


def _refuse_unsupported(given: dict[str, Any]) -> None:
    level = given["isolation_level"]
    if level not in ("read_uncommitted", "read_committed"):
        raise ConfigurationError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', got {level!r}"
        )
    if given["client_rack"]:
        raise ConfigurationError(
            f"client_rack={given['client_rack']!r}: the lean fetcher always fetches from the "
            "leader; fetching from the closest replica (KIP-392) is not supported" + _USE_DEFAULT
        )
    protocol = given.get("security_protocol", "PLAINTEXT")
    if protocol not in ("PLAINTEXT", "SSL"):
        raise ConfigurationError(
            f"security_protocol={protocol!r}: the lean fetcher's connections speak PLAINTEXT "
            "and SSL only (no SASL)" + _USE_DEFAULT
        )
    for name in ("api_version", "proxy_url"):
        if given.get(name):
            raise ConfigurationError(
                f"{name}={given[name]!r}: not supported by the lean fetcher" + _USE_DEFAULT
            )
    if given["group_id"] is not None and not isinstance(given["group_id"], str):
        raise ConfigurationError(f"group_id must be a string, got {given['group_id']!r}")


def _check_int(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(f"{name} must be an integer >= {least}, got {value!r}")


def _deserializer(given: dict[str, Any], name: str) -> Deserialize | None:
    try:
        return deserializer(given[name], name)
    except TypeError as e:
        raise ConfigurationError(str(e)) from e


def _connection_settings(given: dict[str, Any]) -> DirectSettings:
    configs = {k: v for k, v in given.items() if k.startswith(_CONNECTION) or k == "client_id"}
    options = list(configs.get("socket_options") or [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    if given["receive_buffer_bytes"]:
        options.append((socket.SOL_SOCKET, socket.SO_RCVBUF, given["receive_buffer_bytes"]))
    if given["send_buffer_bytes"]:
        options.append((socket.SOL_SOCKET, socket.SO_SNDBUF, given["send_buffer_bytes"]))
    configs["socket_options"] = options
    # A Fetch answer holds up to fetch_max_bytes of records, plus the first batch whole when
    # it alone is larger, plus the headers: the limit on an answer's size follows (as
    # kafka-python's consumer sets it), unless a larger one was given.
    answer_max = given["fetch_max_bytes"] + given["max_partition_fetch_bytes"]
    configs["receive_message_max_bytes"] = max(
        configs.get("receive_message_max_bytes") or 0, answer_max
    )
    direct = _direct_settings(configs)
    if direct is None:  # the TLS settings could not be read
        raise ConfigurationError(
            "the lean fetcher could not build a TLS context from the ssl_* settings (check "
            "the files they name)" + _USE_DEFAULT
        )
    return direct
