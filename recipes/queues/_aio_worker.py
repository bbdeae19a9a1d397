"""The share worker for asyncio services: ``async def`` handlers over a real
:class:`ShareWorker`, which keeps every guarantee of its own (outcomes, retries, dead
letters, lock renewals, the drain); only the handler runs on the event loop, as a task
that one thread of the worker starts and whose end it decides."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final

from coordination.clock import Thread
from coordination.errors import ConfigurationError, CoordinatorStateError

from .._aio import AsyncContext, LoopBridge
from ._consumer import ShareRecord
from ._errors import HandlerCancelledError
from ._worker import ShareWorker, WorkerMetrics, _retry_predicate

log = logging.getLogger("recipes.queues")

AsyncHandler = Callable[[ShareRecord], Awaitable[object]]
"""``async def handler(record)``: returning accepts the record, raising fails it."""

# How often the worker's handler thread, while coroutines run, looks whether the loop was
# closed (a closed loop never finishes them, and nothing else would tell the thread).
_LOOP_CHECK_S: Final = 0.5

# True inside a handler coroutine: close() there would wait for the drain, which waits for
# that very handler.
_IN_HANDLER: ContextVar[bool] = ContextVar("in_share_worker_handler", default=False)


class _HandlerCancelled(BaseException):
    """A handler coroutine cannot end: its loop closed under it, or the worker's own close
    cancelled it (past the drain timeout).

    Not an ``Exception``, on purpose: the ShareWorker treats it as it treats ``SystemExit``
    in a handler (RELEASE, never a retry's backoff, a dead-letter copy or an ACCEPT, and
    the worker stops): no handler can run on a closed loop, and a worker that is closed
    has released the record already. A coroutine cancelled by anyone else is its record's
    failure instead (:class:`HandlerCancelledError`).
    """


class AsyncShareWorker(AsyncContext):
    """:class:`ShareWorker` with an asyncio face: ``async def`` handlers, run on the event
    loop, their records acknowledged by their outcome exactly as the ShareWorker does.

    Example:
        import asyncio
        from recipes.queues import AsyncShareWorker, ShareRecord

        async def handle(record: ShareRecord) -> None:
            await send_email(record.value)  # raise to fail the record

        async def main() -> None:
            async with AsyncShareWorker(
                "emails", topics=["emails"], handler=handle, concurrency=16,
                dead_letter_topic="emails.dlq", bootstrap_servers="localhost:9092",
            ) as worker:
                await worker.run()  # until stop() or the task is cancelled; then drains

        asyncio.run(main())

    How it works:
        A real :class:`ShareWorker` runs underneath, with its poll thread and one handler
        thread, whatever ``concurrency`` is. That thread starts a task on the loop for
        each record it takes (at most ``concurrency`` at once) and does not wait for it;
        what the coroutine returns or raises is decided by the ShareWorker as a handler's
        outcome, so the acknowledgements, retries, dead-letter copies, lock renewals and
        the drain are the ShareWorker's, unchanged. A thousand concurrent handlers are a
        thousand tasks, not a thousand threads. Dead-letter copies are made on the
        handler thread, one at a time.

    Cancellation:
        Cancelling the task that awaits :meth:`run` drains as :meth:`stop` does (records not
        started are released at once, running handlers get ``drain_timeout_ms``); ``run``
        waits for the drain and the consumer's close (a second cancellation does not cut it
        short), then raises ``CancelledError``. A handler coroutine still running after
        ``drain_timeout_ms`` has its record released by the consumer's close; the
        coroutine is then cancelled, and :meth:`close` waits for it to end. A handler
        coroutine cancelled by anyone else (a watchdog's ``task.cancel()``, ``asyncio.run``
        cancelling every task at its end) has failed its record with
        :class:`HandlerCancelledError`, which is always retryable: the record is released
        after its backoff, or dead-lettered at its final delivery, and the worker goes on.
        A handler whose loop is closed under it has its record released, never accepted or
        dead-lettered, and the worker stops: :meth:`run` raises
        :class:`CoordinatorStateError`.

    Threads:
        The blocking calls (the drain, the consumer's close) run on threads; the loop never
        waits for the worker. Handlers must not block the loop themselves: a blocking
        handler holds every other coroutine up (use ``asyncio.to_thread`` in it, or
        :class:`ShareWorker`). A handler may call :meth:`stop`, never :meth:`close`.
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Any,
        handler: AsyncHandler,
        concurrency: int = 1,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start` (or :meth:`run`).

        Args:
            group_id: the share group (Kafka ``group.id``).
            topics: the topics to consume.
            handler: ``async def handler(record)``, run on the loop that called
                :meth:`start` (or :meth:`run`).
            concurrency: how many handler coroutines may run at once (default 1).
            **settings: as for :class:`ShareWorker` (``retry_on``, ``max_deliveries``,
                ``dead_letter_topic``, ``drain_timeout_ms``, ``bootstrap_servers``, ...);
                ``retry_on`` takes :class:`HandlerCancelledError` as retryable whatever
                it says.

        Raises:
            ConfigurationError: ``handler`` is not a coroutine function, or another invalid
                setting; the message names it.
        """
        if not _is_coroutine_function(handler):
            raise ConfigurationError(
                f"handler must be a coroutine function (async def handler(record)), got "
                f"{handler!r}: a plain function would block the event loop; use ShareWorker "
                "for it, or asyncio.to_thread inside an async handler"
            )
        self._handler = handler
        self._bridge = LoopBridge(settings.get("clock"))
        # The handler coroutines running now, for the cancellation after the drain (only
        # the loop touches it).
        self._running: set[asyncio.Task[object]] = set()
        self._started = False
        self._closing: asyncio.Future[None] | None = None
        # The worker's error, read once its close returned (before the cancellations that
        # follow it, which each report a cancelled handler to the closed worker).
        self._stopped_by: BaseException | None = None
        self._worker_closed = False
        # A cancellation says nothing about the record: retried, whatever retry_on says.
        is_retryable = _retry_predicate(settings.pop("retry_on", (Exception,)))
        settings["retry_on"] = lambda exc: (
            isinstance(exc, HandlerCancelledError) or is_retryable(exc)
        )
        self._worker = _LoopShareWorker(
            self,
            group_id,
            topics=topics,
            handler=_never_called,
            concurrency=concurrency,
            **settings,
        )

    # ------------------------------------------------------------------ public face

    @property
    def group_id(self) -> str:
        return self._worker.group_id

    @property
    def member_id(self) -> str:
        return self._worker.member_id

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the worker (a fatal broker error, a loop closed under a
        handler as :class:`CoordinatorStateError`), or None."""
        return _public(self._stopped_by if self._worker_closed else self._worker.error)

    @property
    def final_delivery(self) -> int:
        """As :attr:`ShareWorker.final_delivery`: the delivery from which a failure is
        final (``max_deliveries``, or the group's delivery limit at the broker once read, if
        that is lower)."""
        return self._worker.final_delivery

    def metrics(self) -> WorkerMetrics:
        """The ShareWorker's counts (a copy; answers at once)."""
        return self._worker.metrics()

    async def start(self) -> None:
        """Start the worker and return; its poll thread joins the group. The handlers run
        on this loop.

        Raises:
            CoordinatorStateError: started already, or closed.
        """
        if self._started or self._closing is not None:
            raise CoordinatorStateError("the worker was started already, or closed")
        self._bridge.bind()
        self._started = True
        self._worker.start()  # starts threads; returns at once

    async def run(self) -> None:
        """Start (unless started) and wait until :meth:`stop` or :meth:`close`, or the
        worker fails; return once it has drained and closed. Cancelling the task drains
        the same way before ``CancelledError`` comes out.

        Raises:
            ShareGroupsUnsupportedError, FatalBrokerError, ...: the error that stopped the
                worker's poll thread (after the drain).
            CoordinatorStateError: the loop was closed under a handler coroutine while
                the worker ran (the worker stopped; its record was released); or the worker
                was closed before it ran.
        """
        if not self._started:
            await self.start()
        try:
            await asyncio.to_thread(self._wait_for_worker)
        except asyncio.CancelledError:
            self._worker.stop()
            await self._closed_whatever_happens()
            raise
        await self._closed_whatever_happens()
        error = _public(self._stopped_by)
        if error is not None:
            raise error

    def stop(self) -> None:
        """Ask the worker to drain and close, and return at once. Safe from the loop, a
        handler, a signal handler or any thread."""
        self._worker.stop()

    async def close(self) -> None:
        """Stop, and wait (on a thread: the loop keeps running the handlers) for the drain
        and the consumer's close; then cancel the handler coroutines still running past
        ``drain_timeout_ms`` (their records were released) and wait for them to end.
        Idempotent. The error that stopped the worker is not raised here (see
        :attr:`error`).

        Raises:
            CoordinatorStateError: awaited inside a handler (it would wait for itself):
                call :meth:`stop` there.
        """
        if _IN_HANDLER.get():
            raise CoordinatorStateError(
                "close() was awaited in a handler, which the drain waits for: call stop()"
            )
        if self._closing is None:
            # The running loop, looked up before the coroutine is made: with none (a
            # coroutine driven from outside a loop, as a dying one is unwound) nothing is
            # made that would never run and warn from the garbage collector.
            self._closing = asyncio.get_running_loop().create_task(self._close_worker())
        await asyncio.shield(self._closing)

    def __repr__(self) -> str:
        return f"<AsyncShareWorker group={self.group_id!r}>"

    # ------------------------------------------------------------------ on the loop

    async def _close_worker(self) -> None:
        try:
            await asyncio.to_thread(self._worker.close)
        finally:
            self._stopped_by = self._worker.error
            self._worker_closed = True
            leftover = list(self._running)
            for task in leftover:
                task.cancel()
            if leftover:
                log.warning(
                    "share group %r: %d handler coroutines still running after the drain "
                    "timeout are cancelled; their records were released",
                    self.group_id,
                    len(leftover),
                )
                await asyncio.wait(leftover)

    async def _closed_whatever_happens(self) -> None:
        """Wait for :meth:`close` to the end even if cancelled again meanwhile (it takes
        at most ``drain_timeout_ms``, the consumer's close and the end of the handler
        coroutines cancelled after it); the last cancellation is raised after."""
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                await self.close()
            except asyncio.CancelledError as e:
                cancelled = e
                continue
            break
        if cancelled is not None:
            raise cancelled

    async def _call_handler(self, record: ShareRecord) -> object:
        _IN_HANDLER.set(True)
        task: asyncio.Task[object] = asyncio.current_task()  # type: ignore[assignment]
        self._running.add(task)
        try:
            return await self._handler(record)
        finally:
            self._running.discard(task)

    # ------------------------------------------------------------------ worker threads

    def _wait_for_worker(self) -> None:
        """Until the poll thread has drained and closed; its error is read at the close."""
        with contextlib.suppress(BaseException):  # read as self._worker.error by close()
            self._worker.run()

    def _begin(self, record: ShareRecord, done: Callable[[BaseException | None], None]) -> None:
        """Start the handler coroutine of ``record`` on the loop (from the worker's handler
        thread, without waiting); ``done`` gets its end: None if it returned, else what it
        raised, a cancellation as :class:`HandlerCancelledError`."""
        loop = self._bridge.loop
        if loop is None or loop.is_closed():
            done(_HandlerCancelled("the event loop is closed: the handler cannot run"))
            return

        def start() -> None:
            # The coroutine is made here, on the loop: a loop closed before it came to this
            # call leaves no coroutine that was never awaited (and warns so).
            task = loop.create_task(self._call_handler(record))
            task.add_done_callback(lambda task: done(self._raised(task, record)))

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError as e:  # closed meanwhile
            done(_HandlerCancelled(f"the event loop is closed: {e}"))

    def _raised(self, task: asyncio.Task[object], record: ShareRecord) -> BaseException | None:
        """What the handler task of ``record`` ended with, as its outcome."""
        if task.cancelled():
            if self._worker_closed:  # by close(), past the drain: the record was released
                return _HandlerCancelled("the handler coroutine was cancelled at the close")
            return HandlerCancelledError(
                f"the handler coroutine for {record.topic}[{record.partition}] offset "
                f"{record.offset} was cancelled"
            )
        # SystemExit or KeyboardInterrupt included: the ShareWorker stops on them.
        return task.exception()

    def _loop_gone(self) -> BaseException | None:
        """Why no running handler coroutine can end any more, or None."""
        loop = self._bridge.loop
        if loop is not None and loop.is_closed():
            return _HandlerCancelled("the event loop was closed while the handler ran")
        return None


class _LoopShareWorker(ShareWorker):
    """The ShareWorker under an AsyncShareWorker: one handler thread, which starts the
    handler coroutines on the face's loop (see ShareWorker._serve_started_handlers)."""

    def __init__(self, face: AsyncShareWorker, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self._face = face

    def _handler_threads(self, name: str) -> list[Thread]:
        face = self._face

        def serve() -> None:
            self._serve_started_handlers(face._begin, face._loop_gone, _LOOP_CHECK_S)

        return [self._clock.thread(serve, f"{name}-handlers")]


def _never_called(record: ShareRecord) -> None:
    raise AssertionError("the handlers of an AsyncShareWorker run on its loop")


def _public(error: BaseException | None) -> BaseException | None:
    if isinstance(error, _HandlerCancelled):
        public = CoordinatorStateError(
            f"the worker stopped: {error}; its record was released (was the event loop "
            "shutting down?)"
        )
        public.__cause__ = error
        return public
    return error


def _is_coroutine_function(handler: object) -> bool:
    while isinstance(handler, functools.partial):
        handler = handler.func
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    )
