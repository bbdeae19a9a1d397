"""Dedicated connections driven by the thread that sends each request.

A member's requests to its coordinator (heartbeats, joins, syncs, commits) each wait for
their answer, and the broker answers one connection's requests in order anyway; the wake-up
channel's long-polling fetch holds its connection too. Such a connection needs no I/O thread:
the sending thread writes the request and reads the answer on a blocking socket.
kafka-python still encodes and decodes every message; only the socket I/O is done here.
Through kafka-python's asynchronous network layer a request cost about 0.55 ms of CPU (its
selector thread, a coroutine per request, two thread hand-overs), here about 0.18 ms: that
CPU bounds a rebalance of many members sharing a process or a CPU. For the same reason a
request costs few system calls (each lets the process's other threads take the interpreter):
an answer is read in one call where it fits, size and body, and a socket keeps its timeout
from one request to the next where it fits. A heartbeat takes five calls (the check that the
broker did not close the connection, a wait and a send, a wait and a read), not ten.

Used for PLAINTEXT and SSL listeners; SASL logins, proxies and a pinned broker version stay
with kafka-python's connections.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import ApiVersionsRequest

from .._protocol.error_codes import ErrorCode
from ..errors import TlsError
from ..transport import TransportError

log = logging.getLogger("coordination.transport")

T = TypeVar("T")

# ApiVersions v3 (Kafka 2.4+) first; an older broker answers UNSUPPORTED_VERSION and v0 works.
_API_VERSIONS_FIRST = 3
# A connect in progress looks this often whether close() was called.
_CLOSE_CHECK_S = 0.1
# A read asks for this much at least: a small answer (its size and its body) in one call.
_READ_AHEAD_BYTES = 64 * 1024


class ResponseTooLargeError(TransportError):
    """An answer larger than ``receive_message_max_bytes``: read no further (the connection
    is closed), since a garbled length would otherwise have this side allocate it."""

    def __init__(self, message: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class DirectSettings:
    """What every direct connection of one transport shares."""

    def __init__(
        self,
        *,
        client_id: str,
        tls: ssl.SSLContext | None,
        socket_options: Iterable[tuple[int, int, int]],
        connect_timeout_s: float,
        max_response_bytes: int,
        client_software: tuple[str, str],
    ) -> None:
        self.client_id = client_id
        self.tls = tls
        self.socket_options = tuple(socket_options)
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self.client_software = client_software


class DirectConnection:
    """One broker connection on which the calling thread sends a request and reads its answer.

    Connects on first use (TCP, TLS when configured, then ApiVersions to choose each request's
    version). Any failure closes the connection, so a late answer can never be taken for the
    next request's; the next exchange connects again.
    """

    def __init__(self, purpose: str, host: str, port: int, settings: DirectSettings) -> None:
        self.purpose = purpose
        self.host = host
        self.port = port
        self._settings = settings
        # One exchange at a time: the broker would answer a second one only after the first.
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        # Bytes read beyond the answer being read: the start of the next one (see _read).
        self._buffered = bytearray()
        self._versions: BrokerVersionData | None = None
        self._correlation_id = 0
        self._closed = False

    def exchange(self, request: Any, timeout_s: float) -> Any:
        """Send kafka-python's ``request`` and return its decoded response.

        Raises:
            TransportError: no answer within ``timeout_s``, or the connection failed.
        """
        deadline = time.monotonic() + timeout_s
        with self._held(request, timeout_s):
            return self._or_drop(
                request, lambda: self._round_trip(self._connected(deadline), request, deadline)
            )

    def exchange_pair(self, first: Any, second: Any, timeout_s: float) -> tuple[Any, Any]:
        """Send two requests back to back and return both responses, the second's in its
        place a TransportError if it got none. The broker handles one connection's requests
        one at a time, in order: ``second`` is handled only once ``first`` is answered,
        without the wait for that answer to travel here and a new request to travel back.

        Raises:
            TransportError: ``first`` got no answer (``second`` may or may not have been
                handled); the connection is closed.
        """
        deadline = time.monotonic() + timeout_s

        def send_both() -> tuple[socket.socket, Any, int | None]:
            sock = self._connected(deadline)
            try:
                self._choose_version(second)
            except kafka_errors.IncompatibleBrokerVersion:
                return sock, self._round_trip(sock, first, deadline), None
            first_id, framed_first = self._framed(first)
            second_id, framed_second = self._framed(second)
            _set_timeout(sock, deadline)
            sock.sendall(framed_first + framed_second)
            return sock, self._answer(sock, first, first_id, deadline), second_id

        with self._held(first, timeout_s):
            sock, answer, second_id = self._or_drop(first, send_both)
            if second_id is None:
                return answer, TransportError(f"broker does not support {type(second).__name__}")
            try:
                return answer, self._or_drop(
                    second, lambda: self._answer(sock, second, second_id, deadline)
                )
            except TransportError as e:
                return answer, e

    def send_ahead(self, request: Any, timeout_s: float) -> Outstanding:
        """Send ``request`` now and read its answer later (:meth:`Outstanding.answer`), so
        that the broker works on it while the calling thread does something else. The
        connection is the request's until its answer is read or it is abandoned: an exchange
        meanwhile waits for it (up to its own timeout). The answer must come within
        ``timeout_s`` of now.

        Raises:
            TransportError: the request could not be sent (the connection is closed).
        """
        deadline = time.monotonic() + timeout_s
        self._reserve(request, timeout_s)
        try:

            def send() -> tuple[socket.socket, int]:
                sock = self._connected(deadline)
                return sock, self._send(sock, request, deadline)

            sock, correlation_id = self._or_drop(request, send)
        except BaseException:
            self._lock.release()
            raise
        return Outstanding(self, sock, request, correlation_id, deadline)

    def api_version(self, request: Any) -> int | None:
        """The version ``request`` is sent in on this connection; None before it has
        connected (the versions come from the broker's ApiVersions) or if none fits."""
        versions = self._versions
        if versions is None:
            return None
        try:
            version: int = versions.api_version(request)
        except kafka_errors.IncompatibleBrokerVersion:
            return None
        return version

    def close(self) -> None:
        """Close the connection; an exchange waiting for an answer fails at once."""
        self._closed = True
        sock = self._sock
        if sock is not None:
            # Wakes a thread blocked reading it (closing alone would not, on Linux).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()
        # else the exchange in progress fails on the shut socket and drops it itself.

    def __str__(self) -> str:
        return f"{self.purpose} connection to {self.host}:{self.port}"

    @contextlib.contextmanager
    def _held(self, request: Any, timeout_s: float) -> Iterator[None]:
        """The connection for one exchange: one at a time, as the broker answers them."""
        self._reserve(request, timeout_s)
        try:
            yield
        finally:
            self._lock.release()

    def _reserve(self, request: Any, timeout_s: float) -> None:
        """Take the connection's lock for ``request`` (the caller releases it).

        Raises:
            TransportError: it stayed busy for ``timeout_s``, or the connection is closed.
        """
        if not self._lock.acquire(timeout=max(0.0, timeout_s)):
            raise TransportError(
                f"{type(request).__name__}: {self} stayed busy for {timeout_s:.1f}s"
            )
        if self._closed:
            self._lock.release()
            raise TransportError(f"{self} is closed")

    def _or_drop(self, request: Any, step: Callable[[], T]) -> T:
        """``step``'s result; any failure closes the connection (so that a late answer can
        never be taken for the next request's) and is a TransportError."""
        try:
            return step()
        except TransportError:
            self._drop()
            raise
        except (OSError, ValueError) as e:
            # socket.timeout is an OSError; poll() refuses a closed socket with a ValueError.
            self._drop()
            raise TransportError(
                f"{type(request).__name__} got no response from {self}: {e!r}"
            ) from e

    # -- under the lock -------------------------------------------------------------

    def _connected(self, deadline: float) -> socket.socket:
        if self._sock is not None:
            # Bytes nobody asked for, read with the last answer, put it out of step too.
            if not self._buffered and _idle_and_open(self._sock):
                return self._sock
            # The broker closed it while idle (connections.max.idle.ms): connect again.
            log.debug("%s: closed by the broker while idle; reconnecting", self)
            self._drop()
        s = self._settings
        sock = self._connect(min(_remaining(deadline), s.connect_timeout_s))
        # Set before the TLS handshake and ApiVersions, so that close() can cut them short.
        self._sock = sock
        try:
            for level, option, value in s.socket_options:
                sock.setsockopt(level, option, value)
            sock.settimeout(_remaining(deadline))
            if s.tls is not None:
                sock = self._secured(s.tls, sock)
                self._sock = sock
            if self._closed:  # close() ran before this socket was there to shut down
                raise TransportError(f"{self} is closed")
            self._versions = self._api_versions(sock, deadline)
        except BaseException:
            self._sock = None
            sock.close()
            raise
        log.debug("%s: connected", self)
        return sock

    def _secured(self, tls: ssl.SSLContext, sock: socket.socket) -> ssl.SSLSocket:
        """``sock`` after the TLS handshake. A certificate the settings refuse (another CA,
        a name it does not list) stops the member: every broker of a cluster is set up once,
        so retrying cannot fix it (bootstrap went through a broker whose certificate passed:
        this one's differs). Any other failure (a broker restarting mid-handshake) is retried.

        Raises:
            TransportError: ``fatal`` with ``TlsError`` for a refused certificate.
        """
        try:
            return tls.wrap_socket(sock, server_hostname=self.host.rstrip("."))
        except ssl.SSLCertVerificationError as e:
            raise TransportError(
                f"{self}: TLS certificate not accepted ({e.verify_message}); "
                + certificate_advice(e),
                fatal=True,
                error_type=TlsError,
            ) from e

    def _connect(self, timeout_s: float) -> socket.socket:
        """A TCP connection to the broker within ``timeout_s``, given up as soon as close() is
        called (a black-holed address would otherwise hold close() for the whole timeout)."""
        end = time.monotonic() + timeout_s
        failure: OSError = TimeoutError(f"no connection within {timeout_s:.1f}s")
        for family, kind, proto, _, address in socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM
        ):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                code = sock.connect_ex(address)
                while code == errno.EINPROGRESS:
                    if self._closed:
                        raise TransportError(f"{self} is closed")
                    left = end - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no connection within {timeout_s:.1f}s")
                    if _ready(sock, select.POLLOUT, min(left, _CLOSE_CHECK_S)):
                        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code != 0:
                    raise OSError(code, os.strerror(code))
                sock.setblocking(True)
                return sock
            except OSError as e:
                sock.close()
                failure = e  # the next address, if any
            except BaseException:
                sock.close()
                raise
        raise failure

    def _api_versions(self, sock: socket.socket, deadline: float) -> BrokerVersionData:
        name, version = self._settings.client_software
        for api_version in (_API_VERSIONS_FIRST, 0):
            request = ApiVersionsRequest(
                version=api_version, client_software_name=name, client_software_version=version
            )
            response = self._round_trip(sock, request, deadline)
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
                continue
            if response.error_code != ErrorCode.NONE:
                raise TransportError(f"{self}: ApiVersions returned error {response.error_code}")
            return BrokerVersionData(
                api_versions={v.api_key: (v.min_version, v.max_version) for v in response.api_keys}
            )
        raise TransportError(f"{self}: the broker answers no ApiVersions version")

    def _round_trip(self, sock: socket.socket, request: Any, deadline: float) -> Any:
        return self._answer(sock, request, self._send(sock, request, deadline), deadline)

    def _send(self, sock: socket.socket, request: Any, deadline: float) -> int:
        """Write ``request`` to ``sock``; its correlation id."""
        correlation_id, framed = self._framed(request)
        _set_timeout(sock, deadline)
        sock.sendall(framed)
        return correlation_id

    def _choose_version(self, request: Any) -> None:
        if request.API_VERSION is None:
            assert self._versions is not None
            # Raises IncompatibleBrokerVersion (a KafkaError) if no version fits: the caller's.
            request.API_VERSION = self._versions.api_version(request)

    def _framed(self, request: Any) -> tuple[int, bytes]:
        """The request's correlation id and its bytes on the wire."""
        self._choose_version(request)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        request.with_header(correlation_id=correlation_id, client_id=self._settings.client_id)
        framed = request.encode(header=True, framed=True)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: sent %s %d", self, type(request).__name__, correlation_id)
        return correlation_id, framed

    def _answer(
        self, sock: socket.socket, request: Any, correlation_id: int, deadline: float
    ) -> Any:
        size = struct.unpack(">i", self._read(sock, 4, deadline))[0]
        if not 4 <= size <= self._settings.max_response_bytes:
            limit = self._settings.max_response_bytes
            raise ResponseTooLargeError(f"{self}: a response of {size} bytes", size, limit)
        payload = self._read(sock, size, deadline)
        answered = struct.unpack_from(">i", payload)[0]
        if answered != correlation_id:
            raise TransportError(
                f"{self}: answer to request {answered} where {correlation_id} was expected"
            )
        try:
            response = request.header.get_response_class().decode(payload, header=True)
        except Exception as e:  # kafka-python's decoders raise struct.error, ValueError, ...
            raise TransportError(
                f"{self}: unreadable answer to {type(request).__name__}: {e!r}"
            ) from e
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: answered %d", self, correlation_id)
        return response

    def _read(self, sock: socket.socket, size: int, deadline: float) -> bytes:
        """``size`` bytes from the connection. Each read asks for more than it needs, so a
        small answer arrives in one call, size and body (each call lets other threads take
        the interpreter, which a process of many members pays for); what it read beyond
        ``size`` stays buffered for the next read."""
        buffered = self._buffered
        while len(buffered) < size:
            _set_timeout(sock, deadline)
            chunk = sock.recv(min(max(size - len(buffered), _READ_AHEAD_BYTES), 1 << 20))
            if not chunk:
                raise TransportError(f"{self}: closed by the broker or by this member")
            buffered += chunk
        data = bytes(buffered[:size])
        del buffered[:size]
        return data

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        self._versions = None
        self._buffered.clear()
        if sock is not None:
            sock.close()


