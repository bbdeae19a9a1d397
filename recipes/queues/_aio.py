"""The share consumer for asyncio services: awaitable start, poll, acknowledge, commit and
close over :class:`ShareConsumer`, through the bridge every recipe's asyncio face shares
(``recipes/_aio.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coordination.errors import CoordinatorStateError
from coordination.share_group import AcknowledgeType

from .._aio import AsyncFace, LoopBridge
from ._consumer import ShareConsumer, ShareMetrics, ShareRecord, TopicPartition
from ._errors import AcknowledgementError

T = TypeVar("T")

OnAcknowledgedAsync = Callable[
    [TopicPartition, tuple[int, ...], "AcknowledgementError | None"], Awaitable[None] | None
]
"""``on_acknowledged(partition, offsets, error)`` of :class:`AsyncShareConsumer`: a coroutine
function or a plain one, run on the event loop."""


# True in on_acknowledged (and what it awaits): the consumer's thread waits for it, so a call
# of the consumer awaited there would queue behind that wait and never run.
_IN_ON_ACKNOWLEDGED: ContextVar[bool] = ContextVar("in_on_acknowledged", default=False)


def _marked(callback: OnAcknowledgedAsync) -> Callable[..., Awaitable[None]]:
    async def on_acknowledged(*args: Any) -> None:
        _IN_ON_ACKNOWLEDGED.set(True)
        result = callback(*args)
        if inspect.isawaitable(result):
            await result

    return on_acknowledged


@dataclass(slots=True)
class _Delivery:
    """The records one :meth:`AsyncShareConsumer.poll` took, and whether its caller gave up
    waiting for them (then they are kept for the next poll)."""

    records: list[ShareRecord] = field(default_factory=list)
    abandoned: bool = False


class AsyncShareConsumer(AsyncFace):
    """:class:`ShareConsumer` with an asyncio face.

    Example:
        async with AsyncShareConsumer("jobs", topics=["jobs"],
                                      bootstrap_servers="localhost:9092") as consumer:
            while True:
                for record in await consumer.poll(timeout_ms=1000):
                    await handle(record.value)
                    await consumer.acknowledge(record, AcknowledgeType.ACCEPT)

    Args:
        group_id, topics and every other keyword: as for :class:`ShareConsumer`, except
        that ``on_acknowledged`` may be a coroutine function; it runs on the event loop that
        called :meth:`start`, while the consumer's thread waits for it: it must not await
        this consumer's calls (they run on that thread; :class:`CoordinatorStateError` says
        so instead of waiting for ever).

    Cancellation: a :meth:`poll` cancelled (or timed out by ``asyncio.timeout``) loses no
    record: what it acquired after it was cancelled stays held by this consumer and the
    next :meth:`poll` returns it (before acquiring more), or :meth:`close` releases it. A
    cancelled :meth:`acknowledge` or :meth:`commit` may still take effect (it was under way
    on the consumer's thread); their outcome reaches ``on_acknowledged`` and the hooks.

    Threads:
        The consumer, which is not thread-safe, runs on one thread of its own: poll,
        acknowledge, commit and close run there in the order they were called, so an
        ``acknowledge`` waits for a poll in flight (at most its ``timeout_ms``); acknowledge
        from the task that polls, between polls, and nothing waits. Joining
        (:meth:`start`) and :meth:`assignment` run on worker threads. The loop never
        blocks. Hooks run on the consumer's thread, as they do for :class:`ShareConsumer`.
    """

    def __init__(
        self,
        group_id: str,
        *,
        on_acknowledged: OnAcknowledgedAsync | None = None,
        **kwargs: Any,
    ) -> None:
        # The bridge waits on the consumer's clock (a simulated one runs this face too).
        self._bridge = LoopBridge(kwargs.get("clock"))
        self._consumer_thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"async-share-consumer|{group_id}"
        )
        # Guards _undelivered and each _Delivery: taken by the loop and the consumer's
        # thread, never across a request.
        self._lock = threading.Lock()
        self._undelivered: list[ShareRecord] = []
        self._is_closed = False
        self.consumer = ShareConsumer(
            group_id,
            on_acknowledged=None
            if on_acknowledged is None
            else self._bridge.wrap(_marked(on_acknowledged)),
            **kwargs,
        )
        # start and close are this face's own (close runs after the calls made before it,
        # on the consumer's thread), so the face needs no _recipe.

    # ------------------------------------------------------------------ lifecycle

    async def start(self, timeout: float | None = None) -> None:
        """Join the share group and wait for the assignment (the first poll does it too).

        Raises:
            ShareGroupsUnsupportedError: the broker has no share groups.
            CoordinationTimeoutError: not joined within ``timeout``.
            FatalBrokerError: another error a person must fix.
        """
        self._bridge.bind()
        await asyncio.to_thread(self.consumer.start, timeout)

    async def close(self, timeout: float = 30.0) -> None:
        """As :meth:`ShareConsumer.close`, after the calls already made: send the
        acknowledgements made so far, release every other record held (those a cancelled
        poll kept included), leave the group. Their outcome goes to ``on_acknowledged`` and
        the hooks (a failure nobody listens to is logged). Idempotent."""
        self._refuse_in_on_acknowledged()
        if self._is_closed:
            return
        self._is_closed = True
        self._bind_once()
        try:
            await self._on_consumer_thread(self.consumer.close, timeout)
        finally:
            with self._lock:
                self._undelivered.clear()  # released by the close
            self._consumer_thread.shutdown(wait=False)

    # ------------------------------------------------------------------ records

    async def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """As :meth:`ShareConsumer.poll`: records acquired for this consumer, waiting up to
        ``timeout_ms`` for some; sends the acknowledgements made since the last poll. If an
        earlier poll was cancelled after it acquired records, returns those (at once).

        Raises:
            ShareGroupsUnsupportedError: the broker has no share groups.
            FatalBrokerError: the member stopped on an error a person must fix.
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        self._bind_once()
        delivery = _Delivery()
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._consumer_thread, self._poll, timeout_ms, delivery
            )
        except BaseException:
            # Cancelled (the poll may have run, or still run, on the consumer's thread):
            # what it took is kept for the next poll.
            with self._lock:
                delivery.abandoned = True
                self._undelivered[:0] = delivery.records
                delivery.records = []
            raise

    def _poll(self, timeout_ms: int, delivery: _Delivery) -> list[ShareRecord]:
        """On the consumer's thread. Records kept from a cancelled poll go first, without a
        poll of the consumer: in implicit mode that poll would accept them unseen."""
        with self._lock:
            records, self._undelivered = self._undelivered, []
        if not records:
            records = self.consumer.poll(timeout_ms)
        with self._lock:
            if delivery.abandoned:
                self._undelivered.extend(records)
                return []
            delivery.records = records
        return records

    async def __aiter__(self) -> AsyncGenerator[ShareRecord, None]:
        """Records one by one, as :meth:`poll` returns them, until :meth:`close`. Leaving the
        loop early keeps the records of the last poll not handed out yet for the next
        poll."""
        while True:
            try:
                records = await self.poll()
            except CoordinatorStateError:
                return  # closed
            handed = 0
            try:
                for record in records:
                    handed += 1
                    yield record
            finally:
                with self._lock:
                    self._undelivered[:0] = records[handed:]

    async def acknowledge(
        self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """As :meth:`ShareConsumer.acknowledge` (sent with the next poll or commit); waits
        for a poll in flight.

        Raises:
            CoordinatorStateError: implicit mode, the record is not held by this consumer,
                or the consumer is closed.
            ConfigurationError: ``ack_type`` is not ACCEPT, RELEASE, REJECT or RENEW.
        """
        self._check_open()
        await self._on_consumer_thread(self.consumer.acknowledge, record, ack_type)

    async def commit(self) -> dict[TopicPartition, AcknowledgementError | None]:
        """As :meth:`ShareConsumer.commit`: send the acknowledgements now and return their
        outcome per partition (None: took effect).

        Raises:
            FatalBrokerError: the member stopped on an error a person must fix.
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        self._bind_once()
        return await self._on_consumer_thread(self.consumer.commit)

    async def lag(self, timeout: float | None = None) -> dict[TopicPartition, int]:
        """As :meth:`ShareConsumer.lag`: ask the group's coordinator now, on the consumer's
        thread (after a poll in flight); the loop runs meanwhile.

        Raises:
            TransportError: no answer, or not joined yet: ask again later.
            BrokerError: the broker refused (e.g. no DESCRIBE on the group).
            CoordinatorStateError: the consumer is closed.
        """
        self._check_open()
        return await self._on_consumer_thread(self.consumer.lag, timeout)

    # ------------------------------------------------------------------ the member's view

    @property
    def group_id(self) -> str:
        return self.consumer.group_id

    @property
    def member_id(self) -> str:
        return self.consumer.member_id

    async def assignment(self) -> frozenset[TopicPartition]:
        """As :meth:`ShareConsumer.assignment` (the topics' names may be looked up from the
        cluster, on a worker thread)."""
        return await asyncio.to_thread(self.consumer.assignment)

    def metrics(self) -> ShareMetrics:
        """As :meth:`ShareConsumer.metrics` (a copy of counters; no request is sent)."""
        return self.consumer.metrics()

    def __repr__(self) -> str:
        return f"<AsyncShareConsumer group={self.group_id!r} member={self.member_id!r}>"

    # ------------------------------------------------------------------ internals

    async def _on_consumer_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._consumer_thread, call, *args)

    def _bind_once(self) -> None:
        """The loop ``on_acknowledged`` runs on, for a consumer used without :meth:`start`."""
        if self._bridge.loop is None:
            self._bridge.bind()

    @staticmethod
    def _refuse_in_on_acknowledged() -> None:
        if _IN_ON_ACKNOWLEDGED.get():
            raise CoordinatorStateError(
                "the share consumer's calls cannot be awaited from on_acknowledged: its thread "
                "waits for on_acknowledged to return"
            )

    def _check_open(self) -> None:
        self._refuse_in_on_acknowledged()
        if self._is_closed:
            raise CoordinatorStateError(f"share group {self.group_id!r}: the consumer is closed")
