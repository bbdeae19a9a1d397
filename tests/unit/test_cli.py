"""The ``coordination`` command's inspection commands, on a scripted transport: a group that
does not exist, a timeline with hostile records, settings from a ``--command-config`` file
(Kafka's client properties) instead of a password on the command line."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coordination import GroupInspector, RebalanceRecord, _inspection, rebalance_timeline
from coordination.__main__ import NO_SUCH_GROUP, PASSWORD_VARIABLE, main
from coordination._protocol import consumer_group as cg
from coordination._protocol import messages as m
from coordination._protocol import share_group as sg
from coordination._transport import kafka, wakeups
from coordination.errors import BrokerError, ConfigurationError
from coordination.testing import ScriptedTransport

FOUND = m.FindCoordinatorResponse(error_code=0, node_id=1, host="h", port=9092)
# What Kafka answers DescribeGroups (v0-v5) for a group id it does not know
# (GroupMetadataManager.describeGroups: a DescribedGroup with only the state Dead).
UNKNOWN_GROUP = m.DescribeGroupResponse(error_code=0, state="Dead")
STABLE = m.DescribeGroupResponse(
    error_code=0,
    state="Stable",
    protocol_type="listing",
    protocol="v1",
    members=(m.DescribedMember("m-1", None, "client", "/10.0.0.1", b"v1", b"{}"),),
)
GOOD = RebalanceRecord(
    started_at=1_760_000_000.0,
    reason="the member is joining the group for the first time",
    duration_s=0.041,
    generation=1,
    member_id="m-1",
    is_leader=True,
    failed_attempts=0,
    moved="leads with token 7",
)


class Cluster:
    """What the command's connections would reach: scripted answers, and what it was given."""

    def __init__(self) -> None:
        self.transport = ScriptedTransport()
        self.connections: list[dict[str, Any]] = []
        self.client_ids: list[str] = []
        self.timeline: list[bytes] = []

    def describes(self, *answers: m.DescribeGroupResponse) -> None:
        for answer in answers:
            self.transport.prepare(FOUND)
            self.transport.prepare(answer)
            missing = answer.error_code == 69 or (
                answer.state == "Dead" and not answer.members and not answer.protocol_type
            )
            if missing:
                # Not a classic group: the command asks whether it is a KIP-848 one, then a
                # share group, and a Kafka 4 broker says it is no group at all.
                self.transport.prepare(
                    cg.ConsumerGroupDescribeResponse(
                        (cg.DescribedConsumerGroup(error_code=69, group_id="-"),)
                    )
                )
                self.transport.prepare(
                    sg.ShareGroupDescribeResponse(
                        (sg.DescribedShareGroup(error_code=69, group_id="-"),)
                    )
                )


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    scripted = Cluster()

    def transport(**kwargs: Any) -> ScriptedTransport:
        scripted.connections.append(kwargs["connection"])
        scripted.client_ids.append(kwargs["client_id"])
        scripted.transport.closed = False
        return scripted.transport

    def read_timeline(self: wakeups.KafkaWakeups, since_ms: int) -> list[bytes]:
        return scripted.timeline

    monkeypatch.setattr(kafka, "KafkaTransport", transport)
    monkeypatch.setattr(wakeups.KafkaWakeups, "read_timeline", read_timeline)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    yield scripted


# -- a group that does not exist ---------------------------------------------------------


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_describing_a_group_that_does_not_exist_says_so_and_fails(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], json_flag: list[str]
) -> None:
    cluster.describes(UNKNOWN_GROUP)
    assert main(["describe", "ordres-leader", *json_flag]) == NO_SUCH_GROUP != 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "error: group 'ordres-leader' does not exist" in err


def test_a_group_from_version_6_on_is_missing_by_its_error_code(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.describes(m.DescribeGroupResponse(error_code=69))  # GROUP_ID_NOT_FOUND
    assert main(["describe", "gone"]) == NO_SUCH_GROUP
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "answer",
    [
        STABLE,
        m.DescribeGroupResponse(error_code=0, state="Empty", protocol_type="consumer"),
        m.DescribeGroupResponse(error_code=0, state="Empty"),  # offsets committed, no members
        m.DescribeGroupResponse(error_code=0, state="Dead", protocol_type="consumer"),
    ],
    ids=["stable", "empty", "offsets-only", "being-deleted"],
)
def test_a_group_that_exists_is_shown(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], answer: m.DescribeGroupResponse
) -> None:
    cluster.describes(answer)
    assert main(["describe", "g"]) == 0
    assert capsys.readouterr().out.startswith(f"group g: {answer.state}, ")


