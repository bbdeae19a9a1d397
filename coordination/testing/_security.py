"""TLS certificates and SCRAM users for a secured test broker (``KafkaCluster(security=...)``).

The certificates are made with the JDK's ``keytool`` (no Python crypto package needed): a
test CA, and a broker key pair whose certificate the CA signs for the IP address
127.0.0.1 only, so that a client connecting to ``localhost`` sees a hostname mismatch.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CoordinationError


class CertificateError(CoordinationError):
    """keytool could not make a test certificate."""


def _keytool(*args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["keytool", *args], input=stdin, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise CertificateError(
            f"keytool {args[0]} failed: {done.stderr.decode(errors='replace')[-1000:]}"
        )
    return done.stdout


def make_ca(directory: Path, name: str, password: str) -> tuple[Path, Path]:
    """A certificate authority: its PKCS12 keystore and its certificate (PEM)."""
    directory.mkdir(parents=True, exist_ok=True)
    store = directory / f"{name}.p12"
    _keytool(
        "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
        "-dname", f"CN={name}", "-ext", "bc:c", "-validity", "7",
        "-keystore", str(store), "-storetype", "PKCS12",
        "-storepass", password, "-keypass", password,
    )  # fmt: skip
    pem = directory / f"{name}.pem"
    pem.write_bytes(
        _keytool("-exportcert", "-alias", "ca", "-rfc", "-keystore", str(store),
                 "-storepass", password)
    )  # fmt: skip
    return store, pem


@dataclass
class BrokerSecurity:
    """What a secured test broker needs, made in ``directory``.

    The broker gets an SSL listener (server authentication only) and a SASL_SSL listener
    with SCRAM-SHA-512, and the ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found``
    off: a SASL user may do only what an ACL allows. The PLAINTEXT listener stays (the
    brokers and the test's admin client use it; its principal, ``ANONYMOUS``, is a super
    user, and so are SSL clients, whose principal is also ``ANONYMOUS``).

    Attributes:
        users: SCRAM-SHA-512 user name -> password, created when the storage is formatted.
        ca_file: the CA certificate (PEM) a client trusts (``ssl_cafile``).
    """

    directory: Path
    users: Mapping[str, str] = field(default_factory=dict)
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    ca_file: Path = field(init=False)
    keystore: Path = field(init=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_store, self.ca_file = make_ca(self.directory, "test-ca", self.password)
        self.keystore = self.directory / "broker.p12"
        pw = self.password
        _keytool(
            "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
            "-dname", "CN=127.0.0.1", "-validity", "7",
            "-keystore", str(self.keystore), "-storetype", "PKCS12",
            "-storepass", pw, "-keypass", pw,
        )  # fmt: skip
        request = _keytool(
            "-certreq", "-alias", "broker", "-keystore", str(self.keystore), "-storepass", pw
        )
        signed = _keytool(
            "-gencert", "-alias", "ca", "-keystore", str(ca_store), "-storepass", pw,
            "-ext", "SAN=IP:127.0.0.1", "-validity", "7", "-rfc",
            stdin=request,
        )  # fmt: skip
        for alias, pem in (("ca", self.ca_file.read_bytes()), ("broker", signed)):
            path = self.directory / f"import-{alias}.pem"
            path.write_bytes(pem)
            _keytool(
                "-importcert", "-alias", alias, "-file", str(path), "-noprompt",
                "-keystore", str(self.keystore), "-storepass", pw,
            )  # fmt: skip

    def broker_config(self) -> dict[str, str]:
        """The broker settings besides the listeners."""
        return {
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": self.password,
            "ssl.key.password": self.password,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        return args