class Outstanding:
    """A request sent by :meth:`DirectConnection.send_ahead` whose answer is not read yet;
    its connection stays reserved until :meth:`answer` or :meth:`abandon`."""

    def __init__(
        self,
        connection: DirectConnection,
        sock: socket.socket,
        request: Any,
        correlation_id: int,
        deadline: float,
    ) -> None:
        self._connection = connection
        self._sock = sock
        self._request = request
        self._correlation_id = correlation_id
        self._deadline = deadline
        self._timeout_s = max(0.0, deadline - time.monotonic())
        self._open = True

    def ready(self, timeout_s: float) -> bool:
        """Whether :meth:`answer` would not wait: the answer has begun to arrive, or its
        time is up, or the connection failed (then :meth:`answer` raises at once). Waits up
        to ``timeout_s`` for that."""
        if self._arrived(0.0):
            return True
        left = self._deadline - time.monotonic()
        return (
            left <= 0 or self._arrived(min(timeout_s, left)) or time.monotonic() >= self._deadline
        )

    def answer(self) -> Any:
        """The decoded answer, waiting for it until the request's deadline; the connection
        is free again after. An answer that began to arrive is read whole, however late it
        is taken (the application may work longer than the request's timeout before the
        next poll takes it).

        Raises:
            TransportError: no answer in time, or the connection failed (it is closed).
        """
        if not self._open:
            raise TransportError(f"{type(self._request).__name__}: its answer was read already")
        connection = self._connection
        deadline = self._deadline
        if self._arrived(0.0):
            deadline = max(deadline, time.monotonic() + self._timeout_s)
        try:
            return connection._or_drop(
                self._request,
                lambda: connection._answer(
                    self._sock, self._request, self._correlation_id, deadline
                ),
            )
        finally:
            self._release()

    def _arrived(self, timeout_s: float) -> bool:
        """Whether bytes of the answer (or the connection's end) are here, waiting up to
        ``timeout_s``."""
        if not self._open or self._connection._buffered:
            return True
        sock = self._sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True  # decrypted already, invisible to poll
        try:
            return _ready(sock, select.POLLIN, max(0.0, timeout_s))
        except (OSError, ValueError):
            return True

    def abandon(self) -> None:
        """Give up on the answer: the connection is closed (so that the answer can never be
        taken for another request's) and free again."""
        if self._open:
            self._connection._drop()
            self._release()

    def _release(self) -> None:
        if self._open:
            self._open = False
            self._connection._lock.release()


