"""Every recipe over TLS and SASL on a real broker, and a typed error for each way it can fail.

The broker (``KafkaCluster(security=...)``) has an SSL listener, a SASL_SSL listener with
SCRAM-SHA-512 users and the ``StandardAuthorizer`` with no access without an ACL. The
users and their ACLs:

* ``alice``: what docs/security.md lists for every recipe, on the ``sec-`` prefix;
* ``bob``: a valid login and no ACL at all;
* ``carol``: alice's ACLs except WRITE on topics (her election's fenced producer cannot write);
* ``dave``: alice's ACLs on groups and transactional ids, none on topics (the election
  cannot read its stored token).

The broker is always started here from Maven Central's jars (a cluster given by
``KAFKA_BOOTSTRAP_SERVERS`` has no known users or certificates); it fails loudly if it
cannot start.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from kafka.record.memory_records import MemoryRecords

from coordination import errors
from coordination._transport.kafka import _direct_settings
from coordination._transport.link import DirectConnection
from coordination._transport.wakeups import fetch_request
from coordination.testing import NEWEST_KAFKA, BrokerSecurity, KafkaCluster, make_ca
from recipes.election import LeaderElection
from recipes.partitioning import Consumer, TopicPartition
from recipes.tasks import TaskDistribution

from .members import Listing, settled, wait_until
from .task_worker import RunningTasks

pytestmark = pytest.mark.integration

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret", "dave": "d-s"}
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "retry_backoff_ms": 50}
# A failure that retrying cannot fix must be reported well before a caller's timeout: one
# bootstrap attempt (5 s) and the diagnosis of each server (at most 2 s per probe) ...
REPORTED_WITHIN_S = 20.0
WAIT_S = 60.0  # ... while the caller would wait this long.


class Secured:
    def __init__(self, cluster: KafkaCluster, security: BrokerSecurity, root: Path) -> None:
        self.cluster = cluster
        self.security = security
        self.other_ca = make_ca(root / "other-ca", "other-ca", "other-ca-pw")[1]

    def login(self, user: str, password: str | None = None) -> dict[str, Any]:
        """Connection settings of ``user`` on the SASL_SSL listener."""
        return {
            "bootstrap_servers": self.cluster.sasl_ssl_bootstrap_servers,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user,
            "sasl_plain_password": USERS[user] if password is None else password,
            "ssl_cafile": str(self.security.ca_file),
        }

    def admin(self) -> KafkaAdminClient:
        # The PLAINTEXT listener's principal (ANONYMOUS) is a super user: the test's own.
        return KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers)


def _allow(user: str, kind: ResourceType, operation: ACLOperation) -> ACL:
    pattern = ResourcePattern(kind, "sec-", ACLResourcePatternType.PREFIXED)
    return ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, pattern)


def _acls() -> list[ACL]:
    acls = []
    for user in ("alice", "carol", "dave"):
        acls += [
            _allow(user, ResourceType.GROUP, ACLOperation.READ),
            _allow(user, ResourceType.GROUP, ACLOperation.DESCRIBE),
            _allow(user, ResourceType.TRANSACTIONAL_ID, ACLOperation.WRITE),
            _allow(user, ResourceType.TRANSACTIONAL_ID, ACLOperation.DESCRIBE),
        ]
    for user in ("alice", "carol"):
        acls += [
            _allow(user, ResourceType.TOPIC, ACLOperation.READ),
            _allow(user, ResourceType.TOPIC, ACLOperation.DESCRIBE),
        ]
    acls.append(_allow("alice", ResourceType.TOPIC, ACLOperation.WRITE))
    return acls


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    security = BrokerSecurity(root / "certificates", users=USERS)
    with KafkaCluster(brokers=1, version=NEWEST_KAFKA, security=security) as cluster:
        setup = Secured(cluster, security, root)
        admin = setup.admin()
        try:
            created = admin.create_acls(_acls())
            assert not created["failed"], created["failed"]
            admin.create_topics(
                [NewTopic(name, 1, 1) for name in ("sec-tokens", "sec-out", "sec-tasks")]
                + [NewTopic("sec-in", 3, 1), NewTopic("sec-wakeups", 16, 1)]
            )
        finally:
            admin.close()
        yield setup


def group() -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


def election(settings: dict[str, Any], name: str, group_id: str, **kw: Any) -> LeaderElection:
    return LeaderElection(
        group_id, identity=name, token_topic="sec-tokens", **{**FAST, **settings, **kw}
    )


# ----------------------------------------------------------------------- the wake-up channel


def test_without_acls_on_the_wakeup_topic_a_member_warns_once_and_works(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    # alice's ACLs cover the sec- prefix, not the default coordination.wakeups.
    caplog.set_level(logging.WARNING, logger="coordination.wakeups")
    g = group()
    with (
        election(secured.login("alice"), "a", g) as first,
        election(secured.login("alice"), "b", g) as second,
    ):
        leader = first.wait_for_leader(WAIT_S)
        assert second.wait_for_leader(WAIT_S) == leader
        time.sleep(1)
        warnings = [r.getMessage() for r in caplog.records if r.name == "coordination.wakeups"]
        assert len(warnings) == 2, warnings  # one per member, once
        assert all(
            "wake-up channel is off" in w and "TOPIC_AUTHORIZATION_FAILED" in w for w in warnings
        )
        assert all("'coordination.wakeups'" in w for w in warnings)


def test_with_acls_on_its_wakeup_topic_the_channel_works_over_sasl_ssl(secured: Secured) -> None:
    g = group()
    settings = {
        **secured.login("alice"),
        "wakeup_topic": "sec-wakeups",
        "heartbeat_interval_ms": 20_000,
        "session_timeout_ms": 60_000,
        "rebalance_timeout_ms": 60_000,
    }
    first = Listing(g, **settings)
    second = Listing(g, **settings)
    try:
        first.start()
        first.ensure_active_group(timeout=WAIT_S)
        channel: Any = first._engine._wakeups
        wait_until(lambda: channel.stats.working, WAIT_S, "the channel to listen")
        second.start()
        # The first member's next heartbeat is 20 s away: only a wake-up brings it in sooner.
        wait_until(lambda: settled([first, second], 2), 10, "both members in one generation")
        assert first.metrics().wakeups_received >= 1
    finally:
        second.close(timeout=10)
        first.close(timeout=10)


# ----------------------------------------------------------------------- every recipe works


def test_election_over_sasl_ssl_elects_and_its_fenced_producer_writes(secured: Secured) -> None:
    g = group()
    with (
        election(secured.login("alice"), "a", g, transactional_id=f"{g}.leader") as first,
        election(secured.login("alice"), "b", g, transactional_id=f"{g}.leader") as second,
    ):
        leader = first.wait_for_leader(WAIT_S)
        assert second.wait_for_leader(WAIT_S) == leader
        leading = first if leader.identity == "a" else second
        leadership = leading.leadership()
        assert leadership is not None
        producer = leadership.transactional_producer()
        try:
            producer.begin_transaction()
            producer.send("sec-out", key=g.encode(), value=str(leadership.token).encode())
            producer.commit_transaction()
        finally:
            producer.close()
    reader = KafkaConsumer(
        **secured.login("alice"),
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        reader.assign([TopicPartition("sec-out", 0)])
        keys = {r.key for r in reader}
    finally:
        reader.close()
    assert g.encode() in keys


def test_members_over_ssl_talk_to_their_coordinator_over_tls(secured: Secured) -> None:
    # Over SSL (unlike SASL_SSL) the coordinator's connection is this side's own socket.
    settings = {
        "bootstrap_servers": secured.cluster.ssl_bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": str(secured.security.ca_file),
        "wakeup_topic": "sec-wakeups",
    }
    g = group()
    pair = [Listing(g, **settings), Listing(g, **settings)]
    try:
        for m in pair:
            m.start()
        wait_until(lambda: settled(pair, 2), WAIT_S, "two members over SSL")
        for m in pair:
            direct = m._engine._transport._direct  # type: ignore[attr-defined]
            coordinator = [c for name, c in direct.items() if name.startswith("coordinator-")]
            assert len(coordinator) == 1
            assert isinstance(coordinator[0]._sock, ssl.SSLSocket)
        pair[1].close()
        wait_until(lambda: settled(pair[:1], 1), 10, "one member after a LeaveGroup over TLS")
    finally:
        for m in pair:
            m.close()


def test_an_answer_of_many_tls_records_arrives_whole_and_the_next_one_follows(
    secured: Secured,
) -> None:
    # A TLS record holds at most 16 KiB: a 300 KB fetch answer takes many reads, and what
    # a read brings beyond one answer must be kept for the next (the timeline, read from
    # outside the group, can be that large).
    topic = "sec-out"
    values = [bytes([i % 251]) * 3000 for i in range(100)]
    producer = KafkaProducer(bootstrap_servers=secured.cluster.bootstrap_servers)
    try:
        start = producer.send(topic, values[0]).get(30).offset
        for value in values[1:]:
            producer.send(topic, value)
        producer.flush(30)
    finally:
        producer.close()
    host, port = secured.cluster.ssl_bootstrap_servers.split(",")[0].rsplit(":", 1)
    settings = _direct_settings(
        {"security_protocol": "SSL", "ssl_cafile": str(secured.security.ca_file)}
    )
    assert settings is not None and settings.tls is not None
    connection = DirectConnection("tls-test", host, int(port), settings)

    def fetch(offset: int) -> list[bytes]:
        request = fetch_request(topic, 0, offset, max_wait_ms=0)
        answer = connection.exchange(request, 30).responses[0].partitions[0]
        assert answer.error_code == 0
        return [
            r.value for batch in MemoryRecords(answer.records) for r in batch if r.offset >= offset
        ]

    try:
        assert fetch(start) == values  # ~300 KB, in one answer
        socket_used = connection._sock
        assert isinstance(socket_used, ssl.SSLSocket)
        assert fetch(start + 99) == values[99:]  # the next answer, on the same connection
        assert connection._sock is socket_used
    finally:
        connection.close()


def test_tasks_over_sasl_ssl_run_every_task_once(secured: Secured) -> None:
    g = group()
    running = RunningTasks("w1", "w2")

    def worker(name: str) -> TaskDistribution:
        return TaskDistribution(
            g,
            worker_id=name,
            start_task=running.start_task(name),
            stop_task=running.stop_task(name),
            tasks={f"t{i}": 1.0 for i in range(6)},
            stop_timeout_ms=1000,  # a 6 s lease leaves room for margin, stop and a heartbeat
            **{**FAST, **secured.login("alice")},
        )

    with worker("w1") as w1, worker("w2") as w2:
        w1.wait_stable(WAIT_S)
        w2.wait_stable(WAIT_S)

        def spread() -> bool:
            now = running.snapshot()
            a, b = now["w1"], now["w2"]
            return a | b == {f"t{i}" for i in range(6)} and not a & b and bool(a) and bool(b)

        wait_until(spread, WAIT_S, "every task running on exactly one worker")


def test_consumer_over_sasl_ssl_reads_everything_and_commits(secured: Secured) -> None:
    producer = KafkaProducer(bootstrap_servers=secured.cluster.bootstrap_servers)
    marker = uuid.uuid4().hex.encode()
    for p in range(3):
        for i in range(5):
            producer.send("sec-in", key=marker, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()
    g = group()
    seen: set[bytes] = set()
    with Consumer(
        g, topics=["sec-in"], auto_offset_reset="earliest", **{**FAST, **secured.login("alice")}
    ) as consumer:

        def read() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                seen.update(r.value for r in records if r.key == marker)
            return len(seen) == 15

        wait_until(read, WAIT_S, "all 15 records read over SASL_SSL")
        consumer.commit()
        committed = consumer.committed([TopicPartition("sec-in", p) for p in range(3)])
    assert all(offset is not None and offset > 0 for offset in committed.values())


def test_the_describe_command_logs_in_from_a_kafka_command_config_file(
    secured: Secured, tmp_path: Path
) -> None:
    # The properties file Kafka's own tools take (kafka-consumer-groups.sh --command-config).
    def describe(password: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / "client.properties"
        config.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="alice" password="{password}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={secured.security.ca_file}\n"
        )
        return subprocess.run(
            [sys.executable, "-m", "coordination", "describe", group(), "--command-config",
             str(config), "--bootstrap-servers", secured.cluster.sasl_ssl_bootstrap_servers],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    # Logged in and allowed to describe: the group (a new id) does not exist.
    answered = describe(USERS["alice"])
    assert answered.returncode == 3 and "does not exist" in answered.stderr, answered.stderr
    refused = describe("not-alices")
    assert refused.returncode == 1 and "authentication failed" in refused.stderr, refused.stderr
    assert "not-alices" not in refused.stderr


# ---------------------------------------------------------------- typed errors, in bounded time


def _fails_fast(settings: dict[str, Any]) -> errors.CoordinationError:
    """Start an election with ``settings``; the error its wait raises, soon."""
    started = time.monotonic()
    member = election(settings, "x", group())
    try:
        member.start()
        with pytest.raises(errors.CoordinationError) as raised:
            member.wait_for_leader(WAIT_S)
    finally:
        member.close()
    elapsed = time.monotonic() - started
    assert elapsed < REPORTED_WITHIN_S, f"took {elapsed:.1f}s to report {raised.value!r}"
    return raised.value


def test_a_wrong_password_is_an_authentication_error(secured: Secured) -> None:
    error = _fails_fast(secured.login("alice", password="not-alices"))
    assert isinstance(error, errors.AuthenticationFailedError)
    assert "authentication failed" in str(error) and "invalid credentials" in str(error)


def test_an_unknown_user_is_an_authentication_error(secured: Secured) -> None:
    settings = {**secured.login("alice"), "sasl_plain_username": "mallory"}
    assert isinstance(_fails_fast(settings), errors.AuthenticationFailedError)


def test_an_untrusted_certificate_authority_is_a_tls_error(secured: Secured) -> None:
    settings = {**secured.login("alice"), "ssl_cafile": str(secured.other_ca)}
    error = _fails_fast(settings)
    assert isinstance(error, errors.TlsError)
    assert "certificate not accepted" in str(error) and "ssl_cafile" in str(error)


def test_a_host_the_certificate_does_not_name_is_a_tls_error(secured: Secured) -> None:
    # The broker's certificate names 127.0.0.1 only.
    port = secured.cluster.ssl_bootstrap_servers.rsplit(":", 1)[1]
    settings = {
        "bootstrap_servers": f"localhost:{port}",
        "security_protocol": "SSL",
        "ssl_cafile": str(secured.security.ca_file),
    }
    error = _fails_fast(settings)
    assert isinstance(error, errors.TlsError)
    assert "Hostname mismatch" in str(error) and "subject alternative names" in str(error)


def test_tls_to_a_plaintext_port_is_a_tls_error(secured: Secured) -> None:
    settings = {
        "bootstrap_servers": secured.cluster.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": str(secured.security.ca_file),
    }
    error = _fails_fast(settings)
    assert isinstance(error, errors.TlsError)
    assert "PLAINTEXT listener" in str(error)


def test_plaintext_to_a_tls_port_is_a_tls_error(secured: Secured) -> None:
    error = _fails_fast({"bootstrap_servers": secured.cluster.ssl_bootstrap_servers})
    assert isinstance(error, errors.TlsError)
    assert "TLS listener" in str(error) and "security_protocol" in str(error)


# ------------------------------------------------------------------------------ authorization


def test_no_read_on_the_group_is_a_group_authorization_error(secured: Secured) -> None:
    started = time.monotonic()
    with (
        Listing(group(), **secured.login("bob")) as member,
        pytest.raises(errors.GroupAuthorizationError) as raised,
    ):
        member.ensure_active_group(timeout=WAIT_S)
    assert time.monotonic() - started < REPORTED_WITHIN_S
    assert "Grant the principal READ on the group" in str(raised.value)


def test_no_describe_on_the_token_topic_stops_the_election_with_a_topic_error(
    secured: Secured,
) -> None:
    error = _fails_fast(secured.login("dave"))
    assert isinstance(error, errors.TopicAuthorizationError)
    assert "sec-tokens" in str(error)


def test_no_write_on_a_topic_fails_the_fenced_producers_write_clearly(secured: Secured) -> None:
    g = group()
    with election(secured.login("carol"), "c", g, transactional_id=f"{g}.leader") as member:
        member.wait_for_leader(WAIT_S)
        leadership = member.leadership()
        assert leadership is not None
        producer = leadership.transactional_producer(max_block_ms=10_000)
        try:
            producer.begin_transaction()
            started = time.monotonic()
            with pytest.raises(Exception) as raised:
                producer.send("sec-out", value=b"x").get(timeout=WAIT_S)
            assert time.monotonic() - started < REPORTED_WITHIN_S
            assert "TopicAuthorizationFailed" in type(raised.value).__name__
            assert "sec-out" in str(raised.value)
        finally:
            producer.close(timeout=5)


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_pipeline_over_sasl_ssl_publishes_exact_results(secured: Secured, tmp_path: Path) -> None:
    # Both sides log in as alice over SASL_SSL with SCRAM: the group side with the settings
    # given, Spark's Kafka source with those the worker derives from them (a JAAS login and
    # the PEM trust store; recipes/pipeline/_kafka_options.py). Nothing else is configured.
    import threading

    from recipes.pipeline import PipelineOutput, PipelineWorker, read_results, spark_session
    from recipes.pipeline._generator import produce

    run = uuid.uuid4().hex[:8]
    topic, window_ms = f"sec-pipe-{run}", 60_000
    admin = secured.admin()
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    tally = produce(
        secured.cluster.bootstrap_servers, topic, partitions=2, events=400, rate=0,
        window_ms=window_ms,
    )  # fmt: skip
    worker = PipelineWorker(
        f"sec-pipe-{run}",
        topic=topic,
        output=tmp_path / "out",
        window_ms=window_ms,
        max_batch_delay_ms=200,
        **secured.login("alice"),
    )
    assert worker.kafka_options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    stop = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            worker.run(stop)
        except BaseException as e:
            failed.append(e)

    worker.start()
    thread = threading.Thread(target=work, name="secured-pipeline")
    thread.start()
    try:
        output = PipelineOutput(tmp_path / "out")
        wanted = {(topic, 0): (0, 200), (topic, 1): (0, 200)}
        deadline = time.monotonic() + 240
        while True:
            assert not failed, failed
            try:
                output.check_published(wanted)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        stop.set()
        thread.join(120)
        worker.close()
    assert not failed, failed
    spark = spark_session("local[1]", app_name="secured-pipeline-verify")
    assert read_results(spark, PipelineOutput(tmp_path / "out")) == tally.results


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_pipeline_with_a_wrong_password_stops_at_start_with_an_authentication_error(
    secured: Secured, tmp_path: Path
) -> None:
    from recipes.pipeline import PipelineWorker

    worker = PipelineWorker(
        f"sec-pipe-{uuid.uuid4().hex[:8]}",
        topic="sec-in",
        output=tmp_path / "out",
        **secured.login("alice", "wrong"),
    )
    try:
        with pytest.raises(errors.AuthenticationFailedError, match="authentication failed"):
            worker.start()
    finally:
        worker.close()


def test_a_lean_consumer_reads_over_ssl(secured: Secured) -> None:
    producer = KafkaProducer(bootstrap_servers=secured.cluster.bootstrap_servers)
    marker = uuid.uuid4().hex.encode()
    for p in range(3):
        for i in range(5):
            producer.send("sec-in", key=marker, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()
    settings: dict[str, Any] = {
        "bootstrap_servers": secured.cluster.ssl_bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": str(secured.security.ca_file),
    }
    seen: set[bytes] = set()
    with Consumer(
        group(), topics=["sec-in"], auto_offset_reset="earliest", fetcher="lean",
        **{**FAST, **settings},
    ) as consumer:  # fmt: skip

        def read() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                seen.update(r.value for r in records if r.key == marker)
            return len(seen) == 15

        wait_until(read, WAIT_S, "all 15 records read over SSL by the lean fetcher")
        links = consumer._fetcher._engine._links.values()  # type: ignore[union-attr]
        assert links and all(isinstance(link._sock, ssl.SSLSocket) for link in links)