def test_a_coordinator_not_ready_yet_is_asked_again(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh cluster answers COORDINATOR_NOT_AVAILABLE until it has created
    # __consumer_offsets; a group that just moved is still loading.
    cluster.transport.prepare(m.FindCoordinatorResponse(error_code=15))
    cluster.transport.prepare(FOUND)
    cluster.transport.prepare(m.DescribeGroupResponse(error_code=14))
    cluster.describes(STABLE)
    assert main(["describe", "g"]) == 0
    assert capsys.readouterr().out.startswith("group g: Stable, ")
    assert cluster.transport.pending() == 0


def test_a_refusal_is_not_asked_again(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.describes(m.DescribeGroupResponse(error_code=30))  # GROUP_AUTHORIZATION_FAILED
    assert main(["describe", "g"]) == 1
    assert "GROUP_AUTHORIZATION_FAILED" in capsys.readouterr().err
    assert len(cluster.transport.requests(m.DescribeGroupRequest)) == 1


# -- share groups (KIP-932) ---------------------------------------------------------------

TOPIC_ID = uuid.UUID(int=7)
SHARE_GROUP = sg.DescribedShareGroup(
    error_code=0,
    group_id="jobs",
    group_state="Stable",
    group_epoch=4,
    assignment_epoch=4,
    assignor_name="simple",
    members=(
        # Out of order, and both fetching from partition 0: share groups share partitions.
        sg.DescribedShareGroupMember(
            member_id="m-b",
            rack_id=None,
            member_epoch=3,
            client_id="worker-2",
            client_host="/10.0.0.2",
            subscribed_topic_names=("jobs",),
            assignment=(cg.DescribedTopicPartitions(TOPIC_ID, "jobs", (0,)),),
        ),
        sg.DescribedShareGroupMember(
            member_id="m-a",
            rack_id="r1",
            member_epoch=4,
            client_id="worker-1",
            client_host="/10.0.0.1",
            subscribed_topic_names=("jobs",),
            assignment=(cg.DescribedTopicPartitions(TOPIC_ID, "jobs", (1, 0)),),
        ),
    ),
)


OFFSETS = sg.DescribedShareGroupOffsets(
    "jobs",
    (
        sg.ShareGroupOffsetsTopic(
            "jobs",
            TOPIC_ID,
            (
                sg.SharePartitionOffset(1, start_offset=40, leader_epoch=0, lag=2),
                sg.SharePartitionOffset(0, start_offset=17, leader_epoch=0, lag=0),
                sg.SharePartitionOffset(2, -1, -1, error_code=3, error_message="gone"),
            ),
        ),
    ),
)
# What the transport makes up when the broker offers no version of an API (Kafka < 4.1, or
# share.version off; or no DescribeShareGroupOffsets v1): UNSUPPORTED_VERSION.
UNOFFERED = sg.DescribedShareGroupOffsets("jobs", error_code=35, error_message="not offered")


def describes_share_group(
    cluster: Cluster,
    group: sg.DescribedShareGroup,
    offsets: sg.DescribedShareGroupOffsets | None = OFFSETS,
) -> None:
    """Not a classic group, not a KIP-848 one: a share group (``offsets`` None: no
    DescribeShareGroupOffsets is expected)."""
    cluster.transport.prepare(FOUND)
    cluster.transport.prepare(m.DescribeGroupResponse(error_code=69))
    cluster.transport.prepare(
        cg.ConsumerGroupDescribeResponse((cg.DescribedConsumerGroup(error_code=69, group_id="-"),))
    )
    cluster.transport.prepare(sg.ShareGroupDescribeResponse((group,)))
    if offsets is not None:
        cluster.transport.prepare(sg.DescribeShareGroupOffsetsResponse((offsets,)))


def test_a_share_group_is_described_with_its_members_and_who_shares_each_partition(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    describes_share_group(cluster, SHARE_GROUP)
    assert main(["describe", "jobs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("group jobs: Stable, protocol type 'share', protocol 'simple', 2 member(s)")
    assert "  sharing: {'jobs-0': ['m-a', 'm-b'], 'jobs-1': ['m-a']}" in out
    assert out[4] == (
        "  share_partitions: {'jobs-0': {'start_offset': 17, 'lag': 0}, "
        "'jobs-1': {'start_offset': 40, 'lag': 2}, "
        "'jobs-2': {'error': 'UNKNOWN_TOPIC_OR_PARTITION: gone'}}"
    )
    first = out.index("- m-a worker-1@/10.0.0.1")
    assert out[first + 1 : first + 5] == [
        "    member_epoch: 4",
        "    assigned: [['jobs', 0], ['jobs', 1]]",
        "    subscribed_topics: ['jobs']",
        "    rack: r1",
    ]
    assert "- m-b worker-2@/10.0.0.2" in out
    (asked,) = cluster.transport.requests(sg.ShareGroupDescribeRequest)
    assert asked.group_ids == ("jobs",)
    (state,) = cluster.transport.requests(sg.DescribeShareGroupOffsetsRequest)
    assert state.groups == (sg.ShareGroupOffsetsRequestGroup("jobs", None),)  # every partition
    assert cluster.transport.pending() == 0


def test_a_share_group_as_json_names_its_type(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    describes_share_group(cluster, SHARE_GROUP)
    assert main(["describe", "jobs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["group_type"], out["protocol_type"], out["protocol"]) == (
        "share",
        "share",
        "simple",
    )
    assert out["summary"] == {
        "group_epoch": 4,
        "assignment_epoch": 4,
        "sharing": {"jobs-0": ["m-a", "m-b"], "jobs-1": ["m-a"]},
        "share_partitions": {
            "jobs-0": {"start_offset": 17, "lag": 0},
            "jobs-1": {"start_offset": 40, "lag": 2},
            "jobs-2": {"error": "UNKNOWN_TOPIC_OR_PARTITION: gone"},
        },
    }
    assert [x["member_id"] for x in out["members"]] == ["m-a", "m-b"]
    assert out["members"][1]["decoded"] == {
        "member_epoch": 3,
        "assigned": [["jobs", 0]],
        "subscribed_topics": ["jobs"],
        "rack": None,
    }


def test_an_empty_share_group_exists(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    describes_share_group(
        cluster, sg.DescribedShareGroup(error_code=0, group_id="jobs", group_state="Empty")
    )
    assert main(["describe", "jobs"]) == 0
    assert capsys.readouterr().out.startswith("group jobs: Empty, protocol type 'share'")


def test_a_broker_without_the_share_partition_state_still_describes_the_group(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    describes_share_group(cluster, SHARE_GROUP, UNOFFERED)
    assert main(["describe", "jobs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "share_partitions" not in out["summary"]
    assert len(out["members"]) == 2


def test_a_coordinator_not_ready_for_the_share_partition_state_is_asked_again(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    describes_share_group(
        cluster, SHARE_GROUP, sg.DescribedShareGroupOffsets("jobs", error_code=14)
    )
    describes_share_group(cluster, SHARE_GROUP)
    assert main(["describe", "jobs"]) == 0
    assert "share_partitions" in capsys.readouterr().out
    assert cluster.transport.pending() == 0


def test_a_broker_without_share_groups_describes_no_such_group(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # What the transport makes up when the broker offers no ShareGroupDescribe (Kafka < 4.1,
    # or share.version off): UNSUPPORTED_VERSION, as Kafka's clients answer it themselves.
    describes_share_group(
        cluster,
        sg.DescribedShareGroup(error_code=35, group_id="jobs", error_message="none"),
        offsets=None,
    )
    assert main(["describe", "jobs"]) == NO_SUCH_GROUP
    assert "does not exist" in capsys.readouterr().err


def test_a_share_group_refusal_is_named(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    describes_share_group(
        cluster, sg.DescribedShareGroup(error_code=30, group_id="jobs"), offsets=None
    )
    assert main(["describe", "jobs"]) == 1
    err = capsys.readouterr().err
    assert "GROUP_AUTHORIZATION_FAILED" in err
    assert "ShareGroupDescribe" in err


def test_a_share_group_start_offset_is_altered_and_each_partition_outcome_returned(
    cluster: Cluster,
) -> None:
    cluster.transport.prepare(FOUND)
    cluster.transport.prepare(
        sg.AlterShareGroupOffsetsResponse(
            0,
            responses=(
                sg.AlteredShareGroupOffsetsTopic(
                    "jobs", TOPIC_ID, (sg.AlteredSharePartition(0), sg.AlteredSharePartition(1, 3))
                ),
            ),
        )
    )
    with GroupInspector(bootstrap_servers="localhost:9092") as inspector:
        outcome = inspector.alter_share_group_offsets("jobs", {("jobs", 1): 0, ("jobs", 0): 17})
    assert outcome[("jobs", 0)] is None
    refused = outcome[("jobs", 1)]
    assert refused is not None and refused.error_name == "UNKNOWN_TOPIC_OR_PARTITION"
    (sent,) = cluster.transport.requests(sg.AlterShareGroupOffsetsRequest)
    assert sent == sg.AlterShareGroupOffsetsRequest("jobs", (("jobs", ((0, 17), (1, 0))),))


def test_altering_a_share_group_with_members_is_refused(cluster: Cluster) -> None:
    cluster.transport.prepare(FOUND)
    cluster.transport.prepare(sg.AlterShareGroupOffsetsResponse(68, "the group has members"))
    with (
        GroupInspector(bootstrap_servers="localhost:9092") as inspector,
        pytest.raises(BrokerError, match="NON_EMPTY_GROUP"),
    ):
        inspector.alter_share_group_offsets("jobs", {("jobs", 0): 0})


@pytest.mark.parametrize("offsets", [{}, {("jobs", 0): -1}, {("jobs", -1): 0}])
def test_altering_refuses_offsets_that_name_nothing_or_are_negative(
    cluster: Cluster, offsets: dict[tuple[str, int], int]
) -> None:
    with (
        GroupInspector(bootstrap_servers="localhost:9092") as inspector,
        pytest.raises(ConfigurationError, match="offsets"),
    ):
        inspector.alter_share_group_offsets("jobs", offsets)
    assert cluster.transport.sent == []


def test_groups_lists_share_groups_with_their_type(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # ListGroups v5 (Kafka 3.8+) names each group's type; no types filter lists every type.
    listed = [
        SimpleNamespace(
            group_id="jobs", protocol_type="share", group_state="Stable", group_type="share"
        ),
        SimpleNamespace(
            group_id="orders", protocol_type="consumer", group_state="Empty", group_type="classic"
        ),
    ]
    asked: list[Any] = []

    def send(admin: Any, request: Any, node: Any) -> Any:
        asked.append(request)
        if type(request).__name__.startswith("Metadata"):
            return SimpleNamespace(brokers=[SimpleNamespace(node_id=1, host="h", port=9092)])
        return SimpleNamespace(error_code=0, groups=listed)

    monkeypatch.setattr(_inspection._Admin, "_send", send)
    monkeypatch.setattr(ScriptedTransport, "dedicated_node", lambda *a: 1, raising=False)
    assert main(["groups", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == {
        "group_id": "jobs",
        "protocol_type": "share",
        "state": "Stable",
        "group_type": "share",
    }
    assert asked[1].types_filter == []  # share groups too, not only consumer groups
    assert main(["groups"]) == 0
    assert re.search(r"^jobs +share +Stable +share$", capsys.readouterr().out, re.MULTILINE)


# -- the timeline: other parties' records ------------------------------------------------


def _record(**changes: Any) -> bytes:
    return json.dumps({**asdict(GOOD), **changes}).encode()


HOSTILE_TIMELINE = [
    _record(started_at="yesterday"),  # was: TypeError from the sort
    _record(started_at=1e300),  # was: OverflowError from time.localtime
    _record(duration_s=float("nan")),  # json.dumps writes NaN, json.loads reads it
    _record(generation=True),
    _record(member_id="\ud800"),  # a lone surrogate: no terminal can print it
    b"not json",
    b"[1, 2]",
]


def test_a_timeline_with_hostile_records_shows_the_others_and_counts_the_skipped(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    later = asdict(GOOD) | {"started_at": GOOD.started_at + 5, "generation": 2}
    cluster.timeline = [json.dumps(later).encode(), *HOSTILE_TIMELINE, _record()]
    cluster.describes(STABLE)
    with caplog.at_level(logging.WARNING, "coordination.groups"):
        assert main(["describe", "g", "--timeline"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    shown = out[out.index("rebalances recorded") :].splitlines()
    assert shown[0] == "rebalances recorded in the last 60 min: 2"
    assert [line.split(" gen ")[1][:1] for line in shown[1:]] == ["1", "2"]  # oldest first
    assert "leads with token 7" in shown[1]
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "coordination.groups"]
    assert "skipped 7 unreadable timeline record(s) of 9" in warning
    assert "started_at is not a number" in warning


def test_the_timeline_as_json_holds_only_the_readable_records(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.timeline = [*HOSTILE_TIMELINE, _record()]
    cluster.describes(STABLE)
    assert main(["describe", "g", "--timeline", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timeline"] == [asdict(GOOD)]


@pytest.mark.parametrize("minutes", ["nan", "inf", "-1", "1e300", "soon"])
def test_a_timeline_span_that_is_not_a_number_of_minutes_is_a_usage_error(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], minutes: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["describe", "g", "--timeline", minutes])
    assert stopped.value.code == 2
    assert "is not a number of minutes" in capsys.readouterr().err


def test_what_others_wrote_cannot_drive_the_terminal(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    member = m.DescribedMember("m-\x1b]0;owned\x07", None, "c\x1b[2J", "/h", b"", b"")
    cluster.describes(
        m.DescribeGroupResponse(error_code=0, state="Stable", protocol_type="x", members=(member,))
    )
    cluster.timeline = [_record(reason="\x1b[31mred\r\nfake line")]
    assert main(["describe", "g", "--timeline"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "m-\\x1b]0;owned\\x07" in out and "\\x1b[31mred\\r\\nfake line" in out


# -- settings: --command-config, the password flag ----------------------------------------


def _properties(tmp_path: Path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return str(path)


def test_a_command_config_file_gives_the_security_settings(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    config = _properties(
        tmp_path,
        "# as for kafka-consumer-groups.sh --command-config\n"
        "bootstrap.servers=kafka-1:9093,kafka-2:9093\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="p\\\\\\"w d=;";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
        "ssl.endpoint.identification.algorithm=\n",
    )
    cluster.describes(STABLE)
    assert main(["describe", "g", "--command-config", config]) == 0
    assert cluster.connections == [
        {
            "bootstrap_servers": "kafka-1:9093,kafka-2:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": 'p"w d=;',
            "ssl_cafile": str(ca),
            "ssl_check_hostname": False,
        }
    ]
    assert capsys.readouterr().err == ""


def test_a_pem_keystore_gives_the_client_certificate_and_key(
    cluster: Cluster, tmp_path: Path
) -> None:
    pem = "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"
    (tmp_path / "client.pem").write_text(pem)  # Kafka's PEM keystore: key and chain in one
    config = _properties(
        tmp_path,
        f"security.protocol=SSL\nssl.keystore.location={tmp_path / 'client.pem'}\n"
        "ssl.key.password=k\\u00e9y\nssl.endpoint.identification.algorithm=https\n"
        "client.id=ops-console\nrequest.timeout.ms=5000\n",
    )
    cluster.describes(STABLE)
    assert main(["describe", "g", "--command-config", config]) == 0
    assert cluster.client_ids == ["ops-console"]
    assert cluster.connections == [{
        "bootstrap_servers": "localhost:9092",
        "security_protocol": "SSL",
        "ssl_certfile": str(tmp_path / "client.pem"),
        "ssl_keyfile": str(tmp_path / "client.pem"),
        "ssl_password": "k\u00e9y",
        "ssl_check_hostname": True,
    }]
    (sent,) = [s for s in cluster.transport.sent if isinstance(s.request, m.FindCoordinatorRequest)]
    assert sent.timeout_s == 5.0


def test_flags_override_the_file_and_a_plain_login_works(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = _properties(
        tmp_path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        "username=bob password=secret;\n",
    )
    cluster.describes(STABLE)
    argv = ["describe", "g", "--command-config", config, "--bootstrap-servers", "k:9092"]
    assert main([*argv, "--sasl-plain-username", "carol"]) == 0
    (connection,) = cluster.connections
    assert connection["bootstrap_servers"] == "k:9092"
    assert (connection["sasl_plain_username"], connection["sasl_plain_password"]) == (
        "carol",
        "secret",
    )


def test_the_password_flag_still_works_and_warns_why_not(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.describes(STABLE)
    argv = ["describe", "g", "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN"]
    assert main([*argv, "--sasl-plain-username", "u", "--sasl-plain-password", "pw"]) == 0
    assert cluster.connections[0]["sasl_plain_password"] == "pw"
    err = capsys.readouterr().err
    assert "--sasl-plain-password is deprecated" in err and "shell history" in err
    assert "--command-config" in err and PASSWORD_VARIABLE in err


def test_the_password_can_come_from_the_environment(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_VARIABLE, "from-env")
    cluster.describes(STABLE)
    argv = ["describe", "g", "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN"]
    assert main([*argv, "--sasl-plain-username", "u"]) == 0
    assert cluster.connections[0]["sasl_plain_password"] == "from-env"
    assert capsys.readouterr().err == ""


JAAS_PLAIN = (
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="u" password="hunter2";\n'
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sasl.login.class=x\n", "unknown or unsupported key 'sasl.login.class'"),
        ("security.protocol=SSL\nbatch.size=1\n", "unknown or unsupported key 'batch.size'"),
        ("=SSL\n", "line 1: no key before the value"),
        ("client.id=\\u12\n", r"line 1: malformed \\uXXXX escape"),
        ("request.timeout.ms=30s\n", "request.timeout.ms must be an integer"),
        ("sasl.mechanism=GSSAPI\n", "sasl.mechanism 'GSSAPI' is not supported"),
        (JAAS_PLAIN, "sasl.jaas.config needs sasl.mechanism"),
        (
            "sasl.mechanism=SCRAM-SHA-256\n" + JAAS_PLAIN,
            "PlainLoginModule does not fit sasl.mechanism SCRAM-SHA-256",
        ),
        (
            "sasl.mechanism=PLAIN\nsasl.jaas.config=com.sun.security.auth.module."
            "Krb5LoginModule required useKeyTab=true;\n",
            "login module 'com.sun.security.auth.module.Krb5LoginModule' is not supported",
        ),
        (
            "sasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            'PlainLoginModule required username="u";\n',
            "sasl.jaas.config has no password",
        ),
        (
            "sasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            'PlainLoginModule required username="u" password="hunter2"\n',
            "ended by ';'",
        ),
        ("sasl.mechanism=PLAIN\nsasl.jaas.config=hunter2\n", "must read 'LoginModuleClass"),
        (
            "ssl.truststore.location=/etc/kafka/truststore.jks\nssl.truststore.type=JKS\n",
            "ssl.truststore.type JKS is not supported here",
        ),
        ("ssl.keystore.location=/nonexistent.jks\n", "ssl.keystore.location '/nonexistent.jks'"),
        ("ssl.endpoint.identification.algorithm=ldaps\n", "must be https or empty"),
        ("security.protocol=SASL_TLS\n", "security_protocol must be one of"),
    ],
)
def test_a_bad_command_config_is_named_without_a_traceback(
    cluster: Cluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    config = _properties(tmp_path, text)
    assert main(["describe", "g", "--command-config", config]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(message, err), err
    assert "hunter2" not in err  # the password is never echoed
    assert cluster.transport.sent == []  # nothing was sent with settings that are wrong


def test_a_command_config_that_cannot_be_read_is_named(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.properties")
    assert main(["groups", "--command-config", missing]) == 1
    assert f"error: --command-config {missing!r} cannot be read" in capsys.readouterr().err
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"security.protocol=\xff\xfe\n")
    assert main(["groups", "--command-config", str(binary)]) == 1
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("since_s", [float("nan"), float("inf"), -1.0, True, "3600"])
def test_the_timeline_api_refuses_a_span_that_is_not_finite_seconds(
    cluster: Cluster, since_s: Any
) -> None:
    with pytest.raises(ConfigurationError, match="since_s must be a"):
        rebalance_timeline("g", since_s=since_s, bootstrap_servers="localhost:9092")
    assert cluster.connections == []  # refused before connecting
