"""The campaign: a real cluster, four groups of real processes, random faults, a checker.

:func:`run` starts a 3-broker Kafka cluster behind fault proxies (``_cluster.py``,
``_proxy.py``), creates the topics (replication factor 3, ``min.insync.replicas=2``),
starts the workloads (an election group writing through its fenced producer, a task group,
two mixed consumer groups reading one stream, one on the classic protocol and one on
KIP-848's, and the stream's producer), waits until all of them work, injects random
faults for a duration or a count, lets the groups settle and the consumers catch up, stops
everything, reads the topics back, and hands every recorded event to the checker.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordination.errors import CoordinationError

from ._checker import CLASSIC_CONSUMERS, KIP848_CONSUMERS, Event, History, Report, check
from ._cluster import ProxiedCluster, create_topic, find_coordinator
from ._load import CONSUMER_GROUPS, load, read_events
from ._members import Member, Members
from ._proxy import Mode, ProxyFleet
from ._record import Recorder, epoch_offset, now
from ._share_checker import ShareReport

ELECTION_TOPIC = "campaign-election"
STREAM_TOPIC = "campaign-stream"


class CampaignError(CoordinationError):
    """The campaign could not run (a broker or a workload did not start): never a pass."""


@dataclass(frozen=True)
class Settings:
    """What a campaign runs; faults start every ``spacing`` seconds until either limit."""

    seed: int
    faults: int | None = None
    duration: float | None = None
    spacing: float = 2.5
    run_dir: Path | None = None
    session_timeout_ms: int = 6000
    settle_s: float = 20.0
    catch_up_s: float = 120.0
    ready_timeout_s: float = 180.0
    heap: str = "320m"
    election_members: int = 4
    task_workers: int = 5
    tasks: int = 50
    partitions: int = 6
    rate: float = 40.0
    # The share workload's (devtools.campaign._share).
    share_consumers: int = 3
    share_lock_ms: int = 2000
    delivery_limit: int = 4


# Relative weights of the fault kinds.
FAULT_WEIGHTS: dict[str, int] = {
    "member_kill": 4,
    "pause_short": 2,
    "pause_long": 2,
    "broker_kill": 1,
    "coordinator_kill": 1,
    "network": 2,
}
BROKER_FAULTS = frozenset({"broker_kill", "coordinator_kill", "network"})


def _repo_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    if not (root / "tests" / "interop" / "peers.py").exists():
        raise CampaignError(
            f"the campaign's consumer peers live in tests/interop of a source checkout; "
            f"none at {root}"
        )
    return root


class Campaign:
    workload = "groups"
    """What ``meta.json`` says the run holds: ``--check`` picks the checker by it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.run_dir = settings.run_dir or Path(f"campaign-{settings.seed}-{int(time.time())}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.root = _repo_root()
        (self.run_dir / "meta.json").write_text(
            json.dumps(
                {
                    "epoch_offset": epoch_offset(),
                    "seed": settings.seed,
                    "workload": self.workload,
                }
            )
        )
        self._log_file = open(self.run_dir / "campaign.jsonl", "a")  # noqa: SIM115
        self.log = Recorder(self._log_file)
        self.cluster = ProxiedCluster(3, heap=settings.heap, config=self.cluster_config())
        self.fleet = ProxyFleet(self.cluster.proxy_routes())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.root), env.get("PYTHONPATH", "")) if p
        )
        self.members = Members(self.run_dir, self.log, env, self.root)
        self.groups = self.group_ids()
        self._lock = threading.Lock()
        self._broker_busy = False
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self.faults_started = 0
        # Set on the way out: a fault thread still sleeping must not restart anything then.
        self._closing = threading.Event()

    # -- what a workload changes ------------------------------------------------------------

    def cluster_config(self) -> dict[str, str]:
        """Broker settings on top of the cluster's own."""
        return {}

    def group_ids(self) -> dict[str, str]:
        """The workload's groups (the directories its members record in) and their ids."""
        settings = self.settings
        return {
            "election": f"campaign-election-{settings.seed}",
            "tasks": f"campaign-tasks-{settings.seed}",
            CLASSIC_CONSUMERS: f"campaign-consumers-{settings.seed}",
            KIP848_CONSUMERS: f"campaign-consumers848-{settings.seed}",
        }

    def create_topics(self, bootstrap: str) -> None:
        create_topic(bootstrap, ELECTION_TOPIC, 1)
        create_topic(bootstrap, STREAM_TOPIC, self.settings.partitions)

    def check(self) -> Report | ShareReport:
        return check(load(self.run_dir))

    # -- the whole run ------------------------------------------------------------------

    def run(self) -> Report | ShareReport:
        try:
            self.fleet.start()
            self.cluster.start()
            bootstrap = self.cluster.client_bootstrap
            self.create_topics(bootstrap)
            self._add_members(bootstrap)
            for m in self.members.all:
                self.members.spawn(m)
            self._wait_ready()
            self.log("faults_begin")
            self._inject()
            for thread in self._threads:
                thread.join()
            if self._errors:
                raise CampaignError(f"a fault could not be healed: {self._errors[0]!r}")
            self.log("faults_end", count=self.faults_started)
            time.sleep(self.settings.settle_s)
            producer = self.members.of("producer")
            self.members.stop(producer)
            self._wait_caught_up()
            self.log("stopping")
            self.members.stop([m for m in self.members.all if m.group != "producer"])
            self._read_back()
        finally:
            self._closing.set()
            for thread in self._threads:
                thread.join(timeout=150)
            self.members.kill_all()
            self.fleet.stop()
            self.cluster.stop(keep_logs_in=self.run_dir / "brokers")
            self._log_file.close()
        return self.check()

    # -- the workloads --------------------------------------------------------------------

    def _add_members(self, bootstrap: str) -> None:
        s = self.settings
        python = sys.executable
        session = str(s.session_timeout_ms)

        for i in range(1, s.election_members + 1):
            static = i <= 2
            name = f"leader-{i}"
            self.members.add(
                Member(
                    "election",
                    name,
                    "election",
                    static,
                    _command(
                        _member(
                            "election",
                            # Writes while leading; a failed write gets a new producer.
                            "--interval=0.2",
                            "--on-write-error=retry",
                        ),
                        bootstrap=bootstrap,
                        group=self.groups["election"],
                        topic=ELECTION_TOPIC,
                        session_timeout_ms=session,
                        group_instance_id=name if static else None,
                    ),
                )
            )
        for i in range(1, s.task_workers + 1):
            static = i <= 2
            name = f"worker-{i}"
            self.members.add(
                Member(
                    "tasks",
                    name,
                    "task",
                    static,
                    _command(
                        _member(
                            "tasks",
                            "--tick=0.5",
                            "--stop-timeout-ms=1000",
                            # A departed worker's tasks go to the others at once: the
                            # campaign measures that.
                            "--max-delay-ms=0",
                        ),
                        bootstrap=bootstrap,
                        group=self.groups["tasks"],
                        task_count=str(s.tasks),
                        session_timeout_ms=session,
                        group_instance_id=name if static else None,
                    ),
                )
            )
        java = self._java_command()
        peers: list[tuple[str, list[str], bool]] = [
            ("ours-1", _peer("consumer"), True),
            ("ourslean-2", [*_peer("consumer"), "--fetcher", "lean"], False),
            ("java-1", java, True),
            ("java-2", java, False),
            ("rdkafka-1", [python, "-m", "tests.interop.rdkafka_peer"], False),
            ("oursasync-1", _peer("consumer-async"), False),
        ]
        # KIP-848's group reads the same stream on its own; the broker assigns (uniform) and
        # sets the session (group.consumer.session.timeout.ms, 6 s on the test brokers).
        # One JVM more at most: the machine CI runs this on has two cores.
        peers_848: list[tuple[str, list[str], bool]] = [
            # The library's default fetcher with this protocol is the lean one; one member
            # fetches with kafka-python's, the other choice.
            ("ours848-1", _peer("consumer"), True),
            ("ours848kp-2", [*_peer("consumer"), "--fetcher", "kafka-python"], False),
            ("java848-1", java, False),
            ("rdkafka848-1", [python, "-m", "tests.interop.rdkafka_peer"], False),
        ]
        for group, protocol, members in (
            (CLASSIC_CONSUMERS, None, peers),
            (KIP848_CONSUMERS, "consumer", peers_848),
        ):
            for name, base, static in members:
                self.members.add(
                    Member(
                        group,
                        name,
                        name.split("-")[0],
                        static,
                        _peer_command(
                            base,
                            bootstrap=bootstrap,
                            group=self.groups[group],
                            topics=STREAM_TOPIC,
                            session_timeout_ms=session,
                            group_instance_id=name if static else None,
                            group_protocol=protocol,
                        ),
                    )
                )
        self._add_producer(bootstrap)

    def _add_producer(self, bootstrap: str) -> None:
        s = self.settings
        self.members.add(
            Member(
                "producer",
                "producer",
                "producer",
                False,
                _command(
                    [sys.executable, "-m", "devtools.campaign._producer"],
                    bootstrap=bootstrap,
                    topic=STREAM_TOPIC,
                    partitions=str(s.partitions),
                    rate=str(s.rate),
                ),
            )
        )

    def _java_command(self) -> list[str]:
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        from tests.interop.peers import compile_java_peer

        classpath = os.pathsep.join(str(p) for p in compile_java_peer())
        return [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            classpath,
            "PeerConsumer",
        ]

    def _wait_ready(self) -> None:
        """Until a leader writes, every task runs and every partition is consumed."""
        deadline = time.monotonic() + self.settings.ready_timeout_s
        missing = "everything"
        while time.monotonic() < deadline:
            missing = self._not_yet_working()
            if not missing:
                self.log("ready")
                return
            for m in self.members.all:
                if not m.alive:
                    raise CampaignError(
                        f"{m.process_name} exited while starting; see {m.files[-1]} and its .stderr"
                    )
            time.sleep(1.0)
        raise CampaignError(
            f"the workloads did not all work within {self.settings.ready_timeout_s} s: "
            f"{missing}; see {self.run_dir}"
        )

    def _not_yet_working(self) -> str:
        return _not_yet_working(load(self.run_dir), self.settings)

    def _wait_caught_up(self) -> None:
        deadline = time.monotonic() + self.settings.catch_up_s
        behind: dict[str, int] = {}
        while time.monotonic() < deadline:
            history = load(self.run_dir)
            behind = {
                group: _behind(history.produced, processes)
                for group, processes in history.consumer_groups.items()
            }
            if not any(behind.values()):
                self.log("caught_up")
                return
            time.sleep(2.0)
        self.log("not_caught_up", behind=behind)

    def _read_back(self) -> None:
        """Read both topics from the start (committed data only) into ``final/``."""
        from kafka import KafkaConsumer, TopicPartition

        final = self.run_dir / "final"
        final.mkdir(exist_ok=True)
        consumer = KafkaConsumer(
            bootstrap_servers=self.cluster.client_bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            group_id=None,
        )
        try:
            for topic, partitions, name in (
                (ELECTION_TOPIC, 1, "election-log.jsonl"),
                (STREAM_TOPIC, self.settings.partitions, "stream-log.jsonl"),
            ):
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                consumer.assign(tps)
                consumer.seek_to_beginning(*tps)
                end = consumer.end_offsets(tps)
                deadline = time.monotonic() + 120
                with open(final / name, "w") as out:
                    while any(consumer.position(tp) < end[tp] for tp in tps):
                        if time.monotonic() > deadline:
                            raise CampaignError(f"could not read {topic} back to its end")
                        for tp, records in consumer.poll(1000).items():
                            for r in records:
                                out.write(json.dumps(_read_back_event(topic, tp, r)) + "\n")
        finally:
            consumer.close()

    # -- faults ---------------------------------------------------------------------------

    def _inject(self) -> None:
        s = self.settings
        deadline = time.monotonic() + s.duration if s.duration else float("inf")
        limit = s.faults if s.faults is not None else float("inf")
        next_at = time.monotonic()
        while self.faults_started < limit and time.monotonic() < deadline:
            if self._errors:
                return
            fault = self._choose()
            if fault is None:
                time.sleep(0.2)
                continue
            self.faults_started += 1
            thread = threading.Thread(target=self._guarded, args=(fault,), daemon=True)
            self._threads.append(thread)
            thread.start()
            next_at += s.spacing
            time.sleep(max(0.0, next_at - time.monotonic()))

    def _guarded(self, fault: Callable[[], None]) -> None:
        try:
            fault()
        except BaseException as e:
            self._errors.append(e)
            self.log("fault_error", error=repr(e)[:2000])

    def _choose(self) -> Callable[[], None] | None:
        kinds = list(FAULT_WEIGHTS)
        kind = self.rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds])[0]
        with self._lock:
            if kind in BROKER_FAULTS:
                if self._broker_busy:
                    kind = self.rng.choice(["member_kill", "pause_short", "pause_long"])
                else:
                    self._broker_busy = True
                    return self._broker_fault(kind)
            member = self._pick_member()
            if member is None:
                return None
            member.busy = True
            return self._member_fault(kind, member)

    def _pick_member(self) -> Member | None:
        candidates = []
        for group in self.groups:
            members = self.members.of(group)
            # Never more than two members of a group under a fault at once.
            if sum(m.busy for m in members) < 2:
                candidates += [m for m in members if not m.busy and m.alive]
        return self.rng.choice(candidates) if candidates else None

    def _member_fault(self, kind: str, member: Member) -> Callable[[], None]:
        session = self.settings.session_timeout_ms / 1000
        static_848 = member.static and member.group == KIP848_CONSUMERS
        if kind == "member_kill" and static_848:
            # KIP-848 refuses a static member's successor (UNRELEASED_INSTANCE_ID, fatal in
            # every client) until its predecessor left with epoch -2, a clean close (the
            # successor then takes over its assignment and epoch), or its session ended.
            if self.rng.random() < 0.5:
                kind = "member_restart"
                down = self.rng.uniform(0.0, 3.0)
            else:
                down = self.rng.uniform(session + 1.0, session + 4.0)
        elif kind == "member_kill":
            down = self.rng.uniform(0.0, 3.0)
        elif kind == "pause_short":
            down = self.rng.uniform(0.5, session * 0.6)
        else:
            down = self.rng.uniform(session + 1.0, session + 6.0)

        def fault() -> None:
            start = now()
            target = member.process_name
            try:
                if kind in ("member_kill", "member_restart"):
                    if kind == "member_kill":
                        self.members.kill(member)
                    else:
                        self.members.stop([member])
                    time.sleep(down)
                    if self._closing.is_set():
                        return
                    if static_848:
                        self._spawn_until_accepted(member)
                    else:
                        self.members.spawn(member)
                else:
                    self.members.freeze(member)
                    time.sleep(down)
                    self.members.thaw(member)
            finally:
                member.busy = False
            self.log(
                "fault",
                kind=kind,
                target=target,
                static=member.static,
                start=start,
                end=now(),
                down_s=round(down, 3),
            )

        return fault

    def _spawn_until_accepted(self, member: Member, tries: int = 3) -> None:
        """Spawn a static KIP-848 member, and again while the broker refuses it.

        The broker refuses the new process while its predecessor is still in the group (its
        member stops, the process idles), which a coordinator's failover prolongs: the new
        coordinator starts every member's session afresh. The remedy is the operator's:
        stop it, wait a session, start it again.
        """
        session = self.settings.session_timeout_ms / 1000
        for _ in range(tries):
            self.members.spawn(member)
            if not self._refused(member, within=3 * session):
                return
            self.log("refused", process=member.process_name)
            self.members.stop([member])
            time.sleep(session)
            if self._closing.is_set():
                return

    def _refused(self, member: Member, within: float) -> bool:
        """Whether the broker refused ``member``'s process: it says so on stderr; it was
        accepted once it was assigned partitions, or if nothing was said ``within`` s."""
        events = member.files[-1]
        stderr = events.with_suffix(".stderr")
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and not self._closing.is_set():
            if "UNRELEASED_INSTANCE_ID" in stderr.read_text(errors="replace"):
                return True
            if any(e["event"] == "assigned" for e in read_events(events)):
                return False
            time.sleep(0.5)
        return False

    def _broker_fault(self, kind: str) -> Callable[[], None]:
        node = self.rng.choice(self.cluster.node_ids)
        group = self.rng.choice(list(self.groups.values()))
        mode: Mode = self.rng.choice(["blackhole", "delay", "cut"])
        down = self.rng.uniform(0.0, 3.0) if kind != "network" else self.rng.uniform(2.0, 10.0)
        delay = self.rng.uniform(0.05, 0.5)

        def fault() -> None:
            start = now()
            target = f"broker {node}"
            what = kind
            try:
                if kind == "network":
                    what = f"network_{mode}"
                    self.fleet.set(node, mode, delay)
                    time.sleep(down)
                    self.fleet.heal(node)
                else:
                    victim = node
                    if kind == "coordinator_kill":
                        ports = [
                            self.cluster.port_of(n)
                            for n in self.cluster.node_ids
                            if self.cluster.is_running(n)
                        ]
                        found = find_coordinator(ports, group)
                        victim = found if found is not None else node
                        target = f"broker {victim} (coordinator of {group}: {found})"
                    self.cluster.kill_broker(victim)
                    time.sleep(down)
                    if self._closing.is_set():
                        return
                    self.cluster.start_broker(victim)
            finally:
                with self._lock:
                    self._broker_busy = False
            self.log(
                "fault", kind=what, target=target, start=start, end=now(), down_s=round(down, 3)
            )

        return fault


