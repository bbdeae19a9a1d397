"""Kafka client properties files (``--command-config``) read as this project's settings.

Kafka's own tools (``kafka-consumer-groups.sh --command-config client.properties``) take
their security settings from a Java properties file, so that a password never appears on
the command line. The same file works for the ``coordination`` command: the keys it knows
are mapped onto kafka-python's settings; any other key is an error that names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from .errors import ConfigurationError

# Kafka key -> kafka-python setting, for the keys whose value passes through unchanged.
_PLAIN_KEYS: Final = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}
_INTEGER_KEYS: Final = {"request.timeout.ms": "request_timeout_ms"}
_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES: Final = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_KNOWN_KEYS: Final = (
    *_PLAIN_KEYS,
    *_INTEGER_KEYS,
    "sasl.jaas.config",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.endpoint.identification.algorithm",
)
_MAX_FILE_BYTES: Final = 1 << 20
# One option of a JAAS entry: name=value, the value quoted ("..." with \-escapes) or bare.
_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def read_properties(path: str) -> dict[str, str]:
    """The key/value pairs of a Java properties file (``key=value``, ``key: value`` or
    ``key value``; ``#`` and ``!`` comments; a trailing backslash continues the line;
    backslash escapes, ``\\uXXXX`` included).

    Raises:
        ConfigurationError: the file cannot be read, is not text, or holds a line without a
            key (the message names the file and line).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigurationError(
            f"--command-config {path!r} cannot be read: {e.strerror or e}"
        ) from None
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigurationError(f"--command-config {path!r} is larger than 1 MiB")
    try:
        # Java 9+ reads properties files as UTF-8; a BOM is not a key's first character.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigurationError(
            f"--command-config {path!r} is not UTF-8 text (byte {e.start})"
        ) from None
    found: dict[str, str] = {}
    logical = ""
    first_line = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" \t\f")
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if not logical:
            first_line = number
        logical += stripped
        if _continues(logical):
            logical = logical[:-1]
            continue
        key, value = _split(logical, path, first_line)
        found[key] = value
        logical = ""
    if logical:
        key, value = _split(logical, path, first_line)
        found[key] = value
    return found


