"""The share workload: a share group (KIP-932) under the campaign's faults.

:class:`ShareCampaign` runs the campaign's cluster, producer and faults with one group
only: ``Settings.share_consumers`` share consumers (``devtools.member --recipe share``) of
the stream, in a share group with a short acquisition lock and a low delivery limit, so that
frozen and killed consumers' records are redelivered often and some reach the limit. Each
consumer accepts every record but releases some at their first delivery, some at every one
(they are archived at the limit), rejects a few as poison (by offset), and now and then
acknowledges a batch only after its lock ran out. After the faults, once every record is
settled and one more in each partition too (see :meth:`ShareCampaign._wait_caught_up`),
the broker's view of the group (lag per partition) is recorded, and :func:`check_share`
judges the lot.
"""

from __future__ import annotations

import time
from typing import Any

from coordination import GroupInspector

from ._campaign import STREAM_TOPIC, Campaign, CampaignError, _command, _member
from ._cluster import create_topic
from ._load import SHARE_CONSUMERS, load_share
from ._members import Member
from ._record import Recorder, record_acked
from ._share_checker import ShareReport, check_share, deliveries, lost, unseen_chances

# One record in RELEASE_EVERY comes back once; one in BOUNCE_EVERY until the delivery
# limit; one in REJECT_EVERY is poison.
RELEASE_EVERY = 10
BOUNCE_EVERY = 40
REJECT_EVERY = 25