def _member(recipe: str, *options: str) -> list[str]:
    """A ``devtools.member`` process of the campaign: on its clock, stopped by SIGTERM (its
    stdin is /dev/null), with the group settings every member process of a campaign has."""
    return [
        sys.executable,
        "-m",
        "devtools.member",
        f"--recipe={recipe}",
        "--clock=boot",
        "--no-stdin",
        "--heartbeat-interval-ms=500",
        "--retry-backoff-ms=100",
        *options,
    ]


def _peer(recipe: str) -> list[str]:
    """One of our consumer peers: the peers' command line and events (times in epoch ms)."""
    return [
        sys.executable,
        "-m",
        "devtools.member",
        f"--recipe={recipe}",
        "--clock=wall-ms",
        "--no-stdin",
    ]


def _command(base: list[str], **options: str | None) -> Callable[[str], list[str]]:
    """A member's command line: ``base`` and ``--option value`` pairs, plus ``--name``."""
    args = [
        item
        for key, value in options.items()
        if value is not None
        for item in (f"--{key.replace('_', '-')}", value)
    ]
    return lambda process_name: [*base, *args, "--name", process_name]


def _peer_command(base: list[str], **options: str | None) -> Callable[[str], list[str]]:
    """A consumer peer's command line (the peers take ``--client-id``, not ``--name``)."""
    args = [
        item
        for key, value in options.items()
        if value is not None
        for item in (f"--{key.replace('_', '-')}", value)
    ]
    args += ["--heartbeat-interval-ms", "500", "--max-poll-interval-ms", "30000"]
    return lambda process_name: [*base, *args, "--client-id", process_name.replace("#", "-")]


