"""The lean fetcher's engine: fetch sessions, positions and the error table, on the caller's
thread.

How a poll runs:
    1. Maintain: look leaders up again if they are stale (or ``metadata_max_age_ms`` old),
       and reset the positions that need it (ListOffsets).
    2. Take buffered records (at most ``max_poll_records``, partitions in turn), then send
       a Fetch to each leader that has none in flight, for its partitions with nothing
       buffered; return the records taken, if any.
    3. Else wait (``poll(2)`` on the leaders' sockets) for an answer, up to the timeout or
       the next backoff's end; read the answers that came, and go to 1. :meth:`wakeup`, from
       another thread, ends the wait and the poll at once (with nothing): a rebalance
       callback waiting for the consumer's lock gets it without waiting for an answer.

A Fetch stays in flight across polls (it long-polls ``fetch_max_wait_ms``): the next poll
reads its answer. One per leader, as Kafka's consumer sends them.

Staleness: each partition has a ``version``, bumped whenever its position is set from
outside (seek, reset, assignment). A Fetch remembers each partition's version and fetch
offset; its answer changes a partition only if both are unchanged, so an answer that
arrives after a seek can never move the position, backward or forward.

Errors: a partition's error (a refused read, a record its deserializer refuses, ...) is
kept for that partition and raised by the next poll() before it hands out anything, so
records taken from other partitions are returned first and never dropped; position()
raises only its partition's. Errors of the whole fetcher (a connection the settings cannot
make) are raised by the next poll() too.

Note on locking: none here. Every call comes from the consumer's threads under its lock,
but :meth:`FetchEngine.wakeup`, which only sets a flag and writes to a socket pair
(:class:`~coordination._fetch.wake.Waker`).
"""

from __future__ import annotations

import itertools
import logging
import select
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from .._protocol import fetch_codec as codec
from .._transport.link import ResponseTooLargeError
from ..errors import (
    ConfigurationError,
    CoordinationError,
    CoordinatorStateError,
    ProtocolCodecError,
    broker_error,
)
from ..transport import TransportError
from . import classify
from .classify import Outcome, SessionOutcome
from .cluster import EARLIEST, LATEST, Cluster, Partition
from .offsets import ask_offsets, gather_offsets
from .records import Raw, consumer_records, decode_partition
from .settings import FetchSettings
from .validate import UNTIL_SEEK, check_positions, unchecked
from .wake import Waker

log = logging.getLogger("coordination.fetching")

P = TypeVar("P", bound=tuple[str, int])
_MAX_EPOCH = 0x7FFFFFFF
# A session-state entry that matches no request: the partition is sent (or forgotten) again.
_RESEND = (-1, -1)


class Link(Protocol):
    """A leader's fetch connection (:class:`~coordination._fetch.link.FetchLink`)."""

    @property
    def in_flight(self) -> bool: ...

    sent_at: float | None

    def begin(self, request: codec.FetchRequest, timeout_s: float) -> None: ...

    def fileno(self) -> int | None: ...

    def answer_buffered(self) -> bool: ...

    def finish(self, timeout_s: float) -> codec.FetchResponse: ...

    def abandon(self) -> None: ...

    def close(self) -> None: ...


LinkFactory = Callable[[int, str, int], Link]


def _readable(fd: int | None) -> bool:
    """Whether bytes wait on ``fd`` (None: no socket)."""
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


@dataclass(slots=True)
class _Part:
    position: int | None = None  # the next offset poll() returns; None: to be reset
    fetch_offset: int | None = None  # the next offset to fetch (past what is buffered)
    version: int = 0
    buffered: list[Raw] = field(default_factory=list)
    taken: int = 0  # records of ``buffered`` handed out
    highwater: int | None = None
    retry_at: float = 0.0  # no fetch (nor reset) before (a backoff after an error)
    reset_failures: int = 0  # position lookups in a row that failed (their backoff grows)
    # KIP-320 (validate.py): the leader epoch of the last record fetched (None: unknown, or
    # sought since), and the leader epoch last fetched from or checked under; a higher one
    # in the metadata means a new leader, whose log is checked before it is fetched from.
    fetched_epoch: int | None = None
    leader_epoch: int | None = None


