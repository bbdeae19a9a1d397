"""A leader's fetch connection: one Fetch in flight, sent by begin() and read by finish().

A :class:`~coordination._transport.link.DirectConnection` whose exchange is split in two, so
that the caller's thread can send a long-polling Fetch, return to its application, and read
the answer on a later poll (or wait for several leaders' answers at once with ``poll(2)``).
No thread of its own: the fetcher's caller serialises every call.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import kafka.errors as kafka_errors

from .._protocol import fetch_codec as codec
from .._transport.link import DirectConnection, _set_timeout
from ..transport import TransportError


class FetchFrame:
    """A Fetch request in the shape DirectConnection versions, frames and reads a request
    (kafka-python's message interface: ``API_KEY``, version bounds, ``with_header``,
    ``encode``, and a header whose response class decodes the answer)."""

    API_KEY = codec.FETCH_KEY
    name = "Fetch"
    min_version = codec.MIN_VERSION
    max_version = codec.MAX_VERSION
    _min_version: int | None = None
    _max_version: int | None = None

    def __init__(self, request: codec.FetchRequest) -> None:
        self.request = request
        self.API_VERSION: int | None = None
        self.header: _Header | None = None

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str = "") -> None:
        self.header = _Header(correlation_id, client_id, self)

    def encode(self, header: bool = False, framed: bool = False) -> bytes:
        assert self.API_VERSION is not None and self.header is not None
        data = codec.encode_request(
            self.request, self.API_VERSION, self.header.correlation_id, self.header.client_id
        )
        return struct.pack(">i", len(data)) + data if framed else data


class _Header:
    def __init__(self, correlation_id: int, client_id: str, frame: FetchFrame) -> None:
        self.correlation_id = correlation_id
        self.client_id = client_id
        self._frame = frame

    def get_response_class(self) -> _Header:
        return self

    def decode(self, payload: bytes, header: bool = False) -> codec.FetchResponse:
        assert self._frame.API_VERSION is not None
        return codec.decode_response(payload, self._frame.API_VERSION)[1]


class FetchLink(DirectConnection):
    """A leader's fetch connection. ``sent_at`` is when the Fetch in flight was sent (None:
    none is)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inflight: tuple[FetchFrame, int] | None = None
        self.sent_at: float | None = None

    @property
    def in_flight(self) -> bool:
        return self._inflight is not None

    def begin(self, request: codec.FetchRequest, timeout_s: float) -> None:
        """Send ``request`` (connecting first if need be).

        Raises:
            TransportError: it could not be sent; the connection is closed.
        """
        assert self._inflight is None, "one Fetch in flight per connection"
        deadline = time.monotonic() + timeout_s
        frame = FetchFrame(request)
        try:
            sock = self._connected(deadline)
            correlation_id, framed = self._framed(frame)
            _set_timeout(sock, deadline)
            sock.sendall(framed)
        except TransportError:
            self._drop()
            raise
        except kafka_errors.IncompatibleBrokerVersion as e:
            self._drop()
            raise TransportError(
                f"{self}: the broker answers no Fetch version from {codec.MIN_VERSION} "
                f"(Kafka 2.7) to {codec.MAX_VERSION}, which the lean fetcher speaks; use the "
                "default fetcher",
                fatal=True,
            ) from e
        except (OSError, ValueError, kafka_errors.KafkaError) as e:
            self._drop()
            raise TransportError(f"Fetch could not be sent on {self}: {e!r}") from e
        self._inflight = (frame, correlation_id)
        self.sent_at = time.monotonic()

    def fileno(self) -> int | None:
        """The socket to wait on for the answer (None: not connected)."""
        return None if self._sock is None else self._sock.fileno()

    def answer_buffered(self) -> bool:
        """Whether bytes of the answer were read already (then poll(2) would not see them)."""
        return bool(self._buffered)

    def finish(self, timeout_s: float) -> codec.FetchResponse:
        """The answer to the Fetch in flight, waiting up to ``timeout_s`` for the rest of it.

        Raises:
            TransportError: no whole answer in time, the connection failed, or the answer
                could not be decoded; the connection is closed.
        """
        assert self._inflight is not None and self._sock is not None
        frame, correlation_id = self._inflight
        self._inflight = None
        self.sent_at = None
        deadline = time.monotonic() + timeout_s
        try:
            response: codec.FetchResponse = self._answer(
                self._sock, frame, correlation_id, deadline
            )
        except TransportError:
            self._drop()
            raise
        except (OSError, ValueError) as e:
            self._drop()
            raise TransportError(f"Fetch got no answer on {self}: {e!r}") from e
        return response

    def abandon(self) -> None:
        """Forget the Fetch in flight: its answer would come before the next one's, so the
        connection is closed (the next begin() connects again)."""
        if self._inflight is not None:
            self._inflight = None
            self.sent_at = None
            self._drop()

    def close(self) -> None:
        self._inflight = None
        self.sent_at = None
        super().close()