def _read_back_event(topic: str, tp: Any, record: Any) -> dict[str, Any]:
    if topic == ELECTION_TOPIC:
        value = json.loads(record.value)
        return {"event": "record", "offset": record.offset, **value}
    return {
        "event": "record",
        "topic": topic,
        "partition": tp.partition,
        "offset": record.offset,
        "value": record.value.decode(),
    }


def _behind(produced: list[Event], processes: dict[str, list[Event]]) -> int:
    """How many of the ``produced`` records none of ``processes`` (one group) consumed."""
    consumed = {
        (str(t), int(p), o)
        for events in processes.values()
        for e in events
        if e.get("event") == "records"
        for t, p, first, last, _ in e["partitions"]
        for o in range(int(first), int(last) + 1)
    }
    return sum(
        1
        for e in produced
        if (str(e["topic"]), int(e["partition"]), int(e["offset"])) not in consumed
    )


def _not_yet_working(history: History, settings: Settings) -> str:
    """What of the workloads does not work yet ("" when all of it does)."""
    missing = []
    if not any(e["event"] == "wrote" for es in history.election.values() for e in es):
        missing.append("no leader has written")
    units = {e["task"] for es in history.tasks.values() for e in es if e["event"] == "tick"}
    if len(units) < settings.tasks:
        missing.append(f"{settings.tasks - len(units)} tasks have done no work")
    for group in CONSUMER_GROUPS:
        consumed = {
            int(p)
            for es in history.consumer_groups.get(group, {}).values()
            for e in es
            if e.get("event") == "records"
            for _, p, *_ in e["partitions"]
        }
        if len(consumed) < settings.partitions:
            missing.append(
                f"{settings.partitions - len(consumed)} partitions not consumed by {group}"
            )
    if not history.produced:
        missing.append("nothing produced")
    return "; ".join(missing)


__all__ = ["Campaign", "CampaignError", "Settings", "read_events"]