@dataclass(slots=True)
class _Session:
    """A leader's fetch session (KIP-227) as this side knows it."""

    id: int = 0  # with epoch 0: the broker closes this session as it opens the new one
    epoch: int = 0  # 0: the next request opens one (full); -1: none (full each time)
    # What the broker's session holds after the last request: partition -> (fetch offset,
    # leader epoch).
    sent: dict[Any, tuple[int, int]] = field(default_factory=dict)


class FetchEngine(Generic[P]):
    """The fetcher (see the module's docstring). Keys its answers by the partition objects
    :meth:`assign` was given."""

    def __init__(
        self,
        settings: FetchSettings,
        cluster: Cluster,
        links: LinkFactory,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._s = settings
        self._cluster = cluster
        self._make_link = links
        self._now = clock
        self._sleep = sleep
        self._parts: dict[P, _Part] = {}
        self._keys: dict[Partition, P] = {}  # (topic, partition) -> the assigned object
        self._links: dict[int, Link] = {}
        self._sessions: dict[int, _Session] = {}
        # Per leader: the Fetch in flight's partitions, each with its version and offset.
        self._inflight: dict[int, dict[P, tuple[int, int]]] = {}
        self._node_ready_at: dict[int, float] = {}  # throttled, or reconnecting
        self._node_failures: dict[int, int] = {}  # consecutive, for the reconnect backoff
        self._stale = True
        self._metadata_at = float("-inf")  # when the leaders were last looked up
        self._metadata_retry_at = 0.0
        self._metadata_misses = 0  # lookups in a row that failed or left a leader unknown
        # Raised by the next poll: the fetcher's own error, and each partition's.
        self._pending: CoordinationError | None = None
        self._errors: dict[P, Exception] = {}
        # Versions come from one counter: a partition assigned again never reuses one, so
        # an answer sent before it left can never match it.
        self._versions = itertools.count(1)
        self._turn = 0  # which partition hands out records first (fairness)
        self._fetch_turn = 0  # which partition a full Fetch lists first (fairness)
        self._timeout_s = settings.request_timeout_ms / 1000
        self._backoff_s = settings.retry_backoff_ms / 1000
        self._isolation = (
            codec.READ_COMMITTED if settings.read_committed else codec.READ_UNCOMMITTED
        )
        self._waker = Waker()  # polled with the leaders' sockets unless sleep is injected
        self._real_sleep = sleep is time.sleep

    # -- RecordFetcher ---------------------------------------------------------------------

    def assign(self, partitions: Sequence[P]) -> None:
        parts: dict[P, _Part] = {}
        for p in partitions:
            key = (p[0], p[1])
            old = self._keys.get(key)
            kept = self._parts.get(old) if old is not None else None
            parts[p] = kept if kept is not None else _Part(version=next(self._versions))
        self._parts = parts
        self._keys = {(p[0], p[1]): p for p in parts}
        self._errors = {p: e for p, e in self._errors.items() if p in parts}
        if any(key not in self._cluster.metadata.leaders for key in self._keys):
            self._stale = True

    def seek(self, partition: P, offset: int) -> None:
        part = self._parts[partition]
        if (
            part.position == offset
            and part.retry_at < UNTIL_SEEK
            and (part.taken < len(part.buffered) or part.fetch_offset == offset)
        ):
            return  # already there: what is buffered or in flight is still good
        self._errors.pop(partition, None)
        self._set_position(part, offset)

    def position(self, partition: P, timeout_ms: int) -> int | None:
        part = self._parts[partition]
        if part.position is None and self._s.auto_offset_reset == "none":
            raise CoordinatorStateError(
                f"{partition[0]}-{partition[1]} has no position and auto_offset_reset is "
                "'none': seek it first"
            )
        deadline = self._now() + timeout_ms / 1000
        while part.position is None:
            self._maintain_positions()
            if partition in self._errors:
                raise self._errors.pop(partition)
            left = deadline - self._now()
            if part.position is not None or left <= 0:
                break
            self._sleep(min(left, max(self._backoff_s, 0.01)))
        return part.position

    def poll(self, timeout_ms: int) -> Mapping[P, Sequence[Any]]:
        deadline = self._now() + timeout_ms / 1000
        looked = False  # whether answers that came already were read (poll(0) reads them)
        self._raise_pending()  # an error kept back while records were handed out
        while True:
            self._maintain_positions()
            out = self._drain()
            # After the drain: a partition handed out whole is fetched again at once (its
            # records come while the application works on these), and stays in its session.
            self._send_fetches()
            if out:
                return out
            self._raise_pending()
            left = deadline - self._now()
            if (left <= 0 and looked) or self._waker.take():
                return {}
            self._wait(max(left, 0.0))
            looked = True

    def wakeup(self) -> None:
        """End a poll's wait now, from any thread: that poll (or the next, if none waits)
        returns what it has, possibly nothing. What is in flight stays in flight."""
        self._waker.wake()

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
        self._inflight.clear()
        self._cluster.close()
        self._waker.close()

    def end_offsets(self, partitions: Sequence[P], timeout_ms: int) -> dict[P, int]:
        """The offset after each partition's last record, asked of the leaders (raises as
        :func:`~coordination._fetch.offsets.gather_offsets`)."""

        def ask(missing: list[P]) -> dict[P, int]:
            self._refresh_leaders({p[0] for p in missing}, force=False)
            return self._list_offsets(missing, LATEST)

        return gather_offsets(partitions, timeout_ms, ask, self._now, self._sleep, self._backoff_s)

    def highwater(self, partition: P) -> int | None:
        part = self._parts.get(partition)
        return None if part is None else part.highwater

    # -- positions and leaders -------------------------------------------------------------

    def _set_position(self, part: _Part, offset: int | None) -> None:
        part.position = part.fetch_offset = offset
        part.version = next(self._versions)
        part.buffered = []
        part.taken, part.retry_at = 0, 0.0  # a new position: no backoff of the old one
        part.fetched_epoch = part.leader_epoch = None

    def _raise_pending(self) -> None:
        """Raise the fetcher's error, else one partition's (each once)."""
        if self._pending is not None:
            error, self._pending = self._pending, None
            raise error
        if self._errors:
            p = next(iter(self._errors))
            raise self._errors.pop(p)

    def _refresh_leaders(self, topics: set[str], *, force: bool) -> None:
        """Look the leaders up if they are stale (or old, or ``force``), unless a failed
        lookup's backoff runs."""
        now = self._now()
        old = now - self._metadata_at > self._s.metadata_max_age_ms / 1000
        if not topics or not (self._stale or old or force) or now < self._metadata_retry_at:
            return
        ids = dict(self._cluster.metadata.topic_ids)
        try:
            self._cluster.refresh(topics, self._timeout_s)
        except TransportError as e:
            log.warning("fetcher: looking up the leaders of %s failed: %s", sorted(topics), e)
            self._metadata_retry_at = now + self._metadata_backoff()
            if e.fatal:
                self._pending = e.stop_error("the lean fetcher looking up leaders")
            return
        self._metadata_at = self._now()
        meta = self._cluster.metadata
        if any(ids.get(t, i) != i for t, i in meta.topic_ids.items()):
            # A topic deleted and created again: the sessions name its partitions by the old
            # id, which no answer resolves; new sessions (closing the old) name the new one.
            for node, session in self._sessions.items():
                self._sessions[node] = self._new_session(closing=session)
        self._stale = any(key not in meta.leaders for key in self._keys)
        if self._stale:  # a topic not created yet, a partition without a leader
            self._metadata_retry_at = now + self._metadata_backoff()
        else:
            self._metadata_misses = 0
        for topic, code in meta.topic_errors.items():
            if topic in topics and classify.partition_outcome(code) is Outcome.FATAL:
                error = broker_error(
                    code, group_id=self._s.group_id, api=f"Metadata of topic {topic!r}"
                )
                for p in self._parts:
                    if p[0] == topic:
                        self._errors[p] = error

    def _metadata_backoff(self) -> float:
        """``retry_backoff_ms``, doubled with each lookup in a row that failed or left a
        leader unknown, up to 1 s (Kafka's ``retry.backoff.max.ms``): a consumer of a topic
        that does not exist yet asks once a second, not ten times."""
        self._metadata_misses += 1
        return self._retry_backoff(self._metadata_misses)

    def _maintain_positions(self) -> None:
        """Check the positions of partitions whose leader changed (KIP-320), and reset those
        without one (ListOffsets, per auto_offset_reset)."""
        self._refresh_leaders({p[0] for p in self._parts}, force=False)
        self._check_positions()
        now = self._now()
        todo = [p for p, part in self._parts.items() if part.position is None]
        todo = [p for p in todo if self._parts[p].retry_at <= now]
        if not todo:
            return
        if self._s.auto_offset_reset == "none":
            return  # a position comes only from seek()
        timestamp = EARLIEST if self._s.auto_offset_reset == "earliest" else LATEST
        found = self._list_offsets(todo, timestamp, errors=self._errors)
        for p in todo:
            part = self._parts[p]
            if p in found:
                part.reset_failures = 0
                if part.position is None:
                    self._set_position(part, found[p])
            else:  # no answer, or a refusal: asked again after a backoff that grows
                part.reset_failures += 1
                part.retry_at = now + self._retry_backoff(part.reset_failures)

    def _check_positions(self) -> None:
        """KIP-320: a new leader's log is checked before it is fetched from (validate.py)."""
        now = self._now()
        stale, stop = check_positions(
            self._cluster,
            self._parts,
            self._errors,
            self._set_position,
            now=now,
            backoff_s=self._backoff_s,
            reconnecting=lambda node: self._node_ready_at.get(node, 0.0) > now,
            timeout_s=self._timeout_s,
            settings=self._s,
        )
        self._stale = self._stale or stale
        self._pending = stop or self._pending

    def _retry_backoff(self, failures: int) -> float:
        """``retry_backoff_ms``, doubled with each failure in a row, up to 1 s."""
        return float(min(self._backoff_s * 2 ** min(failures - 1, 16), 1.0))

    def _list_offsets(
        self, partitions: Sequence[P], timestamp: int, errors: dict[P, Exception] | None = None
    ) -> dict[P, int]:
        """The offsets found; a partition whose leader is unknown or refused is left out.
        One that may not be read is kept in ``errors`` if given, else raised."""
        answer = ask_offsets(
            self._cluster,
            partitions,
            timestamp,
            reconnecting=lambda node: self._node_ready_at.get(node, 0.0) > self._now(),
            isolation_level=self._isolation,
            timeout_s=self._timeout_s,
            group_id=self._s.group_id,
        )
        self._stale = self._stale or answer.stale
        if answer.stop is not None:
            self._pending = answer.stop
        if answer.refused and errors is None:
            raise next(iter(answer.refused.values()))
        if errors is not None:
            errors.update(answer.refused)
        return answer.found

    # -- fetching --------------------------------------------------------------------------

    def _send_fetches(self) -> None:
        now = self._now()
        meta = self._cluster.metadata
        by_node: dict[int, dict[P, tuple[int, int]]] = {}
        for p, part in self._parts.items():
            if part.fetch_offset is None or part.taken < len(part.buffered):
                continue
            if part.retry_at > now:
                continue
            leader = meta.leaders.get((p[0], p[1]))
            if leader is None:
                self._stale = True
                continue
            if unchecked(part, leader[1]):
                continue  # a new leader, not checked yet (_check_positions)
            part.leader_epoch = leader[1]
            by_node.setdefault(leader[0], {})[p] = (part.fetch_offset, leader[1])
        for node, wanted in by_node.items():
            if node in self._inflight or self._node_ready_at.get(node, 0.0) > now:
                continue
            self._send(node, wanted)

    def _send(self, node: int, wanted: dict[P, tuple[int, int]]) -> None:
        session = self._sessions.setdefault(node, self._new_session())
        if session.epoch > 0:  # incremental: only what the broker's session lacks
            send = {p: v for p, v in wanted.items() if session.sent.get(p) != v}
            forgotten = [p for p in session.sent if p not in wanted]
        else:
            send, forgotten = wanted, []
        request = codec.FetchRequest(
            max_wait_ms=self._s.fetch_max_wait_ms,
            min_bytes=self._s.fetch_min_bytes,
            max_bytes=self._s.fetch_max_bytes,
            isolation_level=self._isolation,
            session_id=session.id,
            session_epoch=session.epoch,
            topics=self._fetch_topics(send),
            forgotten=self._forgotten_topics(forgotten),
        )
        try:
            link = self._link(node)
            link.begin(request, self._timeout_s)
        except TransportError as e:
            self._link_failed(node, e)
            return
        self._inflight[node] = {p: (self._parts[p].version, v[0]) for p, v in wanted.items()}
        session.sent = dict(wanted)

    def _fetch_topics(self, send: Mapping[P, tuple[int, int]]) -> tuple[codec.FetchTopic, ...]:
        ids = self._cluster.metadata.topic_ids
        topics: dict[str, list[codec.FetchPartition]] = {}
        # The broker fills fetch_max_bytes in the request's order: the first partition
        # moves round, so that none starves behind busy ones (a session's broker rotates
        # by itself; a full request does not).
        items = sorted(send.items())
        if items:
            self._fetch_turn = (self._fetch_turn + 1) % len(items)
            items = items[self._fetch_turn :] + items[: self._fetch_turn]
        for p, (offset, epoch) in items:
            topics.setdefault(p[0], []).append(
                codec.FetchPartition(
                    p[1], offset, self._s.max_partition_fetch_bytes, current_leader_epoch=epoch
                )
            )
        return tuple(
            codec.FetchTopic(t, ids.get(t, codec.NO_TOPIC_ID), tuple(ps))
            for t, ps in topics.items()
        )

    def _forgotten_topics(self, forgotten: Sequence[P]) -> tuple[codec.ForgottenTopic, ...]:
        ids = self._cluster.metadata.topic_ids
        topics: dict[str, list[int]] = {}
        for p in sorted(forgotten):
            topics.setdefault(p[0], []).append(p[1])
        return tuple(
            codec.ForgottenTopic(t, ids.get(t, codec.NO_TOPIC_ID), tuple(ps))
            for t, ps in topics.items()
        )

    def _new_session(self, closing: _Session | None = None) -> _Session:
        """A session to open with the next (full) request; ``closing``: the one it replaces,
        which that request asks the broker to close (else it holds a slot of the broker's
        session cache until it expires)."""
        if not self._s.sessions:
            return _Session(epoch=-1)
        return _Session(id=closing.id if closing is not None else 0, epoch=0)

    def _link(self, node: int) -> Link:
        link = self._links.get(node)
        if link is None:
            address = self._cluster.metadata.brokers.get(node)
            if address is None:
                raise TransportError(f"broker {node} is not in the cluster's metadata")
            link = self._links[node] = self._make_link(node, *address)
        return link

    def _link_failed(self, node: int, error: Exception) -> None:
        """A leader's connection failed: a new session on a new connection, after a backoff
        that doubles with each failure in a row (``reconnect_backoff_ms`` up to
        ``reconnect_backoff_max_ms``); and the leaders are looked up again (it may be gone)."""
        failures = self._node_failures[node] = self._node_failures.get(node, 0) + 1
        log.warning("fetcher: broker %d: %s (%d failures in a row)", node, error, failures)
        if isinstance(error, TransportError) and error.fatal:
            self._pending = error.stop_error(f"the lean fetcher fetching from broker {node}")
        link = self._links.pop(node, None)
        if link is not None:
            link.close()
        self._inflight.pop(node, None)
        self._sessions[node] = self._new_session(closing=self._sessions.get(node))
        backoff_ms = min(
            self._s.reconnect_backoff_ms * 2 ** min(failures - 1, 16),
            self._s.reconnect_backoff_max_ms,
        )
        self._node_ready_at[node] = self._now() + backoff_ms / 1000
        self._stale = True

    def _wait(self, left_s: float) -> None:
        """Wait up to ``left_s`` for an answer (or the next backoff's end); read those in."""
        now = self._now()
        for node in [n for n, link in self._links.items() if n in self._inflight]:
            link = self._links[node]
            limit = self._timeout_s + self._s.fetch_max_wait_ms / 1000
            if link.sent_at is not None and now - link.sent_at > limit:
                # Overdue, unless its answer came while the application did not poll: that
                # one is read below like any other.
                if link.answer_buffered() or _readable(link.fileno()):
                    continue
                link.abandon()
                self._link_failed(node, TransportError(f"no Fetch answer in {limit:.1f}s"))
        waiting = {n: self._links[n] for n in self._inflight if n in self._links}
        ready = [n for n, link in waiting.items() if link.answer_buffered()]
        if not ready:
            wake = [t for t in self._wake_times() if t > now]
            left_s = min([left_s] + [t - now for t in wake])
            fds = {link.fileno(): n for n, link in waiting.items()}
            fds.pop(None, None)
            if fds or self._real_sleep:
                poller = select.poll()
                for fd in [*fds, self._waker.fileno()]:
                    assert fd is not None
                    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
                ready = [fds[fd] for fd, _ in poller.poll(max(left_s, 0.0) * 1000) if fd in fds]
            else:
                self._sleep(max(left_s, 0.0))
        for node in ready:
            self._read(node)

    def _wake_times(self) -> list[float]:
        times = [part.retry_at for part in self._parts.values()]
        times += self._node_ready_at.values()
        if self._stale:
            times.append(self._metadata_retry_at)
        return times

    def _read(self, node: int) -> None:
        sent = self._inflight.pop(node)
        try:
            response = self._links[node].finish(self._timeout_s)
        except ResponseTooLargeError as e:
            # The same Fetch would get the same answer: retried (after the backoff), but
            # raised each time, since only a setting can fix it.
            self._pending = ConfigurationError(
                f"a Fetch answer from broker {node} of {e.size} bytes is over "
                f"receive_message_max_bytes ({e.limit}): a record batch larger than "
                "fetch_max_bytes + max_partition_fetch_bytes (the topic's max.message.bytes "
                "allows it); raise receive_message_max_bytes"
            )
            self._link_failed(node, e)
            return
        except TransportError as e:
            self._link_failed(node, e)
            return
        self._node_failures.pop(node, None)
        self._handle(node, response, sent)

    # -- answers ---------------------------------------------------------------------------

    def _handle(
        self, node: int, response: codec.FetchResponse, sent: dict[P, tuple[int, int]]
    ) -> None:
        now = self._now()
        if response.throttle_time_ms > 0:  # the broker mutes this connection meanwhile
            self._node_ready_at[node] = now + response.throttle_time_ms / 1000
        session = self._sessions[node]
        outcome = classify.session_outcome(response.error_code)
        if outcome is not SessionOutcome.KEEP:
            log.info("fetcher: broker %d: Fetch error %d", node, response.error_code)
            # A session the broker no longer has is not closed; any other is.
            gone = response.error_code == classify.FETCH_SESSION_ID_NOT_FOUND
            self._sessions[node] = self._new_session(closing=None if gone else session)
            if outcome is SessionOutcome.FATAL:
                self._pending = broker_error(
                    response.error_code, group_id=self._s.group_id, api="Fetch"
                )
            if outcome is SessionOutcome.NEW_SESSION_AND_REFRESH:
                self._stale = True
            ready_at = self._node_ready_at.get(node, 0.0)
            self._node_ready_at[node] = max(ready_at, now + self._backoff_s)
            return
        if session.epoch == 0:
            session.id = response.session_id
            session.epoch = 1 if response.session_id else 0
        elif session.epoch > 0:
            if response.session_id != session.id:  # not the session asked for: start again
                self._sessions[node] = self._new_session(closing=session)
                return
            session.epoch = session.epoch + 1 if session.epoch < _MAX_EPOCH else 1
        names = self._cluster.metadata.topic_names
        for topic in response.responses:
            name = topic.topic if topic.topic is not None else names.get(topic.topic_id)  # type: ignore[arg-type]
            if name is None:  # a topic id the metadata does not know: look again, not at once
                self._stale = True
                ready_at = self._node_ready_at.get(node, 0.0)
                self._node_ready_at[node] = max(ready_at, now + self._backoff_s)
                continue
            for data in topic.partitions:
                p = self._keys.get((name, data.partition))
                if p is None or p not in sent:
                    continue  # no longer assigned, or not asked for
                part = self._parts[p]
                if sent[p] != (part.version, part.fetch_offset):
                    continue  # sought (or reset) since it was sent: the answer is moot
                self._partition_answer(node, session, p, part, data)

    def _partition_answer(
        self, node: int, session: _Session, p: P, part: _Part, data: codec.FetchPartitionData
    ) -> None:
        outcome = classify.partition_outcome(data.error_code)
        if outcome is Outcome.NONE:
            self._take(p, part, data)
            return
        what = f"{p[0]}-{p[1]}"
        if outcome is Outcome.OUT_OF_RANGE:
            if self._s.auto_offset_reset == "none":
                self._errors[p] = broker_error(
                    data.error_code,
                    group_id=self._s.group_id,
                    api=f"Fetch of {what} at offset {part.fetch_offset} (auto_offset_reset "
                    "is 'none')",
                )
                part.retry_at = self._now() + self._backoff_s
                return
            log.info(
                "fetcher: offset %s of %s is out of range; resetting to the %s",
                part.fetch_offset,
                what,
                self._s.auto_offset_reset,
            )
            self._set_position(part, None)
            return
        session.sent[p] = _RESEND  # sent again (or forgotten) with the next request
        part.retry_at = self._now() + self._backoff_s
        if outcome is Outcome.REFRESH:
            leader = data.current_leader
            meta = self._cluster.metadata
            known = meta.leaders.get((p[0], p[1]))
            newer = leader is not None and (known is None or leader.leader_epoch > known[1])
            if newer and leader is not None and leader.leader_id in meta.brokers:  # KIP-951
                meta.leaders[(p[0], p[1])] = (leader.leader_id, leader.leader_epoch)
            else:
                self._stale = True
            log.debug("fetcher: %s on broker %d: error %d", what, node, data.error_code)
        elif outcome is Outcome.FATAL:
            self._errors[p] = broker_error(
                data.error_code, group_id=self._s.group_id, api=f"Fetch of {what}"
            )

    def _take(self, p: P, part: _Part, data: codec.FetchPartitionData) -> None:
        part.highwater = data.high_watermark
        if not data.records:
            return
        start = part.fetch_offset
        assert start is not None
        try:
            raws, through = decode_partition(
                data.records,
                start,
                self._s.check_crcs,
                data.aborted_transactions,
                self._s.read_committed,
            )
        except ProtocolCodecError as e:
            self._errors[p] = ProtocolCodecError(f"Fetch of {p[0]}-{p[1]} at offset {start}: {e}")
            part.retry_at = self._now() + self._backoff_s
            return
        if through < start:
            # No whole batch at the position: one larger than the size limits (brokers since
            # KIP-74 always send the first one whole, so only a broken one does this).
            self._errors[p] = CoordinationError(
                f"Fetch of {p[0]}-{p[1]} at offset {start}: no whole record batch in "
                f"{len(data.records)} bytes; raise max_partition_fetch_bytes"
            )
            part.retry_at = self._now() + self._backoff_s
            return
        part.buffered = part.buffered[part.taken :] + raws
        part.taken = 0
        part.fetch_offset = through + 1
        if raws and raws[-1][5] >= 0:
            part.fetched_epoch = raws[-1][5]
        if not part.buffered:
            part.position = part.fetch_offset  # only control records (or compacted away)

    def _drain(self) -> dict[P, list[Any]]:
        out: dict[P, list[Any]] = {}
        left = self._s.max_poll_records
        order = list(self._parts.items())
        if not order:
            return out
        self._turn = (self._turn + 1) % len(order)
        for p, part in order[self._turn :] + order[: self._turn]:
            if left <= 0:
                break
            if part.taken >= len(part.buffered) or p in self._errors:
                continue
            raws = part.buffered[part.taken : part.taken + left]
            try:
                records = consumer_records(
                    p[0], p[1], raws, self._s.key_deserializer, self._s.value_deserializer
                )
            except Exception as e:  # a deserializer's: raised now if nothing else was taken
                if not out:
                    raise
                self._errors[p] = e  # else by the next poll; its position stays at the record
                continue
            part.taken += len(raws)
            left -= len(raws)
            out[p] = records
            part.position = raws[-1][0] + 1
            if part.taken >= len(part.buffered):
                part.buffered, part.taken = [], 0
                assert part.fetch_offset is not None
                part.position = max(part.position, part.fetch_offset)
        return out