class ShareCampaign(Campaign):
    """The campaign with the share workload."""

    workload = "share"

    def cluster_config(self) -> dict[str, str]:
        return {
            "group.share.delivery.count.limit": str(self.settings.delivery_limit),
            # The share-group state as durable as the stream (the harness has 1).
            "share.coordinator.state.topic.min.isr": "2",
            # A killed consumer leaves the group after 6 s (45 s by default, its minimum too).
            "group.share.min.session.timeout.ms": "1000",
            "group.share.session.timeout.ms": str(self.settings.session_timeout_ms),
        }

    def group_ids(self) -> dict[str, str]:
        return {SHARE_CONSUMERS: f"campaign-share-{self.settings.seed}"}

    def create_topics(self, bootstrap: str) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        create_topic(bootstrap, STREAM_TOPIC, self.settings.partitions)
        group = self.groups[SHARE_CONSUMERS]
        config = {
            "share.auto.offset.reset": "earliest",
            "share.record.lock.duration.ms": str(self.settings.share_lock_ms),
        }
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, config)])
        finally:
            admin.close()
        self.log("share_config", group=group, delivery_limit=self.settings.delivery_limit, **config)

    def _add_members(self, bootstrap: str) -> None:
        s = self.settings
        for i in range(1, s.share_consumers + 1):
            self.members.add(
                Member(
                    SHARE_CONSUMERS,
                    f"share-{i}",
                    "share",
                    False,
                    _command(
                        _member(
                            "share",
                            f"--release-every={RELEASE_EVERY}",
                            f"--reject-every={REJECT_EVERY}",
                            f"--bounce-every={BOUNCE_EVERY}",
                            # Now and then a slow handler: its locks run out.
                            "--stall-chance=0.03",
                            f"--stall-ms={s.share_lock_ms + 700}",
                            # Small polls: a frozen consumer holds few records.
                            "--max-poll-records=20",
                            # Every other consumer (of three: share-2) fetches ahead;
                            # it names the records it never handed out (``unseen``).
                            *(["--fetch-ahead"] if i % 2 == 0 else []),
                        ),
                        bootstrap=bootstrap,
                        group=self.groups[SHARE_CONSUMERS],
                        topics=STREAM_TOPIC,
                    ),
                )
            )
        self._add_producer(bootstrap)

    def _not_yet_working(self) -> str:
        history = load_share(self.run_dir)
        idle = [
            process
            for process, events in history.consumers.items()
            if not any(e["event"] == "acquired" for e in events)
        ]
        missing = [f"{', '.join(idle)} acquired nothing"] if idle else []
        if len(history.consumers) < self.settings.share_consumers:
            missing.append("not every share consumer recorded")
        if not history.produced:
            missing.append("nothing produced")
        if not missing:
            uninitialized = self._uninitialized_partitions()
            if uninitialized:
                missing.append(f"{uninitialized} not recorded as initialized")
        return "; ".join(missing)

    def _uninitialized_partitions(self) -> str:
        """The stream's partitions the group coordinator has not yet durably recorded as
        initialized for the group ("" when it has all of them).

        Faults wait for this. Kafka (4.3) initializes a partition that is still only
        "initializing" in the group coordinator's records again after
        ``group.share.initialize.retry.interval.ms`` (30 s). That happens when a coordinator
        failover or a lost answer comes between the share coordinator writing the state and
        the group coordinator recording it. The new initialization is a fresh start: the
        partition goes back to ``share.auto.offset.reset`` and redelivers, at count 1,
        records already accepted. DescribeShareGroupOffsets for all topics lists only the
        recorded partitions.
        """
        try:
            with GroupInspector(bootstrap_servers=self.cluster.client_bootstrap) as inspector:
                described = inspector.describe(self.groups[SHARE_CONSUMERS])
        except Exception as e:  # the group or its coordinator not there yet: ask again
            return f"the group ({e!r:.200})"
        state = described.summary.get("share_partitions", {})
        recorded = {k for k, v in state.items() if "error" not in v}
        wanted = [f"{STREAM_TOPIC}-{p}" for p in range(self.settings.partitions)]
        return ", ".join(k for k in wanted if k not in recorded)

    def _wait_caught_up(self) -> None:
        """Until every record is settled; then one last record per partition, settled too;
        then until the broker sees no lag: recorded.

        The last records are there for the broker's view. It is the share coordinator's
        copy of each share-partition, which the partition's leader writes with every change
        of its records' states, each write carrying the start offset the leader had when it
        sent it, and the last write applied wins (Kafka 4.3). When a share coordinator
        fails over, the writes waiting for it are retried and may be applied in any order,
        and the leader's start offset, held back while they were pending, moves on without
        a write of its own: the copy keeps an old start offset, and counts lag for records
        long settled, until the partition's next change. One more record in each
        partition, sent after everything settled, makes that change with nothing in flight,
        so that lag left after it means records the broker has not settled.
        """
        settled = self._wait_settled()
        # Kept for the record: where an old start offset shows, this view has lag.
        self._record_broker_view(deadline=time.monotonic() + 5, event="share_state_settled")
        if settled:
            try:
                self._produce_last_records()
            except Exception as e:
                self._record_broker_view(deadline=time.monotonic() + 30)
                raise CampaignError(
                    f"one more record per partition could not be produced: {e!r}"
                ) from e
            self._wait_settled()
        # (Not settled: the checks find those records; no last ones to wait for.)
        self._record_broker_view(deadline=time.monotonic() + 30)

    def _wait_settled(self) -> bool:
        """Until the consumers' accounts settle every record produced (at most
        ``catch_up_s``); whether they did."""
        deadline = time.monotonic() + self.settings.catch_up_s
        unsettled = -1
        while time.monotonic() < deadline:
            history = load_share(self.run_dir)
            unsettled = len(lost(history, deliveries(history), unseen_chances(history)))
            if not unsettled:
                self.log("caught_up")
                return True
            time.sleep(2.0)
        self.log("not_caught_up", unsettled=unsettled)
        return False

    def _produce_last_records(self) -> None:
        """One record in each partition, recorded as the campaign's producer records its
        own (``producer/last.jsonl``), so the checks count them like the rest."""
        from kafka import KafkaProducer

        path = self.run_dir / "producer" / "last.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        producer = KafkaProducer(
            bootstrap_servers=self.cluster.client_bootstrap, acks="all", request_timeout_ms=30000
        )
        try:
            with path.open("a", encoding="utf-8") as out:
                record = Recorder(out)
                for partition in range(self.settings.partitions):
                    value = f"last:{partition}"
                    sent = producer.send(STREAM_TOPIC, value=value.encode(), partition=partition)
                    record_acked(record, value, sent.get(timeout=60))
        finally:
            producer.close(timeout=10)

    def _record_broker_view(self, deadline: float, event: str = "share_state") -> None:
        """The group's share-partitions as the broker tells them (``event``, by default
        ``share_state``, what the checks read), asked until none has lag (the state is
        written behind the acknowledgements) or the deadline."""
        state: dict[str, Any] = {}
        with GroupInspector(bootstrap_servers=self.cluster.client_bootstrap) as inspector:
            while True:
                try:
                    described = inspector.describe(self.groups[SHARE_CONSUMERS])
                    state = described.summary.get("share_partitions", {})
                except Exception as e:  # a broker restarting: ask again
                    state = {"error": {"error": repr(e)[:300]}}
                done = len(state) == self.settings.partitions and all(
                    v.get("lag") == 0 for v in state.values()
                )
                if done or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
        self.log(event, partitions=state)

    def _read_back(self) -> None:
        """Nothing to read back: the broker's view was recorded while the consumers ran."""

    def check(self) -> ShareReport:
        return check_share(load_share(self.run_dir))
