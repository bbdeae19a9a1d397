"""Spark's Kafka source options, derived from the group's connection settings.

The worker's group side connects with kafka-python's settings (``security_protocol``,
``sasl_mechanism``, ``sasl_plain_username``, ``ssl_cafile``, ...); Spark's Kafka source is
Kafka's Java consumer and takes the same things as ``kafka.*`` options in Java's names. A
user writes them once: the worker translates what has one meaning in both, and refuses
(naming ``kafka_options``) what it cannot translate, rather than let Spark's reads fail
later with an error from inside a Spark job. Options given in ``kafka_options`` win.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from coordination.errors import ConfigurationError

# kafka-python's SASL mechanisms whose credentials are a user name and a password, and the
# JAAS login module Java's client uses for each.
_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Settings with no one-to-one translation: give Spark's source its own in kafka_options.
_NOT_TRANSLATED: Final = (
    "ssl_certfile",  # Java's PEM keystore wants key and chain in one file
    "ssl_keyfile",
    "ssl_password",
    "ssl_crlfile",
    "ssl_context",
    "sasl_kerberos_name",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider",
)


def spark_kafka_options(
    settings: Mapping[str, Any], given: Mapping[str, str] | None
) -> dict[str, str]:
    """Spark's Kafka source options: ``given``, over those derived from ``settings``.

    Derived: ``kafka.bootstrap.servers``; ``kafka.security.protocol``; for PLAIN and SCRAM,
    ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config`` (user and password); for TLS,
    ``kafka.ssl.truststore.type=PEM`` and ``kafka.ssl.truststore.location`` from
    ``ssl_cafile``, and an empty ``kafka.ssl.endpoint.identification.algorithm`` when
    ``ssl_check_hostname`` is False.

    Raises:
        ConfigurationError: an option of ``given`` does not start with ``kafka.``; or the
            group connects with a setting that has no translation (client certificates,
            Kerberos, OAuth, another SASL mechanism) and ``given`` does not set
            ``kafka.security.protocol`` (then all of Spark's security options are the
            user's to give).
    """
    options = dict(given or {})
    bad = sorted(k for k in options if not k.startswith("kafka."))
    if bad:
        raise ConfigurationError(
            f"kafka_options are settings of Spark's Kafka source's consumer, each starting "
            f"with 'kafka.' (e.g. kafka.security.protocol): {', '.join(bad)}"
        )
    servers = settings.get("bootstrap_servers")
    if servers is not None:
        options.setdefault(
            "kafka.bootstrap.servers", servers if isinstance(servers, str) else ",".join(servers)
        )
    if "kafka.security.protocol" in options:
        return options  # the user configured Spark's side: nothing is derived
    derived = _security_options(settings)
    return {**derived, **options}


def _security_options(settings: Mapping[str, Any]) -> dict[str, str]:
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    if protocol not in _PROTOCOLS:
        raise ConfigurationError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}"
        )
    if protocol == "PLAINTEXT":
        return {}
    untranslated = sorted(k for k in _NOT_TRANSLATED if settings.get(k) is not None)
    mechanism = str(settings.get("sasl_mechanism") or "PLAIN").upper()
    if protocol.startswith("SASL") and mechanism not in _LOGIN_MODULES:
        untranslated.append(f"sasl_mechanism={mechanism}")
    if untranslated:
        raise ConfigurationError(
            f"PipelineWorker: the group connects with {', '.join(untranslated)}, which the "
            "worker cannot translate for Spark's Kafka source: give its settings in "
            "kafka_options (kafka.security.protocol, kafka.sasl.jaas.config, "
            "kafka.ssl.keystore.location, ...)"
        )
    options = {"kafka.security.protocol": protocol}
    if protocol.startswith("SASL"):
        user, password = settings.get("sasl_plain_username"), settings.get("sasl_plain_password")
        if not user or password is None:
            raise ConfigurationError(
                f"sasl_mechanism {mechanism} needs sasl_plain_username and "
                "sasl_plain_password (Spark's Kafka source logs in with them too)"
            )
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required "
            f"username={_jaas_quoted(str(user))} password={_jaas_quoted(str(password))};"
        )
    if protocol.endswith("SSL"):
        if settings.get("ssl_cafile"):
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(settings["ssl_cafile"])
        if settings.get("ssl_check_hostname") is False:
            options["kafka.ssl.endpoint.identification.algorithm"] = ""
    return options


def _jaas_quoted(value: str) -> str:
    """A JAAS option value, quoted (a backslash and a double quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
