"""Settings are checked once, at construction, with errors that name the setting."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from coordination import CoordinatorConfig
from coordination.errors import ConfigurationError

BASE = {"bootstrap_servers": "localhost:9092"}


def config(**settings: object) -> CoordinatorConfig:
    return CoordinatorConfig.from_settings("g", {**BASE, **settings})


def test_defaults_follow_kafka() -> None:
    c = config()
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.retry_backoff_ms) == (45000, 3000, 100)
    assert c.rebalance_timeout_ms == 60000 and c.group_instance_id is None and not c.is_static


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"heartbeat_interval_ms": 10_000, "session_timeout_ms": 10_000},
            r"heartbeat_interval_ms \(10000\) must be below session_timeout_ms \(10000\)",
        ),
        ({"session_timeout_ms": 0}, "session_timeout_ms must be a positive integer"),
        ({"rebalance_timeout_ms": -5}, "rebalance_timeout_ms must be a positive integer"),
        ({"request_timeout_ms": "30s"}, "request_timeout_ms must be a positive integer"),
        ({"retry_backoff_ms": True}, "retry_backoff_ms must be a positive integer"),
        ({"retry_backoff_ms": 500, "retry_backoff_max_ms": 100}, "retry_backoff_max_ms"),
        ({"group_instance_id": "has space"}, "group_instance_id 'has space' is invalid"),
        ({"group_instance_id": ""}, "group_instance_id '' is invalid"),
        (
            {"sesion_timeout_ms": 1000},
            "unknown setting 'sesion_timeout_ms'; did you mean 'session_timeout_ms'",
        ),
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        ({"bootstrap_servers": ""}, "bootstrap_servers has an empty entry"),
    ],
)
def test_bad_settings_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        config(**settings)


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(ConfigurationError, match="bootstrap_servers is required"):
        CoordinatorConfig.from_settings("g", {})


@pytest.mark.parametrize("group_id", ["", "   "])
def test_group_id_must_not_be_empty(group_id: str) -> None:
    with pytest.raises(ConfigurationError, match="group_id must be a non-empty string"):
        CoordinatorConfig.from_settings(group_id, BASE)


def test_configuration_error_is_also_a_value_error() -> None:
    with pytest.raises(ValueError):
        config(session_timeout_ms=-1)


def test_heartbeat_above_a_third_of_the_session_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coordination.config"):
        config(session_timeout_ms=6000, heartbeat_interval_ms=3000)
    assert "above a third of session_timeout_ms" in caplog.text


def test_heartbeat_not_below_the_rebalance_timeout_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coordination.config"):
        config(session_timeout_ms=60_000, heartbeat_interval_ms=20_000, rebalance_timeout_ms=10_000)
    assert "is not below rebalance_timeout_ms (10000)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coordination.config"):
        config(session_timeout_ms=60_000, heartbeat_interval_ms=20_000, rebalance_timeout_ms=60_000)
    assert caplog.text == ""


def test_tls_and_sasl_settings_pass_through_to_the_connection(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    c = config(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_plain_username="u",
        sasl_plain_password="p",
        ssl_cafile=str(ca),
    )
    assert c.connection == {
        **BASE,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": str(ca),
    }


def test_client_settings_are_what_a_second_client_of_the_cluster_needs(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = CoordinatorConfig.from_settings(
        "g",
        {
            "bootstrap_servers": "b:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "ssl_cafile": str(ca),
            "reconnect_backoff_ms": 10,
        },
    )
    assert cfg.client_settings() == {
        "bootstrap_servers": "b:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "ssl_cafile": str(ca),
    }


@pytest.mark.parametrize("topic", ["", "has space", "x" * 250, "slash/topic"])
def test_a_wakeup_topic_kafka_would_refuse_is_named_in_the_error(topic: str) -> None:
    with pytest.raises(
        ConfigurationError, match=r"wakeup_topic .* is not a valid Kafka topic name"
    ):
        config(wakeup_topic=topic)
    assert config(wakeup_topic=None).wakeup_topic is None


def test_secrets_are_hidden_in_repr_str_and_logged_settings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secrets = {
        "sasl_plain_password": "hunter2-sasl",
        "ssl_password": "hunter2-key",
        "sasl_oauth_token_provider": "hunter2-token",  # its repr may hold a client secret
    }
    c = config(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        **secrets,
    )
    logger = logging.getLogger("coordination.test")
    with caplog.at_level(logging.DEBUG, logger.name):
        logger.debug("settings %s", c)
        logger.debug("settings %r", c)
        logger.debug("connection %s, client %s", c.connection, c.client_settings())
    shown = [repr(c), str(c), f"{c}", f"{c!r}", repr(c.connection), str(c.client_settings())]
    shown += [r.getMessage() for r in caplog.records]
    for text in shown:
        assert "hunter2" not in text, text
    assert "'sasl_plain_password': [hidden]" in repr(c)
    assert "'ssl_password': [hidden]" in str(c.client_settings())
    assert "sasl_plain_username': 'alice'" in repr(c)  # the rest is shown as it is
    assert repr(c).startswith("CoordinatorConfig(group_id='g', group_instance_id=None, ")
    # The values themselves reach kafka-python unchanged.
    assert c.connection["sasl_plain_password"] == "hunter2-sasl"
    assert c.client_settings()["ssl_password"] == "hunter2-key"
    assert type(c.client_settings()["sasl_plain_password"]) is str


def test_a_config_keeps_its_own_copy_of_the_connection_settings() -> None:
    given = {"bootstrap_servers": "localhost:9092", "sasl_plain_password": None}
    c = CoordinatorConfig(group_id="g", connection=given)
    given["bootstrap_servers"] = "elsewhere:9092"
    assert c.connection == {"bootstrap_servers": "localhost:9092", "sasl_plain_password": None}
    assert "'sasl_plain_password': None" in repr(c)  # nothing to hide
