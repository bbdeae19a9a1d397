"""Start real Apache Kafka brokers (KRaft) on loopback, from jars resolved from Maven Central.

Used by this project's tests, benchmarks and demo, and by ``coordination broker``.
No Docker needed: only a JDK (17+) and Maven. Each broker runs in combined
mode (broker and controller in one JVM); a cluster of three has a
three-voter controller quorum, so it survives the loss of any one node.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from typing_extensions import Self

from ..errors import CoordinationError
from . import _reaper
from ._maven import resolve_classpath
from ._ports import free_port
from ._security import BrokerSecurity

log = logging.getLogger("coordination.testing.broker")

NEWEST_KAFKA: Final = "4.3.1"
"""The newest Kafka 4.x release complete on Maven Central (4.4.0 lacks kafka-tools-api there)."""
KAFKA_3: Final = "3.9.2"
"""The newest 3.9.x release: the last line with ZooKeeper, still widely deployed."""
SUPPORTED_KAFKA: Final = (NEWEST_KAFKA, KAFKA_3)

# Settings that make a test broker fast: no initial rebalance delay, short sessions allowed,
# small internal topics.
TEST_BROKER_CONFIG: Final[Mapping[str, str]] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "10",
    "num.partitions": "1",
    "transaction.state.log.num.partitions": "4",
    "auto.create.topics.enable": "true",
    "log.flush.interval.messages": "1000000",
    # KIP-848 consumer groups: test-sized session and heartbeat (45 s and 5 s by default).
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
    # Share groups (KIP-932): test-sized heartbeat (5 s by default, its minimum too), and a
    # record lock a group may set as low as 1 s (15 s minimum by default) to test expiry.
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.record.lock.duration.ms": "1000",
}

# What Kafka's own start scripts give a broker's JVM (kafka-server-start.sh's heap,
# kafka-run-class.sh's performance options): for benchmarks that compare a broker with another
# server run as its own distribution runs it.
SHIPPED_JVM_OPTIONS: Final = (
    "-Xmx1G",
    "-Xms1G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
)

_LOG4J2: Final = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
"""
_LOG4J1: Final = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class BrokerStartError(CoordinationError):
    """A Kafka broker could not be started; the message says why and where its log is."""


def kafka_classpath(version: str) -> list[Path]:
    """Resolve (once, then cached) the jars of Kafka ``version``'s broker."""
    artifacts = [f"org.apache.kafka:kafka_2.13:{version}"]
    if version.startswith("3."):
        artifacts += ["org.slf4j:slf4j-reload4j:1.7.36", "ch.qos.reload4j:reload4j:1.2.25"]
    else:
        artifacts += ["org.apache.logging.log4j:log4j-slf4j-impl:2.25.4"]
    return resolve_classpath(artifacts)


def _cluster_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): url-safe base64 of 16 bytes, never starting with '-'.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    ssl_port: int | None = None  # with security only
    sasl_ssl_port: int | None = None
    # Where this start's lines begin in the log, which a restart appends to: an earlier
    # start's "running" line must not count for this one.
    log_offset: int = 0

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"


