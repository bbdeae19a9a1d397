"""A lean record fetcher: Kafka's Fetch on the caller's thread, without kafka-python's I/O thread.

``recipes.partitioning.Consumer(..., fetcher="lean")`` is the way to use it; this module is
its engine's public face, for code that drives a fetcher itself. It reads assigned
partitions from positions it is given, as the ``RecordFetcher`` of
``recipes.partitioning`` does, and returns kafka-python ``ConsumerRecord``\\ s with the
fields the default fetcher (kafka-python's ``KafkaConsumer``) fills.

Why: kafka-python's consumer runs an I/O thread and hands every answer over to the polling
thread; an idle consumer pays several context switches per fetch. This fetcher has no
thread: each poll sends and reads on the leaders' connections itself, one long-polling
Fetch in flight per leader, kept across polls, in incremental fetch sessions (KIP-227).

Not supported (refused at construction with a :class:`~coordination.errors.ConfigurationError`
naming the setting; use the default fetcher for them): ``client_rack`` (fetching from the
closest replica, KIP-392), SASL, ``proxy_url`` and ``api_version``. Leader epochs are sent
(a stale leader answers FENCED_LEADER_EPOCH and is looked up again), and a partition whose
leader changed is checked against the new leader's log before it is fetched from (KIP-320's
OffsetForLeaderEpoch, as Kafka's consumer does): a log truncated under the position (an
unclean leader election) is fetched again from where it now ends, or, with
``auto_offset_reset="none"``, is the partition's error until a ``seek``
(``coordination._fetch.validate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic

from ._fetch.cluster import BrokerCluster
from ._fetch.engine import FetchEngine, P
from ._fetch.link import FetchLink
from ._fetch.settings import fetch_settings
from .errors import ConnectionFailedError
from .transport import TransportError

__all__ = ["LeanRecordFetcher"]


class LeanRecordFetcher(Generic[P]):
    """Reads assigned partitions' records on the caller's thread (see the module's docs).

    Example:
        fetcher = LeanRecordFetcher(bootstrap_servers="localhost:9092",
                                    auto_offset_reset="earliest")
        fetcher.assign([TopicPartition("orders", 0)])
        for tp, records in fetcher.poll(1000).items():
            ...
        fetcher.close()

    Settings are kafka-python's ``KafkaConsumer`` settings, with its defaults:
    ``bootstrap_servers``, ``client_id``, ``security_protocol`` (PLAINTEXT or SSL) and the
    ``ssl_*`` settings, ``auto_offset_reset`` (``"latest"``; also ``"earliest"``, and
    ``"none"``: a partition is read only once sought, and an out-of-range position raises),
    ``fetch_min_bytes`` (1), ``fetch_max_wait_ms`` (500), ``fetch_max_bytes`` (52428800),
    ``max_partition_fetch_bytes`` (1048576), ``max_poll_records`` (500), ``check_crcs``
    (True), ``isolation_level`` (``"read_uncommitted"``; ``"read_committed"`` leaves
    aborted transactions out), ``key_deserializer`` and ``value_deserializer``,
    ``enable_incremental_fetch_sessions`` (True), ``request_timeout_ms`` (30000),
    ``retry_backoff_ms`` (100), ``reconnect_backoff_ms`` (50), ``reconnect_backoff_max_ms``
    (30000), ``metadata_max_age_ms`` (300000), ``bootstrap_timeout_ms`` (30000),
    ``receive_message_max_bytes`` (at least ``fetch_max_bytes + max_partition_fetch_bytes``),
    socket settings. ``group_id`` only names the group in errors: this fetcher joins no group.

    Concurrency:
        Not thread-safe: one call at a time (the consumer's lock serialises them), except
        :meth:`wakeup`, which any thread may call while a poll runs. A poll blocks its
        thread for up to its timeout (a wake-up ends it sooner), and a lookup of leaders or
        offsets for up to ``request_timeout_ms``.
    """

    def __init__(self, **config: Any) -> None:
        """Validate the settings and reach the cluster (up to ``bootstrap_timeout_ms``).

        Raises:
            ConfigurationError: a bad setting, one this fetcher does not know, or one it
                does not support (named, with the advice to use the default fetcher).
            ConnectionFailedError: no bootstrap server answered in time.
        """
        settings = fetch_settings(config)
        direct = settings.direct
        assert direct is not None
        cluster = BrokerCluster(settings.servers, direct)

        def link(node: int, host: str, port: int) -> FetchLink:
            return FetchLink(f"fetch from broker {node}", host, port, direct)

        try:
            cluster.refresh((), settings.bootstrap_timeout_ms / 1000)
        except TransportError as e:
            cluster.close()
            raise ConnectionFailedError(
                f"the lean fetcher reached none of the bootstrap servers {settings.servers} "
                f"within bootstrap_timeout_ms={settings.bootstrap_timeout_ms}: {e}"
            ) from e
        self._engine: FetchEngine[P] = FetchEngine(settings, cluster, link)

    @staticmethod
    def validate(**config: Any) -> None:
        """Check settings as the constructor does, without connecting (for code that builds
        the fetcher later, e.g. a consumer's ``start()``).

        Raises:
            ConfigurationError: as the constructor.
        """
        fetch_settings(config, connect=False)

    def assign(self, partitions: Sequence[P]) -> None:
        """Fetch exactly these partitions from now on; kept ones keep their positions (and
        what was fetched for them).

        Args:
            partitions: (topic, partition) pairs, e.g. ``TopicPartition``\\ s; :meth:`poll`
                keys its answer by these very objects.
        """
        self._engine.assign(partitions)

    def seek(self, partition: P, offset: int) -> None:
        """Read the (assigned) ``partition`` from ``offset`` on; what was fetched for it is
        dropped, and an answer to a Fetch sent before is ignored for it.

        Raises:
            KeyError: the partition is not assigned.
        """
        self._engine.seek(partition, offset)

    def position(self, partition: P, timeout_ms: int) -> int | None:
        """The partition's position; for one never sought, where ``auto_offset_reset``
        starts it (ListOffsets to its leader).

        Returns:
            The offset; None if not found within ``timeout_ms``.

        Raises:
            KeyError: the partition is not assigned.
            CoordinatorStateError: it has no position and ``auto_offset_reset`` is "none".
            BrokerError: its leader refused (e.g. TopicAuthorizationError).
        """
        return self._engine.position(partition, timeout_ms)

    def poll(self, timeout_ms: int) -> Mapping[P, Sequence[Any]]:
        """Records of assigned partitions, in offset order per partition, at most
        ``max_poll_records``, waiting up to ``timeout_ms`` when none are fetched yet. Each
        returned record moves its partition's position past it.

        Returns:
            ``ConsumerRecord``\\ s by partition (as :meth:`assign` was given it).

        A partition's error is kept for it and raised by the next poll, before it hands
        anything out: records that came from other partitions are returned first, never
        dropped; the partition's position stays at its record (a ``seek`` moves past it).

        Raises:
            BrokerError: a broker refused in a way retrying cannot fix (e.g.
                TopicAuthorizationError; OFFSET_OUT_OF_RANGE with ``auto_offset_reset``
                "none"), raised once; the next poll tries again.
            ProtocolCodecError: a record batch could not be read (corrupt, a CRC
                mismatch, or a compression whose package is missing: named).
            ConfigurationError: an answer larger than ``receive_message_max_bytes``
                (raised to ``fetch_max_bytes + max_partition_fetch_bytes`` unless set
                larger).
            ConnectionFailedError: a broker answers no Fetch version from 12 (Kafka 2.7),
                or its TLS certificate is refused.
            Exception: what a deserializer raised (the position stays at its record).
        """
        return self._engine.poll(timeout_ms)

    def end_offsets(self, partitions: Sequence[P], timeout_ms: int) -> dict[P, int]:
        """The offset after each partition's last record (asks the leaders).

        Raises:
            CoordinationTimeoutError: not all were found within ``timeout_ms``.
            BrokerError: a leader refused (e.g. TopicAuthorizationError).
        """
        return self._engine.end_offsets(partitions, timeout_ms)

    def highwater(self, partition: P) -> int | None:
        """The partition's end as of the last Fetch answer (no request); None if unknown."""
        return self._engine.highwater(partition)

    def wakeup(self) -> None:
        """End the wait of a :meth:`poll` under way now (it returns what it has, possibly
        nothing), or of the next one if none is. The one method safe to call from another
        thread while a poll runs: a consumer calls it when a rebalance callback waits for
        the lock that poll holds."""
        self._engine.wakeup()

    def close(self) -> None:
        """Close the fetcher's connections (the brokers expire its fetch sessions)."""
        self._engine.close()
