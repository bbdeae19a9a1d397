"""A single ZooKeeper server on loopback, from jars resolved from Maven Central.

The yardstick for the election benchmark: kazoo's recipes need a real ZooKeeper, and
this starts one the way ``coordination.testing.KafkaCluster`` starts Kafka (a JDK and
Maven, no Docker). Standalone mode, data in a temporary directory, a small heap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Final

from typing_extensions import Self

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordination.testing import free_port, resolve_classpath

ZOOKEEPER_VERSION: Final = "3.9.3"
# Dependencies the server needs but ZooKeeper's pom leaves to the distribution: its metrics
# and snapshot compression libraries, and an SLF4J binding (slf4j-simple writes the log to
# stderr, which goes to the server's log file, read when it fails to start).
_ARTIFACTS: Final = (
    "io.dropwizard.metrics:metrics-core:4.1.12.1",
    "org.xerial.snappy:snappy-java:1.1.10.5",
    "org.slf4j:slf4j-simple:1.7.36",
)


class ZooKeeperStartError(Exception):
    """The server did not come up; the message has the tail of its log."""


class ZooKeeperServer:
    """One standalone ZooKeeper server (``ZooKeeperServerMain``) on a free loopback port.

    Example:
        with ZooKeeperServer(tick_time_ms=2000) as zk:
            client = KazooClient(hosts=zk.hosts, timeout=6.0)

    ``tick_time_ms`` is ZooKeeper's ``tickTime`` (default 2000, ZooKeeper's own default). It
    matters for failover: the server accepts session timeouts between 2 and 20 ticks and
    expires sessions in buckets one tick wide, so a dead client's session ends up to one
    tick after its timeout.
    """

    def __init__(
        self,
        *,
        version: str = ZOOKEEPER_VERSION,
        tick_time_ms: int = 2000,
        heap: str = "128m",
        start_timeout: float = 60.0,
        shipped_jvm: bool = False,
    ) -> None:
        self.version = version
        self.tick_time_ms = tick_time_ms
        self.heap = heap
        self.shipped_jvm = shipped_jvm
        self.start_timeout = start_timeout
        self.port = free_port()
        self._root = Path(tempfile.mkdtemp(prefix="coordination-zookeeper-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        """The connection string for kazoo: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self._root / "zookeeper.log"

    def start(self) -> Self:
        """Resolve the jars (cached after the first time), start the server, wait until it
        serves requests.

        Raises:
            ZooKeeperStartError: it exited or did not answer within ``start_timeout``.
        """
        jars = resolve_classpath([f"org.apache.zookeeper:zookeeper:{self.version}", *_ARTIFACTS])
        config = self._root / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self._root / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            # The admin server would take port 8080; the readiness check needs srvr.
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr\n"
        )
        command = [
            "java",
            # shipped_jvm: as zkServer.sh starts it (zkEnv.sh's ZK_SERVER_HEAP, 1000 MB, and
            # the JVM's own collector); else a small fixed heap.
            *(
                ("-Xmx1000m",)
                if self.shipped_jvm
                else (f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseSerialGC")
            ),
            "-Djava.awt.headless=true",
            "-cp",
            os.pathsep.join(str(j) for j in jars),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child keeps it
        self._process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper {self.version} exited with {self._process.returncode} while "
                    f"starting; log {self.log_file}:\n{self._tail()}"
                )
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise ZooKeeperStartError(
            f"ZooKeeper {self.version} did not answer on {self.hosts} within "
            f"{self.start_timeout}s:\n{self._tail()}"
        )

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and delete its data (idempotent)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _answers(self) -> bool:
        # The port opens, and even answers "ruok", before the database is loaded; "srvr"
        # reports a mode only once the server serves requests.
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
        ):
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
            return b"Mode:" in answer
        return False

    def _tail(self) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return text[-4000:] or "(no log output)"
