"""The campaign's cluster: three KRaft brokers whose client traffic goes through proxies.

:class:`ProxiedCluster` changes only the listeners of :class:`KafkaCluster`: each broker
listens for clients on its usual port but advertises its proxy's port, and replicates
over a second listener (``INTERNAL``) that no proxy touches. Clients bootstrap through the
proxies (:attr:`ProxiedCluster.client_bootstrap`), so a network fault on a broker cuts it
off from every client and from nothing else.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any

from coordination.testing import free_port
from coordination.testing._broker import KafkaCluster, _Node

# Settings where acknowledged data must survive the loss of one broker.
DURABLE_CONFIG: Mapping[str, str] = {
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    # The default (10 s) would keep a crashed broker's partitions leaderless that long.
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
}


class ProxiedCluster(KafkaCluster):
    """A :class:`KafkaCluster` whose brokers advertise a proxy port to clients."""

    def __init__(self, brokers: int = 3, **options: Any) -> None:
        config = {**DURABLE_CONFIG, **options.pop("config", {})}
        super().__init__(brokers, config=config, **options)
        self.internal_ports = {n.node_id: free_port() for n in self._nodes}
        self.proxy_ports = {n.node_id: free_port() for n in self._nodes}

    @property
    def client_bootstrap(self) -> str:
        """Bootstrap servers through the proxies: what every campaign client is given."""
        return ",".join(f"127.0.0.1:{port}" for port in self.proxy_ports.values())

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    def proxy_routes(self) -> dict[int, tuple[int, int]]:
        """Node id -> (proxy port, the broker's client port)."""
        return {n.node_id: (self.proxy_ports[n.node_id], n.port) for n in self._nodes}

    def _properties(self, node: _Node) -> dict[str, str]:
        props = super()._properties(node)
        internal = self.internal_ports[node.node_id]
        props["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{internal},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}"
        )
        props["advertised.listeners"] = (
            f"PLAINTEXT://127.0.0.1:{self.proxy_ports[node.node_id]},"
            f"INTERNAL://127.0.0.1:{internal}"
        )
        props["listener.security.protocol.map"] = (
            "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
        )
        props["inter.broker.listener.name"] = "INTERNAL"
        return props


def find_coordinator(ports: list[int], group: str, timeout: float = 3.0) -> int | None:
    """The node id of ``group``'s coordinator, asked of the first broker port that answers.

    A raw FindCoordinator v1 request (api key 10) on a direct port: the campaign must know
    the coordinator even while a proxy black-holes, and needs nothing but the node id.
    """
    key = group.encode()
    client = b"campaign"
    body = struct.pack(">h", len(key)) + key + b"\x00"  # key, key_type GROUP
    header = struct.pack(">hhih", 10, 1, 7, len(client)) + client
    request = header + body
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
                s.sendall(struct.pack(">i", len(request)) + request)
                size = struct.unpack(">i", _read(s, 4))[0]
                answer = _read(s, size)
        except OSError:
            continue
        # correlation id, throttle ms, error code, error message (nullable), node id
        error = struct.unpack_from(">h", answer, 8)[0]
        if error != 0:
            continue
        message_len = struct.unpack_from(">h", answer, 10)[0]
        at = 12 + max(0, message_len)
        return int(struct.unpack_from(">i", answer, at)[0])
    return None


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create ``name`` with replication factor 3 and ``min.insync.replicas=2``."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=3,
                    topic_configs={"min.insync.replicas": "2"},
                )
            ]
        )
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
