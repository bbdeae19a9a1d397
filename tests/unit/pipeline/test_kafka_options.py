"""Spark's Kafka source options derived from the group's connection settings
(recipes/pipeline/_kafka_options.py); tests/integration/test_security.py runs a pipeline
with them on a SASL_SSL broker."""

from __future__ import annotations

import pytest

from coordination.errors import ConfigurationError
from recipes.pipeline import spark_kafka_options

SCRAM = {
    "bootstrap_servers": ["a:9093", "b:9093"],
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "alice",
    "sasl_plain_password": 'p"w\\d',
    "ssl_cafile": "/certs/ca.pem",
}


def test_a_scram_login_over_tls_is_spelt_for_javas_client() -> None:
    assert spark_kafka_options(SCRAM, None) == {
        "kafka.bootstrap.servers": "a:9093,b:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="p\\"w\\\\d";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/certs/ca.pem",
    }


def test_plain_login_tls_without_hostname_check_and_plaintext() -> None:
    options = spark_kafka_options(
        {
            "bootstrap_servers": "a:9092",
            "security_protocol": "sasl_plaintext",
            "sasl_plain_username": "bob",
            "sasl_plain_password": "x",
        },
        None,
    )
    assert options["kafka.sasl.mechanism"] == "PLAIN"  # kafka-python's default mechanism
    assert options["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
    assert "kafka.ssl.truststore.location" not in options
    tls = spark_kafka_options(
        {"bootstrap_servers": "a:9093", "security_protocol": "SSL", "ssl_check_hostname": False},
        None,
    )
    assert tls == {
        "kafka.bootstrap.servers": "a:9093",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.endpoint.identification.algorithm": "",
    }
    assert spark_kafka_options({"bootstrap_servers": "a:9092"}, None) == {
        "kafka.bootstrap.servers": "a:9092"
    }


def test_options_given_win_and_a_given_protocol_turns_derivation_off() -> None:
    options = spark_kafka_options(SCRAM, {"kafka.ssl.truststore.location": "/other.pem"})
    assert options["kafka.ssl.truststore.location"] == "/other.pem"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    mine = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "mine;"}
    assert spark_kafka_options({**SCRAM, "ssl_certfile": "/c.pem"}, mine) == {
        **mine,
        "kafka.bootstrap.servers": "a:9093,b:9093",
    }


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}, "ssl_certfile, ssl_keyfile"),
        ({"sasl_mechanism": "OAUTHBEARER"}, "sasl_mechanism=OAUTHBEARER"),
        ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism=GSSAPI"),
    ],
)
def test_what_cannot_be_translated_is_refused_naming_kafka_options(
    extra: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"{named}.*kafka_options"):
        spark_kafka_options({**SCRAM, **extra}, None)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="sasl_plain_username and sasl_plain_password"):
        spark_kafka_options({"security_protocol": "SASL_SSL"}, None)
    with pytest.raises(ConfigurationError, match="security_protocol must be one of"):
        spark_kafka_options({"security_protocol": "TLS"}, None)
    with pytest.raises(ConfigurationError, match=r"fetch\.max\.bytes"):
        spark_kafka_options({}, {"fetch.max.bytes": "1"})
