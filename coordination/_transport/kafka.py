"""The real transport: kafka-python's protocol classes and network layer.

kafka-python 3 runs its network I/O on its own thread (``NetworkSelector``);
``KafkaConnectionManager.run`` lets any other thread block on a coroutine that
runs there, which is how both engine threads send requests.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import struct
import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import kafka.errors as kafka_errors
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaSSLTransport
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import group as kgroup
from kafka.protocol.metadata import FindCoordinatorRequest as KFindCoordinatorRequest

from .._config import bootstrap_list, split_server
from .._protocol import consumer_group as cg
from .._protocol import consumer_group_codec as cg_codec
from .._protocol import messages as m
from .._protocol import share_group as sg
from .._protocol import share_group_codec as sg_codec
from .._protocol.error_codes import ErrorCode
from .._protocol.wire import Reader, decode_response_header
from ..errors import (
    AuthenticationFailedError,
    ConfigurationError,
    ConnectionFailedError,
    ProtocolCodecError,
    TlsError,
    broker_error,
)
from ..transport import CoordinatorNode, FollowUp, TransportError
from .link import DirectConnection, DirectSettings, Outstanding, certificate_advice

log = logging.getLogger("coordination.transport")

R = TypeVar("R", bound=m.Response)

_GROUP_KEY_TYPE = 0  # FindCoordinator key type GROUP
_GROUP_RESOURCE = 32  # DescribeConfigs resource type GROUP (group configs, Kafka 4.0+)
# The requests kafka-python has no classes for, encoded here (_OwnCodecRequest), and theirs.
_OwnRequest = cg.ConsumerGroupHeartbeatRequest | cg.ConsumerGroupDescribeRequest | sg_codec.Request
_OwnResponse = (
    cg.ConsumerGroupHeartbeatResponse | cg.ConsumerGroupDescribeResponse | sg_codec.Response
)
# One bootstrap attempt lasts at most this long, so a caller waiting with a timeout learns
# why the cluster cannot be reached while it still waits (kafka-python keeps retrying inside).
_BOOTSTRAP_ATTEMPT_S = 5.0
# ... watched in slices this long for a refused login, which no retry can fix.
_BOOTSTRAP_SLICE_S = 1.0
# How long the diagnosis of a failed bootstrap may spend on each server.
_PROBE_TIMEOUT_S = 2.0


class _QuietSelector(selectors.DefaultSelector):
    """The platform's selector, but a lookup of an unregistered socket costs nothing.

    kafka-python's network thread looks a socket up before every wait for I/O and expects
    a KeyError when it is not registered, which is most of the time. The standard
    selector's KeyError formats the socket's repr (two system calls) for a message nobody
    reads: with many members in one process that was a fifth of all their CPU time.
    """

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        # The base class's own lookup (it also finds a closed socket that is registered).
        fd = self._fileobj_lookup(fileobj)  # type: ignore[attr-defined]
        key: selectors.SelectorKey | None = self._fd_to_key.get(fd)  # type: ignore[attr-defined]
        if key is None:
            raise KeyError("not registered")
        return key


class KafkaTransport:
    """Sends group requests through one kafka-python connection manager."""

    def __init__(
        self, *, client_id: str, request_timeout_ms: int, connection: dict[str, Any]
    ) -> None:
        configs = dict(connection)
        configs["client_id"] = client_id
        configs["request_timeout_ms"] = request_timeout_ms
        self._net = NetworkSelector(**configs, selector=_QuietSelector)
        self._manager = _ConnectionManager(self._net, **configs)
        self._bootstrap_lock = threading.Lock()
        # Guards `_closed` against the start of kafka-python's I/O thread: a thread started
        # after close() stopped the loop would poll the closed selector and die on "I/O
        # operation on closed epoll object" (a send racing close(), seen in CI).
        self._lifecycle_lock = threading.Lock()
        self._closed = False
        self._servers = connection.get("bootstrap_servers")
        # Transports with equal keys connect alike (same client id, servers, credentials):
        # the members of one process may share a connection's reads (see wakeups.py).
        self.sharing_key = (client_id, request_timeout_ms, repr(sorted(connection.items())))
        # Dedicated node ids registered with kafka-python, and their addresses.
        self._dedicated: dict[str, tuple[str, int]] = {}
        self._tls: ssl.SSLContext | None = None
        if str(connection.get("security_protocol", "PLAINTEXT")).endswith("SSL"):
            self._tls = _tls_context(connection)
        # Dedicated connections where the sending thread does the I/O (see link.py), by name.
        self._direct_settings = _direct_settings(configs)
        self._direct: dict[str, DirectConnection] = {}
        self._direct_lock = threading.Lock()

    # -- Transport -----------------------------------------------------------------

    def send(
        self,
        request: m.Request,
        response_type: type[R],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: FollowUp | None = None,
    ) -> R:
        if self._closed:
            raise TransportError("transport is closed")
        kafka_request = self._encode(request)
        node_id = self._coordinator_node_id(coordinator) if coordinator else None
        direct = self._direct_connection(node_id)
        if direct is not None:
            if (
                then is not None
                and coordinator is not None
                and then.broker_id == coordinator.node_id
            ):
                if then.leads:
                    try:
                        follow_up, raw = _exchange(direct, then.request(), timeout_s, kafka_request)
                    except TransportError as e:
                        then.answered(e)  # and the request may or may not have been handled
                        raise
                    then.answered(follow_up)
                    if isinstance(raw, TransportError):
                        raise raw
                else:
                    raw, follow_up = _exchange(direct, kafka_request, timeout_s, then.request())
                    then.answered(follow_up)
            else:
                raw = _exchange(direct, kafka_request, timeout_s)
            return self._checked(self._decode(raw), response_type)
        self._ensure_bootstrapped(timeout_s)
        timeout_ms = max(1, int(timeout_s * 1000))

        async def exchange() -> Any:
            target = node_id if node_id is not None else self._manager.least_loaded_node()
            return await self._manager.send(
                kafka_request, node_id=target, request_timeout_ms=timeout_ms
            )

        try:
            raw = self._manager.run(exchange)
        except _REFUSALS as e:
            raise _refused(e) from e
        except kafka_errors.IncompatibleBrokerVersion as e:
            if isinstance(kafka_request, _OwnCodecRequest):
                return self._checked(kafka_request.unoffered(e), response_type)
            raise TransportError(f"broker does not support {type(request).__name__}: {e}") from e
        except (kafka_errors.KafkaError, OSError, RuntimeError) as e:
            raise TransportError(f"{type(request).__name__} got no response: {e!r}") from e
        return self._checked(self._decode(raw), response_type)

    @staticmethod
    def _checked(response: m.Response, response_type: type[R]) -> R:
        if not isinstance(response, response_type):  # pragma: no cover - a kafka-python bug
            raise TransportError(f"unexpected response {type(response).__name__}")
        return response

    def send_dedicated(
        self,
        request: m.Request,
        response_type: type[R],
        *,
        purpose: str,
        node: CoordinatorNode,
        timeout_s: float,
    ) -> R:
        """Send ``request`` to ``node`` on the connection kept for ``purpose`` (see
        :meth:`dedicated_node`), e.g. share fetches to a partition's leader, apart from
        the coordinator's connection where the heartbeats go.

        Raises:
            TransportError: no response arrived, or the connection failed.
        """
        node_id = self.dedicated_node(purpose, node.node_id, node.host, node.port)
        raw = self.send_kafka(self._encode(request), node_id=node_id, timeout_s=timeout_s)
        return self._checked(self._decode(raw), response_type)

    def send_dedicated_ahead(
        self,
        request: m.Request,
        response_type: type[R],
        *,
        purpose: str,
        node: CoordinatorNode,
        timeout_s: float,
    ) -> DedicatedAnswer[R] | None:
        """Send ``request`` as :meth:`send_dedicated` does, and return at once: its answer
        is read later (:class:`DedicatedAnswer`), the broker working on it meanwhile. None
        where the connection is kafka-python's (SASL, a proxy, a pinned broker version):
        then the caller sends with :meth:`send_dedicated`.

        Raises:
            TransportError: the request could not be sent.
        """
        if self._closed:
            raise TransportError("transport is closed")
        node_id = self.dedicated_node(purpose, node.node_id, node.host, node.port)
        direct = self._direct_connection(node_id)
        if direct is None:
            return None
        encoded = self._encode(request)
        try:
            outstanding = direct.send_ahead(encoded, timeout_s)
        except kafka_errors.IncompatibleBrokerVersion as e:
            if not isinstance(encoded, _OwnCodecRequest):
                raise TransportError(
                    f"broker does not support {type(request).__name__}: {e}"
                ) from e
            return DedicatedAnswer(None, self._checked(encoded.unoffered(e), response_type))
        return DedicatedAnswer(outstanding, response_type)

    def group_config(
        self, group_id: str, key: str, node: CoordinatorNode, timeout_s: float
    ) -> str | None:
        """The value of the group setting ``key`` (e.g. ``consumer.session.timeout.ms``) as
        ``node`` has it: the group's own (IncrementalAlterConfigs on the group) or else the
        broker's default for it. None if the broker does not name it.

        Raises:
            TransportError: no answer (ask again).
            BrokerError: the broker refused: e.g. no DESCRIBE_CONFIGS on the group, or a
                broker before Kafka 4.0 without group configs.
        """
        resource = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=_GROUP_RESOURCE, resource_name=group_id, configuration_keys=[key]
        )
        request = DescribeConfigsRequest(resources=[resource], include_synonyms=False)
        answer = self.send_kafka(request, node_id=node.node_id, timeout_s=timeout_s)
        for result in answer.results:
            if result.error_code != ErrorCode.NONE:
                raise broker_error(result.error_code, group_id=group_id, api="DescribeConfigs")
            for config in result.configs:
                if config.name == key:
                    return str(config.value) if config.value is not None else None
        return None

    # -- for the wake-up channel --------------------------------------------------

    def send_kafka(self, request: Any, *, node_id: Any, timeout_s: float) -> Any:
        """Send one of kafka-python's own requests to ``node_id`` (None: any broker).

        Raises:
            TransportError: no response arrived, or the connection failed.
        """
        if self._closed:
            raise TransportError("transport is closed")
        direct = self._direct_connection(node_id)
        if direct is not None:
            return _exchange(direct, request, timeout_s)
        self._ensure_bootstrapped(timeout_s)
        timeout_ms = max(1, int(timeout_s * 1000))

        async def exchange() -> Any:
            target = node_id if node_id is not None else self._manager.least_loaded_node()
            return await self._manager.send(request, node_id=target, request_timeout_ms=timeout_ms)

        try:
            return self._manager.run(exchange)
        except _REFUSALS as e:
            raise _refused(e) from e
        except (kafka_errors.KafkaError, OSError, RuntimeError) as e:
            raise TransportError(f"{type(request).__name__} got no response: {e!r}") from e

    def dedicated_node(
        self, purpose: str, node_id: int, host: str, port: int, *, single: bool = False
    ) -> Any:
        """A node id for ``node_id`` with its own connection, apart from every other request:
        a long-polling fetch, or a JoinGroup parked on the coordinator, holds its connection
        (the broker answers a connection's requests in order), so nothing else may queue
        behind it. Where the sending thread can drive the connection itself (see link.py),
        it does; else the node is registered with kafka-python, once per address, not per
        request: registering builds objects and logs a line at INFO.

        ``single``: the purpose needs one broker at a time (the coordinator, the wake-up
        partition's leader); the connection to the one before is closed, not left open.
        """
        name = f"{purpose}-{node_id}"
        if self._dedicated.get(name) == (host, port):
            return name
        if self._direct_settings is not None:
            with self._direct_lock:
                self._dedicated[name] = (host, port)
                stale = [
                    other
                    for other in self._direct
                    if other == name or (single and other.startswith(f"{purpose}-"))
                ]
                retired = [self._direct.pop(other) for other in stale]
            for connection in retired:
                connection.close()
            return name
        found = types.SimpleNamespace(error_code=0, node_id=name, host=host, port=port)
        registered = self._manager.cluster.add_coordinator(
            found, _GROUP_KEY_TYPE, name, synthesize_node_id=False
        )
        self._dedicated[name] = (host, port)
        return registered

    def knows_node(self, node_id: int) -> bool:
        """Whether kafka-python's metadata has this broker (its regular connection works)."""
        return self._manager.cluster.broker_metadata(node_id) is not None

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        if self._closed:
            return
        node_id = self._coordinator_node_id(coordinator)
        if self._direct_settings is None:
            self._manager.close(node_id=node_id)
            return
        with self._direct_lock:
            direct = self._direct.pop(node_id, None)
        if direct is not None:
            direct.close()

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        """Build the encoder and decoder of every group request, in the version the
        coordinator's connection sends it in, before its first use.

        kafka-python generates each message version's codec the first time it is used
        (Python source, compiled: several milliseconds of CPU each, more on a busy host). A
        member sends some requests only at the moment that matters: an elected leader's
        first OffsetCommit, a closing leader's LeaveGroup. Built in advance, they no longer
        hold up a handoff. Only the connections this side drives know their versions in
        advance; kafka-python's own (a SASL login) build theirs at first use, as before.
        """
        try:
            direct = self._direct_connection(self._coordinator_node_id(coordinator))
            if direct is None:
                return
            started = time.monotonic()
            built = 0
            for sample, response_type in _codec_samples():
                request = self._encode(sample)
                version = direct.api_version(request)
                if version is None or (response_type, version) in _WARMED:
                    continue
                request.encode(version=version)
                with contextlib.suppress(Exception):
                    # Builds the decoder, then fails on no bytes (a sample answer would need
                    # an encoder built that no request uses).
                    response_type.decode(b"", version=version)
                _WARMED.add((response_type, version))
                built += 1
            log.debug(
                "%s: codecs of %d group requests built in %.1f ms",
                direct,
                built,
                (time.monotonic() - started) * 1000,
            )
        except Exception:  # best effort: a request built at first use works all the same
            log.debug("building the codecs of the group requests failed", exc_info=True)

    def close(self) -> None:
        with self._lifecycle_lock:
            if self._closed:
                return
            self._closed = True
        with self._direct_lock:
            direct, self._direct = list(self._direct.values()), {}
        for connection in direct:
            connection.close()
        try:
            # On the I/O thread: closed from another thread, a connection's socket can vanish
            # under a read in progress there (a long-polling fetch always has one waiting),
            # and kafka-python logs tracebacks for it.
            self._manager.run(self._close_connections)
        except Exception:
            self._manager.close()
        finally:
            if self._stop_io_thread():
                self._net.close()  # its selector and wakeup socket pair

    def _stop_io_thread(self, timeout_s: float = 30.0) -> bool:
        """Stop kafka-python's I/O thread; True once it has ended.

        Its loop clears its stop flag when it starts: a stop asked for before the new thread
        ran (a transport closed right after its first use, or on a loaded machine) was
        forgotten, the loop ran on, and the selector closed under it failed the thread with
        "I/O operation on closed epoll object". So the stop is asked again until the thread
        has ended; the selector is closed only then.
        """
        thread: threading.Thread | None = getattr(self._net, "_io_thread", None)
        self._net.stop(timeout_ms=100)  # fails the calls still waiting on the loop
        deadline = time.monotonic() + timeout_s
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            self._net._stop = True  # what stop() sets, for the loop that missed it
            self._net.wakeup()
            thread.join(0.1)
        if thread is not None and thread.is_alive():
            log.warning(
                "kafka-python's I/O thread did not stop within %.0f s of close(); its "
                "selector is left open",
                timeout_s,
            )
            return False
        return True

    async def _close_connections(self) -> None:
        self._manager.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- helpers -------------------------------------------------------------------

    def _ensure_bootstrapped(self, timeout_s: float) -> None:
        with self._bootstrap_lock:
            if self._manager.bootstrapped:
                return
            with self._lifecycle_lock:
                if self._closed:
                    raise TransportError("transport is closed")
                self._net.start()  # kafka-python's I/O thread; idempotent
            attempt_s = min(max(1.0, timeout_s), _BOOTSTRAP_ATTEMPT_S)
            try:
                self._bootstrap(attempt_s)
            except _REFUSALS as e:
                raise _refused(e) from e
            except Exception as e:
                if self._manager.refusal is not None:
                    raise _refused(self._manager.refusal) from e
                # kafka-python only says it could not bootstrap; find out why, server by server.
                servers = bootstrap_list(self._servers)
                findings = [diagnose(server, self._tls) for server in servers]
                why = "; ".join(finding.message for finding in findings)
                # Stop only when every server says the same settings problem: one broker
                # restarting mid-handshake must not stop a member for good.
                fatal = bool(findings) and all(f.settings_problem for f in findings)
                raise TransportError(
                    f"cannot reach bootstrap servers {servers}: {why or e}",
                    fatal=fatal,
                    # A settings problem is a TLS one (the port speaks TLS, or not); an
                    # unreachable server is only that.
                    error_type=TlsError if fatal else ConnectionFailedError,
                ) from e

    def _bootstrap(self, seconds: float) -> None:
        """kafka-python's bootstrap, for at most ``seconds``, given up at a refused login.

        Its bootstrap tries again after a refusal until its deadline; run in short slices
        (its backoff carries over between them), a refusal is reported within a slice.
        """
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            try:
                self._manager.bootstrap(timeout_ms=int(min(remaining, _BOOTSTRAP_SLICE_S) * 1000))
                return
            except Exception:
                if self._manager.refusal is not None or remaining <= _BOOTSTRAP_SLICE_S:
                    raise

    def _direct_connection(self, node_id: Any) -> DirectConnection | None:
        """The direct connection of a dedicated node, or None (kafka-python's connections)."""
        if self._direct_settings is None or not isinstance(node_id, str):
            return None
        with self._direct_lock:
            if self._closed:
                raise TransportError("transport is closed")
            direct = self._direct.get(node_id)
            if direct is None:
                host, port = self._dedicated[node_id]
                direct = DirectConnection(node_id, host, port, self._direct_settings)
                self._direct[node_id] = direct
            return direct

    def _coordinator_node_id(self, coordinator: CoordinatorNode) -> Any:
        # A dedicated node id gives the coordinator its own connection, apart from
        # metadata traffic, as Kafka's clients do (Integer.MAX_VALUE - nodeId in Java).
        return self.dedicated_node(
            "coordinator", coordinator.node_id, coordinator.host, coordinator.port, single=True
        )

    @staticmethod
    def _encode(request: m.Request) -> Any:
        if isinstance(request, _OwnRequest):
            return _OwnCodecRequest(request)
        if isinstance(request, m.FindCoordinatorRequest):
            return KFindCoordinatorRequest(
                key=request.key,
                key_type=_GROUP_KEY_TYPE,
                coordinator_keys=[request.key],
                max_version=m.MAX_VERSIONS["FindCoordinator"],
            )
        if isinstance(request, m.JoinGroupRequest):
            protocol = kgroup.JoinGroupRequest.JoinGroupRequestProtocol
            return kgroup.JoinGroupRequest(
                group_id=request.group_id,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                protocol_type=request.protocol_type,
                protocols=[protocol(name=n, metadata=md) for n, md in request.protocols],
                reason=request.reason,
                # v4: two-step join; v5: static membership. Older brokers are not supported.
                min_version=5 if request.group_instance_id else 4,
                max_version=m.MAX_VERSIONS["JoinGroup"],
            )
        if isinstance(request, m.SyncGroupRequest):
            assignment = kgroup.SyncGroupRequest.SyncGroupRequestAssignment
            return kgroup.SyncGroupRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
                assignments=[assignment(member_id=i, assignment=a) for i, a in request.assignments],
                max_version=m.MAX_VERSIONS["SyncGroup"],
            )
        if isinstance(request, m.HeartbeatRequest):
            return kgroup.HeartbeatRequest(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                max_version=m.MAX_VERSIONS["Heartbeat"],
            )
        if isinstance(request, m.OffsetCommitRequest):
            return _offset_commit(request)
        if isinstance(request, m.OffsetFetchRequest):
            return _offset_fetch(request)
        if isinstance(request, m.DescribeGroupRequest):
            return DescribeGroupsRequest(
                groups=[request.group_id], max_version=m.MAX_VERSIONS["DescribeGroups"]
            )
        identity = kgroup.LeaveGroupRequest.MemberIdentity
        return kgroup.LeaveGroupRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            members=[
                identity(
                    member_id=request.member_id,
                    group_instance_id=request.group_instance_id,
                    reason=request.reason,
                )
            ],
            max_version=m.MAX_VERSIONS["LeaveGroup"],
        )

    @staticmethod
    def _decode(raw: Any) -> m.Response:
        if isinstance(raw, _OwnResponse):
            return raw  # decoded by _OwnCodecResponse
        version = raw.version
        if isinstance(raw, kgroup.JoinGroupResponse):
            return m.JoinGroupResponse(
                error_code=raw.error_code,
                generation_id=raw.generation_id,
                protocol_type=raw.protocol_type if version >= 7 else None,
                protocol_name=raw.protocol_name,
                leader=raw.leader,
                skip_assignment=bool(raw.skip_assignment) if version >= 9 else False,
                member_id=raw.member_id,
                members=tuple(
                    m.JoinGroupResponseMember(
                        member_id=x.member_id,
                        group_instance_id=x.group_instance_id if version >= 5 else None,
                        metadata=bytes(x.metadata),
                    )
                    for x in raw.members
                ),
                version=version,
            )
        if isinstance(raw, kgroup.SyncGroupResponse):
            return m.SyncGroupResponse(
                error_code=raw.error_code,
                protocol_type=raw.protocol_type if version >= 5 else None,
                protocol_name=raw.protocol_name if version >= 5 else None,
                assignment=bytes(raw.assignment),
                version=version,
            )
        if isinstance(raw, kgroup.HeartbeatResponse):
            return m.HeartbeatResponse(error_code=raw.error_code, version=version)
        if isinstance(raw, kgroup.LeaveGroupResponse):
            member_error = raw.error_code
            if version >= 3 and raw.members:
                member_error = raw.members[0].error_code
            return m.LeaveGroupResponse(
                error_code=raw.error_code, member_error_code=member_error, version=version
            )
        if isinstance(raw, kgroup.OffsetCommitResponse):
            return m.OffsetCommitResponse(
                partitions=tuple(
                    (t.name, p.partition_index, p.error_code)
                    for t in raw.topics
                    for p in t.partitions
                ),
                version=version,
            )
        if isinstance(raw, kgroup.OffsetFetchResponse) and version >= 8:
            if len(raw.groups) != 1:
                raise TransportError(f"OffsetFetch answered {len(raw.groups)} groups for one")
            group = raw.groups[0]
            return m.OffsetFetchResponse(
                error_code=group.error_code,
                partitions=tuple(
                    (t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                    for t in group.topics
                    for p in t.partitions
                ),
                version=version,
            )
        if isinstance(raw, kgroup.OffsetFetchResponse):
            return m.OffsetFetchResponse(
                error_code=raw.error_code if version >= 2 else 0,
                partitions=tuple(
                    (t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                    for t in raw.topics
                    for p in t.partitions
                ),
                version=version,
            )
        if isinstance(raw, DescribeGroupsResponse):
            return _described(raw)
        # FindCoordinator: v4+ answers per key; one key was asked for.
        if version >= 4:
            if len(raw.coordinators) != 1:
                raise TransportError(
                    f"FindCoordinator answered {len(raw.coordinators)} coordinators for one key"
                )
            c = raw.coordinators[0]
            return m.FindCoordinatorResponse(
                error_code=c.error_code,
                node_id=c.node_id,
                host=c.host,
                port=c.port,
                error_message=c.error_message,
                version=version,
            )
        return m.FindCoordinatorResponse(
            error_code=raw.error_code,
            node_id=raw.node_id,
            host=raw.host,
            port=raw.port,
            error_message=getattr(raw, "error_message", None),
            version=version,
        )


def _offset_commit(request: m.OffsetCommitRequest) -> Any:
    topic_type = kgroup.OffsetCommitRequest.OffsetCommitRequestTopic
    partition_type = topic_type.OffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset, metadata in request.offsets:
        by_topic.setdefault(topic, []).append(
            partition_type(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata=metadata,
            )
        )
    return kgroup.OffsetCommitRequest(
        group_id=request.group_id,
        generation_id_or_member_epoch=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        topics=[topic_type(name=t, partitions=ps) for t, ps in by_topic.items()],
        # v2 is the oldest Kafka 4 accepts; v7 carries the static member's instance id.
        min_version=7 if request.group_instance_id else 2,
        max_version=m.MAX_VERSIONS["OffsetCommit"],
    )


def _offset_fetch(request: m.OffsetFetchRequest) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in request.partitions:
        by_topic.setdefault(topic, []).append(partition)
    if request.member_epoch >= 0:
        # A KIP-848 member's fetch, fenced by its epoch: one group of v9's batch format.
        group_type = kgroup.OffsetFetchRequest.OffsetFetchRequestGroup
        topics_type = group_type.OffsetFetchRequestTopics
        version = m.OFFSET_FETCH_MEMBER_VERSION
        return kgroup.OffsetFetchRequest(
            groups=[
                group_type(
                    group_id=request.group_id,
                    member_id=request.member_id,
                    member_epoch=request.member_epoch,
                    topics=[
                        topics_type(name=t, partition_indexes=ps) for t, ps in by_topic.items()
                    ],
                )
            ],
            require_stable=request.require_stable,
            min_version=version,
            max_version=version,
        )
    topic_type = kgroup.OffsetFetchRequest.OffsetFetchRequestTopic
    return kgroup.OffsetFetchRequest(
        group_id=request.group_id,
        topics=[topic_type(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        require_stable=request.require_stable,
        min_version=1,
        max_version=m.MAX_VERSIONS["OffsetFetch"],
    )


def _described(raw: Any) -> m.DescribeGroupResponse:
    if len(raw.groups) != 1:
        raise TransportError(f"DescribeGroups answered {len(raw.groups)} groups for one")
    group = raw.groups[0]
    return m.DescribeGroupResponse(
        error_code=group.error_code,
        state=group.group_state,
        protocol_type=group.protocol_type,
        protocol=group.protocol_data,
        members=tuple(
            m.DescribedMember(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id if raw.version >= 4 else None,
                client_id=x.client_id,
                client_host=x.client_host,
                metadata=_member_bytes(x.member_metadata),
                assignment=_member_bytes(x.member_assignment),
            )
            for x in raw.groups[0].members
        ),
        version=raw.version,
    )


def _member_bytes(value: Any) -> bytes:
    """kafka-python hands member bytes over as bytes (or decoded, for some versions)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    encode: Callable[[], bytes] | None = getattr(value, "encode", None)
    return bytes(encode()) if encode is not None else b""


# The (response class, version) pairs whose codecs are built (see warm_up); one process's
# members share kafka-python's classes, so each pair is built once per process.
_WARMED: set[tuple[Any, int]] = set()


def _codec_samples() -> list[tuple[m.Request, Any]]:
    """One request of each kind the engine sends to the coordinator, with its answer's class."""
    group, member, instance = "g", "m", None
    return [
        (m.HeartbeatRequest(group, 1, member, instance), kgroup.HeartbeatResponse),
        (
            m.JoinGroupRequest(group, 1, 1, member, instance, "p", (("p", b""),), None),
            kgroup.JoinGroupResponse,
        ),
        (m.SyncGroupRequest(group, 1, member, instance, "p", "p"), kgroup.SyncGroupResponse),
        (m.LeaveGroupRequest(group, member, instance, None), kgroup.LeaveGroupResponse),
        (
            m.OffsetCommitRequest(group, 1, member, instance, (("t", 0, 0, None),)),
            kgroup.OffsetCommitResponse,
        ),
        (m.OffsetFetchRequest(group, (("t", 0),)), kgroup.OffsetFetchResponse),
    ]


# What a broker answers when it refuses a login or a principal.
_REFUSALS = (
    kafka_errors.SaslAuthenticationFailedError,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
    kafka_errors.AuthorizationError,
)


def _refused(e: BaseException) -> TransportError:
    return TransportError(
        f"authentication failed: {e}", fatal=True, error_type=AuthenticationFailedError
    )


class _ConnectionManager(KafkaConnectionManager):  # type: ignore[misc]
    """kafka-python's connection manager, remembering the broker's last refused login.

    Its bootstrap logs a refused SASL login and tries again until its deadline, then says
    only that it could not bootstrap; the refusal is what the user needs to hear.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal: BaseException | None = None
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def get_connection(self, node_id: Any, *args: Any, **kwargs: Any) -> Any:
        connection = super().get_connection(node_id, *args, **kwargs)
        if connection not in self._watched:
            self._watched.add(connection)
            connection.init_future.add_errback(self._note_failure)
        return connection

    def _note_failure(self, error: BaseException) -> None:
        if isinstance(error, _REFUSALS):
            self.refusal = error

    async def _build_transport(self, node: Any, timeout_at: Any = None) -> Any:
        transport = await super()._build_transport(node, timeout_at=timeout_at)
        receive = getattr(transport, "_sock_recv", None)
        if receive is not None:
            transport._sock_recv = _delivering_before_close(transport, receive)
        return transport


def _delivering_before_close(transport: Any, receive: Any) -> Any:
    """kafka-python's socket read, made to hand over what it read before the peer closed.

    A broker refusing a SASL login sends the refusal and closes the connection; when both
    arrive together, kafka-python's read returns the bytes with the close and its read loop
    drops the bytes, so the refusal is seen as a bare "socket disconnected" and retried.
    Here the bytes come first; the next read sees the close again. A read woken by this side
    closing the connection (a long-polling fetch is always waiting) returns the close quietly,
    where kafka-python would log a traceback for reading a socket that is gone.
    """

    def receive_then_close() -> tuple[bytes, Any]:
        if getattr(transport, "_sock", None) is None:
            return b"", kafka_errors.KafkaConnectionError("connection closed")
        data, error = receive()
        if data and error is not None:
            return data, None
        return data, error

    return receive_then_close


class DedicatedAnswer(Generic[R]):
    """The answer to come of a request :meth:`KafkaTransport.send_dedicated_ahead` sent."""

    def __init__(self, outstanding: Outstanding | None, expected: type[R] | R) -> None:
        # Without an outstanding request, ``expected`` is the answer already (the broker
        # offers no version of the request: Kafka's clients answer it themselves).
        self._outstanding = outstanding
        self._expected = expected

    def ready(self, timeout_s: float) -> bool:
        """Whether the answer is here (or failed), waiting up to ``timeout_s``."""
        return self._outstanding is None or self._outstanding.ready(timeout_s)

    def answer(self) -> R:
        """The answer, waiting for it until the request's timeout.

        Raises:
            TransportError: no answer, or the connection failed.
        """
        if self._outstanding is None:
            return self._expected  # type: ignore[return-value]
        raw = self._outstanding.answer()
        assert isinstance(self._expected, type)
        return KafkaTransport._checked(KafkaTransport._decode(raw), self._expected)

    def abandon(self) -> None:
        """Give up on the answer (its connection is closed)."""
        if self._outstanding is not None:
            self._outstanding.abandon()


def _exchange(direct: DirectConnection, request: Any, timeout_s: float, then: Any = None) -> Any:
    """``request``'s answer (with ``then``: both answers, see ``exchange_pair``)."""
    try:
        if then is not None:
            return direct.exchange_pair(request, then, timeout_s)
        return direct.exchange(request, timeout_s)
    except kafka_errors.IncompatibleBrokerVersion as e:
        if isinstance(request, _OwnCodecRequest) and then is None:
            return request.unoffered(e)  # the broker's "answer", as Kafka's clients make it
        raise TransportError(f"broker does not support {type(request).__name__}: {e}") from e


# The Kafka version that brought the consumer group protocol out of early access (GA, v1).
_CONSUMER_PROTOCOL_KAFKA: Final = "4.0"
# The Kafka version whose share-group APIs are v1, the oldest spoken here (4.0 had v0 only).
_SHARE_GROUPS_KAFKA: Final = "4.1"


class _OwnCodecRequest:
    """A request of an API kafka-python has no classes for (the consumer group protocol's,
    share groups'), encoded by ``consumer_group_codec`` or ``share_group_codec``, in the
    shape kafka-python's connections and ``DirectConnection`` handle a request in: they
    choose its version from the broker's ApiVersions (``API_KEY``, ``min_version``/
    ``max_version``, and this request's own bounds ``_min_version``/``_max_version``), set
    ``API_VERSION``, give it a header, frame it, and read its answer with the class its
    header names."""

    def __init__(self, request: _OwnRequest) -> None:
        self.request = request
        kind = type(request)
        self._codec: Any = sg_codec if isinstance(request, sg_codec.Request) else cg_codec
        self.API_KEY = self._codec.api_key(kind)
        self.name = kind.__name__.removesuffix("Request")
        self.min_version = 0
        self.max_version = self._codec.max_version(kind)
        # v1 at least: the consumer group protocol's v0 is Kafka 3.7-3.9's early access, which
        # those brokers list in ApiVersions even where they refuse it (UNSUPPORTED_VERSION, no
        # message); share groups' v0 is Kafka 4.0's early access, which 4.1 removed (but for
        # AlterShareGroupOffsets, whose only version is v0).
        self._min_version = (
            sg_codec.min_version(type(request)) if isinstance(request, sg_codec.Request) else 1
        )
        self._max_version = m.MAX_VERSIONS[self.name]
        self.API_VERSION: int | None = None
        self.header: _OwnCodecHeader | None = None

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        assert self.API_VERSION is not None
        response = _OwnCodecResponse(self._response_type(), self.API_VERSION)
        self.header = _OwnCodecHeader(correlation_id, client_id, response)

    def encode(self, header: bool = False, framed: bool = False) -> bytes:
        assert self.API_VERSION is not None
        data: bytes
        if header:
            assert self.header is not None
            data = self._codec.encode_request(
                self.request, self.API_VERSION, self.header.correlation_id, self.header.client_id
            )
        else:
            data = self._codec.encode(self.request, self.API_VERSION)
        return struct.pack(">i", len(data)) + data if framed else data

    def unoffered(self, e: Exception) -> _OwnResponse:
        """The answer to a request the broker offers no version of: UNSUPPORTED_VERSION, with
        a message naming the Kafka version needed (as Kafka's clients answer it themselves)."""
        if isinstance(self.request, sg_codec.Request):
            return self._share_unoffered(e)
        message = (
            f"this broker offers no {self.name} v{self._min_version} (API key {self.API_KEY}): "
            f"the consumer group protocol (KIP-848) needs Kafka {_CONSUMER_PROTOCOL_KAFKA} "
            "or newer, with group.coordinator.rebalance.protocols including consumer (its "
            f"default); {e}"
        )
        code = ErrorCode.UNSUPPORTED_VERSION
        if isinstance(self.request, cg.ConsumerGroupHeartbeatRequest):
            return cg.ConsumerGroupHeartbeatResponse(
                error_code=code, error_message=message, member_epoch=-1, version=-1
            )
        return cg.ConsumerGroupDescribeResponse(
            groups=tuple(
                cg.DescribedConsumerGroup(error_code=code, group_id=g, error_message=message)
                for g in self.request.group_ids
            ),
            version=-1,
        )

    def _share_unoffered(self, e: Exception) -> sg_codec.Response:
        message = (
            f"this broker offers no {self.name} v{self._min_version} (API key {self.API_KEY}): "
            f"share groups (KIP-932) need Kafka {_SHARE_GROUPS_KAFKA} or newer with the "
            "share.version feature enabled (kafka-features.sh upgrade --feature "
            f"share.version=1); {e}"
        )
        code = ErrorCode.UNSUPPORTED_VERSION
        if isinstance(self.request, sg.ShareGroupHeartbeatRequest):
            return sg.ShareGroupHeartbeatResponse(code, message, member_epoch=-1, version=-1)
        if isinstance(self.request, sg.ShareGroupDescribeRequest):
            return sg.ShareGroupDescribeResponse(
                groups=tuple(
                    sg.DescribedShareGroup(error_code=code, group_id=g, error_message=message)
                    for g in self.request.group_ids
                ),
                version=-1,
            )
        if isinstance(self.request, sg.ShareFetchRequest):
            return sg.ShareFetchResponse(code, message, version=-1)
        if isinstance(self.request, sg.DescribeShareGroupOffsetsRequest):
            return sg.DescribeShareGroupOffsetsResponse(
                groups=tuple(
                    sg.DescribedShareGroupOffsets(g.group_id, (), code, message)
                    for g in self.request.groups
                ),
                version=-1,
            )
        if isinstance(self.request, sg.AlterShareGroupOffsetsRequest):
            return sg.AlterShareGroupOffsetsResponse(code, message, version=-1)
        return sg.ShareAcknowledgeResponse(code, message, version=-1)

    def _response_type(self) -> type[_OwnResponse]:
        if isinstance(self.request, sg_codec.Request):
            return sg_codec.response_type(type(self.request))
        if isinstance(self.request, cg.ConsumerGroupHeartbeatRequest):
            return cg.ConsumerGroupHeartbeatResponse
        return cg.ConsumerGroupDescribeResponse

    def __repr__(self) -> str:
        return f"{self.request!r} (v{self.API_VERSION})"


class _OwnCodecHeader:
    """The header of an ``_OwnCodecRequest``, as kafka-python's connections use one."""

    def __init__(self, correlation_id: int, client_id: str, response: _OwnCodecResponse) -> None:
        self.correlation_id = correlation_id
        self.client_id = client_id
        self._response = response

    def get_response_class(self) -> _OwnCodecResponse:
        return self._response


class _OwnCodecResponse:
    """Reads the answer to an ``_OwnCodecRequest``: called as kafka-python's parser calls a
    response class (``parse_header`` then ``decode`` of a buffer), or as DirectConnection
    does (``decode`` of the bytes after the size, header included)."""

    def __init__(self, kind: type[_OwnResponse], version: int) -> None:
        self._kind = kind
        self._version = version
        self._codec: Any = sg_codec if issubclass(kind, sg_codec.Response) else cg_codec

    def parse_header(self, buffer: Any) -> Any:
        start = buffer.tell()
        reader = Reader(buffer.read(), "response header")
        try:
            correlation_id = decode_response_header(reader)
        except ProtocolCodecError as e:
            raise ValueError(str(e)) from e  # what kafka-python's parser reports as such
        buffer.seek(start + reader.position)
        return types.SimpleNamespace(correlation_id=correlation_id)

    def decode(self, data: Any, header: bool = False) -> Any:
        payload = data.read() if hasattr(data, "read") else data
        try:
            if header:
                return self._codec.decode_response(self._kind, payload, self._version)[1]
            return self._codec.decode(self._kind, payload, self._version)
        except ProtocolCodecError as e:
            raise ValueError(str(e)) from e  # what kafka-python's parser reports as such


def _direct_settings(configs: dict[str, Any]) -> DirectSettings | None:
    """Settings for the dedicated connections this side drives, or None where kafka-python must make
    them: a SASL login, a proxy, or a pinned broker version."""
    protocol = configs.get("security_protocol", "PLAINTEXT")
    if protocol not in ("PLAINTEXT", "SSL"):
        return None
    if configs.get("proxy_url") or configs.get("api_version"):
        return None
    settings = dict(KafkaConnectionManager.DEFAULT_CONFIG)
    settings.update((k, v) for k, v in configs.items() if v is not None)
    tls = None
    if protocol == "SSL":
        try:
            # kafka-python's own context for these settings, so both paths verify alike.
            tls = KafkaSSLTransport._build_ssl_context(settings)
        except (OSError, ssl.SSLError, ValueError):
            return None  # kafka-python's own connections report it
    return DirectSettings(
        client_id=settings["client_id"],
        tls=tls,
        socket_options=settings["socket_options"],
        connect_timeout_s=settings["socket_connection_setup_timeout_ms"] / 1000,
        max_response_bytes=settings["receive_message_max_bytes"],
        client_software=(settings["client_software_name"], settings["client_software_version"]),
    )


def _tls_context(connection: dict[str, Any]) -> ssl.SSLContext | None:
    """The TLS context the connection settings describe, for diagnosis only."""
    given = connection.get("ssl_context")
    if isinstance(given, ssl.SSLContext):
        return given
    try:
        context = ssl.create_default_context(cafile=connection.get("ssl_cafile"))
        context.check_hostname = bool(connection.get("ssl_check_hostname", True))
        if connection.get("ssl_certfile"):
            context.load_cert_chain(
                connection["ssl_certfile"],
                connection.get("ssl_keyfile"),
                connection.get("ssl_password"),
            )
    except (OSError, ssl.SSLError, ValueError):
        return None  # the configuration check reports unreadable files
    return context


class Finding:
    """What :func:`diagnose` found out about one server."""

    def __init__(self, message: str, *, settings_problem: bool = False) -> None:
        self.message = message
        # True when the server answers but these settings cannot work with it.
        self.settings_problem = settings_problem

    def __repr__(self) -> str:
        return f"Finding({self.message!r}, settings_problem={self.settings_problem})"


def diagnose(server: str, tls: ssl.SSLContext | None) -> Finding:
    """Why ``server`` (``host:port``) cannot be used: DNS, TCP, then the TLS handshake."""
    try:
        host, port = split_server(server)
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ConfigurationError as e:
        return Finding(str(e), settings_problem=True)
    except socket.gaierror as e:
        return Finding(f"{server}: DNS lookup of {host!r} failed ({e.strerror})")
    address = addresses[0]
    try:
        with _connected(address) as sock:
            if tls is None:
                if _speaks_tls(address, host):
                    return Finding(
                        f"{server}: this port is a TLS listener; set security_protocol to SSL "
                        "or SASL_SSL (and ssl_cafile), or use the broker's PLAINTEXT port",
                        settings_problem=True,
                    )
                return Finding(
                    f"{server}: the port accepts connections, but kafka-python could not bootstrap"
                )
            try:
                _handshake(tls, sock, host)
            except ssl.SSLCertVerificationError as e:
                return Finding(
                    f"{server}: TLS certificate not accepted ({e.verify_message}); "
                    + certificate_advice(e),
                    settings_problem=True,
                )
            except (TimeoutError, ssl.SSLError, ConnectionError) as e:
                if _speaks_kafka_in_plaintext(address):
                    return Finding(
                        f"{server}: this port is a PLAINTEXT listener, not TLS; use the "
                        "broker's SSL/SASL_SSL port or set security_protocol=PLAINTEXT",
                        settings_problem=True,
                    )
                return Finding(f"{server}: TLS handshake failed ({e})")
            return Finding(f"{server}: TLS works, but kafka-python could not bootstrap")
    except TimeoutError:
        return Finding(
            f"{server}: no answer within {_PROBE_TIMEOUT_S:.0f}s (firewall, or wrong host?)"
        )
    except ConnectionRefusedError:
        return Finding(f"{server}: connection refused (nothing listens on port {port})")
    except OSError as e:
        return Finding(f"{server}: {e.strerror or e}")


def _connected(address: Any) -> socket.socket:
    family, kind, proto, _, target = address
    sock = socket.socket(family, kind, proto)
    try:
        sock.settimeout(_PROBE_TIMEOUT_S)
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    return sock


def _speaks_tls(address: Any, host: str) -> bool:
    """Whether the server completes a TLS handshake (its certificate not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with _connected(address) as sock:
            _handshake(context, sock, host)
            return True
    except (OSError, ssl.SSLError):
        return False


def _handshake(context: ssl.SSLContext, sock: socket.socket, host: str) -> None:
    # Handshake after wrapping: a handshake inside wrap_socket that fails leaves the wrapped
    # socket (which took over the descriptor) unclosed.
    secured = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    with secured:
        secured.do_handshake()


def _speaks_kafka_in_plaintext(address: Any) -> bool:
    """Whether the server answers a plaintext ApiVersions request (v0) like a broker."""
    correlation_id = 0x5EC0
    client_id = b"coordination-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with _connected(address) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(sock, 8)
    except OSError:
        return False
    return header is not None and struct.unpack(">ii", header)[1] == correlation_id


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data