class KafkaCluster:
    """One or more KRaft brokers of a given Kafka version, on loopback ports.

    Example:
        with KafkaCluster(brokers=1) as kafka:
            print(kafka.bootstrap_servers)   # 127.0.0.1:<port>

    Each broker is a JVM with a small heap (``heap``, default 384m) and only the JIT's first
    tier, which starts it sooner but runs its requests slower; ``full_jit=True`` runs it with
    the whole JIT, as in production (benchmarks do), and ``shipped_jvm=True`` also with the
    heap and garbage collector Kafka's start scripts give it (:data:`SHIPPED_JVM_OPTIONS`,
    a 1 GB heap instead of ``heap``). A broker that does not come up within ``start_timeout``
    raises :class:`BrokerStartError` with the tail of its log.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        version: str = NEWEST_KAFKA,
        heap: str = "384m",
        config: Mapping[str, str] | None = None,
        ports: list[int] | None = None,
        directory: Path | None = None,
        start_timeout: float = 120.0,
        security: BrokerSecurity | None = None,
        full_jit: bool = False,
        shipped_jvm: bool = False,
    ) -> None:
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        if ports is not None and len(ports) != brokers:
            raise ValueError("give one port per broker")
        self.version = version
        self.heap = heap
        self.start_timeout = start_timeout
        self._config = {**TEST_BROKER_CONFIG, **(config or {})}
        self._owns_directory = directory is None
        self._root = Path(directory or tempfile.mkdtemp(prefix="coordination-kafka-"))
        self._cluster_id = _cluster_id()
        self._nodes = [
            _Node(
                node_id=i + 1,
                port=ports[i] if ports else free_port(),
                controller_port=free_port(),
                directory=self._root / f"broker-{i + 1}",
                ssl_port=free_port() if security else None,
                sasl_ssl_port=free_port() if security else None,
            )
            for i in range(brokers)
        ]
        self.security = security
        self.full_jit = full_jit or shipped_jvm
        self.shipped_jvm = shipped_jvm
        self._classpath: str | None = None
        self._formatted = False
        self._reaper: subprocess.Popen[bytes] | None = None

    # -- public ------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes)

    @property
    def ssl_bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker's SSL listener (with ``security`` only)."""
        return ",".join(f"127.0.0.1:{n.ssl_port}" for n in self._secured())

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``host:port,...`` of every broker's SASL_SSL listener (with ``security`` only)."""
        return ",".join(f"127.0.0.1:{n.sasl_ssl_port}" for n in self._secured())

    def _secured(self) -> list[_Node]:
        if self.security is None:
            raise ValueError("this cluster was started without security=")
        return self._nodes

    @property
    def size(self) -> int:
        return len(self._nodes)

    def port_of(self, node_id: int) -> int:
        return self._node(node_id).port

    def log_of(self, node_id: int) -> Path:
        """The log file of broker ``node_id`` (1-based)."""
        return self._node(node_id).log_file

    def start(self) -> Self:
        """Resolve the jars, format the storage, start every broker and wait until all serve."""
        self._classpath = os.pathsep.join(str(p) for p in kafka_classpath(self.version))
        self._start_reaper()
        if not self._formatted:
            for node in self._nodes:
                self._format(node)
            self._formatted = True
        for node in self._nodes:
            self._launch(node)
        for node in self._nodes:
            self._wait_ready(node)
        log.info("Kafka %s up: %s", self.version, self.bootstrap_servers)
        return self

    def stop(self, *, keep_logs_in: Path | None = None) -> None:
        """Stop every broker (SIGTERM, then SIGKILL) and delete their data.

        ``keep_logs_in``: a directory to copy each broker's log into first
        (``broker-<id>.log``), for runs whose findings need the brokers' side.
        """
        # Signal all first: a clean shutdown of one waits on the others' controllers.
        for node in self._nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self._nodes:
            self._terminate(node, timeout=10.0)
        self._stop_reaper()
        if keep_logs_in is not None:
            try:
                keep_logs_in.mkdir(parents=True, exist_ok=True)
                for node in self._nodes:
                    if node.log_file.exists():
                        target = keep_logs_in / f"broker-{node.node_id}.log"
                        shutil.copyfile(node.log_file, target)
            except OSError as e:  # the brokers still stop, their data still goes
                log.warning("the brokers' logs could not be kept in %s: %s", keep_logs_in, e)
        if self._owns_directory:
            shutil.rmtree(self._root, ignore_errors=True)

    def stop_broker(self, node_id: int, *, timeout: float = 60.0) -> None:
        """Shut broker ``node_id`` down cleanly (SIGTERM); its data stays."""
        self._terminate(self._node(node_id), timeout=timeout)

    def kill_broker(self, node_id: int) -> None:
        """Kill broker ``node_id`` at once (SIGKILL), as a crash would."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait()
        node.process = None

    def start_broker(self, node_id: int) -> None:
        """Start broker ``node_id`` again (after ``stop_broker`` or ``kill_broker``)."""
        node = self._node(node_id)
        self._launch(node)
        self._wait_ready(node)

    def is_running(self, node_id: int) -> bool:
        process = self._node(node_id).process
        return process is not None and process.poll() is None

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

    # -- internals -----------------------------------------------------------------------

    def _start_reaper(self) -> None:
        """A process that stops these brokers if this one dies without stopping them
        (``coordination.testing._reaper``)."""
        if self._reaper is not None or not _reaper.SUPPORTED:
            return
        self._reaper = subprocess.Popen(
            [
                sys.executable,
                "-I",  # a script of the standard library's modules only: starts in ~30 ms
                _reaper.__file__,
                str(self._root),
                *(["--delete"] if self._owns_directory else []),
            ],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _stop_reaper(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.kill()
            reaper.wait()

    def _node(self, node_id: int) -> _Node:
        if not 1 <= node_id <= len(self._nodes):
            raise ValueError(f"no broker {node_id}; brokers are 1..{len(self._nodes)}")
        return self._nodes[node_id - 1]

    def _properties(self, node: _Node) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        replication = str(min(3, len(self._nodes)))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "1",
            # Share groups' state topic (Kafka 4.x; 3 replicas by default): without it a
            # share group's partitions are never initialized, so never assigned.
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": "1",
            "min.insync.replicas": "1",
            "default.replication.factor": replication,
        }
        if self.security is not None:
            props["listeners"] += (
                f",SSL://127.0.0.1:{node.ssl_port},SASL_SSL://127.0.0.1:{node.sasl_ssl_port}"
            )
            props["advertised.listeners"] += (
                f",SSL://127.0.0.1:{node.ssl_port},SASL_SSL://127.0.0.1:{node.sasl_ssl_port}"
            )
            props["listener.security.protocol.map"] += ",SSL:SSL,SASL_SSL:SASL_SSL"
            props.update(self.security.broker_config())
        props.update(self._config)
        return props

    def _format(self, node: _Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        properties = node.directory / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()))
        assert self._classpath is not None
        command = [
            "java",
            "-Xmx256m",
            "-cp",
            self._classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self._cluster_id,
            "-c",
            str(properties),
            *(self.security.format_arguments() if self.security is not None else []),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerStartError(
                f"formatting Kafka {self.version} storage for broker {node.node_id} failed:\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    def _launch(self, node: _Node) -> None:
        if node.process is not None and node.process.poll() is None:
            return
        assert self._classpath is not None
        log4j2 = node.directory / "log4j2.properties"
        log4j2.write_text(_LOG4J2.format(log=node.log_file))
        log4j1 = node.directory / "log4j.properties"
        log4j1.write_text(_LOG4J1.format(log=node.log_file))
        command = [
            "java",
            *(
                SHIPPED_JVM_OPTIONS
                if self.shipped_jvm
                else (f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseSerialGC")
            ),
            # Tests: the first JIT tier only starts the broker sooner and its requests run
            # slower; benchmarks want the broker as it runs in production.
            *(() if self.full_jit else ("-XX:TieredStopAtLevel=1",)),
            "-Xss512k",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j2}",
            f"-Dlog4j.configuration=file:{log4j1}",
            f"-Dkafka.logs.dir={node.directory}",
            "-cp",
            self._classpath,
            "kafka.Kafka",
            str(node.directory / "server.properties"),
        ]
        self._note_log_start(node)
        stdout = open(node.directory / "stdout.log", "ab")  # noqa: SIM115 - the child keeps it
        node.process = subprocess.Popen(
            command, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True
        )
        stdout.close()

    def _wait_ready(self, node: _Node) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert node.process is not None
            if node.process.poll() is not None:
                raise BrokerStartError(
                    f"Kafka {self.version} broker {node.node_id} exited with "
                    f"{node.process.returncode} while starting; log {node.log_file}:\n"
                    f"{self._tail(node)}"
                )
            if self._serving(node):
                return
            time.sleep(0.2)
        self._terminate(node)
        raise BrokerStartError(
            f"Kafka {self.version} broker {node.node_id} did not serve on port {node.port} "
            f"within {self.start_timeout}s; log {node.log_file}:\n{self._tail(node)}"
        )

    @staticmethod
    def _note_log_start(node: _Node) -> None:
        node.log_offset = node.log_file.stat().st_size if node.log_file.exists() else 0

    def _serving(self, node: _Node) -> bool:
        # The broker has registered with the controller and serves requests once its log
        # says so; an open port alone comes earlier.
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", node.port), timeout=1),
        ):
            text = ""
            if node.log_file.exists():
                with node.log_file.open("rb") as log_file:
                    log_file.seek(node.log_offset)
                    text = log_file.read().decode(errors="replace")
            return "Transitioning from RECOVERY to RUNNING" in text or (
                "started (kafka.server.KafkaRaftServer)" in text
            )
        return False

    def _terminate(self, node: _Node, timeout: float = 30.0) -> None:
        process = node.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        node.process = None

    @staticmethod
    def _tail(node: _Node) -> str:
        for path in (node.log_file, node.directory / "stdout.log"):
            if path.exists():
                text = path.read_text(errors="replace")
                if text.strip():
                    return text[-4000:]
        return "(no log output)"


@contextlib.contextmanager
def running_kafka(
    bootstrap_servers: str | None = None,
    *,
    version: str = NEWEST_KAFKA,
    full_jit: bool = False,
    shipped_jvm: bool = False,
) -> Iterator[str]:
    """Bootstrap servers of the given cluster, or of a one-broker cluster started meanwhile.

    For demos and benchmarks that take an optional ``--bootstrap-servers``.

    Example:
        with running_kafka(args.bootstrap_servers) as bootstrap:
            run(bootstrap)

    Raises:
        BrokerStartError: no cluster was given and the broker could not start.
    """
    if bootstrap_servers:
        yield bootstrap_servers
        return
    print(f"starting a local Kafka {version} broker (jars from Maven Central on first use)...")
    with KafkaCluster(
        brokers=1, version=version, full_jit=full_jit, shipped_jvm=shipped_jvm
    ) as cluster:
        yield cluster.bootstrap_servers
