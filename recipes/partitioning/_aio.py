"""The consumer for asyncio services, in the spirit of aiokafka's ``AIOKafkaConsumer``:
awaitable start, close, ``getmany``, ``getone`` and ``commit``, ``async for``, and a
rebalance listener whose callbacks may be coroutines (see ``recipes/_aio.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from coordination import OffsetAndMetadata
from coordination.errors import CoordinatorStateError

from .._aio import AsyncFace, LoopBridge
from ._consumer import Consumer, ConsumerMetrics, _Delivery
from ._listener import RebalanceListener
from .protocol import TopicPartition


class AsyncRebalanceListener:
    """:class:`RebalanceListener` for :class:`AsyncConsumer`: the same callbacks and the same
    guarantees, and each may be a coroutine. Override what you need.

    Example:
        class CommitOnRevoke(AsyncRebalanceListener):
            def __init__(self, consumer):
                self.consumer = consumer

            async def on_partitions_revoked(self, partitions):
                await self.consumer.commit()   # the partitions are still owned meanwhile
    """

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions are about to be taken away; commit what was processed."""

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions are now this member's (may be empty)."""

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions were lost with the membership; do not commit them."""
        await self.on_partitions_revoked(partitions)


class AsyncConsumer(AsyncFace):
    """:class:`Consumer` with an asyncio face.

    Example:
        async with AsyncConsumer("orders-workers", topics=["orders"],
                                 bootstrap_servers="kafka:9092") as consumer:
            async for record in consumer:
                await handle(record)
                await consumer.commit()

    Args:
        group_id, topics and every other keyword: as for :class:`Consumer`, except that
        ``listener`` is an :class:`AsyncRebalanceListener` (or a plain
        :class:`RebalanceListener`); its callbacks run on the event loop that calls
        :meth:`start`, while the group's membership thread waits for them, so the
        partitions are still owned (and committable, with ``await commit()``) during
        ``on_partitions_revoked`` and no record of an added partition is returned before
        ``on_partitions_assigned`` has finished.

    Guarantees (those of :meth:`Consumer.poll`, kept by the consumer underneath):
        a record is handed out only while its partition is owned and unpaused, at its
        position; the position (what :meth:`commit` commits) moves past a record only when
        :meth:`getone` or :meth:`getmany` returns it, so committing after each record loses
        nothing mid-batch; a call cancelled after its fetch ran gives its records back;
        :meth:`pause`, :meth:`seek` and a revoked or lost partition take effect on the
        next call.

    Threads:
        Fetching runs on one thread of its own (one :meth:`getmany` at a time, in order);
        :meth:`commit`, :meth:`seek` and the other calls that ask the brokers run on worker
        threads, between the fetcher's short slices. The loop never blocks: the calls that
        answer at once never wait for the consumer's lock.
    """

    def __init__(
        self,
        group_id: str,
        *,
        listener: AsyncRebalanceListener | RebalanceListener | None = None,
        **kwargs: Any,
    ) -> None:
        # The bridge waits on the consumer's clock (a simulated one runs this face too).
        self._bridge = LoopBridge(kwargs.get("clock"))
        # One thread fetches, so that getmany calls never overlap (the consumer's rule:
        # one thread polls).
        self._fetching = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"async-consumer-fetch|{group_id}"
        )
        self._is_closed = False
        self.consumer = Consumer(group_id, listener=_OnTheLoop(self._bridge, listener), **kwargs)
        self._recipe = self.consumer

    # ------------------------------------------------------------------ lifecycle

    async def close(self, timeout: float = 30.0) -> None:
        """Leave the group (the listener's ``on_partitions_revoked`` runs on the loop) and
        stop fetching."""
        await super().close(timeout)

    def _closed(self) -> None:
        self._is_closed = True
        self._fetching.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ records

    async def getmany(
        self, timeout_ms: int = 1000, *, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Records of owned, unpaused partitions, waited for up to ``timeout_ms`` (as
        :meth:`Consumer.poll`, with the same rules: each partition's records from its
        position on, none of a paused, revoked or lost partition).

        The positions (what :meth:`commit` commits) move past the records only once this
        call returns them. If it is cancelled, even after the fetch thread took them, no
        record is lost: the next call returns them again.

        Args:
            timeout_ms: how long to wait when no record is ready.
            max_records: return at most this many; the others stay fetched, and are not
                committed, until a call returns them.

        Raises:
            CoordinatorStateError: the consumer was closed.
        """
        if self._is_closed:
            raise CoordinatorStateError(
                f"consumer of group {self.consumer.group.group_id!r} is closed"
            )
        delivery = _Delivery()
        try:
            records = await asyncio.get_running_loop().run_in_executor(
                self._fetching, self.consumer._poll, timeout_ms, max_records, delivery
            )
        except BaseException:
            # Cancelled (the poll may have run, or still be running, on the fetch thread),
            # or the poll failed: whatever it took is given back before the next poll,
            # commit or position reads the positions. Never waits for the lock.
            self.consumer._deliver(delivery, handed=False)
            raise
        # Revoked or lost while the records travelled to the loop: not handed out (their
        # positions go with the partitions).
        owned, withdrawn = self.consumer.assignment(), self.consumer._withdrawn
        for tp in [tp for tp in records if tp not in owned or tp in withdrawn]:
            del records[tp]
            delivery.spans.pop(tp, None)
        self.consumer._deliver(delivery, handed=True)
        return records

    async def getone(self) -> Any:
        """The next record (waits as long as it takes); the position moves past it only
        now, so :meth:`commit` covers exactly the records returned so far.

        Raises:
            CoordinatorStateError: the consumer was closed.
        """
        while True:
            for records in (await self.getmany(max_records=1)).values():
                return records[0]

    async def __aiter__(self) -> AsyncIterator[Any]:
        """Records one by one (as :meth:`getone`), until :meth:`close`."""
        while True:
            try:
                record = await self.getone()
            except CoordinatorStateError:
                return  # closed
            yield record

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """As :meth:`Consumer.commit`: fenced by this member's generation."""
        await asyncio.to_thread(self.consumer.commit, offsets, timeout=timeout)

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """As :meth:`Consumer.committed`."""
        return await asyncio.to_thread(self.consumer.committed, list(partitions))

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float = 30.0
    ) -> dict[TopicPartition, int]:
        """As :meth:`Consumer.end_offsets`."""
        return await asyncio.to_thread(self.consumer.end_offsets, list(partitions), timeout)

    async def seek(self, partition: TopicPartition, offset: int) -> None:
        """As :meth:`Consumer.seek`."""
        await asyncio.to_thread(self.consumer.seek, partition, offset)

    # ------------------------------------------------------------------ no waiting: on the loop

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this consumer owns now."""
        return self.consumer.assignment()

    # These never wait for the consumer's lock (a commit holds it for a round trip).

    def position(self, partition: TopicPartition) -> int | None:
        """As :meth:`Consumer.position`: the offset after the last record handed out."""
        return self.consumer._position_now(partition)

    def pause(self, *partitions: TopicPartition) -> None:
        """As :meth:`Consumer.pause`: no record of these is handed out from the next
        :meth:`getone` or :meth:`getmany` on."""
        self.consumer._pause_soon(partitions, pause=True)

    def resume(self, *partitions: TopicPartition) -> None:
        """As :meth:`Consumer.resume`: from the next call on, from the position."""
        self.consumer._pause_soon(partitions, pause=False)

    def paused(self) -> frozenset[TopicPartition]:
        """As :meth:`Consumer.paused` (pauses asked for included)."""
        return self.consumer._paused_now()

    def metrics(self) -> ConsumerMetrics:
        """As :meth:`Consumer.metrics` (no request is sent); if the consumer is busy (a
        commit, a fetch slice), the lag is computed from the ends last seen."""
        return self.consumer._metrics_now()


class _OnTheLoop(RebalanceListener):
    """The threaded consumer's listener: runs the user's callbacks on the loop and waits."""

    def __init__(
        self, bridge: LoopBridge, user: AsyncRebalanceListener | RebalanceListener | None
    ) -> None:
        self._bridge = bridge
        self._user = user

    def _run(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        if self._user is not None:
            self._bridge.run(getattr(self._user, name), partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._run("on_partitions_revoked", partitions)

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._run("on_partitions_assigned", partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._run("on_partitions_lost", partitions)