def _continues(line: str) -> bool:
    """A line ending in an odd number of backslashes continues on the next one."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str, path: str, number: int) -> tuple[str, str]:
    key: list[str] = []
    at = 0
    while at < len(line):
        c = line[at]
        if c == "\\" and at + 1 < len(line):
            key.append(line[at : at + 2])
            at += 2
            continue
        if c in "=: \t\f":
            break
        key.append(c)
        at += 1
    rest = line[at:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    name = _unescape("".join(key), path, number)
    if not name:
        raise ConfigurationError(
            f"--command-config {path!r} line {number}: no key before the value"
        )
    return name, _unescape(rest, path, number)


_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, path: str, number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    at = 0
    while at < len(text):
        c = text[at]
        if c != "\\" or at + 1 == len(text):
            out.append(c)
            at += 1
            continue
        code = text[at + 1]
        if code == "u":
            digits = text[at + 2 : at + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigurationError(
                    f"--command-config {path!r} line {number}: malformed \\uXXXX escape"
                )
            out.append(chr(int(digits, 16)))
            at += 6
            continue
        out.append(_ESCAPES.get(code, code))
        at += 2
    return "".join(out)


def client_settings(properties: Mapping[str, str]) -> dict[str, object]:
    """The kafka-python settings a Kafka client properties file stands for.

    Known keys: ``bootstrap.servers``, ``security.protocol``, ``sasl.mechanism`` (PLAIN,
    SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.jaas.config`` (``PlainLoginModule`` or
    ``ScramLoginModule`` with ``username`` and ``password``), ``ssl.truststore.location``
    and ``ssl.keystore.location`` of type PEM, ``ssl.key.password``,
    ``ssl.endpoint.identification.algorithm``, ``client.id`` and ``request.timeout.ms``.

    Raises:
        ConfigurationError: an unknown key (named), or a value that cannot be used here.
    """
    for key in properties:
        if key not in _KNOWN_KEYS:
            raise ConfigurationError(
                f"--command-config: unknown or unsupported key {key!r}; known keys: "
                f"{', '.join(sorted(_KNOWN_KEYS))}"
            )
    settings: dict[str, object] = {}
    for key, name in _PLAIN_KEYS.items():
        if key in properties:
            settings[name] = properties[key].strip()
    for key, name in _INTEGER_KEYS.items():
        if key in properties:
            value = properties[key].strip()
            if not value.isdigit():
                raise ConfigurationError(
                    f"--command-config: {key} must be an integer, got {value!r}"
                )
            settings[name] = int(value)
    mechanism = str(settings.get("sasl_mechanism", ""))
    if "sasl_mechanism" in settings and mechanism not in _MECHANISMS:
        raise ConfigurationError(
            f"--command-config: sasl.mechanism {mechanism!r} is not supported here; use one "
            f"of {', '.join(_MECHANISMS)}"
        )
    if "sasl.jaas.config" in properties:
        if not mechanism:
            raise ConfigurationError(
                "--command-config: sasl.jaas.config needs sasl.mechanism (PLAIN, SCRAM-SHA-256 "
                "or SCRAM-SHA-512; Kafka's default, GSSAPI, is not supported here)"
            )
        username, password = _jaas_login(properties["sasl.jaas.config"], mechanism)
        settings["sasl_plain_username"] = username
        settings["sasl_plain_password"] = password
    truststore = properties.get("ssl.truststore.location", "").strip()
    if truststore:
        _check_pem("ssl.truststore", truststore, properties.get("ssl.truststore.type"))
        settings["ssl_cafile"] = truststore
    keystore = properties.get("ssl.keystore.location", "").strip()
    if keystore:
        # A PEM keystore holds the private key and its certificate chain in one file.
        _check_pem("ssl.keystore", keystore, properties.get("ssl.keystore.type"))
        settings["ssl_certfile"] = settings["ssl_keyfile"] = keystore
    if "ssl.endpoint.identification.algorithm" in properties:
        algorithm = properties["ssl.endpoint.identification.algorithm"].strip()
        if algorithm.lower() not in ("", "https"):
            raise ConfigurationError(
                "--command-config: ssl.endpoint.identification.algorithm must be https or "
                f"empty (no host name check), got {algorithm!r}"
            )
        settings["ssl_check_hostname"] = algorithm != ""
    return settings


def _check_pem(prefix: str, location: str, given_type: str | None) -> None:
    kind = (given_type or "").strip().upper()
    if kind and kind != "PEM":
        raise ConfigurationError(
            f"--command-config: {prefix}.type {kind} is not supported here (kafka-python reads "
            f"PEM only): convert {location!r} to PEM (keytool -exportcert -rfc, or openssl "
            f"pkcs12 -nodes) and set {prefix}.type=PEM"
        )
    if not kind:
        # Kafka's default type is JKS: accept the file only if it is PEM after all.
        try:
            with open(location, "rb") as f:
                head = f.read(4096)
        except OSError as e:
            raise ConfigurationError(
                f"--command-config: {prefix}.location {location!r} cannot be read: "
                f"{e.strerror or e}"
            ) from None
        if b"-----BEGIN " not in head:
            raise ConfigurationError(
                f"--command-config: {prefix}.location {location!r} is not PEM (Kafka's "
                f"default {prefix}.type is JKS, which kafka-python cannot read): convert it "
                f"to PEM and set {prefix}.type=PEM"
            )


def _jaas_login(config: str, mechanism: str) -> tuple[str, str]:
    """``username`` and ``password`` of a one-entry JAAS configuration such as
    ``org.apache.kafka.common.security.plain.PlainLoginModule required username="u"
    password="p";``.

    Raises:
        ConfigurationError: not of that form, another login module, the module does not fit
            the mechanism, or username or password is missing. The message never shows the
            password.
    """
    text = config.strip()
    parts = text.split(None, 2)
    if len(parts) < 2 or parts[1] not in ("required", "requisite", "sufficient", "optional"):
        raise ConfigurationError(
            "--command-config: sasl.jaas.config must read 'LoginModuleClass required "
            'username="..." password="...";\''
        )
    module, rest = parts[0], (parts[2] if len(parts) == 3 else "")
    if module not in _LOGIN_MODULES:
        raise ConfigurationError(
            f"--command-config: sasl.jaas.config login module {module!r} is not supported "
            f"here; use {' or '.join(_LOGIN_MODULES)}"
        )
    if mechanism not in _LOGIN_MODULES[module]:
        raise ConfigurationError(
            f"--command-config: sasl.jaas.config's {module.rsplit('.', 1)[-1]} does not fit "
            f"sasl.mechanism {mechanism}"
        )
    options: dict[str, str] = {}
    at = 0
    while True:
        match = _JAAS_OPTION.match(rest, at)
        if match is None:
            break
        quoted, bare = match.group(2), match.group(3)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        at = match.end()
    if rest[at:].strip() != ";":
        raise ConfigurationError(
            "--command-config: sasl.jaas.config is not 'name=\"value\"' options ended by ';' "
            f"(unreadable from character {len(text) - len(rest) + at})"
        )
    missing = [name for name in ("username", "password") if not options.get(name)]
    if missing:
        raise ConfigurationError(
            f"--command-config: sasl.jaas.config has no {' and no '.join(missing)}"
        )
    return options["username"], options["password"]
