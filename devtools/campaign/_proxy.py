"""Network faults without kernel help: a TCP proxy in front of each broker's client port.

The brokers advertise the proxy's port as their client listener (see ``_cluster.py``), so
every client connection to a broker goes through its proxy, while the brokers' own
replication and controller traffic uses other listeners, directly. A proxy can

* ``blackhole``: accept, read nothing more, forward nothing (a partition: the peers see a
  silent connection; what was in flight is delivered when it heals, as TCP would);
* ``delay``: forward each chunk only after ``delay`` seconds;
* ``cut``: reset every connection and every new one (a broker whose port refuses).

All proxies share one asyncio loop on a daemon thread; the campaign steers them with
:meth:`ProxyFleet.set` and :meth:`ProxyFleet.heal` from its own threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Literal

Mode = Literal["pass", "blackhole", "delay", "cut"]
_CHUNK = 65536


class _Proxy:
    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.mode: Mode = "pass"
        self.delay = 0.0
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.mode == "cut":
            client_w.transport.abort()
            return
        self.writers.add(client_w)
        try:
            await self.flowing.wait()  # a black hole accepts, then says nothing
            try:
                broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                client_w.transport.abort()  # the broker is down: refuse, as it would
                return
            self.writers.add(broker_w)
            try:
                await asyncio.gather(self._pump(client_r, broker_w), self._pump(broker_r, client_w))
            finally:
                self.writers.discard(broker_w)
        finally:
            self.writers.discard(client_w)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await source.read(_CHUNK)
                if not data:
                    break
                await self.flowing.wait()
                if self.delay > 0:
                    await asyncio.sleep(self.delay)
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # Either side ending ends the pair, as one TCP connection would.
            sink.transport.abort()

    def apply(self, mode: Mode, delay: float) -> None:
        self.mode = mode
        self.delay = delay if mode == "delay" else 0.0
        if mode == "blackhole":
            self.flowing.clear()
        else:
            self.flowing.set()
        if mode == "cut":
            for writer in list(self.writers):
                writer.transport.abort()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        self.flowing.set()
        for writer in list(self.writers):
            writer.transport.abort()


class ProxyFleet:
    """One proxy per broker: ``ports`` maps a node id to (listen port, broker port)."""

    def __init__(self, ports: Mapping[int, tuple[int, int]]) -> None:
        self._ports = dict(ports)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxies", daemon=True)
        self._proxies: dict[int, _Proxy] = {}

    def start(self) -> None:
        self._thread.start()
        self._call(self._start()).result(30)

    async def _start(self) -> None:
        for node, (listen, target) in self._ports.items():
            proxy = _Proxy(listen, target)
            await proxy.start()
            self._proxies[node] = proxy

    def _call(self, coroutine: object) -> Future[None]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]

    def set(self, node: int, mode: Mode, delay: float = 0.0) -> None:
        """Put broker ``node``'s proxy in ``mode`` (``delay`` seconds for ``"delay"``)."""
        proxy = self._proxies[node]
        self._loop.call_soon_threadsafe(proxy.apply, mode, delay)

    def heal(self, node: int) -> None:
        self.set(node, "pass")

    def mode_of(self, node: int) -> Mode:
        return self._proxies[node].mode

    def stop(self) -> None:
        """Close every proxy and connection, end the loop's thread and close the loop."""
        if self._thread.is_alive():

            async def close_all() -> None:
                for proxy in self._proxies.values():
                    await proxy.close()
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)

            with contextlib.suppress(Exception):
                self._call(close_all()).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