def certificate_advice(e: ssl.SSLCertVerificationError) -> str:
    """Which setting to change for a broker certificate that TLS refused."""
    if "match" in str(e.verify_message).lower() or "hostname" in str(e).lower():
        return "connect by a name the certificate lists (its subject alternative names)"
    return "set ssl_cafile to the CA that signed the broker's certificate"


def _idle_and_open(sock: socket.socket) -> bool:
    """Whether nothing arrived on a connection between requests: an end of stream (the broker
    closed it) or stray bytes (nothing is owed to this side) make it unusable."""
    try:
        return not _ready(sock, select.POLLIN, 0.0)
    except (OSError, ValueError):
        return False


def _ready(sock: socket.socket, events: int, timeout_s: float) -> bool:
    # poll, not select: select refuses descriptors above 1023, which a process with many
    # members and files reaches.
    poller = select.poll()
    poller.register(sock, events)
    return bool(poller.poll(timeout_s * 1000))


def _set_timeout(sock: socket.socket, deadline: float) -> None:
    """Let ``sock``'s reads and writes wait until about ``deadline``. A socket that has about
    that already keeps it: each change is a system call. About: at most 10 ms less (a
    JoinGroup the broker holds for the whole rebalance timeout must not give up early) and a
    tenth more."""
    remaining = _remaining(deadline)
    current = sock.gettimeout()
    if current is None or not remaining - 0.01 <= current <= remaining * 1.1 + 0.01:
        sock.settimeout(remaining)


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("timed out")
    return remaining
